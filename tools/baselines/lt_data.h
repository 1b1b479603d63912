// The LibTorch baseline's data: compact shards (docs/FORMAT.md, version 1) or synthetic samples
// on the host, one batch of them as device tensors, and the benchmark's preprocessing (lt_data.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lt_common.h"

namespace ltb {

struct Label {  // data::Label, 72 bytes
    float gap_x, gap_y, slider_x, slider_y, angle_rad;
    int32_t num_fakes;
    float fake_x[4], fake_y[4];
    float rect_x0, rect_y0, rect_x1, rect_y1;
};
static_assert(sizeof(Label) == 72, "Label must be the 72-byte record");

struct HostData {
    int64_t h = 0, w = 0, c = 0;
    std::vector<uint8_t> pixels;  // n * h * w * c
    std::vector<Label> labels;
};

struct Batch {
    Tensor pixels;  // (N, H, W, C) uint8
    Tensor gap, slider, angle, fakes, num_fakes, rect;
};

// The first n samples of the shards in dir (sorted by path; wrapping is the caller's), checked
// against the version-1 header; the record CRCs are not checked (tools/baselines/shards.py does).
HostData read_shards(const std::string& dir, int64_t n);
// n synthetic samples of h x w x c pixels with labels inside the image, from seed.
HostData synthetic(int64_t n, int64_t h, int64_t w, int64_t c, uint64_t seed);
// Samples [first, first + n) of d as tensors on dev.
Batch device_batch(const HostData& d, int64_t first, int64_t n, const torch::Device& dev);
// v/255 for v = 0..255 by IEEE float division on the host, on dev (made once per trainer).
Tensor make_lut(const torch::Device& dev);
// [pixels/255 ..., mask] as kernels/preprocess.cu, (N, Cp+1, H, W), NHWC in memory when channels_last.
Tensor preprocess(const Batch& b, const Tensor& lut, bool channels_last);

}  // namespace ltb
