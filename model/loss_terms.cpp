// The loss terms of MODEL_SPEC §2 on activated heads, in double, each with its exact gradient
// (what PyTorch autograd computes for the original's expressions). The `sider` / `corrected`
// differences follow docs/LOSS.md; each is marked "quirk N" below.
// Gradient conventions: clamp(x, lo, hi) and max(x, c) pass the gradient where lo <= x <= hi /
// x >= c (torch.clamp semantics); |x| has gradient sign(x); guard constants have none.
#include <algorithm>
#include <cmath>

#include "model/loss_detail.h"

namespace model::detail {

namespace {

constexpr double kOffsetMinWeight = 1e-6;  // offset guard: weight sum below this -> 0.01
constexpr double kPadMinWeight = 1e-8;     // padding BCE guard: sum(1-M) below this -> 0
constexpr double kPadClamp = 1e-4;         // padding BCE probability clamp

bool corrected(const LossInputs& in) { return in.cfg->variant == LossVariant::Corrected; }
size_t at(const LossInputs& in, int b, int cell) { return static_cast<size_t>(b) * in.hw() + cell; }

// Focal loss of one cell and d loss / d P (through the clamp).
double focal_cell(const LossConfig& c, double p, double y, double* dldp) {
    const double lo = c.focal_eps, hi = 1 - c.focal_eps;
    const double pc = std::clamp(p, lo, hi);
    const double pass = (p >= lo && p <= hi) ? 1.0 : 0.0;
    const double a = c.focal_alpha;
    if (y >= c.focal_pos_threshold) {
        const double q = 1 - pc;
        *dldp = pass * (-a * std::pow(q, a - 1) * -std::log(pc) - std::pow(q, a) / pc);
        return std::pow(q, a) * -std::log(pc);
    }
    const double nw = std::pow(1 - y, c.focal_beta);
    const double q = 1 - pc, qm = std::max(q, c.focal_eps);
    const double qpass = q >= c.focal_eps ? 1.0 : 0.0;
    *dldp = pass * nw * (a * std::pow(pc, a - 1) * -std::log(qm) + std::pow(pc, a) * qpass / qm);
    return nw * std::pow(pc, a) * -std::log(qm);
}

// SmoothL1 with parameter beta (PyTorch smooth_l1_loss), and its derivative.
double smooth_l1(double d, double beta, double* dd) {
    if (std::fabs(d) < beta) {
        *dd = d / beta;
        return 0.5 * d * d / beta;
    }
    *dd = (d > 0) - (d < 0);
    return std::fabs(d) - 0.5 * beta;
}

// grid_sample(bilinear, align_corners=True, zeros) of one (h, w) map at continuous cell
// coordinates (ix, iy): corners outside the grid contribute 0. Adds gscale * d s / d P to dp.
double bilinear_sample(const double* p, int h, int w, double ix, double iy, double gscale, double* dp) {
    const double fx0 = std::floor(ix), fy0 = std::floor(iy);
    if (!(fx0 >= -1 && fx0 <= w && fy0 >= -1 && fy0 <= h)) return 0.0;  // all corners outside (or NaN)
    const int x0 = static_cast<int>(fx0), y0 = static_cast<int>(fy0);
    const double fx = ix - fx0, fy = iy - fy0;
    double s = 0;
    for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) {
            const int x = x0 + dx, y = y0 + dy;
            if (x < 0 || x >= w || y < 0 || y >= h) continue;
            const double wt = (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy);
            s += wt * p[static_cast<size_t>(y) * w + x];
            if (dp) dp[static_cast<size_t>(y) * w + x] += gscale * wt;
        }
    return s;
}

double hinge(double a) { return std::isnan(a) ? a : std::max(a, 0.0); }  // clamp(min=0) keeps NaN

}  // namespace

void fake_grid_coords(LossVariant v, const data::Label& l, int k, int stride, double* gx, double* gy) {
    const double x = l.fake_x[k], y = l.fake_y[k];
    if (v == LossVariant::Sider) {
        // Quirk 2: the preprocessor stores int(x/s); the loader divides by s again.
        *gx = std::trunc(x / stride) / stride;
        *gy = std::trunc(y / stride) / stride;
    } else {
        *gx = x / stride;
        *gy = y / stride;
    }
}

