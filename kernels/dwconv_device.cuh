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

// y = dwconv(x, w) in the plan's forward variant; pro null or the BN prologue (dw_variant_prologue variants).
void dw_launch_forward(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* w, bf16* y,
                       const DwPrologue* pro);
// dx (+)= dwconv^T(dy, w) in the plan's dgrad variant.
void dw_launch_backward_data(const rt::Exec& ex, const DwConvPlan& pl, const bf16* dy, const bf16* w, bf16* dx,
                             bool accumulate);
// Pass 1 (partials into part) and pass 2 (dw += their fixed-order sum).
void dw_launch_backward_filter(const rt::Exec& ex, const DwConvPlan& pl, const bf16* x, const bf16* dy, float* dw,
                               float* part, const DwPrologue* pro);

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

}  // namespace kern
