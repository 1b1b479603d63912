// Device math of the CUDA fused loss (model/loss.cu, docs/LOSS.md "GPU loss kernel"): the workspace
// record layouts, the kernels' argument block LossArgs, and every __host__ __device__ (SF_HD) formula
// of the reference's per-cell terms, targets and derivatives, plus the per-row and per-sample parts of
// launches 1 and 2. Doubles throughout, on the fp32 logits, operation for operation as model/loss.cpp,
// loss_terms.cpp and targets.cpp.
//
// Included only by model/loss.cu (nvcc). Everything is in an anonymous namespace, as it was in that
// file: internal linkage, and the kernels' symbols (which name LossArgs) keep loss.cu's namespace.
// SF_HD stays defined for the includer, which #undefs it at its end.
#pragma once

#include <cmath>
#include <cstdint>

#include "model/loss_cuda.h"

#define SF_HD __host__ __device__ __forceinline__

namespace model {

namespace {

// Constants of model/loss.cpp and model/loss_terms.cpp.
constexpr double kNormEps = 1e-12;         // F.normalize eps (angle head and angle loss)
constexpr double kOffsetMinWeight = 1e-6;  // offset guard
constexpr double kPadMinWeight = 1e-8;     // padding BCE guard
constexpr double kPadClamp = 1e-4;         // padding BCE probability clamp

// ---- workspace record layouts (doubles) ----

// Per (sample, row): sums over the row's cells. Slots 0..11 are summed over rows into the sample record.
enum RowSlot {
    kRowFocalNumG,  // sum focal(P_gap, Y_gap) * M
    kRowFocalDenG,  // sum [Y_gap >= thr] * M
    kRowFocalNumS,
    kRowFocalDenS,
    kRowOffWG,    // sider: sum Y_gap * M
    kRowOffNumG,  // sider: sum Y_gap * M * (SL1 du + SL1 dv)
    kRowOffWS,
    kRowOffNumS,
    kRowAngNum,  // sum (1 - a.t) * [Y_gap > thr] * M
    kRowAngDen,  // sum [Y_gap > thr] * M
    kRowPadNum,  // sum (bce(P_gap) + bce(P_slider)) * (1 - M)
    kRowPadDen,  // sum (1 - M)
    kRowSumPG,   // sum P_gap (Y-axis row energy * w)
    kRowSumPS,
    kRowSlotCount
};
constexpr int kRowSummed = kRowPadDen + 1;  // slots carried into the sample record

// Per sample: slots 0..11 = the row slots summed over rows, then:
enum SampleSlot {
    kSmpCe = kRowSummed,  // -log(d_gap[t_gap] + eps) - log(d_slider[t_slider] + eps)
    kSmpEmd,              // sum_r |cumsum d_gap - cumsum d_slider|
    kSmpHnValue,          // sum over the sample's pairs of coef * max(0, m - s+ + s-)
    kSmpHnCoef,           // that coef (0 when the sample has no pairs)
    kSmpHnCount0,         // active pairs (a >= 0) per fake slot 0..3 (slot 0 = the (0,0) point when no fakes)
    // then the active pairs in all
    kSmpHnActive = kSmpHnCount0 + data::kMaxFakeGaps,
    kSmpOffMG,     // M at the gap's peak cell (corrected offset support)
    kSmpOffLossG,  // SL1 loss at the gap's peak cell toward its offset target
    kSmpOffMS,
    kSmpOffLossS,
    kSmpSlotCount
};

// Per sample: gradient coefficients (d value / d per-sample sum), hard-negative point coefficients
// already multiplied by the term's scale.
enum CoefSlot {
    kCoefFocalG,
    kCoefFocalS,
    kCoefAngle,
    kCoefPad,
    kCoefHnGap,    // -scale * coef * active pairs, on the corners of (x_gap/s, y_gap/s)
    kCoefHnFake0,  // +scale * coef * active pairs of fake slot k, on its corners
    kCoefSlotCount = kCoefHnFake0 + data::kMaxFakeGaps
};

// Per batch: scale of each term's gradient (weight * grad_scale; 0 = no gradient from the term).
enum BatchSlot {
    kBScFocalG,
    kBScFocalS,
    kBScOffG,
    kBScOffS,
    kBOffNormG,  // sider: sum Y_gap * M over the batch; corrected: number of supported samples
    kBOffNormS,
    kBScAngle,
    kBScPad,
    kBScY,
    kBScHn,
    kBatchSlotCount
};

static_assert(kRowSlotCount == kLossRowSlots, "row record size");
static_assert(kSmpSlotCount <= kLossSampleSlots, "sample record size");
static_assert(kCoefSlotCount <= kLossCoefSlots, "coefficient record size");
static_assert(kBatchSlotCount <= kLossBatchSlots, "batch record size");

// Batch sums of the batch kernel (one per quantity, each a fixed-order sum over the samples).
enum BatchQ {
    kQFocalNumG,  // sider: sum num, sum den
    kQFocalDenG,
    kQFocalNumS,
    kQFocalDenS,
    kQFocalPerG,  // corrected: sum num/den over samples with den > 0, and their count
    kQFocalSupG,
    kQFocalPerS,
    kQFocalSupS,
    kQOffWG,  // sider offset sums
    kQOffNumG,
    kQOffWS,
    kQOffNumS,
    kQOffPeakG,  // corrected: sum of peak losses over supported samples, and their count
    kQOffSupG,
    kQOffPeakS,
    kQOffSupS,
    kQHn,
    kQAngNum,
    kQAngDen,
    kQAngPer,
    kQAngSup,
    kQPadNum,
    kQPadDen,
    kQPadPer,
    kQPadSup,
    kQCe,
    kQEmd,
    kQRotated,  // samples with angle_rad != 0
    kBatchQCount
};

// Everything a kernel reads or writes; passed by value.
struct LossArgs {
    LossConfig cfg;
    int n, h, w;
    double grad_scale;
    const float* zg;  // (N,h,w) gap logits
    const float* zs;  // (N,h,w) slider logits
    const float* zo;  // (N,h,w,4) offset logits
    const float* za;  // (N,h,w,2) angle logits
    const float* m;   // (N,h,w) soft valid mask
    const data::Label* labels;
    double* rows;     // (N,h,kLossRowSlots)
    double* yrow;     // (N,h,kLossYRowSlots)
    double* samples;  // (N,kLossSampleSlots)
    double* coefs;    // (N,kLossCoefSlots)
    double* batch;    // (kLossBatchSlots)
    float* gg;        // gradients, same layouts as the logits; null when forward only
    float* gs;
    float* go;
    float* ga;
    DeviceLossTerms* out;
    double* loss_sum;  // nullable

