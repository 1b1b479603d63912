// GpuOps's timing at plan time (model/gpu_ops.h): the project's kernels of one convolution shape timed on
// zeroed buffers, every variant of a pass, with the epilogues and prologues the step's layers run, and the
// BN passes those remove credited to cuDNN's time, so that prepare_entries compares what the step would run.
// Split from model/gpu_ops.cpp (the choice and the step-time entry points).
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/bn_act_cuda.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "kernels/stemconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/gpu_ops_entry.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/stream_timing.h"

namespace model {

// The first staged gather variant that can run s's forward (the statistics epilogue's default).
int first_staged_forward(const kern::ConvShape& s) {
    for (int v = 0; v < kern::kDwVariantCount; ++v)
        if (kern::dw_variant_staged(v) && kern::dwconv3x3_variant_supported(s, v, false)) return v;
    SF_FAIL("%s: no staged depthwise variant runs its forward", s.describe().c_str());
}

namespace {

// Zeroed device buffers for timing the kernels of one shape at plan time, freed on scope exit:
// x, w, y (also read as dy), dx (only with_dx), dw (fp32) and a workspace of ws_floats.
struct TimingBuffers {
    struct Owned {  // a member, so that what was allocated is freed if a later allocation throws
        void* p[6] = {};
        ~Owned() {
            for (void* q : p)
                if (q) cudaFree(q);
        }
    } mem;
    kern::bf16 *x = nullptr, *w = nullptr, *y = nullptr, *dx = nullptr;
    float *dw = nullptr, *ws = nullptr;

