#include "model/gpu_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "kernels/bn_act_cuda.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "kernels/stemconv_cuda.h"
#include "model/gpu_ops_entry.h"
#include "runtime/cuda_check.h"
#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace model {

const char* conv_impl_name(ConvImpl i) {
    switch (i) {
        case ConvImpl::Cudnn: return "cudnn";
        case ConvImpl::CustomDepthwise: return "custom-depthwise";
        case ConvImpl::CustomStem: return "custom-stem";
        case ConvImpl::CustomPointwise: return "custom-pointwise";
    }
    return "?";
}

std::vector<ConvImpl> conv_candidates(const kern::ConvShape& s, bool pw_custom) {
    std::vector<ConvImpl> c{ConvImpl::Cudnn};
    if (kern::dwconv3x3_supported(s)) c.push_back(ConvImpl::CustomDepthwise);
    if (kern::stemconv_supported(s)) c.push_back(ConvImpl::CustomStem);
    if (pw_custom && kern::pwconv_supported(s)) c.push_back(ConvImpl::CustomPointwise);
    return c;
}

size_t custom_workspace_floats(ConvImpl impl, const kern::ConvShape& s) {
    switch (impl) {
        case ConvImpl::CustomDepthwise: return kern::dwconv3x3_workspace_floats(s);
        case ConvImpl::CustomStem: return kern::stemconv_workspace_floats(s);
        case ConvImpl::CustomPointwise: return kern::pwconv_wgrad_workspace_floats(s);
        case ConvImpl::Cudnn: break;
    }
    return 0;
}

ConvImpl pick_conv_impl(const std::vector<ConvImpl>& candidates, const std::vector<double>& ms) {
    SF_CHECK(!candidates.empty() && candidates.size() == ms.size(), "pick_conv_impl: %zu candidates, %zu timings",
             candidates.size(), ms.size());
    int best = -1;
    for (size_t i = 0; i < ms.size(); ++i)
        if (ms[i] >= 0 && (best < 0 || ms[i] < ms[static_cast<size_t>(best)])) best = static_cast<int>(i);
    SF_CHECK(best >= 0, "no convolution implementation ran for this shape");
    return candidates[static_cast<size_t>(best)];
}

namespace {

bool same_shape(const kern::ConvShape& a, const kern::ConvShape& b) {
    return a.n == b.n && a.h == b.h && a.w == b.w && a.cin == b.cin && a.cout == b.cout && a.k == b.k &&
           a.stride == b.stride && a.pad == b.pad && a.groups == b.groups && a.bias == b.bias;
}

// The fused 1x1 backward's partials in the network's workspace for u under the policy (with its producer's BN
// sums where the shape gathers them, the epilogue's after the wgrad's), 0 where no layer of u runs it.
size_t pw_fused_backward_floats(const kern::ConvPolicy& policy, const ConvUse& u) {
    if (!GpuOps::pw_fused_bwd(policy) || !u.pw_fused_bwd || !u.dgrad || !kern::pwconv_backward_fused_supported(u.shape))
        return 0;
    return kern::pwconv_backward_fused_workspace_floats(u.shape, GpuOps::pw_bn_grad(policy) && u.bn_grad_epilogue);
}

}  // namespace

