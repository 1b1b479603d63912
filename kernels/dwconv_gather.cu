// The gather passes of the depthwise 3x3 convolution (kernels/dwconv_cuda.h): the forward and the
// backward-data, each in every variant of kDwVariants (channels per thread V, destination tile
// TH x TW per thread). Launched through dw_launch_forward / dw_launch_backward_data
// (kernels/dwconv_device.cuh) by the checked launchers of kernels/dwconv.cu.
//
// A thread owns one group of V channels (the group index is the fastest-varying thread index, so a
// warp reads whole pixels, contiguous in memory) and a tile of destination pixels. It walks the
// source pixels under the tile once, row by row and column by column, and adds each loaded pixel into
// every (tile pixel, tap) pair it reaches, all indices compile-time after unrolling, so the
// accumulators and the 9V weights of the group stay in registers. Out-of-image source pixels are read
// as zeros (the padding), and tile pixels outside the destination are not stored. For a given output
// the order of the additions does not depend on V or the tile: every variant gives the same bits.
#include <cstdint>

#include "kernels/bn_stats_chunks.cuh"
#include "kernels/dwconv_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"

namespace kern {

namespace {

// Item t of a DwTileGrid -> channel group g, image n, tile row th, tile column tw.
struct TileItem {
    int g, n, th, tw;
};

// 32-bit unsigned arithmetic: the plan keeps items <= INT_MAX.
__device__ __forceinline__ TileItem tile_item(unsigned t, const DwTileGrid& tg) {
    TileItem it;
    it.g = static_cast<int>(t % static_cast<unsigned>(tg.groups));
    unsigned rest = t / static_cast<unsigned>(tg.groups);
    it.tw = static_cast<int>(rest % static_cast<unsigned>(tg.tiles_w));
    rest /= static_cast<unsigned>(tg.tiles_w);
    it.th = static_cast<int>(rest % static_cast<unsigned>(tg.tiles_h));
    it.n = static_cast<int>(rest / static_cast<unsigned>(tg.tiles_h));
    return it;
}

// The sizes a direct kernel indexes with: input h x w, output p x q, channels c. kLean = false reads
// them from the kernel parameter at every use (the kernels measured on the H100, 2026-11-24); true
// copies them into locals first, which ptxas allocates with fewer registers for most instances
// (docs/KERNELS_DWCONV.md, "The lean twin"). The same addresses and sums either way.
template <bool kLean>
struct PlanDims {
    const DwConvPlan& pl;
    __device__ __forceinline__ int h() const { return pl.h; }
    __device__ __forceinline__ int w() const { return pl.w; }
    __device__ __forceinline__ int c() const { return pl.c; }
    __device__ __forceinline__ int p() const { return pl.p; }
    __device__ __forceinline__ int q() const { return pl.q; }
};
template <>
struct PlanDims<true> {
    int h_, w_, c_, p_, q_;
    __device__ __forceinline__ explicit PlanDims(const DwConvPlan& pl)
        : h_(pl.h), w_(pl.w), c_(pl.c), p_(pl.p), q_(pl.q) {}
    __device__ __forceinline__ int h() const { return h_; }
    __device__ __forceinline__ int w() const { return w_; }
    __device__ __forceinline__ int c() const { return c_; }
    __device__ __forceinline__ int p() const { return p_; }
    __device__ __forceinline__ int q() const { return q_; }
};

// y = dwconv(x, w). 1-D grid pl.fwd.grid x kDwThreads, one item of pl.fwd per thread: channel group g
// (channels V*g ..), output rows [p0, p0 + TH), columns [q0, q0 + TW) of image n. Input row h0 + i
// (h0 = S*p0 - 1) feeds tile row a through tap r = i - S*a; likewise columns. Per output the taps are
// added in (r, s) row-major order, padding taps as fma(0, w, acc) = acc. kPro: x is the producer's
// pre-BN output and each loaded pixel goes through its BN + activation A first (DwPrologue).
template <int S, int V, int TH, int TW, Act A, bool kPro, bool kLean = false>
__global__ void __launch_bounds__(kDwThreads)
    dwconv3x3_forward_kernel(DwConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ w,
                             bfloat* __restrict__ y, DwPrologue pro) {
    rt::pdl_entry();
    constexpr int IR = S * (TH - 1) + 3, IC = S * (TW - 1) + 3;  // input rows / columns under the tile
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;    // < 2^31 + kDwThreads: no wrap
    if (t >= pl.fwd.items) return;
    const TileItem it = tile_item(t, pl.fwd);
    float wt[9][V];
    load_weights<V>(w, it.g, wt);
    const BnApply8 bn = load_prologue<kPro>(pro, it.g);
    const PlanDims<kLean> dim{pl};
    const int p0 = it.th * TH, q0 = it.tw * TW;
    const int h0 = S * p0 - 1, w0 = S * q0 - 1;
    const bfloat* xn = x + static_cast<size_t>(it.n) * dim.h() * dim.w() * dim.c() + V * it.g;
    float acc[TH][TW][V] = {};
#pragma unroll
    for (int i = 0; i < IR; ++i) {
        const int h = h0 + i;
        const bool hv = in_range(h, dim.h());
#pragma unroll
        for (int j = 0; j < IC; ++j) {
            const int wi = w0 + j;
            float v[V];
            loadv_input<V, A, kPro>(xn, hv && in_range(wi, dim.w()), static_cast<size_t>(h) * dim.w() + wi, dim.c(), bn,
                                    v);
#pragma unroll
            for (int a = 0; a < TH; ++a) {
                const int r = i - S * a;
                if (r < 0 || r > 2) continue;
#pragma unroll
                for (int b = 0; b < TW; ++b) {
                    const int s = j - S * b;
                    if (s < 0 || s > 2) continue;
                    fmav<V>(acc[a][b], v, wt[r * 3 + s]);
                }
            }
        }
    }
    bfloat* yn = y + static_cast<size_t>(it.n) * dim.p() * dim.q() * dim.c() + V * it.g;
#pragma unroll
    for (int a = 0; a < TH; ++a) {
        if (p0 + a >= dim.p()) break;
#pragma unroll
        for (int b = 0; b < TW; ++b) {
            if (q0 + b >= dim.q()) break;
            storev<V>(yn + (static_cast<size_t>(p0 + a) * dim.q() + (q0 + b)) * dim.c(), acc[a][b]);
        }
    }
}

// dx += dwconv^T(dy, w) as a gather. 1-D grid pl.dgrad.grid x kDwThreads, one item of pl.dgrad per
// thread: channel group g, dx rows [h0, h0 + TH), columns [w0, w0 + TW) of image n. Output row p
// reads input rows h = S*p - 1 + r, so the dy rows reaching the tile are p = pb + i, i < NR, with
// pb = h0 - 1 (S = 1) or h0 / 2 (S = 2, h0 even), and tap r of dy row pb + i lands on tile row
// a = S*i + r - 1 - kOff, kOff = h0 - S*pb. For S = 2 the tile starts on even rows and columns, so
// every tile has the same (compile-time) tap pattern: even dx rows get tap r = 1 only, odd ones 0 and 2.
// Per dx pixel the taps arrive in reversed (r, s) row-major order whatever the tile.
template <int S, int V, int TH, int TW, bool kLean = false>
__global__ void __launch_bounds__(kDwThreads)
    dwconv3x3_backward_data_kernel(DwConvPlan pl, const bfloat* __restrict__ dy, const bfloat* __restrict__ w,
                                   bfloat* __restrict__ dx, bool accumulate) {
    rt::pdl_entry();
    static_assert(S == 1 || (TH % 2 == 0 && TW % 2 == 0), "stride-2 dgrad tiles must start on even pixels");
    constexpr int kOff = S == 1 ? 1 : 0;
    constexpr int NR = S == 1 ? TH + 2 : TH / 2 + 1, NC = S == 1 ? TW + 2 : TW / 2 + 1;
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= pl.dgrad.items) return;
    const TileItem it = tile_item(t, pl.dgrad);
    float wt[9][V];
    load_weights<V>(w, it.g, wt);
    const PlanDims<kLean> dim{pl};
    const int h0 = it.th * TH, w0 = it.tw * TW;
    const int pb = (h0 - kOff) / S, qb = (w0 - kOff) / S;  // S = 2: h0, w0 even, so exact
    const bfloat* dyn = dy + static_cast<size_t>(it.n) * dim.p() * dim.q() * dim.c() + V * it.g;
    float acc[TH][TW][V] = {};
#pragma unroll
    for (int i = 0; i < NR; ++i) {
        const int p = pb + i;
        const bool pv = in_range(p, dim.p());
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int q = qb + j;
            float v[V];
            loadv_or_zero<V>(dyn, pv && in_range(q, dim.q()), static_cast<size_t>(p) * dim.q() + q, dim.c(), v);
#pragma unroll
            for (int r = 0; r < 3; ++r) {
                const int a = S * i + r - 1 - kOff;
                if (a < 0 || a >= TH) continue;
#pragma unroll
                for (int s = 0; s < 3; ++s) {
                    const int b = S * j + s - 1 - kOff;
                    if (b < 0 || b >= TW) continue;
                    fmav<V>(acc[a][b], v, wt[r * 3 + s]);
                }
            }
        }
    }
    bfloat* dxn = dx + static_cast<size_t>(it.n) * dim.h() * dim.w() * dim.c() + V * it.g;
#pragma unroll
    for (int a = 0; a < TH; ++a) {
        if (h0 + a >= dim.h()) break;
#pragma unroll
        for (int b = 0; b < TW; ++b) {
            if (w0 + b >= dim.w()) break;
            bfloat* d = dxn + (static_cast<size_t>(h0 + a) * dim.w() + (w0 + b)) * dim.c();
            float old[V] = {};
            if (accumulate) loadv_rw<V>(d, old);  // dx is read and written by this thread only
#pragma unroll
            for (int k = 0; k < V; ++k) old[k] += acc[a][b][k];
            storev<V>(d, old);
        }
    }
}

