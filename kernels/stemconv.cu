// CUDA stem convolution: dense 3x3, stride 2, pad 1, no bias, Cin in {2, 4}, Cout a multiple of 8 up
// to 64, on bf16 NHWC activations with fp32 accumulation. Forward and weight gradient (deterministic
// two-pass reduction) (kernels/stemconv_cuda.h, docs/KERNELS_STEMCONV.md).
//
// Why custom: with 2 or 4 input channels a pixel is 4 or 8 bytes, below what cuDNN's bf16 NHWC engines
// accept, and the layer runs at full input resolution, so it must stay memory-bound. Shape of both
// kernels: a block owns output tiles of kStemTileP rows x kStemTileQ columns of one image. It stages
// the tile's input halo (9 x 65 pixels) in shared memory as fp32, zeros outside the image (the
// padding), with coalesced 32/64-bit loads of whole pixels; each input element is converted once.
// The halo row is split by column parity (even columns first, then odd ones), so for every tap the
// 32 lanes of a tile row read 32 consecutive shared-memory pixels: no bank conflicts.
//  - forward: thread = (channel group of 8 outputs, tile column); it keeps the group's 8 weights per
//    (tap, input channel) in registers while it sweeps its kStemTileP pixels (register blocking, about
//    8 FMAs per shared-memory load), and stores each pixel's 8 channels with one 128-bit store; a
//    warp's stores cover whole output pixels, contiguous in memory.
//  - wgrad: warp = (channel group, filter row r), lane = tile column; each thread keeps the 8 x 3 x Cin
//    sums of its row in registers over a chunk of tiles, the next tile's x and dy prefetched into
//    registers while the current one is summed. Warps are then reduced with a fixed xor butterfly,
//    each block writes its chunk's partials, and a finalize kernel adds the chunks in a fixed order.
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda_util.cuh"
#include "kernels/stemconv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kHaloPixels = kStemHaloH * kStemHaloW;  // 585
constexpr int kTilePixels = kStemTileP * kStemTileQ;  // 128
constexpr int kEvenCols = kStemTileQ + 1;             // even halo columns 0, 2, .., 64 come first
constexpr int kFwdMaxThreads = 32 * (kStemMaxCout / 8);
constexpr int wgrad_threads(int gb) { return 32 * kStemWgradWarpsPerGroup * gb; }
// Floats per staged dy pixel in wgrad: 8 per group plus 4 of padding, so the 128-bit reads of 32
// consecutive pixels by a warp fall on distinct banks in every quarter-warp phase.
constexpr int dy_stride(int gb) { return 8 * gb + 4; }

// Resident wgrad blocks per SM the compiler must allow. The model's case (Cin 2, 4 groups, 384 threads)
// needs 110 registers unconstrained (one block, 12 warps per SM); capped at 80 (two blocks, 24 warps)
// it spills 24 bytes, which the extra warps are expected to more than pay for (to be timed on a GPU).
constexpr int wgrad_min_blocks(int cin, int gb) { return cin == 2 && gb == 4 ? 2 : 1; }

static_assert(kStemTileQ == 32, "one tile column per lane of a warp");
static_assert(wgrad_threads(kStemWgradGroups) <= 1024, "wgrad block too large");

// ---- device helpers (unpack8, store8: kernels/cuda_util.cuh) ----

