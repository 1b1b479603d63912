#include "data/fixed_batch.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/hash.h"

namespace data {

namespace {
struct Rng {
    uint64_t s;
    uint64_t next() { return rt::mix64(s += rt::kGoldenGamma); }
    double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
};
}  // namespace

FixedSamples make_fixed_samples(uint64_t seed, int n, int channels, int height, int width) {
    SF_CHECK(n >= 1 && height >= 32 && width >= 64, "fixed samples: need n >= 1 and at least 32x64 pixels");
    SF_CHECK(channels == 2 || channels == 4, "fixed samples: channels must be 2 or 4, got %d", channels);
    FixedSamples out;
    out.n = n;
    out.h = height;
    out.w = width;
    out.c = channels;
    out.input.assign(static_cast<size_t>(n) * height * width * channels, 0.0f);
    out.labels.resize(static_cast<size_t>(n));
    Rng rng{seed * 0x2545F4914F6CDD1Dull + 17};
    for (int s = 0; s < n; ++s) {
        Label& l = out.labels[static_cast<size_t>(s)];
        // Letterbox band: padding top/bottom of a few pixels (not aligned to the grid).
        const int pad = static_cast<int>(rng.uniform(0, height / 10.0));
        l.rect_x0 = 0;
        l.rect_x1 = static_cast<float>(width);
        l.rect_y0 = static_cast<float>(pad);
        l.rect_y1 = static_cast<float>(height - pad);
        const double size = std::max(8.0, height / 5.0);
        const double gy = rng.uniform(pad + size, height - pad - size);
        l.gap_x = static_cast<float>(rng.uniform(width * 0.45, width - size));
        l.gap_y = static_cast<float>(gy);
        l.slider_x = static_cast<float>(rng.uniform(size * 0.6, size * 1.2));
        l.slider_y = static_cast<float>(gy);
        l.angle_rad = (s % 2 == 0) ? static_cast<float>(rng.uniform(-0.03, 0.03)) : 0.0f;
        l.num_fakes = 1 + s % 2;
        for (int k = 0; k < l.num_fakes; ++k) {
            l.fake_x[k] = static_cast<float>(rng.uniform(width * 0.3, width - size));
            l.fake_y[k] = static_cast<float>(rng.uniform(pad + size, height - pad - size));
        }
        const double fx = rng.uniform(0.02, 0.08), fy = rng.uniform(0.02, 0.08), ph = rng.uniform(0, 6.28);
        auto inside = [&](double x, double y, double cx, double cy) {
            return std::fabs(x - cx) <= size / 2 && std::fabs(y - cy) <= size / 2;
        };
        for (int y = 0; y < height; ++y) {
            for (int x = 0; x < width; ++x) {
                float* px = &out.input[((static_cast<size_t>(s) * height + y) * width + x) * channels];
                const bool valid = y >= pad && y < height - pad;
                double v = 1.0;  // letterbox padding is white
                if (valid) {
                    v = 0.5 + 0.25 * std::sin(fx * x + ph) * std::cos(fy * y) + 0.1 * rng.uniform(-1, 1);
                    const double cx = x + 0.5, cy = y + 0.5;
                    if (inside(cx, cy, l.gap_x, l.gap_y))
                        v = 0.35 * v + (std::fabs(cx - l.gap_x) > size / 2 - 2 ? 0.5 : 0.0);
                    if (inside(cx, cy, l.slider_x, l.slider_y)) v = 0.8 + 0.15 * std::sin(0.3 * cx);
                    for (int k = 0; k < l.num_fakes; ++k)
                        if (inside(cx, cy, l.fake_x[k], l.fake_y[k])) v = 0.6 * v;
                }
                const float q = static_cast<float>(std::round(std::clamp(v, 0.0, 1.0) * 255.0) / 255.0);
                for (int c = 0; c + 1 < channels; ++c) px[c] = q;
                px[channels - 1] = valid ? 1.0f : 0.0f;
            }
        }
    }
    return out;
}

}  // namespace data
