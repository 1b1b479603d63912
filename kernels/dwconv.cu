// CUDA depthwise 3x3 convolution, pad 1, stride 1 or 2, no bias, on bf16 NHWC activations with fp32
// accumulation: forward, backward-data (gather) and backward-filter (deterministic two-pass
// reduction) (kernels/dwconv_cuda.h, docs/KERNELS_DWCONV.md).
//
// Shape of every kernel: a thread owns one group of 8 channels (a 128-bit load of 8 bf16 per pixel;
// the group index is the fastest-varying thread index, so a warp reads whole pixels, contiguous in
// memory) and a small tile of destination pixels. It walks the source pixels under the tile once,
// row by row and column by column, and adds each loaded pixel into every (tile pixel, tap) pair it
// reaches, all indices compile-time after unrolling, so the accumulators and the 72 weights of the
// group stay in registers. Out-of-image source pixels are read as zeros (the padding), and tile
// pixels outside the destination are not stored. The kernels are memory-bound: the tile exists to
// reuse each loaded pixel for up to 9 taps without shared memory, and the halo re-reads of
// neighbouring tiles hit L1/L2.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/dwconv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch_check.h"

namespace kern {

namespace {

// ---- device helpers (load8, store8: kernels/cuda_util.cuh) ----

// Pixel `pix` (an index in units of C) of an image at `base`, or zeros (padding) when !valid.
__device__ __forceinline__ void load8_or_zero(const bfloat* __restrict__ base, bool valid, size_t pix, int c,
                                              float (&v)[8]) {
    if (valid) {
        load8(base + pix * static_cast<size_t>(c), v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = 0.0f;
    }
}

// The input pixel of a kernel with a prologue (kPro): the producer's BN + activation applied to a
// loaded pixel, rounded to bf16 as its apply pass would have stored it; padding stays zero.
// Without kPro, load8_or_zero itself. `bn` is unused (and eliminated) then.
template <Act A, bool kPro>
__device__ __forceinline__ void load8_input(const bfloat* __restrict__ base, bool valid, size_t pix, int c,
                                            const BnApply8& bn, float (&v)[8]) {
    load8_or_zero(base, valid, pix, c, v);
    if constexpr (kPro) {
        if (valid) {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = bn_act_value_bf16<A>(bn, k, v[k]);
        }
    }
}

// The prologue's per-channel constants of group g (kPro), else an unused value.
template <bool kPro>
__device__ __forceinline__ BnApply8 load_prologue(const DwPrologue& pro, int g) {
    if constexpr (kPro)
        return load_bn_apply8(g, pro.gamma, pro.beta, pro.mean, pro.invstd, pro.eval, pro.eps);
    else
        return BnApply8{};
}

__device__ __forceinline__ bool in_range(int i, int n) { return static_cast<unsigned>(i) < static_cast<unsigned>(n); }

// The 72 filter taps of channel group g, wt[tap][j] = w[(8g + j)*9 + tap]: the group's weights are 72
// contiguous bf16 (144 bytes, so 9 aligned 128-bit loads when w is 16-byte aligned).
__device__ __forceinline__ void load_weights(const bfloat* __restrict__ w, int g, float (&wt)[9][8]) {
    uint4 raw[9];
    const uint4* src = reinterpret_cast<const uint4*>(w + 72 * static_cast<size_t>(g));
#pragma unroll
    for (int k = 0; k < 9; ++k) raw[k] = __ldg(src + k);
    const bfloat* e = reinterpret_cast<const bfloat*>(raw);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int tap = 0; tap < 9; ++tap) wt[tap][j] = __bfloat162float(e[j * 9 + tap]);
}

__device__ __forceinline__ void fma8(float (&acc)[8], const float (&v)[8], const float (&wt)[8]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] = fmaf(v[k], wt[k], acc[k]);
}

// Item t of a DwTileGrid -> channel group g, image n, tile row th, tile column tw.
struct TileItem {
    int g, n, th, tw;
};

// 32-bit unsigned arithmetic: the plan keeps items <= INT_MAX.
__device__ __forceinline__ TileItem tile_item(unsigned t, int groups, const DwTileGrid& tg) {
    TileItem it;
    it.g = static_cast<int>(t % static_cast<unsigned>(groups));
    unsigned rest = t / static_cast<unsigned>(groups);
    it.tw = static_cast<int>(rest % static_cast<unsigned>(tg.tiles_w));
    rest /= static_cast<unsigned>(tg.tiles_w);
    it.th = static_cast<int>(rest % static_cast<unsigned>(tg.tiles_h));
    it.n = static_cast<int>(rest / static_cast<unsigned>(tg.tiles_h));
    return it;
}

// Sums acc[0..72) over threadIdx.y (tile lanes) with a fixed tree, kRound values per round; the totals
// land in the threads with threadIdx.y == 0. Requires blockDim.y a power of two and blockDim.x *
// blockDim.y <= kDwWgradThreads. Every thread of the block must call it (it synchronises). Layout
// sm[k][t] (t = linear thread id): consecutive threads touch consecutive words, no bank conflicts.
__device__ __forceinline__ void block_reduce72(float (&acc)[72]) {
    constexpr int kRound = 24;
    __shared__ float sm[kRound][kDwWgradThreads];
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int base = 0; base < 72; base += kRound) {
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

// ---- kernels ----

// y = dwconv(x, w). 1-D grid pl.fwd.grid x kDwThreads, one item of pl.fwd per thread: channel group g,
// output rows [p0, p0 + TH), columns [q0, q0 + TW) of image n. Input row h0 + i (h0 = S*p0 - 1) feeds
// tile row a through tap r = i - S*a; likewise columns. Per output the taps are added in (r, s)
// row-major order, padding taps as fma(0, w, acc) = acc. kPro: x is the producer's pre-BN output and
// each loaded pixel goes through its BN + activation A first (DwPrologue).
template <int S, Act A, bool kPro>
__global__ void __launch_bounds__(kDwThreads)
    dwconv3x3_forward_kernel(DwConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ w,
                             bfloat* __restrict__ y, DwPrologue pro) {
    constexpr int TH = kDwTileH, TW = kDwTileW;
    constexpr int IR = S * (TH - 1) + 3, IC = S * (TW - 1) + 3;  // input rows / columns under the tile
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;    // < 2^31 + kDwThreads: no wrap
    if (t >= pl.fwd.items) return;
    const TileItem it = tile_item(t, pl.groups, pl.fwd);
    float wt[9][8];
    load_weights(w, it.g, wt);
    const BnApply8 bn = load_prologue<kPro>(pro, it.g);
    const int p0 = it.th * TH, q0 = it.tw * TW;
    const int h0 = S * p0 - 1, w0 = S * q0 - 1;
    const bfloat* xn = x + static_cast<size_t>(it.n) * pl.h * pl.w * pl.c + 8 * it.g;
    float acc[TH][TW][8] = {};
#pragma unroll
    for (int i = 0; i < IR; ++i) {
        const int h = h0 + i;
        const bool hv = in_range(h, pl.h);
#pragma unroll
        for (int j = 0; j < IC; ++j) {
            const int wi = w0 + j;
            float v[8];
            load8_input<A, kPro>(xn, hv && in_range(wi, pl.w), static_cast<size_t>(h) * pl.w + wi, pl.c, bn, v);
#pragma unroll
            for (int a = 0; a < TH; ++a) {
                const int r = i - S * a;
                if (r < 0 || r > 2) continue;
#pragma unroll
                for (int b = 0; b < TW; ++b) {
                    const int s = j - S * b;
                    if (s < 0 || s > 2) continue;
                    fma8(acc[a][b], v, wt[r * 3 + s]);
                }
            }
        }
    }
    bfloat* yn = y + static_cast<size_t>(it.n) * pl.p * pl.q * pl.c + 8 * it.g;
#pragma unroll
    for (int a = 0; a < TH; ++a) {
        if (p0 + a >= pl.p) break;
#pragma unroll
        for (int b = 0; b < TW; ++b) {
            if (q0 + b >= pl.q) break;
            store8(yn + (static_cast<size_t>(p0 + a) * pl.q + (q0 + b)) * pl.c, acc[a][b]);
        }
    }
}

// dx += dwconv^T(dy, w) as a gather. 1-D grid pl.dgrad.grid x kDwThreads, one item of pl.dgrad per
// thread: channel group g, dx rows [h0, h0 + TH), columns [w0, w0 + TW) of image n. Output row p
// reads input rows h = S*p - 1 + r, so the dy rows reaching the tile are p = pb + i, i < NR, with
// pb = h0 - 1 (S = 1) or h0 / 2 (S = 2, h0 even), and tap r of dy row pb + i lands on tile row
// a = S*i + r - 1 - kOff, kOff = h0 - S*pb. For S = 2 the tile starts on even rows and columns, so
// every tile has the same (compile-time) tap pattern: even dx rows get tap r = 1 only, odd ones 0 and 2.
template <int S>
__global__ void __launch_bounds__(kDwThreads)
    dwconv3x3_backward_data_kernel(DwConvPlan pl, const bfloat* __restrict__ dy, const bfloat* __restrict__ w,
                                   bfloat* __restrict__ dx, bool accumulate) {
    constexpr int TH = kDwTileH, TW = kDwTileW;
    static_assert(S == 1 || (TH % 2 == 0 && TW % 2 == 0), "stride-2 dgrad tiles must start on even pixels");
    constexpr int kOff = S == 1 ? 1 : 0;
    constexpr int NR = S == 1 ? TH + 2 : TH / 2 + 1, NC = S == 1 ? TW + 2 : TW / 2 + 1;
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= pl.dgrad.items) return;
    const TileItem it = tile_item(t, pl.groups, pl.dgrad);
    float wt[9][8];
    load_weights(w, it.g, wt);
    const int h0 = it.th * TH, w0 = it.tw * TW;
    const int pb = (h0 - kOff) / S, qb = (w0 - kOff) / S;  // S = 2: h0, w0 even, so exact
    const bfloat* dyn = dy + static_cast<size_t>(it.n) * pl.p * pl.q * pl.c + 8 * it.g;
    float acc[TH][TW][8] = {};
#pragma unroll
    for (int i = 0; i < NR; ++i) {
        const int p = pb + i;
        const bool pv = in_range(p, pl.p);
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const int q = qb + j;
            float v[8];
            load8_or_zero(dyn, pv && in_range(q, pl.q), static_cast<size_t>(p) * pl.q + q, pl.c, v);
#pragma unroll
            for (int r = 0; r < 3; ++r) {
                const int a = S * i + r - 1 - kOff;
                if (a < 0 || a >= TH) continue;
#pragma unroll
                for (int s = 0; s < 3; ++s) {
                    const int b = S * j + s - 1 - kOff;
                    if (b < 0 || b >= TW) continue;
                    fma8(acc[a][b], v, wt[r * 3 + s]);
                }
            }
        }
    }
    bfloat* dxn = dx + static_cast<size_t>(it.n) * pl.h * pl.w * pl.c + 8 * it.g;
#pragma unroll
    for (int a = 0; a < TH; ++a) {
        if (h0 + a >= pl.h) break;
#pragma unroll
        for (int b = 0; b < TW; ++b) {
            if (w0 + b >= pl.w) break;
            bfloat* d = dxn + (static_cast<size_t>(h0 + a) * pl.w + (w0 + b)) * pl.c;
            float old[8] = {};
            if (accumulate) load8(d, old);  // dx is read and written by this thread only
#pragma unroll
            for (int k = 0; k < 8; ++k) old[k] += acc[a][b][k];
            store8(d, old);
        }
    }
}

