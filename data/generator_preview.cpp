// Preview grid: letterbox canvases side by side with their labels drawn, so a person can check
// the generator by eye (slidefuse generate --preview).
#include <algorithm>
#include <cmath>

#include "data/generator.h"
#include "runtime/error.h"

namespace data {

uint64_t preview_index(int i) {
    const uint64_t k = static_cast<uint64_t>(i);
    return k * kSamplesPerBackground + (13 * k) % kSamplesPerBackground;
}

namespace {

struct Canvas {
    int w, h;
    std::vector<uint8_t> rgb;
    void put(int x, int y, const uint8_t* c) {
        if (x < 0 || y < 0 || x >= w || y >= h) return;
        uint8_t* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
        p[0] = c[0], p[1] = c[1], p[2] = c[2];
    }
    void line(double x0, double y0, double x1, double y1, const uint8_t* c) {
        const int n = static_cast<int>(std::ceil(std::max(std::fabs(x1 - x0), std::fabs(y1 - y0)))) + 1;
        for (int i = 0; i <= n; ++i) {
            const double t = static_cast<double>(i) / n;
            put(static_cast<int>(std::floor(x0 + (x1 - x0) * t)), static_cast<int>(std::floor(y0 + (y1 - y0) * t)), c);
        }
    }
    // A cross with a one-pixel dark halo so it reads on any background.
    void cross(double x, double y, int r, const uint8_t* c) {
        static const uint8_t kBlack[3] = {0, 0, 0};
        for (int o : {-1, 1}) {
            line(x - r, y + o, x + r, y + o, kBlack);
            line(x + o, y - r, x + o, y + r, kBlack);
        }
        line(x - r, y, x + r, y, c);
        line(x, y - r, x, y + r, c);
    }
};

}  // namespace

std::vector<uint8_t> render_preview(const std::vector<GenSample>& samples, const GenConfig& cfg, int cols, int* out_w,
                                    int* out_h) {
    SF_CHECK(!samples.empty() && cols >= 1, "preview: need at least one sample and one column");
    constexpr int kGap = 4;
    cols = std::min<int>(cols, static_cast<int>(samples.size()));
    const int rows = (static_cast<int>(samples.size()) + cols - 1) / cols;
    Canvas cv{cols * cfg.width + (cols - 1) * kGap, rows * cfg.height + (rows - 1) * kGap, {}};
    cv.rgb.assign(static_cast<size_t>(cv.w) * cv.h * 3, 48);
    static const uint8_t kRed[3] = {255, 32, 32}, kBlue[3] = {40, 120, 255}, kYellow[3] = {255, 230, 0};
    static const uint8_t kGreen[3] = {0, 220, 0}, kMagenta[3] = {255, 0, 255}, kWhite[3] = {255, 255, 255};
    for (size_t n = 0; n < samples.size(); ++n) {
        const GenSample& s = samples[n];
        SF_CHECK(s.pixels.size() == static_cast<size_t>(cfg.width) * cfg.height * cfg.channels,
                 "preview: sample %zu has %zu pixel bytes, expected %dx%dx%d", n, s.pixels.size(), cfg.width,
                 cfg.height, cfg.channels);
        const int ox = static_cast<int>(n % cols) * (cfg.width + kGap),
                  oy = static_cast<int>(n / cols) * (cfg.height + kGap);
        for (int y = 0; y < cfg.height; ++y)
            for (int x = 0; x < cfg.width; ++x) {
                const uint8_t* p = &s.pixels[(static_cast<size_t>(y) * cfg.width + x) * cfg.channels];
                const uint8_t c[3] = {p[0], p[cfg.channels == 3 ? 1 : 0], p[cfg.channels == 3 ? 2 : 0]};
                cv.put(ox + x, oy + y, c);
            }
        const Label& l = s.label;
        const double x0 = ox + l.rect_x0, y0 = oy + l.rect_y0, x1 = ox + l.rect_x1 - 1, y1 = oy + l.rect_y1 - 1;
        cv.line(x0, y0, x1, y0, kGreen);
        cv.line(x0, y1, x1, y1, kGreen);
        cv.line(x0, y0, x0, y1, kGreen);
        cv.line(x1, y0, x1, y1, kGreen);
        for (int k = 0; k < l.num_fakes; ++k) cv.cross(ox + l.fake_x[k], oy + l.fake_y[k], 6, kYellow);
        cv.cross(ox + l.slider_x, oy + l.slider_y, 7, kBlue);
        // Angle tick at 10x the gap angle; counter-clockwise as displayed is up-right.
        const double a = 10.0 * l.angle_rad;
        cv.line(ox + l.gap_x, oy + l.gap_y, ox + l.gap_x + 28 * std::cos(a), oy + l.gap_y - 28 * std::sin(a), kMagenta);
        cv.cross(ox + l.gap_x, oy + l.gap_y, 7, kRed);
        for (int k = 0; k < s.strategy; ++k)
            for (int j = 0; j < 4; ++j)
                for (int i = 0; i < 4; ++i) cv.put(ox + 3 + 7 * k + i, oy + 3 + j, kWhite);
    }
    *out_w = cv.w;
    *out_h = cv.h;
    return std::move(cv.rgb);
}

}  // namespace data
