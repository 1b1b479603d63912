// Warp-level bf16 tensor-core instructions for the project's own GEMM kernels (kernels/pwconv.cu):
// mma.sync m16n8k16 (bf16 inputs, fp32 accumulators) and ldmatrix (8x8 b16 tiles from shared memory
// into the fragment layout mma.sync expects). Include from .cu files only.
//
// Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k16" with .bf16), lane l of the warp,
// g = l / 4 (the group), t = l % 4 (the thread in the group); each 32-bit register holds two bf16,
// the lower-indexed element in the low half:
//   A (16x16, row-major) a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//                        a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   B (16x8, k x n)      b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   C, D (16x8, fp32)    d[0..1] = D[g][2t..2t+1]  d[2..3] = D[g+8][2t..2t+1]
// ldmatrix .x4 (no transpose): lane l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte
// aligned, in shared memory) and receives r[j] = matrix j's row l / 4, elements 2t and 2t + 1. So a
// row-major A tile whose four 8x8 quarters are addressed (rows 0-7, k 0-7), (rows 8-15, k 0-7),
// (rows 0-7, k 8-15), (rows 8-15, k 8-15) arrives as a[0..3], and a weight tile stored n-major (W[n][k],
// which is B "col-major", the layout of a KRSC 1x1 filter) addressed (n 0-7, k 0-7), (n 0-7, k 8-15),
// (n 8-15, k 0-7), (n 8-15, k 8-15) arrives as the b[0], b[1] of two neighbouring n-blocks of 8.
//
// Numerics on the GPU: the products of bf16 values are exact in fp32; how the tensor core adds the 16
// products of a k-step to the accumulator (order, intermediate width) is not specified by PTX, so a
// result may differ in its last bits from any sequential fp32 sum. The project's tests therefore
// compare a GEMM against an fp64 reference with a tolerance, or on small integers (exact either way),
// and compare two kernels bitwise only when both feed the same fragments to the same instructions.
//
// Under the CPU emulation (SF_EMU, docs/EMULATION.md) both instructions are warp collectives written
// with __shfl_sync: every lane fetches the elements it needs from the lanes that hold them, so the
// fragment layouts above are exercised exactly as on the GPU; the k-step is added in k order, one
// fmaf per product, starting from the accumulator. An emulated pass proves the layouts are used
// consistently by the kernel; only a GPU run proves they are the hardware's (tests/gpu/kernels_pwconv_test.cpp
// against the fp64 reference).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace kern {

#ifdef SF_EMU
namespace mma_emu {
inline float bits(uint32_t w) {
    float f;
    std::memcpy(&f, &w, sizeof(f));
    return f;
}
inline float lo(uint32_t w) { return bits(w << 16); }
inline float hi(uint32_t w) { return bits(w & 0xffff0000u); }
inline uint64_t pack(uint32_t a, uint32_t b) { return static_cast<uint64_t>(a) | (static_cast<uint64_t>(b) << 32); }
}  // namespace mma_emu
#endif