// Adds one output tile (rows p0.., columns q0.. of image n, channel group g) into the thread's 72
// wgrad sums acc[j*9 + r*3 + s] (channel 8g + j, the layout of dw): the tile's dy is held in
// registers, then every input pixel under the tile is loaded once and multiplied into each
// (tile pixel, tap) pair it reaches. dy outside (P, Q) is zero, so partial tiles add nothing extra.
// kPro: the x pixels go through the prologue as in the forward.
template <int S, Act A, bool kPro>
__device__ __forceinline__ void wgrad_tile(const DwConvPlan& pl, const bfloat* __restrict__ xn,
                                           const bfloat* __restrict__ dyn, int p0, int q0, const BnApply8& bn,
                                           float (&acc)[72]) {
    constexpr int TH = kDwWgradTileH, TW = kDwWgradTileW;
    constexpr int IR = S * (TH - 1) + 3, IC = S * (TW - 1) + 3;
    float d[TH][TW][8];
#pragma unroll
    for (int a = 0; a < TH; ++a)
#pragma unroll
        for (int b = 0; b < TW; ++b)
            load8_or_zero(dyn, p0 + a < pl.p && q0 + b < pl.q, static_cast<size_t>(p0 + a) * pl.q + (q0 + b), pl.c,
                          d[a][b]);
    const int h0 = S * p0 - 1, w0 = S * q0 - 1;
#pragma unroll
    for (int i = 0; i < IR; ++i) {
        const int h = h0 + i;
        const bool hv = in_range(h, pl.h);
#pragma unroll
        for (int j = 0; j < IC; ++j) {
            const int wi = w0 + j;
            float v[8];
            load8_input<A, kPro>(xn, hv && in_range(wi, pl.w), static_cast<size_t>(h) * pl.w + wi, pl.c, bn, v);
#pragma unroll
            for (int a = 0; a < TH; ++a) {
                const int r = i - S * a;
                if (r < 0 || r > 2) continue;
#pragma unroll
                for (int b = 0; b < TW; ++b) {
                    const int s = j - S * b;
                    if (s < 0 || s > 2) continue;
#pragma unroll
                    for (int k = 0; k < 8; ++k) acc[k * 9 + r * 3 + s] = fmaf(d[a][b][k], v[k], acc[k * 9 + r * 3 + s]);
                }
            }
        }
    }
}