// ---- staged variants (DwVariant::block_h > 0): the block's source pixels in shared memory ----

// The forward of a staged variant: grid pl.fwd.grid x kDwThreads, block b as staged_block. The source
// rows S*d0 - 1 .. and columns S*e0 - 1 .. are staged, then each thread tile (channel group fastest)
// runs the direct kernel's loop over its IR x IC source pixels, read from shared memory: the same
// values (padding +0 included) in the same fmaf order, so the same bits. kPro: x is the producer's
// pre-BN output, staged through its BN + activation A (stage_source): the values the direct prologue
// kernel reads, so again the same bits.
//
// kSt: the statistics epilogue (BnStatsOut). A thread's channel group is fixed (groups divides the block),
// and every thread first computes its group's output at the block's first pixel (the same 9 taps in the
// same order as the loop below, so the stored bits): the block's shift. It adds each value it stores,
// rounded as stored, minus the shift, to per-channel sums; at the end the lanes of a group are added by a
// fixed butterfly, the warps in order, and the block writes its spatial block's partials into part
// (shift, shifted sum, shifted sum of squares planes of n * blocks_h * blocks_w x C floats).
template <int S, int V, int TH, int TW, int E, Act A, bool kPro, bool kSt = false>
__global__ void __launch_bounds__(kDwThreads)
    dwconv3x3_forward_staged_kernel(DwConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ w,
                                    bfloat* __restrict__ y, DwPrologue pro, float* __restrict__ part) {
    rt::pdl_entry();
    constexpr int IR = S * (TH - 1) + 3, IC = S * (TW - 1) + 3;
    __shared__ __align__(16) bfloat src[E];
    const DwTileGrid& g = pl.fwd;
    const StagedBlock sb = staged_block(blockIdx.x, g);
    stage_source<A, kPro>(x + static_cast<size_t>(sb.n) * pl.h * pl.w * pl.c + sb.c0, pl.h, pl.w, pl.c,
                          S * sb.d0 - 1, S * sb.e0 - 1, g, src, pro, sb.c0);
    __syncthreads();
    const int groups = g.cb / V, tc = g.block_w / TW, items = groups * (g.block_h / TH) * tc;
    bfloat* yn = y + static_cast<size_t>(sb.n) * pl.p * pl.q * pl.c + sb.c0;
    constexpr int kSV = kSt ? V : 1;
    float sh[kSV] = {}, s1[kSV] = {}, s2[kSV] = {};
    if constexpr (kSt) {  // the shift: output (d0, e0) of this thread's group, reads source rows and columns 0-2
        const int gi = static_cast<int>(threadIdx.x) % groups;
        float wt[9][V];
        load_weights<V>(w, sb.c0 / V + gi, wt);
        float acc[V] = {};
#pragma unroll
        for (int i = 0; i < 3; ++i)
#pragma unroll
            for (int j = 0; j < 3; ++j) {
                float v[V];
                loadv_rw<V>(src + (i * g.src_w + j) * g.pitch + V * gi, v);
                fmav<V>(acc, v, wt[i * 3 + j]);
            }
#pragma unroll
        for (int k = 0; k < V; ++k) sh[k] = __bfloat162float(__float2bfloat16_rn(acc[k]));
    }
    for (int item = static_cast<int>(threadIdx.x); item < items; item += kDwThreads) {
        const int gi = item % groups, rest = item / groups, ta = (rest / tc) * TH, tb = (rest % tc) * TW;
        const int p0 = sb.d0 + ta, q0 = sb.e0 + tb;
        if (p0 >= pl.p || q0 >= pl.q) continue;
        float wt[9][V];
        load_weights<V>(w, sb.c0 / V + gi, wt);
        const bfloat* s0 = src + (S * ta * g.src_w + S * tb) * g.pitch + V * gi;
        float acc[TH][TW][V] = {};
#pragma unroll
        for (int i = 0; i < IR; ++i) {
#pragma unroll
            for (int j = 0; j < IC; ++j) {
                float v[V];
                loadv_rw<V>(s0 + (i * g.src_w + j) * g.pitch, v);
#pragma unroll
                for (int a = 0; a < TH; ++a) {
                    const int r = i - S * a;
                    if (r < 0 || r > 2) continue;
#pragma unroll
                    for (int b = 0; b < TW; ++b) {
                        const int s = j - S * b;
                        if (s < 0 || s > 2) continue;
                        fmav<V>(acc[a][b], v, wt[r * 3 + s]);
                    }
                }
            }
        }
#pragma unroll
        for (int a = 0; a < TH; ++a) {
            if (p0 + a >= pl.p) break;
#pragma unroll
            for (int b = 0; b < TW; ++b) {
                if (q0 + b >= pl.q) break;
                storev<V>(yn + (static_cast<size_t>(p0 + a) * pl.q + (q0 + b)) * pl.c + V * gi, acc[a][b]);
                if constexpr (kSt) {
#pragma unroll
                    for (int k = 0; k < V; ++k) {
                        const float d = __bfloat162float(__float2bfloat16_rn(acc[a][b][k])) - sh[k];
                        s1[k] += d;
                        s2[k] = fmaf(d, d, s2[k]);
                    }
                }
            }
        }
    }
    if constexpr (kSt) {
        constexpr int kWarps = kDwThreads / 32;
        __syncthreads();  // every thread is done with the staged source: its memory holds the reduction now
        float* red = reinterpret_cast<float*>(src);  // [2][kWarps][cb] sums, then [cb] shifts
        const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
        for (int off = groups; off < 32; off *= 2)  // lanes l and l ^ off hold the same group
#pragma unroll
            for (int k = 0; k < V; ++k) {
                s1[k] += __shfl_xor_sync(0xffffffffu, s1[k], off);
                s2[k] += __shfl_xor_sync(0xffffffffu, s2[k], off);
            }
        if (lane < groups) {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                red[warp * g.cb + V * lane + k] = s1[k];
                red[(kWarps + warp) * g.cb + V * lane + k] = s2[k];
                if (warp == 0) red[2 * kWarps * g.cb + V * lane + k] = sh[k];
            }
        }
        __syncthreads();
        const int t = static_cast<int>(threadIdx.x);
        if (t < g.cb) {
            float a1 = 0.0f, a2 = 0.0f;
#pragma unroll
            for (int wi = 0; wi < kWarps; ++wi) {
                a1 += red[wi * g.cb + t];
                a2 += red[(kWarps + wi) * g.cb + t];
            }
            const size_t chunks = static_cast<size_t>(pl.n) * g.blocks_h * g.blocks_w;
            const size_t chunk = blockIdx.x / static_cast<unsigned>(g.cblocks);
            const size_t col = static_cast<size_t>(sb.c0 + t), c = static_cast<size_t>(pl.c);
            part[chunk * c + col] = red[2 * kWarps * g.cb + t];
            part[(chunks + chunk) * c + col] = a1;
            part[(2 * chunks + chunk) * c + col] = a2;
        }
    }
}

