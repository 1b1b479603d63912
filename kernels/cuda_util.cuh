// Device-side helpers shared by the CUDA kernels: 8-wide bf16 <-> fp32 vector accesses, the bf16
// pointer casts of the launchers, and the deterministic finalize of per-chunk partial sums.
// Included by .cu files only (g++ code uses kernels/bf16.h).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"

namespace kern {

using bfloat = __nv_bfloat16;

// ---- launchers: kern::bf16 (CUDA-free headers) -> __nv_bfloat16 ----

inline const bfloat* dev(const bf16* p) { return reinterpret_cast<const bfloat*>(p); }
inline bfloat* dev(bf16* p) { return reinterpret_cast<bfloat*>(p); }

// ---- 8 consecutive bf16 (16-byte aligned) <-> 8 floats, one 128-bit access ----

// The 8 bf16 held in u (lowest address first) as floats.
__device__ __forceinline__ void unpack8(const uint4& u, float (&v)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(h[k]);
        v[2 * k] = f.x;
        v[2 * k + 1] = f.y;
    }
}

// Read-only (non-coherent, __ldg) load: only for data that no thread of the kernel writes.
__device__ __forceinline__ void load8(const bfloat* __restrict__ p, float (&v)[8]) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    unpack8(u, v);
}

// Plain (coherent) load: for data the kernel may also write (in place updates, aliased operands).
// The 16 bytes are copied into a local first: that keeps them one 128-bit load (unpack8 of the
// dereferenced pointer itself compiles to four 32-bit loads).
__device__ __forceinline__ void load8_rw(const bfloat* p, float (&v)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    unpack8(u, v);
}

// Rounds each value to bf16 (nearest even) and stores the 8 with one 128-bit store.
__device__ __forceinline__ void store8(bfloat* p, const float (&v)[8]) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<uint4*>(p) = u;
}

// ---- deterministic finalize of per-chunk partials ----

// out(e, v): dst[e] += v, the usual consumer of finalize_partials.
struct AddTo {
    float* dst;
    __device__ __forceinline__ void operator()(int e, float v) const { dst[e] += v; }
};

// Second pass of the two-pass reductions: part holds `chunks` rows of `entries` partials (chunk
// major, part[k * entries + e]). Block (X, Y), grid ceil(entries / X): entry e = blockIdx.x * X +
// threadIdx.x; lane y adds chunks y, y + Y, ... in order in fp64, then lane 0 adds the Y lane sums
// in order and calls out(e, total rounded to fp32) once per entry. The order depends only on
// (entries, chunks), so the result is bitwise reproducible. Every thread of the block must call it
// (it synchronises).
template <int X, int Y, class Out>
__device__ __forceinline__ void finalize_partials(int entries, int chunks, const float* __restrict__ part,
                                                  const Out& out) {
    __shared__ double sm[Y][X];
    const int e = blockIdx.x * X + threadIdx.x;
    double s = 0.0;
    if (e < entries) {
        for (int k = threadIdx.y; k < chunks; k += Y)
            s += static_cast<double>(part[static_cast<size_t>(k) * entries + e]);
    }
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || e >= entries) return;
    double total = 0.0;
    for (int l = 0; l < Y; ++l) total += sm[l][threadIdx.x];
    out(e, static_cast<float>(total));
}

}  // namespace kern