// 8 consecutive fp32 (32-byte aligned) from shared memory: two 128-bit loads.
__device__ __forceinline__ void lds8(const float* p, float (&v)[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void sts8(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ bool in_range(int i, int n) { return static_cast<unsigned>(i) < static_cast<unsigned>(n); }

// One input pixel of CIN bf16 as loaded from global memory (4 or 8 bytes, naturally aligned).
template <int CIN>
struct XPixel;
template <>
struct XPixel<2> {
    unsigned raw;
    __device__ __forceinline__ void load(const bfloat* p) { raw = __ldg(reinterpret_cast<const unsigned*>(p)); }
    __device__ __forceinline__ void zero() { raw = 0u; }
    // Writes the CIN floats to shared memory at p (8-byte aligned).
    __device__ __forceinline__ void put(float* p) const {
        *reinterpret_cast<float2*>(p) = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw));
    }
};
template <>
struct XPixel<4> {
    uint2 raw;
    __device__ __forceinline__ void load(const bfloat* p) { raw = __ldg(reinterpret_cast<const uint2*>(p)); }
    __device__ __forceinline__ void zero() { raw = make_uint2(0u, 0u); }
    __device__ __forceinline__ void put(float* p) const {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
        const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
        *reinterpret_cast<float4*>(p) = make_float4(a.x, a.y, b.x, b.y);
    }
};

// CIN floats of one staged pixel (8- or 16-byte aligned) into registers.
template <int CIN>
__device__ __forceinline__ void lds_pixel(const float* p, float (&v)[CIN]) {
    if constexpr (CIN == 2) {
        const float2 f = *reinterpret_cast<const float2*>(p);
        v[0] = f.x;
        v[1] = f.y;
    } else {
        const float4 f = *reinterpret_cast<const float4*>(p);
        v[0] = f.x;
        v[1] = f.y;
        v[2] = f.z;
        v[3] = f.w;
    }
}

// Shared-memory slot of halo column u (input column w0 + u): even columns at u/2, odd ones after them.
// Output column l of the tile reads halo columns 2l + s, i.e. slots l (s=0), kEvenCols + l (s=1),
// l + 1 (s=2): consecutive for consecutive lanes.
__device__ __forceinline__ int halo_slot(int u) { return (u & 1) ? kEvenCols + (u >> 1) : (u >> 1); }

// Tile coordinates: image n, first output row p0, first output column q0.
struct Tile {
    int n, p0, q0;
};

// Tile index t (< 2^31, checked by the plan) in (image, tile row, tile column) order, columns fastest.
__device__ __forceinline__ Tile tile_at(unsigned t, const StemConvPlan& pl) {
    const unsigned tw = t % static_cast<unsigned>(pl.tiles_w);
    const unsigned rest = t / static_cast<unsigned>(pl.tiles_w);
    Tile tl;
    tl.q0 = static_cast<int>(tw) * kStemTileQ;
    tl.p0 = static_cast<int>(rest % static_cast<unsigned>(pl.tiles_h)) * kStemTileP;
    tl.n = static_cast<int>(rest / static_cast<unsigned>(pl.tiles_h));
    return tl;
}

// Halo element idx (< kHaloPixels) of tile tl: its global pixel (valid == inside the image) and its
// shared-memory offset in floats. Input rows 2*p0 - 1 + i, columns 2*q0 - 1 + u.
struct HaloRef {
    bool valid;
    size_t pixel;  // (n*H + h)*W + w
    int smem;      // (i*kStemHaloW + halo_slot(u)) * CIN
};

template <int CIN>
__device__ __forceinline__ HaloRef halo_ref(int idx, const Tile& tl, const StemConvPlan& pl) {
    const int i = idx / kStemHaloW, u = idx - i * kStemHaloW;
    const int h = 2 * tl.p0 - 1 + i, w = 2 * tl.q0 - 1 + u;
    HaloRef r;
    r.valid = in_range(h, pl.h) && in_range(w, pl.w);
    r.pixel = (static_cast<size_t>(tl.n) * pl.h + h) * pl.w + w;
    r.smem = (i * kStemHaloW + halo_slot(u)) * CIN;
    return r;
}

// ---- kernels ----

// y = conv(x, w). grid (tiles_w, tiles_h, n), block fwd_threads = 32 * groups. Stages the filter
// (transposed to ws[k][co], k = tap*CIN + ci, so a group's 8 channels are 32 contiguous bytes) and the
// tile's input halo, then thread (g = t % groups, lane = t / groups) computes output column q0 + lane,
// rows p0 .. p0 + kStemTileP - 1, channels 8g .. 8g + 7. Per output the (tap, ci) products are added
// in (r, s, ci) order; padding taps add fma(0, w, acc) = acc.
template <int CIN>
__global__ void __launch_bounds__(kFwdMaxThreads)
    stemconv_forward_kernel(StemConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ w,
                            bfloat* __restrict__ y) {
    rt::pdl_entry();
    constexpr int K = 9 * CIN;  // taps x input channels per output channel
    __shared__ __align__(16) float xs[kHaloPixels * CIN];
    __shared__ __align__(16) float ws[K * kStemMaxCout];
    const int t = threadIdx.x, nt = blockDim.x;
    const Tile tl{static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.y) * kStemTileP,
                  static_cast<int>(blockIdx.x) * kStemTileQ};

    // Filter: w[co*K + k] -> ws[k*Cout + co], 8 bf16 per 128-bit load (Cout*K is a multiple of 8).
    for (int v = t; v < pl.cout * K / 8; v += nt) {
        float f[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(w) + v), f);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int e = 8 * v + j, co = e / K, k = e - co * K;
            ws[k * pl.cout + co] = f[j];
        }
    }
    // Input halo, zeros outside the image.
    for (int idx = t; idx < kHaloPixels; idx += nt) {
        const HaloRef hr = halo_ref<CIN>(idx, tl, pl);
        XPixel<CIN> px;
        if (hr.valid) {
            px.load(x + hr.pixel * CIN);
        } else {
            px.zero();
        }
        px.put(xs + hr.smem);
    }
    __syncthreads();

    const int g = t % pl.groups, lane = t / pl.groups;
    const int q = tl.q0 + lane;
    if (q >= pl.q) return;  // no barrier below
    float acc[kStemTileP][8] = {};