// The statistics epilogue's finalize (kernels/bn_stats_chunks.cuh): grid ceil(C / kDwStatsFinalizeX), block
// (kDwStatsFinalizeX, kDwStatsFinalizeY); chunk c is spatial block c (the staged grid's order: column of
// blocks fastest, then row, then image), holding its pixels inside the output.
__global__ void dwconv3x3_stats_finalize_kernel(DwConvPlan pl, const float* __restrict__ part,
                                                float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                                float* __restrict__ running_mean, float* __restrict__ running_var,
                                                double momentum, double eps) {
    rt::pdl_entry();
    const DwTileGrid& g = pl.fwd;
    const int chunks = pl.n * g.blocks_h * g.blocks_w;
    const auto count_of = [&](int c) {
        const int bw = c % g.blocks_w, bh = (c / g.blocks_w) % g.blocks_h;
        const int rows = pl.p - bh * g.block_h, cols = pl.q - bw * g.block_w;
        return static_cast<double>(rows < g.block_h ? rows : g.block_h) * (cols < g.block_w ? cols : g.block_w);
    };
    bn_chunk_stats_finalize<kDwStatsFinalizeX, kDwStatsFinalizeY>(
        pl.c, chunks, part, static_cast<double>(pl.n) * pl.p * pl.q, count_of, save_mean, save_invstd, running_mean,
        running_var, momentum, eps);
}

