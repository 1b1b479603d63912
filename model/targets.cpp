// Targets rendered from labels (MODEL_SPEC §3.2-3.3) and the grid masks pooled from the input's
// mask channel (§1.7 min-pool for decode, §2 average pool M for the loss). CPU references.
#include <algorithm>
#include <cmath>
#include <vector>

#include "model/loss.h"
#include "model/loss_detail.h"
#include "runtime/error.h"

namespace model {

namespace detail {

ObjectCell object_cell(double x, double y, int h, int w, int stride) {
    // int() of the preprocessor truncates toward zero; a centre exactly on the far edge
    // (x == w*stride) would name cell w, so the cell is clamped into the grid.
    ObjectCell c;
    const double gx = x / stride, gy = y / stride;
    c.u = std::clamp(static_cast<int>(std::trunc(gx)), 0, w - 1);
    c.v = std::clamp(static_cast<int>(std::trunc(gy)), 0, h - 1);
    c.du = gx - c.u - 0.5;
    c.dv = gy - c.v - 0.5;
    return c;
}

}  // namespace detail

template <class T>
void render_heatmap_target(int h, int w, double x, double y, double sigma, int stride, T* heat) {
    SF_CHECK(h > 0 && w > 0 && stride > 0 && sigma > 0, "bad target grid %dx%d stride %d sigma %g", h, w, stride,
             sigma);
    const detail::ObjectCell c = detail::object_cell(x, y, h, w, stride);
    const int radius = static_cast<int>(3 * sigma);  // int(3 sigma) = 4 for sigma 1.5
    const double inv = 1.0 / (2 * sigma * sigma);
    std::fill(heat, heat + static_cast<size_t>(h) * w, T(0));
    for (int i = std::max(c.v - radius, 0); i <= std::min(c.v + radius, h - 1); ++i) {
        for (int j = std::max(c.u - radius, 0); j <= std::min(c.u + radius, w - 1); ++j) {
            const double d2 = double(i - c.v) * (i - c.v) + double(j - c.u) * (j - c.u);
            heat[static_cast<size_t>(i) * w + j] = static_cast<T>(std::exp(-d2 * inv));
        }
    }
}

namespace {

void check_mask_shape(int n, int H, int W, int C, int mask_c, int stride, const float* input, const void* out) {
    SF_CHECK(n > 0 && H > 0 && W > 0 && C > 0, "bad input shape (%d,%d,%d,%d)", n, H, W, C);
    SF_CHECK(mask_c >= 0 && mask_c < C, "mask channel %d outside 0..%d", mask_c, C - 1);
    SF_CHECK(stride > 0 && H % stride == 0 && W % stride == 0, "input %dx%d is not a multiple of stride %d", H, W,
             stride);
    SF_CHECK(input != nullptr && out != nullptr, "null input or output");
}

// Calls f(cell index, mask value) for every input pixel, cell = (n, H/stride, W/stride) row-major.
template <class F>
void for_each_mask_pixel(int n, int H, int W, int C, int mask_c, int stride, const float* input, F f) {
    const int h = H / stride, w = W / stride;
    for (int b = 0; b < n; ++b)
        for (int y = 0; y < H; ++y)
            for (int x = 0; x < W; ++x) {
                const size_t cell = (static_cast<size_t>(b) * h + y / stride) * w + x / stride;
                f(cell, input[((static_cast<size_t>(b) * H + y) * W + x) * C + mask_c]);
            }
}

}  // namespace

template <class T>
void mask_grid_avg_ref(int n, int H, int W, int C, int mask_c, int stride, const float* input, T* out) {
    check_mask_shape(n, H, W, C, mask_c, stride, input, out);
    const size_t cells = static_cast<size_t>(n) * (H / stride) * (W / stride);
    std::vector<double> sum(cells, 0.0);
    for_each_mask_pixel(n, H, W, C, mask_c, stride, input, [&](size_t cell, float v) { sum[cell] += v; });
    const double inv = 1.0 / (double(stride) * stride);
    for (size_t i = 0; i < cells; ++i) out[i] = static_cast<T>(sum[i] * inv);
}

void mask_grid_min_ref(int n, int H, int W, int C, int mask_c, int stride, const float* input, float* out) {
    check_mask_shape(n, H, W, C, mask_c, stride, input, out);
    const size_t cells = static_cast<size_t>(n) * (H / stride) * (W / stride);
    std::fill(out, out + cells, INFINITY);
    for_each_mask_pixel(n, H, W, C, mask_c, stride, input,
                        [&](size_t cell, float v) { out[cell] = std::min(out[cell], v); });
}

template void render_heatmap_target<float>(int, int, double, double, double, int, float*);
template void render_heatmap_target<double>(int, int, double, double, double, int, double*);
template void mask_grid_avg_ref<float>(int, int, int, int, int, int, const float*, float*);
template void mask_grid_avg_ref<double>(int, int, int, int, int, int, const float*, double*);

}  // namespace model
