// CUDA element-wise ops, bias add and the LiteFPN weighted fusion on bf16 data (kernels/eltwise_cuda.h,
// docs/KERNELS_ELTWISE.md; column_sum, the bias gradient, is in kernels/column_sum.cu).
//
// All flat ops share one loop (elt_loop): a grid-stride loop over 128-bit vectors of 8 elements,
// plus grid-stride loops over the scalar head and tail that elt_split leaves; an op is a small
// functor with vec(i) (elements i..i+7, 16-byte aligned for every operand) and one(i). Everything
// is bandwidth-bound, so the only aim is full-width, coalesced accesses. Loads are plain (not
// __ldg): y may alias an input in add/accumulate/fusion_forward, and the non-coherent path requires
// data that no thread of the kernel writes.
// Rounding: inputs are widened to fp32, the op is computed in fp32 in the reference's order
// (eltwise_ref.cpp), and each output is rounded once (round to nearest even).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda_util.cuh"
#include "kernels/eltwise.h"
#include "kernels/eltwise_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kWarps = kEltThreads / 32;

// ---- device helpers (load8_rw, store8: kernels/cuda_util.cuh; all bf16 loads here are plain) ----

// 8 consecutive fp32 (16-byte aligned) as two 128-bit accesses.
__device__ __forceinline__ void load8f(const float* p, float (&v)[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void store8f(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ float ld(const bfloat* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(bfloat* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// softplus and its derivative exactly as eltwise_ref.cpp defines them (torch: beta 1, threshold 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float softplus_grad(float x) {
    if (x > 20.0f) return 1.0f;
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

// The loop every flat kernel runs: vectors, then the head, then the tail, each grid-stride. The
// order in which one thread visits its elements is a function of (split, grid) only.
template <class Op>
__device__ __forceinline__ void elt_loop(const EltSplit& s, Op& op) {
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = tid; i < s.vecs; i += stride) op.vec(s.head + kEltVec * i);
    for (size_t i = tid; i < s.head; i += stride) op.one(i);
    const size_t t0 = s.head + kEltVec * s.vecs;
    for (size_t i = tid; i < s.tail; i += stride) op.one(t0 + i);
}

// ---- ops (functors run by elt_loop) ----

struct AddOp {
    const bfloat *a, *b;
    bfloat* y;
    __device__ void vec(size_t i) {
        float va[8], vb[8];
        load8_rw(a + i, va);
        load8_rw(b + i, vb);
#pragma unroll
        for (int j = 0; j < 8; ++j) va[j] += vb[j];
        store8(y + i, va);
    }
    __device__ void one(size_t i) { st(y, i, ld(a, i) + ld(b, i)); }
};

struct AccumulateOp {
    const bfloat* x;
    bfloat* y;
    __device__ void vec(size_t i) {
        float vx[8], vy[8];
        load8_rw(x + i, vx);
        load8_rw(y + i, vy);
#pragma unroll
        for (int j = 0; j < 8; ++j) vy[j] += vx[j];
        store8(y + i, vy);
    }
    __device__ void one(size_t i) { st(y, i, ld(y, i) + ld(x, i)); }
};

struct AccumulateF32Op {
    const bfloat* x;
    float* y;
    __device__ void vec(size_t i) {
        float vx[8], vy[8];
        load8_rw(x + i, vx);
        load8f(y + i, vy);
#pragma unroll
        for (int j = 0; j < 8; ++j) vy[j] += vx[j];
        store8f(y + i, vy);
    }
    __device__ void one(size_t i) { y[i] += ld(x, i); }
};

struct ConvertOp {
    const float* x;
    bfloat* y;
    __device__ void vec(size_t i) {
        float v[8];
        load8f(x + i, v);
        store8(y + i, v);
    }
    __device__ void one(size_t i) { st(y, i, x[i]); }
};

// y = a + alpha * b in fp32 (one FMA; y may alias a or b exactly).
struct AxpyOp {
    const float *a, *b;
    float alpha;
    float* y;
    __device__ void vec(size_t i) {
        float va[8], vb[8];
        load8f(a + i, va);
        load8f(b + i, vb);
#pragma unroll
        for (int k = 0; k < 8; ++k) y[i + k] = fmaf(alpha, vb[k], va[k]);
    }
    __device__ void one(size_t i) { y[i] = fmaf(alpha, b[i], a[i]); }
};

struct FillOp {
    float value;
    bfloat* y;
    __device__ void vec(size_t i) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = value;
        store8(y + i, v);
    }
    __device__ void one(size_t i) { st(y, i, value); }
};

// y[r*C + j] += bias[j]. With vectors, i is a multiple of 8 and C % 8 == 0, so j..j+7 lie in one row.
struct BiasAddOp {
    int c;
    const float* bias;
    bfloat* y;
    __device__ void vec(size_t i) {
        const int j = static_cast<int>(i % static_cast<size_t>(c));
        float v[8];
        load8_rw(y + i, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] += __ldg(bias + j + k);
        store8(y + i, v);
    }
    __device__ void one(size_t i) { st(y, i, ld(y, i) + __ldg(bias + i % static_cast<size_t>(c))); }
};

// Fusion weights from device memory, computed by every thread (a few transcendental ops once per
// thread, cheaper than another launch). Same operations as fusion_forward_ref in float.
struct FusionScalars {
    float sa, sb, den;
};
__device__ __forceinline__ FusionScalars fusion_scalars(const float* wa, const float* wb) {
    FusionScalars f;
    f.sa = softplus(*wa);
    f.sb = softplus(*wb);
    f.den = f.sa + f.sb + static_cast<float>(kFusionEps);
    return f;
}

// y = (sa*a + sb*b) / den, the reference's expression. Products of bf16 values by fp32 weights are
// not exact, so contraction into an FMA may move the fp32 result by an ulp; one bf16 rounding follows.
struct FusionForwardOp {
    const bfloat *a, *b;
    bfloat* y;
    FusionScalars f;
    __device__ float eval(float va, float vb) const { return (f.sa * va + f.sb * vb) / f.den; }
    __device__ void vec(size_t i) {
        float va[8], vb[8];
        load8_rw(a + i, va);
        load8_rw(b + i, vb);
#pragma unroll
        for (int j = 0; j < 8; ++j) va[j] = eval(va[j], vb[j]);
        store8(y + i, va);
    }
    __device__ void one(size_t i) { st(y, i, eval(ld(a, i), ld(b, i))); }
};

// da += (dy/den)*sa, db += (dy/den)*sb (reference order; an output whose acc_ flag is false starts
// from 0 and is never read); the thread's running sums of dy*a and dy*b in fp32 (products of two
// bf16 values are exact in fp32).
struct FusionBackwardOp {
    const bfloat *a, *b, *dy;
    bfloat *da, *db;
    FusionScalars f;
    bool acc_a = true, acc_b = true;
    float sum_a = 0.0f, sum_b = 0.0f;
    __device__ void elem(float va, float vb, float g, float& vda, float& vdb) {
        const float q = g / f.den;
        vda += q * f.sa;
        vdb += q * f.sb;
        sum_a = fmaf(g, va, sum_a);
        sum_b = fmaf(g, vb, sum_b);
    }
    __device__ void vec(size_t i) {
        float va[8], vb[8], g[8], vda[8], vdb[8];
        load8_rw(a + i, va);
        load8_rw(b + i, vb);
        load8_rw(dy + i, g);
#pragma unroll
        for (int j = 0; j < 8; ++j) vda[j] = vdb[j] = 0.0f;
        if (acc_a) load8_rw(da + i, vda);
        if (acc_b) load8_rw(db + i, vdb);
#pragma unroll
        for (int j = 0; j < 8; ++j) elem(va[j], vb[j], g[j], vda[j], vdb[j]);
        store8(da + i, vda);
        store8(db + i, vdb);
    }
    __device__ void one(size_t i) {
        float vda = acc_a ? ld(da, i) : 0.0f, vdb = acc_b ? ld(db, i) : 0.0f;
        elem(ld(a, i), ld(b, i), ld(dy, i), vda, vdb);
        st(da, i, vda);
        st(db, i, vdb);
    }
};

// Sum over the block in a fixed order (shuffle tree per warp, then warp 0 over the warp sums),
// valid in thread 0. Every thread must call it; blockDim.x == kEltThreads.
template <class T>
__device__ T block_sum(T s, T* smem /* kWarps */) {
    __syncthreads();  // smem may still be read by warp 0 of a previous call
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) smem[warp] = s;
    __syncthreads();
    s = 0;
    if (warp == 0) {
        s = lane < kWarps ? smem[lane] : T(0);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    }
    return s;
}

// ---- kernels ----

// Any flat op. Grid elt_blocks(s) x kEltThreads.
template <class Op>
__global__ void elt_kernel(EltSplit s, Op op) {
    rt::pdl_entry();
    elt_loop(s, op);
}

// Fusion forward: the weights are read from device memory inside the kernel. Grid elt_blocks(s).
__global__ void fusion_forward_kernel(EltSplit s, const bfloat* a, const bfloat* b, const float* __restrict__ wa,
                                      const float* __restrict__ wb, bfloat* y) {
    rt::pdl_entry();
    FusionForwardOp op{a, b, y, fusion_scalars(wa, wb)};
    elt_loop(s, op);
}

// Fusion backward, pass 1. Grid fusion_backward_blocks(n) x kEltThreads: da, db updated; block k
// writes its sums of dy*a and dy*b to part[k] and part[blocks + k].
__global__ void fusion_backward_kernel(EltSplit s, const bfloat* a, const bfloat* b, const bfloat* dy,
                                       const float* __restrict__ wa, const float* __restrict__ wb, bfloat* da,
                                       bfloat* db, float* __restrict__ part, bool acc_a, bool acc_b) {
    rt::pdl_entry();
    __shared__ float smem[kWarps];
    FusionBackwardOp op{a, b, dy, da, db, fusion_scalars(wa, wb), acc_a, acc_b};
    elt_loop(s, op);
    const float sa = block_sum(op.sum_a, smem);
    const float sb = block_sum(op.sum_b, smem);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = sa;
        part[gridDim.x + blockIdx.x] = sb;
    }
}

// Fusion backward, pass 2. One block of kEltThreads: thread t adds partials t, t + 256, ... in
// fp64, a fixed tree combines the threads, thread 0 forms the weight gradients as the reference
// does (fp64 from the fp32 scalars): dL/dsa = (Sa - Sy)/D with Sy = (sa*Sa + sb*Sb)/D.
__global__ void fusion_backward_finalize_kernel(int blocks, const float* __restrict__ part,
                                                const float* __restrict__ wa, const float* __restrict__ wb,
                                                float* __restrict__ dwa, float* __restrict__ dwb) {
    rt::pdl_entry();
    __shared__ double smem[kWarps];
    double s_a = 0.0, s_b = 0.0;
    for (int k = threadIdx.x; k < blocks; k += blockDim.x) {
        s_a += static_cast<double>(part[k]);
        s_b += static_cast<double>(part[blocks + k]);
    }
    s_a = block_sum(s_a, smem);
    s_b = block_sum(s_b, smem);
    if (threadIdx.x != 0) return;
    const FusionScalars f = fusion_scalars(wa, wb);
    const double d = f.den;
    const double s_y = (static_cast<double>(f.sa) * s_a + static_cast<double>(f.sb) * s_b) / d;
    *dwa += static_cast<float>((s_a - s_y) / d * static_cast<double>(softplus_grad(*wa)));
    *dwb += static_cast<float>((s_b - s_y) / d * static_cast<double>(softplus_grad(*wb)));
}

// ---- launch helpers ----

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Device pointers to elements of `elem` bytes: each non-null and element-aligned.
struct Ptr {
    const char* name;
    const void* p;
    size_t elem;
};
void check_ptrs(const char* op, std::initializer_list<Ptr> ptrs) {
    for (const Ptr& q : ptrs) rt::check_device_ptr(op, q.name, q.p, q.elem);
}

void check_workspace(const char* op, const float* ws, size_t ws_floats, size_t need, const char* fn) {
    check_ptrs(op, {{"workspace", ws, sizeof(float)}});
    SF_CHECK(ws_floats >= need, "%s: workspace of %zu floats is too small (need %s = %zu)", op, ws_floats, fn, need);
}

template <class Op>
void launch_elt(const rt::Exec& ex, const EltSplit& s, const Op& op) {
    rt::launch(ex, "elt_kernel", elt_kernel<Op>, static_cast<unsigned>(elt_blocks(s)), kEltThreads, 0, s, op);
}

// Split for bf16 operands only (at most 5).
EltSplit split_bf16(size_t n, std::initializer_list<const void*> ptrs) {
    EltOperand ops[5] = {};
    size_t k = 0;
    for (const void* p : ptrs) ops[k++] = {addr(p), sizeof(bf16)};
    return elt_split(n, ops, k);
}

}  // namespace