// wgrad, pass 1. grid (wgrad.grid_x, wgrad.chunks), block (wgrad.block_x, wgrad.block_y). Channel
// group g = blockIdx.x * blockDim.x + threadIdx.x; chunk k = blockIdx.y covers the output tiles
// [items*k/chunks, items*(k+1)/chunks) (each non-empty), tile lane threadIdx.y takes every
// blockDim.y-th of them in increasing order (adjacent lanes: adjacent tiles along a row). The lanes
// are added with a fixed tree and part[k][c*9 + tap] (k-major, C*9 per chunk) is written. kPro: as in
// the forward.
template <int S, Act A, bool kPro>
__global__ void __launch_bounds__(kDwWgradThreads)
    dwconv3x3_wgrad_partial_kernel(DwConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ dy,
                                   float* __restrict__ part, DwPrologue pro) {
    const DwWgradGrid& wg = pl.wgrad;
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < pl.groups;
    float acc[72] = {};
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
            const bfloat* xn = x + static_cast<size_t>(n) * pl.h * pl.w * pl.c + 8 * g;
            const bfloat* dyn = dy + static_cast<size_t>(n) * pl.p * pl.q * pl.c + 8 * g;
            wgrad_tile<S, A, kPro>(pl, xn, dyn, th * kDwWgradTileH, tw * kDwWgradTileW, bn, acc);
        }
    }
    block_reduce72(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) {
        // 72 contiguous floats at a 16-byte aligned offset (C*9 and 72*g are multiples of 4).
        float4* dst = reinterpret_cast<float4*>(part + static_cast<size_t>(blockIdx.y) * pl.c * 9 + 72 * g);
#pragma unroll
        for (int k = 0; k < 18; ++k) dst[k] = make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
    }
}