size_t conv_workspace_bound(const std::vector<ConvUse>& convs, const kern::ConvPolicy& policy) {
    SF_CHECK(policy.max_workspace > 0,
             "conv_workspace_bound: the policy sets no cuDNN workspace limit, so there is no bound to estimate");
    const size_t cudnn_max = kern::conv_align_up(policy.max_workspace, kern::kConvWorkspaceAlign);
    size_t bound = 0;
    for (const ConvUse& u : convs) {
        size_t scratch = 0;  // the largest scratch a variant of an op this conv runs may take
        for (kern::ConvOp op : {kern::ConvOp::Wgrad, kern::ConvOp::Dgrad}) {
            if (op == kern::ConvOp::Dgrad && !u.dgrad) continue;
            for (kern::ConvAccum a : kern::conv_accum_variants(op))
                scratch = std::max(scratch, kern::conv_scratch_bytes(op, a, u.shape));
        }
        bound = std::max(bound, cudnn_max + scratch);
        if (kern::dwconv3x3_supported(u.shape))
            bound = std::max(bound, kern::dwconv3x3_workspace_floats(u.shape) * sizeof(float));
        if (policy.dw_fused_bwd && u.dgrad && kern::dwconv3x3_fused_supported(u.shape)) {
            const bool bn_grad = GpuOps::dw_bn_grad(policy) && u.bn_prologue;  // the epilogue's partials too
            bound = std::max(bound, (policy.dw_fused_bn_bwd ? GpuOps::dw_fused_bn_workspace_floats(u.shape, bn_grad)
                                                            : kern::dwconv3x3_fused_workspace_floats(
                                                                  u.shape, kern::kDwFusedMaxBlocks, bn_grad)) *
                                        sizeof(float));
        }
        if (kern::stemconv_supported(u.shape))
            bound = std::max(bound, kern::stemconv_workspace_floats(u.shape) * sizeof(float));
        if (policy.pw_custom && kern::pwconv_supported(u.shape))
            bound = std::max(bound, kern::pwconv_wgrad_workspace_floats(u.shape) * sizeof(float));
        bound = std::max(bound, pw_fused_backward_floats(policy, u) * sizeof(float));
    }
    return bound;
}

std::string cuda_backend_banner(int device) {
    const rt::DeviceInfo d = rt::query_device_info(device);
    SF_CHECK(d.available, "CUDA device %d: %s", device, d.reason.c_str());
    std::string why, warning;
    SF_CHECK(kern::cudnn_runtime_ok(d.cudnn_version, d.cudnn_compiled, &why, &warning), "%s", why.c_str());
    if (!warning.empty()) SF_LOG_WARN("%s", warning.c_str());
    return rt::format(
        "CUDA backend: GPU %d %s (sm_%d%d, %d SMs, %.1f GiB), driver supports CUDA %s, CUDA runtime %s, "
        "cuDNN %s loaded (built against %s)",
        device, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, static_cast<double>(d.memory_bytes) / (1ull << 30),
        rt::cuda_version_string(d.cuda_driver_version).c_str(), rt::cuda_version_string(d.cuda_runtime_version).c_str(),
        rt::cudnn_version_string(d.cudnn_version).c_str(), rt::cudnn_version_string(d.cudnn_compiled).c_str());
}

GpuOps::GpuOps(const rt::Exec& ex, const kern::ConvPolicy& policy) : ex_(ex), policy_(policy) {
    SF_CHECK(ex.is_cuda(), "GpuOps needs a CUDA Exec (got %s)", rt::backend_name(ex.backend));
    // Once per process: what runs the step, and a cuDNN library that cannot run the plans refused
    // before any plan is built.
    static std::once_flag banner;
    std::call_once(banner, [] {
        int device = 0;
        SF_CUDA_CHECK(cudaGetDevice(&device));
        SF_LOG_INFO("%s", cuda_backend_banner(device).c_str());
    });
    cudnn_ = std::make_unique<kern::ConvPlanCache>(ex, policy);
}

GpuOps::~GpuOps() = default;

void GpuOps::prepare(const std::vector<ConvUse>& convs) {
    SF_CHECK(entries_.empty(), "GpuOps::prepare() called twice");
    const auto t0 = std::chrono::steady_clock::now();
    prepare_entries(convs);
    plan_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const kern::ConvPlanCache::PlanTime t = cudnn_->plan_time();
    SF_LOG_INFO(
        "conv plans: %zu convolutions, %d cuDNN keys autotuned and %d rebuilt from earlier networks in %.1f s "
        "(%.1f s plan time in all, custom-kernel timing included)",
        convs.size(), t.tuned, t.reused, t.seconds, plan_seconds_);
    if (dgrad_zeroed_bytes() > 0)
        SF_LOG_WARN(
            "conv plans: %.2f MB of dx zeroed before overwrite-mode backward-data (one call per shape without a "
            "beta=0 cuDNN engine, named in the warnings above)",
            static_cast<double>(dgrad_zeroed_bytes()) / 1e6);
}

size_t GpuOps::dgrad_zeroed_bytes() const {
    size_t bytes = 0;
    for (const Entry& e : entries_)
        if (e.impl == ConvImpl::Cudnn && e.use.needs_overwrite()) bytes += cudnn_->overwrite_zeroed_bytes(e.shape);
    return bytes;
}

