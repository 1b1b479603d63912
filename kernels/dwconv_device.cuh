// Device helpers and the internal launch interface of the depthwise 3x3 kernels (kernels/dwconv.cu:
// the checked launchers; kernels/dwconv_gather.cu: forward and dgrad; kernels/dwconv_wgrad.cu: the
// filter gradient). Included by those .cu files only. Design: docs/KERNELS_DWCONV.md.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/dwconv_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"

namespace kern {

// ---- launches (no checks: the public launchers in dwconv.cu check first) ----

// y = dwconv(x, w) in the plan's forward variant; pro null or the BN prologue (dw_variant_prologue variants);
// stats null or (a staged variant) the statistics epilogue, its partials in part, then its finalize.
void dw_launch_forward(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                       const DwPrologue* pro, const BnStatsOut* stats = nullptr, float* part = nullptr);
// dx (+)= dwconv^T(dy, w) in the plan's dgrad variant.
void dw_launch_backward_data(const rt::Exec& ex, const DwConvPlan& pl, const bf16* dy, const bf16* w, bf16* dx,
                             bool accumulate);
// Pass 1 (partials into part) and pass 2 (dw += their fixed-order sum).
void dw_launch_backward_filter(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* dw,
                               float* part, const DwPrologue* pro);

// The fused stride-1 backward (kernels/dwconv_bwd_fused.cu): dx (+)= dgrad, partials into part, then
// dw += their fixed-order sum.
// pro: x is the producer's pre-BN output, staged through its BN + activation. bng (with pro): that BN's
// backward reductions from the stored dx, partials at part + fp.workspace_floats, then its finalize.
void dw_launch_backward_fused(const rt::Exec& ex, const DwFusedPlan& fp, const bf16* x, const bf16* dy, const bf16* w,
                              bf16* dx, float* dw, float* part, bool accumulate, const DwBnBackward* bnb,
                              const DwPrologue* pro, const BnGradSums* bng);

// Calls f(std::integral_constant<int, v>{}) for the runtime variant index v of a table of kCount
// variants (kDwVariants, kDwWgradVariants): every variant gets its instance, with no list to keep in step
// with the table. Throws rt::Error when v is out of range.
template <int kCount, class F, int... I>
void with_variant_seq(int v, const char* pass, F&& f, std::integer_sequence<int, I...>) {
    const bool ran = ((v == I ? (f(std::integral_constant<int, I>{}), true) : false) || ...);
    SF_CHECK(ran, "dwconv3x3: %s variant %d out of range", pass, v);
}
template <int kCount, class F>
void with_variant(int v, const char* pass, F&& f) {
    with_variant_seq<kCount>(v, pass, f, std::make_integer_sequence<int, kCount>{});
}

// ---- pixels (vector accesses of V = 8, 4 or 2 bf16: loadv, storev in kernels/cuda_util.cuh) ----

// Pixel `pix` (an index in units of C) of an image at `base`, or zeros (padding) when !valid.
template <int V>
__device__ __forceinline__ void loadv_or_zero(const bfloat* __restrict__ base, bool valid, size_t pix, int c,
                                              float (&v)[V]) {
    if (valid) {
        loadv<V>(base + pix * static_cast<size_t>(c), v);
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = 0.0f;
    }
}

// The input pixel of a kernel with a prologue (kPro, V = 8 only): the producer's BN + activation
// applied to a loaded pixel, rounded to bf16 as its apply pass would have stored it; padding stays
// zero. Without kPro, loadv_or_zero itself. `bn` is unused (and eliminated) then.
template <int V, Act A, bool kPro>
__device__ __forceinline__ void loadv_input(const bfloat* __restrict__ base, bool valid, size_t pix, int c,
                                            const BnApply8& bn, float (&v)[V]) {
    static_assert(!kPro || V == 8, "the BN prologue runs with 8 channels per thread");
    loadv_or_zero<V>(base, valid, pix, c, v);
    if constexpr (kPro) {
        if (valid) {
#pragma unroll
            for (int k = 0; k < V; ++k) v[k] = bn_act_value_bf16<A>(bn, k, v[k]);
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

// The BN backward prologue's per-channel constants of group g (kBnb; DwBnBackward), else an unused value.
struct BnBackward8 {
    Chan8 p;
    float mg[8], mgx[8];
};
template <bool kBnb>
__device__ __forceinline__ BnBackward8 load_bn_backward(const DwBnBackward& b, int g, int c) {
    BnBackward8 r{};
    if constexpr (kBnb) {
        r.p = load_chan8(g, b.gamma, b.beta, b.mean, b.invstd);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            r.mg[j] = __ldg(b.coef + 8 * g + j);
            r.mgx[j] = __ldg(b.coef + c + 8 * g + j);
        }
    }
    return r;
}

__device__ __forceinline__ bool in_range(int i, int n) { return static_cast<unsigned>(i) < static_cast<unsigned>(n); }

// The 9V filter taps of channel group g of V channels, wt[tap][j] = w[(V*g + j)*9 + tap]: the group's
// weights are 9V contiguous bf16 starting at byte 18V*g, so 9 loads of V bf16 each, aligned to 2V
// bytes when w is 16-byte aligned.
template <int V>
__device__ __forceinline__ void load_weights(const bfloat* __restrict__ w, int g, float (&wt)[9][V]) {
    using T = typename BfRaw<V>::T;
    T raw[9];
    const T* src = reinterpret_cast<const T*>(w + 9 * V * static_cast<size_t>(g));
#pragma unroll
    for (int k = 0; k < 9; ++k) raw[k] = __ldg(src + k);
    const bfloat* e = reinterpret_cast<const bfloat*>(raw);
#pragma unroll
    for (int j = 0; j < V; ++j)
#pragma unroll
        for (int tap = 0; tap < 9; ++tap) wt[tap][j] = __bfloat162float(e[j * 9 + tap]);
}

template <int V>
__device__ __forceinline__ void fmav(float (&acc)[V], const float (&v)[V], const float (&wt)[V]) {
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = fmaf(v[k], wt[k], acc[k]);
}

// ---- staged blocks (the staged gather variants of dwconv_gather.cu, the fused backward of
// dwconv_bwd_fused.cu) ----

// Block b of a staged grid: channels [c0, c0 + cb), destination pixels from (d0, e0), image n.
struct StagedBlock {
    int c0, n, d0, e0;
};

__device__ __forceinline__ StagedBlock staged_block(unsigned b, const DwTileGrid& g) {
    StagedBlock sb;
    sb.c0 = static_cast<int>(b % static_cast<unsigned>(g.cblocks)) * g.cb;
    b /= static_cast<unsigned>(g.cblocks);
    sb.e0 = static_cast<int>(b % static_cast<unsigned>(g.blocks_w)) * g.block_w;
    b /= static_cast<unsigned>(g.blocks_w);
    sb.d0 = static_cast<int>(b % static_cast<unsigned>(g.blocks_h)) * g.block_h;
    sb.n = static_cast<int>(b / static_cast<unsigned>(g.blocks_h));
    return sb;
}

// Stores an 8-channel chunk of the producer's pre-BN output as bf16(A(bn(x))): the value the apply pass
// (bn_act_forward_*) stores, rounded as its store rounds.
template <Act A>
__device__ __forceinline__ void store_bn_applied(const BnApply8& bn, const uint4& u, bfloat* dst) {
    float v[8];
    unpack8(u, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = bn_act_value<A>(bn, j, v[j]);
    storev<8>(dst, v);
}

// Copies source pixels [r0, r0 + g.src_h) x [s0, s0 + g.src_w), channels [0, g.cb) of the image at
// `img` (rows x cols pixels of c channels, already offset to the block's first channel) into `src`,
// pixel (i, j) at (i * g.src_w + j) * g.pitch; zeros where the pixel is outside the image (the
// padding). 128-bit loads, kBatch in flight per thread before their stores; consecutive threads take
// consecutive 16-byte chunks of a pixel, then consecutive pixels of a row: coalesced. The chunk count
// cb/8 divides kDwThreads, so a thread's chunk is fixed and its pixel advances by kDwThreads/chunks per
// load: the row and column are stepped, not divided out, per load.
// kPro (the forward's BN prologue): the thread's chunk is channels c0 + 8*part .. of the image, and each
// in-image pixel chunk is stored as bf16(act(bn(x))), the value the direct prologue kernels compute per
// tap-window load and bn_act_forward_* stores: once per staged pixel here. The padding stays +0.
// kTwo (the fused backward): the same pixels of a second image of the same geometry, img2, go to src2
// in the same turns, so both tensors' loads are in flight together (8 per thread).
// kBnb (with kTwo; the fused backward's BN prologue, DwBnBackward): img is the gradient of a BatchNorm +
// activation A whose input is img3 (the same geometry and offset), and each in-image pixel chunk of img
// is stored as the BN backward's dx, bf16(bn_act_dx_value), the value the dx pass stores; the padding
// stays +0. coef: the BN's 2C coefficients (mean(g), then mean(g * xhat)). Two pixels per turn then
// (6 loads in flight), so that the channel constants fit beside the loads.
// kPro2 (with kTwo; the fused backward of a conv with the forward's BN prologue): img2 is the producer's
// pre-BN output, and each of its in-image pixel chunks is stored as kPro stores img's, bf16(P(bn(x))) with
// pro's statistics and activation P: the conv input the forward read. img goes to src as it is, or, with
// kBnb as well, through the BN backward (one pixel per turn then, so that both sets of channel constants
// fit beside the loads).
template <Act A = Act::None, bool kPro = false, bool kTwo = false, bool kBnb = false, bool kPro2 = false,
          Act P = A>
__device__ __forceinline__ void stage_source(const bfloat* __restrict__ img, int rows, int cols, int c, int r0, int s0,
                                             const DwTileGrid& g, bfloat* src, const DwPrologue& pro = DwPrologue{},
                                             int c0 = 0, const bfloat* __restrict__ img2 = nullptr,
                                             bfloat* src2 = nullptr, const bfloat* __restrict__ img3 = nullptr,
                                             const DwBnBackward& bnb = DwBnBackward{}) {
    static_assert(!(kPro && kTwo), "the prologue stages one image");
    static_assert(!kBnb || kTwo, "the BN backward prologue stages with the second image");
    static_assert(!kPro2 || kTwo, "the second image's prologue stages it with the first");
    constexpr int kBatch = kBnb ? (kPro2 ? 1 : 2) : 4;
    static_assert(kDwThreads % 8 == 0, "a pixel's chunk count (1, 2, 4 or 8) must divide the block");
    const int chunks = g.cb / 8, step = kDwThreads / chunks, part = static_cast<int>(threadIdx.x) % chunks;
    const BnApply8 bn = load_prologue<kPro || kPro2>(pro, c0 / 8 + part);
    const BnBackward8 bb = load_bn_backward<kBnb>(bnb, c0 / 8 + part, c);
    const int pixels = g.src_h * g.src_w;
    int pix = static_cast<int>(threadIdx.x) / chunks;
    int row = pix / g.src_w, col = pix % g.src_w;  // of pixel `pix`; step < src_w is not assumed
    while (pix < pixels) {
        uint4 u[kBatch];
        uint4 u2[kTwo ? kBatch : 1];
        uint4 u3[kBnb ? kBatch : 1];
        int at[kBatch];
        bool inside[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            u[k] = make_uint4(0u, 0u, 0u, 0u);
            at[k] = -1;
            inside[k] = false;
            if (pix < pixels) {
                const int r = r0 + row, q = s0 + col;
                at[k] = pix * g.pitch + 8 * part;
                inside[k] = in_range(r, rows) && in_range(q, cols);
                if constexpr (kTwo) u2[k] = make_uint4(0u, 0u, 0u, 0u);
                if (inside[k]) {
                    const size_t at_img = (static_cast<size_t>(r) * cols + q) * c;
                    u[k] = __ldg(reinterpret_cast<const uint4*>(img + at_img) + part);
                    if constexpr (kTwo) u2[k] = __ldg(reinterpret_cast<const uint4*>(img2 + at_img) + part);
                    if constexpr (kBnb) u3[k] = __ldg(reinterpret_cast<const uint4*>(img3 + at_img) + part);
                }
                pix += step;
                col += step;
                while (col >= g.src_w) col -= g.src_w, ++row;
            }
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            if (at[k] < 0) continue;
            if constexpr (kPro) {
                if (inside[k]) {
                    store_bn_applied<A>(bn, u[k], src + at[k]);
                    continue;
                }
            }
            if constexpr (kPro2) {
                if (inside[k]) {
                    store_bn_applied<P>(bn, u2[k], src2 + at[k]);
                } else {
                    *reinterpret_cast<uint4*>(src2 + at[k]) = u2[k];  // +0: the padding
                }
            } else if constexpr (kTwo) {
                *reinterpret_cast<uint4*>(src2 + at[k]) = u2[k];
            }
            if constexpr (kBnb) {
                if (inside[k]) {
                    float d[8], x[8];
                    unpack8(u[k], d);
                    unpack8(u3[k], x);
#pragma unroll
                    for (int j = 0; j < 8; ++j) d[j] = bn_act_dx_value<A>(bb.p, j, x[j], d[j], bb.mg[j], bb.mgx[j]);
                    storev<8>(src + at[k], d);  // rounds to bf16 as the dx pass's store does
                    continue;
                }
            }
            *reinterpret_cast<uint4*>(src + at[k]) = u[k];
        }
    }
}

}  // namespace kern