    SF_HD int hw() const { return h * w; }
    SF_HD bool corrected() const { return cfg.variant == LossVariant::Corrected; }
};

// ---- scalar helpers: std:: semantics, NaN included ----

SF_HD double clampd(double v, double lo, double hi) { return v < lo ? lo : (hi < v ? hi : v); }  // std::clamp
SF_HD double maxd(double a, double b) { return a < b ? b : a; }                                  // std::max
SF_HD double mind(double a, double b) { return b < a ? b : a; }                                  // std::min
SF_HD int clampi(int v, int lo, int hi) { return v < lo ? lo : (hi < v ? hi : v); }
SF_HD double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }
SF_HD double hinge(double a) { return isnan(a) ? a : maxd(a, 0.0); }  // clamp(min=0) keeps NaN
SF_HD int clamp_fakes(int32_t k) { return clampi(k, 0, data::kMaxFakeGaps); }
// Reference: up == 0 ? 0 : up * local (a cell without upstream gradient gets exactly 0).
SF_HD double chain(double up, double local) { return up == 0 ? 0.0 : up * local; }

// ---- targets (model/targets.cpp, loss_terms.cpp) ----

struct ObjectCell {
    int u, v;
    double du, dv;
};

SF_HD ObjectCell object_cell(double x, double y, int h, int w, int stride) {
    ObjectCell c;
    const double gx = x / stride, gy = y / stride;
    c.u = clampi(static_cast<int>(trunc(gx)), 0, w - 1);
    c.v = clampi(static_cast<int>(trunc(gy)), 0, h - 1);
    c.du = gx - c.u - 0.5;
    c.dv = gy - c.v - 0.5;
    return c;
}

// Gaussian target of render_heatmap_target at cell (i, j): inside the int(3 sigma) window, else 0.
struct Target {
    int radius;
    double inv;  // 1 / (2 sigma^2)
};
SF_HD Target target_params(const LossConfig& c) {
    return {static_cast<int>(3 * c.sigma), 1.0 / (2 * c.sigma * c.sigma)};
}

SF_HD double heat_target(const ObjectCell& c, const Target& t, int i, int j) {
    if (i < c.v - t.radius || i > c.v + t.radius || j < c.u - t.radius || j > c.u + t.radius) return 0.0;
    const double d2 = double(i - c.v) * (i - c.v) + double(j - c.u) * (j - c.u);
    return exp(-d2 * t.inv);
}

SF_HD void fake_grid_coords(LossVariant v, const data::Label& l, int k, int stride, double* gx, double* gy) {
    const double x = l.fake_x[k], y = l.fake_y[k];
    if (v == LossVariant::Sider) {  // quirk 2
        *gx = trunc(x / stride) / stride;
        *gy = trunc(y / stride) / stride;
    } else {
        *gx = x / stride;
        *gy = y / stride;
    }
}

SF_HD int y_axis_target_row(LossVariant v, double y, int stride, int h) {  // quirk 3
    const double t = v == LossVariant::Sider ? floor(y / stride / 4.0) : floor(y / stride);
    return static_cast<int>(clampd(t, 0.0, double(h - 1)));
}

// ---- per-cell losses and their derivatives (loss_terms.cpp); dl may be null (value only) ----

// a^p for the focal exponents; the default alpha 1.5 as q*sqrt(q) (1 ulp, pow is far slower in double).
SF_HD double powe(double x, double p) {
    if (p == 1.5) return x * sqrt(x);
    if (p == 0.5) return sqrt(x);
    return pow(x, p);
}

SF_HD double focal_cell(const LossConfig& c, double p, double y, double* dldp) {
    const double lo = c.focal_eps, hi = 1 - c.focal_eps;
    const double pc = clampd(p, lo, hi);
    const double pass = (p >= lo && p <= hi) ? 1.0 : 0.0;
    const double a = c.focal_alpha;
    if (y >= c.focal_pos_threshold) {
        const double q = 1 - pc;
        if (dldp) *dldp = pass * (-a * powe(q, a - 1) * -log(pc) - powe(q, a) / pc);
        return powe(q, a) * -log(pc);
    }
    const double nw = y == 0 ? 1.0 : pow(1 - y, c.focal_beta);  // pow(1, b) == 1 exactly
    const double q = 1 - pc, qm = maxd(q, c.focal_eps);
    const double qpass = q >= c.focal_eps ? 1.0 : 0.0;
    if (dldp) *dldp = pass * nw * (a * powe(pc, a - 1) * -log(qm) + powe(pc, a) * qpass / qm);
    return nw * powe(pc, a) * -log(qm);
}

SF_HD double smooth_l1(double d, double beta, double* dd) {
    if (fabs(d) < beta) {
        if (dd) *dd = d / beta;
        return 0.5 * d * d / beta;
    }
    if (dd) *dd = (d > 0) - (d < 0);
    return fabs(d) - 0.5 * beta;
}

// Padding BCE of one cell toward 0 (quirk 1: `sider` applies a second sigmoid).
SF_HD double pad_cell(const LossConfig& c, double P, double* dldP) {
    double p = P, dp = 1.0;
    if (c.variant == LossVariant::Sider) {
        p = 1.0 / (1.0 + exp(-P));
        dp = p * (1 - p);
    }
    const double pc = clampd(p, kPadClamp, 1 - kPadClamp);
    const double pass = (p >= kPadClamp && p <= 1 - kPadClamp) ? 1.0 : 0.0;
    const double l = -log1p(-pc);
    if (dldP) *dldP = (l <= c.pad_max_loss ? 1.0 : 0.0) * pass * dp / (1 - pc);
    return mind(l, c.pad_max_loss);
}

// F.normalize over 2 channels and its backward (loss.cpp normalize2 / normalize2_backward).
SF_HD void normalize2(const double* x, double* y) {
    const double n = maxd(hypot(x[0], x[1]), kNormEps);
    y[0] = x[0] / n;
    y[1] = x[1] / n;
}

SF_HD void normalize2_backward(const double* x, const double* gy, double* gx) {
    const double n = hypot(x[0], x[1]);
    if (!(n >= kNormEps)) {
        gx[0] = gy[0] / kNormEps;
        gx[1] = gy[1] / kNormEps;
        return;
    }
    const double y0 = x[0] / n, y1 = x[1] / n, d = y0 * gy[0] + y1 * gy[1];
    gx[0] = (gy[0] - y0 * d) / n;
    gx[1] = (gy[1] - y1 * d) / n;
}

// grid_sample (bilinear, align_corners=True, zeros) of sigmoid(zb) (one (h,w) map) at (ix, iy).
SF_HD double bilinear_sample(const float* zb, int h, int w, double ix, double iy) {
    const double fx0 = floor(ix), fy0 = floor(iy);
    if (!(fx0 >= -1 && fx0 <= w && fy0 >= -1 && fy0 <= h)) return 0.0;  // all corners outside (or NaN)
    const int x0 = static_cast<int>(fx0), y0 = static_cast<int>(fy0);
    const double fx = ix - fx0, fy = iy - fy0;
    double s = 0;
    for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) {
            const int x = x0 + dx, y = y0 + dy;
            if (x < 0 || x >= w || y < 0 || y >= h) continue;
            const double wt = (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy);
            s += wt * sigmoid(zb[static_cast<size_t>(y) * w + x]);
        }
    return s;
}

