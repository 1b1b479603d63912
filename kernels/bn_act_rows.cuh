// The row kernels of the CUDA BatchNorm + activation (included by kernels/bn_act.cu, bn_act_backward.cu
// and bn_act_launch.cuh only): forward statistics, apply, backward reduce and dx, each walking rows of
// (rows, C) bf16 data in row_batch 1 or 4 rows per loop turn, and their device helpers. The finalize
// kernels and the launchers are in bn_act.cu (forward) and bn_act_backward.cu. Design:
// docs/KERNELS_BN_ACT.md.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/upsample_cuda.h"
#include "runtime/launch.cuh"

namespace kern {

namespace {

// ---- device helpers (load8, store8: kernels/cuda_util.cuh) ----

// Sums acc[0..16) over threadIdx.y (row lanes) with a fixed tree; the totals land in the threads with
// threadIdx.y == 0. Requires blockDim.y a power of two and blockDim.x * blockDim.y <= kBnActThreads.
// Every thread of the block must call it (it synchronises). Layout sm[j][t] (t = linear thread id):
// consecutive threads touch consecutive words, no bank conflicts.
__device__ __forceinline__ void block_reduce16(float (&acc)[16]) {
    __shared__ float sm[16][kBnActThreads];
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 16; ++j) sm[j][t] = acc[j];
    __syncthreads();
    // Step s: lanes [0, s) add lanes [s, 2s); writers and the lanes read are disjoint.
    for (int s = blockDim.y / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.y) < s) {
#pragma unroll
            for (int j = 0; j < 16; ++j) sm[j][t] += sm[j][t + s * blockDim.x];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0) {
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[j] = sm[j][t];
    }
}

// Writes one chunk's partials of the 8 channels of group g: part[0 .. chunks*C) = first sums (chunk
// major), part[chunks*C .. 2*chunks*C) = second sums.
__device__ __forceinline__ void store_partials(const float (&acc)[16], int g, int c, int chunks, int chunk,
                                               float* __restrict__ part) {
    float* p0 = part + static_cast<size_t>(chunk) * c + 8 * g;
    float* p1 = part + static_cast<size_t>(chunks + chunk) * c + 8 * g;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        p0[j] = acc[j];
        p1[j] = acc[8 + j];
    }
}

