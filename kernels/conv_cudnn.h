// cuDNN convolutions of the GPU training step: BF16 NHWC activations, BF16 KRSC filters, fp32
// accumulation; fprop, dgrad and wgrad through cuDNN 9's graph (backend) API (runtime/cudnn_graph.h).
// Declared without CUDA types so g++ code (layers, planner, tests) can use it; kern::bf16 device
// buffers are passed to cuDNN as CUDNN_DATA_BFLOAT16. Design and numerics: docs/CONV_CUDNN.md.
//
//   plan time:  ConvPlanCache::prepare(shape, op) per conv of the model: builds the operation graph,
//               asks the heuristics for engine configurations, filters them (conv_select_candidates:
//               deterministic switch, runtime-compiled engines last, workspace limit), finalizes up
//               to policy.max_candidates plans per accumulation variant, times them (autotune) and
//               keeps the fastest. The choice is remembered process-wide (ConvPlanStore), so a second
//               network of the same process rebuilds the chosen plan without autotuning. Then
//               workspace_bytes() is reserved in the caller's arena and handed over once with
//               set_workspace().
//   step time:  forward / backward_data / backward_filter enqueue the cached plan (and, for the
//               scratch variants, one small add kernel) on ex.stream: no plan building, no
//               allocation, no synchronisation (CUDA-graph capturable).
//
// Contracts (the same as kernels/conv.h's references, bias excluded: the caller adds it):
//   forward:          y (N,P,Q,Cout) bf16 = conv(x, w)                      (overwritten)
//   backward_data:    dx (N,H,W,Cin) bf16 += conv_transpose(dy, w)          (accumulate mode)
//                     dx (N,H,W,Cin) bf16  = conv_transpose(dy, w)          (overwrite mode: the first
//                                            contribution; a beta = 0 plan writes dx, nothing zeroed)
//   backward_filter:  dw (Cout,k,k,Cin/g) fp32 += sum over N,P,Q of x-patch * dy   (accumulates)
// Every tensor pointer must be 16-byte aligned (the byte alignment declared to cuDNN).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "runtime/error.h"
#include "runtime/exec.h"

