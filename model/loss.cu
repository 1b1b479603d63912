// CUDA fused training loss (model/loss_cuda.h, docs/LOSS.md "GPU loss kernel") and the grid masks
// pooled from the network input. Mirrors the double CPU reference (model/loss.cpp, loss_terms.cpp,
// targets.cpp) operation for operation: every per-cell formula below is the reference's, in double,
// on the fp32 logits; the reference's loops over the batch become the 4 launches of loss_cuda.h.
//
// Per-cell math lives in __host__ __device__ functions (SF_HD) so that it is one definition for all
// kernels; the kernels add only indexing and fixed-order reductions:
//   block_sum      warp shuffle tree (fixed shape) per warp, then thread 0 adds the warp sums in
//                  warp order: the same bits on every run and every device.
//   sequential     where the reference's order matters for a data-dependent decision (the Y-axis
//                  softmax / cumulative sums / sign of the EMD difference), one thread loops in the
//                  reference's order over shared memory.
// Integer atomics (shared memory) count fakes; no floating-point atomics anywhere.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "model/loss_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch_check.h"

#define SF_HD __host__ __device__ __forceinline__

namespace model {

namespace {

using bfloat = __nv_bfloat16;

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

// ---- launch 3: batch combination ----

// Sample b's contributions to the batch sums.
SF_HD void batch_parts(const LossArgs& a, int b, double (&q)[kBatchQCount]) {
    const double* r = a.samples + static_cast<size_t>(b) * kLossSampleSlots;
    q[kQFocalNumG] += r[kRowFocalNumG];
    q[kQFocalDenG] += r[kRowFocalDenG];
    q[kQFocalNumS] += r[kRowFocalNumS];
    q[kQFocalDenS] += r[kRowFocalDenS];
    if (r[kRowFocalDenG] > 0) q[kQFocalPerG] += r[kRowFocalNumG] / r[kRowFocalDenG], q[kQFocalSupG] += 1;
    if (r[kRowFocalDenS] > 0) q[kQFocalPerS] += r[kRowFocalNumS] / r[kRowFocalDenS], q[kQFocalSupS] += 1;
    q[kQOffWG] += r[kRowOffWG];
    q[kQOffNumG] += r[kRowOffNumG];
    q[kQOffWS] += r[kRowOffWS];
    q[kQOffNumS] += r[kRowOffNumS];
    if (!(r[kSmpOffMG] < kOffsetMinWeight)) q[kQOffPeakG] += r[kSmpOffLossG], q[kQOffSupG] += 1;
    if (!(r[kSmpOffMS] < kOffsetMinWeight)) q[kQOffPeakS] += r[kSmpOffLossS], q[kQOffSupS] += 1;
    q[kQHn] += r[kSmpHnValue];
    q[kQAngNum] += r[kRowAngNum];
    q[kQAngDen] += r[kRowAngDen];
    if (r[kRowAngDen] > 0) q[kQAngPer] += r[kRowAngNum] / (r[kRowAngDen] + a.cfg.angle_eps), q[kQAngSup] += 1;
    q[kQPadNum] += r[kRowPadNum];
    q[kQPadDen] += r[kRowPadDen];
    if (!(r[kRowPadDen] < kPadMinWeight)) q[kQPadPer] += r[kRowPadNum] / r[kRowPadDen], q[kQPadSup] += 1;
    q[kQCe] += r[kSmpCe];
    q[kQEmd] += r[kSmpEmd];
    q[kQRotated] += a.labels[b].angle_rad != 0 ? 1.0 : 0.0;
}

// What sample_coefs needs from the batch (kept in shared memory; no initialisers: __shared__).
struct BatchScalars {
    double focal_sd_g, focal_sd_s, focal_sup_g, focal_sup_s;  // sider denominators, corrected supports
    double ang_sd, ang_sup, pad_sd, pad_sup;
    double sc_hn;
};

// Focal value of one map (focal_term): the guards 0.01 (no positives) and 1.0 (NaN) carry no gradient.
SF_HD double focal_value(bool corr, double sn, double sd, double per, double sup, bool* grad) {
    *grad = false;
    double v;
    if (!corr) {
        if (sd == 0) return 0.01;
        v = sn / sd;
    } else {
        if (sup == 0) return 0.01;
        v = per / sup;
    }
    if (isnan(v)) return 1.0;
    *grad = true;
    return v;
}

// Terms, total (assemble_total), loss_sum, the batch record and *bs. Thread 0 of the batch kernel.
SF_HD void batch_finalize(const LossArgs& a, const double (&q)[kBatchQCount], BatchScalars* bs) {
    const LossConfig& c = a.cfg;
    const bool corr = a.corrected();
    DeviceLossTerms t = {};
    bool grad_fg, grad_fs;
    t.focal_gap = focal_value(corr, q[kQFocalNumG], q[kQFocalDenG], q[kQFocalPerG], q[kQFocalSupG], &grad_fg);
    t.focal_slider = focal_value(corr, q[kQFocalNumS], q[kQFocalDenS], q[kQFocalPerS], q[kQFocalSupS], &grad_fs);

    // Offset (offset_term): `sider` guards the whole term on the gap's weight, corrected each object.
    bool grad_og = false, grad_os = false;
    double norm_g = 0, norm_s = 0;
    if (!corr) {
        norm_g = q[kQOffWG], norm_s = q[kQOffWS];
        if (norm_g < kOffsetMinWeight) {
            t.offset = 0.01;
        } else {
            const double gap = q[kQOffNumG] / norm_g;
            grad_og = true;
            grad_os = !(norm_s < kOffsetMinWeight);
            t.offset = grad_os ? gap + q[kQOffNumS] / norm_s : gap + 0.01;
        }
    } else {
        norm_g = q[kQOffSupG], norm_s = q[kQOffSupS];
        grad_og = norm_g > 0, grad_os = norm_s > 0;
        t.offset = (grad_og ? q[kQOffPeakG] / norm_g : 0.01) + (grad_os ? q[kQOffPeakS] / norm_s : 0.01);
    }

    t.hard_negative = q[kQHn];

    const bool rotated = q[kQRotated] > 0;  // the angle term exists only when some sample is rotated
    if (rotated) {
        if (!corr)
            t.angle = q[kQAngNum] / (q[kQAngDen] + c.angle_eps);
        else
            t.angle = q[kQAngSup] == 0 ? 0.0 : q[kQAngPer] / q[kQAngSup];
    }

    bool grad_pad = false;
    if (!corr) {
        if (!(q[kQPadDen] < kPadMinWeight)) t.padding_bce = q[kQPadNum] / q[kQPadDen], grad_pad = true;
    } else {
        if (q[kQPadSup] != 0) t.padding_bce = q[kQPadPer] / q[kQPadSup], grad_pad = true;
    }

    t.y_axis = c.y_row_ce_weight / a.n * q[kQCe] + c.y_emd_weight / (double(a.n) * a.h) * q[kQEmd];

    // The total: a NaN/Inf term is dropped; the angle enters when rotated and > 0; none left -> 1.0.
    int added = 0;
    auto take = [&](double value, double weight) {
        const bool in = isfinite(value);
        if (in)
            t.total += weight * value, ++added;
        else
            ++t.dropped_terms;
        return in;
    };
    const bool use_heat = take(t.focal_gap + t.focal_slider, c.w_heatmap);
    const bool use_off = take(t.offset, c.w_offset);
    const bool use_hn = take(t.hard_negative, c.w_hard_negative);
    if (rotated) {
        if (!isfinite(t.angle)) {
            ++t.dropped_terms;
        } else if (t.angle > 0) {
            t.angle_used = 1;
            t.total += c.w_angle * t.angle;
            ++added;
        }
    }
    const bool use_pad = take(t.padding_bce, c.w_padding_bce);
    const bool use_y = take(t.y_axis, c.w_y_axis);
    if (added == 0) t.total = 1.0;
    t.nonfinite = isfinite(t.total) ? 0 : 1;
    *a.out = t;
    if (a.loss_sum) *a.loss_sum += t.total;

    const double gsc = a.grad_scale;
    double* bt = a.batch;
    bt[kBScFocalG] = use_heat && grad_fg ? c.w_heatmap * gsc : 0.0;
    bt[kBScFocalS] = use_heat && grad_fs ? c.w_heatmap * gsc : 0.0;
    bt[kBScOffG] = use_off && grad_og ? c.w_offset * gsc : 0.0;
    bt[kBScOffS] = use_off && grad_os ? c.w_offset * gsc : 0.0;
    bt[kBOffNormG] = norm_g;
    bt[kBOffNormS] = norm_s;
    bt[kBScAngle] = t.angle_used ? c.w_angle * gsc : 0.0;
    bt[kBScPad] = use_pad && grad_pad ? c.w_padding_bce * gsc : 0.0;
    bt[kBScY] = use_y ? c.w_y_axis * gsc : 0.0;
    bt[kBScHn] = use_hn ? c.w_hard_negative * gsc : 0.0;

    bs->focal_sd_g = q[kQFocalDenG], bs->focal_sd_s = q[kQFocalDenS];
    bs->focal_sup_g = q[kQFocalSupG], bs->focal_sup_s = q[kQFocalSupS];
    bs->ang_sd = q[kQAngDen], bs->ang_sup = q[kQAngSup];
    bs->pad_sd = q[kQPadDen], bs->pad_sup = q[kQPadSup];
    bs->sc_hn = bt[kBScHn];
}

// Sample b's gradient coefficients (the reference's coef[b] of each term).
SF_HD void sample_coefs(const LossArgs& a, int b, const BatchScalars& bs) {
    const double* r = a.samples + static_cast<size_t>(b) * kLossSampleSlots;
    double* o = a.coefs + static_cast<size_t>(b) * kLossCoefSlots;
    const double eps = a.cfg.angle_eps;
    if (!a.corrected()) {
        o[kCoefFocalG] = bs.focal_sd_g != 0 ? 1.0 / bs.focal_sd_g : 0.0;
        o[kCoefFocalS] = bs.focal_sd_s != 0 ? 1.0 / bs.focal_sd_s : 0.0;
        o[kCoefAngle] = 1.0 / (bs.ang_sd + eps);
        o[kCoefPad] = bs.pad_sd != 0 ? 1.0 / bs.pad_sd : 0.0;
    } else {
        o[kCoefFocalG] = r[kRowFocalDenG] > 0 ? 1.0 / (r[kRowFocalDenG] * bs.focal_sup_g) : 0.0;
        o[kCoefFocalS] = r[kRowFocalDenS] > 0 ? 1.0 / (r[kRowFocalDenS] * bs.focal_sup_s) : 0.0;
        o[kCoefAngle] = r[kRowAngDen] > 0 ? 1.0 / ((r[kRowAngDen] + eps) * bs.ang_sup) : 0.0;
        o[kCoefPad] = !(r[kRowPadDen] < kPadMinWeight) ? 1.0 / (r[kRowPadDen] * bs.pad_sup) : 0.0;
    }
    const double hn = bs.sc_hn * r[kSmpHnCoef];
    o[kCoefHnGap] = -hn * r[kSmpHnActive];
    for (int k = 0; k < data::kMaxFakeGaps; ++k) o[kCoefHnFake0 + k] = hn * r[kSmpHnCount0 + k];
}

// ---- launch 4: gradients ----

// d total / d logits of cell k, overwritten. Terms in the reference's order of accumulation.
SF_HD void grad_cell(const LossArgs& a, size_t k) {
    const LossConfig& c = a.cfg;
    const int hw = a.hw();
    const int b = static_cast<int>(k / hw), cell = static_cast<int>(k % hw), r = cell / a.w, j = cell % a.w;
    const double* bt = a.batch;
    const double* cf = a.coefs + static_cast<size_t>(b) * kLossCoefSlots;
    const data::Label& l = a.labels[b];
    const SampleCtx s = sample_ctx(a, b);
    const double m = a.m[k];
    const double pg = sigmoid(a.zg[k]), ps = sigmoid(a.zs[k]);
    const double yg = heat_target(s.gap, s.t, r, j), ys = heat_target(s.slider, s.t, r, j);
    const float4 zo = reinterpret_cast<const float4*>(a.zo)[k];
    const double zoff[4] = {zo.x, zo.y, zo.z, zo.w};
    double gpg = 0, gps = 0, goff[4] = {0, 0, 0, 0}, gang[2] = {0, 0}, dl;

    if (bt[kBScFocalG] != 0) {
        focal_cell(c, pg, yg, &dl);
        gpg += bt[kBScFocalG] * cf[kCoefFocalG] * m * dl;
    }
    if (bt[kBScFocalS] != 0) {
        focal_cell(c, ps, ys, &dl);
        gps += bt[kBScFocalS] * cf[kCoefFocalS] * m * dl;
    }
    for (int obj = 0; obj < 2; ++obj) {  // offset
        const double sc = bt[obj ? kBScOffS : kBScOffG], norm = bt[obj ? kBOffNormS : kBOffNormG];
        if (sc == 0) continue;
        const ObjectCell& oc = obj ? s.slider : s.gap;
        const bool peak = r == oc.v && j == oc.u;
        if (a.corrected() && !(peak && !(m < kOffsetMinWeight))) continue;  // supported peak cells only
        // `sider`: wt / wsum over the whole window (quirk 4); corrected: 1 / supported samples.
        const double coef = a.corrected() ? 1.0 / norm : (obj ? ys : yg) * m / norm;
        double dx, dy;
        smooth_l1(0.5 * tanh(zoff[2 * obj]) - (peak ? oc.du : 0.0), c.offset_beta, &dx);
        smooth_l1(0.5 * tanh(zoff[2 * obj + 1]) - (peak ? oc.dv : 0.0), c.offset_beta, &dy);
        goff[2 * obj] += sc * coef * dx;
        goff[2 * obj + 1] += sc * coef * dy;
    }
    if (bt[kBScHn] != 0) {  // hard negative: the sampled corners of the gap map
        const int st = c.stride;
        double wt;
        if (cf[kCoefHnGap] != 0 && bilinear_corner(a.h, a.w, double(l.gap_x) / st, double(l.gap_y) / st, r, j, &wt))
            gpg += cf[kCoefHnGap] * wt;
        const int nf = clamp_fakes(l.num_fakes);
        for (int slot = 0; slot < data::kMaxFakeGaps; ++slot) {
            const double cc = cf[kCoefHnFake0 + slot];
            if (cc == 0) continue;
            double fx = 0, fy = 0;
            if (nf > 0) fake_grid_coords(c.variant, l, slot, st, &fx, &fy);
            if (bilinear_corner(a.h, a.w, fx, fy, r, j, &wt)) gpg += cc * wt;
        }
    }
    if (bt[kBScAngle] != 0 && cf[kCoefAngle] != 0) {
        const double wt = (yg > c.angle_pos_threshold ? 1.0 : 0.0) * m;
        if (wt != 0) {
            const double th = l.angle_rad, sc = bt[kBScAngle];
            gang[0] -= sc * cf[kCoefAngle] * wt * sin(th);
            gang[1] -= sc * cf[kCoefAngle] * wt * cos(th);
        }
    }
    if (bt[kBScPad] != 0) {
        double dg, ds;
        pad_cell(c, pg, &dg);
        pad_cell(c, ps, &ds);
        gpg += bt[kBScPad] * cf[kCoefPad] * (1 - m) * dg;
        gps += bt[kBScPad] * cf[kCoefPad] * (1 - m) * ds;
    }
    if (bt[kBScY] != 0) {
        const double* yr = a.yrow + (static_cast<size_t>(b) * a.h + r) * kLossYRowSlots;
        gpg += bt[kBScY] * yr[0] / a.w;
        gps += bt[kBScY] * yr[1] / a.w;
    }

    // Through the activations (backward_activations of loss.cpp).
    a.gg[k] = static_cast<float>(chain(gpg, pg * (1 - pg)));
    a.gs[k] = static_cast<float>(chain(gps, ps * (1 - ps)));
    double go[4];
    for (int ch = 0; ch < 4; ++ch) {
        const double th = tanh(zoff[ch]);
        go[ch] = chain(goff[ch], 0.5 * (1 - th * th));
    }
    reinterpret_cast<float4*>(a.go)[k] = make_float4(static_cast<float>(go[0]), static_cast<float>(go[1]),
                                                     static_cast<float>(go[2]), static_cast<float>(go[3]));
    double g0[2] = {0, 0};
    if (gang[0] != 0 || gang[1] != 0) {
        const float2 za = reinterpret_cast<const float2*>(a.za)[k];
        const double z2[2] = {za.x, za.y};
        double a1[2], g1[2];
        normalize2(z2, a1);
        normalize2_backward(a1, gang, g1);  // the loss's normalisation
        normalize2_backward(z2, g1, g0);    // the head's
    }
    reinterpret_cast<float2*>(a.ga)[k] = make_float2(static_cast<float>(g0[0]), static_cast<float>(g0[1]));
}

// ---- device-only helpers ----

// Sums v[0..K) over the block in a fixed order: a shuffle tree per warp, then thread 0 adds the warp
// sums in warp order. Valid in thread 0. blockDim.x a multiple of 32; every thread must call it;
// smem holds (blockDim.x / 32) * K doubles.
template <int K>
__device__ void block_sum(double (&v)[K], double* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int q = 0; q < K; ++q) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_down_sync(0xffffffffu, v[q], o);
    }
    if (lane == 0) {
#pragma unroll
        for (int q = 0; q < K; ++q) smem[warp * K + q] = v[q];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int q = 0; q < K; ++q) {
            double s = smem[q];
            for (int i = 1; i < warps; ++i) s += smem[i * K + q];
            v[q] = s;
        }
    }
}