// The raw 8 bf16 of one row's channel group: read-only (__ldg) or coherent (rw, for a residual that
// may be the output). The batched row loops (R > 1) issue R rows' loads with these before unpacking any.
__device__ __forceinline__ uint4 ldg8_raw(const bfloat* __restrict__ p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint4 ld8_raw(const bfloat* p) { return *reinterpret_cast<const uint4*>(p); }

// Where a row kernel's BN input x comes from (Src). RowsStored: the stored (rows, C) tensor, the only source
// of the batched loops (R > 1). RowsUpsampled: formed on load as the bilinear upsampling of a low-resolution
// tensor (BnUpsampled, kernels/bn_act_cuda.h), the bf16 value upsample_forward_kernel stores for that pixel
// (the same taps, the same fp32 expression, whose products are exact, one rounding): the row kernels then
// compute what they compute on the stored upsampled tensor, bit for bit, reading its quarter (x2) or less.
struct RowsStored {
    const bfloat* x;
    __device__ __forceinline__ void load(size_t r, int c, int g, float (&v)[8]) const { load8(x + r * c + 8 * g, v); }
    __device__ __forceinline__ float first(int ch) const { return __bfloat162float(x[ch]); }  // row 0, channel ch
};

struct RowsUpsampled {
    const bfloat* lo;  // (N, h, w, c)
    int h, w, f, c;    // output rows: N * f*h * f*w, of c channels
    // Upsampled pixel r's 4 source offsets (element offsets of their channel 0) and weights: the forward
    // kernel's taps and weights (upsample_weights).
    __device__ __forceinline__ void taps(size_t r, size_t (&at)[4], float (&wt)[4]) const {
        const int oh_n = f * h, ow_n = f * w;
        const int ow = static_cast<int>(r % static_cast<size_t>(ow_n));
        const size_t q = r / static_cast<size_t>(ow_n);
        const int oh = static_cast<int>(q % static_cast<size_t>(oh_n));
        const size_t b = q / static_cast<size_t>(oh_n);
        const UpsampleTap th = upsample_tap(oh, h, f), tw = upsample_tap(ow, w, f);
        upsample_weights(th, tw, wt);
        const size_t row0 = (b * h + th.i0) * static_cast<size_t>(w), row1 = (b * h + th.i1) * static_cast<size_t>(w);
        at[0] = (row0 + tw.i0) * c;
        at[1] = (row0 + tw.i1) * c;
        at[2] = (row1 + tw.i0) * c;
        at[3] = (row1 + tw.i1) * c;
    }
    // The forward kernel's value (upsample_mix), rounded to bf16 as it stores it.
    __device__ __forceinline__ static float value(float a0, float a1, float b0, float b1, const float (&wt)[4]) {
        return __bfloat162float(__float2bfloat16_rn(upsample_mix(a0, a1, b0, b1, wt)));
    }
    __device__ __forceinline__ void load(size_t r, int, int g, float (&v)[8]) const {
        size_t at[4];
        float wt[4];
        taps(r, at, wt);
        float a0[8], a1[8], b0[8], b1[8];
        load8(lo + at[0] + 8 * g, a0);
        load8(lo + at[1] + 8 * g, a1);
        load8(lo + at[2] + 8 * g, b0);
        load8(lo + at[3] + 8 * g, b1);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = value(a0[j], a1[j], b0[j], b1[j], wt);
    }
    __device__ __forceinline__ float first(int ch) const {
        size_t at[4];
        float wt[4];
        taps(0, at, wt);
        const auto ld = [&](size_t p) { return __bfloat162float(lo[p + ch]); };
        return value(ld(at[0]), ld(at[1]), ld(at[2]), ld(at[3]), wt);
    }
};

// rows_in_turns' tie (kernels/cuda_util.cuh, "issuing a batch of loads together"): every word of a[0]
// (and of b[0] when with_b) ^= (a[1].x ^ ... ^ a[N-1].x [^ b[1].x ^ ...]) & zero. One chain over both
// arrays (two let ptxas wait on the first before issuing the second array's loads), into every word
// (ptxas starts on untied words early otherwise).
template <int N>
__device__ __forceinline__ void tie_slots(uint4 (&a)[N], uint4 (&b)[N], bool with_b, unsigned zero) {
    unsigned t = 0;
#pragma unroll
    for (int u = 1; u < N; ++u) t ^= word0(a[u]) ^ (with_b ? word0(b[u]) : 0u);
    t &= zero;
    xor_words(a[0], t);
    if (with_b) xor_words(b[0], t);
}

// A thread's rows r, r + step, ... below end in turns of R (R > 1): load(row, u) issues the loads of
// the turn's u-th row into slot u for u = 0..R-1, tie() makes slot 0 depend on every other slot, then
// use(row, u) takes the rows in order; the rows left over (fewer than R) go one at a time through
// slot 0. The rows are used in the order of a one-row loop, so a sum over them has the same bits.
// Why tie(): left alone, ptxas schedules a cheap row's loads two at a time in rotation (load u + 1,
// use u), not knowing that a load takes ~1,000 cycles; with slot 0 depending on all of them, every
// load of the turn is issued before the first use (tools/sass_loads.py: one batch per turn).
template <int R, class Load, class Tie, class Use>
__device__ __forceinline__ void rows_in_turns(size_t r, size_t end, size_t step, const Load& load, const Tie& tie,
                                              const Use& use) {
    for (; r + (R - 1) * step < end; r += R * step) {
#pragma unroll
        for (int u = 0; u < R; ++u) load(r + u * step, u);
        tie();
#pragma unroll
        for (int u = 0; u < R; ++u) use(r + u * step, u);
    }
    for (; r < end; r += step) {
        load(r, 0);
        use(r, 0);
    }
}

// ---- kernels ----

__device__ __forceinline__ void stats_add(const float (&k)[8], const float (&v)[8], float (&acc)[16]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float d = v[j] - k[j];
        acc[j] += d;
        acc[8 + j] = fmaf(d, d, acc[8 + j]);
    }
}