#pragma unroll
    for (int r = 0; r < 3; ++r) {
#pragma unroll
        for (int s = 0; s < 3; ++s) {
            float wv[CIN][8];
#pragma unroll
            for (int ci = 0; ci < CIN; ++ci) lds8(ws + ((r * 3 + s) * CIN + ci) * pl.cout + 8 * g, wv[ci]);
            const int slot = halo_slot(2 * lane + s);
#pragma unroll
            for (int a = 0; a < kStemTileP; ++a) {
                float xv[CIN];
                lds_pixel<CIN>(xs + ((2 * a + r) * kStemHaloW + slot) * CIN, xv);
#pragma unroll
                for (int ci = 0; ci < CIN; ++ci)
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[a][j] = fmaf(xv[ci], wv[ci][j], acc[a][j]);
            }
        }
    }
#pragma unroll
    for (int a = 0; a < kStemTileP; ++a) {
        const int p = tl.p0 + a;
        if (p >= pl.p) break;
        store8(y + ((static_cast<size_t>(tl.n) * pl.p + p) * pl.q + q) * pl.cout + 8 * g, acc[a]);
    }
}

// The next tile of wgrad held in registers while the current one is summed: this thread's share of
// the input halo (raw bf16 pixels) and of the dy tile (128-bit vectors of 8 channels). NT threads
// split kHaloPixels halo pixels and kTilePixels * GB dy vectors (group fastest: coalesced).
template <int CIN, int GB>
struct WgradStage {
    static constexpr int NT = wgrad_threads(GB);
    static constexpr int kXLoads = (kHaloPixels + NT - 1) / NT;
    static constexpr int kDyLoads = (kTilePixels * GB + NT - 1) / NT;
    XPixel<CIN> xr[kXLoads];
    uint4 dr[kDyLoads];