namespace kern {

enum class ConvOp { Fprop, Dgrad, Wgrad };
// Plans finalized and timed per accumulation variant by default. The heuristics list engines best
// predicted first; every candidate costs a finalize (seconds for a runtime-compiled one) and
// autotune_iters + 1 timed runs for each of the model's ~134 (op, shape) keys, so few are timed.
// `bench step --conv-candidates N` raises it to check whether a deeper search finds faster plans.
constexpr int kConvDefaultCandidates = 4;
const char* conv_op_name(ConvOp op);  // "fprop" | "dgrad" | "wgrad"

struct ConvPolicy {
    bool deterministic = false;                   // exclude engines noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
    bool autotune = true;                         // time the candidates; false: the heuristics' first that finalizes
    int autotune_iters = 3;                       // timed runs per candidate (after one warm-up run)
    size_t max_workspace = 256u << 20;            // exclude engines whose cuDNN workspace exceeds this; 0 = no limit
    int max_candidates = kConvDefaultCandidates;  // plans finalized (and timed) per accumulation variant
    // model::GpuOps, when autotuning: time every variant of the custom depthwise kernels and run the
    // fastest (bitwise-equal results); false: variant 0 only (`bench step --no-dw-variants`, the A/B).
    bool dw_variants = true;
    // The BatchNorm + activation row kernels' rows per loop turn (kern::kBnActRowBatches: 1, each row's
    // load used before the next is issued, the kernels measured so far; 4, four rows' loads issued
    // together). Bitwise-equal results; `bench step --bn-row-batch N` is the A/B. Not a convolution
    // choice, but the network's kernels take their choices from this one policy (model::GpuOps).
    int bn_row_batch = 1;
    // The BatchNorm backward's reduce and dx kernels compiled for this many resident blocks per SM
    // (kern::kBnActMinBlocks: 1, the measured kernels; 3, registers capped at 80). Bitwise-equal results;
    // `bench step --bn-min-blocks 3` is the A/B (docs/perf/OPTIMIZATION_LOG.md entry 29).
    int bn_min_blocks = 1;
    // The bilinear upsampling backward (kern::upsample_bilinear_backward_bf16_cuda) issues each window
    // row's 2F loads together instead of using each before the next: 2F round trips per pixel instead of
    // 4F^2. Bitwise-equal results; `bench step --upsample-row-loads` is the A/B (docs/perf/OPTIMIZATION_LOG.md
    // entry 18); off until a GPU measures it.
    bool upsample_row_loads = false;
    // model::SiderNetT: the HRNet stages' branches run on side streams of their own (rt::StreamLanes,
    // forked and joined per stage; parallel paths of the captured graph), each with its own workspace, the
    // backward's gradients of concurrent branches kept apart by the plan (GradTape::Section). The same
    // kernels on the same data: bitwise the same step. `bench step --branch-lanes` is the A/B
    // (docs/perf/OPTIMIZATION_LOG.md entry 30); off until a GPU measures it. Not a convolution choice either.
    bool branch_lanes = false;
    // model::GpuOps: the stride-1 depthwise convolutions the custom kernels run take their dgrad and wgrad
    // in one fused kernel (kern::dwconv3x3_backward_fused_cuda: one pass over dy and x instead of two
    // each). dx is the same bits; dw the same sum in another order (not bitwise the two-pass wgrad's),
    // so unlike the variants this changes results in the last bits. `bench step --dw-fused-bwd` is the
    // A/B; off until a GPU measures it (docs/perf/OPTIMIZATION_LOG.md entry 15).
    bool dw_fused_bwd = false;
    // With dw_fused_bwd: a depthwise ConvBN's BN backward runs only its statistics pass, and the fused
    // kernel forms the conv output's gradient from the BN's dy on load (kern::DwBnBackward): the dx pass
    // and its tensor are gone. Bitwise the same as dw_fused_bwd alone. `bench step --dw-fused-bwd-bn`
    // (docs/perf/OPTIMIZATION_LOG.md entry 16).
    bool dw_fused_bn_bwd = false;
    // With dw_fused_bwd and the fused LiteBlock (model.fuse_expand_dw): the depthwise conv's fused backward
    // also gathers the expand BatchNorm's backward reductions from the gradient it stores (kern::BnGradSums,
    // the kernel's epilogue), so the expand's BN backward runs only its dx pass (kern::bn_act_backward_dx):
    // its reduce pass, a read of that gradient and of the expand's output, is gone. Summed in another order
    // than bn_act_backward_stats's (last bits). `bench step --dw-fused-bn-grad` (implies --dw-fused-bwd;
    // docs/perf/OPTIMIZATION_LOG.md entry 21).
    bool dw_fused_bn_grad = false;
    // model::GpuOps: the 1x1 convolutions the project's tensor-core kernels support (kern::pwconv_supported)
    // get them as a second candidate (kernels/pwconv_cuda.h: forward, dgrad, wgrad), timed against cuDNN's
    // plans when autotuning and taken without timing otherwise, like the depthwise kernels. Another
    // summation order than cuDNN's, so results change in the last bits. `bench step --pw-custom` is the
    // A/B; off until a GPU measures it (docs/perf/OPTIMIZATION_LOG.md entry 19).
    bool pw_custom = false;
    // With pw_custom: a 1x1 ConvBN whose conv the project's kernel runs takes its BatchNorm's batch
    // statistics from that kernel's epilogue (kern::BnStatsOut) and runs only the apply pass
    // (kern::bn_act_apply_train): the statistics pass's read of the conv output is gone. The statistics
    // are summed in another order than bn_stats_train's (last bits). `bench step --pw-stats` (implies
    // --pw-custom; docs/perf/OPTIMIZATION_LOG.md entry 19).
    bool pw_stats = false;
    // With pw_custom: a 1x1 conv whose dgrad the project's kernel runs, and whose input is a depthwise
    // ConvBN's output (the LiteBlock's project, the DSConv's pointwise conv), gathers that BatchNorm's
    // backward reductions in the dgrad's epilogue (kern::BnGradSums): the depthwise layer's BN backward then
    // runs only its dx pass (kern::bn_act_backward_dx), or with dw_fused_bn_bwd forms it in the fused kernel
    // from those coefficients: its reduce pass's read of the output gradient is gone (the epilogue reads
    // the BN's input instead of the statistics pass). Summed in another order (last bits). `bench step
    // --pw-bn-grad` (implies --pw-custom; docs/perf/OPTIMIZATION_LOG.md entry 22).
    bool pw_bn_grad = false;
    // model::GpuOps: a depthwise ConvBN whose conv the project's kernels run takes its BatchNorm's batch
    // statistics from the staged forward's epilogue (kern::BnStatsOut, kernels/dwconv_cuda.h), and its BN
    // forward runs only the apply pass (or nothing, with model.fuse_dw_pw): the statistics pass's read of
    // the conv output is gone. The forward's variant is then chosen among the staged ones (all bitwise the
    // same y), timed with the epilogue; the statistics are summed in another order (last bits). `bench step
    // --dw-stats` (docs/perf/OPTIMIZATION_LOG.md entry 23).
    bool dw_stats = false;
    // With pw_custom: a 1x1 ConvBN whose conv the project's kernel runs (and whose dgrad gathers no producer's
    // BN reductions: pw_bn_grad's consumers keep their dx pass) forms its BatchNorm's dx in the dgrad's and the
    // wgrad's loads (kern::DwBnBackward): the dx pass and its tensor are gone; the two kernels read the BN
    // output's gradient and the conv output instead of the conv output's gradient. Bitwise the same step (the
    // formed values are the dx pass's bits). `bench step --pw-bn-bwd` (implies --pw-custom;
    // docs/perf/OPTIMIZATION_LOG.md entry 24).
    bool pw_bn_bwd = false;
    // With pw_custom: a 1x1 conv whose passes the project's kernel runs takes its dgrad and wgrad in one kernel
    // (kern::pwconv_backward_fused_cuda: dy, with pw_bn_bwd the BN's dy and input, and x read once for both
    // gradients instead of once each) where the shape fits it (cin, cout of 32, 64 or 128, cin * cout <= 8192:
    // the 1/4 and 1/8 LiteBlocks, transitions, down paths and laterals); pw_bn_grad's consumers gather the
    // producer BN's reductions in its epilogue (a SiLU BN; not with a ReLU BN-backward prologue). dx and dw are
    // the two kernels' bits: the same step, but for those sums' summation order. `bench step --pw-fused-bwd`
    // (implies --pw-custom; docs/perf/OPTIMIZATION_LOG.md entries 32, 33).
    bool pw_fused_bwd = false;
    // With a model whose heads' conv2 applies its conv1's BN on load (NetShape::fuse_head_bn): the heads' conv2
    // backward gathers that BN's backward reductions from the dx it stores (kern::HeadBnGrad), so the conv1 BN
    // backward runs its dx pass alone (no statistics pass; summed in another order). `bench step --head-bn-grad`
    // (implies --fuse-head-bn; docs/perf/OPTIMIZATION_LOG.md entry 34).
    bool head_bn_grad = false;
    // With head_bn_grad: the heads' conv2 backward stores no dx (only the BN's sums of it), and the conv1 BN's dx
    // pass forms each dy from the logits' gradient and the conv2 weights instead of reading it
    // (kern::head_bn_dx_cuda): the rows x channels bf16 tensor between them is neither written nor read; the step's
    // bits unchanged. `bench step --head-bn-dx` (implies --head-bn-grad; docs/perf/OPTIMIZATION_LOG.md entry 35).
    bool head_bn_dx = false;
};

// The policy of a run: deterministic = deterministic engines and no autotuning (the engine choice
// of autotuning may differ between processes), so whole runs repeat bit for bit; else autotuned.
inline ConvPolicy run_conv_policy(bool deterministic) {
    ConvPolicy p;
    p.deterministic = deterministic;
    p.autotune = !deterministic;
    return p;
}

// What selects a distinct plan: the op, the dgrad mode, the conv geometry (bias ignored: it is not
// handled here) and the policy fields that change which engines qualify.
struct ConvPlanKey {
    ConvOp op = ConvOp::Fprop;
    bool overwrite = false;  // dgrad only: dx = conv_transpose (beta = 0) instead of dx += ...
    ConvShape shape;         // bias always false
    bool deterministic = false;
    bool autotune = true;
    size_t max_workspace = 0;
    int max_candidates = kConvDefaultCandidates;