// Forward statistics, pass 1. grid (grid_x, chunks), block (block_x, block_y). x (rows, C) ->
// part: sum(x - K), sum((x - K)^2) per (chunk, channel), K = x[0][channel].
// R: rows per loop turn (BnActPlan::row_batch). R > 1 issues the loads of R of the thread's rows before
// adding the first; the rows are added in the same order as with R = 1 (the tail, fewer than R rows,
// one at a time), so the sums are the same bits. Src: where x comes from (RowsUpsampled: R = 1 only).
template <int R, class Src>
__global__ void bn_act_stats_kernel(size_t rows, int c, int chunks, Src x, float* __restrict__ part) {
    rt::pdl_entry();
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < c / 8;
    float acc[16] = {};
    if (active) {
        float k[8], v[8];
        x.load(0, c, g, k);
        const size_t end = chunk_begin(rows, chunks, blockIdx.y + 1);
        if constexpr (R == 1) {  // the measured kernel's loop, unchanged
            for (size_t r = chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y; r < end; r += blockDim.y) {
                x.load(r, c, g, v);
                stats_add(k, v, acc);
            }
        } else {
            uint4 raw[R];
            rows_in_turns<R>(
                chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y, end, blockDim.y,
                [&](size_t r, int u) { raw[u] = ldg8_raw(x.x + r * c + 8 * g); },
                [&] { tie_slots(raw, raw, false, hidden_zero(c)); },
                [&](size_t, int u) {
                    unpack8(raw[u], v);
                    stats_add(k, v, acc);
                });
        }
    }
    block_reduce16(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) store_partials(acc, g, c, chunks, blockIdx.y, part);
}

template <Act A, bool kRes>
__device__ __forceinline__ void apply_row(const BnApply8& p, float (&v)[8], const float (&rv)[8], bfloat* y) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        v[j] = bn_act_value<A>(p, j, v[j]);
        if constexpr (kRes) v[j] = rv[j] + v[j];
    }
    store8(y, v);
}

// y = act((x - mean) * gamma * invstd + beta) [+ res], one pass. grid (grid_x, apply_grid_y), block
// (block_x, block_y), grid-stride over rows. kEval: `invstd` holds running_var, inverted here.
// kRes: the residual `res` (which may be y itself: each thread reads its 8 values before writing
// them, with a coherent load) is added in fp32 before the one rounding to bf16.
// R: rows per loop turn, as in the statistics (the loads of R rows first, then each row as with R = 1).
template <Act A, bool kEval, bool kRes, int R, class Src>
__global__ void bn_act_apply_kernel(size_t rows, int c, Src x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                    const float* __restrict__ invstd, double eps, const bfloat* res, bfloat* y) {
    rt::pdl_entry();
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= c / 8) return;  // no block-wide synchronisation in this kernel
    const BnApply8 p = load_bn_apply8(g, gamma, beta, mean, invstd, kEval, eps);  // the z load_chan8 forms
    float v[8], rv[8];
    if constexpr (R == 1) {  // the measured kernel's loop, unchanged
        for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
             r += static_cast<size_t>(gridDim.y) * blockDim.y) {
            x.load(r, c, g, v);
            if constexpr (kRes) load8_rw(res + r * c + 8 * g, rv);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                v[j] = bn_act_value<A>(p, j, v[j]);
                if constexpr (kRes) v[j] = rv[j] + v[j];
            }
            store8(y + r * c + 8 * g, v);
        }
    } else {
        // A residual that is y itself: each thread reads its R rows' values before writing any of them.
        uint4 raw[R], rraw[R];
        rows_in_turns<R>(
            static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y, rows,
            static_cast<size_t>(gridDim.y) * blockDim.y,
            [&](size_t r, int u) {
                raw[u] = ldg8_raw(x.x + r * c + 8 * g);
                if constexpr (kRes) rraw[u] = ld8_raw(res + r * c + 8 * g);
            },
            [&] { tie_slots(raw, rraw, kRes, hidden_zero(c)); },
            [&](size_t r, int u) {
                unpack8(raw[u], v);
                if constexpr (kRes) unpack8(rraw[u], rv);
                apply_row<A, kRes>(p, v, rv, y + r * c + 8 * g);
            });
    }
}

