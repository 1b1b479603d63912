// CUDA input preprocessing (kernels/preprocess.h): uint8 NHWC pixels -> bf16 NHWC
// [pixels/255 ..., valid mask], the mask from each sample's letterbox rectangle (pixel (x, y) valid
// iff rect_x0 <= x < rect_x1 and rect_y0 <= y < rect_y1, integer x, y — the rule of preprocess_ref).
// Purely bandwidth-bound (1 or 3 bytes in, 4 or 8 bytes out per pixel), so the main kernel gives
// each thread a group of 4 pixels of one row: one 32-bit load per 4 input bytes and 128-bit stores
// (gray: 4 x (v, m) = 16 bytes; RGB: 4 x (r, g, b, m) = 32 bytes). Shapes or pointers that do not
// allow that (width not a multiple of 4, misaligned buffers) take a one-thread-per-pixel kernel.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/preprocess.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"

namespace kern {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 16384;  // grid-stride loops cover the rest

struct Rect {
    float x0, y0, x1, y1;
};

__device__ __forceinline__ Rect rect_of(const data::Label* __restrict__ labels, unsigned n) {
    const data::Label& l = labels[n];
    return Rect{__ldg(&l.rect_x0), __ldg(&l.rect_y0), __ldg(&l.rect_x1), __ldg(&l.rect_y1)};
}

// IEEE division, as the reference, then round-to-nearest-even to bf16.
__device__ __forceinline__ __nv_bfloat16 scale(unsigned v) {
    return __float2bfloat16_rn(static_cast<float>(v) / 255.0f);
}

__device__ __forceinline__ uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// ---- kernels ----

// One thread per 4 consecutive pixels of a row (requires w % 4 == 0, pixels 4-byte and out 16-byte
// aligned). CP = stored channels (1 or 3). pixels (N,H,W,CP) uint8 -> out (N,H,W,CP+1) bf16.
template <int CP>
__global__ void preprocess_vec4_kernel(unsigned groups, unsigned h, unsigned w, const uint8_t* __restrict__ pixels,
                                       const data::Label* __restrict__ labels, __nv_bfloat16* __restrict__ out) {
    rt::pdl_entry();
    const __nv_bfloat16 one = __float2bfloat16_rn(1.0f), zero = __float2bfloat16_rn(0.0f);
    const unsigned hw = h * w;
    for (unsigned g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
        const unsigned p0 = 4 * g;  // first pixel of the group
        const unsigned n = p0 / hw, y = (p0 - n * hw) / w, x0 = p0 - n * hw - y * w;
        const Rect r = rect_of(labels, n);
        const bool row = r.y0 <= static_cast<float>(y) && static_cast<float>(y) < r.y1;
        __nv_bfloat16 m[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float x = static_cast<float>(x0 + k);
            m[k] = row && r.x0 <= x && x < r.x1 ? one : zero;
        }
        // The group's 4 * CP input bytes as CP 32-bit words, byte j of the group = byte (j % 4) of word j / 4.
        uint32_t in[CP];
        const uint32_t* src = reinterpret_cast<const uint32_t*>(pixels) + static_cast<size_t>(g) * CP;
#pragma unroll
        for (int k = 0; k < CP; ++k) in[k] = __ldg(src + k);
        uint32_t o[2 * (CP + 1)];  // 4 * (CP + 1) bf16 values, packed in pairs
        __nv_bfloat16 vals[4 * (CP + 1)];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            for (int c = 0; c < CP; ++c) {
                const int j = p * CP + c;
                vals[p * (CP + 1) + c] = scale((in[j / 4] >> (8 * (j % 4))) & 0xFFu);
            }
            vals[p * (CP + 1) + CP] = m[p];
        }
#pragma unroll
        for (int k = 0; k < 2 * (CP + 1); ++k) o[k] = pack(vals[2 * k], vals[2 * k + 1]);
        uint4* dst = reinterpret_cast<uint4*>(out) + static_cast<size_t>(g) * ((CP + 1) / 2);
#pragma unroll
        for (int k = 0; k < (CP + 1) / 2; ++k) dst[k] = make_uint4(o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]);
    }
}