    // Global loads of tile tl (zeros for padding, for pixels outside (P, Q) and for groups >= groups).
    __device__ __forceinline__ void fetch(const Tile& tl, int g0, const StemConvPlan& pl, const bfloat* __restrict__ x,
                                          const bfloat* __restrict__ dy) {
        const int t = threadIdx.x;
#pragma unroll
        for (int k = 0; k < kXLoads; ++k) {
            const int idx = t + k * NT;
            if (idx >= kHaloPixels) break;
            const HaloRef hr = halo_ref<CIN>(idx, tl, pl);
            if (hr.valid) {
                xr[k].load(x + hr.pixel * CIN);
            } else {
                xr[k].zero();
            }
        }
#pragma unroll
        for (int k = 0; k < kDyLoads; ++k) {
            const int idx = t + k * NT;
            if (idx >= kTilePixels * GB) break;
            const int pix = idx / GB, gg = g0 + idx % GB;
            const int p = tl.p0 + pix / kStemTileQ, q = tl.q0 + pix % kStemTileQ;
            if (p < pl.p && q < pl.q && gg < pl.groups) {
                const size_t off = ((static_cast<size_t>(tl.n) * pl.p + p) * pl.q + q) * pl.cout + 8 * gg;
                dr[k] = __ldg(reinterpret_cast<const uint4*>(dy + off));
            } else {
                dr[k] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    }

    // Converts to fp32 and writes the shared-memory tiles: xs (halo, parity-split rows) and
    // dys[pix * dy_stride(GB) + 8 * group-in-block + j].
    __device__ __forceinline__ void put(const Tile& tl, const StemConvPlan& pl, float* xs, float* dys) const {
        const int t = threadIdx.x;
#pragma unroll
        for (int k = 0; k < kXLoads; ++k) {
            const int idx = t + k * NT;
            if (idx >= kHaloPixels) break;
            xr[k].put(xs + halo_ref<CIN>(idx, tl, pl).smem);
        }
#pragma unroll
        for (int k = 0; k < kDyLoads; ++k) {
            const int idx = t + k * NT;
            if (idx >= kTilePixels * GB) break;
            float v[8];
            unpack8(dr[k], v);
            sts8(dys + (idx / GB) * dy_stride(GB) + 8 * (idx % GB), v);
        }
    }
};

// wgrad, pass 1. grid (wgrad_cblocks, chunks), block wgrad_threads = 96 * GB. Block (b, k) owns
// channel groups g0 = b*GB .. g0 + GB - 1 and the tiles [tiles*k/chunks, tiles*(k+1)/chunks) in
// order. Warp w = (gl = w / 3, r = w % 3), lane = tile column: the thread adds, for each valid output
// pixel (p0 + a, q0 + lane) of each tile, dy[8 channels of group g0 + gl] times the 3 x CIN input
// values under filter row r into acc[s][ci][j]. Then each warp sums its lanes with a fixed xor
// butterfly and lane 0 writes part[k][co*9*CIN + (r*3 + s)*CIN + ci] (the layout of dw).
template <int CIN, int GB>
__global__ void __launch_bounds__(wgrad_threads(GB), wgrad_min_blocks(CIN, GB))
    stemconv_wgrad_partial_kernel(StemConvPlan pl, const bfloat* __restrict__ x, const bfloat* __restrict__ dy,
                                  float* __restrict__ part) {
    rt::pdl_entry();
    __shared__ __align__(16) float xs[kHaloPixels * CIN];
    __shared__ __align__(16) float dys[kTilePixels * dy_stride(GB)];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r = warp % kStemWgradWarpsPerGroup, gl = warp / kStemWgradWarpsPerGroup;
    const int g0 = blockIdx.x * GB;
    const bool active = g0 + gl < pl.groups;  // warp-uniform
    // tiles <= INT_MAX (plan), so the bounds and tile indices fit in 32-bit unsigned arithmetic.
    const unsigned lo = static_cast<unsigned>(pl.tiles * blockIdx.y / pl.chunks);
    const unsigned hi = static_cast<unsigned>(pl.tiles * (blockIdx.y + 1) / pl.chunks);

    float acc[3][CIN][8] = {};
    WgradStage<CIN, GB> stage;
    Tile tl = tile_at(lo, pl);
    stage.fetch(tl, g0, pl, x, dy);
    for (unsigned t = lo; t < hi; ++t) {
        __syncthreads();  // the previous tile's reads of xs/dys are done
        stage.put(tl, pl, xs, dys);
        __syncthreads();
        const Tile cur = tl;
        if (t + 1 < hi) {  // in flight while this tile is summed
            tl = tile_at(t + 1, pl);
            stage.fetch(tl, g0, pl, x, dy);
        }
        if (!active || cur.q0 + lane >= pl.q) continue;
#pragma unroll
        for (int a = 0; a < kStemTileP; ++a) {
            if (cur.p0 + a >= pl.p) break;
            float d[8];
            lds8(dys + (a * kStemTileQ + lane) * dy_stride(GB) + 8 * gl, d);
#pragma unroll
            for (int s = 0; s < 3; ++s) {
                float xv[CIN];
                lds_pixel<CIN>(xs + ((2 * a + r) * kStemHaloW + halo_slot(2 * lane + s)) * CIN, xv);
#pragma unroll
                for (int ci = 0; ci < CIN; ++ci)
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[s][ci][j] = fmaf(xv[ci], d[j], acc[s][ci][j]);
            }
        }
    }

    // Fixed butterfly over the 32 lanes (every lane ends with the same sums: a + b == b + a exactly).
    // All warps take part, so the block stays converged.
#pragma unroll
    for (int s = 0; s < 3; ++s)
#pragma unroll
        for (int ci = 0; ci < CIN; ++ci)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int m = 16; m > 0; m >>= 1) acc[s][ci][j] += __shfl_xor_sync(0xffffffffu, acc[s][ci][j], m);
    if (active && lane == 0) {
        float* dst = part + static_cast<size_t>(blockIdx.y) * pl.entries;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int co = 8 * (g0 + gl) + j;
#pragma unroll
            for (int s = 0; s < 3; ++s)
#pragma unroll
                for (int ci = 0; ci < CIN; ++ci) dst[(co * 9 + r * 3 + s) * CIN + ci] = acc[s][ci][j];
        }
    }
}