// ---- kernels ----

// Launch 1. grid n*h (block = one grid row), block loss_row_threads(w): threads over the row's cells.
__global__ void __launch_bounds__(kLossRowMaxThreads) loss_rows_kernel(LossArgs a) {
    __shared__ double smem[(kLossRowMaxThreads / 32) * kRowSlotCount];
    const int b = blockIdx.x / a.h, r = blockIdx.x % a.h;
    const SampleCtx s = sample_ctx(a, b);
    double acc[kRowSlotCount] = {};
    for (int j = threadIdx.x; j < a.w; j += blockDim.x) row_cell(a, s, b, r, j, acc);
    block_sum(acc, smem);
    if (threadIdx.x == 0) {
        double* out = a.rows + static_cast<size_t>(blockIdx.x) * kLossRowSlots;
#pragma unroll
        for (int q = 0; q < kRowSlotCount; ++q) out[q] = acc[q];
    }
}

// Launch 2. grid n (block = one sample), block kLossSampleThreads. Phases separated by barriers;
// threads 0 / 32 / 64 (three different warps) run the sequential parts side by side.
__global__ void __launch_bounds__(kLossSampleThreads) loss_sample_kernel(LossArgs a) {
    __shared__ double eg[kLossMaxRows], dg[kLossMaxRows], es[kLossMaxRows], ds[kLossMaxRows];
    __shared__ double gg[kLossMaxRows], gs[kLossMaxRows];
    __shared__ double mx_g, mx_s, z_g, z_s, dot_g, dot_s;
    __shared__ int kmax, with_fakes;
    const int b = blockIdx.x, t = threadIdx.x, h = a.h;
    const double* rows = a.rows + static_cast<size_t>(b) * h * kLossRowSlots;
    double* rec = a.samples + static_cast<size_t>(b) * kLossSampleSlots;

    if (t == 0) kmax = 0, with_fakes = 0;
    for (int r = t; r < h; r += blockDim.x) y_row_init(a, rows + r * kLossRowSlots, &eg[r], &dg[r], &es[r], &ds[r]);
    if (t < kRowSummed) {  // row sums of the sample record, in row order
        double s = 0;
#pragma unroll 8
        for (int r = 0; r < h; ++r) s += rows[r * kLossRowSlots + t];
        rec[t] = s;
    }
    __syncthreads();
    for (int i = t; i < a.n; i += blockDim.x) {  // integer atomics: exact in any order
        const int nf = clamp_fakes(a.labels[i].num_fakes);
        atomicMax(&kmax, nf);
        if (nf > 0) atomicAdd(&with_fakes, 1);
    }
    if (t == 0) mx_g = seq_max(dg, h);
    if (t == 32) mx_s = seq_max(ds, h);
    __syncthreads();
    for (int r = t; r < h; r += blockDim.x) dg[r] = exp(dg[r] - mx_g), ds[r] = exp(ds[r] - mx_s);
    __syncthreads();
    if (t == 0) z_g = seq_sum(dg, h);
    if (t == 32) z_s = seq_sum(ds, h);
    __syncthreads();
    for (int r = t; r < h; r += blockDim.x) dg[r] /= z_g, ds[r] /= z_s;
    __syncthreads();
    if (t == 0) y_sample_tail(a, b, dg, ds, gg, gs, &rec[kSmpCe], &rec[kSmpEmd], &dot_g, &dot_s);
    if (t == 32) hn_sample(a, b, kmax, with_fakes, rec);
    if (t == 64) offset_peaks(a, b, rec);
    __syncthreads();
    double* yrow = a.yrow + static_cast<size_t>(b) * h * kLossYRowSlots;
    for (int r = t; r < h; r += blockDim.x) {
        yrow[r * kLossYRowSlots] = y_row_grad(a.cfg, dg[r], gg[r], dot_g, eg[r]);
        yrow[r * kLossYRowSlots + 1] = y_row_grad(a.cfg, ds[r], gs[r], dot_s, es[r]);
    }
}

