// cuDNN convolutions of the GPU training step: BF16 NHWC activations, BF16 KRSC filters, fp32
// accumulation; fprop, dgrad and wgrad through cuDNN 9's graph (backend) API (runtime/cudnn_graph.h).
// Declared without CUDA types so g++ code (layers, planner, tests) can use it; kern::bf16 device
// buffers are passed to cuDNN as CUDNN_DATA_BFLOAT16. Design and numerics: docs/CONV_CUDNN.md.
//
//   plan time:  ConvPlanCache::prepare(shape, op) per conv of the model: builds the operation graph,
//               asks the heuristics for engine configurations, filters them (deterministic switch,
//               workspace limit), finalizes up to kConvMaxCandidates plans per accumulation variant,
//               times them (autotune) and caches the fastest. Then workspace_bytes() is reserved in
//               the caller's arena and handed over once with set_workspace().
//   step time:  forward / backward_data / backward_filter enqueue the cached plan (and, for the
//               scratch variants, one small add kernel) on ex.stream: no plan building, no
//               allocation, no synchronisation (CUDA-graph capturable).
//
// Contracts (the same as kernels/conv.h's references, bias excluded: the caller adds it):
//   forward:          y (N,P,Q,Cout) bf16 = conv(x, w)                      (overwritten)
//   backward_data:    dx (N,H,W,Cin) bf16 += conv_transpose(dy, w)          (accumulates)
//   backward_filter:  dw (Cout,k,k,Cin/g) fp32 += sum over N,P,Q of x-patch * dy   (accumulates)
// Every tensor pointer must be 16-byte aligned (the byte alignment declared to cuDNN).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "runtime/exec.h"

namespace kern {

enum class ConvOp { Fprop, Dgrad, Wgrad };
const char* conv_op_name(ConvOp op);  // "fprop" | "dgrad" | "wgrad"

struct ConvPolicy {
    bool deterministic = false;         // exclude engines noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
    bool autotune = true;               // time the candidates; false: the heuristics' first that finalizes
    int autotune_iters = 3;             // timed runs per candidate (after one warm-up run)
    size_t max_workspace = 256u << 20;  // exclude engines whose cuDNN workspace exceeds this; 0 = no limit
};

// The policy of a run: deterministic = deterministic engines and no autotuning (the engine choice
// of autotuning may differ between processes), so whole runs repeat bit for bit; else autotuned.
inline ConvPolicy run_conv_policy(bool deterministic) {
    ConvPolicy p;
    p.deterministic = deterministic;
    p.autotune = !deterministic;
    return p;
}

// What selects a distinct plan: the op, the conv geometry (bias ignored: it is not handled here) and
// the policy fields that change which engines qualify.
struct ConvPlanKey {
    ConvOp op = ConvOp::Fprop;
    ConvShape shape;  // bias always false
    bool deterministic = false;
    bool autotune = true;
    size_t max_workspace = 0;

    bool operator==(const ConvPlanKey& o) const;
    bool operator!=(const ConvPlanKey& o) const { return !(*this == o); }
    // "wgrad n2 16x32 c32->64 k3 s2 p1 g1 det tuned ws<=256MiB"
    std::string to_string() const;
};

ConvPlanKey conv_plan_key(ConvOp op, const ConvShape& s, const ConvPolicy& policy);

struct ConvPlanKeyHash {
    size_t operator()(const ConvPlanKey& k) const;
};

// How a plan gets its result into the destination, chosen per plan at prepare() time:
//   Overwrite    fprop: y = conv (beta = 0).
//   InPlace      dgrad: dx (bf16) = conv + 1*dx in the engine (beta = 1), one rounding;
//                wgrad: dw (fp32) = conv + 1*dw in the engine (fp32 output tensor, beta = 1).
//   ScratchBf16  the engine writes bf16 into the workspace's scratch region (beta = 0); one add
//                kernel then does dst += scratch in fp32 (dgrad: one more bf16 rounding; wgrad:
//                the bf16 wgrad is widened exactly into the fp32 master gradient).
//   ScratchF32   wgrad: fp32 scratch (beta = 0), then dw += scratch.
enum class ConvAccum { Overwrite, InPlace, ScratchBf16, ScratchF32 };
const char* conv_accum_name(ConvAccum a);

// Variants tried per op, in order of preference. The first `conv_accum_tier0(op)` of them are
// equally good numerically (autotuning chooses among them); the rest are only used when none of
// those has an engine. fprop: {Overwrite}; dgrad: {InPlace, ScratchBf16} (both tier 0);
// wgrad: {InPlace, ScratchF32, ScratchBf16} (tier 0 = the two fp32 ones; a bf16 wgrad output is
// the precision fallback).
std::vector<ConvAccum> conv_accum_variants(ConvOp op);
size_t conv_accum_tier0(ConvOp op);

// Scratch bytes a variant needs beside cuDNN's own workspace: the destination's size in the scratch
// dtype (dgrad: N*H*W*Cin bf16; wgrad: weight_numel bf16 or fp32), 0 for Overwrite and InPlace.
size_t conv_scratch_bytes(ConvOp op, ConvAccum a, const ConvShape& s);

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
// Engines, plans and execution still need a device. Throws if `a` is not a variant of `op`.
bool conv_cudnn_operation_ok(const ConvShape& s, ConvOp op, ConvAccum a, std::string* why);

// Tensor unique ids in every conv graph (by role, whichever op reads or writes them).
constexpr int64_t kConvUidX = 1, kConvUidW = 2, kConvUidY = 3;
constexpr int kConvMaxCandidates = 8;  // plans finalized (and timed) per accumulation variant
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

class ConvPlanCache {
public:
    // CUDA Exec required (throws otherwise); its cuDNN handle must be bound to its stream.
    ConvPlanCache(const rt::Exec& ex, const ConvPolicy& policy);
    ~ConvPlanCache();
    ConvPlanCache(const ConvPlanCache&) = delete;
    ConvPlanCache& operator=(const ConvPlanCache&) = delete;

    // Plan time (before the arena is sealed; allocates temporaries and synchronises while
    // autotuning): builds and caches the plan for (s, op) and returns its workspace bytes (cuDNN's
    // plus scratch, conv_workspace_layout). Idempotent. Throws rt::Error naming the key when no
    // engine qualifies (with a hint when Cin is not a multiple of 8), or when called for a new key
    // after set_workspace().
    size_t prepare(const ConvShape& s, ConvOp op);
    size_t workspace_bytes() const;  // max over every prepared plan
    // Once, after every prepare(): device_ptr (256-byte aligned, or null when workspace_bytes() is
    // 0) with at least workspace_bytes() bytes.
    void set_workspace(void* device_ptr, size_t bytes);

    // Step time: enqueue on ex.stream. Throws rt::Error (naming the key) if the plan was not
    // prepared or the workspace not set, and for misaligned pointers or a different Exec.
    void forward(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y);
    // accumulate = false: dx = conv_transpose(dy, w), overwritten (the first contribution).
    void backward_data(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                       bool accumulate = true);
    void backward_filter(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw);

    // Time per call of the plan chosen for (s, op), its add kernel included, as autotuning measured
    // it (mean of autotune_iters runs); -1 when it was not timed (autotune off). Throws if the plan
    // was not prepared.
    double measured_ms(const ConvShape& s, ConvOp op) const;

    // One line per plan, sorted by key: key | engine, knobs, notes | accumulation | workspace | ms.
    std::vector<std::string> describe() const;
    size_t size() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kern