// d += A * B for one 16x8x16 block (fragments as above). Every lane of the warp must call it.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef SF_EMU
    using namespace mma_emu;
    const int l = static_cast<int>(threadIdx.x % 32u);  // blocks are 1-D in the kernels that use it
    const int g = l / 4, t = l % 4;
    float arow[2][16], bcol[2][16];  // A rows g and g + 8; B columns 2t and 2t + 1
    for (int s = 0; s < 4; ++s) {
        const uint64_t a01 = __shfl_sync(0xffffffffu, pack(a[0], a[1]), 4 * g + s);
        const uint64_t a23 = __shfl_sync(0xffffffffu, pack(a[2], a[3]), 4 * g + s);
        uint64_t bb[2];
        for (int j = 0; j < 2; ++j) bb[j] = __shfl_sync(0xffffffffu, pack(b[0], b[1]), 4 * (2 * t + j) + s);
        const uint32_t w[4] = {static_cast<uint32_t>(a01), static_cast<uint32_t>(a01 >> 32),
                               static_cast<uint32_t>(a23), static_cast<uint32_t>(a23 >> 32)};
        for (int r = 0; r < 2; ++r) {  // a[0], a[2]: row g; a[1], a[3]: row g + 8
            arow[r][2 * s] = lo(w[r]);
            arow[r][2 * s + 1] = hi(w[r]);
            arow[r][2 * s + 8] = lo(w[2 + r]);
            arow[r][2 * s + 9] = hi(w[2 + r]);
        }
        for (int j = 0; j < 2; ++j) {
            const uint32_t b0 = static_cast<uint32_t>(bb[j]), b1 = static_cast<uint32_t>(bb[j] >> 32);
            bcol[j][2 * s] = lo(b0);
            bcol[j][2 * s + 1] = hi(b0);
            bcol[j][2 * s + 8] = lo(b1);
            bcol[j][2 * s + 9] = hi(b1);
        }
    }
    for (int r = 0; r < 2; ++r)
        for (int j = 0; j < 2; ++j)
            for (int k = 0; k < 16; ++k) d[2 * r + j] = fmaf(arow[r][k], bcol[j][k], d[2 * r + j]);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: `row` is this lane's row address (shared memory, 16-byte
// aligned). Every lane of the warp must call it.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#ifdef SF_EMU
    const int l = static_cast<int>(threadIdx.x % 32u);
    const uintptr_t mine = reinterpret_cast<uintptr_t>(row);
    for (int j = 0; j < 4; ++j) {
        const uintptr_t src = static_cast<uintptr_t>(__shfl_sync(0xffffffffu, static_cast<uint64_t>(mine), 8 * j + l / 4));
        uint32_t v;
        std::memcpy(&v, reinterpret_cast<const unsigned char*>(src) + 4 * (l % 4), sizeof(v));
        r[j] = v;
    }
#else
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: as ldmatrix_x4, each 8x8 matrix transposed on the way:
// lane l (g = l / 4, t = l % 4) receives r[j] = (S_j[2t][g], S_j[2t + 1][g]), S_j the matrix whose row q lane
// 8j + q addresses. So a tile stored [k][m] (rows k, m contiguous: dy or x in their natural [row][channel]
// layout, w [cout][cin]) arrives as the fragment of its transpose: an A operand (m x k) whose quarters are
// addressed (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15) from stored rows k, or the
// b[0], b[1] of two n-blocks from a B (k x n) stored k-major, addressed (k 0-7, n 0-7), (k 8-15, n 0-7),
// (k 0-7, n 8-15), (k 8-15, n 8-15). Every lane of the warp must call it.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#ifdef SF_EMU
    const int l = static_cast<int>(threadIdx.x % 32u);
    const int g = l / 4, t = l % 4;
    const uint64_t mine = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(row));
    for (int j = 0; j < 4; ++j) {
        const uintptr_t s0 = static_cast<uintptr_t>(__shfl_sync(0xffffffffu, mine, 8 * j + 2 * t));
        const uintptr_t s1 = static_cast<uintptr_t>(__shfl_sync(0xffffffffu, mine, 8 * j + 2 * t + 1));
        uint16_t lo, hi;
        std::memcpy(&lo, reinterpret_cast<const unsigned char*>(s0) + 2 * g, sizeof(lo));
        std::memcpy(&hi, reinterpret_cast<const unsigned char*>(s1) + 2 * g, sizeof(hi));
        r[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
#else
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// Two floats rounded to bf16 (nearest even) in one 32-bit word, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
}

// The two bf16 of a word (pack_bf16x2's layout) widened to fp32.
__device__ __forceinline__ float bf16x2_lo(uint32_t u) {
#ifdef SF_EMU
    return mma_emu::lo(u);
#else
    return __uint_as_float(u << 16);
#endif
}
__device__ __forceinline__ float bf16x2_hi(uint32_t u) {
#ifdef SF_EMU
    return mma_emu::hi(u);
#else
    return __uint_as_float(u & 0xffff0000u);
#endif
}

}  // namespace kern
