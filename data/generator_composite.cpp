// One sample: the original's image-size mix, the strategy's effects, the layout (piece size,
// slider at the left, gap at the same height, fake gaps that overlap nothing), the drawing order
// (fakes and gap on the picture, then the slider cut from the clean picture), conversion to
// gray/RGB and the letterbox onto the model canvas with the labels mapped as MODEL_SPEC §3.1.
#include <algorithm>
#include <cmath>

#include "data/generator.h"
#include "runtime/error.h"

namespace data {

const char* strategy_name(int s) {
    static const char* kNames[kStrategyCount] = {
        "none", "rotation", "perlin", "highlight", "confusing_gap", "hollow_center", "gap_edge_highlight", "combined"};
    return s >= 0 && s < kStrategyCount ? kNames[s] : "?";
}

int strategy_of_index(uint64_t index) {
    // Cumulative counts per 100 CAPTCHAs of one background (MODEL_SPEC §4.1).
    static const int kEnd[kStrategyCount] = {30, 40, 45, 55, 75, 80, 90, 100};
    const int k = static_cast<int>(index % kSamplesPerBackground);
    int s = 0;
    while (k >= kEnd[s]) ++s;
    return s;
}

namespace {

using gen::Image;
using gen::Rng;

constexpr uint64_t kStreamLayout = 0x1A, kStreamSlider = 0x51;
constexpr double kDeg = 3.14159265358979323846 / 180.0;

struct Effects {
    bool rotation = false, perlin = false, highlight = false, confusing = false, hollow = false, edge_highlight = false;
    double rot_lo = 0.5, rot_hi = 1.5;  // degrees
};

Effects effects_of(int strategy, Rng& r) {
    Effects e;
    switch (strategy) {
        case kStrategyRotation: e.rotation = true; break;
        case kStrategyPerlin: e.perlin = true; break;
        case kStrategyHighlight: e.highlight = true; break;
        case kStrategyConfusingGap: e.confusing = true; break;
        case kStrategyHollowCenter: e.hollow = true; break;
        case kStrategyGapEdgeHighlight: e.edge_highlight = true; break;
        case kStrategyCombined: {
            // Two or three distinct effects; highlight and edge highlight exclude each other.
            const int n = r.randint(2, 3);
            for (int picked = 0; picked < n;) {
                bool* f[6] = {&e.rotation, &e.perlin, &e.highlight, &e.confusing, &e.hollow, &e.edge_highlight};
                const int k = r.randint(0, 5);
                if (*f[k] || (k == 2 && e.edge_highlight) || (k == 5 && e.highlight)) continue;
                *f[k] = true;
                ++picked;
            }
            e.rot_hi = 1.8;
            break;
        }
        default: break;
    }
    return e;
}

// 30 %: one of the common 2:1 sizes; 70 %: w in 280..480, h in 140..240, aspect 1.8..2.4.
void pick_size(Rng& r, int* w, int* h) {
    static const int kCommon[4][2] = {{320, 160}, {360, 180}, {400, 200}, {384, 192}};
    if (r.uniform() < 0.3) {
        const int k = r.randint(0, 3);
        *w = kCommon[k][0];
        *h = kCommon[k][1];
        return;
    }
    do {
        *w = r.randint(280, 480);
        *h = r.randint(140, 240);
    } while (*w < 1.8 * *h || *w > 2.4 * *h);
}

bool boxes_overlap(float ax, float ay, float ae, float bx, float by, float be, float margin) {
    return std::fabs(ax - bx) < ae + be + margin && std::fabs(ay - by) < ae + be + margin;
}

// 1-2 fake gaps: another shape, the same shape turned 8-30 degrees, or the same shape scaled;
// fainter than the true gap; never overlapping the gap, the slider or each other.
void place_fakes(GenSample& s, Rng& r, int w, int h) {
    const int want = r.randint(1, 2);
    const float ge = piece_extent(s.piece), se = 0.5f * s.piece.size;
    int n = 0;
    for (int attempt = 0; attempt < 60 && n < want; ++attempt) {
        PieceShape p = s.piece;
        const int variant = r.randint(0, 2);
        if (variant == 0) {
            p = gen::random_piece(r, s.piece.size);
            p.hollow = s.piece.hollow;
        } else if (variant == 1) {
            p.angle_rad = static_cast<float>((r.uniform() < 0.5 ? -1 : 1) * r.uniform(8, 30) * kDeg);
        } else {
            p.size = std::max(36.0f, s.piece.size * static_cast<float>(r.uniform() < 0.5 ? r.uniform(0.75, 0.92)
                                                                                         : r.uniform(1.08, 1.2)));
            p.angle_rad = 0;
            p.hollow *= p.size / s.piece.size;
        }
        const float fe = piece_extent(p);
        if (2 * fe + 4 >= std::min(w, h)) continue;
        const float fx = static_cast<float>(r.uniform(fe + 2, w - fe - 2));
        const float fy = static_cast<float>(r.uniform(fe + 2, h - fe - 2));
        bool ok = !boxes_overlap(fx, fy, fe, s.gap_x, s.gap_y, ge, 3) &&
                  !boxes_overlap(fx, fy, fe, s.slider_x, s.slider_y, se, 3);
        for (int k = 0; k < n && ok; ++k)
            ok = !boxes_overlap(fx, fy, fe, s.fake_x[k], s.fake_y[k], piece_extent(s.fake_piece[k]), 3);
        if (!ok) continue;
        s.fake_piece[n] = p;
        s.fake_x[n] = fx;
        s.fake_y[n] = fy;
        ++n;
    }
    s.label.num_fakes = n;
}

// Piece, rotation, slider and gap positions (original frame). The slider and the gap share
// y and the fractional part of x, so the slider's content is an exact pixel shift of the gap's.
int layout(GenSample& s, const Effects& e, Rng& r, int w, int h) {
    const int size = r.randint(46, 64);
    s.piece = gen::random_piece(r, static_cast<float>(size));
    if (e.hollow) s.piece.hollow = 0.5f * size / (1 + 2 * s.piece.knob_ratio) * static_cast<float>(r.uniform(0.3, 0.5));
    if (e.rotation)
        s.piece.angle_rad = static_cast<float>((r.uniform() < 0.5 ? -1 : 1) * r.uniform(e.rot_lo, e.rot_hi) * kDeg);
    const float ext = piece_extent(s.piece);
    s.slider_x = static_cast<float>(r.uniform(0.5 * size, 1.5 * size));
    s.slider_y = static_cast<float>(r.uniform(ext + 1, h - ext - 1));
    const int lo = static_cast<int>(std::ceil(size + 10.0f));
    const int hi = static_cast<int>(std::floor(w - 1 - ext - s.slider_x));
    SF_CHECK(hi >= lo, "generator: no room for the gap in a %dx%d image", w, h);
    const int shift = r.randint(lo, hi);
    s.gap_x = s.slider_x + static_cast<float>(shift);
    s.gap_y = s.slider_y;
    return shift;
}

uint8_t to_u8(float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f) + 0.5f); }  // round half up