int y_axis_target_row(LossVariant v, double y, int stride, int h) {
    // Quirk 3: `sider` converts pixel -> grid twice; the original truncates (.long()), which equals
    // floor after the clamp at 0.
    const double t = v == LossVariant::Sider ? std::floor(y / stride / 4.0) : std::floor(y / stride);
    return static_cast<int>(std::clamp(t, 0.0, double(h - 1)));
}

// ---- focal (§2.2) ----
double focal_term(const LossInputs& in, bool slider, double scale, ActGrads* g) {
    const LossConfig& c = *in.cfg;
    const std::vector<double>& P = slider ? in.ps : in.pg;
    const std::vector<double>& Y = slider ? in.ys : in.yg;
    std::vector<double> num(in.n, 0.0), den(in.n, 0.0);
    double dl;
    for (int b = 0; b < in.n; ++b)
        for (int i = 0; i < in.hw(); ++i) {
            const size_t k = at(in, b, i);
            num[b] += focal_cell(c, P[k], Y[k], &dl) * in.m[k];
            den[b] += (Y[k] >= c.focal_pos_threshold ? 1.0 : 0.0) * in.m[k];
        }
    // coef[b]: d value / d (sum_cells l*M of sample b).
    std::vector<double> coef(in.n, 0.0);
    double value = 0;
    if (!corrected(in)) {  // quirk 5: batch-level normalisation
        double sn = 0, sd = 0;
        for (int b = 0; b < in.n; ++b) sn += num[b], sd += den[b];
        if (sd == 0) return 0.01;
        value = sn / sd;
        std::fill(coef.begin(), coef.end(), 1.0 / sd);
    } else {
        int support = 0;
        for (int b = 0; b < in.n; ++b) support += den[b] > 0;
        if (support == 0) return 0.01;
        for (int b = 0; b < in.n; ++b)
            if (den[b] > 0) {
                value += num[b] / den[b] / support;
                coef[b] = 1.0 / (den[b] * support);
            }
    }
    if (std::isnan(value)) return 1.0;
    if (g) {
        std::vector<double>& dP = slider ? g->ps : g->pg;
        for (int b = 0; b < in.n; ++b)
            for (int i = 0; i < in.hw(); ++i) {
                const size_t k = at(in, b, i);
                focal_cell(c, P[k], Y[k], &dl);
                dP[k] += scale * coef[b] * in.m[k] * dl;
            }
    }
    return value;
}

// ---- offset (§2.3) ----
namespace {

// One object's offset loss (offset channels ch, ch+1); *ok = false when its weight fails the guard.
double offset_object(const LossInputs& in, bool slider, double scale, ActGrads* g, bool* ok) {
    const LossConfig& c = *in.cfg;
    const std::vector<double>& Y = slider ? in.ys : in.yg;
    const int ch = slider ? 2 : 0;
    double dx, dy;
    auto cell_loss = [&](size_t k, double tx, double ty) {
        return smooth_l1(in.off[4 * k + ch] - tx, c.offset_beta, &dx) +
               smooth_l1(in.off[4 * k + ch + 1] - ty, c.offset_beta, &dy);
    };
    auto add_grad = [&](size_t k, double coef) {
        g->off[4 * k + ch] += scale * coef * dx;
        g->off[4 * k + ch + 1] += scale * coef * dy;
    };
    if (!corrected(in)) {
        // Quirk 4: weight Y*M over the whole Gaussian window; the target is the offset at the
        // peak cell and 0 elsewhere, so neighbours are regressed toward 0. Quirk 5: batch sums.
        double wsum = 0, num = 0;
        for (int b = 0; b < in.n; ++b)
            for (int i = 0; i < in.hw(); ++i) wsum += Y[at(in, b, i)] * in.m[at(in, b, i)];
        *ok = !(wsum < kOffsetMinWeight);
        if (!*ok) return 0.0;
        for (int b = 0; b < in.n; ++b) {
            const ObjectCell& oc = slider ? in.slider[b] : in.gap[b];
            const int peak = oc.v * in.w + oc.u;
            for (int i = 0; i < in.hw(); ++i) {
                const size_t k = at(in, b, i);
                const double wt = Y[k] * in.m[k];
                num += wt * cell_loss(k, i == peak ? oc.du : 0.0, i == peak ? oc.dv : 0.0);
                if (g) add_grad(k, wt / wsum);
            }
        }
        return num / wsum;
    }
    // Corrected: the peak cell only, weight M there, normalised per sample, averaged over the
    // samples whose peak weight passes the guard (M >= 1e-6).
    int support = 0;
    for (int b = 0; b < in.n; ++b) {
        const ObjectCell& oc = slider ? in.slider[b] : in.gap[b];
        support += !(in.m[at(in, b, oc.v * in.w + oc.u)] < kOffsetMinWeight);
    }
    *ok = support > 0;
    if (!*ok) return 0.0;
    double value = 0;
    for (int b = 0; b < in.n; ++b) {
        const ObjectCell& oc = slider ? in.slider[b] : in.gap[b];
        const size_t k = at(in, b, oc.v * in.w + oc.u);
        if (in.m[k] < kOffsetMinWeight) continue;
        value += cell_loss(k, oc.du, oc.dv) / support;  // (M*l)/M at the peak = l
        if (g) add_grad(k, 1.0 / support);
    }
    return value;
}

}  // namespace

