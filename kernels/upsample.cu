// CUDA bilinear upsampling x2/x4/x8, align_corners=False, NHWC bf16 (kernels/upsample_cuda.h,
// docs/KERNELS_ELTWISE.md). Both directions are templated on the factor F (so the 2F-wide gather
// window unrolls into registers) and on the channels per thread W (8: one 128-bit vector; 1: any C
// or alignment).
//
// Forward: one thread per (output pixel, channel group), grid-stride; 4 input vectors in, 1 out.
// The taps and the expression a0*w00 + (a1*w01 + (b0*w10 + b1*w11)) are the reference's. Every
// weight is a multiple of 1/(4F^2) with at most 8 significant bits and bf16 inputs have 8, so every
// product is exact in fp32 (contraction into FMAs changes nothing) and the fp32 result is the
// reference's bit for bit; one bf16 rounding follows.
//
// Backward: the transpose as a gather, one thread per (input pixel, channel group): it visits the
// output rows oh of its window in increasing order and, per row, the output columns ow in
// increasing order (the reference's order), adding weight * dy in fp32, then dx += the sum (one
// rounding). Nothing is shared between threads, so there are no atomics and the result is fixed.
// dy is read about 4 times over (each dy pixel feeds 2 x 2 input pixels); the window rows and the
// neighbouring threads' windows overlap, so most of it comes from L1/L2. kRowLoads (`row_loads`): per
// window row, the row's 2F loads are issued together before the first is used (one round trip per row,
// not per pixel: 2F instead of 4F^2 per thread), then added in the order above, so the same bits.
// Without it each load is used before the next is issued (the kernel measured on the H100 and H200).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda_util.cuh"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

// ---- device helpers ----

// W consecutive bf16 (16-byte aligned when W == 8) <-> W floats (W == 8: kernels/cuda_util.cuh).
template <int W>
__device__ __forceinline__ void load_w(const bfloat* p, float (&v)[W]) {
    if constexpr (W == 8) {
        load8(p, v);
    } else {
        v[0] = __bfloat162float(*p);
    }
}

// The raw W bf16 at p (16-byte aligned when W == 8), read-only: one vector load, unpacked later, so that
// a row's loads can all be issued before the first is used.
template <int W>
using RawW = std::conditional_t<W == 8, BfRaw<8>::T, unsigned short>;
template <int W>
__device__ __forceinline__ RawW<W> load_raw_w(const bfloat* p) {
    if constexpr (W == 8)
        return __ldg(reinterpret_cast<const uint4*>(p));
    else
        return __ldg(reinterpret_cast<const unsigned short*>(p));
}
template <int W>
__device__ __forceinline__ void unpack_w(const RawW<W>& u, float (&v)[W]) {
    if constexpr (W == 8) {
        unpack8(u, v);
    } else {
        v[0] = __bfloat162float(__ushort_as_bfloat16(u));
    }
}

// Plain (coherent) load: dx is read and written by the same thread.
template <int W>
__device__ __forceinline__ void load_w_rw(const bfloat* p, float (&v)[W]) {
    if constexpr (W == 8) {
        load8_rw(p, v);
    } else {
        v[0] = __bfloat162float(*p);
    }
}

template <int W>
__device__ __forceinline__ void store_w(bfloat* p, const float (&v)[W]) {
    if constexpr (W == 8) {
        store8(p, v);
    } else {
        *p = __float2bfloat16_rn(v[0]);
    }
}

// ---- kernels ----