// Weight of grid cell (i, j) in that sample (false when it is not one of the in-grid corners).
SF_HD bool bilinear_corner(int h, int w, double ix, double iy, int i, int j, double* wt) {
    const double fx0 = floor(ix), fy0 = floor(iy);
    if (!(fx0 >= -1 && fx0 <= w && fy0 >= -1 && fy0 <= h)) return false;
    const int dx = j - static_cast<int>(fx0), dy = i - static_cast<int>(fy0);
    if (dx < 0 || dx > 1 || dy < 0 || dy > 1) return false;
    const double fx = ix - fx0, fy = iy - fy0;
    *wt = (dx ? fx : 1 - fx) * (dy ? fy : 1 - fy);
    return true;
}

// ---- launch 1: per-row partial sums ----

struct SampleCtx {
    ObjectCell gap, slider;
    Target t;
};

SF_HD SampleCtx sample_ctx(const LossArgs& a, int b) {
    const data::Label& l = a.labels[b];
    SampleCtx s;
    s.gap = object_cell(l.gap_x, l.gap_y, a.h, a.w, a.cfg.stride);
    s.slider = object_cell(l.slider_x, l.slider_y, a.h, a.w, a.cfg.stride);
    s.t = target_params(a.cfg);
    return s;
}

// Adds cell (b, r, j)'s contributions to the row slots.
SF_HD void row_cell(const LossArgs& a, const SampleCtx& s, int b, int r, int j, double (&acc)[kRowSlotCount]) {
    const LossConfig& c = a.cfg;
    const size_t k = (static_cast<size_t>(b) * a.h + r) * a.w + j;
    const double m = a.m[k];
    const double pg = sigmoid(a.zg[k]), ps = sigmoid(a.zs[k]);
    const double yg = heat_target(s.gap, s.t, r, j), ys = heat_target(s.slider, s.t, r, j);
    acc[kRowFocalNumG] += focal_cell(c, pg, yg, nullptr) * m;
    acc[kRowFocalDenG] += (yg >= c.focal_pos_threshold ? 1.0 : 0.0) * m;
    acc[kRowFocalNumS] += focal_cell(c, ps, ys, nullptr) * m;
    acc[kRowFocalDenS] += (ys >= c.focal_pos_threshold ? 1.0 : 0.0) * m;
    if (!a.corrected()) {  // quirk 4: the whole window, target 0 off the peak
        const float4 z = reinterpret_cast<const float4*>(a.zo)[k];
        const double o[4] = {0.5 * tanh(double(z.x)), 0.5 * tanh(double(z.y)), 0.5 * tanh(double(z.z)),
                             0.5 * tanh(double(z.w))};
        const bool pk_g = r == s.gap.v && j == s.gap.u, pk_s = r == s.slider.v && j == s.slider.u;
        const double wg = yg * m, ws = ys * m;
        acc[kRowOffWG] += wg;
        acc[kRowOffNumG] += wg * (smooth_l1(o[0] - (pk_g ? s.gap.du : 0.0), c.offset_beta, nullptr) +
                                  smooth_l1(o[1] - (pk_g ? s.gap.dv : 0.0), c.offset_beta, nullptr));
        acc[kRowOffWS] += ws;
        acc[kRowOffNumS] += ws * (smooth_l1(o[2] - (pk_s ? s.slider.du : 0.0), c.offset_beta, nullptr) +
                                  smooth_l1(o[3] - (pk_s ? s.slider.dv : 0.0), c.offset_beta, nullptr));
    }
    // Angle: (1 - a.t) * wt. The target (sin, cos) is needed only where wt != 0; elsewhere (1 - a.0) * 0
    // keeps the reference's value (0, or NaN for a NaN prediction).
    const float2 za = reinterpret_cast<const float2*>(a.za)[k];
    const double z2[2] = {za.x, za.y};
    double a1[2], a2[2];
    normalize2(z2, a1);  // the head's F.normalize
    normalize2(a1, a2);  // the loss normalises again
    const double wa = (yg > c.angle_pos_threshold ? 1.0 : 0.0) * m;
    double st = 0, ct = 0;
    if (wa != 0) {
        const double th = a.labels[b].angle_rad;
        st = sin(th), ct = cos(th);
    }
    acc[kRowAngNum] += (1 - (a2[0] * st + a2[1] * ct)) * wa;
    acc[kRowAngDen] += wa;
    acc[kRowPadNum] += (pad_cell(c, pg, nullptr) + pad_cell(c, ps, nullptr)) * (1 - m);
    acc[kRowPadDen] += 1 - m;
    acc[kRowSumPG] += pg;
    acc[kRowSumPS] += ps;
}

