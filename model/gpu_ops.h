// GpuOps: the CUDA backend's convolution dispatch for one network (model/gpu_ops.cpp; its plan-time timing:
// model/gpu_ops_timing.cpp).
// At plan time (before the arena is sealed) prepare() receives every convolution the step runs
// (Planner::convs()) and builds its cuDNN plans (kernels/conv_cudnn.h: BF16 NHWC, fp32 accumulation,
// autotuned, cached). Depthwise 3x3 convolutions have a second implementation, the custom kernels
// of kernels/dwconv_cuda.h; prepare() times both on the real shape (forward + dgrad + wgrad) and
// keeps the faster, or takes the custom kernels without timing when autotuning is off. The
// choice per shape is visible in describe() (and in `slidefuse bench`). Only kern::ConvUnsupported
// (cuDNN has no plan) falls back to a custom kernel; CUDA errors propagate. Plan time is logged per
// key (debug) and per network (info); keys autotuned by an earlier network of the process are
// rebuilt without timing (kern::ConvPlanStore).
// At step time the three entry points enqueue on ex.stream; they never build plans, allocate or
// synchronise. Contracts: forward overwrites y; backward_data overwrites dx (bf16) or accumulates
// into it, in the modes ConvUse records for the shape (the traced backward), each mode with its own
// cuDNN plan (overwrite: beta = 0, nothing zeroed); backward_filter accumulates into dw (fp32
// master gradient, KRSC).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "model/planner.h"
#include "runtime/exec.h"

namespace model {

enum class ConvImpl { Cudnn, CustomDepthwise, CustomStem, CustomPointwise };
const char* conv_impl_name(ConvImpl i);

// The pure part of the choice, testable without a device: which implementations can run a shape.
// Custom depthwise is a candidate when kern::dwconv3x3_supported(s), the custom stem conv (2 or 4
// input channels, kernels/stemconv_cuda.h) when kern::stemconv_supported(s); cuDNN always is (a
// shape cuDNN refuses at plan time is timed as "failed" and the custom kernel runs). With pw_custom
// (kern::ConvPolicy::pw_custom) the project's 1x1 conv is one where kern::pwconv_supported(s).
std::vector<ConvImpl> conv_candidates(const kern::ConvShape& s, bool pw_custom = false);
// The custom candidate's wgrad scratch (fp32 floats) for s, 0 when s has none.
size_t custom_workspace_floats(ConvImpl impl, const kern::ConvShape& s);
// The pick given measured times (ms, same order as candidates; negative = failed to run):
// the fastest; ties go to the first. Throws when none ran.
ConvImpl pick_conv_impl(const std::vector<ConvImpl>& candidates, const std::vector<double>& ms);

// A device-free upper bound of the bytes GpuOps::workspace_bytes() will report for these convs under
// `policy` (the dry-run memory estimate, before any plan is built): per conv and op, cuDNN's
// workspace is at most policy.max_workspace (engines above it are excluded) plus the largest
// scratch region a variant of that op may use (kern::conv_scratch_bytes), and the custom kernels'
// wgrad scratch where they are candidates; the max over all of them (plans share one region).
// Conservative: real plans mostly need far less. Throws when policy.max_workspace is 0 (no limit,
// no bound).
size_t conv_workspace_bound(const std::vector<ConvUse>& convs, const kern::ConvPolicy& policy);

// The line the CUDA backend logs once per process: GPU, compute capability, driver, CUDA runtime
// and the cuDNN library actually loaded. Throws (with what to install) when that cuDNN cannot run
// the plans (kern::cudnn_runtime_ok); warns when it is older than the headers.
std::string cuda_backend_banner(int device);

class GpuOps {
public:
    GpuOps(const rt::Exec& ex, const kern::ConvPolicy& policy);
    ~GpuOps();
    GpuOps(const GpuOps&) = delete;
    GpuOps& operator=(const GpuOps&) = delete;

    // Plan time. May allocate temporaries and synchronise (autotuning).
    void prepare(const std::vector<ConvUse>& convs);
    size_t workspace_bytes() const;
    // Once, after prepare(): the network's workspace region (shared with the reduction scratch of
    // the other ops, which never run concurrently on the stream). lanes > 1 (branch lanes,
    // kern::ConvPolicy::branch_lanes): one region of `bytes` per lane from device_ptr; an op on an Exec
    // of lane k (rt::Exec::lane) uses the k-th.
    void bind_workspace(void* device_ptr, size_t bytes, int lanes = 1);