// x (N, H, W, C) -> y (N, F*H, F*W, C). Thread item = (pixel of y) * G + group, G = C / W, so
// consecutive threads write consecutive memory.
template <int F, int W>
__global__ void upsample_forward_kernel(int n, int h, int w, int c, const bfloat* __restrict__ x,
                                        bfloat* __restrict__ y) {
    rt::pdl_entry();
    const int oh_n = F * h, ow_n = F * w, groups = c / W;
    const size_t items = static_cast<size_t>(n) * oh_n * ow_n * groups;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t it = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; it < items; it += stride) {
        const int g = static_cast<int>(it % groups);
        size_t p = it / groups;
        const int ow = static_cast<int>(p % ow_n);
        p /= ow_n;
        const int oh = static_cast<int>(p % oh_n);
        const size_t b = p / oh_n;
        const UpsampleTap th = upsample_tap(oh, h, F), tw = upsample_tap(ow, w, F);
        float wt[4];
        upsample_weights(th, tw, wt);
        const size_t ch = static_cast<size_t>(g) * W;
        const bfloat* x0 = x + (b * h + th.i0) * w * c + ch;  // input row i0
        const bfloat* x1 = x + (b * h + th.i1) * w * c + ch;  // input row i1
        float a0[W], a1[W], b0[W], b1[W];
        load_w<W>(x0 + static_cast<size_t>(tw.i0) * c, a0);
        load_w<W>(x0 + static_cast<size_t>(tw.i1) * c, a1);
        load_w<W>(x1 + static_cast<size_t>(tw.i0) * c, b0);
        load_w<W>(x1 + static_cast<size_t>(tw.i1) * c, b1);
#pragma unroll
        for (int j = 0; j < W; ++j) a0[j] = upsample_mix(a0[j], a1[j], b0[j], b1[j], wt);
        store_w<W>(y + it * W, a0);
    }
}

// dy (N, F*H, F*W, C) -> dx (N, H, W, C) += (accumulate false: =, dx never read). Thread item =
// (pixel of dx) * G + group.
template <int F, int W, bool kRowLoads>
__global__ void upsample_backward_kernel(int n, int h, int w, int c, const bfloat* __restrict__ dy,
                                         bfloat* __restrict__ dx, bool accumulate) {
    rt::pdl_entry();
    const int oh_n = F * h, ow_n = F * w, groups = c / W;
    const size_t items = static_cast<size_t>(n) * h * w * groups;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t it = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; it < items; it += stride) {
        const int g = static_cast<int>(it % groups);
        size_t p = it / groups;
        const int iw = static_cast<int>(p % w);
        p /= w;
        const int ih = static_cast<int>(p % h);
        const size_t b = p / h;
        // Column weights of this input column: ww[k] for ow = lo_w + k (0 outside the window).
        int lo_w, hi_w, lo_h, hi_h;
        upsample_gather_range(iw, w, F, &lo_w, &hi_w);
        upsample_gather_range(ih, h, F, &lo_h, &hi_h);
        float ww[2 * F];
#pragma unroll
        for (int k = 0; k < 2 * F; ++k) ww[k] = lo_w + k <= hi_w ? upsample_gather_weight(lo_w + k, iw, w, F) : 0.0f;
        float acc[W] = {};
        const size_t ch = static_cast<size_t>(g) * W;
        for (int oh = lo_h; oh <= hi_h; ++oh) {
            const float wh = upsample_gather_weight(oh, ih, h, F);
            if (wh == 0.0f) continue;  // the reference drops zero weights too
            const bfloat* row = dy + ((b * oh_n + oh) * ow_n + lo_w) * c + ch;
            if constexpr (kRowLoads) {
                // The row's loads first (columns outside the window, ww = 0, are not read: past the
                // image's right edge they would be out of bounds), then the sums in column order.
                RawW<W> raw[2 * F];
#pragma unroll
                for (int k = 0; k < 2 * F; ++k)
                    raw[k] = ww[k] != 0.0f ? load_raw_w<W>(row + static_cast<size_t>(k) * c) : RawW<W>{};
#pragma unroll
                for (int k = 0; k < 2 * F; ++k) {
                    if (ww[k] == 0.0f) continue;
                    const float wgt = wh * ww[k];  // exact: multiples of 1/(4F^2), at most 8 bits
                    float v[W];
                    unpack_w<W>(raw[k], v);
#pragma unroll
                    for (int j = 0; j < W; ++j) acc[j] = fmaf(wgt, v[j], acc[j]);
                }
            } else {  // each load used before the next is issued: the kernel measured so far
#pragma unroll
                for (int k = 0; k < 2 * F; ++k) {
                    if (ww[k] == 0.0f) continue;
                    const float wgt = wh * ww[k];  // exact: multiples of 1/(4F^2), at most 8 bits
                    float v[W];
                    load_w<W>(row + static_cast<size_t>(k) * c, v);
#pragma unroll
                    for (int j = 0; j < W; ++j) acc[j] = fmaf(wgt, v[j], acc[j]);
                }
            }
        }
        bfloat* d = dx + it * W;
        float cur[W] = {};
        if (accumulate) load_w_rw<W>(d, cur);
#pragma unroll
        for (int j = 0; j < W; ++j) cur[j] += acc[j];
        store_w<W>(d, cur);
    }
}