// ---- launchers ----

size_t fusion_backward_workspace_floats(size_t n) { return 2 * fusion_backward_blocks(n); }

void add_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, bf16* y) {
    const char* op = "add_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"a", a, 2}, {"b", b, 2}, {"y", y, 2}});
    launch_elt(ex, split_bf16(n, {a, b, y}), AddOp{dev(a), dev(b), dev(y)});
}

void accumulate_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* x, bf16* y, bool accumulate) {
    const char* op = "accumulate_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"x", x, 2}, {"y", y, 2}});
    if (!accumulate) {  // first contribution: a copy (exact)
        SF_CHECK(x != y, "%s: overwrite with x == y", op);
        SF_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(bf16), cudaMemcpyDeviceToDevice, ex.stream));
        return;
    }
    launch_elt(ex, split_bf16(n, {x, y}), AccumulateOp{dev(x), dev(y)});
}

void accumulate_bf16_to_f32_cuda(const rt::Exec& ex, size_t n, const bf16* x, float* y) {
    const char* op = "accumulate_bf16_to_f32_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"x", x, 2}, {"y", y, 4}});
    launch_elt(ex, elt_split(n, {{addr(x), 2}, {addr(y), 4}}), AccumulateF32Op{dev(x), y});
}

void convert_f32_to_bf16_cuda(const rt::Exec& ex, size_t n, const float* x, bf16* y) {
    const char* op = "convert_f32_to_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"x", x, 4}, {"y", y, 2}});
    launch_elt(ex, elt_split(n, {{addr(y), 2}, {addr(x), 4}}), ConvertOp{x, dev(y)});
}