void GpuOps::prepare_cudnn(const ConvUse& u) {
    cudnn_->prepare(u.shape, kern::ConvOp::Fprop);
    cudnn_->prepare(u.shape, kern::ConvOp::Wgrad);
    if (u.needs_accumulate()) cudnn_->prepare(u.shape, kern::ConvOp::Dgrad, false);
    if (u.needs_overwrite()) cudnn_->prepare(u.shape, kern::ConvOp::Dgrad, true);
}

// cuDNN's fwd + wgrad + one dgrad (the mean over the modes the step uses), as autotuning measured.
double GpuOps::cudnn_ms(const ConvUse& u) const {
    double ms = cudnn_->measured_ms(u.shape, kern::ConvOp::Fprop) + cudnn_->measured_ms(u.shape, kern::ConvOp::Wgrad);
    if (!u.dgrad) return ms;
    double dgrad = 0;
    int modes = 0;
    if (u.needs_accumulate()) dgrad += cudnn_->measured_ms(u.shape, kern::ConvOp::Dgrad, false), ++modes;
    if (u.needs_overwrite()) dgrad += cudnn_->measured_ms(u.shape, kern::ConvOp::Dgrad, true), ++modes;
    return ms + dgrad / modes;
}

void GpuOps::prepare_entries(const std::vector<ConvUse>& convs) {
    for (const ConvUse& u : convs) {
        Entry e;
        e.shape = u.shape;
        e.use = u;
        e.dgrad = u.dgrad;
        const std::vector<ConvImpl> cand = conv_candidates(u.shape, policy_.pw_custom);
        if (cand.size() == 1) {  // cuDNN only
            prepare_cudnn(u);
            entries_.push_back(e);
            continue;
        }
        const ConvImpl custom = cand[1];
        custom_ws_floats_ = std::max(custom_ws_floats_, custom_workspace_floats(custom, u.shape));
        e.impl = custom;
        e.fused = custom == ConvImpl::CustomDepthwise && policy_.dw_fused_bwd && u.dgrad &&
                  kern::dwconv3x3_fused_supported(u.shape);
        if (e.fused) custom_ws_floats_ = std::max(custom_ws_floats_, kern::dwconv3x3_fused_workspace_floats(u.shape));
        // The fused 1x1 backward (with a producer's BN reductions: their partials after the wgrad's).
        if (custom == ConvImpl::CustomPointwise)
            custom_ws_floats_ = std::max(custom_ws_floats_, pw_fused_backward_floats(policy_, u));
        e.stats_fwd = stats_forward(e);
        if (e.stats_fwd) e.fwd_variant = e.pro_fwd_variant = first_staged_forward(u.shape);
        if (!policy_.autotune) {
            entries_.push_back(e);
            continue;
        }
        // Time cuDNN (its autotuned plans) against the custom kernels; a shape cuDNN refuses counts
        // as failed (the stem's 2 input channels may be one).
        try {
            prepare_cudnn(u);
            e.ms[0] = cudnn_ms(u);
        } catch (const kern::ConvUnsupported& err) {
            // Only "cuDNN has no plan" falls back. A CUDA error raised while it was being looked
            // for must not pass for one: surface anything pending on the device first.
            SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
            SF_CUDA_CHECK(cudaPeekAtLastError());
            SF_LOG_INFO("cuDNN has no plan for %s (%s); the custom kernel runs it", u.shape.describe().c_str(),
                        err.what());
            e.ms[0] = -1;
        }
        double credit = 0;  // the passes the custom 1x1 conv's epilogues remove (time_pointwise)
        e.pw_fused_timed = custom == ConvImpl::CustomPointwise && pw_fused_bwd() && u.pw_fused_bwd && u.dgrad;
        e.ms[1] = custom == ConvImpl::CustomDepthwise ? time_depthwise(e, credit)
                  : custom == ConvImpl::CustomStem    ? time_stem(u.shape)
                                                      : time_pointwise(e, credit);
        if (e.ms[0] >= 0) e.ms[0] += credit;
        e.credit_ms = credit;
        e.impl = pick_conv_impl(cand, {e.ms[0], e.ms[1]});
        if (u.bn_prologue && custom == ConvImpl::CustomDepthwise) time_prologue_forward(e);
        entries_.push_back(e);
    }
}