    // The policy the network's kernels take their choices from.
    const kern::ConvPolicy& policy() const { return policy_; }
    // The BatchNorm + activation kernels' rows per loop turn (kern::ConvPolicy::bn_row_batch), passed
    // by the layers to every kern::bn_act_* call.
    int bn_row_batch() const { return policy_.bn_row_batch; }
    // The backward's row kernels: rows per loop turn and resident blocks (kern::ConvPolicy::bn_min_blocks),
    // passed to every kern::bn_act_backward* call.
    kern::BnBackwardRows bn_backward_rows() const { return {policy_.bn_row_batch, policy_.bn_min_blocks}; }
    // The bilinear upsampling backward's row-batched loads (kern::ConvPolicy::upsample_row_loads).
    bool upsample_row_loads() const { return policy_.upsample_row_loads; }

    // Step time.
    void conv_forward(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* w,
                      kern::bf16* y) const;
    // accumulate = false: dx is overwritten (the first contribution to it in the backward).
    void conv_backward_data(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* dy, const kern::bf16* w,
                            kern::bf16* dx, bool accumulate = true) const;
    void conv_backward_filter(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* dy,
                              float* dw) const;
    // Whether s's backward runs as one fused kernel (kern::ConvPolicy::dw_fused_bwd, a stride-1 depthwise
    // shape planned with its dgrad that the custom kernels run, or planned with the BN prologue, whose
    // forward and wgrad are custom anyway): then the layer calls conv_backward_fused instead of
    // conv_backward_data + conv_backward_filter (with its BN prologue, if it has one).
    bool dw_fused_backward(const kern::ConvShape& s) const;
    // dx (+)= dgrad and dw += wgrad in one kernel (kern::dwconv3x3_backward_fused_cuda, or for a 1x1 shape
    // kern::pwconv_backward_fused_cuda); accumulate as conv_backward_data. Only where dw_fused_backward(s) or
    // pw_fused_backward(s, pro). pro: the BN prologue of the fused LiteBlock's depthwise conv or of a 1x1 conv
    // after a depthwise one (x is then the producer's pre-BN output; s planned with ConvUse::bn_prologue).
    // bng: the producer BN's backward reductions from the dx stored; depthwise: with pro, only with dw_bn_grad();
    // 1x1: only where dgrad_bn_grad_runs(s) and pw_fused_backward(s, pro, bng) (its partials after the wgrad's in
    // the network's workspace, which prepare sized for it; within fp32 rounding of the dgrad epilogue's sums).
    void conv_backward_fused(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* dy,
                             const kern::bf16* w, kern::bf16* dx, float* dw, bool accumulate,
                             const kern::DwPrologue* pro = nullptr, const kern::BnGradSums* bng = nullptr) const;
    // kern::ConvPolicy::dw_fused_bn_bwd (with dw_fused_bwd): the layers whose backward runs fused also
    // fold their BN's dx pass into it (bn_dw_backward_fused); they reserve dw_fused_bn_workspace_floats.
    bool dw_fused_bn() const { return dw_fused_bn(policy_); }
    static bool dw_fused_bn(const kern::ConvPolicy& p) { return p.dw_fused_bwd && p.dw_fused_bn_bwd; }
    // A ConvBN's BN + activation backward and its depthwise conv's fused backward with the BN's dx formed
    // on load: kern::bn_act_backward_stats (dgamma, dbeta +=; coefficients at the start of ws), then
    // kern::dwconv3x3_backward_fused_cuda with a kern::DwBnBackward, its partials in ws after the BN's
    // part. conv_out: the conv's output (the BN's input); dy: the BN + activation output's gradient.
    // Only where dw_fused_backward(s) and dw_fused_bn(); ws of at least dw_fused_bn_workspace_floats(s).
    // pro: the fused LiteBlock's input prologue as well (x is then the producer's pre-BN output).
    // given_coef: the BN's coefficients (2 C) a consumer's epilogue already gathered, with dgamma and dbeta
    // (pw_bn_grad): then no statistics pass.
    void bn_dw_backward_fused(const rt::Exec& ex, const kern::ConvShape& s, kern::Act act, const kern::bf16* conv_out,
                              const kern::bf16* dy, const float* gamma, const float* beta, const float* save_mean,
                              const float* save_invstd, float* dgamma, float* dbeta, const kern::bf16* x,
                              const kern::bf16* w, kern::bf16* dx, float* dw, bool accumulate, float* ws,
                              size_t ws_floats, const kern::DwPrologue* pro = nullptr,
                              const kern::BnGradSums* bng = nullptr, const float* given_coef = nullptr) const;
    // The BN backward's workspace followed by the fused kernel's partials, for a stride-1 depthwise s
    // (bn_grad: with the BN-backward epilogue's partials too).
    static size_t dw_fused_bn_workspace_floats(const kern::ConvShape& s, bool bn_grad = false);
    // kern::ConvPolicy::dw_fused_bn_grad (with dw_fused_bwd): the fused LiteBlock's depthwise backward
    // gathers the expand BN's backward reductions (bng of conv_backward_fused, bn_dw_backward_fused).
    bool dw_bn_grad() const { return dw_bn_grad(policy_); }
    static bool dw_bn_grad(const kern::ConvPolicy& p) { return p.dw_fused_bwd && p.dw_fused_bn_grad; }
    // The forward reading its producer's pre-BN output through the producer's BN + activation, always on
    // the project's kernels (cuDNN has no such op): a depthwise s (the fused LiteBlock) in the
    // prologue-capable forward variant autotuning found fastest for s (kern::dw_variant_prologue; variant 0
    // without autotuning); a 1x1 s (NetShape::fuse_dw_pw) on kern::pwconv_forward_cuda. Either may gather
    // the following BN's statistics too (stats with ws of kern::pwconv_workspace_floats(s), only with
    // pw_stats(); a depthwise s: kern::dwconv3x3_stats_workspace_floats(s), only with dw_stats() and s
    // planned with ConvUse::stats_epilogue). s must have been planned with ConvUse::bn_prologue.
    void conv_forward_prologue(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x_pre,
                               const kern::bf16* w, kern::bf16* y, const kern::DwPrologue& pro,
                               const kern::BnStatsOut* stats = nullptr, float* ws = nullptr,
                               size_t ws_floats = 0) const;