std::vector<uint8_t> to_rgb8(const Image& im) {
    std::vector<uint8_t> out(im.rgb.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_u8(im.rgb[i]);
    return out;
}

// Bilinear resize (cv2 INTER_LINEAR pixel-centre convention) of src (h, w, C) into the centred
// rectangle [pad_left, pad_left+rw) x [pad_top, pad_top+rh) of a (.., W, C) canvas.
template <int C>
void letterbox(const uint8_t* src, int w, int h, int rw, int rh, int pad_left, int pad_top, int W, uint8_t* canvas) {
    std::vector<int> xi(static_cast<size_t>(rw));
    std::vector<float> xf(static_cast<size_t>(rw));
    for (int x = 0; x < rw; ++x) {
        const double sx = std::clamp((x + 0.5) * w / rw - 0.5, 0.0, w - 1.0);
        const int i = std::min(static_cast<int>(sx), w - 2);
        xi[static_cast<size_t>(x)] = i * C;
        xf[static_cast<size_t>(x)] = static_cast<float>(sx - i);
    }
    std::vector<float> row(static_cast<size_t>(w) * C);
    for (int y = 0; y < rh; ++y) {
        const double sy = std::clamp((y + 0.5) * h / rh - 0.5, 0.0, h - 1.0);
        const int j = std::min(static_cast<int>(sy), h - 2);
        const float fy = static_cast<float>(sy - j);
        const uint8_t* r0 = src + static_cast<size_t>(j) * w * C;
        const uint8_t* r1 = r0 + static_cast<size_t>(w) * C;
        for (int k = 0; k < w * C; ++k) row[static_cast<size_t>(k)] = r0[k] + (r1[k] - r0[k]) * fy;  // vertical pass
        uint8_t* o = canvas + (static_cast<size_t>(y + pad_top) * W + pad_left) * C;
        for (int x = 0; x < rw; ++x) {
            const float* a = &row[static_cast<size_t>(xi[static_cast<size_t>(x)])];
            const float fx = xf[static_cast<size_t>(x)];
            for (int c = 0; c < C; ++c) o[x * C + c] = static_cast<uint8_t>(a[c] + (a[C + c] - a[c]) * fx + 0.5f);
        }
    }
}

// The sample's view of its background picture: a random window with the sample's aspect
// (70-100 % zoom, random mirror), resized to w x h.
Image sample_view(const Image& src, Rng& r, int w, int h) {
    const double zoom = r.uniform(0.7, 1.0), aspect = static_cast<double>(w) / h;
    double cw = gen::kSourceW * zoom, ch = cw / aspect;
    if (ch > gen::kSourceH * zoom) ch = gen::kSourceH * zoom, cw = ch * aspect;
    const double x0 = r.uniform(0, gen::kSourceW - cw), y0 = r.uniform(0, gen::kSourceH - ch);
    return gen::crop_resize(src, x0, y0, cw, ch, w, h, r.uniform() < 0.5);
}

// 8-bit RGB, or gray = round(0.299 R + 0.587 G + 0.114 B) of the 8-bit RGB, exactly, in integers
// (half rounds up).
std::vector<uint8_t> to_pixels(const Image& im, int channels) {
    std::vector<uint8_t> px(static_cast<size_t>(im.w) * im.h * channels);
    if (channels == 3) {
        for (size_t i = 0; i < px.size(); ++i) px[i] = to_u8(im.rgb[i]);
        return px;
    }
    for (size_t i = 0; i < px.size(); ++i) {
        const int r = to_u8(im.rgb[i * 3]), g = to_u8(im.rgb[i * 3 + 1]), b = to_u8(im.rgb[i * 3 + 2]);
        px[i] = static_cast<uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
    }
    return px;
}

// Letterbox (§3.1): scale = min(W/w, H/h), Python round (half to even), centred paste on 255;
// fills s.pixels and maps the original-frame geometry of s into s.label.
void letterbox_sample(GenSample& s, const GenConfig& cfg, const std::vector<uint8_t>& px) {
    const int w = s.orig_w, h = s.orig_h;
    const double scale = std::min(static_cast<double>(cfg.width) / w, static_cast<double>(cfg.height) / h);
    const int rw = static_cast<int>(std::nearbyint(w * scale)), rh = static_cast<int>(std::nearbyint(h * scale));
    s.scale = static_cast<float>(scale);
    s.pad_left = (cfg.width - rw) / 2;
    s.pad_top = (cfg.height - rh) / 2;
    s.pixels.assign(static_cast<size_t>(cfg.width) * cfg.height * cfg.channels, 255);
    if (cfg.channels == 3)
        letterbox<3>(px.data(), w, h, rw, rh, s.pad_left, s.pad_top, cfg.width, s.pixels.data());
    else
        letterbox<1>(px.data(), w, h, rw, rh, s.pad_left, s.pad_top, cfg.width, s.pixels.data());

    auto mx = [&](double x) { return static_cast<float>(scale * x + s.pad_left); };
    auto my = [&](double y) { return static_cast<float>(scale * y + s.pad_top); };
    Label& l = s.label;
    l.gap_x = mx(s.gap_x);
    l.gap_y = my(s.gap_y);
    l.slider_x = mx(s.slider_x);
    l.slider_y = my(s.slider_y);
    l.angle_rad = s.piece.angle_rad;
    for (int k = 0; k < l.num_fakes; ++k) {
        l.fake_x[k] = mx(s.fake_x[k]);
        l.fake_y[k] = my(s.fake_y[k]);
    }
    l.rect_x0 = static_cast<float>(s.pad_left);
    l.rect_y0 = static_cast<float>(s.pad_top);
    l.rect_x1 = static_cast<float>(s.pad_left + rw);
    l.rect_y1 = static_cast<float>(s.pad_top + rh);
}

}  // namespace