    bool operator==(const ConvPlanKey& o) const;
    bool operator!=(const ConvPlanKey& o) const { return !(*this == o); }
    // "wgrad n2 16x32 c32->64 k3 s2 p1 g1 det tuned ws<=256MiB top4"; an overwrite dgrad key
    // names its op "dgrad-overwrite".
    std::string to_string() const;
};

// overwrite: the dgrad plan of the overwrite mode (throws for another op).
ConvPlanKey conv_plan_key(ConvOp op, const ConvShape& s, const ConvPolicy& policy, bool overwrite = false);

struct ConvPlanKeyHash {
    size_t operator()(const ConvPlanKey& k) const;
};

// ---- candidate selection (pure: tested on synthetic engine lists) ----

// What the filter needs to know of one engine configuration the heuristics proposed.
struct ConvCandidateInfo {
    bool nondeterministic = false;  // CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
    bool demoted = false;           // REDUCED_PRECISION_REDUCTION or DOWN_CONVERT_INPUTS
    bool runtime_compiled = false;  // CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION (compiled at finalize)
};

// Finalizes candidate `index`: false when the engine refuses the graph; else *workspace_bytes.
using ConvFinalizeFn = std::function<bool(size_t index, size_t* workspace_bytes)>;

struct ConvCandidateChoice {
    std::vector<size_t> kept;  // indices into the list, in the order tried (at most `limit`)
    int tier = -1;             // tier the kept ones come from (-1: none kept)
    int nondeterministic = 0;  // excluded by the deterministic policy
    int over_workspace = 0;    // finalized, but their workspace exceeds max_workspace
    int refused = 0;           // did not finalize
    int not_tried = 0;         // in a later tier than the one that produced plans (never finalized)
};

// The tiers, tried in order until one yields a plan; within a tier the heuristics' order:
//   0 full precision, precompiled;  1 full precision, runtime-compiled;
//   2 demoted, precompiled;         3 demoted, runtime-compiled.
// Precision outranks plan time (a runtime-compiled engine only costs compile time at plan time),
// and plan time outranks the heuristics' preference within one precision class. Nondeterministic
// engines are dropped first when `deterministic`. Engines are finalized lazily, so a runtime-compiled
// one is never compiled while a precompiled one of its precision qualifies.
int conv_candidate_tier(const ConvCandidateInfo& c);
ConvCandidateChoice conv_select_candidates(const std::vector<ConvCandidateInfo>& list, bool deterministic,
                                           size_t max_workspace, int limit, const ConvFinalizeFn& finalize);

// How a plan gets its result into the destination, chosen per plan at prepare() time:
//   Overwrite    fprop: y = conv (beta = 0); dgrad, overwrite mode: dx = conv_transpose (beta = 0).
//   InPlace      dgrad: dx (bf16) = conv + 1*dx in the engine (beta = 1), one rounding;
//                wgrad: dw (fp32) = conv + 1*dw in the engine (fp32 output tensor, beta = 1).
//   ScratchBf16  the engine writes bf16 into the workspace's scratch region (beta = 0); one add
//                kernel then does dst += scratch in fp32 (dgrad: one more bf16 rounding; wgrad:
//                the bf16 wgrad is widened exactly into the fp32 master gradient).
//   ScratchF32   wgrad: fp32 scratch (beta = 0), then dw += scratch.
// An InPlace plan asked to overwrite (the overwrite mode's fallback) gets dx zeroed first.
enum class ConvAccum { Overwrite, InPlace, ScratchBf16, ScratchF32 };
const char* conv_accum_name(ConvAccum a);

// Variants tried per op (and dgrad mode), in order of preference. The first
// `conv_accum_tier0(op, overwrite)` of them are equally good (autotuning chooses among them); the
// rest are only used when none of those has an engine. fprop: {Overwrite}; dgrad accumulate:
// {InPlace, ScratchBf16} (both tier 0); dgrad overwrite: {Overwrite} (tier 0), then InPlace, whose
// launch must zero dx first (the fallback for a shape without a beta = 0 engine, logged at warning);
// wgrad: {InPlace, ScratchF32, ScratchBf16}, all tier 0: autotuning picks the fastest. On an H100
// (cuDNN 9.19) the fp32-output wgrad has one engine, the runtime-compiled fallback: 5.0 ms per call
// at the step's 1/4-resolution dense and 1x1 shapes, where the bf16-output engines took 0.06-0.38 ms
// (docs/CONV_CUDNN.md, "Wgrad variants on a GPU"); a bf16 wgrad widened exactly into the fp32
// gradient is what mixed-precision PyTorch does too. `overwrite` is only valid for dgrad.
std::vector<ConvAccum> conv_accum_variants(ConvOp op, bool overwrite = false);
size_t conv_accum_tier0(ConvOp op, bool overwrite = false);
// The dgrad mode a launch asks for against the mode its plan was prepared for: throws (naming the
// key and how to prepare the mode) when they differ. Pure: the step-time refusal of an unprepared mode.
void conv_check_dgrad_mode(const ConvPlanKey& prepared, bool accumulate);

// Scratch bytes a variant needs beside cuDNN's own workspace: the destination's size in the scratch
// dtype (dgrad: N*H*W*Cin bf16; wgrad: weight_numel bf16 or fp32), 0 for Overwrite and InPlace.
size_t conv_scratch_bytes(ConvOp op, ConvAccum a, const ConvShape& s);

// ---- process-wide plan store ----

// What identifies a plan across networks of one process: the plan key (op, geometry, policy), the
// device and the cuDNN library loaded. The execution plan itself is bound to a cuDNN handle, so the
// store keeps the autotuning result (which engine, knobs and accumulation won) and each network
// rebuilds that one plan for its own handle: graph + heuristics + one finalize, no timing.
struct ConvPlanStoreKey {
    ConvPlanKey plan;
    int device = 0;
    size_t cudnn_version = 0;
    bool operator==(const ConvPlanStoreKey& o) const {
        return plan == o.plan && device == o.device && cudnn_version == o.cudnn_version;
    }
};

struct ConvPlanChoice {
    std::string engine;  // rt::CudnnEngineConfig::identity() of the winner
    ConvAccum accum = ConvAccum::Overwrite;
    double ms = -1;  // its measured time (-1: not timed)
    int timed = 0;   // candidates timed
};

// Thread-safe map ConvPlanStoreKey -> ConvPlanChoice; each key is built once (by the builder given
// with its first lookup; a builder that throws stores nothing). process() is the store every
// ConvPlanCache uses; tests make their own.
class ConvPlanStore {
public:
    using Builder = std::function<ConvPlanChoice()>;
    // The stored choice, or builder()'s (stored) on the first lookup of `key`; *built says which.
    ConvPlanChoice get_or_build(const ConvPlanStoreKey& key, const Builder& builder, bool* built);
    // Replaces a stored choice (a reused choice the current library no longer offers).
    void put(const ConvPlanStoreKey& key, const ConvPlanChoice& choice);
    size_t size() const;
    size_t builds() const;  // builder calls that returned
    size_t hits() const;    // lookups answered from the store
    void clear();
    static ConvPlanStore& process();