// wgrad, pass 2. grid wgrad.finalize_blocks, block (kDwFinalizeX, kDwFinalizeY). Entry e = c*9 + tap:
// lane y adds chunks y, y + kDwFinalizeY, ... in order in fp64, then lane 0 adds the lane sums in
// order and dw[e] += the total. The order depends only on the shape.
__global__ void dwconv3x3_wgrad_finalize_kernel(int entries, int chunks, const float* __restrict__ part,
                                                float* __restrict__ dw) {
    finalize_partials<kDwFinalizeX, kDwFinalizeY>(entries, chunks, part, AddTo{dw});
}

// ---- launch helpers ----

// Empty when the shape is supported, else what is not, with its value.
std::string unsupported_reason(const ConvShape& s) {
    if (s.k != 3) return rt::format("kernel size k=%d (only 3x3)", s.k);
    if (s.pad != 1) return rt::format("pad=%d (only pad 1)", s.pad);
    if (s.stride != 1 && s.stride != 2) return rt::format("stride=%d (only 1 or 2)", s.stride);
    if (s.groups != s.cin || s.cout != s.cin)
        return rt::format("groups=%d cin=%d cout=%d (depthwise only: groups == cin == cout)", s.groups, s.cin, s.cout);
    if (s.cin <= 0 || s.cin % 8 != 0)
        return rt::format("C=%d (must be a positive multiple of 8: 128-bit bf16 vectors)", s.cin);
    if (s.bias) return "bias=true (no bias)";
    if (s.n <= 0 || s.h <= 0 || s.w <= 0)
        return rt::format("input dims n=%d h=%d w=%d (must be positive)", s.n, s.h, s.w);
    // Tensor sizes within 2^40 elements keep every index product and 1-D grid in range.
    const double elems = static_cast<double>(s.n) * s.h * s.w * s.cin;
    if (elems > 1099511627776.0)
        return rt::format("input of %.0f elements (n=%d h=%d w=%d C=%d): too large", elems, s.n, s.h, s.w, s.cin);
    // The kernels index threads and tiles in 32 bits.
    const DwConvPlan pl = dwconv3x3_geometry(s.n, s.h, s.w, s.cin, s.stride);
    const long long most = std::max(std::max(pl.fwd.items, pl.dgrad.items), pl.wgrad.items);
    if (most > INT_MAX)
        return rt::format("%lld thread tiles (n=%d h=%d w=%d C=%d): too large for 32-bit indexing", most, s.n, s.h, s.w,
                          s.cin);
    return "";
}

