// The filter gradient of the depthwise 3x3 convolution (kernels/dwconv_cuda.h): two deterministic
// passes, launched through dw_launch_backward_filter (kernels/dwconv_device.cuh) by the checked
// launcher of kernels/dwconv.cu. Pass 1: each thread owns a group of V channels (8, 4 or 2 by the
// variant, kDwWgradVariants) and adds the dy * x-patch products of a chunk's output tiles (1 x 4 pixels each) into 9V fp32
// registers, the block's lanes are added with a fixed tree and the chunk's partials written; pass 2
// adds the chunks per (c, tap) in a fixed order (fp64) into dw. No atomics: two runs are bitwise
// equal, and so are the variants (the lanes, chunks and tree do not depend on V).
#include <cstdint>

#include "kernels/dwconv_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"

namespace kern {

namespace {

// Sums acc[0..9V) over threadIdx.y (tile lanes) with a fixed tree, 3V values per round (3V x kThreads
// floats of shared memory); the totals land in the threads with threadIdx.y == 0. Each value's tree
// depends on blockDim.y only. Requires blockDim.y a power of two and blockDim.x * blockDim.y <=
// kThreads. Every thread of the block must call it (it synchronises). Layout sm[k][t] (t = linear
// thread id): consecutive threads touch consecutive words, no bank conflicts.
template <int V, int kThreads>
__device__ __forceinline__ void block_reduce(float (&acc)[9 * V]) {
    constexpr int kN = 9 * V, kRound = 3 * V;
    __shared__ float sm[kRound][kThreads];
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int base = 0; base < kN; base += kRound) {
        // Each thread writes only its own column t, and the only reader of column t after the last
        // tree step is thread t itself, so a round needs no barrier after its final read.
#pragma unroll
        for (int k = 0; k < kRound; ++k) sm[k][t] = acc[base + k];
        __syncthreads();
        // Step s: lanes [0, s) add lanes [s, 2s); writers and the lanes read are disjoint.
        for (int s = blockDim.y / 2; s > 0; s >>= 1) {
            if (static_cast<int>(threadIdx.y) < s) {
#pragma unroll
                for (int k = 0; k < kRound; ++k) sm[k][t] += sm[k][t + s * blockDim.x];
            }
            __syncthreads();
        }
        if (threadIdx.y == 0) {
#pragma unroll
            for (int k = 0; k < kRound; ++k) acc[base + k] = sm[k][t];
        }
    }
}

// The chunk's 9V partials of channel group g at dst (part[k][c*9 + tap], c = Vg..): float4 stores for
// V = 8, 4 (9V contiguous floats at a 16-byte aligned offset: C*9 and 9V*g are multiples of 4), float2
// for V = 2 (18 floats at an 8-byte aligned offset).
template <int V>
__device__ __forceinline__ void store_partials(float* __restrict__ dst, const float (&acc)[9 * V]) {
    if constexpr (V % 4 == 0) {
        float4* d4 = reinterpret_cast<float4*>(dst);
#pragma unroll
        for (int k = 0; k < 9 * V / 4; ++k) d4[k] = make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
    } else {
        float2* d2 = reinterpret_cast<float2*>(dst);
#pragma unroll
        for (int k = 0; k < 9 * V / 2; ++k) d2[k] = make_float2(acc[2 * k], acc[2 * k + 1]);
    }
}

// Adds one output tile (rows p0.., columns q0.. of image n, channel group g of V channels) into the
// thread's 9V wgrad sums acc[j*9 + r*3 + s] (channel Vg + j, the layout of dw): the tile's dy is held
// in registers, then every input pixel under the tile is loaded once and multiplied into each
// (tile pixel, tap) pair it reaches. dy outside (P, Q) is zero, so partial tiles add nothing extra.
// kPro (V = 8): the x pixels go through the prologue as in the forward.
template <int S, int V, Act A, bool kPro>
__device__ __forceinline__ void wgrad_tile(const DwConvPlan& pl, const bfloat* __restrict__ xn,
                                           const bfloat* __restrict__ dyn, int p0, int q0, const BnApply8& bn,
                                           float (&acc)[9 * V]) {
    constexpr int TH = kDwWgradTileH, TW = kDwWgradTileW;
    constexpr int IR = S * (TH - 1) + 3, IC = S * (TW - 1) + 3;
    float d[TH][TW][V];
#pragma unroll
    for (int a = 0; a < TH; ++a)
#pragma unroll
        for (int b = 0; b < TW; ++b)
            loadv_or_zero<V>(dyn, p0 + a < pl.p && q0 + b < pl.q, static_cast<size_t>(p0 + a) * pl.q + (q0 + b), pl.c,
                             d[a][b]);
    const int h0 = S * p0 - 1, w0 = S * q0 - 1;
#pragma unroll
    for (int i = 0; i < IR; ++i) {
        const int h = h0 + i;
        const bool hv = in_range(h, pl.h);
#pragma unroll
        for (int j = 0; j < IC; ++j) {
            const int wi = w0 + j;
            float v[V];
            loadv_input<V, A, kPro>(xn, hv && in_range(wi, pl.w), static_cast<size_t>(h) * pl.w + wi, pl.c, bn, v);
#pragma unroll
            for (int a = 0; a < TH; ++a) {
                const int r = i - S * a;
                if (r < 0 || r > 2) continue;
#pragma unroll
                for (int b = 0; b < TW; ++b) {
                    const int s = j - S * b;
                    if (s < 0 || s > 2) continue;
#pragma unroll
                    for (int k = 0; k < V; ++k) acc[k * 9 + r * 3 + s] = fmaf(d[a][b][k], v[k], acc[k * 9 + r * 3 + s]);
                }
            }
        }
    }
}

// wgrad, pass 1, in variant Vi (V channels per thread, blocks of at most kThreads). grid
// (wgrad.grid_x, wgrad.chunks), block (wgrad.block_x, wgrad.block_y). Channel group g = blockIdx.x * blockDim.x + threadIdx.x; chunk k = blockIdx.y
// covers the output tiles [items*k/chunks, items*(k+1)/chunks) (each non-empty), tile lane
// threadIdx.y takes every blockDim.y-th of them in increasing order (adjacent lanes: adjacent tiles
// along a row). The lanes are added with a fixed tree and part[k][c*9 + tap] (k-major, C*9 per chunk)
// is written. kPro: as in the forward.
template <int S, int Vi, Act A, bool kPro, int V = kDwWgradVariants[Vi].vec,
          int kThreads = kDwWgradThreads * kDwWgradVariants[Vi].widen>
__global__ void __launch_bounds__(kThreads)
    dwconv3x3_wgrad_partial_kernel(DwConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ dy,
                                   float* __restrict__ part, DwPrologue pro) {
    rt::pdl_entry();
    const DwWgradGrid& wg = pl.wgrad;
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < wg.groups;
    float acc[9 * V] = {};
    if (active) {
        const BnApply8 bn = load_prologue<kPro>(pro, g);
        // items <= INT_MAX (plan), so the bounds and the tile index fit in 32-bit unsigned arithmetic.
        const unsigned lo = static_cast<unsigned>(wg.items * blockIdx.y / wg.chunks);
        const unsigned hi = static_cast<unsigned>(wg.items * (blockIdx.y + 1) / wg.chunks);
        const unsigned tiles_w = wg.tiles_w, tiles_h = wg.tiles_h;
        for (unsigned t = lo + threadIdx.y; t < hi; t += blockDim.y) {
            const int tw = static_cast<int>(t % tiles_w);
            const unsigned rest = t / tiles_w;
            const int th = static_cast<int>(rest % tiles_h), n = static_cast<int>(rest / tiles_h);
            const bfloat* xn = x + static_cast<size_t>(n) * pl.h * pl.w * pl.c + V * g;
            const bfloat* dyn = dy + static_cast<size_t>(n) * pl.p * pl.q * pl.c + V * g;
            wgrad_tile<S, V, A, kPro>(pl, xn, dyn, th * kDwWgradTileH, tw * kDwWgradTileW, bn, acc);
        }
    }
    block_reduce<V, kThreads>(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) store_partials<V>(part + static_cast<size_t>(blockIdx.y) * pl.c * 9 + 9 * V * g, acc);
}

// ---- the hoisted-load variants (DwWgradLoads::hoisted, ::prefetch) ----

// One wgrad tile's inputs as raw bf16 vectors: the 1 x 4 dy pixels and the x window under them. All-zero
// bits (+0.0 in every lane) stand for what variant 0 reads as zeros: dy outside (P, Q), x outside the
// image.
template <int S, int V>
struct WgradRaw {
    static constexpr int TW = kDwWgradTileW, IR = 3, IC = S * (kDwWgradTileW - 1) + 3;
    static_assert(kDwWgradTileH == 1, "the hoisted wgrad tiles are one output row");
    using T = typename BfRaw<V>::T;
    T d[TW];
    T x[IR][IC];
};

template <int V>
__device__ __forceinline__ typename BfRaw<V>::T load_raw_or_zero(const bfloat* __restrict__ base, bool valid,
                                                                  size_t pix, int c) {
    using T = typename BfRaw<V>::T;
    T u{};
    if (valid) u = __ldg(reinterpret_cast<const T*>(base + pix * static_cast<size_t>(c)));
    return u;
}

// Issues every load of tile t (the kernel's tile numbering) of channel group g; nothing waits on them
// here.
template <int S, int V>
__device__ __forceinline__ void wgrad_load_tile(const DwConvPlan& pl, const bfloat* __restrict__ x,
                                                const bfloat* __restrict__ dy, int g, unsigned t,
                                                WgradRaw<S, V>& r) {
    const DwWgradGrid& wg = pl.wgrad;
    const int tw = static_cast<int>(t % static_cast<unsigned>(wg.tiles_w));
    const unsigned rest = t / static_cast<unsigned>(wg.tiles_w);
    const int p0 = static_cast<int>(rest % static_cast<unsigned>(wg.tiles_h));
    const int n = static_cast<int>(rest / static_cast<unsigned>(wg.tiles_h));
    const int q0 = tw * kDwWgradTileW;
    const bfloat* xn = x + static_cast<size_t>(n) * pl.h * pl.w * pl.c + V * g;
    const bfloat* dyn = dy + static_cast<size_t>(n) * pl.p * pl.q * pl.c + V * g;
#pragma unroll
    for (int b = 0; b < WgradRaw<S, V>::TW; ++b)
        r.d[b] = load_raw_or_zero<V>(dyn, q0 + b < pl.q, static_cast<size_t>(p0) * pl.q + (q0 + b), pl.c);
    const int h0 = S * p0 - 1, w0 = S * q0 - 1;
#pragma unroll
    for (int i = 0; i < WgradRaw<S, V>::IR; ++i) {
        const bool hv = in_range(h0 + i, pl.h);
#pragma unroll
        for (int j = 0; j < WgradRaw<S, V>::IC; ++j)
            r.x[i][j] = load_raw_or_zero<V>(xn, hv && in_range(w0 + j, pl.w),
                                            static_cast<size_t>(h0 + i) * pl.w + (w0 + j), pl.c);
    }
}

// Ties the tile (kernels/cuda_util.cuh, "issuing a batch of loads together"): dy pixel 0, the first
// value its multiplies read, depends on every other load of the tile, so all 22 are issued before the
// first multiply (tools/sass_loads.py: 4 dependent batches per tile for 8 channels per thread without).
template <int S, int V>
__device__ __forceinline__ void wgrad_tie_tile(WgradRaw<S, V>& r, int c) {
    unsigned t = 0;
#pragma unroll
    for (int b = 1; b < WgradRaw<S, V>::TW; ++b) t ^= word0(r.d[b]);
#pragma unroll
    for (int i = 0; i < WgradRaw<S, V>::IR; ++i)
#pragma unroll
        for (int j = 0; j < WgradRaw<S, V>::IC; ++j) t ^= word0(r.x[i][j]);
    xor_words(r.d[0], t & hidden_zero(c));
}

// Multiplies a loaded tile into the 9V sums: wgrad_tile's loops (input pixel (i, j) row-major, then the
// tile pixels b it reaches, then the channels), so each acc[k*9 + r*3 + s] receives the same fmafs in
// the same order as in variant 0.
template <int S, int V>
__device__ __forceinline__ void wgrad_add_tile(const WgradRaw<S, V>& r, float (&acc)[9 * V]) {
    constexpr int TW = WgradRaw<S, V>::TW;
    float d[TW][V];
#pragma unroll
    for (int b = 0; b < TW; ++b) unpackv<V>(r.d[b], d[b]);
#pragma unroll
    for (int i = 0; i < WgradRaw<S, V>::IR; ++i) {
#pragma unroll
        for (int j = 0; j < WgradRaw<S, V>::IC; ++j) {
            float v[V];
            unpackv<V>(r.x[i][j], v);
#pragma unroll
            for (int b = 0; b < TW; ++b) {
                const int s = j - S * b;
                if (s < 0 || s > 2) continue;
#pragma unroll
                for (int k = 0; k < V; ++k) acc[k * 9 + i * 3 + s] = fmaf(d[b][k], v[k], acc[k * 9 + i * 3 + s]);
            }
        }
    }
}

// wgrad, pass 1, in a hoisted-load variant Vi: the grid, lanes, tile order, tree and partials of
// dwconv3x3_wgrad_partial_kernel; only when the loads are issued differs. kPrefetch: two tiles in
// flight per lane (a and b in turn), the next one's loads issued before the current one's multiplies.
template <int S, int Vi, int V = kDwWgradVariants[Vi].vec, int kThreads = kDwWgradThreads * kDwWgradVariants[Vi].widen,
          bool kPrefetch = kDwWgradVariants[Vi].loads == DwWgradLoads::prefetch>
__global__ void __launch_bounds__(kThreads)
    dwconv3x3_wgrad_hoisted_kernel(DwConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ dy,
                                   float* __restrict__ part) {
    rt::pdl_entry();
    const DwWgradGrid& wg = pl.wgrad;
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < wg.groups;
    float acc[9 * V] = {};
    if (active) {
        const unsigned lo = static_cast<unsigned>(wg.items * blockIdx.y / wg.chunks);
        const unsigned hi = static_cast<unsigned>(wg.items * (blockIdx.y + 1) / wg.chunks);
        const unsigned step = blockDim.y;
        unsigned t = lo + threadIdx.y;
        if constexpr (!kPrefetch) {
            for (; t < hi; t += step) {
                WgradRaw<S, V> r;
                wgrad_load_tile<S, V>(pl, x, dy, g, t, r);
                wgrad_tie_tile<S, V>(r, pl.c);
                wgrad_add_tile<S, V>(r, acc);
            }
        } else {
            WgradRaw<S, V> a, b;
            if (t < hi) wgrad_load_tile<S, V>(pl, x, dy, g, t, a);
            while (t < hi) {
                const unsigned t1 = t + step;
                if (t1 < hi) wgrad_load_tile<S, V>(pl, x, dy, g, t1, b);
                wgrad_add_tile<S, V>(a, acc);
                if (t1 >= hi) break;
                const unsigned t2 = t1 + step;
                if (t2 < hi) wgrad_load_tile<S, V>(pl, x, dy, g, t2, a);
                wgrad_add_tile<S, V>(b, acc);
                t = t2;
            }
        }
    }
    block_reduce<V, kThreads>(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) store_partials<V>(part + static_cast<size_t>(blockIdx.y) * pl.c * 9 + 9 * V * g, acc);
}

// wgrad, pass 2. grid wgrad.finalize_blocks, block (kDwFinalizeX, kDwFinalizeY). Entry e = c*9 + tap:
// lane y adds chunks y, y + kDwFinalizeY, ... in order in fp64, then lane 0 adds the lane sums in
// order and dw[e] += the total. The order depends only on the shape.
__global__ void dwconv3x3_wgrad_finalize_kernel(int entries, int chunks, const float* __restrict__ part,
                                                float* __restrict__ dw) {
    rt::pdl_entry();
    finalize_partials<kDwFinalizeX, kDwFinalizeY>(entries, chunks, part, AddTo{dw});
}

template <int S, int Vi, Act A, bool kPro>
void launch_wgrad(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* part,
                  const DwPrologue& pro) {
    const dim3 grid(pl.wgrad.grid_x, pl.wgrad.chunks), block(pl.wgrad.block_x, pl.wgrad.block_y);
    if constexpr (kDwWgradVariants[Vi].loads == DwWgradLoads::per_pixel) {
        rt::launch(ex, "dwconv3x3_wgrad_partial_kernel", dwconv3x3_wgrad_partial_kernel<S, Vi, A, kPro>, grid, block, 0,
                   pl, dev(x), dev(dy), part, pro);
    } else {
        static_assert(!kPro, "the BN prologue runs in variant 0 only");
        rt::launch(ex, "dwconv3x3_wgrad_hoisted_kernel", dwconv3x3_wgrad_hoisted_kernel<S, Vi>, grid, block, 0, pl,
                   dev(x), dev(dy), part);
    }
}

template <int S>
void wgrad_stride(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* part,
                  const DwPrologue* pro) {
    if (pro) {  // variant 0 only (checked by the launcher)
        switch (pro->act) {
            case Act::None: return launch_wgrad<S, 0, Act::None, true>(ex, pl, x, dy, part, *pro);
            case Act::Silu: return launch_wgrad<S, 0, Act::Silu, true>(ex, pl, x, dy, part, *pro);
            case Act::Relu: return launch_wgrad<S, 0, Act::Relu, true>(ex, pl, x, dy, part, *pro);
        }
    }
    with_variant<kDwWgradVariantCount>(pl.wgrad.variant, "wgrad", [&](auto vi) {
        launch_wgrad<S, decltype(vi)::value, Act::None, false>(ex, pl, x, dy, part, DwPrologue{});
    });
}

}  // namespace

void dw_launch_backward_filter(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* dw,
                               float* part, const DwPrologue* pro) {
    if (pl.stride == 1)
        wgrad_stride<1>(ex, pl, x, dy, part, pro);
    else
        wgrad_stride<2>(ex, pl, x, dy, part, pro);
    const DwWgradGrid& wg = pl.wgrad;
    rt::launch(ex, "dwconv3x3_wgrad_finalize_kernel", dwconv3x3_wgrad_finalize_kernel, wg.finalize_blocks,
               dim3(kDwFinalizeX, kDwFinalizeY), 0, pl.c * 9, wg.chunks, part, dw);
}

}  // namespace kern