// The dgrad of a staged variant: grid pl.dgrad.grid x kDwThreads. The dy rows (d0 - kOff)/S .. and
// columns (e0 - kOff)/S .. under the block's dx pixels are staged (d0, e0 even at stride 2), then each
// thread tile runs the direct dgrad kernel's loop from shared memory: the same bits.
template <int S, int V, int TH, int TW, int E>
__global__ void __launch_bounds__(kDwThreads)
    dwconv3x3_backward_data_staged_kernel(DwConvPlan pl, const bfloat* __restrict__ dy, const bfloat* __restrict__ w,
                                          bfloat* __restrict__ dx, bool accumulate) {
    rt::pdl_entry();
    static_assert(S == 1 || (TH % 2 == 0 && TW % 2 == 0), "stride-2 dgrad tiles must start on even pixels");
    constexpr int kOff = S == 1 ? 1 : 0;
    constexpr int NR = S == 1 ? TH + 2 : TH / 2 + 1, NC = S == 1 ? TW + 2 : TW / 2 + 1;
    __shared__ __align__(16) bfloat src[E];
    const DwTileGrid& g = pl.dgrad;
    const StagedBlock sb = staged_block(blockIdx.x, g);
    const int pbb = (sb.d0 - kOff) / S, qbb = (sb.e0 - kOff) / S;  // S = 2: d0, e0 even, so exact
    stage_source(dy + static_cast<size_t>(sb.n) * pl.p * pl.q * pl.c + sb.c0, pl.p, pl.q, pl.c, pbb, qbb, g, src);
    __syncthreads();
    const int groups = g.cb / V, tc = g.block_w / TW, items = groups * (g.block_h / TH) * tc;
    bfloat* dxn = dx + static_cast<size_t>(sb.n) * pl.h * pl.w * pl.c + sb.c0;
    for (int item = static_cast<int>(threadIdx.x); item < items; item += kDwThreads) {
        const int gi = item % groups, rest = item / groups, ta = (rest / tc) * TH, tb = (rest % tc) * TW;
        const int h0 = sb.d0 + ta, w0 = sb.e0 + tb;
        if (h0 >= pl.h || w0 >= pl.w) continue;
        float wt[9][V];
        load_weights<V>(w, sb.c0 / V + gi, wt);
        // This tile's first dy row and column, (h0 - kOff)/S and (w0 - kOff)/S, relative to the block's.
        const bfloat* s0 = src + ((ta / S) * g.src_w + tb / S) * g.pitch + V * gi;
        float acc[TH][TW][V] = {};
#pragma unroll
        for (int i = 0; i < NR; ++i) {
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                float v[V];
                loadv_rw<V>(s0 + (i * g.src_w + j) * g.pitch, v);
#pragma unroll
                for (int r = 0; r < 3; ++r) {
                    const int a = S * i + r - 1 - kOff;
                    if (a < 0 || a >= TH) continue;
#pragma unroll
                    for (int s = 0; s < 3; ++s) {
                        const int b = S * j + s - 1 - kOff;
                        if (b < 0 || b >= TW) continue;
                        fmav<V>(acc[a][b], v, wt[r * 3 + s]);
                    }
                }
            }
        }
#pragma unroll
        for (int a = 0; a < TH; ++a) {
            if (h0 + a >= pl.h) break;
#pragma unroll
            for (int b = 0; b < TW; ++b) {
                if (w0 + b >= pl.w) break;
                bfloat* d = dxn + (static_cast<size_t>(h0 + a) * pl.w + (w0 + b)) * pl.c + V * gi;
                float old[V] = {};
                if (accumulate) loadv_rw<V>(d, old);  // dx is read and written by this thread only
#pragma unroll
                for (int k = 0; k < V; ++k) old[k] += acc[a][b][k];
                storev<V>(d, old);
            }
        }
    }
}

