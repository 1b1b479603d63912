// Background synthesis: a procedural "photo" per background id, made of a landscape or a colour
// field (multi-octave value noise), brightness/colour gradients, soft random shapes (discs,
// ellipses, rectangles, thick lines), fine texture and grain; plus the counter-based RNG, value
// noise and the bilinear crop-resize that turns the picture into one sample's image.
#include <algorithm>
#include <cmath>

#include "data/generator.h"
#include "runtime/hash.h"

namespace data {
namespace gen {

uint64_t mix64(uint64_t z) { return rt::mix64(z); }

Rng::Rng(uint64_t seed, uint64_t index, uint64_t stream)
    : s(mix64(seed + 0x9E3779B97F4A7C15ull) ^
        mix64(index * 0xD1B54A32D192ED03ull + stream * 0x8CB92BA72F3D8DD7ull + 1)) {}

uint64_t Rng::next() { return mix64(s += 0x9E3779B97F4A7C15ull); }
double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
int Rng::randint(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }

void add_value_noise(std::vector<float>& out, int w, int h, double cell, float amp, Rng& rng) {
    // Separable smoothstep interpolation of a random lattice; the per-column lattice index and
    // weight are tabulated once, so a pixel costs four loads and a few multiply-adds.
    const int nx = static_cast<int>(w / cell) + 3, ny = static_cast<int>(h / cell) + 3;
    std::vector<float> lat(static_cast<size_t>(nx) * ny);
    for (float& v : lat) v = static_cast<float>(rng.uniform(-1.0, 1.0));
    const double ox = rng.uniform(), oy = rng.uniform();  // lattice phase
    std::vector<int> ix(static_cast<size_t>(w));
    std::vector<float> sx(static_cast<size_t>(w));
    for (int x = 0; x < w; ++x) {
        const double u = (x + 0.5) / cell + ox;
        const int i = static_cast<int>(u);
        const float t = static_cast<float>(u - i);
        ix[static_cast<size_t>(x)] = i;
        sx[static_cast<size_t>(x)] = t * t * (3 - 2 * t);
    }
    for (int y = 0; y < h; ++y) {
        const double v = (y + 0.5) / cell + oy;
        const int j = static_cast<int>(v);
        const float t = static_cast<float>(v - j), sy = t * t * (3 - 2 * t);
        const float* r0 = &lat[static_cast<size_t>(j) * nx];
        const float* r1 = r0 + nx;
        float* o = &out[static_cast<size_t>(y) * w];
        for (int x = 0; x < w; ++x) {
            const int i = ix[static_cast<size_t>(x)];
            const float s = sx[static_cast<size_t>(x)];
            const float a = r0[i] + (r0[i + 1] - r0[i]) * s;
            const float b = r1[i] + (r1[i + 1] - r1[i]) * s;
            o[x] += amp * (a + (b - a) * sy);
        }
    }
}

namespace {

constexpr uint64_t kStreamBackground = 0xB6;

struct Rgb {
    float r, g, b;
};

Rgb hsv(double h, double s, double v) {  // h in [0, 1)
    const double f = h * 6 - std::floor(h * 6);
    const double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    double r = v, g = t, b = p;
    switch (static_cast<int>(h * 6) % 6) {
        case 1: r = q, g = v, b = p; break;
        case 2: r = p, g = v, b = t; break;
        case 3: r = p, g = q, b = v; break;
        case 4: r = t, g = p, b = v; break;
        case 5: r = v, g = p, b = q; break;
        default: break;
    }
    return {static_cast<float>(255 * r), static_cast<float>(255 * g), static_cast<float>(255 * b)};
}

Rgb random_colour(Rng& r, double hue, double sat_lo, double sat_hi, double val_lo, double val_hi) {
    return hsv(std::fmod(hue + r.uniform(-0.06, 0.06) + 1.0, 1.0), r.uniform(sat_lo, sat_hi),
               r.uniform(val_lo, val_hi));
}

// Mostly the hues of outdoor photos (foliage, earth, water and sky), sometimes any hue.
double natural_hue(Rng& r) {
    static const double kHue[4][2] = {{0.17, 0.40}, {0.04, 0.12}, {0.50, 0.62}, {0.0, 1.0}};
    const int k = r.randint(0, 3);
    return r.uniform(kHue[k][0], kHue[k][1]);
}

Rgb lerp(const Rgb& a, const Rgb& b, float t) {
    return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}

// fBm: octaves of value noise from `cell` down, each half the cell and `gain` the amplitude.
std::vector<float> fbm(int w, int h, double cell, int octaves, float gain, Rng& r) {
    std::vector<float> f(static_cast<size_t>(w) * h, 0.0f);
    float amp = 1;
    for (int o = 0; o < octaves && cell >= 1.5; ++o, cell *= 0.5, amp *= gain) add_value_noise(f, w, h, cell, amp, r);
    return f;
}

// The base picture: a landscape (sky, ridge line, textured ground) or a noisy colour field.
void paint_base(Image& im, Rng& r) {
    const int W = im.w, H = im.h;
    const double hue = natural_hue(r);
    const std::vector<float> big = fbm(W, H, r.uniform(120, 260), 4, 0.5f, r);
    const std::vector<float> detail = fbm(W, H, r.uniform(24, 60), 5, 0.55f, r);
    const float tex = static_cast<float>(r.uniform(0.10, 0.35));  // texture contrast
    if (r.uniform() < 0.5) {
        const Rgb sky0 = random_colour(r, r.uniform(0.5, 0.68), 0.15, 0.55, 0.6, 1.0);
        const Rgb sky1 = random_colour(r, r.uniform(0.5, 0.68), 0.0, 0.35, 0.75, 1.0);
        const Rgb g0 = random_colour(r, hue, 0.2, 0.65, 0.25, 0.7),
                  g1 = random_colour(r, hue + 0.1, 0.15, 0.6, 0.3, 0.8);
        std::vector<float> ridge(static_cast<size_t>(W), 0.0f);
        for (double cell = r.uniform(80, 200), amp = r.uniform(15, 55); cell >= 4; cell *= 0.5, amp *= 0.5)
            add_value_noise(ridge, W, 1, cell, static_cast<float>(amp), r);
        const double horizon = H * r.uniform(0.25, 0.6);
        for (int y = 0; y < H; ++y)
            for (int x = 0; x < W; ++x) {
                const size_t i = static_cast<size_t>(y) * W + x;
                const double hy = horizon + ridge[static_cast<size_t>(x)];
                Rgb c;
                if (y < hy) {
                    c = lerp(sky0, sky1, static_cast<float>(std::clamp(y / std::max(hy, 1.0), 0.0, 1.0)));
                    const float cloud = std::clamp(big[i] * 1.5f + 0.1f, 0.0f, 1.0f) * 0.8f;
                    c = lerp(c, Rgb{245, 245, 245}, cloud * cloud);
                } else {
                    const float depth = static_cast<float>((y - hy) / std::max(H - hy, 1.0));
                    c = lerp(g0, g1, std::clamp(0.5f + big[i], 0.0f, 1.0f));
                    const float k = (1 + tex * 1.6f * detail[i]) * (1.0f - 0.35f * depth) * (y < hy + 2 ? 0.8f : 1.0f);
                    c = {c.r * k, c.g * k, c.b * k};
                }
                float* p = &im.rgb[i * 3];
                p[0] = c.r, p[1] = c.g, p[2] = c.b;
            }
    } else {
        const Rgb c0 = random_colour(r, hue, 0.05, 0.6, 0.2, 0.9),
                  c1 = random_colour(r, hue + 0.15, 0.05, 0.6, 0.3, 1.0);
        const Rgb c2 = random_colour(r, hue + 0.5, 0.05, 0.45, 0.4, 1.0);
        const std::vector<float> mix2 = fbm(W, H, r.uniform(60, 160), 3, 0.5f, r);
        for (size_t i = 0; i < static_cast<size_t>(W) * H; ++i) {
            Rgb c = lerp(c0, c1, std::clamp(0.5f + 1.2f * big[i], 0.0f, 1.0f));
            c = lerp(c, c2, std::clamp(1.5f * mix2[i], 0.0f, 1.0f));
            const float k = 1 + tex * 2.0f * detail[i];
            float* p = &im.rgb[i * 3];
            p[0] = c.r * k, p[1] = c.g * k, p[2] = c.b * k;
        }
    }
}

// Soft shapes: discs, ellipses, (rotated) rectangles and thick lines, shaded across their height.
void paint_shapes(Image& im, Rng& r) {
    const int n = r.randint(3, 16);
    const double hue = natural_hue(r);
    for (int k = 0; k < n; ++k) {
        const int kind = r.randint(0, 3);
        const double cx = r.uniform(-20, im.w + 20), cy = r.uniform(-20, im.h + 20);
        const double a = r.uniform(8, 90), b = kind == 0 ? a : r.uniform(6, 70);
        const double th = r.uniform(0, 3.14159265), ct = std::cos(th), st = std::sin(th);
        const double len = r.uniform(40, 300), thick = r.uniform(1.5, 8);
        const Rgb col = random_colour(r, hue + r.uniform(-0.3, 0.3), 0.0, 0.7, 0.1, 1.0);
        const float opacity = static_cast<float>(r.uniform(0.3, 0.95));
        const double soft = r.uniform(0.6, 4.0), shade = r.uniform(-0.35, 0.35);
        const double reach = (kind == 3 ? len / 2 + thick : std::max(a, b) * 1.5) + soft + 1;
        const int x0 = std::max(0, static_cast<int>(cx - reach)), x1 = std::min(im.w, static_cast<int>(cx + reach) + 1);
        const int y0 = std::max(0, static_cast<int>(cy - reach)), y1 = std::min(im.h, static_cast<int>(cy + reach) + 1);
        for (int y = y0; y < y1; ++y)
            for (int x = x0; x < x1; ++x) {
                const double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
                const double u = dx * ct + dy * st, v = -dx * st + dy * ct;  // shape frame
                double sd;
                if (kind <= 1) {
                    sd = (std::sqrt((u / a) * (u / a) + (v / b) * (v / b)) - 1) * std::min(a, b);
                } else if (kind == 2) {
                    const double qx = std::fabs(u) - a, qy = std::fabs(v) - b;
                    sd = std::hypot(std::max(qx, 0.0), std::max(qy, 0.0)) + std::min(std::max(qx, qy), 0.0);
                } else {
                    const double t = std::clamp(u, -len / 2, len / 2);
                    sd = std::hypot(u - t, v) - thick;
                }
                const float cov = static_cast<float>(std::clamp(0.5 - sd / soft, 0.0, 1.0)) * opacity;
                if (cov <= 0) continue;
                const float k = static_cast<float>(1 + shade * dy / reach);
                float* p = im.at(x, y);
                p[0] += (col.r * k - p[0]) * cov;
                p[1] += (col.g * k - p[1]) * cov;
                p[2] += (col.b * k - p[2]) * cov;
            }
    }
}

// Lighting (a linear brightness gradient and a vignette), fine texture and per-pixel grain.
void paint_finish(Image& im, Rng& r, uint64_t key) {
    const double dir = r.uniform(0, 6.2831853), grad = r.uniform(0.0, 0.45), vig = r.uniform(0.0, 0.5);
    const float grain = static_cast<float>(r.uniform(1.5, 7.0));
    std::vector<float> fine(static_cast<size_t>(im.w) * im.h, 0.0f);
    add_value_noise(fine, im.w, im.h, r.uniform(1.5, 4.0), static_cast<float>(r.uniform(2, 10)), r);
    const double dx = std::cos(dir) / im.w, dy = std::sin(dir) / im.h;
    for (int y = 0; y < im.h; ++y) {
        const double ny = (y + 0.5) / im.h - 0.5;
        for (int x = 0; x < im.w; ++x) {
            const double nx = (x + 0.5) / im.w - 0.5;
            const float k = static_cast<float>((1 + grad * ((x - im.w / 2) * dx + (y - im.h / 2) * dy)) *
                                               (1 - vig * (nx * nx + ny * ny) * 1.6));
            const uint64_t hsh = mix64(key ^ (static_cast<uint64_t>(y) << 20 | static_cast<uint64_t>(x)));
            const float n = fine[static_cast<size_t>(y) * im.w + x] +
                            grain * (static_cast<float>(hsh & 0xFFFF) * (2.0f / 65535.0f) - 1.0f);
            float* p = im.at(x, y);
            for (int c = 0; c < 3; ++c) p[c] = std::clamp(p[c] * k + n, 0.0f, 255.0f);
        }
    }
}

}  // namespace

Image synthesize_background(uint64_t seed, int bg_id) {
    Rng r(seed, static_cast<uint64_t>(bg_id), kStreamBackground);
    Image im;
    im.w = kSourceW;
    im.h = kSourceH;
    im.rgb.assign(static_cast<size_t>(im.w) * im.h * 3, 0.0f);
    paint_base(im, r);
    paint_shapes(im, r);
    paint_finish(im, r, mix64(seed ^ mix64(static_cast<uint64_t>(bg_id) + 77)));
    return im;
}

const Image& background_source(uint64_t seed, int bg_id) {
    thread_local struct {
        bool valid = false;
        uint64_t seed = 0;
        int bg_id = 0;
        Image im;
    } cache;
    if (!cache.valid || cache.seed != seed || cache.bg_id != bg_id) {
        cache.im = synthesize_background(seed, bg_id);
        cache.valid = true;
        cache.seed = seed;
        cache.bg_id = bg_id;
    }
    return cache.im;
}

Image crop_resize(const Image& src, double x0, double y0, double cw, double ch, int w, int h, bool flip) {
    // cv2 INTER_LINEAR convention: pixel centres map as src = x0 + (dst + 0.5) * cw / w - 0.5.
    Image out;
    out.w = w;
    out.h = h;
    out.rgb.resize(static_cast<size_t>(w) * h * 3);
    std::vector<int> xi(static_cast<size_t>(w));
    std::vector<float> xf(static_cast<size_t>(w));
    for (int x = 0; x < w; ++x) {
        const double d = flip ? (w - 1 - x) : x;
        const double s = std::clamp(x0 + (d + 0.5) * cw / w - 0.5, 0.0, src.w - 1.0);
        const int i = std::min(static_cast<int>(s), src.w - 2);
        xi[static_cast<size_t>(x)] = i;
        xf[static_cast<size_t>(x)] = static_cast<float>(s - i);
    }
    for (int y = 0; y < h; ++y) {
        const double s = std::clamp(y0 + (y + 0.5) * ch / h - 0.5, 0.0, src.h - 1.0);
        const int j = std::min(static_cast<int>(s), src.h - 2);
        const float fy = static_cast<float>(s - j);
        const float* r0 = src.at(0, j);
        const float* r1 = src.at(0, j + 1);
        float* o = out.at(0, y);
        for (int x = 0; x < w; ++x) {
            const int i3 = xi[static_cast<size_t>(x)] * 3;
            const float fx = xf[static_cast<size_t>(x)];
            for (int c = 0; c < 3; ++c) {
                const float a = r0[i3 + c] + (r0[i3 + 3 + c] - r0[i3 + c]) * fx;
                const float b = r1[i3 + c] + (r1[i3 + 3 + c] - r1[i3 + c]) * fx;
                o[x * 3 + c] = a + (b - a) * fy;
            }
        }
    }
    return out;
}

}  // namespace gen
}  // namespace data
