#include "tools/letterbox.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/error.h"

namespace tools {

Letterbox letterbox_geometry(int src_w, int src_h, int canvas_w, int canvas_h) {
    SF_CHECK(src_w > 0 && src_h > 0, "letterbox: image size %dx%d is empty", src_w, src_h);
    SF_CHECK(canvas_w > 0 && canvas_h > 0, "letterbox: canvas size %dx%d is empty", canvas_w, canvas_h);
    Letterbox lb;
    lb.src_w = src_w;
    lb.src_h = src_h;
    lb.canvas_w = canvas_w;
    lb.canvas_h = canvas_h;
    lb.scale = std::min(static_cast<double>(canvas_w) / src_w, static_cast<double>(canvas_h) / src_h);
    // Python's round() is half-to-even, as nearbyint in the default rounding mode.
    auto side = [&](int n, int limit) { return std::clamp(static_cast<int>(std::nearbyint(n * lb.scale)), 1, limit); };
    lb.resized_w = side(src_w, canvas_w);
    lb.resized_h = side(src_h, canvas_h);
    lb.pad_left = (canvas_w - lb.resized_w) / 2;
    lb.pad_top = (canvas_h - lb.resized_h) / 2;
    return lb;
}

void to_canvas(const Letterbox& lb, double x, double y, double* cx, double* cy) {
    *cx = lb.scale * x + lb.pad_left;
    *cy = lb.scale * y + lb.pad_top;
}

void to_original(const Letterbox& lb, double cx, double cy, double* x, double* y) {
    *x = (cx - lb.pad_left) / lb.scale;
    *y = (cy - lb.pad_top) / lb.scale;
}

namespace {

// One output coordinate's two source taps and the weight of the second (cv2 INTER_LINEAR:
// s = (d + 0.5) * n / rn - 0.5, clamped to [0, n-1]).
struct Tap {
    int i0, i1;
    float f;
};

std::vector<Tap> taps(int n, int rn) {
    std::vector<Tap> t(static_cast<size_t>(rn));
    for (int d = 0; d < rn; ++d) {
        const double s = std::clamp((d + 0.5) * n / rn - 0.5, 0.0, n - 1.0);
        const int i0 = static_cast<int>(s);
        t[static_cast<size_t>(d)] = {i0, std::min(i0 + 1, n - 1), static_cast<float>(s - i0)};
    }
    return t;
}

}  // namespace

void letterbox_pixels(const Letterbox& lb, const uint8_t* src, int channels, uint8_t* canvas) {
    SF_CHECK(channels >= 1 && channels <= 4, "letterbox: %d channels (1..4 supported)", channels);
    const size_t C = static_cast<size_t>(channels);
    std::fill(canvas, canvas + static_cast<size_t>(lb.canvas_w) * lb.canvas_h * C, uint8_t{255});
    const std::vector<Tap> tx = taps(lb.src_w, lb.resized_w), ty = taps(lb.src_h, lb.resized_h);
    std::vector<float> row(static_cast<size_t>(lb.src_w) * C);  // the vertically interpolated source row
    for (int y = 0; y < lb.resized_h; ++y) {
        const Tap& v = ty[static_cast<size_t>(y)];
        const uint8_t* r0 = src + static_cast<size_t>(v.i0) * lb.src_w * C;
        const uint8_t* r1 = src + static_cast<size_t>(v.i1) * lb.src_w * C;
        for (size_t k = 0; k < row.size(); ++k) row[k] = r0[k] + (static_cast<float>(r1[k]) - r0[k]) * v.f;
        uint8_t* out = canvas + (static_cast<size_t>(y + lb.pad_top) * lb.canvas_w + lb.pad_left) * C;
        for (int x = 0; x < lb.resized_w; ++x) {
            const Tap& h = tx[static_cast<size_t>(x)];
            const float* a = &row[static_cast<size_t>(h.i0) * C];
            const float* b = &row[static_cast<size_t>(h.i1) * C];
            for (size_t c = 0; c < C; ++c) {
                const float val = a[c] + (b[c] - a[c]) * h.f;
                out[static_cast<size_t>(x) * C + c] = static_cast<uint8_t>(std::clamp(val, 0.0f, 255.0f) + 0.5f);
            }
        }
    }
}

data::Label valid_rect_label(const Letterbox& lb) {
    data::Label l;
    l.rect_x0 = static_cast<float>(lb.pad_left);
    l.rect_y0 = static_cast<float>(lb.pad_top);
    l.rect_x1 = static_cast<float>(lb.pad_left + lb.resized_w);
    l.rect_y1 = static_cast<float>(lb.pad_top + lb.resized_h);
    return l;
}

}  // namespace tools