// ---- dispatch: (stride, variant index) -> template instance ----

template <int S, int Vi, Act A, bool kPro>
void forward_instance(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                      const DwPrologue& pro, float* part) {
    constexpr DwVariant v = kDwVariants[Vi];
    const unsigned grid = static_cast<unsigned>(pl.fwd.grid);
    if constexpr (kPro && !dw_variant_prologue(Vi)) {
        SF_FAIL("dwconv3x3: variant %d (%s) has no BN prologue", Vi, dwconv3x3_variant_name(Vi));
    } else if constexpr (v.block_h > 0) {
        if (part)
            rt::launch(ex, "dwconv3x3_forward_staged_kernel",
                       dwconv3x3_forward_staged_kernel<S, v.vec, v.tile_h, v.tile_w, dw_stage_elems(Vi), A, kPro, true>,
                       grid, kDwThreads, 0, pl, dev(x), dev(w), dev(y), pro, part);
        else
            rt::launch(ex, "dwconv3x3_forward_staged_kernel",
                       dwconv3x3_forward_staged_kernel<S, v.vec, v.tile_h, v.tile_w, dw_stage_elems(Vi), A, kPro>,
                       grid, kDwThreads, 0, pl, dev(x), dev(w), dev(y), pro, part);
    } else if (part) {
        SF_FAIL("dwconv3x3: variant %d (%s) has no statistics epilogue", Vi, dwconv3x3_variant_name(Vi));
    } else {
        rt::launch(ex, "dwconv3x3_forward_kernel",
                   dwconv3x3_forward_kernel<S, v.vec, v.tile_h, v.tile_w, A, kPro, v.lean>, grid, kDwThreads, 0, pl,
                   dev(x), dev(w), dev(y), pro);
    }
}