void GpuOps::run_custom(const Entry& e, const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x,
                        const kern::bf16* w, kern::bf16* y, const kern::bf16* dy, kern::bf16* dx, float* dw, bool dgrad,
                        bool accumulate) const {
    if (e.impl == ConvImpl::CustomStem) {
        SF_CHECK(!dgrad, "the custom stem conv has no input gradient (%s)", s.describe().c_str());
        if (y) kern::stemconv_forward_cuda(ex, s, x, w, y);
        if (dw) kern::stemconv_backward_filter_cuda(ex, s, x, dy, dw, custom_ws(ex), custom_ws_floats_);
        return;
    }
    if (e.impl == ConvImpl::CustomPointwise) {
        if (y) kern::pwconv_forward_cuda(ex, s, x, w, y);
        if (dgrad) kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, accumulate);
        if (dw) kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, custom_ws(ex), custom_ws_floats_);
        return;
    }
    if (y) kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, e.fwd_variant);
    if (dgrad)
        kern::dwconv3x3_backward_data_cuda(ex, s, dy, w, dx, accumulate,
                                           accumulate ? e.dgrad_variant : e.dgrad_ow_variant);
    if (dw)
        kern::dwconv3x3_backward_filter_cuda(ex, s, x, dy, dw, custom_ws(ex), custom_ws_floats_, nullptr,
                                             e.wgrad_variant);
}

size_t GpuOps::workspace_bytes() const {
    return std::max(cudnn_->workspace_bytes(), custom_ws_floats_ * sizeof(float));
}

void GpuOps::bind_workspace(void* device_ptr, size_t bytes, int lanes) {
    SF_CHECK(bytes >= workspace_bytes(), "GpuOps workspace of %zu bytes, %zu needed", bytes, workspace_bytes());
    SF_CHECK(device_ptr != nullptr || bytes == 0, "GpuOps::bind_workspace: null workspace");
    SF_CHECK(lanes >= 1, "GpuOps::bind_workspace: %d lanes", lanes);
    if (cudnn_->workspace_bytes() > 0 || cudnn_->size() > 0) cudnn_->set_workspace(device_ptr, bytes, lanes);
    custom_ws_ = static_cast<float*>(device_ptr);
    custom_ws_floats_ = bytes / sizeof(float);
    lanes_ = lanes;
}

float* GpuOps::custom_ws(const rt::Exec& ex) const {
    SF_CHECK(ex.lane >= 0 && ex.lane < lanes_, "GpuOps: an op on lane %d, the workspace was bound for %d lane(s)",
             ex.lane, lanes_);
    return custom_ws_ ? custom_ws_ + static_cast<size_t>(ex.lane) * custom_ws_floats_ : nullptr;
}

ConvImpl GpuOps::impl_of(const kern::ConvShape& s) const { return find(s).impl; }

bool GpuOps::stats_forward(const Entry& e) const {
    return dw_stats() && e.use.stats_epilogue && kern::dwconv3x3_supported(e.shape);
}

bool GpuOps::conv_forward_stats_runs(const kern::ConvShape& s) const {
    const Entry& e = find(s);
    return (pw_stats() && e.impl == ConvImpl::CustomPointwise) ||
           (stats_forward(e) && e.impl == ConvImpl::CustomDepthwise);
}

bool GpuOps::pw_fused_bn_runs(const kern::ConvShape& s) const {
    const Entry& e = find(s);
    return pw_bn_bwd() && e.impl == ConvImpl::CustomPointwise && e.use.bn_bwd_prologue;
}

size_t GpuOps::pw_fused_bn_workspace_floats(const kern::ConvShape& s, bool bn_grad, bool fused_bwd) {
    size_t conv =
        std::max(kern::pwconv_wgrad_workspace_floats(s), bn_grad ? kern::pwconv_dgrad_workspace_floats(s) : 0);
    if (fused_bwd && kern::pwconv_backward_fused_supported(s))
        conv = std::max(conv, kern::pwconv_backward_fused_workspace_floats(s, bn_grad));
    return kern::bn_act_workspace_floats(s.out().pixels(), s.cout) + conv;
}

