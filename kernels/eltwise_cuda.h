// CUDA element-wise ops of the GPU training step (kernels/eltwise.cu): bf16 activations and
// activation gradients, fp32 parameters and parameter gradients. Declared without CUDA types so g++
// code (layers, tests) can call them; kern::bf16 buffers are passed to the kernels as __nv_bfloat16.
// Design, numerics and preconditions: docs/KERNELS_ELTWISE.md.
//
//   add / accumulate / accumulate_to_f32 / convert / fill   y = a + b, y += x, ... (one rounding each)
//   bias_add                                                 y (rows, C) += bias (C)
//   column_sum                                               out (C) += sum over rows of x (rows, C)
//   fusion_forward / fusion_backward                         LiteFPN weighted fusion (eltwise.h)
//
// Every op: fp32 math, one rounding per output. n == 0 (rows == 0) is a no-op (pointers unchecked).
// Flat ops are cut into a scalar head (up to the first 16-byte boundary), 128-bit vectors of 8
// elements and a scalar tail, when all operands share the alignment (elt_split); otherwise every
// element is scalar. Reductions (column_sum, fusion_backward) are deterministic: a fixed grid, fixed
// per-thread order, fixed block trees, partials in the caller's fp32 workspace combined in a fixed
// order in fp64 by a second kernel. No atomics. Launchers enqueue on ex.stream, never allocate and
// never synchronise (CUDA-graph capturable).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/bf16.h"
#include "runtime/exec.h"

namespace kern {

// ---- launch arithmetic (shared by the launchers and the CPU tests) ----

constexpr int kEltThreads = 256;           // threads per block of every kernel here
constexpr size_t kEltMaxBlocks = 4096;     // element-wise grids: grid-stride beyond
constexpr int kEltVec = 8;                 // elements per vector: 8 bf16 = 128 bits (8 fp32 = 2 x 128 bits)
constexpr size_t kEltAlign = 16;           // bytes of a vector access
constexpr size_t kFusionMaxBlocks = 1024;  // fusion backward reduction grid cap (partials per sum)
constexpr int kColumnSumChunks = 512;      // row chunks of column_sum (fixed: bits depend on rows, C only)

// [0, n) = [0, head) scalar, then `vecs` vectors of kEltVec elements, then `tail` scalar elements.
struct EltSplit {
    size_t head = 0, vecs = 0, tail = 0;
};

// One operand of a flat op: its address and element size in bytes (2 for bf16, 4 for fp32).
struct EltOperand {
    uintptr_t addr;
    size_t elem;
};

// Elements of `elem` bytes from address a to the next 16-byte boundary (0 when aligned).
constexpr size_t elt_head_elems(uintptr_t a, size_t elem) { return ((kEltAlign - a % kEltAlign) % kEltAlign) / elem; }

// The split of n elements for `count` operands read/written at the same index. Vectors are used
// when, after the head h of the first operand (h < 8 for bf16), every operand's address + h*elem is
// 16-byte aligned and h <= n; otherwise everything is scalar (head = vecs = 0, tail = n). Put the
// operand with the smallest elements first (a bf16 head can realign an fp32 operand, not the
// reverse). Addresses must be multiples of their element size (the launchers check).
constexpr EltSplit elt_split(size_t n, const EltOperand* ops, size_t count) {
    const size_t h = elt_head_elems(ops[0].addr, ops[0].elem);
    bool vec = h <= n;
    for (size_t k = 0; k < count; ++k) vec = vec && (ops[k].addr + h * ops[k].elem) % kEltAlign == 0;
    if (!vec) return {0, 0, n};
    const size_t vecs = (n - h) / kEltVec;
    return {h, vecs, n - h - kEltVec * vecs};
}
constexpr EltSplit elt_split(size_t n, std::initializer_list<EltOperand> ops) {
    return elt_split(n, ops.begin(), ops.size());
}

// Blocks of an element-wise launch: enough threads for the largest of the three loops (capped;
// every loop is grid-stride), at least 1.
constexpr size_t elt_blocks(const EltSplit& s) {
    size_t work = s.vecs > s.head ? s.vecs : s.head;
    work = work > s.tail ? work : s.tail;
    const size_t b = (work + kEltThreads - 1) / kEltThreads;
    return b < 1 ? 1 : (b > kEltMaxBlocks ? kEltMaxBlocks : b);
}

// bias_add: vectors only when C % 8 == 0 and y is 16-byte aligned (a vector then never crosses a row
// and its 8 bias values are consecutive); otherwise every element is scalar.
constexpr EltSplit bias_add_split(size_t rows, int c, uintptr_t y) {
    const size_t n = rows * static_cast<size_t>(c);
    if (c % kEltVec == 0 && y % kEltAlign == 0) return {0, n / kEltVec, 0};
    return {0, 0, n};
}

// Fusion backward: blocks of the reduction kernel, a function of n only (so is the workspace), one
// per 8 * 256 elements, at most kFusionMaxBlocks; 0 for n == 0.
constexpr size_t fusion_backward_blocks(size_t n) {
    const size_t b =
        (n + static_cast<size_t>(kEltVec) * kEltThreads - 1) / (static_cast<size_t>(kEltVec) * kEltThreads);
    return b > kFusionMaxBlocks ? kFusionMaxBlocks : b;
}

// Geometry of column_sum for (rows, C) and the vector flag (C % 8 == 0 and x 16-byte aligned):
// threadIdx.x = a column group (8 columns per 128-bit load, or 1 column when scalar), threadIdx.y =
// a row lane; grid (grid_x, chunks); the finalize kernel runs finalize_blocks blocks of (32, 8).
struct ColumnSumPlan {
    size_t rows = 0;
    int c = 0;
    int width = 0;                // columns per thread: 8 (vector) or 1
    int groups = 0;               // C / width
    int block_x = 0;              // min(groups, 32)
    int block_y = 0;              // largest power of two with block_x * block_y <= 256
    int grid_x = 0;               // ceil(groups / block_x)
    int chunks = 0;               // min(rows, kColumnSumChunks): fixed row chunks, independent of `vector`
    int finalize_blocks = 0;      // ceil(C / 32)
    size_t workspace_floats = 0;  // chunks * C
};

// Throws rt::Error for C <= 0 (naming C). rows == 0 gives an empty plan (no launch).
ColumnSumPlan column_sum_plan(size_t rows, int c, bool vector);

// ---- element-wise ops: n elements, device pointers ----

// y = a + b (bf16). y may alias a or b (exactly, not partially).
void add_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, bf16* y);
// y += x (bf16); accumulate = false: y = x (a device copy; y is never read).
void accumulate_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* x, bf16* y, bool accumulate = true);
// y += float(x): bf16 x into fp32 y.
void accumulate_bf16_to_f32_cuda(const rt::Exec& ex, size_t n, const bf16* x, float* y);
// y = bf16(x), round to nearest even.
void convert_f32_to_bf16_cuda(const rt::Exec& ex, size_t n, const float* x, bf16* y);
// y = a + alpha * b in fp32, one fmaf per element (the BN running mean's and eval mean's bias shift of a
// layer whose conv bias folds into its BN, model::ConvBN). y may be a or b exactly, not partially.
void axpy_f32_cuda(const rt::Exec& ex, size_t n, const float* a, float alpha, const float* b, float* y);
// y = bf16(value).
void fill_bf16_cuda(const rt::Exec& ex, size_t n, float value, bf16* y);
// y (rows, C) bf16: y[r*C + j] += bias[j]; bias (C) fp32.
void bias_add_bf16_cuda(const rt::Exec& ex, size_t rows, int c, const float* bias, bf16* y);