// Launch 3. One block of kLossBatchThreads: thread t sums samples t, t + 256, ... in order, then a
// fixed block tree; thread 0 assembles the terms; then threads write the per-sample coefficients.
__global__ void __launch_bounds__(kLossBatchThreads) loss_batch_kernel(LossArgs a) {
    __shared__ double smem[(kLossBatchThreads / 32) * kBatchQCount];
    __shared__ BatchScalars bs;
    double q[kBatchQCount] = {};
    for (int b = threadIdx.x; b < a.n; b += blockDim.x) batch_parts(a, b, q);
    block_sum(q, smem);
    if (threadIdx.x == 0) batch_finalize(a, q, &bs);
    __syncthreads();
    for (int b = threadIdx.x; b < a.n; b += blockDim.x) sample_coefs(a, b, bs);
}

// Launch 4. One thread per cell.
__global__ void __launch_bounds__(kLossGradThreads) loss_grad_kernel(LossArgs a, size_t cells) {
    const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k < cells) grad_cell(a, k);
}

// Mask pooling: one thread per grid cell, the cell's stride x stride pixels in the references' order
// (rows, then columns); the average in double as mask_grid_avg_ref, the min as mask_grid_min_ref.
__global__ void __launch_bounds__(kMaskGridThreads)
    mask_grid_kernel(size_t cells, int h, int w, int H, int W, int C, int mask_c, int stride,
                     const bfloat* __restrict__ input, float* __restrict__ avg, float* __restrict__ mn) {
    const size_t cell = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (cell >= cells) return;
    const int j = static_cast<int>(cell % w), i = static_cast<int>((cell / w) % h);
    const size_t b = cell / (static_cast<size_t>(h) * w);
    double sum = 0;
    float lo = INFINITY;
    for (int dy = 0; dy < stride; ++dy) {
        const size_t row = (b * H + static_cast<size_t>(i) * stride + dy) * W + static_cast<size_t>(j) * stride;
        for (int dx = 0; dx < stride; ++dx) {
            const float v = __bfloat162float(input[(row + dx) * C + mask_c]);
            sum += v;
            lo = v < lo ? v : lo;  // std::min(lo, v)
        }
    }
    if (avg) avg[cell] = static_cast<float>(sum * (1.0 / (double(stride) * stride)));
    if (mn) mn[cell] = lo;
}