    ConvPlanStore();
    ~ConvPlanStore();
    ConvPlanStore(const ConvPlanStore&) = delete;
    ConvPlanStore& operator=(const ConvPlanStore&) = delete;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// ---- the cuDNN runtime ----

// The oldest cuDNN runtime the backend accepts, in cudnnGetVersion's encoding (major*10000 +
// minor*100 + patch): major 9 (the graph API attributes and the libcudnn.so.9 ABI built against;
// cudnnGetLastErrorString, which every refusal reports, is new in 9.0). Older minors than the
// headers are accepted with a warning (cuDNN promises compatibility towards newer runtimes only).
constexpr size_t kCudnnMinRuntime = 90000;
// True when `runtime` (cudnnGetVersion) can run plans built from headers `compiled` (CUDNN_VERSION):
// same major (9) and runtime >= kCudnnMinRuntime; else false and *why says what to install.
// *warning (may be null) gets a line when the runtime is older than the headers.
bool cudnn_runtime_ok(size_t runtime, size_t compiled, std::string* why, std::string* warning);

// Layout of one plan's slice of the shared workspace: cuDNN's workspace at offset 0, the scratch
// region at scratch_offset = cudnn_bytes rounded up to kConvWorkspaceAlign; total = scratch_offset +
// scratch_bytes (0 when both are 0). Plans never run concurrently, so they all share offset 0 and
// the workspace to reserve is the max of the totals.
constexpr size_t kConvWorkspaceAlign = 256;
struct ConvWorkspaceLayout {
    size_t scratch_offset = 0;
    size_t total = 0;
};
constexpr size_t conv_align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
constexpr ConvWorkspaceLayout conv_workspace_layout(size_t cudnn_bytes, size_t scratch_bytes) {
    return {conv_align_up(cudnn_bytes, kConvWorkspaceAlign),
            scratch_bytes ? conv_align_up(cudnn_bytes, kConvWorkspaceAlign) + scratch_bytes : cudnn_bytes};
}

// The arrays handed to cuDNN for one shape. cuDNN wants logical dims in (N, C, H, W) order; the
// NHWC / KRSC memory layouts are expressed by the strides (C innermost).
//   x: dims (N, Cin, H, W)        strides (H*W*Cin, 1, W*Cin, Cin)
//   w: dims (Cout, Cin/g, k, k)   strides (k*k*Cin/g, 1, k*Cin/g, Cin/g)  (groups are implied by
//                                  x's C over w's C: cuDNN has no group attribute in the graph API)
//   y: dims (N, Cout, P, Q)       strides (P*Q*Cout, 1, Q*Cout, Cout)
//   pre = post padding (pad, pad), stride (s, s), dilation (1, 1)
struct ConvCudnnDims {
    int64_t x_dims[4], x_strides[4];
    int64_t w_dims[4], w_strides[4];
    int64_t y_dims[4], y_strides[4];
    int64_t pad[2], stride[2], dilation[2];
};
ConvCudnnDims conv_cudnn_dims(const ConvShape& s);  // validates s

// Device-free check of what prepare() builds first: the tensors, the convolution descriptor and the
// operation of (s, op, a), finalized exactly as prepare() does (cuDNN validates dims, strides, data
// types, P/Q and the group split there, without a handle). False + cuDNN's reason when it refuses.
// Engines, plans and execution still need a device. Throws if `a` is not a variant of `op` (in
// either dgrad mode).
bool conv_cudnn_operation_ok(const ConvShape& s, ConvOp op, ConvAccum a, std::string* why);

// Tensor unique ids in every conv graph (by role, whichever op reads or writes them).
constexpr int64_t kConvUidX = 1, kConvUidW = 2, kConvUidY = 3;
constexpr size_t kConvTensorAlign = 16;

// ---- the add kernels of the scratch variants (kernels/conv_cudnn_aux.cu) ----

// Launch geometry: `vec`-wide vector elements (16-byte accesses) handled by a grid-stride loop, the
// n % vec tail by the first threads of block 0.
constexpr int kConvAddThreads = 256;
constexpr int kConvAddMaxBlocks = 1024;
struct ConvAddGeometry {
    size_t vectors = 0;  // n / vec
    size_t tail = 0;     // n % vec
    int blocks = 0;      // clamp(ceil(vectors / threads), 1, kConvAddMaxBlocks)
};
constexpr ConvAddGeometry conv_add_geometry(size_t n, int vec) {
    const size_t v = n / static_cast<size_t>(vec);
    const size_t b = (v + kConvAddThreads - 1) / kConvAddThreads;
    return {v, n % static_cast<size_t>(vec),
            static_cast<int>(b < 1 ? 1 : (b > kConvAddMaxBlocks ? kConvAddMaxBlocks : b))};
}

// dst[i] = bf16(float(dst[i]) + float(src[i]))   (vec 8)
void conv_add_bf16(const rt::Exec& ex, bf16* dst, const bf16* src, size_t n);
// dst[i] += src[i]                                (vec 4)
void conv_add_f32(const rt::Exec& ex, float* dst, const float* src, size_t n);
// dst[i] += float(src[i])                         (vec 8)
void conv_add_f32_bf16(const rt::Exec& ex, float* dst, const bf16* src, size_t n);

// ---- the plan cache ----

// What ConvPlanCache::prepare throws when cuDNN has no plan for a key: no engine qualifies (every
// configuration refused, excluded or over the workspace limit) or none of the candidates ran. A
// caller with another implementation may fall back on this, and only on this: a CUDA error or a
// failed cuDNN call is a plain rt::Error and must propagate.
class ConvUnsupported : public rt::Error {
public:
    explicit ConvUnsupported(const std::string& what) : rt::Error(what) {}
};

class ConvPlanCache {
public:
    // CUDA Exec required (throws otherwise); its cuDNN handle must be bound to its stream.
    ConvPlanCache(const rt::Exec& ex, const ConvPolicy& policy);
    ~ConvPlanCache();
    ConvPlanCache(const ConvPlanCache&) = delete;
    ConvPlanCache& operator=(const ConvPlanCache&) = delete;