template <int S, int Vi>
void backward_data_instance(const rt::Exec& ex, const DwConvPlan& pl, const bf16* dy, const bf16* w, bf16* dx,
                            bool accumulate) {
    constexpr DwVariant v = kDwVariants[Vi];
    if constexpr (S == 1 || (v.tile_h % 2 == 0 && v.tile_w % 2 == 0)) {
        const unsigned grid = static_cast<unsigned>(pl.dgrad.grid);
        if constexpr (v.block_h > 0) {
            rt::launch(ex, "dwconv3x3_backward_data_staged_kernel",
                       dwconv3x3_backward_data_staged_kernel<S, v.vec, v.tile_h, v.tile_w, dw_stage_elems(Vi)>, grid,
                       kDwThreads, 0, pl, dev(dy), dev(w), dev(dx), accumulate);
        } else {
            rt::launch(ex, "dwconv3x3_backward_data_kernel",
                       dwconv3x3_backward_data_kernel<S, v.vec, v.tile_h, v.tile_w, v.lean>, grid, kDwThreads, 0, pl,
                       dev(dy), dev(w), dev(dx), accumulate);
        }
    } else {
        SF_FAIL("dwconv3x3: variant %d (%s) cannot run the stride-2 dgrad", Vi, dwconv3x3_variant_name(Vi));
    }
}