// ---- launch helpers ----

void check_ptr(const char* name, const void* p, size_t align) {
    rt::check_device_ptr("loss_forward_backward_cuda", name, p, align);
}

void check_config(const LossConfig& cfg) {
    SF_CHECK(cfg.stride > 0 && cfg.sigma > 0 && cfg.y_tau > 0, "bad loss config: stride %d sigma %g tau %g", cfg.stride,
             cfg.sigma, cfg.y_tau);
}

}  // namespace

// ---- launchers ----

LossPlan loss_plan(int n, int h, int w) {
    SF_CHECK(n >= 1, "loss: batch n=%d must be at least 1", n);
    SF_CHECK(h >= 1 && w >= 1, "loss: bad grid h=%d w=%d", h, w);
    SF_CHECK(h <= kLossMaxRows, "loss: grid h=%d exceeds kLossMaxRows=%d", h, kLossMaxRows);
    const size_t cells = static_cast<size_t>(n) * h * w;
    SF_CHECK(cells < (size_t(1) << 31), "loss: n*h*w=%zu cells exceed 2^31", cells);
    LossPlan p;
    p.n = n, p.h = h, p.w = w;
    p.cells = cells;
    p.row_blocks = n * h;
    p.row_threads = loss_row_threads(w);
    p.sample_blocks = n;
    p.grad_blocks = static_cast<int>((cells + kLossGradThreads - 1) / kLossGradThreads);
    size_t off = 0;
    p.off_rows = off;
    off += loss_region_bytes(static_cast<size_t>(n) * h * kLossRowSlots);
    p.off_yrow = off;
    off += loss_region_bytes(static_cast<size_t>(n) * h * kLossYRowSlots);
    p.off_samples = off;
    off += loss_region_bytes(static_cast<size_t>(n) * kLossSampleSlots);
    p.off_coefs = off;
    off += loss_region_bytes(static_cast<size_t>(n) * kLossCoefSlots);
    p.off_batch = off;
    off += loss_region_bytes(kLossBatchSlots);
    p.workspace_bytes = off;
    return p;
}