double offset_term(const LossInputs& in, double scale, ActGrads* g) {
    bool ok = false;
    const double gap = offset_object(in, false, scale, g, &ok);
    if (!corrected(in)) {
        // The original's guards: no gap weight -> 0.01 for the whole term (the slider is not
        // evaluated); no slider weight -> L_gap + 0.01.
        if (!ok) return 0.01;
        const double slider = offset_object(in, true, scale, g, &ok);
        return ok ? gap + slider : gap + 0.01;
    }
    // Corrected: the guard per object (docs/LOSS.md: 0.01 for an object without weight).
    bool ok_slider = false;
    const double slider = offset_object(in, true, scale, g, &ok_slider);
    return (ok ? gap : 0.01) + (ok_slider ? slider : 0.01);
}

// ---- hard negative (§2.4) ----
double hard_negative_term(const LossInputs& in, double scale, ActGrads* g) {
    const LossConfig& c = *in.cfg;
    const int s = c.stride;
    const LossVariant v = c.variant;
    int kmax = 0, with_fakes = 0;
    for (int b = 0; b < in.n; ++b) {
        kmax = std::max(kmax, in.labels[b].num_fakes);
        with_fakes += in.labels[b].num_fakes > 0;
    }
    if (kmax == 0) return 0.0;
    double value = 0;
    for (int b = 0; b < in.n; ++b) {
        const data::Label& l = in.labels[b];
        // Quirk 5: `sider` pads every sample to K = kmax pairs (repeat the last fake; none -> the
        // grid point (0,0)) and averages over all samples; corrected averages each sample's own
        // fakes over the samples that have any.
        const int pairs = corrected(in) ? l.num_fakes : kmax;
        if (pairs == 0) continue;
        const double coef = corrected(in) ? 1.0 / (double(pairs) * with_fakes) : 1.0 / (double(pairs) * in.n);
        const double* p = &in.pg[at(in, b, 0)];
        double* dp = g ? &g->pg[at(in, b, 0)] : nullptr;
        const double sp = bilinear_sample(p, in.h, in.w, double(l.gap_x) / s, double(l.gap_y) / s, 0, nullptr);
        for (int k = 0; k < pairs; ++k) {
            double fx = 0, fy = 0;
            if (l.num_fakes > 0) fake_grid_coords(v, l, std::min(k, l.num_fakes - 1), s, &fx, &fy);
            const double sn = bilinear_sample(p, in.h, in.w, fx, fy, 0, nullptr);
            const double a = c.hn_margin - sp + sn;
            value += coef * hinge(a);
            if (dp && a >= 0) {
                bilinear_sample(p, in.h, in.w, double(l.gap_x) / s, double(l.gap_y) / s, -scale * coef, dp);
                bilinear_sample(p, in.h, in.w, fx, fy, scale * coef, dp);
            }
        }
    }
    return value;
}