template <int S>
void forward_stride(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                    const DwPrologue* pro, float* part) {
    if (pro) {  // the variants of dw_variant_prologue (checked by the launcher)
        with_variant<kDwVariantCount>(pl.fwd.variant, "forward", [&](auto vi) {
            constexpr int kV = decltype(vi)::value;
            switch (pro->act) {
                case Act::None: return forward_instance<S, kV, Act::None, true>(ex, pl, x, w, y, *pro, part);
                case Act::Silu: return forward_instance<S, kV, Act::Silu, true>(ex, pl, x, w, y, *pro, part);
                case Act::Relu: return forward_instance<S, kV, Act::Relu, true>(ex, pl, x, w, y, *pro, part);
            }
        });
        return;
    }
    with_variant<kDwVariantCount>(pl.fwd.variant, "forward", [&](auto vi) {
        forward_instance<S, decltype(vi)::value, Act::None, false>(ex, pl, x, w, y, DwPrologue{}, part);
    });
}

template <int S>
void backward_data_stride(const rt::Exec& ex, const DwConvPlan& pl, const bf16* dy, const bf16* w, bf16* dx,
                          bool accumulate) {
    with_variant<kDwVariantCount>(pl.dgrad.variant, "dgrad", [&](auto vi) {
        backward_data_instance<S, decltype(vi)::value>(ex, pl, dy, w, dx, accumulate);
    });
}

}  // namespace

void dw_launch_forward(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                       const DwPrologue* pro, const BnStatsOut* stats, float* part) {
    float* p = stats ? part : nullptr;
    if (pl.stride == 1)
        forward_stride<1>(ex, pl, x, w, y, pro, p);
    else
        forward_stride<2>(ex, pl, x, w, y, pro, p);
    if (stats)
        rt::launch(ex, "dwconv3x3_stats_finalize_kernel", dwconv3x3_stats_finalize_kernel,
                   dim3(static_cast<unsigned>(dw_ceil_div(pl.c, kDwStatsFinalizeX))),
                   dim3(kDwStatsFinalizeX, kDwStatsFinalizeY), 0, pl, static_cast<const float*>(part), stats->save_mean,
                   stats->save_invstd, stats->running_mean, stats->running_var, stats->momentum, stats->eps);
}

void dw_launch_backward_data(const rt::Exec& ex, const DwConvPlan& pl, const bf16* dy, const bf16* w, bf16* dx,
                             bool accumulate) {
    if (pl.stride == 1)
        backward_data_stride<1>(ex, pl, dy, w, dx, accumulate);
    else
        backward_data_stride<2>(ex, pl, dy, w, dx, accumulate);
}

}  // namespace kern