void axpy_f32_cuda(const rt::Exec& ex, size_t n, const float* a, float alpha, const float* b, float* y) {
    const char* op = "axpy_f32_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"a", a, 4}, {"b", b, 4}, {"y", y, 4}});
    const size_t bytes = n * sizeof(float);
    SF_CHECK((y == a || !rt::overlap(y, bytes, a, bytes)) && (y == b || !rt::overlap(y, bytes, b, bytes)),
             "%s: y must be a or b exactly, or apart from both", op);
    launch_elt(ex, elt_split(n, {{addr(y), 4}, {addr(a), 4}, {addr(b), 4}}), AxpyOp{a, b, alpha, y});
}

void fill_bf16_cuda(const rt::Exec& ex, size_t n, float value, bf16* y) {
    const char* op = "fill_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"y", y, 2}});
    launch_elt(ex, split_bf16(n, {y}), FillOp{value, dev(y)});
}

void bias_add_bf16_cuda(const rt::Exec& ex, size_t rows, int c, const float* bias, bf16* y) {
    const char* op = "bias_add_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    SF_CHECK(c > 0, "%s: C must be positive, got C=%d", op, c);
    if (rows == 0) return;
    check_ptrs(op, {{"bias", bias, 4}, {"y", y, 2}});
    launch_elt(ex, bias_add_split(rows, c, addr(y)), BiasAddOp{c, bias, dev(y)});
}