// ---- launch 2: per-sample parts ----

// Row energy e = mean_j P and the pre-softmax log(e + eps) / tau of one row, for gap and slider.
SF_HD void y_row_init(const LossArgs& a, const double* row, double* eg, double* dg, double* es, double* ds) {
    *eg = row[kRowSumPG] / a.w;
    *dg = log(*eg + a.cfg.y_eps) / a.cfg.y_tau;
    *es = row[kRowSumPS] / a.w;
    *ds = log(*es + a.cfg.y_eps) / a.cfg.y_tau;
}

SF_HD double seq_max(const double* d, int h) {  // std::max from -inf, in row order
    double mx = -INFINITY;
    for (int r = 0; r < h; ++r) mx = maxd(mx, d[r]);
    return mx;
}

SF_HD double seq_sum(const double* d, int h) {
    double z = 0;
    for (int r = 0; r < h; ++r) z += d[r];
    return z;
}

// The sequential tail of the Y-axis term for sample b, given the row distributions dg, ds: its CE
// and EMD, and gg, gs = d (ce_coef*CE + emd_coef*EMD) / d (dg, ds) with dot = sum d * g (inputs of
// the softmax backward). Loops in the reference's order (y_axis_term).
SF_HD void y_sample_tail(const LossArgs& a, int b, const double* dg, const double* ds, double* gg, double* gs,
                         double* ce, double* emd, double* dot_g, double* dot_s) {
    const LossConfig& c = a.cfg;
    const int h = a.h;
    const double ce_coef = c.y_row_ce_weight / a.n, emd_coef = c.y_emd_weight / (double(a.n) * h);
    const int tg = y_axis_target_row(c.variant, a.labels[b].gap_y, c.stride, h);
    const int ts = y_axis_target_row(c.variant, a.labels[b].slider_y, c.stride, h);
    *ce = -log(dg[tg] + c.y_eps) - log(ds[ts] + c.y_eps);
    double cg = 0, cs = 0, e = 0;
    for (int r = 0; r < h; ++r) {
        const double diff = (cg += dg[r]) - (cs += ds[r]);
        e += fabs(diff);
        gg[r] = (diff > 0) - (diff < 0);  // sign, turned into suffix sums below
    }
    *emd = e;
    double suffix = 0;
    for (int r = h - 1; r >= 0; --r) {
        suffix += gg[r];
        gg[r] = emd_coef * suffix;
        gs[r] = -emd_coef * suffix;
    }
    gg[tg] -= ce_coef / (dg[tg] + c.y_eps);
    gs[ts] -= ce_coef / (ds[ts] + c.y_eps);
    double dtg = 0, dts = 0;
    for (int r = 0; r < h; ++r) dtg += dg[r] * gg[r], dts += ds[r] * gs[r];
    *dot_g = dtg;
    *dot_s = dts;
}

