// Decoding (MODEL_SPEC §1.7, §8) and the validation metrics of §3.5. CPU reference; float
// arithmetic for coordinates as the original's float32 tensors.
#include "model/decode.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace model {

namespace {

// torch.argmax order: the first maximum in row-major order; NaN beats everything (the first NaN).
bool better(float v, float best) { return (std::isnan(v) && !std::isnan(best)) || v > best; }

struct Peak {
    int row = 0, col = 0;
    float score = 0;
};

// One object's view of one sample: heatmap (h,w), offset channels (du, dv) at stride 4 floats.
struct ObjectMaps {
    const float* heat;    // (h,w)
    const float* offset;  // (h,w,4), read at channels ch, ch+1
    int ch;
    const float* valid_min;  // (h,w) or null
    int h, w, stride;

    // The original masks with masked_fill((1 - valid_min) > 0.01, -inf): for a 0/1 mask, the
    // cells with valid_min == 0.
    bool masked(int i) const { return valid_min && 1.0f - valid_min[i] > 0.01f; }
    float value(int i) const { return masked(i) ? -INFINITY : heat[i]; }

    // Argmax over rows r0..r1 (inclusive), all columns.
    Peak argmax(int r0, int r1) const {
        Peak p;
        int best = -1;
        for (int i = r0 * w; i < (r1 + 1) * w; ++i)
            if (best < 0 || better(value(i), value(best))) best = i;
        p.row = best / w, p.col = best % w;
        p.score = value(best);
        return p;
    }

    // x = (col + 0.5 + du) * stride, y likewise, clamped to the letterbox; offsets are multiplied
    // by the valid mask as the original does (0 in masked cells).
    void coords(const Peak& p, float* x, float* y) const {
        const int i = p.row * w + p.col;
        const float m = valid_min ? valid_min[i] : 1.0f;
        const float du = offset[4 * i + ch] * m, dv = offset[4 * i + ch + 1] * m;
        *x = std::clamp((p.col + 0.5f + du) * stride, 0.0f, float(w * stride));
        *y = std::clamp((p.row + 0.5f + dv) * stride, 0.0f, float(h * stride));
    }
};

}  // namespace

void decode_ref(int n, int h, int w, int stride, const float* heat_gap, const float* heat_slider, const float* offset,
                const float* valid_min, Decoded* out) {
    SF_CHECK(n > 0 && h > 0 && w > 0 && stride > 0, "bad decode shape (%d,%d,%d) stride %d", n, h, w, stride);
    SF_CHECK(heat_gap && heat_slider && offset && out, "null decode input");
    const size_t hw = static_cast<size_t>(h) * w;
    for (int b = 0; b < n; ++b) {
        const float* vm = valid_min ? valid_min + b * hw : nullptr;
        const ObjectMaps gap{heat_gap + b * hw, offset + 4 * b * hw, 0, vm, h, w, stride};
        const ObjectMaps slider{heat_slider + b * hw, offset + 4 * b * hw, 2, vm, h, w, stride};
        Decoded& d = out[b];
        const Peak pg = gap.argmax(0, h - 1), ps = slider.argmax(0, h - 1);
        gap.coords(pg, &d.gap_x, &d.gap_y);
        slider.coords(ps, &d.slider_x, &d.slider_y);
        d.gap_score = pg.score;
        d.slider_score = ps.score;

        // Row alignment: the stronger object (slider on ties) fixes the row; the other is
        // re-searched in rows r-1..r+1. torch.round is round-half-to-even, as nearbyint.
        const bool gap_ref = pg.score > ps.score;
        const float y_ref = gap_ref ? d.gap_y : d.slider_y;
        const float r_f = std::nearbyint(y_ref / float(stride) - 0.5f);
        const int r = std::isnan(r_f) ? 0 : static_cast<int>(std::clamp(r_f, 0.0f, float(h - 1)));
        const int r0 = std::max(r - 1, 0), r1 = std::min(r + 1, h - 1);
        if (gap_ref)
            slider.coords(slider.argmax(r0, r1), &d.slider_x, &d.slider_y);
        else
            gap.coords(gap.argmax(r0, r1), &d.gap_x, &d.gap_y);
    }
}

SampleError sample_error(const Decoded& d, const data::Label& l) {
    SampleError e;
    e.gap = 0.5 * (std::fabs(double(d.gap_x) - l.gap_x) + std::fabs(double(d.gap_y) - l.gap_y));
    e.slider = 0.5 * (std::fabs(double(d.slider_x) - l.slider_x) + std::fabs(double(d.slider_y) - l.slider_y));
    e.combined = 0.5 * (e.gap + e.slider);
    return e;
}

void Metrics::add(const Decoded& d, const data::Label& l) {
    const SampleError e = sample_error(d, l);
    ++n_;
    sum_ += e.combined;
    sum_sq_ += e.combined * e.combined;
    sum_gap_ += e.gap;
    sum_slider_ += e.slider;
    hit2_ += e.combined <= 2.0;
    hit5_ += e.combined <= 5.0;
}

Metrics Metrics::from_sums(size_t n, size_t hit2, size_t hit5, double sum, double sum_sq, double sum_gap,
                           double sum_slider) {
    Metrics m;
    m.n_ = n;
    m.hit2_ = hit2;
    m.hit5_ = hit5;
    m.sum_ = sum;
    m.sum_sq_ = sum_sq;
    m.sum_gap_ = sum_gap;
    m.sum_slider_ = sum_slider;
    return m;
}

void Metrics::merge(const Metrics& o) {
    n_ += o.n_;
    hit2_ += o.hit2_;
    hit5_ += o.hit5_;
    sum_ += o.sum_;
    sum_sq_ += o.sum_sq_;
    sum_gap_ += o.sum_gap_;
    sum_slider_ += o.sum_slider_;
}

// An empty accumulator reports 0 everywhere rather than NaN.
double Metrics::mae_px() const { return n_ ? sum_ / n_ : 0.0; }
double Metrics::rmse_px() const { return n_ ? std::sqrt(sum_sq_ / n_) : 0.0; }
double Metrics::gap_mae() const { return n_ ? sum_gap_ / n_ : 0.0; }
double Metrics::slider_mae() const { return n_ ? sum_slider_ / n_ : 0.0; }
double Metrics::hit_le_2px() const { return n_ ? 100.0 * hit2_ / n_ : 0.0; }
double Metrics::hit_le_5px() const { return n_ ? 100.0 * hit5_ / n_ : 0.0; }

}  // namespace model