    // The implementation that runs s (planned by prepare()).
    ConvImpl impl_of(const kern::ConvShape& s) const;
    // kern::ConvPolicy::pw_stats (with pw_custom): the 1x1 ConvBNs reserve the statistics epilogue's
    // workspace (kern::pwconv_workspace_floats) and, where the project's kernel runs their conv
    // (conv_forward_stats_runs), take their BN statistics from it.
    bool pw_stats() const { return pw_stats(policy_); }
    static bool pw_stats(const kern::ConvPolicy& p) { return p.pw_custom && p.pw_stats; }
    // kern::ConvPolicy::dw_stats: the depthwise ConvBNs reserve the staged forward's statistics epilogue's
    // workspace (kern::dwconv3x3_stats_workspace_floats) and, where the custom kernels run their conv (and
    // always with a BN prologue), take their BN statistics from it; the forward variant of a shape planned
    // with ConvUse::stats_epilogue is then a staged one (timed with the epilogue, or the first staged one
    // without autotuning).
    bool dw_stats() const { return dw_stats(policy_); }
    static bool dw_stats(const kern::ConvPolicy& p) { return p.dw_stats; }
    // Whether s's forward runs with the statistics epilogue: a 1x1 s on the project's kernel (pw_stats) or
    // a depthwise s on the custom kernels (dw_stats, planned with ConvUse::stats_epilogue).
    bool conv_forward_stats_runs(const kern::ConvShape& s) const;
    // kern::ConvPolicy::pw_bn_grad (with pw_custom): a 1x1 conv's dgrad on the project's kernel gathers the
    // preceding depthwise BN's backward reductions (conv_backward_data_bn_grad) where dgrad_bn_grad_runs(s).
    bool pw_bn_grad() const { return pw_bn_grad(policy_); }
    static bool pw_bn_grad(const kern::ConvPolicy& p) { return p.pw_custom && p.pw_bn_grad; }
    bool dgrad_bn_grad_runs(const kern::ConvShape& s) const;
    // kern::ConvPolicy::pw_bn_bwd (with pw_custom): the 1x1 ConvBNs that declare it (ConvBN::pw_fused_bn) form
    // their BN's dx in the project's dgrad and wgrad loads (bn_pw_backward_fused) where pw_fused_bn_runs(s):
    // the project's kernel runs s, planned with ConvUse::bn_bwd_prologue.
    bool pw_bn_bwd() const { return pw_bn_bwd(policy_); }
    static bool pw_bn_bwd(const kern::ConvPolicy& p) { return p.pw_custom && p.pw_bn_bwd; }
    // kern::ConvPolicy::pw_fused_bwd (with pw_custom): a 1x1 conv whose passes the project's kernel runs, of a
    // shape and prologue kern::pwconv_backward_fused_supported takes, runs its dgrad and wgrad as one kernel:
    // conv_backward_fused (the plain ConvBN backward) and bn_pw_backward_fused (with pw_bn_bwd) take it, with the
    // producer BN's reductions (pw_bn_grad's BnGradSums) in its epilogue where the dgrad gathers them and the kernel
    // takes that BN (SiLU; not with a ReLU BN-backward prologue). Bit for bit the two kernels' dx and dw; the
    // gathered sums within fp32 rounding of the dgrad epilogue's (summed per chunk of the pass, not per tile).
    bool pw_fused_bwd() const { return pw_fused_bwd(policy_); }
    static bool pw_fused_bwd(const kern::ConvPolicy& p) { return p.pw_custom && p.pw_fused_bwd; }
    // kern::ConvPolicy::head_bn_grad: with NetShape::fuse_head_bn, the heads' conv2 backward gathers the conv1 BN's
    // backward reductions (kern::HeadBnGrad; Conv::backward, MergedHeads::backward).
    bool head_bn_grad() const { return policy_.head_bn_grad; }
    // kern::ConvPolicy::head_bn_dx (with head_bn_grad): the heads' conv2 backward stores no dx; the conv1 BN's dx
    // pass forms it from the logits' gradient (kern::head_bn_dx_cuda; ConvBN::dx_heads).
    bool head_bn_dx() const { return head_bn_dx(policy_); }
    static bool head_bn_dx(const kern::ConvPolicy& p) { return p.head_bn_grad && p.head_bn_dx; }
    // Whether s's plain backward (no BN-backward prologue) runs as the fused 1x1 kernel, with the input prologue pro
    // (null: none) and the producer's reductions bng (null: none): then the layer calls conv_backward_fused.
    bool pw_fused_backward(const kern::ConvShape& s, const kern::DwPrologue* pro,
                           const kern::BnGradSums* bng = nullptr) const;
    bool pw_fused_bn_runs(const kern::ConvShape& s) const;
    // A 1x1 ConvBN's BN + activation backward with the BN's dx formed on load: kern::bn_act_backward_stats
    // (dgamma, dbeta +=; coefficients at the start of ws) unless given_coef (the coefficients and dgamma,
    // dbeta a consumer's epilogue already gathered), then kern::pwconv_backward_data_cuda and
    // kern::pwconv_backward_filter_cuda with a kern::DwBnBackward (the wgrad's partials in ws after the BN's
    // part; pro: the conv's input BN prologue, for the wgrad). conv_out: the conv's output (the BN's input);
    // dy: the BN + activation output's gradient. dx and dw are bitwise those of bn_act_backward followed by
    // the project's dgrad and wgrad on its dx. bng (only where dgrad_bn_grad_runs(s)): the producer BN's
    // reductions in the same dgrad's epilogue, its partials where the wgrad's go later. With pw_fused_bwd() and a
    // shape, prologue and BN the fused kernel takes, the dgrad and wgrad run as that one pass (bng in its epilogue,
    // its partials after the wgrad's). Only where pw_fused_bn_runs(s); ws of at least
    // pw_fused_bn_workspace_floats(s, bng != nullptr, pw_fused_bwd()).
    void bn_pw_backward_fused(const rt::Exec& ex, const kern::ConvShape& s, kern::Act act, const kern::bf16* conv_out,
                              const kern::bf16* dy, const float* gamma, const float* beta, const float* save_mean,
                              const float* save_invstd, float* dgamma, float* dbeta, const kern::bf16* x,
                              const kern::bf16* w, kern::bf16* dx, float* dw, bool accumulate, float* ws,
                              size_t ws_floats, const kern::DwPrologue* pro = nullptr,
                              const float* given_coef = nullptr, const kern::BnGradSums* bng = nullptr) const;
    // The BN's part, then the larger of the wgrad's partials and (bn_grad) the dgrad epilogue's, or with fused_bwd
    // on a shape the fused kernel takes, its partials (with bn_grad, the epilogue's after the wgrad's).
    static size_t pw_fused_bn_workspace_floats(const kern::ConvShape& s, bool bn_grad = false, bool fused_bwd = false);
    // The backward-data with the preceding BN's backward reductions in its epilogue
    // (kern::pwconv_backward_data_cuda with kern::BnGradSums; ws of at least kern::pwconv_dgrad_workspace_floats(s)).
    // Only where dgrad_bn_grad_runs(s); accumulate as conv_backward_data.
    void conv_backward_data_bn_grad(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* dy,
                                    const kern::bf16* w, kern::bf16* dx, bool accumulate, const kern::BnGradSums& bng,
                                    float* ws, size_t ws_floats) const;
    // The forward with the following BatchNorm's statistics gathered in its epilogue (kern::pwconv_forward_cuda
    // with kern::BnStatsOut, ws of at least kern::pwconv_workspace_floats(s); a depthwise s:
    // kern::dwconv3x3_forward_cuda in its staged variant, kern::dwconv3x3_stats_workspace_floats(s)). Only
    // where conv_forward_stats_runs(s).
    void conv_forward_stats(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* w,
                            kern::bf16* y, const kern::BnStatsOut& stats, float* ws, size_t ws_floats) const;