// ---- angle (§2.5) ----
double angle_term(const LossInputs& in, double scale, ActGrads* g) {
    const LossConfig& c = *in.cfg;
    std::vector<double> num(in.n, 0.0), den(in.n, 0.0);
    for (int b = 0; b < in.n; ++b) {
        const double st = std::sin(double(in.labels[b].angle_rad)), ct = std::cos(double(in.labels[b].angle_rad));
        for (int i = 0; i < in.hw(); ++i) {
            const size_t k = at(in, b, i);
            const double wt = (in.yg[k] > c.angle_pos_threshold ? 1.0 : 0.0) * in.m[k];
            num[b] += (1 - (in.ang[2 * k] * st + in.ang[2 * k + 1] * ct)) * wt;
            den[b] += wt;
        }
    }
    // coef[b]: d value / d num[b].
    std::vector<double> coef(in.n, 0.0);
    double value = 0;
    if (!corrected(in)) {  // quirk 5: batch sums; unrotated samples pull toward (0, 1)
        double sn = 0, sd = 0;
        for (int b = 0; b < in.n; ++b) sn += num[b], sd += den[b];
        value = sn / (sd + c.angle_eps);
        std::fill(coef.begin(), coef.end(), 1.0 / (sd + c.angle_eps));
    } else {
        // Per sample, averaged over the samples with angle cells (sum M_ang*M > 0), rotated or not:
        // unrotated samples keep their (0, 1) target as in `sider`; only the normalisation changes.
        int support = 0;
        for (int b = 0; b < in.n; ++b) support += den[b] > 0;
        if (support == 0) return 0.0;
        for (int b = 0; b < in.n; ++b)
            if (den[b] > 0) {
                value += num[b] / (den[b] + c.angle_eps) / support;
                coef[b] = 1.0 / ((den[b] + c.angle_eps) * support);
            }
    }
    if (g) {
        for (int b = 0; b < in.n; ++b) {
            if (coef[b] == 0) continue;
            const double st = std::sin(double(in.labels[b].angle_rad)), ct = std::cos(double(in.labels[b].angle_rad));
            for (int i = 0; i < in.hw(); ++i) {
                const size_t k = at(in, b, i);
                const double wt = (in.yg[k] > c.angle_pos_threshold ? 1.0 : 0.0) * in.m[k];
                g->ang[2 * k] -= scale * coef[b] * wt * st;
                g->ang[2 * k + 1] -= scale * coef[b] * wt * ct;
            }
        }
    }
    return value;
}

// ---- padding BCE (§2.6) ----
namespace {

// Per-cell BCE toward 0 and d / d P. Quirk 1: `sider` applies a second sigmoid to P.
double pad_cell(const LossConfig& c, double P, double* dldP) {
    double p = P, dp = 1.0;
    if (c.variant == LossVariant::Sider) {
        p = 1.0 / (1.0 + std::exp(-P));
        dp = p * (1 - p);
    }
    const double pc = std::clamp(p, kPadClamp, 1 - kPadClamp);
    const double pass = (p >= kPadClamp && p <= 1 - kPadClamp) ? 1.0 : 0.0;
    const double l = -std::log1p(-pc);
    const double cap_pass = l <= c.pad_max_loss ? 1.0 : 0.0;
    *dldP = cap_pass * pass * dp / (1 - pc);
    return std::min(l, c.pad_max_loss);
}

}  // namespace

double padding_bce_term(const LossInputs& in, double scale, ActGrads* g) {
    const LossConfig& c = *in.cfg;
    std::vector<double> num(in.n, 0.0), den(in.n, 0.0);
    double dg, ds;
    for (int b = 0; b < in.n; ++b)
        for (int i = 0; i < in.hw(); ++i) {
            const size_t k = at(in, b, i);
            num[b] += (pad_cell(c, in.pg[k], &dg) + pad_cell(c, in.ps[k], &ds)) * (1 - in.m[k]);
            den[b] += 1 - in.m[k];
        }
    std::vector<double> coef(in.n, 0.0);  // d value / d num[b]
    double value = 0;
    if (!corrected(in)) {  // quirk 5: batch sums
        double sn = 0, sd = 0;
        for (int b = 0; b < in.n; ++b) sn += num[b], sd += den[b];
        if (sd < kPadMinWeight) return 0.0;
        value = sn / sd;
        std::fill(coef.begin(), coef.end(), 1.0 / sd);
    } else {
        int support = 0;
        for (int b = 0; b < in.n; ++b) support += !(den[b] < kPadMinWeight);
        if (support == 0) return 0.0;
        for (int b = 0; b < in.n; ++b)
            if (!(den[b] < kPadMinWeight)) {
                value += num[b] / den[b] / support;
                coef[b] = 1.0 / (den[b] * support);
            }
    }
    if (g) {
        for (int b = 0; b < in.n; ++b)
            for (int i = 0; i < in.hw(); ++i) {
                const size_t k = at(in, b, i);
                pad_cell(c, in.pg[k], &dg);
                pad_cell(c, in.ps[k], &ds);
                g->pg[k] += scale * coef[b] * (1 - in.m[k]) * dg;
                g->ps[k] += scale * coef[b] * (1 - in.m[k]) * ds;
            }
    }
    return value;
}

