// Targets rendered from labels (Gaussian heatmap, target cell and offset) and the grid masks
// pooled from the input's mask channel, against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/loss.h"
#include "model/loss_detail.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

constexpr int kH = 16, kW = 32, kStride = 4;
constexpr double kSigma = 1.5;

double heat_at(const std::vector<double>& heat, int i, int j) { return heat[static_cast<size_t>(i) * kW + j]; }

TEST(ModelTargets, GaussianPeakNeighboursAndWindow) {
    std::vector<double> heat(kH * kW, -1.0);
    // x = 41 -> u = int(10.25) = 10; y = 22 -> v = int(5.5) = 5.
    model::render_heatmap_target(kH, kW, 41.0, 22.0, kSigma, kStride, heat.data());
    EXPECT_EQ(heat_at(heat, 5, 10), 1.0);  // peak on the integer cell, exactly 1
    const double n1 = std::exp(-1.0 / 4.5), n2 = std::exp(-2.0 / 4.5);
    EXPECT_DOUBLE_EQ(heat_at(heat, 5, 11), n1);
    EXPECT_DOUBLE_EQ(heat_at(heat, 4, 10), n1);
    EXPECT_DOUBLE_EQ(heat_at(heat, 6, 11), n2);
    EXPECT_DOUBLE_EQ(heat_at(heat, 9, 14), std::exp(-32.0 / 4.5));  // window corner, radius 4
    EXPECT_EQ(heat_at(heat, 5, 15), 0.0);                           // |j-u| = 5 > 4
    EXPECT_EQ(heat_at(heat, 10, 10), 0.0);                          // |i-v| = 5 > 4
    int nonzero = 0, positives = 0;
    for (double v : heat) {
        EXPECT_GE(v, 0.0);  // every cell written
        nonzero += v > 0;
        positives += v >= 0.8;
    }
    EXPECT_EQ(nonzero, 81);   // the full 9x9 window
    EXPECT_EQ(positives, 5);  // peak + 4 direct neighbours (exp(-1/4.5) = 0.8007 >= 0.8)
}

TEST(ModelTargets, WindowClippedAtBordersAndFarEdgeClamped) {
    std::vector<double> heat(kH * kW, -1.0);
    model::render_heatmap_target(kH, kW, 2.0, 3.9, kSigma, kStride, heat.data());  // cell (0, 0)
    EXPECT_EQ(heat_at(heat, 0, 0), 1.0);
    int nonzero = 0;
    for (double v : heat) nonzero += v > 0;
    EXPECT_EQ(nonzero, 25);  // rows 0..4 x cols 0..4
    EXPECT_DOUBLE_EQ(heat_at(heat, 4, 4), std::exp(-32.0 / 4.5));

    // A centre exactly on the far edge names cell (h, w); it is clamped to (h-1, w-1).
    model::render_heatmap_target(kH, kW, double(kW * kStride), double(kH * kStride), kSigma, kStride, heat.data());
    EXPECT_EQ(heat_at(heat, kH - 1, kW - 1), 1.0);
    EXPECT_DOUBLE_EQ(heat_at(heat, kH - 2, kW - 1), std::exp(-1.0 / 4.5));
    nonzero = 0;
    for (double v : heat) nonzero += v > 0;
    EXPECT_EQ(nonzero, 25);
}

TEST(ModelTargets, FloatMatchesDouble) {
    std::vector<double> hd(kH * kW);
    std::vector<float> hf(kH * kW);
    model::render_heatmap_target(kH, kW, 77.3, 30.9, kSigma, kStride, hd.data());
    model::render_heatmap_target(kH, kW, 77.3, 30.9, kSigma, kStride, hf.data());
    for (size_t i = 0; i < hd.size(); ++i) EXPECT_EQ(hf[i], static_cast<float>(hd[i])) << i;
}

TEST(ModelTargets, CellAndOffsetTruncate) {
    // u = int(x/4), offset = x/4 - u - 0.5.
    const model::detail::ObjectCell c = model::detail::object_cell(41.0, 22.0, kH, kW, kStride);
    EXPECT_EQ(c.u, 10);
    EXPECT_EQ(c.v, 5);
    EXPECT_DOUBLE_EQ(c.du, -0.25);
    EXPECT_DOUBLE_EQ(c.dv, 0.0);
    const model::detail::ObjectCell d = model::detail::object_cell(7.99, 0.0, kH, kW, kStride);
    EXPECT_EQ(d.u, 1);  // truncation, not rounding
    EXPECT_EQ(d.v, 0);
    EXPECT_NEAR(d.du, 0.4975, 1e-12);
    EXPECT_DOUBLE_EQ(d.dv, -0.5);
    const model::detail::ObjectCell e = model::detail::object_cell(128.0, 64.0, kH, kW, kStride);
    EXPECT_EQ(e.u, kW - 1);
    EXPECT_EQ(e.v, kH - 1);
    EXPECT_DOUBLE_EQ(e.du, 0.5);
}

// Input (N=2, H=8, W=12, C=2), mask in channel 1, stride 4 -> grid 2x3. Sample 0 is valid on
// x in [2, 12), y in [0, 7): two padded columns and one padded row, neither aligned to the stride.
// Sample 1 is all valid. Channel 0 holds a value that must never be read.
std::vector<float> mask_input() {
    const int H = 8, W = 12, C = 2;
    std::vector<float> in(2 * H * W * C);
    for (int b = 0; b < 2; ++b)
        for (int y = 0; y < H; ++y)
            for (int x = 0; x < W; ++x) {
                float* px = &in[((static_cast<size_t>(b) * H + y) * W + x) * C];
                px[0] = 7.0f;
                px[1] = (b == 1 || (x >= 2 && y < 7)) ? 1.0f : 0.0f;
            }
    return in;
}

TEST(ModelTargets, MaskAveragePoolGivesFractionalCells) {
    const std::vector<float> in = mask_input();
    std::vector<double> avg(12, -1.0);
    model::mask_grid_avg_ref(2, 8, 12, 2, 1, 4, in.data(), avg.data());
    const std::vector<double> want = {8 / 16.0, 1, 1, 6 / 16.0, 12 / 16.0, 12 / 16.0,  // sample 0
                                      1,        1, 1, 1,        1,         1};
    EXPECT_TRUE(sftest::close_elementwise(avg, want, 0, 0, "avg pool"));
    std::vector<float> avgf(12);
    model::mask_grid_avg_ref(2, 8, 12, 2, 1, 4, in.data(), avgf.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(avgf), want, 0, 0, "avg pool float"));
}

TEST(ModelTargets, MaskMinPoolMarksAnyPaddingInvalid) {
    const std::vector<float> in = mask_input();
    std::vector<float> mn(12, -1.0f);
    model::mask_grid_min_ref(2, 8, 12, 2, 1, 4, in.data(), mn.data());
    const std::vector<double> want = {0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1};
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(mn), want, 0, 0, "min pool"));
}

TEST(ModelTargets, MaskPoolRejectsBadShapes) {
    const std::vector<float> in = mask_input();
    std::vector<float> out(64);
    EXPECT_THROW(model::mask_grid_min_ref(2, 8, 12, 2, 1, 5, in.data(), out.data()), rt::Error);  // 8 % 5
    EXPECT_THROW(model::mask_grid_min_ref(2, 8, 12, 2, 2, 4, in.data(), out.data()), rt::Error);  // channel 2
    EXPECT_THROW(model::mask_grid_avg_ref(2, 8, 12, 2, -1, 4, in.data(), out.data()), rt::Error);
}

}  // namespace