    TimingBuffers(const kern::ConvShape& s, size_t ws_floats, bool with_dx, cudaStream_t stream) {
        const size_t xn = s.in().numel(), yn = s.out().numel(), wn = s.weight_numel();
        const size_t bytes[6] = {xn * sizeof(kern::bf16), wn * sizeof(kern::bf16),
                                 yn * sizeof(kern::bf16), with_dx ? xn * sizeof(kern::bf16) : 0,
                                 wn * sizeof(float),      std::max<size_t>(ws_floats, 1) * sizeof(float)};
        for (int i = 0; i < 6; ++i) {
            if (bytes[i] == 0) continue;
            SF_CUDA_CHECK(cudaMalloc(&mem.p[i], bytes[i]));
            if (i < 5) SF_CUDA_CHECK(cudaMemsetAsync(mem.p[i], 0, bytes[i], stream));  // the workspace is scratch
        }
        x = static_cast<kern::bf16*>(mem.p[0]);
        w = static_cast<kern::bf16*>(mem.p[1]);
        y = static_cast<kern::bf16*>(mem.p[2]);
        dx = static_cast<kern::bf16*>(mem.p[3]);
        dw = static_cast<float*>(mem.p[4]);
        ws = static_cast<float*>(mem.p[5]);
    }
};

// A BN prologue of activation act whose four C-vectors (gamma, beta, mean, invstd) are zeros (`zeros`: at
// least 4C floats, zeroed): what the timings run, every z = 0, the same instructions as real statistics
// (no data-dependent branch in the apply).
kern::DwPrologue zero_prologue(kern::Act act, const float* zeros, int c) {
    kern::DwPrologue pro;
    pro.act = act;
    pro.gamma = zeros;
    pro.beta = zeros + c;
    pro.mean = zeros + 2 * c;
    pro.invstd = zeros + 3 * c;
    return pro;
}

// The four C-vectors of a timing's statistics epilogue, consecutive from p (momentum 0.1, eps 1e-5).
kern::BnStatsOut stats_at(float* p, size_t c) {
    kern::BnStatsOut st;
    st.save_mean = p;
    st.save_invstd = p + c;
    st.running_mean = p + 2 * c;
    st.running_var = p + 3 * c;
    return st;
}

// The index of the smallest non-negative time (the first on ties; 0 when none was timed).
int fastest_variant(const std::vector<double>& ms) {
    int best = 0;
    for (int v = 0; v < static_cast<int>(ms.size()); ++v)
        if (ms[v] >= 0 && (ms[best] < 0 || ms[v] < ms[best])) best = v;
    return best;
}

}  // namespace

// Mean ms of `iters` runs of run() on the stream, after one warm-up run (plan time: synchronises).
double GpuOps::time_runs(const std::function<void()>& run, int iters) const {
    return rt::stream_mean_ms(ex_.stream, 1, iters, run);
}

// The custom depthwise kernels of e's shape: every valid variant of the forward, the wgrad and (when
// the step needs it) the dgrad in each mode the step runs, timed on its own, the fastest of each kept
// in e. Returns best forward + best wgrad + the mean over the modes of the best dgrad, comparable with
// cudnn_ms. The variants of a pass give bitwise-identical results (kern::kDwVariants,
// kern::kDwWgradVariants), so the choice changes speed only. With e.fused the fused backward is timed
// in each dgrad mode too, and it replaces dgrad + wgrad in the returned total (the separate passes' times
// stay in the variants line: the fused kernel's A/B per shape).
//
// With the statistics epilogue (stats_forward(e)) only the staged forward variants are timed, each with it
// (its finalize included), and cudnn_credit is the time of the statistics pass it removes (bn_stats_train on
// the output), which cuDNN's forward would be followed by: the choice compares what the step would run.
double GpuOps::time_depthwise(Entry& e, double& cudnn_credit) const {
    const kern::ConvShape& s = e.shape;
    const bool stats = stats_forward(e);
    const size_t rows = s.out().pixels(), c = static_cast<size_t>(s.cout);
    size_t wsf = std::max(kern::dwconv3x3_workspace_floats(s), e.fused ? kern::dwconv3x3_fused_workspace_floats(s) : 0);
    if (stats)
        wsf = std::max({wsf, kern::dwconv3x3_stats_workspace_floats(s), kern::bn_act_workspace_floats(rows, s.cout)});
    // The workspace, then (with the epilogue) the 4C statistics it writes.
    const TimingBuffers b(s, wsf + (stats ? 4 * c : 0), e.dgrad, ex_.stream);
    const kern::BnStatsOut st = stats_at(b.ws + wsf, c);
    if (stats) SF_CUDA_CHECK(cudaMemsetAsync(st.save_mean, 0, 4 * c * sizeof(float), ex_.stream));
    cudnn_credit = 0;
    // Kernels of a fraction of a millisecond: more runs than a cuDNN candidate gets, at little cost.
    const int iters = std::max(policy_.autotune_iters, 10);
    e.fwd_variant_ms.assign(kern::kDwVariantCount, -1.0);
    const bool acc_mode = e.dgrad && e.use.needs_accumulate(), ow_mode = e.dgrad && e.use.needs_overwrite();
    if (acc_mode) e.dgrad_variant_ms.assign(kern::kDwVariantCount, -1.0);
    if (ow_mode) e.dgrad_ow_variant_ms.assign(kern::kDwVariantCount, -1.0);
    // policy_.dw_variants off: variant 0 only (the A/B of `bench step --no-dw-variants`).
    const int gathers = policy_.dw_variants ? kern::kDwVariantCount : 1;
    const int wgrads = policy_.dw_variants ? kern::kDwWgradVariantCount : 1;
    for (int v = 0; v < gathers; ++v) {
        if (stats && kern::dw_variant_staged(v) && kern::dwconv3x3_variant_supported(s, v, false))
            e.fwd_variant_ms[v] = time_runs(
                [&] { kern::dwconv3x3_forward_cuda(ex_, s, b.x, b.w, b.y, nullptr, v, &st, b.ws, wsf); }, iters);
        else if (!stats && kern::dwconv3x3_variant_supported(s, v, false))
            e.fwd_variant_ms[v] =
                time_runs([&] { kern::dwconv3x3_forward_cuda(ex_, s, b.x, b.w, b.y, nullptr, v); }, iters);
        if (e.dgrad && kern::dwconv3x3_variant_supported(s, v, true)) {
            if (acc_mode)
                e.dgrad_variant_ms[v] =
                    time_runs([&] { kern::dwconv3x3_backward_data_cuda(ex_, s, b.y, b.w, b.dx, true, v); }, iters);
            if (ow_mode)
                e.dgrad_ow_variant_ms[v] =
                    time_runs([&] { kern::dwconv3x3_backward_data_cuda(ex_, s, b.y, b.w, b.dx, false, v); }, iters);
        }
    }
    e.wgrad_variant_ms.assign(kern::kDwWgradVariantCount, -1.0);
    for (int v = 0; v < wgrads; ++v) {
        if (kern::dwconv3x3_wgrad_variant_supported(s, v))
            e.wgrad_variant_ms[v] = time_runs(
                [&] { kern::dwconv3x3_backward_filter_cuda(ex_, s, b.x, b.y, b.dw, b.ws, wsf, nullptr, v); }, iters);
    }
    // Without variants (policy_.dw_variants off; only variant 0, direct, was visited) and with the epilogue:
    // the one staged variant the step would run, the first.
    if (stats && !policy_.dw_variants) {
        const int v = first_staged_forward(s);
        e.fwd_variant_ms[v] =
            time_runs([&] { kern::dwconv3x3_forward_cuda(ex_, s, b.x, b.w, b.y, nullptr, v, &st, b.ws, wsf); }, iters);
    }
    if (stats)
        cudnn_credit = time_runs(
            [&] {
                kern::bn_stats_train(ex_, rows, s.cout, b.y, st.save_mean, st.save_invstd, st.running_mean,
                                     st.running_var, 0.1, 1e-5, b.ws, wsf);
            },
            iters);
    e.fwd_variant = fastest_variant(e.fwd_variant_ms);
    e.wgrad_variant = fastest_variant(e.wgrad_variant_ms);
    const double fwd = e.fwd_variant_ms[e.fwd_variant], wgrad = e.wgrad_variant_ms[e.wgrad_variant];
    if (!e.dgrad) return fwd + wgrad;
    // Per dgrad mode the step runs (needs_accumulate() holds whenever overwrite does not: modes >= 1),
    // the best dgrad and, with e.fused, the fused kernel that replaces it and the wgrad.
    // A shape planned with a BN prologue (the fused LiteBlock) runs its fused backward with it: timed so,
    // with zero vectors as time_prologue_forward (the prologue's instructions do not depend on them).
    std::unique_ptr<const TimingBuffers> pro_vecs;  // dw (9C floats, zeroed) holds the 4C vectors
    kern::DwPrologue pro;
    if (e.use.bn_prologue) {
        pro_vecs = std::make_unique<const TimingBuffers>(s, 1, false, ex_.stream);
        pro = zero_prologue(e.use.prologue_act, pro_vecs->dw, s.cin);
    }
    auto time_fused = [&](bool acc) {
        return time_runs(
            [&] {
                kern::dwconv3x3_backward_fused_cuda(ex_, s, b.x, b.y, b.w, b.dx, b.dw, b.ws, wsf, acc, nullptr,
                                                    kern::kDwFusedMaxBlocks, e.use.bn_prologue ? &pro : nullptr);
            },
            iters);
    };
    double dgrad = 0, fused = 0;
    int modes = 0;
    if (acc_mode) {
        e.dgrad_variant = fastest_variant(e.dgrad_variant_ms);
        dgrad += e.dgrad_variant_ms[e.dgrad_variant], ++modes;
        if (e.fused) fused += (e.fused_ms = time_fused(true));
    }
    if (ow_mode) {
        e.dgrad_ow_variant = fastest_variant(e.dgrad_ow_variant_ms);
        dgrad += e.dgrad_ow_variant_ms[e.dgrad_ow_variant], ++modes;
        if (e.fused) fused += (e.fused_ow_ms = time_fused(false));
    }
    return fwd + (e.fused ? fused / modes : wgrad + dgrad / modes);
}

// The forward with e's BN prologue (activation e.use.prologue_act) in every variant that has one,
// the fastest kept. The prologue's vectors are zeros (gamma, beta, mean, invstd: every z = 0), which
// costs the kernels the same instructions as real statistics (no data-dependent branch in the apply).
// Bitwise-equal variants: the choice changes speed only.
void GpuOps::time_prologue_forward(Entry& e) const {
    const kern::ConvShape& s = e.shape;
    // With the statistics epilogue (stats_forward): the staged variants, each with it; the workspace is its
    // partials, then the 4C statistics.
    const bool stats = stats_forward(e);
    const size_t c = static_cast<size_t>(s.cout), wsf = stats ? kern::dwconv3x3_stats_workspace_floats(s) : 0;
    const TimingBuffers b(s, stats ? wsf + 4 * c : 1, false,
                          ex_.stream);  // dw (9C floats, zeroed) holds the 4C vectors
    const kern::DwPrologue pro = zero_prologue(e.use.prologue_act, b.dw, s.cin);
    const kern::BnStatsOut st = stats_at(b.ws + wsf, c);
    if (stats) SF_CUDA_CHECK(cudaMemsetAsync(st.save_mean, 0, 4 * c * sizeof(float), ex_.stream));
    const int iters = std::max(policy_.autotune_iters, 10);
    e.pro_fwd_variant_ms.assign(kern::kDwVariantCount, -1.0);
    const int first = stats ? first_staged_forward(s) : 0;  // without variants: the one the step would run
    for (int v = first; v < (policy_.dw_variants ? kern::kDwVariantCount : first + 1); ++v)
        if (kern::dw_variant_prologue(v) && kern::dwconv3x3_variant_supported(s, v, false) &&
            (!stats || kern::dw_variant_staged(v)))
            e.pro_fwd_variant_ms[v] = time_runs(
                [&] { kern::dwconv3x3_forward_cuda(ex_, s, b.x, b.w, b.y, &pro, v, stats ? &st : nullptr, b.ws, wsf); },
                iters);
    e.pro_fwd_variant = fastest_variant(e.pro_fwd_variant_ms);
}

double GpuOps::time_stem(const kern::ConvShape& s) const {
    const size_t wsf = kern::stemconv_workspace_floats(s);
    const TimingBuffers b(s, wsf, false, ex_.stream);
    return time_runs(
        [&] {
            kern::stemconv_forward_cuda(ex_, s, b.x, b.w, b.y);
            kern::stemconv_backward_filter_cuda(ex_, s, b.x, b.y, b.dw, b.ws, wsf);
        },
        policy_.autotune_iters);
}

// The project's 1x1 conv (kernels/pwconv_cuda.h): forward + wgrad + the mean over the dgrad modes the
// step runs, comparable with cudnn_ms. With pw_stats and a shape some ConvBN takes its statistics from
// (use.stats_epilogue), the forward is timed with the statistics epilogue and cuDNN is credited with the
// statistics pass it removes (bn_stats_train on the output); with pw_bn_grad and a shape whose dgrad
// gathers its input's BN reductions (use.bn_grad_epilogue), the overwrite-mode dgrad (the mode those
// layers run) with the BN-backward epilogue, and cuDNN credited with the reduce pass it removes
// (bn_act_backward_stats on the input, weighted as that mode's share of the dgrad time); with pw_bn_bwd and a
// shape whose layers form their BN's dx on load (use.bn_bwd_prologue), the dgrad (both modes; the overwrite
// one with the epilogue too where marked) and the wgrad with the BN-backward prologue, and cuDNN credited with
// the dx pass it removes (bn_act_backward_dx on the output); with pw_fused_bwd and a shape some layer of which takes
// the fused backward (e.pw_fused_timed) with the prologue and epilogue above, the backward as that one pass per dgrad
// mode (the BN-backward prologue, and in the overwrite mode the epilogue, as above) instead of the wgrad and the
// dgrad. Zero vectors: the same instructions as real statistics.
double GpuOps::time_pointwise(Entry& e, double& cudnn_credit) const {
    const kern::ConvShape& s = e.shape;
    const size_t rows = s.in().pixels();
    const bool stats = pw_stats() && e.use.stats_epilogue && rows >= 2;
    const bool bn_grad = pw_bn_grad() && e.use.bn_grad_epilogue && e.use.needs_overwrite() && rows >= 2;
    const bool bn_bwd = pw_bn_bwd() && e.use.bn_bwd_prologue && s.cout <= kern::kPwMaxPrologueK;
    // The fused backward where the shape's layers take it, with the prologue and epilogue timed below.
    kern::DwBnBackward bnb_act;
    bnb_act.act = e.use.bn_bwd_act;
    kern::BnGradSums bng_act;
    bng_act.act = e.use.bn_grad_act;
    const bool fused = e.pw_fused_timed && kern::pwconv_backward_fused_supported(
                                               s, nullptr, bn_bwd ? &bnb_act : nullptr, bn_grad ? &bng_act : nullptr);
    e.pw_fused_timed = fused;
    const int c = std::max(s.cin, s.cout);
    size_t wsf = kern::pwconv_wgrad_workspace_floats(s);
    if (fused) wsf = std::max(wsf, kern::pwconv_backward_fused_workspace_floats(s, bn_grad));
    if (stats) wsf = std::max({wsf, kern::pwconv_workspace_floats(s), kern::bn_act_workspace_floats(rows, s.cout)});
    if (bn_grad)
        wsf = std::max({wsf, kern::pwconv_dgrad_workspace_floats(s), kern::bn_act_workspace_floats(rows, s.cin)});
    if (bn_bwd) wsf = std::max(wsf, kern::bn_act_workspace_floats(rows, s.cout));
    // The workspace, then 4C zeros (the BN's vectors) and 4C outputs (statistics, or dgamma, dbeta, coef).
    const TimingBuffers b(s, wsf + 8 * static_cast<size_t>(c), e.dgrad, ex_.stream);
    float* zeros = b.ws + wsf;
    float* outs = zeros + 4 * static_cast<size_t>(c);
    SF_CUDA_CHECK(cudaMemsetAsync(zeros, 0, 8 * static_cast<size_t>(c) * sizeof(float), ex_.stream));
    const int iters = std::max(policy_.autotune_iters, 10);
    cudnn_credit = 0;
    const kern::BnStatsOut st = stats_at(outs, static_cast<size_t>(c));
    // The BN-backward prologue (bn_bwd): y is the BN's input and, as dy, its output's gradient.
    const kern::DwBnBackward bnb{e.use.bn_bwd_act, b.y, zeros, zeros + c, zeros + 2 * c, zeros + 3 * c, zeros};
    const kern::DwBnBackward* pb = bn_bwd ? &bnb : nullptr;
    // The BN-backward epilogue (bn_grad): x is the producer BN's input; its sums into outs.
    const kern::BnGradSums bng{e.use.bn_grad_act, b.x,  zeros,    zeros + c,   zeros + 2 * c,
                               zeros + 3 * c,     outs, outs + c, outs + 2 * c};
    const auto reduce_pass = [&] {  // the producer's reduction pass the epilogue removes
        kern::bn_act_backward_stats(ex_, e.use.bn_grad_act, rows, s.cin, b.x, b.dx, zeros, zeros + c, zeros + 2 * c,
                                    zeros + 3 * c, outs, outs + c, b.ws, wsf, bn_backward_rows());
    };
    double ms = time_runs(
        [&] { kern::pwconv_forward_cuda(ex_, s, b.x, b.w, b.y, nullptr, stats ? &st : nullptr, b.ws, wsf); }, iters);
    if (!fused)
        ms += time_runs([&] { kern::pwconv_backward_filter_cuda(ex_, s, b.x, b.y, b.dw, b.ws, wsf, nullptr, pb); },
                        iters);
    const kern::BnBackwardRows rk = bn_backward_rows();  // the step's BN backward kernels, credited as run
    if (bn_bwd) {  // the dx pass the prologue removes, into a (rows, cout) buffer of its own
        kern::ConvShape out = s;
        out.cin = s.cout;
        const TimingBuffers o(out, 1, false, ex_.stream);
        const auto dx_pass = [&] {
            kern::bn_act_backward_dx(ex_, e.use.bn_bwd_act, rows, s.cout, b.y, b.y, zeros, zeros + c, zeros + 2 * c,
                                     zeros + 3 * c, zeros, o.x, rk);
        };
        cudnn_credit += time_runs(dx_pass, iters);
    }
    if (stats)
        cudnn_credit += time_runs(
            [&] {
                kern::bn_stats_train(ex_, s.out().pixels(), s.cout, b.y, st.save_mean, st.save_invstd, st.running_mean,
                                     st.running_var, 0.1, 1e-5, b.ws, wsf);
            },
            iters);
    if (!e.dgrad) return ms;
    double dgrad = 0;
    int modes = 0;
    if (fused) {  // dgrad and wgrad in one pass, per mode the step runs (the overwrite one with the epilogue)
        for (const bool acc : {true, false}) {
            if (acc ? !e.use.needs_accumulate() : !e.use.needs_overwrite()) continue;
            const kern::BnGradSums* g = bn_grad && !acc ? &bng : nullptr;
            dgrad += time_runs(
                [&] {
                    kern::pwconv_backward_fused_cuda(ex_, s, b.x, b.y, b.w, b.dx, b.dw, acc, b.ws, wsf, nullptr, pb, g);
                },
                iters);
            ++modes;
        }
        if (bn_grad) cudnn_credit += time_runs(reduce_pass, iters) / modes;
        return ms + dgrad / modes;
    }
    if (e.use.needs_accumulate())
        dgrad += time_runs([&] { kern::pwconv_backward_data_cuda(ex_, s, b.y, b.w, b.dx, true, pb); }, iters), ++modes;
    if (e.use.needs_overwrite()) {
        dgrad += time_runs(
            [&] {
                kern::pwconv_backward_data_cuda(ex_, s, b.y, b.w, b.dx, false, pb, bn_grad ? &bng : nullptr, b.ws, wsf);
            },
            iters),
            ++modes;
        if (bn_grad) cudnn_credit += time_runs(reduce_pass, iters) / modes;
    }
    return ms + dgrad / modes;
}

}  // namespace model