// ---- Y axis (§2.7) ----
namespace {

// Row distribution d = softmax(log(e + eps) / tau) of one (h, w) map; e = row means.
void row_distribution(const LossConfig& c, const double* p, int h, int w, std::vector<double>* e,
                      std::vector<double>* d) {
    double mx = -INFINITY;
    for (int r = 0; r < h; ++r) {
        double s = 0;
        for (int j = 0; j < w; ++j) s += p[static_cast<size_t>(r) * w + j];
        (*e)[r] = s / w;
        (*d)[r] = std::log((*e)[r] + c.y_eps) / c.y_tau;
        mx = std::max(mx, (*d)[r]);
    }
    double z = 0;
    for (int r = 0; r < h; ++r) z += ((*d)[r] = std::exp((*d)[r] - mx));
    for (int r = 0; r < h; ++r) (*d)[r] /= z;
}

// Backward of row_distribution: gd = d loss / d d -> adds scale * d loss / d P into dp.
void row_distribution_backward(const LossConfig& c, const std::vector<double>& e, const std::vector<double>& d,
                               const std::vector<double>& gd, int h, int w, double scale, double* dp) {
    double dot = 0;
    for (int r = 0; r < h; ++r) dot += d[r] * gd[r];
    for (int r = 0; r < h; ++r) {
        const double ge = d[r] * (gd[r] - dot) / (c.y_tau * (e[r] + c.y_eps));
        for (int j = 0; j < w; ++j) dp[static_cast<size_t>(r) * w + j] += scale * ge / w;
    }
}

}  // namespace

double y_axis_term(const LossInputs& in, double scale, ActGrads* g) {
    const LossConfig& c = *in.cfg;
    const int h = in.h;
    std::vector<double> eg(h), es(h), dg(h), ds(h), gg(h), gs(h);
    double ce = 0, emd = 0;
    const double ce_coef = c.y_row_ce_weight / in.n, emd_coef = c.y_emd_weight / (double(in.n) * h);
    for (int b = 0; b < in.n; ++b) {
        row_distribution(c, &in.pg[at(in, b, 0)], h, in.w, &eg, &dg);
        row_distribution(c, &in.ps[at(in, b, 0)], h, in.w, &es, &ds);
        const int tg = y_axis_target_row(c.variant, in.labels[b].gap_y, c.stride, h);
        const int ts = y_axis_target_row(c.variant, in.labels[b].slider_y, c.stride, h);
        ce += -std::log(dg[tg] + c.y_eps) - std::log(ds[ts] + c.y_eps);
        double cg = 0, cs = 0;
        for (int r = 0; r < h; ++r) emd += std::fabs((cg += dg[r]) - (cs += ds[r]));
        if (!g) continue;
        // d/d cumsum_k = sign(cg_k - cs_k); d cumsum_k / d d_r = [r <= k] -> suffix sums.
        std::vector<double> sgn(h);
        cg = cs = 0;
        for (int r = 0; r < h; ++r) {
            const double diff = (cg += dg[r]) - (cs += ds[r]);
            sgn[r] = (diff > 0) - (diff < 0);
        }
        double suffix = 0;
        for (int r = h - 1; r >= 0; --r) {
            suffix += sgn[r];
            gg[r] = emd_coef * suffix;
            gs[r] = -emd_coef * suffix;
        }
        gg[tg] -= ce_coef / (dg[tg] + c.y_eps);
        gs[ts] -= ce_coef / (ds[ts] + c.y_eps);
        row_distribution_backward(c, eg, dg, gg, h, in.w, scale, &g->pg[at(in, b, 0)]);
        row_distribution_backward(c, es, ds, gs, h, in.w, scale, &g->ps[at(in, b, 0)]);
    }
    return ce_coef * ce + emd_coef * emd;
}

}  // namespace model::detail
