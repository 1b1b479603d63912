// Per-sample label record (MODEL_SPEC §3.1). All coordinates are in the letterbox frame, in
// pixels of the model input (x right, y down; default 512x256). Fixed size so it can be stored
// in shards and copied to the device as-is.
#pragma once
#include <cstdint>

namespace data {

constexpr int kMaxFakeGaps = 4;

struct Label {
    float gap_x = 0, gap_y = 0;        // true gap centre
    float slider_x = 0, slider_y = 0;  // slider piece centre
    float angle_rad = 0;               // gap rotation (delta_theta), radians; 0 = none
    int32_t num_fakes = 0;             // confusing fake gaps, 0..kMaxFakeGaps
    float fake_x[kMaxFakeGaps] = {0, 0, 0, 0};
    float fake_y[kMaxFakeGaps] = {0, 0, 0, 0};
    float rect_x0 = 0, rect_y0 = 0;  // valid (non-padding) rectangle [x0,x1) x [y0,y1)
    float rect_x1 = 0, rect_y1 = 0;
};

static_assert(sizeof(Label) == 4 * (5 + 1 + 2 * kMaxFakeGaps + 4), "Label must stay a packed POD record");

}  // namespace data