// Backward, pass 1. grid (grid_x, chunks), block (block_x, block_y). part: sum g, sum g*xhat per
// (chunk, channel), g = dy * act'(z) recomputed from x.
template <Act A>
__device__ __forceinline__ void reduce_add(const Chan8& p, const float (&v)[8], const float (&d)[8], float (&acc)[16]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float gr, xhat;
        grad_xhat<A>(p, j, v[j], d[j], gr, xhat);
        acc[j] += gr;
        acc[8 + j] = fmaf(gr, xhat, acc[8 + j]);
    }
}

// R: rows per loop turn, as in the statistics (the same sums, bit for bit). The body of the two reduce
// kernels below.
template <Act A, int R, class Src>
__device__ __forceinline__ void bn_act_backward_reduce_rows(
    size_t rows, int c, int chunks, Src x, const bfloat* __restrict__ dy, const float* __restrict__ gamma,
    const float* __restrict__ beta, const float* __restrict__ mean, const float* __restrict__ invstd,
    float* __restrict__ part) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < c / 8;
    float acc[16] = {};
    if (active) {
        const Chan8 p = load_chan8(g, gamma, beta, mean, invstd);
        float v[8], d[8];
        const size_t end = chunk_begin(rows, chunks, blockIdx.y + 1);
        if constexpr (R == 1) {  // the measured kernel's loop, unchanged
            for (size_t r = chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y; r < end; r += blockDim.y) {
                x.load(r, c, g, v);
                load8(dy + r * c + 8 * g, d);
                reduce_add<A>(p, v, d, acc);
            }
        } else {
            uint4 xr[R], dr[R];
            rows_in_turns<R>(
                chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y, end, blockDim.y,
                [&](size_t r, int u) {
                    xr[u] = ldg8_raw(x.x + r * c + 8 * g);
                    dr[u] = ldg8_raw(dy + r * c + 8 * g);
                },
                [&] { tie_slots(xr, dr, true, hidden_zero(c)); },
                [&](size_t, int u) {
                    unpack8(xr[u], v);
                    unpack8(dr[u], d);
                    reduce_add<A>(p, v, d, acc);
                });
        }
    }
    block_reduce16(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) store_partials(acc, g, c, chunks, blockIdx.y, part);
}

// The reduce kernel as measured on the H100 and H200 (its registers as ptxas chooses them).
template <Act A, int R, class Src>
__global__ void bn_act_backward_reduce_kernel(size_t rows, int c, int chunks, Src x, const bfloat* __restrict__ dy,
                                              const float* __restrict__ gamma, const float* __restrict__ beta,
                                              const float* __restrict__ mean, const float* __restrict__ invstd,
                                              float* __restrict__ part) {
    rt::pdl_entry();
    bn_act_backward_reduce_rows<A, R, Src>(rows, c, chunks, x, dy, gamma, beta, mean, invstd, part);
}

// The same code compiled for 3 resident blocks of kBnActThreads per SM: registers capped at 80
// (kBnActMinBlocks; ConvPolicy::bn_min_blocks 3). The same results, bit for bit.
template <Act A, int R, class Src>
__global__ void __launch_bounds__(kBnActThreads, 3)
    bn_act_backward_reduce_capped_kernel(size_t rows, int c, int chunks, Src x, const bfloat* __restrict__ dy,
                                         const float* __restrict__ gamma, const float* __restrict__ beta,
                                         const float* __restrict__ mean, const float* __restrict__ invstd,
                                         float* __restrict__ part) {
    rt::pdl_entry();
    bn_act_backward_reduce_rows<A, R, Src>(rows, c, chunks, x, dy, gamma, beta, mean, invstd, part);
}

