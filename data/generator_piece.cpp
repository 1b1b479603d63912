// Puzzle pieces: the knobbed-square signed distance, random shapes, the shaded gap and the
// slider piece. Shading follows the original's lighting modules (distance-to-edge falloffs,
// directional light from the top-left, a tanh edge band), evaluated from the analytic distance
// instead of a distance transform; the tanh band comes from a table.
#include <algorithm>
#include <array>
#include <cmath>

#include "data/generator.h"

namespace data {

float piece_sdf(const PieceShape& p, float dx, float dy) { return gen::piece_sdf(gen::prepare_piece(p), dx, dy); }

float piece_extent(const PieceShape& p) {
    return 0.5f * p.size * (std::fabs(std::cos(p.angle_rad)) + std::fabs(std::sin(p.angle_rad)));
}

namespace gen {

namespace {

inline float len2(float x, float y) { return std::sqrt(x * x + y * y); }

// The original's edge band: (1 - tanh((t - 0.5) * 8)) / 2 for t = distance / width in [0, 1].
float edge_band(float t) {
    static const auto table = [] {
        std::array<float, 257> tb{};
        for (int i = 0; i <= 256; ++i)
            tb[static_cast<size_t>(i)] = 0.5f * (1.0f - std::tanh((i / 256.0f - 0.5f) * 8.0f));
        return tb;
    }();
    if (t >= 1) return 0;
    const float f = std::max(t, 0.0f) * 256;
    const int i = static_cast<int>(f);
    return table[static_cast<size_t>(i)] +
           (table[static_cast<size_t>(i) + 1] - table[static_cast<size_t>(i)]) * (f - i);
}

struct Box {
    int x0, y0, x1, y1;
};
Box piece_box(const Image& im, const PieceShape& p, float cx, float cy) {
    const float r = piece_extent(p) + 2;
    return {std::max(0, static_cast<int>(std::floor(cx - r))), std::max(0, static_cast<int>(std::floor(cy - r))),
            std::min(im.w, static_cast<int>(std::ceil(cx + r))), std::min(im.h, static_cast<int>(std::ceil(cy + r)))};
}

}  // namespace

PreparedPiece prepare_piece(const PieceShape& p) {
    PreparedPiece g;
    g.c = std::cos(p.angle_rad);
    g.s = std::sin(p.angle_rad);
    const float body = p.size / (1 + 2 * p.knob_ratio);
    g.half = body / 2;
    g.knob = body * p.knob_ratio;
    g.hollow = p.hollow;
    for (int i = 0; i < 4; ++i) g.edges[i] = p.edges[i];
    return g;
}

float piece_sdf(const PreparedPiece& g, float dx, float dy) {
    // Screen offset -> piece frame (the piece is rotated counter-clockwise as displayed, y down).
    const float u = dx * g.c - dy * g.s, v = dx * g.s + dy * g.c;
    const float qx = std::fabs(u) - g.half, qy = std::fabs(v) - g.half;
    float sd = len2(std::max(qx, 0.0f), std::max(qy, 0.0f)) + std::min(std::max(qx, qy), 0.0f);
    static const float kx[4] = {0, 1, 0, -1}, ky[4] = {-1, 0, 1, 0};  // top, right, bottom, left
    for (int i = 0; i < 4; ++i) {
        if (g.edges[i] == Edge::Flat) continue;
        const float c = len2(u - kx[i] * g.half, v - ky[i] * g.half) - g.knob;
        sd = g.edges[i] == Edge::Tab ? std::min(sd, c) : std::max(sd, -c);
    }
    if (g.hollow > 0) sd = std::max(sd, g.hollow - len2(u, v));
    return sd;
}

PieceShape random_piece(Rng& r, float size) {
    PieceShape p;
    p.size = size;
    p.knob_ratio = static_cast<float>(r.uniform(0.17, 0.24));
    int knobs = 0;
    while (knobs == 0) {
        knobs = 0;
        for (Edge& e : p.edges) {
            e = static_cast<Edge>(r.randint(0, 2));
            knobs += e != Edge::Flat;
        }
    }
    return p;
}

GapLook random_gap_look(Rng& r, GapMode mode) {
    GapLook l;
    l.mode = mode;
    if (mode == GapMode::Bright) {
        l.base = static_cast<float>(r.uniform(30, 55));
        l.edge = static_cast<float>(r.uniform(30, 60));
        l.directional = static_cast<float>(r.uniform(15, 30));
    } else {
        l.base = static_cast<float>(r.uniform(25, 50));
        l.edge = static_cast<float>(r.uniform(15, 40));
        l.directional = static_cast<float>(r.uniform(8, 22));
    }
    l.rim_light = static_cast<float>(r.uniform(50, 100));
    l.rim_dark = static_cast<float>(r.uniform(25, 55));
    l.rim_width = static_cast<float>(r.uniform(1.6, 3.0));
    l.edge_opacity = static_cast<float>(r.uniform(0.35, 0.7));
    l.edge_width = static_cast<float>(r.uniform(3, 6));
    return l;
}

namespace {

// A light 3x3 binomial blur inside the solid gap (the original's depth-of-field blur): writes
// the shaded box back into im, blurred where the coverage is above one half.
void blur_inside(Image& im, const Box& b, const std::vector<float>& shaded, const std::vector<float>& alpha) {
    const int bw = b.x1 - b.x0, bh = b.y1 - b.y0;
    for (int y = b.y0; y < b.y1; ++y)
        for (int x = b.x0; x < b.x1; ++x) {
            const int ly = y - b.y0, lx = x - b.x0;
            const size_t k = static_cast<size_t>(ly) * bw + lx;
            float* dst = im.at(x, y);
            if (alpha[k] <= 0.5f || lx == 0 || ly == 0 || lx == bw - 1 || ly == bh - 1) {
                for (int ch = 0; ch < 3; ++ch) dst[ch] = shaded[k * 3 + ch];
                continue;
            }
            for (int ch = 0; ch < 3; ++ch) {
                float s = 0;
                for (int j = -1; j <= 1; ++j)
                    for (int i = -1; i <= 1; ++i)
                        s += shaded[(k + static_cast<size_t>(j * bw + i)) * 3 + ch] *
                             ((2 - std::abs(i)) * (2 - std::abs(j)));
                dst[ch] = s / 16;
            }
        }
}

}  // namespace

void draw_gap(Image& im, const PieceShape& p, float cx, float cy, const GapLook& look) {
    const PreparedPiece g = prepare_piece(p);
    const Box b = piece_box(im, p, cx, cy);
    const int bw = b.x1 - b.x0, bh = b.y1 - b.y0;
    if (bw <= 0 || bh <= 0) return;
    const float inner = std::max(g.half, 1.0f);  // normalises the edge-to-centre falloff
    std::vector<float> shaded(static_cast<size_t>(bw) * bh * 3), alpha(static_cast<size_t>(bw) * bh);
    for (int y = b.y0; y < b.y1; ++y)
        for (int x = b.x0; x < b.x1; ++x) {
            const size_t k = static_cast<size_t>(y - b.y0) * bw + (x - b.x0);
            const float dx = x + 0.5f - cx, dy = y + 0.5f - cy;
            const float sd = piece_sdf(g, dx, dy);
            const float a = std::clamp(0.5f - sd, 0.0f, 1.0f);
            const float* src = im.at(x, y);
            float* o = &shaded[k * 3];
            alpha[k] = a;
            if (a <= 0) {
                o[0] = src[0], o[1] = src[1], o[2] = src[2];
                continue;
            }
            const float d = std::max(-sd, 0.0f);
            const float dn = std::min(d / inner, 1.0f);
            const float c = (dx + dy) / (1.41421356f * (len2(dx, dy) + 1e-3f));  // +1 bottom-right, -1 top-left
            const float rim = std::max(0.0f, 1 - d / look.rim_width);
            // Darkening scales with the pixel (0.35..1 x) so dark backgrounds keep their texture.
            float delta, white = 0, rim_delta = 0;
            if (look.mode == GapMode::Bright) {
                delta = look.base + look.edge * (1 - dn) + look.directional * std::fabs(c);
            } else {
                delta = -(look.base + look.directional * std::fabs(c));
                if (look.mode == GapMode::Dark) {
                    delta -= look.edge * (1 - dn);
                    rim_delta = c > 0 ? look.rim_light * c : look.rim_dark * c;  // lit wall / shadowed wall
                } else {
                    white = look.edge_opacity * edge_band(d / look.edge_width);
                }
            }
            white *= look.strength * a;
            for (int ch = 0; ch < 3; ++ch) {
                const float dk = delta < 0 ? delta * (0.35f + 0.65f / 255 * src[ch]) : delta;
                const float dd = ((1 - rim) * dk + rim * rim_delta) * look.strength * a;
                const float v = std::clamp(src[ch] + dd, 0.0f, 255.0f);
                o[ch] = v + (255 - v) * white;
            }
        }
    blur_inside(im, b, shaded, alpha);
}

SliderLook random_slider_look(Rng& r, bool perlin) {
    SliderLook l;
    l.edge_opacity = static_cast<float>(r.uniform(0.5, 0.7));
    l.edge_width = static_cast<float>(r.uniform(3.5, 6));
    l.directional = static_cast<float>(r.uniform(0.2, 0.4));
    if (perlin) {
        l.noise_amp = static_cast<float>(r.uniform(25, 55));
        l.noise_cell = static_cast<float>(r.uniform(5, 12));
    }
    return l;
}

void draw_slider(Image& im, const Image& clean, const PieceShape& p, float sx, float sy, int shift_x,
                 const SliderLook& look, Rng& r) {
    const PreparedPiece g = prepare_piece(p);
    const Box b = piece_box(im, p, sx, sy);
    const int bw = b.x1 - b.x0, bh = b.y1 - b.y0;
    if (bw <= 0 || bh <= 0) return;
    std::vector<float> noise(static_cast<size_t>(bw) * bh, 0.0f);
    if (look.noise_amp > 0) {
        add_value_noise(noise, bw, bh, look.noise_cell, look.noise_amp, r);
        add_value_noise(noise, bw, bh, look.noise_cell / 2, look.noise_amp / 2, r);
    }
    for (int y = b.y0; y < b.y1; ++y)
        for (int x = b.x0; x < b.x1; ++x) {
            const float dx = x + 0.5f - sx, dy = y + 0.5f - sy;
            const float sd = piece_sdf(g, dx, dy);
            const float a = std::clamp(0.5f - sd, 0.0f, 1.0f);
            const int xs = x + shift_x;
            if (a <= 0 || xs < 0 || xs >= clean.w) continue;
            const float d = std::max(-sd, 0.0f);
            const float c = (dx + dy) / (1.41421356f * (len2(dx, dy) + 1e-3f));
            const float dir = std::min(1.0f, c * c * std::fabs(c) * 1.1f);  // top-left and bottom-right
            const float band = edge_band(d / look.edge_width);
            const float op = std::min(look.edge_opacity * band * (1 + 0.5f * look.directional * dir), 0.85f);
            const float n = noise[static_cast<size_t>(y - b.y0) * bw + (x - b.x0)];
            const float* src = clean.at(xs, y);
            float* dst = im.at(x, y);
            for (int ch = 0; ch < 3; ++ch) {
                const float v = std::clamp(src[ch] + n, 0.0f, 255.0f);
                const float lit = v + (255 - v) * op;
                dst[ch] += (lit - dst[ch]) * a;
            }
        }
}

}  // namespace gen
}  // namespace data