    std::vector<std::string> describe() const;
    // "<shape>: dwconv variants: ..., fused backward runs, ..." for each shape whose backward runs fused
    // (the variants line of describe(), with its shape).
    std::vector<std::string> describe_fused() const;
    // Bytes of dx the overwrite-mode backward-data zeroes per call set (one call per cuDNN shape that
    // needs the mode): 0 unless a shape had no beta = 0 engine and fell back to a beta = 1 plan.
    size_t dgrad_zeroed_bytes() const;
    double plan_seconds() const { return plan_seconds_; }  // wall time of prepare()

private:
    struct Entry;
    void prepare_entries(const std::vector<ConvUse>& convs);
    void prepare_cudnn(const ConvUse& u);  // fprop, wgrad and each dgrad mode u needs
    double cudnn_ms(const ConvUse& u) const;
    const Entry& find(const kern::ConvShape& s) const;
    double time_stem(const kern::ConvShape& s) const;  // the custom stem conv: ms per fwd+wgrad
    // The custom 1x1 conv: ms per fwd+dgrad+wgrad, with the epilogues the policy and e.use say the step runs;
    // cudnn_credit: the ms of the passes those epilogues remove, to add to cuDNN's time. e.pw_fused_timed (the
    // shape's layers take the fused backward) is left set only where the kernel took the combination timed.
    double time_pointwise(Entry& e, double& cudnn_credit) const;
    // Picks e's gather variants; ms per fwd(+dgrad)+wgrad. With the statistics epilogue (stats_forward(e)) the
    // forward is timed with it, and cudnn_credit is the statistics pass it removes.
    double time_depthwise(Entry& e, double& cudnn_credit) const;
    void time_prologue_forward(Entry& e) const;  // picks e's forward variant with the BN prologue
    // dw_stats() and a depthwise e planned with ConvUse::stats_epilogue: its forward variants are the staged ones.
    bool stats_forward(const Entry& e) const;
    double time_runs(const std::function<void()>& run, int iters) const;
    size_t fused_bn_half(const char* op, const rt::Exec& ex, const kern::ConvShape& s, kern::DwBnBackward& b,
                         const kern::bf16* dy, float* dgamma, float* dbeta, bool pro, bool accumulate, float* ws,
                         size_t ws_floats, size_t need) const;
    static std::string depthwise_variants_line(const Entry& e);
    void run_custom(const Entry& e, const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x,
                    const kern::bf16* w, kern::bf16* y, const kern::bf16* dy, kern::bf16* dx, float* dw, bool dgrad,
                    bool accumulate = true) const;

    rt::Exec ex_;
    kern::ConvPolicy policy_;
    std::unique_ptr<kern::ConvPlanCache> cudnn_;
    std::vector<Entry> entries_;
    float* custom_ws(const rt::Exec& ex) const;  // ex's lane's custom_ws_ region
    float* custom_ws_ = nullptr;                 // custom kernels' wgrad scratch (bound workspace, lane 0)
    size_t custom_ws_floats_ = 0;                // per lane
    int lanes_ = 1;
    double plan_seconds_ = 0;
};

}  // namespace model
