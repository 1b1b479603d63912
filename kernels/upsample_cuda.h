// CUDA bilinear upsampling by 2, 4 or 8, align_corners=False (kernels/upsample.cu), NHWC bf16:
// the semantics of upsample.h / upsample_ref.cpp. Declared without CUDA types so g++ code can call
// it; the per-axis tap arithmetic is here (host and device) so the CPU tests check exactly what the
// kernels compute. Design and numerics: docs/KERNELS_ELTWISE.md.
//
//   forward:  y (N, f*H, f*W, C) = bilinear(x (N, H, W, C)), overwritten.
//   backward: dx (N, H, W, C) += transpose(dy (N, f*H, f*W, C)), as a GATHER: each dx element sums,
//             in a fixed order, the at most 2f x 2f dy pixels that read it. No atomics.
// Preconditions (rt::Error naming the value): CUDA Exec; factor 2, 4 or 8; H, W, C > 0, N >= 0
// (N == 0: no-op); pointers non-null and 2-byte aligned; dx not aliasing dy, y not aliasing x.
// 128-bit vectors of 8 channels when C % 8 == 0 and both pointers are 16-byte aligned, one
// channel per thread otherwise. Launchers enqueue on ex.stream, never allocate, never synchronise.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/tensor.h"
#include "runtime/exec.h"

#if defined(__CUDACC__)
#define SF_UPSAMPLE_HD __host__ __device__
#else
#define SF_UPSAMPLE_HD
#endif

namespace kern {

constexpr int kUpsampleThreads = 256;
constexpr size_t kUpsampleMaxBlocks = 8192;  // grid-stride beyond

// Output index o (of in * factor) reads inputs i0 and i1 with weights l0 and l1 (upsample.h).
struct UpsampleTap {
    int i0, i1;
    float l0, l1;
};

// The reference's taps (make_taps in upsample_ref.cpp), in fp32. scale = 1/factor is exact and so
// is every step: src is a multiple of 1/(2*factor), >= 0 after the clamp, so truncation is floor.
SF_UPSAMPLE_HD inline UpsampleTap upsample_tap(int o, int in, int factor) {
    const float scale = 1.0f / static_cast<float>(factor);
    float src = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    int i0 = static_cast<int>(src);
    if (i0 > in - 1) i0 = in - 1;
    float l1 = src - static_cast<float>(i0);
    l1 = l1 < 0.0f ? 0.0f : (l1 > 1.0f ? 1.0f : l1);
    const int i1 = i0 + (i0 < in - 1 ? 1 : 0);
    return {i0, i1, 1.0f - l1, l1};
}

// Output pixel (oh, ow)'s weights for its inputs (i0, i0), (i0, i1), (i1, i0), (i1, i1) of the row taps th and
// column taps tw, and the reference's expression combining those inputs. Every weight is a multiple of
// 1/(4F^2) with at most 8 significant bits and bf16 inputs have 8, so every product is exact in fp32
// (contraction into FMAs changes nothing). Shared by the upsample forward and the BatchNorm kernels that
// form its values on load (kernels/bn_act_rows.cuh, RowsUpsampled), so both give the same bits.
SF_UPSAMPLE_HD inline void upsample_weights(const UpsampleTap& th, const UpsampleTap& tw, float (&w)[4]) {
    w[0] = th.l0 * tw.l0;
    w[1] = th.l0 * tw.l1;
    w[2] = th.l1 * tw.l0;
    w[3] = th.l1 * tw.l1;
}
SF_UPSAMPLE_HD inline float upsample_mix(float a0, float a1, float b0, float b1, const float (&w)[4]) {
    return a0 * w[0] + (a1 * w[1] + (b0 * w[2] + b1 * w[3]));
}

// Output indices that can read input i: [*lo, *hi]. i0(o) == i needs src in [i, i+1), i.e.
// o in [f*i + f/2, f*i + 3f/2 - 1] (for i == 0 also o < f/2, where src is clamped to 0);
// i1(o) == i needs i0(o) == i - 1. Both clipped to [0, f*in - 1]: at most 2f outputs.
SF_UPSAMPLE_HD inline void upsample_gather_range(int i, int in, int factor, int* lo, int* hi) {
    const int a = factor * i - factor / 2, b = factor * i + 3 * factor / 2 - 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > factor * in - 1 ? factor * in - 1 : b;
}

// Weight with which output o reads input i (0 if it does not): l0 if i0 == i, plus l1 if i1 == i
// (both at the last input, where i0 == i1; l0 + l1 == 1 exactly).
SF_UPSAMPLE_HD inline float upsample_gather_weight(int o, int i, int in, int factor) {
    const UpsampleTap t = upsample_tap(o, in, factor);
    float w = 0.0f;
    if (t.i0 == i) w += t.l0;
    if (t.i1 == i) w += t.l1;
    return w;
}

// Channels per thread: 8 (one 128-bit vector) when C % 8 == 0 and both pointers are 16-byte
// aligned, else 1.
constexpr int upsample_width(int c, uintptr_t p, uintptr_t q) {
    return c % 8 == 0 && p % 16 == 0 && q % 16 == 0 ? 8 : 1;
}

// Blocks of a launch over `items` = pixels * (C / width) threads' worth of work (grid-stride).
constexpr size_t upsample_blocks(size_t items) {
    const size_t b = (items + kUpsampleThreads - 1) / kUpsampleThreads;
    return b < 1 ? 1 : (b > kUpsampleMaxBlocks ? kUpsampleMaxBlocks : b);
}

// Throws rt::Error for a factor other than 2, 4, 8 or a bad shape (names the function and value).
void upsample_check_args(const char* fn, const Shape4& in, int factor);

// x (N, H, W, C) bf16 -> y (N, f*H, f*W, C) bf16, overwritten. `in` is x's shape.
void upsample_bilinear_forward_bf16_cuda(const rt::Exec& ex, const Shape4& in, int factor, const bf16* x, bf16* y);
// dy (N, f*H, f*W, C) bf16 -> dx (N, H, W, C) bf16, accumulated (+=); accumulate = false: dx is
// overwritten (never read). `in` is dx's shape. row_loads: each window row's loads issued together
// (ConvPolicy::upsample_row_loads); the same bits either way.
void upsample_bilinear_backward_bf16_cuda(const rt::Exec& ex, const Shape4& in, int factor, const bf16* dy, bf16* dx,
                                          bool accumulate = true, bool row_loads = false);

}  // namespace kern