    // Plan time (before the arena is sealed; allocates temporaries and synchronises while
    // autotuning): builds and caches the plan for (s, op) and returns its workspace bytes (cuDNN's
    // plus scratch, conv_workspace_layout). Idempotent; a key another ConvPlanCache of this process
    // already autotuned (ConvPlanStore) is rebuilt without timing. Throws ConvUnsupported naming the
    // key when no engine qualifies (with a hint when Cin is not a multiple of 8), rt::Error when
    // called for a new key after set_workspace() and for CUDA/cuDNN failures. Dgrad: one plan per
    // mode; overwrite = true prepares the overwrite mode's (beta = 0) plan.
    size_t prepare(const ConvShape& s, ConvOp op, bool overwrite = false);
    size_t workspace_bytes() const;  // max over every prepared plan
    // Once, after every prepare(): device_ptr (256-byte aligned, or null when workspace_bytes() is
    // 0) with at least workspace_bytes() bytes. lanes > 1 (rt::StreamLanes): lanes regions of `bytes`
    // each (a multiple of 256) from device_ptr; a call on an Exec of lane k uses the k-th and runs on that
    // Exec's stream (the handle is bound to it for the call).
    void set_workspace(void* device_ptr, size_t bytes, int lanes = 1);

    // Step time: enqueue on ex.stream. Throws rt::Error (naming the key) if the plan was not
    // prepared or the workspace not set, and for misaligned pointers or a different Exec.
    void forward(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y);
    // accumulate = false: dx = conv_transpose(dy, w), overwritten (the first contribution) by the
    // overwrite mode's plan; each mode needs its own prepare() (an unprepared mode throws).
    void backward_data(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                       bool accumulate = true);
    void backward_filter(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw);

    // Time per call of the plan chosen for (s, op), its add kernel included, as autotuning measured
    // it (mean of autotune_iters runs); -1 when it was not timed (autotune off). Throws if the plan
    // was not prepared.
    double measured_ms(const ConvShape& s, ConvOp op, bool overwrite = false) const;
    // Bytes of dx zeroed per step-time call of the overwrite mode: 0 with a beta = 0 plan, dx's size
    // for a shape that fell back to an InPlace plan. Throws if the plan was not prepared.
    size_t overwrite_zeroed_bytes(const ConvShape& s) const;

    // One line per plan, sorted by key: key | engine, knobs, notes | accumulation | workspace | ms.
    std::vector<std::string> describe() const;
    size_t size() const;
    // Plan time so far: keys autotuned here, keys rebuilt from the process store, wall seconds.
    struct PlanTime {
        int tuned = 0, reused = 0;
        double seconds = 0;
    };
    PlanTime plan_time() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kern