// The BN half of a fused BN backward (bn_dw_backward_fused, bn_pw_backward_fused): s planned with a BN
// prologue when the conv takes one (pro), the dgrad mode planned, ws of at least `need` floats; then the
// statistics pass (dgamma, dbeta +=, the coefficients at the start of ws) unless b.coef already holds a
// consumer's, and b.coef set to the coefficients. Returns the floats of ws the BN part takes (the conv
// kernel's partials follow).
size_t GpuOps::fused_bn_half(const char* op, const rt::Exec& ex, const kern::ConvShape& s, kern::DwBnBackward& b,
                             const kern::bf16* dy, float* dgamma, float* dbeta, bool pro, bool accumulate, float* ws,
                             size_t ws_floats, size_t need) const {
    SF_CHECK(!pro || find(s).use.bn_prologue,
             "%s: convolution %s was planned without a BN prologue, but its fused backward asks for one (the network "
             "changed after GpuOps::prepare)",
             op, s.describe().c_str());
    check_dgrad_mode(find(s).use, accumulate);
    const size_t rows = s.out().pixels(), bn_ws = kern::bn_act_workspace_floats(rows, s.cout);
    SF_CHECK(ws_floats >= need, "%s: workspace of %zu floats, %zu needed for %s", op, ws_floats, need,
             s.describe().c_str());
    if (!b.coef) {
        kern::bn_act_backward_stats(ex, b.act, rows, s.cout, b.x, dy, b.gamma, b.beta, b.mean, b.invstd, dgamma, dbeta,
                                    ws, bn_ws, bn_backward_rows());
        b.coef = ws + kern::bn_act_backward_coef_offset(rows, s.cout);
    }
    return bn_ws;
}

void GpuOps::bn_pw_backward_fused(const rt::Exec& ex, const kern::ConvShape& s, kern::Act act,
                                  const kern::bf16* conv_out, const kern::bf16* dy, const float* gamma,
                                  const float* beta, const float* save_mean, const float* save_invstd, float* dgamma,
                                  float* dbeta, const kern::bf16* x, const kern::bf16* w, kern::bf16* dx, float* dw,
                                  bool accumulate, float* ws, size_t ws_floats, const kern::DwPrologue* pro,
                                  const float* given_coef, const kern::BnGradSums* bng) const {
    SF_CHECK(!bng || dgrad_bn_grad_runs(s),
             "convolution %s: the BN-backward epilogue runs only with "
             "ConvPolicy::pw_bn_grad on the project's 1x1 dgrad",
             s.describe().c_str());
    SF_CHECK(pw_fused_bn_runs(s),
             "convolution %s does not run its BN's dx in the project's dgrad and wgrad (GpuOps::pw_bn_bwd, the "
             "project's 1x1 kernel, a shape planned with ConvUse::bn_bwd_prologue)",
             s.describe().c_str());
    kern::DwBnBackward b{act, conv_out, gamma, beta, save_mean, save_invstd, given_coef};
    const size_t bn_ws = fused_bn_half("bn_pw_backward_fused", ex, s, b, dy, dgamma, dbeta, pro != nullptr, accumulate,
                                       ws, ws_floats, pw_fused_bn_workspace_floats(s, bng != nullptr, pw_fused_bwd()));
    if (pw_fused_bwd() && kern::pwconv_backward_fused_supported(s, pro, &b, bng)) {
        // One pass for both gradients: the BN's dy and input read once (the wgrad's partials where they would be,
        // with bng the epilogue's after them).
        kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, accumulate, ws + bn_ws, ws_floats - bn_ws, pro, &b,
                                         bng);
        return;
    }
    kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, accumulate, &b, bng, ws + bn_ws, ws_floats - bn_ws);
    kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, ws + bn_ws, ws_floats - bn_ws, pro, &b);
}

bool GpuOps::dgrad_bn_grad_runs(const kern::ConvShape& s) const {
    return pw_bn_grad() && find(s).impl == ConvImpl::CustomPointwise;
}