void fusion_forward_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                              const float* wb, bf16* y) {
    const char* op = "fusion_forward_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"a", a, 2}, {"b", b, 2}, {"y", y, 2}, {"wa", wa, 4}, {"wb", wb, 4}});
    const EltSplit s = split_bf16(n, {a, b, y});
    rt::launch(ex, "fusion_forward_kernel", fusion_forward_kernel, static_cast<unsigned>(elt_blocks(s)), kEltThreads, 0,
               s, dev(a), dev(b), wa, wb, dev(y));
}

void fusion_backward_bf16_cuda(const rt::Exec& ex, size_t n, const bf16* a, const bf16* b, const float* wa,
                               const float* wb, const bf16* dy, bf16* da, bf16* db, float* dwa, float* dwb, float* ws,
                               size_t ws_floats, bool accumulate_da, bool accumulate_db) {
    const char* op = "fusion_backward_bf16_cuda";
    rt::check_cuda_exec(op, ex);
    if (n == 0) return;
    check_ptrs(op, {{"a", a, 2},
                    {"b", b, 2},
                    {"dy", dy, 2},
                    {"da", da, 2},
                    {"db", db, 2},
                    {"wa", wa, 4},
                    {"wb", wb, 4},
                    {"dwa", dwa, 4},
                    {"dwb", dwb, 4}});
    SF_CHECK(da != db, "%s: da and db must be different buffers", op);
    for (const bf16* in : {a, b, dy}) SF_CHECK(in != da && in != db, "%s: da and db must not alias a, b or dy", op);
    SF_CHECK(dwa != dwb, "%s: dwa and dwb must be different", op);
    const size_t blocks = fusion_backward_blocks(n);
    check_workspace(op, ws, ws_floats, 2 * blocks, "fusion_backward_workspace_floats");
    const EltSplit s = split_bf16(n, {a, b, dy, da, db});
    rt::launch(ex, "fusion_backward_kernel", fusion_backward_kernel, static_cast<unsigned>(blocks), kEltThreads, 0, s,
               dev(a), dev(b), dev(dy), wa, wb, dev(da), dev(db), ws, accumulate_da, accumulate_db);
    rt::launch(ex, "fusion_backward_finalize_kernel", fusion_backward_finalize_kernel, 1, kEltThreads, 0,
               static_cast<int>(blocks), ws, wa, wb, dwa, dwb);
}

}  // namespace kern