void check_bf16(const char* op, const char* name, const bf16* p) { rt::check_device_ptr(op, name, p, 16); }

size_t in_bytes(const DwConvPlan& pl) { return static_cast<size_t>(pl.n) * pl.h * pl.w * pl.c * sizeof(bf16); }
size_t out_bytes(const DwConvPlan& pl) { return static_cast<size_t>(pl.n) * pl.p * pl.q * pl.c * sizeof(bf16); }
size_t w_bytes(const DwConvPlan& pl) { return static_cast<size_t>(pl.c) * 9 * sizeof(bf16); }

// A byte range a launcher writes.
struct Written {
    const void* p;
    size_t bytes;
};

// A prologue (or null): a known activation, its four C-vectors non-null, 4-byte aligned and apart from
// every output the launcher writes, a finite eps > 0 in eval mode.
void check_prologue(const char* op, const DwPrologue* pro, const DwConvPlan& pl,
                    std::initializer_list<Written> outs) {
    if (!pro) return;
    SF_CHECK(pro->act == Act::None || pro->act == Act::Silu || pro->act == Act::Relu,
             "%s: prologue activation %d is not one of none, silu, relu", op, static_cast<int>(pro->act));
    const char* names[4] = {"prologue gamma", "prologue beta", "prologue mean", "prologue invstd"};
    const float* vecs[4] = {pro->gamma, pro->beta, pro->mean, pro->invstd};
    for (int i = 0; i < 4; ++i) {
        rt::check_device_ptr(op, names[i], vecs[i], alignof(float));
        for (const Written& o : outs)
            SF_CHECK(!rt::overlap(o.p, o.bytes, vecs[i], static_cast<size_t>(pl.c) * sizeof(float)),
                     "%s: the output must not alias the %s vector", op, names[i]);
    }
    SF_CHECK(!pro->eval || (pro->eps > 0 && pro->eps < 1e300), "%s: eval-mode prologue needs eps > 0, got %g", op,
             pro->eps);
}

