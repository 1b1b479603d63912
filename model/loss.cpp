// CPU reference of the training loss (MODEL_SPEC §2, docs/LOSS.md): applies the heads'
// activations to the logits, renders the targets from the labels, evaluates the terms
// (model/loss_terms.cpp), assembles the total with the original's NaN/Inf rule, and
// back-propagates d total / d logits through the activations. Everything in double.
#include "model/loss.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/loss_detail.h"
#include "runtime/error.h"

namespace model {

const char* loss_variant_name(LossVariant v) {
    switch (v) {
        case LossVariant::Sider: return "sider";
        case LossVariant::Corrected: return "corrected";
    }
    return "?";
}

LossVariant parse_loss_variant(const std::string& s) {
    if (s == "sider") return LossVariant::Sider;
    if (s == "corrected") return LossVariant::Corrected;
    SF_FAIL("unknown loss variant '%s' (expected 'sider' or 'corrected')", s.c_str());
}

namespace {

using detail::ActGrads;
using detail::LossInputs;

constexpr double kNormEps = 1e-12;  // F.normalize eps of the angle head and of the angle loss

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// F.normalize over 2 channels: y = x / max(||x||, eps).
void normalize2(const double* x, double* y) {
    const double n = std::max(std::hypot(x[0], x[1]), kNormEps);
    y[0] = x[0] / n;
    y[1] = x[1] / n;
}

// Backward of normalize2: gx from gy. Where ||x|| >= eps: (gy - y (y.gy)) / ||x||; below eps the
// clamp passes no gradient to the norm and the map is x / eps.
void normalize2_backward(const double* x, const double* gy, double* gx) {
    const double n = std::hypot(x[0], x[1]);
    if (!(n >= kNormEps)) {
        gx[0] = gy[0] / kNormEps;
        gx[1] = gy[1] / kNormEps;
        return;
    }
    const double y0 = x[0] / n, y1 = x[1] / n, d = y0 * gy[0] + y1 * gy[1];
    gx[0] = (gy[0] - y0 * d) / n;
    gx[1] = (gy[1] - y1 * d) / n;
}

template <class T>
void check_inputs(const LossConfig& cfg, const HeadLogits<T>& z, const T* valid, const data::Label* labels) {
    SF_CHECK(z.n > 0 && z.h > 0 && z.w > 0, "bad loss grid (%d,%d,%d)", z.n, z.h, z.w);
    SF_CHECK(z.gap && z.slider && z.offset && z.angle && valid && labels, "null loss input");
    SF_CHECK(cfg.stride > 0 && cfg.sigma > 0 && cfg.y_tau > 0, "bad loss config: stride %d sigma %g tau %g", cfg.stride,
             cfg.sigma, cfg.y_tau);
    for (int b = 0; b < z.n; ++b) {
        const data::Label& l = labels[b];
        SF_CHECK(l.num_fakes >= 0 && l.num_fakes <= data::kMaxFakeGaps, "label %d: num_fakes %d outside 0..%d", b,
                 l.num_fakes, data::kMaxFakeGaps);
        bool finite = std::isfinite(l.gap_x) && std::isfinite(l.gap_y) && std::isfinite(l.slider_x) &&
                      std::isfinite(l.slider_y) && std::isfinite(l.angle_rad);
        for (int k = 0; k < l.num_fakes; ++k)
            finite = finite && std::isfinite(l.fake_x[k]) && std::isfinite(l.fake_y[k]);
        SF_CHECK(finite, "label %d: non-finite coordinate or angle", b);
    }
}

template <class T>
LossInputs prepare(const LossConfig& cfg, const HeadLogits<T>& z, const T* valid, const data::Label* labels) {
    LossInputs in;
    in.cfg = &cfg;
    in.labels = labels;
    in.n = z.n, in.h = z.h, in.w = z.w;
    const size_t cells = static_cast<size_t>(z.n) * z.h * z.w;
    in.pg.resize(cells), in.ps.resize(cells), in.off.resize(4 * cells), in.ang.resize(2 * cells);
    in.m.resize(cells), in.yg.resize(cells), in.ys.resize(cells);
    for (size_t k = 0; k < cells; ++k) {
        in.pg[k] = sigmoid(z.gap[k]);
        in.ps[k] = sigmoid(z.slider[k]);
        in.m[k] = valid[k];
        for (int c = 0; c < 4; ++c) in.off[4 * k + c] = 0.5 * std::tanh(double(z.offset[4 * k + c]));
        const double a[2] = {double(z.angle[2 * k]), double(z.angle[2 * k + 1])};
        double a1[2];
        normalize2(a, a1);               // the head's F.normalize
        normalize2(a1, &in.ang[2 * k]);  // the loss normalises again
    }
    for (int b = 0; b < z.n; ++b) {
        const data::Label& l = labels[b];
        const size_t base = static_cast<size_t>(b) * z.h * z.w;
        in.gap.push_back(detail::object_cell(l.gap_x, l.gap_y, z.h, z.w, cfg.stride));
        in.slider.push_back(detail::object_cell(l.slider_x, l.slider_y, z.h, z.w, cfg.stride));
        render_heatmap_target(z.h, z.w, l.gap_x, l.gap_y, cfg.sigma, cfg.stride, &in.yg[base]);
        render_heatmap_target(z.h, z.w, l.slider_x, l.slider_y, cfg.sigma, cfg.stride, &in.ys[base]);
    }
    return in;
}

// d total / d activations -> d total / d logits (overwrites grads). A cell that receives no
// gradient gets exactly 0, also where its logit is NaN (autograd would not reach it either).
template <class T>
void backward_activations(const HeadLogits<T>& z, const LossInputs& in, const ActGrads& g, const HeadGrads<T>& out) {
    const size_t cells = static_cast<size_t>(z.n) * z.h * z.w;
    auto chain = [](double up, double local) { return up == 0 ? 0.0 : up * local; };
    for (size_t k = 0; k < cells; ++k) {
        out.gap[k] = static_cast<T>(chain(g.pg[k], in.pg[k] * (1 - in.pg[k])));
        out.slider[k] = static_cast<T>(chain(g.ps[k], in.ps[k] * (1 - in.ps[k])));
        for (int c = 0; c < 4; ++c) {
            const double t = std::tanh(double(z.offset[4 * k + c]));
            out.offset[4 * k + c] = static_cast<T>(chain(g.off[4 * k + c], 0.5 * (1 - t * t)));
        }
        double g0[2] = {0, 0};
        if (g.ang[2 * k] != 0 || g.ang[2 * k + 1] != 0) {
            const double a[2] = {double(z.angle[2 * k]), double(z.angle[2 * k + 1])};
            double a1[2], g1[2];
            normalize2(a, a1);
            normalize2_backward(a1, &g.ang[2 * k], g1);  // the loss's normalisation
            normalize2_backward(a, g1, g0);              // the head's
        }
        out.angle[2 * k] = static_cast<T>(g0[0]);
        out.angle[2 * k + 1] = static_cast<T>(g0[1]);
    }
}

// Which terms entered the total (and so carry gradient).
struct Included {
    bool heatmap = false, offset = false, hard_negative = false, padding_bce = false, y_axis = false;
};

// The total of §2.1 from the unweighted terms in *t: a NaN/Inf term is dropped (counted in
// dropped_terms); the angle enters only when some sample is rotated and its value is > 0; with no
// term left the total is 1.0. focal_gap + focal_slider form one term, as in the original.
Included assemble_total(const LossConfig& cfg, bool rotated, LossTerms* t) {
    Included use;
    int added = 0;
    auto take = [&](double value, double weight, bool* in_total) {
        *in_total = std::isfinite(value);
        if (*in_total) {
            t->total += weight * value;
            ++added;
        } else {
            ++t->dropped_terms;
        }
    };
    take(t->focal_gap + t->focal_slider, cfg.w_heatmap, &use.heatmap);
    take(t->offset, cfg.w_offset, &use.offset);
    take(t->hard_negative, cfg.w_hard_negative, &use.hard_negative);
    if (rotated) {
        if (!std::isfinite(t->angle)) {
            ++t->dropped_terms;
        } else if (t->angle > 0) {
            t->angle_used = true;
            t->total += cfg.w_angle * t->angle;
            ++added;
        }
    }
    take(t->padding_bce, cfg.w_padding_bce, &use.padding_bce);
    take(t->y_axis, cfg.w_y_axis, &use.y_axis);
    if (added == 0) t->total = 1.0;
    return use;
}

}  // namespace

template <class T>
LossTerms loss_forward_backward_ref(const LossConfig& cfg, const HeadLogits<T>& logits, const T* valid,
                                    const data::Label* labels, const HeadGrads<T>* grads) {
    check_inputs(cfg, logits, valid, labels);
    if (grads) SF_CHECK(grads->gap && grads->slider && grads->offset && grads->angle, "null loss gradient output");
    const LossInputs in = prepare(cfg, logits, valid, labels);

    LossTerms t;
    t.focal_gap = detail::focal_term(in, false, 0, nullptr);
    t.focal_slider = detail::focal_term(in, true, 0, nullptr);
    t.offset = detail::offset_term(in, 0, nullptr);
    t.hard_negative = detail::hard_negative_term(in, 0, nullptr);
    t.padding_bce = detail::padding_bce_term(in, 0, nullptr);
    t.y_axis = detail::y_axis_term(in, 0, nullptr);
    bool rotated = false;  // the angle term exists only when some sample is rotated
    for (int b = 0; b < in.n; ++b) rotated = rotated || labels[b].angle_rad != 0;
    if (rotated) t.angle = detail::angle_term(in, 0, nullptr);
    const Included use = assemble_total(cfg, rotated, &t);

    if (grads) {
        const size_t cells = static_cast<size_t>(in.n) * in.h * in.w;
        ActGrads g;
        g.pg.assign(cells, 0.0), g.ps.assign(cells, 0.0), g.off.assign(4 * cells, 0.0), g.ang.assign(2 * cells, 0.0);
        if (use.heatmap) {
            detail::focal_term(in, false, cfg.w_heatmap, &g);
            detail::focal_term(in, true, cfg.w_heatmap, &g);
        }
        if (use.offset) detail::offset_term(in, cfg.w_offset, &g);
        if (use.hard_negative) detail::hard_negative_term(in, cfg.w_hard_negative, &g);
        if (t.angle_used) detail::angle_term(in, cfg.w_angle, &g);
        if (use.padding_bce) detail::padding_bce_term(in, cfg.w_padding_bce, &g);
        if (use.y_axis) detail::y_axis_term(in, cfg.w_y_axis, &g);
        backward_activations(logits, in, g, *grads);
    }
    return t;
}

template LossTerms loss_forward_backward_ref<float>(const LossConfig&, const HeadLogits<float>&, const float*,
                                                    const data::Label*, const HeadGrads<float>*);
template LossTerms loss_forward_backward_ref<double>(const LossConfig&, const HeadLogits<double>&, const double*,
                                                     const data::Label*, const HeadGrads<double>*);

}  // namespace model