size_t loss_workspace_bytes(const LossConfig& cfg, int n, int h, int w) {
    check_config(cfg);
    return loss_plan(n, h, w).workspace_bytes;
}

void mask_grid_cuda(const rt::Exec& ex, int n, int H, int W, int C, int mask_c, int stride, const kern::bf16* input,
                    float* valid_avg, float* valid_min) {
    rt::check_cuda_exec("mask_grid_cuda", ex);
    SF_CHECK(n > 0 && H > 0 && W > 0 && C > 0, "mask_grid_cuda: bad input shape (%d,%d,%d,%d)", n, H, W, C);
    SF_CHECK(mask_c >= 0 && mask_c < C, "mask_grid_cuda: mask channel %d outside 0..%d", mask_c, C - 1);
    SF_CHECK(stride > 0 && H % stride == 0 && W % stride == 0,
             "mask_grid_cuda: input %dx%d is not a multiple of stride %d", H, W, stride);
    SF_CHECK(rt::aligned(input, 2), "mask_grid_cuda: null or misaligned input");
    SF_CHECK(valid_avg || valid_min, "mask_grid_cuda: both outputs are null");
    SF_CHECK((!valid_avg || rt::aligned(valid_avg, 4)) && (!valid_min || rt::aligned(valid_min, 4)),
             "mask_grid_cuda: misaligned output");
    const int h = H / stride, w = W / stride;
    const size_t cells = static_cast<size_t>(n) * h * w;
    mask_grid_kernel<<<static_cast<unsigned>(mask_grid_blocks(cells)), kMaskGridThreads, 0, ex.stream>>>(
        cells, h, w, H, W, C, mask_c, stride, reinterpret_cast<const bfloat*>(input), valid_avg, valid_min);
    SF_CUDA_CHECK_LAUNCH();
}