void GpuOps::conv_backward_data_bn_grad(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* dy,
                                        const kern::bf16* w, kern::bf16* dx, bool accumulate,
                                        const kern::BnGradSums& bng, float* ws, size_t ws_floats) const {
    SF_CHECK(dgrad_bn_grad_runs(s),
             "%s: the BN-backward epilogue runs only on the project's 1x1 dgrad with "
             "ConvPolicy::pw_bn_grad",
             s.describe().c_str());
    check_dgrad_mode(find(s).use, accumulate);
    kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, accumulate, nullptr, &bng, ws, ws_floats);
}

void GpuOps::conv_forward_stats(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* w,
                                kern::bf16* y, const kern::BnStatsOut& stats, float* ws, size_t ws_floats) const {
    SF_CHECK(conv_forward_stats_runs(s),
             "%s: the statistics epilogue runs only on the project's 1x1 conv with "
             "ConvPolicy::pw_stats or depthwise conv with ConvPolicy::dw_stats",
             s.describe().c_str());
    if (s.k == 1)
        kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &stats, ws, ws_floats);
    else
        kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, find(s).fwd_variant, &stats, ws, ws_floats);
}

const GpuOps::Entry& GpuOps::find(const kern::ConvShape& s) const {
    for (const Entry& e : entries_)
        if (same_shape(e.shape, s)) return e;
    SF_FAIL("convolution %s was not planned (GpuOps::prepare)", s.describe().c_str());
}

void GpuOps::conv_forward(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* w,
                          kern::bf16* y) const {
    const Entry& e = find(s);
    if (e.impl == ConvImpl::Cudnn)
        cudnn_->forward(ex, s, x, w, y);
    else
        run_custom(e, ex, s, x, w, y, nullptr, nullptr, nullptr, false);
}

void GpuOps::conv_backward_data(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* dy, const kern::bf16* w,
                                kern::bf16* dx, bool accumulate) const {
    const Entry& e = find(s);
    check_dgrad_mode(e.use, accumulate);  // each mode has its own plan: refuse one that was not prepared
    if (e.impl == ConvImpl::Cudnn)
        cudnn_->backward_data(ex, s, dy, w, dx, accumulate);
    else
        run_custom(e, ex, s, nullptr, w, nullptr, dy, dx, nullptr, true, accumulate);
}

void GpuOps::conv_forward_prologue(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x_pre,
                                   const kern::bf16* w, kern::bf16* y, const kern::DwPrologue& pro,
                                   const kern::BnStatsOut* stats, float* ws, size_t ws_floats) const {
    const Entry& e = find(s);
    SF_CHECK(e.use.bn_prologue,
             "convolution %s was planned without a BN prologue, but its forward asks for one (the network changed "
             "after GpuOps::prepare)",
             s.describe().c_str());
    if (s.k == 1) {
        SF_CHECK(!stats || pw_stats(), "%s: the statistics epilogue runs only with ConvPolicy::pw_stats",
                 s.describe().c_str());
        kern::pwconv_forward_cuda(ex, s, x_pre, w, y, &pro, stats, ws, ws_floats);
        return;
    }
    SF_CHECK(!stats || stats_forward(e),
             "%s: the depthwise forward's statistics epilogue runs only with ConvPolicy::dw_stats on a shape planned "
             "with it (ConvUse::stats_epilogue)",
             s.describe().c_str());
    kern::dwconv3x3_forward_cuda(ex, s, x_pre, w, y, &pro, e.pro_fwd_variant, stats, ws, ws_floats);
}

void GpuOps::conv_backward_filter(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x,
                                  const kern::bf16* dy, float* dw) const {
    const Entry& e = find(s);
    if (e.impl == ConvImpl::Cudnn)
        cudnn_->backward_filter(ex, s, x, dy, dw);
    else
        run_custom(e, ex, s, x, nullptr, nullptr, dy, nullptr, dw, false);
}

size_t GpuOps::dw_fused_bn_workspace_floats(const kern::ConvShape& s, bool bn_grad) {
    return kern::bn_act_workspace_floats(s.out().pixels(), s.cout) +
           kern::dwconv3x3_fused_workspace_floats(s, kern::kDwFusedMaxBlocks, bn_grad);
}