// wgrad, pass 2. grid finalize_blocks, block (kStemFinalizeX, kStemFinalizeY). Entry e: lane y adds
// chunks y, y + kStemFinalizeY, ... in order in fp64, lane 0 adds the lane sums in order, and
// dw[e] += the total rounded to fp32. The order depends only on the shape.
__global__ void stemconv_wgrad_finalize_kernel(int entries, int chunks, const float* __restrict__ part,
                                               float* __restrict__ dw) {
    rt::pdl_entry();
    finalize_partials<kStemFinalizeX, kStemFinalizeY>(entries, chunks, part, AddTo{dw});
}

// ---- launch helpers ----

// Empty when the shape is supported, else what is not, with its value.
std::string unsupported_reason(const ConvShape& s) {
    if (s.k != 3) return rt::format("kernel size k=%d (only 3x3)", s.k);
    if (s.stride != 2) return rt::format("stride=%d (only stride 2)", s.stride);
    if (s.pad != 1) return rt::format("pad=%d (only pad 1)", s.pad);
    if (s.groups != 1) return rt::format("groups=%d (only dense, groups 1)", s.groups);
    if (s.cin != 2 && s.cin != 4) return rt::format("cin=%d (only 2 or 4 input channels)", s.cin);
    if (s.cout <= 0 || s.cout % 8 != 0 || s.cout > kStemMaxCout)
        return rt::format("cout=%d (must be a multiple of 8 in [8, %d])", s.cout, kStemMaxCout);
    if (s.bias) return "bias=true (no bias)";
    if (s.n <= 0 || s.h <= 0 || s.w <= 0)
        return rt::format("input dims n=%d h=%d w=%d (must be positive)", s.n, s.h, s.w);
    if (s.n > 65535) return rt::format("batch n=%d (at most 65535: gridDim.z of the forward)", s.n);
    const StemConvPlan pl = stemconv_geometry(s.n, s.h, s.w, s.cin, s.cout);
    if (pl.tiles_h > 65535)
        return rt::format("h=%d: %d tile rows (at most 65535: gridDim.y of the forward)", s.h, pl.tiles_h);
    if (pl.tiles > INT_MAX)
        return rt::format("%lld tiles (n=%d h=%d w=%d): too many for 32-bit tile indices", pl.tiles, s.n, s.h, s.w);
    return "";
}

void check_bf16(const char* op, const char* name, const bf16* p) { rt::check_device_ptr(op, name, p, 16); }

size_t in_bytes(const StemConvPlan& pl) { return static_cast<size_t>(pl.n) * pl.h * pl.w * pl.cin * sizeof(bf16); }
size_t out_bytes(const StemConvPlan& pl) { return static_cast<size_t>(pl.n) * pl.p * pl.q * pl.cout * sizeof(bf16); }
size_t w_bytes(const StemConvPlan& pl) { return static_cast<size_t>(pl.entries) * sizeof(bf16); }

template <int CIN, int GB>
void launch_wgrad_partial(const rt::Exec& ex, const StemConvPlan& pl, const bf16* x, const bf16* dy, float* part) {
    rt::launch(ex, "stemconv_wgrad_partial_kernel", stemconv_wgrad_partial_kernel<CIN, GB>,
               dim3(pl.wgrad_cblocks, pl.chunks), wgrad_threads(GB), 0, pl, dev(x), dev(dy), part);
}