void loss_forward_backward_cuda(const rt::Exec& ex, const LossConfig& cfg, const HeadLogits<float>& logits,
                                const float* valid_avg, const data::Label* labels, const HeadGrads<float>* grads,
                                double grad_scale, DeviceLossTerms* out, double* loss_sum, void* workspace,
                                size_t workspace_bytes) {
    rt::check_cuda_exec("loss_forward_backward_cuda", ex);
    check_config(cfg);
    const LossPlan p = loss_plan(logits.n, logits.h, logits.w);
    check_ptr("logits.gap", logits.gap, 4);
    check_ptr("logits.slider", logits.slider, 4);
    check_ptr("logits.offset", logits.offset, 16);
    check_ptr("logits.angle", logits.angle, 8);
    check_ptr("valid_avg", valid_avg, 4);
    check_ptr("labels", labels, alignof(data::Label));
    check_ptr("out", out, 8);
    if (loss_sum) check_ptr("loss_sum", loss_sum, 8);
    check_ptr("workspace", workspace, kLossRegionAlign);
    SF_CHECK(workspace_bytes >= p.workspace_bytes,
             "loss_forward_backward_cuda: workspace of %zu bytes is too small for n=%d h=%d w=%d (need "
             "loss_workspace_bytes = %zu)",
             workspace_bytes, p.n, p.h, p.w, p.workspace_bytes);
    if (grads) {
        check_ptr("grads->gap", grads->gap, 4);
        check_ptr("grads->slider", grads->slider, 4);
        check_ptr("grads->offset", grads->offset, 16);
        check_ptr("grads->angle", grads->angle, 8);
        SF_CHECK(grads->gap != logits.gap && grads->slider != logits.slider && grads->offset != logits.offset &&
                     grads->angle != logits.angle,
                 "loss_forward_backward_cuda: grads must not alias the logits");
    }

    LossArgs a{};
    a.cfg = cfg;
    a.n = p.n, a.h = p.h, a.w = p.w;
    a.grad_scale = grad_scale;
    a.zg = logits.gap, a.zs = logits.slider, a.zo = logits.offset, a.za = logits.angle;
    a.m = valid_avg;
    a.labels = labels;
    char* ws = static_cast<char*>(workspace);
    a.rows = reinterpret_cast<double*>(ws + p.off_rows);
    a.yrow = reinterpret_cast<double*>(ws + p.off_yrow);
    a.samples = reinterpret_cast<double*>(ws + p.off_samples);
    a.coefs = reinterpret_cast<double*>(ws + p.off_coefs);
    a.batch = reinterpret_cast<double*>(ws + p.off_batch);
    if (grads) a.gg = grads->gap, a.gs = grads->slider, a.go = grads->offset, a.ga = grads->angle;
    a.out = out;
    a.loss_sum = loss_sum;

    loss_rows_kernel<<<p.row_blocks, p.row_threads, 0, ex.stream>>>(a);
    SF_CUDA_CHECK_LAUNCH();
    loss_sample_kernel<<<p.sample_blocks, kLossSampleThreads, 0, ex.stream>>>(a);
    SF_CUDA_CHECK_LAUNCH();
    loss_batch_kernel<<<1, kLossBatchThreads, 0, ex.stream>>>(a);
    SF_CUDA_CHECK_LAUNCH();
    if (grads) {
        loss_grad_kernel<<<p.grad_blocks, kLossGradThreads, 0, ex.stream>>>(a, p.cells);
        SF_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace model

#undef SF_HD