void GpuOps::bn_dw_backward_fused(const rt::Exec& ex, const kern::ConvShape& s, kern::Act act,
                                  const kern::bf16* conv_out, const kern::bf16* dy, const float* gamma,
                                  const float* beta, const float* save_mean, const float* save_invstd, float* dgamma,
                                  float* dbeta, const kern::bf16* x, const kern::bf16* w, kern::bf16* dx, float* dw,
                                  bool accumulate, float* ws, size_t ws_floats, const kern::DwPrologue* pro,
                                  const kern::BnGradSums* bng, const float* given_coef) const {
    SF_CHECK(dw_fused_backward(s) && dw_fused_bn(),
             "convolution %s does not run a fused backward with its BN's dx (GpuOps::dw_fused_bn)",
             s.describe().c_str());
    SF_CHECK(!bng || dw_bn_grad(),
             "convolution %s: the BN-backward epilogue runs only with ConvPolicy::dw_fused_bn_grad",
             s.describe().c_str());
    kern::DwBnBackward b{act, conv_out, gamma, beta, save_mean, save_invstd, given_coef};
    const size_t bn_ws = fused_bn_half("bn_dw_backward_fused", ex, s, b, dy, dgamma, dbeta, pro != nullptr, accumulate,
                                       ws, ws_floats, dw_fused_bn_workspace_floats(s, bng != nullptr));
    kern::dwconv3x3_backward_fused_cuda(ex, s, x, dy, w, dx, dw, ws + bn_ws, ws_floats - bn_ws, accumulate, &b,
                                        kern::kDwFusedMaxBlocks, pro, bng);
}

bool GpuOps::dw_fused_backward(const kern::ConvShape& s) const { return find(s).runs_fused(); }

bool GpuOps::pw_fused_backward(const kern::ConvShape& s, const kern::DwPrologue* pro,
                               const kern::BnGradSums* bng) const {
    return pw_fused_bwd() && find(s).impl == ConvImpl::CustomPointwise && (!bng || dgrad_bn_grad_runs(s)) &&
           kern::pwconv_backward_fused_supported(s, pro, nullptr, bng);
}

void GpuOps::conv_backward_fused(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x,
                                 const kern::bf16* dy, const kern::bf16* w, kern::bf16* dx, float* dw, bool accumulate,
                                 const kern::DwPrologue* pro, const kern::BnGradSums* bng) const {
    const bool pointwise = s.k == 1;
    if (pointwise) {
        SF_CHECK(!bng || dgrad_bn_grad_runs(s),
                 "convolution %s: the BN-backward epilogue runs only with ConvPolicy::pw_bn_grad on the project's "
                 "1x1 kernel",
                 s.describe().c_str());
        const std::string why = kern::pwconv_backward_fused_refusal(s, pro, nullptr, bng);
        SF_CHECK(pw_fused_backward(s, pro, bng),
                 "convolution %s does not run the fused 1x1 backward (GpuOps::pw_fused_backward: ConvPolicy::"
                 "pw_fused_bwd, the project's 1x1 kernel, a shape, prologue and BN-backward epilogue it takes)%s%s",
                 s.describe().c_str(), why.empty() ? "" : ": ", why.c_str());
    } else {
        SF_CHECK(dw_fused_backward(s), "convolution %s does not run a fused backward (GpuOps::dw_fused_backward)",
                 s.describe().c_str());
        SF_CHECK(!bng || dw_bn_grad(),
                 "convolution %s: the BN-backward epilogue runs only with ConvPolicy::dw_fused_bn_grad",
                 s.describe().c_str());
    }
    const Entry& e = find(s);
    SF_CHECK(!pro || e.use.bn_prologue,
             "convolution %s was planned without a BN prologue, but its fused backward asks for one (the network "
             "changed after GpuOps::prepare)",
             s.describe().c_str());
    check_dgrad_mode(e.use, accumulate);
    if (pointwise)
        kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, accumulate, custom_ws(ex), custom_ws_floats_, pro,
                                         nullptr, bng);
    else
        kern::dwconv3x3_backward_fused_cuda(ex, s, x, dy, w, dx, dw, custom_ws(ex), custom_ws_floats_, accumulate,
                                            nullptr, kern::kDwFusedMaxBlocks, pro, bng);
}

}  // namespace model