template <int CIN>
void wgrad_partial(const rt::Exec& ex, const StemConvPlan& pl, const bf16* x, const bf16* dy, float* part) {
    switch (pl.wgrad_gb) {
        case 1: launch_wgrad_partial<CIN, 1>(ex, pl, x, dy, part); break;
        case 2: launch_wgrad_partial<CIN, 2>(ex, pl, x, dy, part); break;
        case 3: launch_wgrad_partial<CIN, 3>(ex, pl, x, dy, part); break;
        case 4: launch_wgrad_partial<CIN, 4>(ex, pl, x, dy, part); break;
        default: SF_FAIL("stemconv: wgrad_gb=%d out of [1, %d]", pl.wgrad_gb, kStemWgradGroups);
    }
}

}  // namespace

// ---- launchers ----

bool stemconv_supported(const ConvShape& s) { return unsupported_reason(s).empty(); }

StemConvPlan stemconv_plan(const ConvShape& s) {
    const std::string why = unsupported_reason(s);
    SF_CHECK(why.empty(), "stemconv: unsupported shape: %s", why.c_str());
    return stemconv_geometry(s.n, s.h, s.w, s.cin, s.cout);
}

size_t stemconv_workspace_floats(const ConvShape& s) { return stemconv_plan(s).workspace_floats; }

void stemconv_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y) {
    const char* op = "stemconv_forward_cuda";
    rt::check_cuda_exec(op, ex);
    const StemConvPlan pl = stemconv_plan(s);
    check_bf16(op, "x", x);
    check_bf16(op, "w", w);
    check_bf16(op, "y", y);
    SF_CHECK(!rt::overlap(y, out_bytes(pl), x, in_bytes(pl)) && !rt::overlap(y, out_bytes(pl), w, w_bytes(pl)),
             "%s: y must not alias x or w", op);
    const dim3 grid(pl.tiles_w, pl.tiles_h, pl.n);
    if (pl.cin == 2) {
        rt::launch(ex, "stemconv_forward_kernel", stemconv_forward_kernel<2>, grid, pl.fwd_threads, 0, pl, dev(x),
                   dev(w), dev(y));
    } else {
        rt::launch(ex, "stemconv_forward_kernel", stemconv_forward_kernel<4>, grid, pl.fwd_threads, 0, pl, dev(x),
                   dev(w), dev(y));
    }
}

void stemconv_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                   float* workspace, size_t workspace_floats) {
    const char* op = "stemconv_backward_filter_cuda";
    rt::check_cuda_exec(op, ex);
    const StemConvPlan pl = stemconv_plan(s);
    check_bf16(op, "x", x);
    check_bf16(op, "dy", dy);
    rt::check_device_ptr(op, "dw", dw, alignof(float));
    rt::check_device_ptr(op, "workspace", workspace, alignof(float));
    SF_CHECK(workspace_floats >= pl.workspace_floats,
             "%s: workspace of %zu floats is too small for n=%d h=%d w=%d cin=%d cout=%d (need "
             "stemconv_workspace_floats = %zu)",
             op, workspace_floats, pl.n, pl.h, pl.w, pl.cin, pl.cout, pl.workspace_floats);
    const size_t dw_bytes = static_cast<size_t>(pl.entries) * sizeof(float);
    const size_t ws_bytes = pl.workspace_floats * sizeof(float);
    SF_CHECK(!rt::overlap(dw, dw_bytes, x, in_bytes(pl)) && !rt::overlap(dw, dw_bytes, dy, out_bytes(pl)) &&
                 !rt::overlap(dw, dw_bytes, workspace, ws_bytes),
             "%s: dw must not alias x, dy or the workspace", op);
    SF_CHECK(!rt::overlap(workspace, ws_bytes, x, in_bytes(pl)) && !rt::overlap(workspace, ws_bytes, dy, out_bytes(pl)),
             "%s: the workspace must not alias x or dy", op);
    if (pl.cin == 2) {
        wgrad_partial<2>(ex, pl, x, dy, workspace);
    } else {
        wgrad_partial<4>(ex, pl, x, dy, workspace);
    }
    rt::launch(ex, "stemconv_wgrad_finalize_kernel", stemconv_wgrad_finalize_kernel, pl.finalize_blocks,
               dim3(kStemFinalizeX, kStemFinalizeY), 0, pl.entries, pl.chunks, workspace, dw);
}

}  // namespace kern