template <int S, Act A, bool kPro>
void launch_forward(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                    const DwPrologue& pro) {
    const unsigned grid = static_cast<unsigned>(pl.fwd.grid);
    dwconv3x3_forward_kernel<S, A, kPro><<<grid, kDwThreads, 0, ex.stream>>>(pl, dev(x), dev(w), dev(y), pro);
}

template <int S>
void forward_stride(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                    const DwPrologue* pro) {
    if (!pro) return launch_forward<S, Act::None, false>(ex, pl, x, w, y, DwPrologue{});
    switch (pro->act) {
        case Act::None: return launch_forward<S, Act::None, true>(ex, pl, x, w, y, *pro);
        case Act::Silu: return launch_forward<S, Act::Silu, true>(ex, pl, x, w, y, *pro);
        case Act::Relu: return launch_forward<S, Act::Relu, true>(ex, pl, x, w, y, *pro);
    }
}

template <int S, Act A, bool kPro>
void launch_wgrad(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* part,
                  const DwPrologue& pro) {
    const dim3 grid(pl.wgrad.grid_x, pl.wgrad.chunks), block(pl.wgrad.block_x, pl.wgrad.block_y);
    dwconv3x3_wgrad_partial_kernel<S, A, kPro><<<grid, block, 0, ex.stream>>>(pl, dev(x), dev(dy), part, pro);
}

template <int S>
void wgrad_stride(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* part,
                  const DwPrologue* pro) {
    if (!pro) return launch_wgrad<S, Act::None, false>(ex, pl, x, dy, part, DwPrologue{});
    switch (pro->act) {
        case Act::None: return launch_wgrad<S, Act::None, true>(ex, pl, x, dy, part, *pro);
        case Act::Silu: return launch_wgrad<S, Act::Silu, true>(ex, pl, x, dy, part, *pro);
        case Act::Relu: return launch_wgrad<S, Act::Relu, true>(ex, pl, x, dy, part, *pro);
    }
}

}  // namespace

// ---- launchers ----

bool dwconv3x3_supported(const ConvShape& s) { return unsupported_reason(s).empty(); }

DwConvPlan dwconv3x3_plan(const ConvShape& s) {
    const std::string why = unsupported_reason(s);
    SF_CHECK(why.empty(), "dwconv3x3: unsupported shape: %s", why.c_str());
    return dwconv3x3_geometry(s.n, s.h, s.w, s.cin, s.stride);
}

size_t dwconv3x3_workspace_floats(const ConvShape& s) { return dwconv3x3_plan(s).workspace_floats; }

void dwconv3x3_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y,
                            const DwPrologue* pro) {
    const char* op = "dwconv3x3_forward_cuda";
    rt::check_cuda_exec(op, ex);
    const DwConvPlan pl = dwconv3x3_plan(s);
    check_bf16(op, "x", x);
    check_bf16(op, "w", w);
    check_bf16(op, "y", y);
    SF_CHECK(!rt::overlap(y, out_bytes(pl), x, in_bytes(pl)) && !rt::overlap(y, out_bytes(pl), w, w_bytes(pl)),
             "%s: y must not alias x or w", op);
    check_prologue(op, pro, pl, {{y, out_bytes(pl)}});
    if (pl.stride == 1)
        forward_stride<1>(ex, pl, x, w, y, pro);
    else
        forward_stride<2>(ex, pl, x, w, y, pro);
    SF_CUDA_CHECK_LAUNCH();
}

