// The statistics epilogues' second pass (kernels/bn_fusion.h, BnStatsOut): a conv's forward wrote, per
// chunk of its output (a chunk of row tiles in the pointwise conv, a staged spatial block in the depthwise
// conv) and per channel, the chunk's shift k (one of its own stored values), its shifted sum sum(v - k)
// and its shifted sum of squares sum((v - k)^2), as fp32 planes part[0..chunks), part[chunks..2 chunks),
// part[2 chunks..3 chunks) of n channels each. This merges them per channel in fp64, in a fixed order, onto
// chunk 0's shift k0 (a chunk with shift kc, sums a1, a2 over nb values: d = kc - k0, sum(v - k0) =
// a1 + nb d, sum((v - k0)^2) = a2 + d (2 a1 + nb d)), then writes the statistics as bn_stats_train does
// (bn_stats_write). Included by those .cu files only.
#pragma once
#include "kernels/bn_act_device.cuh"

namespace kern {

// Block (kX, kY): channel blockIdx.x * kX + threadIdx.x, lane y merging chunks y, y + kY, ... in order;
// then lane 0 adds the kY lane sums in order and writes. count_of(c): the values in chunk c (a double);
// total: their sum over the chunks. Every thread of the block must call it.
template <int kX, int kY, class Count>
__device__ __forceinline__ void bn_chunk_stats_finalize(int n, int chunks, const float* __restrict__ part,
                                                        double total, const Count& count_of,
                                                        float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                                        float* __restrict__ running_mean,
                                                        float* __restrict__ running_var, double momentum, double eps) {
    __shared__ double sm[2][kY][kX];
    const int ch = static_cast<int>(blockIdx.x) * kX + static_cast<int>(threadIdx.x);
    double s0 = 0.0, s1 = 0.0, k0 = 0.0;
    if (ch < n) {
        k0 = static_cast<double>(part[ch]);
#pragma unroll 4
        for (int c = static_cast<int>(threadIdx.y); c < chunks; c += kY) {
            const double nb = count_of(c);
            const double d = static_cast<double>(part[static_cast<size_t>(c) * n + ch]) - k0;
            const double a1 = static_cast<double>(part[static_cast<size_t>(chunks + c) * n + ch]);
            const double a2 = static_cast<double>(part[static_cast<size_t>(2 * chunks + c) * n + ch]);
            s0 += a1 + nb * d;
            s1 += a2 + d * (2.0 * a1 + nb * d);
        }
    }
    sm[0][threadIdx.y][threadIdx.x] = s0;
    sm[1][threadIdx.y][threadIdx.x] = s1;
    __syncthreads();
    if (threadIdx.y != 0 || ch >= n) return;
    s0 = 0.0;
    s1 = 0.0;
    for (int l = 0; l < kY; ++l) {
        s0 += sm[0][l][threadIdx.x];
        s1 += sm[1][l][threadIdx.x];
    }
    bn_stats_write(
        ch, total, [&] { return k0; }, s0, s1, save_mean, save_invstd, running_mean, running_var, momentum, eps);
}

}  // namespace kern
