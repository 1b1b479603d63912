// The add kernels of the cuDNN convolutions' scratch variants (kernels/conv_cudnn.h): when an engine
// cannot accumulate into the destination itself (beta = 1), it writes into a scratch region of the
// workspace and one of these adds the scratch into the destination. Element-wise, fp32 math, one
// rounding to the destination type, no reductions: results depend on nothing but the inputs.
// Shape: 16-byte vector accesses in a grid-stride loop (conv_add_geometry), the n % vec tail by the
// first threads of block 0.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/conv_cudnn.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

using bfloat = __nv_bfloat16;

// ---- kernels ----

// dst = bf16(float(dst) + float(src)), 8 bf16 (one uint4) per vector.
__global__ void conv_add_bf16_kernel(bfloat* __restrict__ dst, const bfloat* __restrict__ src, size_t vectors,
                                     size_t tail) {
    rt::pdl_entry();
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t v = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
        uint4 a = reinterpret_cast<const uint4*>(dst)[v];
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(src) + v);
        __nv_bfloat162* ha = reinterpret_cast<__nv_bfloat162*>(&a);
        const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 fa = __bfloat1622float2(ha[k]), fb = __bfloat1622float2(hb[k]);
            ha[k] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
        }
        reinterpret_cast<uint4*>(dst)[v] = a;
    }
    if (blockIdx.x == 0 && threadIdx.x < tail) {
        const size_t i = vectors * 8 + threadIdx.x;
        dst[i] = __float2bfloat16_rn(__bfloat162float(dst[i]) + __bfloat162float(src[i]));
    }
}

// dst += src, 4 floats (one float4) per vector.
__global__ void conv_add_f32_kernel(float* __restrict__ dst, const float* __restrict__ src, size_t vectors,
                                    size_t tail) {
    rt::pdl_entry();
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t v = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
        float4 a = reinterpret_cast<const float4*>(dst)[v];
        const float4 b = __ldg(reinterpret_cast<const float4*>(src) + v);
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        reinterpret_cast<float4*>(dst)[v] = a;
    }
    if (blockIdx.x == 0 && threadIdx.x < tail) {
        const size_t i = vectors * 4 + threadIdx.x;
        dst[i] += src[i];
    }
}

// dst += float(src): 8 bf16 (one uint4) into 8 floats (two float4) per vector.
__global__ void conv_add_f32_bf16_kernel(float* __restrict__ dst, const bfloat* __restrict__ src, size_t vectors,
                                         size_t tail) {
    rt::pdl_entry();
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t v = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(src) + v);
        const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&b);
        float4* d = reinterpret_cast<float4*>(dst) + 2 * v;
        float4 lo = d[0], hi = d[1];
        const float2 f0 = __bfloat1622float2(hb[0]), f1 = __bfloat1622float2(hb[1]);
        const float2 f2 = __bfloat1622float2(hb[2]), f3 = __bfloat1622float2(hb[3]);
        lo.x += f0.x;
        lo.y += f0.y;
        lo.z += f1.x;
        lo.w += f1.y;
        hi.x += f2.x;
        hi.y += f2.y;
        hi.z += f3.x;
        hi.w += f3.y;
        d[0] = lo;
        d[1] = hi;
    }
    if (blockIdx.x == 0 && threadIdx.x < tail) {
        const size_t i = vectors * 8 + threadIdx.x;
        dst[i] += __bfloat162float(src[i]);
    }
}

// False when there is nothing to do (n == 0); throws for a CPU Exec or bad pointers.
bool check_args(const rt::Exec& ex, const void* dst, const void* src, size_t n, const char* fn) {
    rt::check_cuda_exec(fn, ex);
    if (n == 0) return false;
    SF_CHECK(rt::aligned(dst, 16) && rt::aligned(src, 16),
             "%s: dst %p and src %p must be non-null, 16-byte aligned device pointers", fn, dst, src);
    return true;
}

}  // namespace

// ---- launchers ----

void conv_add_bf16(const rt::Exec& ex, bf16* dst, const bf16* src, size_t n) {
    if (!check_args(ex, dst, src, n, "conv_add_bf16")) return;
    const ConvAddGeometry g = conv_add_geometry(n, 8);
    rt::launch(ex, "conv_add_bf16_kernel", conv_add_bf16_kernel, g.blocks, kConvAddThreads, 0,
               reinterpret_cast<bfloat*>(dst), reinterpret_cast<const bfloat*>(src), g.vectors, g.tail);
}

void conv_add_f32(const rt::Exec& ex, float* dst, const float* src, size_t n) {
    if (!check_args(ex, dst, src, n, "conv_add_f32")) return;
    const ConvAddGeometry g = conv_add_geometry(n, 4);
    rt::launch(ex, "conv_add_f32_kernel", conv_add_f32_kernel, g.blocks, kConvAddThreads, 0, dst, src, g.vectors,
               g.tail);
}

void conv_add_f32_bf16(const rt::Exec& ex, float* dst, const bf16* src, size_t n) {
    if (!check_args(ex, dst, src, n, "conv_add_f32_bf16")) return;
    const ConvAddGeometry g = conv_add_geometry(n, 8);
    rt::launch(ex, "conv_add_f32_bf16_kernel", conv_add_f32_bf16_kernel, g.blocks, kConvAddThreads, 0, dst,
               reinterpret_cast<const bfloat*>(src), g.vectors, g.tail);
}

}  // namespace kern