// ---- launch helpers ----

template <int F, int W>
void launch(const rt::Exec& ex, bool forward, const Shape4& in, size_t blocks, const bf16* src, bf16* dst,
            bool accumulate, bool row_loads) {
    if (forward)
        rt::launch(ex, "upsample_forward_kernel", upsample_forward_kernel<F, W>, static_cast<unsigned>(blocks),
                   kUpsampleThreads, 0, in.n, in.h, in.w, in.c, dev(src), dev(dst));
    else if (row_loads)
        rt::launch(ex, "upsample_backward_kernel", upsample_backward_kernel<F, W, true>, static_cast<unsigned>(blocks),
                   kUpsampleThreads, 0, in.n, in.h, in.w, in.c, dev(src), dev(dst), accumulate);
    else
        rt::launch(ex, "upsample_backward_kernel", upsample_backward_kernel<F, W, false>, static_cast<unsigned>(blocks),
                   kUpsampleThreads, 0, in.n, in.h, in.w, in.c, dev(src), dev(dst), accumulate);
}

// Checks, picks the width and the grid (threads own the pixels of y forward, of dx backward),
// dispatches on (factor, width).
void run(const char* fn, const rt::Exec& ex, bool forward, const Shape4& in, int factor, const bf16* src, bf16* dst,
         bool accumulate = true, bool row_loads = false) {
    rt::check_cuda_exec(fn, ex);
    upsample_check_args(fn, in, factor);
    if (in.n == 0) return;
    rt::check_device_ptr(fn, forward ? "x" : "dy", src, sizeof(bf16));
    rt::check_device_ptr(fn, forward ? "y" : "dx", dst, sizeof(bf16));
    SF_CHECK(static_cast<const void*>(src) != static_cast<const void*>(dst), "%s: the output must not alias the input",
             fn);
    const int width = upsample_width(in.c, reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst));
    const size_t pixels = forward ? in.pixels() * factor * factor : in.pixels();
    const size_t blocks = upsample_blocks(pixels * static_cast<size_t>(in.c / width));
    const bool v = width == 8;
    switch (factor) {
        case 2:
            v ? launch<2, 8>(ex, forward, in, blocks, src, dst, accumulate, row_loads)
              : launch<2, 1>(ex, forward, in, blocks, src, dst, accumulate, row_loads);
            break;
        case 4:
            v ? launch<4, 8>(ex, forward, in, blocks, src, dst, accumulate, row_loads)
              : launch<4, 1>(ex, forward, in, blocks, src, dst, accumulate, row_loads);
            break;
        default:
            v ? launch<8, 8>(ex, forward, in, blocks, src, dst, accumulate, row_loads)
              : launch<8, 1>(ex, forward, in, blocks, src, dst, accumulate, row_loads);
            break;
    }
}

}  // namespace

// ---- launchers ----

void upsample_check_args(const char* fn, const Shape4& in, int factor) {
    SF_CHECK(factor == 2 || factor == 4 || factor == 8, "%s: upsample factor %d not supported (allowed: 2, 4, 8)", fn,
             factor);
    SF_CHECK(in.n >= 0 && in.h > 0 && in.w > 0 && in.c > 0, "%s: bad input shape (%d, %d, %d, %d)", fn, in.n, in.h,
             in.w, in.c);
    // Index arithmetic of the kernels: output sizes and channel offsets in int.
    SF_CHECK(static_cast<long long>(in.h) * factor <= (1 << 30) && static_cast<long long>(in.w) * factor <= (1 << 30),
             "%s: output size %lld x %lld too large", fn, static_cast<long long>(in.h) * factor,
             static_cast<long long>(in.w) * factor);
}

void upsample_bilinear_forward_bf16_cuda(const rt::Exec& ex, const Shape4& in, int factor, const bf16* x, bf16* y) {
    run("upsample_bilinear_forward_bf16_cuda", ex, true, in, factor, x, y);
}

void upsample_bilinear_backward_bf16_cuda(const rt::Exec& ex, const Shape4& in, int factor, const bf16* dy, bf16* dx,
                                          bool accumulate, bool row_loads) {
    run("upsample_bilinear_backward_bf16_cuda", ex, false, in, factor, dy, dx, accumulate, row_loads);
}

}  // namespace kern