// Softmax backward to the row energy: d / d e_r (row_distribution_backward without the 1/w spread).
SF_HD double y_row_grad(const LossConfig& c, double d, double g, double dot, double e) {
    return d * (g - dot) / (c.y_tau * (e + c.y_eps));
}

// Hard negative of sample b (hard_negative_term): value part, coefficient and active-pair counts.
SF_HD void hn_sample(const LossArgs& a, int b, int kmax, int with_fakes, double* rec) {
    const LossConfig& c = a.cfg;
    const data::Label& l = a.labels[b];
    const int nf = clamp_fakes(l.num_fakes), s = c.stride;
    double value = 0, coef = 0, active = 0, cnt[data::kMaxFakeGaps] = {0, 0, 0, 0};
    // Quirk 5: `sider` pads every sample to kmax pairs (last fake repeated, none -> (0,0)).
    const int pairs = a.corrected() ? nf : kmax;
    if (kmax > 0 && pairs > 0) {
        coef = a.corrected() ? 1.0 / (double(pairs) * with_fakes) : 1.0 / (double(pairs) * a.n);
        const float* zb = a.zg + static_cast<size_t>(b) * a.hw();
        const double sp = bilinear_sample(zb, a.h, a.w, double(l.gap_x) / s, double(l.gap_y) / s);
        for (int k = 0; k < pairs; ++k) {
            const int slot = nf > 0 ? (k < nf - 1 ? k : nf - 1) : 0;
            double fx = 0, fy = 0;
            if (nf > 0) fake_grid_coords(c.variant, l, slot, s, &fx, &fy);
            const double sn = bilinear_sample(zb, a.h, a.w, fx, fy);
            const double d = c.hn_margin - sp + sn;
            value += coef * hinge(d);
            if (d >= 0) {
                cnt[slot] += 1;
                active += 1;
            }
        }
    }
    rec[kSmpHnValue] = value;
    rec[kSmpHnCoef] = coef;
    for (int k = 0; k < data::kMaxFakeGaps; ++k) rec[kSmpHnCount0 + k] = cnt[k];
    rec[kSmpHnActive] = active;
}

// Corrected offset: M and the SL1 loss at each object's peak cell.
SF_HD void offset_peaks(const LossArgs& a, int b, double* rec) {
    const LossConfig& c = a.cfg;
    const SampleCtx s = sample_ctx(a, b);
    for (int obj = 0; obj < 2; ++obj) {
        const ObjectCell& oc = obj ? s.slider : s.gap;
        const size_t k = static_cast<size_t>(b) * a.hw() + static_cast<size_t>(oc.v) * a.w + oc.u;
        const double o0 = 0.5 * tanh(double(a.zo[4 * k + 2 * obj])), o1 = 0.5 * tanh(double(a.zo[4 * k + 2 * obj + 1]));
        rec[obj ? kSmpOffMS : kSmpOffMG] = a.m[k];
        rec[obj ? kSmpOffLossS : kSmpOffLossG] =
            smooth_l1(o0 - oc.du, c.offset_beta, nullptr) + smooth_l1(o1 - oc.dv, c.offset_beta, nullptr);
    }
}

}  // namespace

}  // namespace model