template <Act A>
__device__ __forceinline__ void dx_row(const Chan8& p, const float (&mg)[8], const float (&mgx)[8], float (&v)[8],
                                       const float (&d)[8], bfloat* __restrict__ dx) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = bn_act_dx_value<A>(p, j, v[j], d[j], mg[j], mgx[j]);
    store8(dx, v);
}

// Backward, pass 3: dx = gamma*invstd * (g - mean(g) - xhat * mean(g*xhat)), overwriting dx.
// grid (grid_x, apply_grid_y), block (block_x, block_y), grid-stride over rows.
// R: rows per loop turn, as in the apply pass. The body of the two dx kernels below.
template <Act A, int R, class Src>
__device__ __forceinline__ void bn_act_backward_dx_rows(size_t rows, int c, Src x, const bfloat* __restrict__ dy,
                                                        const float* __restrict__ gamma, const float* __restrict__ beta,
                                                        const float* __restrict__ mean,
                                                        const float* __restrict__ invstd,
                                                        const float* __restrict__ coef, bfloat* __restrict__ dx) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= c / 8) return;  // no block-wide synchronisation in this kernel
    const Chan8 p = load_chan8(g, gamma, beta, mean, invstd);
    float mg[8], mgx[8];
    load_bn_coef8(g, c, coef, mg, mgx);
    float v[8], d[8];
    if constexpr (R == 1) {  // the measured kernel's loop, unchanged
        for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
             r += static_cast<size_t>(gridDim.y) * blockDim.y) {
            x.load(r, c, g, v);
            load8(dy + r * c + 8 * g, d);
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = bn_act_dx_value<A>(p, j, v[j], d[j], mg[j], mgx[j]);
            store8(dx + r * c + 8 * g, v);
        }
    } else {
        uint4 xr[R], dr[R];
        rows_in_turns<R>(
            static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y, rows,
            static_cast<size_t>(gridDim.y) * blockDim.y,
            [&](size_t r, int u) {
                xr[u] = ldg8_raw(x.x + r * c + 8 * g);
                dr[u] = ldg8_raw(dy + r * c + 8 * g);
            },
            [&] { tie_slots(xr, dr, true, hidden_zero(c)); },
            [&](size_t r, int u) {
                unpack8(xr[u], v);
                unpack8(dr[u], d);
                dx_row<A>(p, mg, mgx, v, d, dx + r * c + 8 * g);
            });
    }
}

// Backward, pass 3, as measured on the H100 and H200 (its registers as ptxas chooses them).
template <Act A, int R, class Src>
__global__ void bn_act_backward_dx_kernel(size_t rows, int c, Src x, const bfloat* __restrict__ dy,
                                          const float* __restrict__ gamma, const float* __restrict__ beta,
                                          const float* __restrict__ mean, const float* __restrict__ invstd,
                                          const float* __restrict__ coef, bfloat* __restrict__ dx) {
    rt::pdl_entry();
    bn_act_backward_dx_rows<A, R, Src>(rows, c, x, dy, gamma, beta, mean, invstd, coef, dx);
}

// The same code compiled for 3 resident blocks of kBnActThreads per SM (registers capped at 80), as the
// capped reduce kernel. The same results, bit for bit.
template <Act A, int R, class Src>
__global__ void __launch_bounds__(kBnActThreads, 3)
    bn_act_backward_dx_capped_kernel(size_t rows, int c, Src x, const bfloat* __restrict__ dy,
                                     const float* __restrict__ gamma, const float* __restrict__ beta,
                                     const float* __restrict__ mean, const float* __restrict__ invstd,
                                     const float* __restrict__ coef, bfloat* __restrict__ dx) {
    rt::pdl_entry();
    bn_act_backward_dx_rows<A, R, Src>(rows, c, x, dy, gamma, beta, mean, invstd, coef, dx);
}

}  // namespace

}  // namespace kern
