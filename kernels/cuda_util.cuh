// Device-side helpers shared by the CUDA kernels: 8-, 4- and 2-wide bf16 <-> fp32 vector accesses,
// the bf16 pointer casts of the launchers, and the deterministic finalize of per-chunk partial sums.
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

// ---- V consecutive bf16 (aligned to 2V bytes) <-> V floats, one access (V = 8, 4, 2: 128, 64, 32 bits) ----

template <int V>
struct BfRaw;
template <>
struct BfRaw<8> {
    using T = uint4;
};
template <>
struct BfRaw<4> {
    using T = uint2;
};
template <>
struct BfRaw<2> {
    using T = unsigned int;
};

// The V bf16 held in u (lowest address first) as floats.
template <int V>
__device__ __forceinline__ void unpackv(const typename BfRaw<V>::T& u, float (&v)[V]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < V / 2; ++k) {
        const float2 f = __bfloat1622float2(h[k]);
        v[2 * k] = f.x;
        v[2 * k + 1] = f.y;
    }
}

// Read-only (non-coherent, __ldg) load: only for data that no thread of the kernel writes.
template <int V>
__device__ __forceinline__ void loadv(const bfloat* __restrict__ p, float (&v)[V]) {
    using T = typename BfRaw<V>::T;
    const T u = __ldg(reinterpret_cast<const T*>(p));
    unpackv<V>(u, v);
}

// Plain (coherent) load: for data the kernel may also write (in place updates, aliased operands).
// The bytes are copied into a local first: that keeps them one vector load (unpacking the
// dereferenced pointer itself compiles to 32-bit loads).
template <int V>
__device__ __forceinline__ void loadv_rw(const bfloat* p, float (&v)[V]) {
    using T = typename BfRaw<V>::T;
    const T u = *reinterpret_cast<const T*>(p);
    unpackv<V>(u, v);
}

// Rounds each value to bf16 (nearest even) and stores the V with one access.
template <int V>
__device__ __forceinline__ void storev(bfloat* p, const float (&v)[V]) {
    using T = typename BfRaw<V>::T;
    T u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < V / 2; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<T*>(p) = u;
}

// The 8-wide (128-bit) accesses most kernels use.
__device__ __forceinline__ void unpack8(const uint4& u, float (&v)[8]) { unpackv<8>(u, v); }
__device__ __forceinline__ void load8(const bfloat* __restrict__ p, float (&v)[8]) { loadv<8>(p, v); }
__device__ __forceinline__ void load8_rw(const bfloat* p, float (&v)[8]) { loadv_rw<8>(p, v); }
__device__ __forceinline__ void store8(bfloat* p, const float (&v)[8]) { storev<8>(p, v); }

// ---- issuing a batch of loads together (tying) ----
// ptxas schedules a thread's independent loads near their uses to keep few registers live, not knowing
// that a load takes ~1,000 cycles; a kernel that wants N loads in flight ties the first value it uses to
// all of them: first ^= (xor of the others' words) & zero, with a zero the compiler cannot fold. The
// value does not change; its use now waits for every load, so all of them are issued before it
// (tools/sass_loads.py shows the batches).

// 0 for the positive count every caller passes (a kernel argument the plan checked), as a value the
// compiler cannot prove to be 0.
__device__ __forceinline__ unsigned hidden_zero(int positive) { return static_cast<unsigned>(positive >> 31); }

// The first 32-bit word of a raw vector (uint4, uint2 or one unsigned: 8, 4 or 2 bf16).
template <class T>
__device__ __forceinline__ unsigned word0(const T& u) {
    if constexpr (sizeof(T) == 4) return u;
    else return u.x;
}

// t xor-ed into every 32-bit word of a raw vector.
template <class T>
__device__ __forceinline__ void xor_words(T& u, unsigned t) {
    if constexpr (sizeof(T) == 4) {
        u ^= t;
    } else {
        u.x ^= t;
        u.y ^= t;
        if constexpr (sizeof(T) == 16) {
            u.z ^= t;
            u.w ^= t;
        }
    }
}

// ---- deterministic finalize of per-chunk partials ----

// First row of chunk k when `rows` rows are split into `chunks` row chunks (chunk k is rows
// [chunk_begin(k), chunk_begin(k + 1))): an even split, every chunk non-empty when chunks <= rows.
// The first pass of every two-pass reduction uses it, so its chunks depend on (rows, chunks) only.
__device__ __forceinline__ size_t chunk_begin(size_t rows, int chunks, int k) {
    return rows * static_cast<size_t>(k) / static_cast<size_t>(chunks);
}

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