// out[j] += sum_r x[r, j] (bias gradients). x (rows, C) bf16; out (C) fp32; ws: at least
// column_sum_workspace_floats(rows, C) fp32 scratch (no initialisation needed).
size_t column_sum_workspace_floats(size_t rows, int c);
void column_sum_bf16_cuda(const rt::Exec& ex, size_t rows, int c, const bf16* x, float* out, float* ws,
                          size_t ws_floats);

// LiteFPN weighted fusion (fusion_forward_ref): sa = softplus(wa), sb = softplus(wb),
// y = (sa*a + sb*b) / (sa + sb + kFusionEps). a, b, y (n) bf16; wa, wb: one fp32 each in DEVICE
// memory (the master weights, read by the kernel: graph-safe). y may alias a or b.
void fusion_forward_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                              const float* wb, bf16* y);

// Backward (fusion_backward_ref): da += dy*sa/D, db += dy*sb/D (bf16, D = sa + sb + eps);
// dwa, dwb (one fp32 each, device) += the weight gradients from sum(dy*a), sum(dy*b).
// ws: at least fusion_backward_workspace_floats(n) = 2 * fusion_backward_blocks(n) fp32 scratch.
// da and db must differ and must not alias a, b or dy. accumulate_da / accumulate_db = false:
// that output is overwritten (never read) instead of accumulated.
size_t fusion_backward_workspace_floats(size_t n);
void fusion_backward_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                               const float* wb, const bf16* dy, bf16* da, bf16* db, float* dwa, float* dwb, float* ws,
                               size_t ws_floats, bool accumulate_da = true, bool accumulate_db = true);

}  // namespace kern