GenSample generate_sample(const GenConfig& cfg, uint64_t index, GenDebug* debug) {
    SF_CHECK(cfg.channels == 1 || cfg.channels == 3, "generator: channels must be 1 or 3, got %d", cfg.channels);
    SF_CHECK(cfg.width >= 64 && cfg.height >= 32, "generator: canvas %dx%d is smaller than 64x32", cfg.width,
             cfg.height);
    GenSample s;
    s.bg_id = static_cast<int>(index / kSamplesPerBackground);
    s.strategy = strategy_of_index(index);
    Rng r(cfg.seed, index, kStreamLayout);
    pick_size(r, &s.orig_w, &s.orig_h);
    const Effects e = effects_of(s.strategy, r);
    const Image clean = sample_view(gen::background_source(cfg.seed, s.bg_id), r, s.orig_w, s.orig_h);

    const int shift = layout(s, e, r, s.orig_w, s.orig_h);
    if (e.confusing) place_fakes(s, r, s.orig_w, s.orig_h);
    const gen::GapMode mode = e.highlight        ? gen::GapMode::Bright
                              : e.edge_highlight ? gen::GapMode::EdgeHighlight
                                                 : gen::GapMode::Dark;
    const gen::GapLook look = gen::random_gap_look(r, mode);
    Image im = clean;
    for (int k = 0; k < s.label.num_fakes; ++k) {
        gen::GapLook fl = look;
        fl.strength = static_cast<float>(r.uniform(0.45, 0.85));
        gen::draw_gap(im, s.fake_piece[k], s.fake_x[k], s.fake_y[k], fl);
    }
    gen::draw_gap(im, s.piece, s.gap_x, s.gap_y, look);
    PieceShape slider_shape = s.piece;
    slider_shape.angle_rad = 0;  // rotation applies to the gap only (as the original)
    Rng rs(cfg.seed, index, kStreamSlider);
    gen::draw_slider(im, clean, slider_shape, s.slider_x, s.slider_y, shift, gen::random_slider_look(rs, e.perlin), rs);

    if (debug) {
        debug->clean = to_rgb8(clean);
        debug->final = to_rgb8(im);
    }
    letterbox_sample(s, cfg, to_pixels(im, cfg.channels));
    return s;
}

}  // namespace data