// Fallback: one thread per pixel, scalar loads and stores; any width and alignment.
__global__ void preprocess_pixel_kernel(unsigned pixels_total, unsigned h, unsigned w, int cp,
                                        const uint8_t* __restrict__ pixels, const data::Label* __restrict__ labels,
                                        __nv_bfloat16* __restrict__ out) {
    rt::pdl_entry();
    const unsigned hw = h * w;
    for (unsigned p = blockIdx.x * blockDim.x + threadIdx.x; p < pixels_total; p += gridDim.x * blockDim.x) {
        const unsigned n = p / hw, y = (p - n * hw) / w, x = p - n * hw - y * w;
        const Rect r = rect_of(labels, n);
        const float fx = static_cast<float>(x), fy = static_cast<float>(y);
        const bool valid = r.y0 <= fy && fy < r.y1 && r.x0 <= fx && fx < r.x1;
        const uint8_t* in = pixels + static_cast<size_t>(p) * cp;
        __nv_bfloat16* o = out + static_cast<size_t>(p) * (cp + 1);
        for (int c = 0; c < cp; ++c) o[c] = scale(__ldg(in + c));
        o[cp] = __float2bfloat16_rn(valid ? 1.0f : 0.0f);
    }
}

unsigned blocks_for(size_t work) {
    return static_cast<unsigned>(std::min<size_t>((work + kThreads - 1) / kThreads, kMaxBlocks));
}

}  // namespace

// ---- launchers ----

void preprocess_cuda(const rt::Exec& ex, int n, int h, int w, int cp, const uint8_t* pixels, const data::Label* labels,
                     void* out_bf16) {
    SF_CHECK(ex.is_cuda(), "preprocess_cuda: called with a %s Exec", rt::backend_name(ex.backend));
    SF_CHECK(n >= 0 && h >= 0 && w >= 0 && (cp == 1 || cp == 3), "preprocess_cuda: bad shape n=%d h=%d w=%d cp=%d", n,
             h, w, cp);
    const size_t total = static_cast<size_t>(n) * h * w;
    if (total == 0) return;
    // 32-bit indices inside the kernels (a batch of 128 x 256 x 512 is 2^24 pixels).
    SF_CHECK(total * (cp + 1) < (size_t{1} << 32), "preprocess_cuda: %zu pixels x %d channels exceed 32-bit indexing",
             total, cp + 1);
    SF_CHECK(pixels != nullptr && labels != nullptr && out_bf16 != nullptr,
             "preprocess_cuda: null pointer (pixels %p, labels %p, out %p)", static_cast<const void*>(pixels),
             static_cast<const void*>(labels), out_bf16);
    auto* out = static_cast<__nv_bfloat16*>(out_bf16);
    const bool vec =
        w % 4 == 0 && reinterpret_cast<uintptr_t>(pixels) % 4 == 0 && reinterpret_cast<uintptr_t>(out_bf16) % 16 == 0;
    const unsigned uh = static_cast<unsigned>(h), uw = static_cast<unsigned>(w);
    if (vec) {
        const unsigned groups = static_cast<unsigned>(total / 4);
        if (cp == 1)
            rt::launch(ex, "preprocess_vec4_kernel", preprocess_vec4_kernel<1>, blocks_for(groups), kThreads, 0, groups,
                       uh, uw, pixels, labels, out);
        else
            rt::launch(ex, "preprocess_vec4_kernel", preprocess_vec4_kernel<3>, blocks_for(groups), kThreads, 0, groups,
                       uh, uw, pixels, labels, out);
    } else {
        rt::launch(ex, "preprocess_pixel_kernel", preprocess_pixel_kernel, blocks_for(total), kThreads, 0,
                   static_cast<unsigned>(total), uh, uw, cp, pixels, labels, out);
    }
}

}  // namespace kern
