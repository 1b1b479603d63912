// Launch 3 of the CUDA fused loss (model/loss.cu, docs/LOSS.md "GPU loss kernel"): each sample's
// contributions to the batch sums, the batch scalars (focal normalisers, term weights) and each
// sample's gradient coefficients, as __host__ __device__ functions (SF_HD) mirroring the double CPU
// reference. Included only by model/loss.cu.
#pragma once

#include "model/loss_cuda.h"
#include "model/loss_device.cuh"

namespace model {
namespace {

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

}  // namespace
}  // namespace model