void dwconv3x3_backward_data_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                                  bool accumulate) {
    const char* op = "dwconv3x3_backward_data_cuda";
    rt::check_cuda_exec(op, ex);
    const DwConvPlan pl = dwconv3x3_plan(s);
    check_bf16(op, "dy", dy);
    check_bf16(op, "w", w);
    check_bf16(op, "dx", dx);
    SF_CHECK(!rt::overlap(dx, in_bytes(pl), dy, out_bytes(pl)) && !rt::overlap(dx, in_bytes(pl), w, w_bytes(pl)),
             "%s: dx must not alias dy or w", op);
    const unsigned grid = static_cast<unsigned>(pl.dgrad.grid);
    if (pl.stride == 1) {
        dwconv3x3_backward_data_kernel<1><<<grid, kDwThreads, 0, ex.stream>>>(pl, dev(dy), dev(w), dev(dx), accumulate);
    } else {
        dwconv3x3_backward_data_kernel<2><<<grid, kDwThreads, 0, ex.stream>>>(pl, dev(dy), dev(w), dev(dx), accumulate);
    }
    SF_CUDA_CHECK_LAUNCH();
}

void dwconv3x3_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                    float* workspace, size_t workspace_floats, const DwPrologue* pro) {
    const char* op = "dwconv3x3_backward_filter_cuda";
    rt::check_cuda_exec(op, ex);
    const DwConvPlan pl = dwconv3x3_plan(s);
    check_bf16(op, "x", x);
    check_bf16(op, "dy", dy);
    rt::check_device_ptr(op, "dw", dw, alignof(float));
    rt::check_device_ptr(op, "workspace", workspace, 16);
    SF_CHECK(workspace_floats >= pl.workspace_floats,
             "%s: workspace of %zu floats is too small for n=%d h=%d w=%d C=%d stride=%d (need "
             "dwconv3x3_workspace_floats = %zu)",
             op, workspace_floats, pl.n, pl.h, pl.w, pl.c, pl.stride, pl.workspace_floats);
    const size_t dw_bytes = static_cast<size_t>(pl.c) * 9 * sizeof(float);
    const size_t ws_bytes = pl.workspace_floats * sizeof(float);
    SF_CHECK(!rt::overlap(dw, dw_bytes, x, in_bytes(pl)) && !rt::overlap(dw, dw_bytes, dy, out_bytes(pl)) &&
                 !rt::overlap(dw, dw_bytes, workspace, ws_bytes),
             "%s: dw must not alias x, dy or the workspace", op);
    SF_CHECK(!rt::overlap(workspace, ws_bytes, x, in_bytes(pl)) && !rt::overlap(workspace, ws_bytes, dy, out_bytes(pl)),
             "%s: the workspace must not alias x or dy", op);
    check_prologue(op, pro, pl, {{dw, dw_bytes}, {workspace, ws_bytes}});
    if (pl.stride == 1)
        wgrad_stride<1>(ex, pl, x, dy, workspace, pro);
    else
        wgrad_stride<2>(ex, pl, x, dy, workspace, pro);
    SF_CUDA_CHECK_LAUNCH();
    const DwWgradGrid& wg = pl.wgrad;
    dwconv3x3_wgrad_finalize_kernel<<<wg.finalize_blocks, dim3(kDwFinalizeX, kDwFinalizeY), 0, ex.stream>>>(
        pl.c * 9, wg.chunks, workspace, dw);
    SF_CUDA_CHECK_LAUNCH();
}

}  // namespace kern
