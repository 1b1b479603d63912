// The row GEMM of the pointwise (1x1) convolution's forward and backward-data (kernels/pwconv.cu's header
// comment: tiles, staging, prologue, epilogue) and the statistics epilogue's finalize kernel; included by
// kernels/pwconv.cu only (its launchers instantiate them; kernels/bn_act_rows.cuh is the same arrangement).
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/bn_stats_chunks.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/pwconv_cuda.h"
#include "kernels/pwconv_device.cuh"
#include "runtime/launch.cuh"

namespace kern {
namespace {

using pw::kPitch;  // kernels/pwconv_device.cuh: what the row GEMM shares with the wgrad
using pw::PwA;
using pw::PwStage;

constexpr int kWarps = kPwThreads / 32;
constexpr int kAVecs = kPwTileM * kPwTileK / 8 / kPwThreads;  // 16-byte x vectors per thread per step: 2

// What the row GEMM's epilogue gathers from the values it stores, per output column, besides storing them.
enum class PwEpi {
    None,
    Stats,   // the forward's: per-chunk shifted sums and sums of squares (the following BN's statistics)
    BnGrad,  // the dgrad's: per-chunk sum g and sum g * xhat of the BN whose output gradient it stores (the
             // producer's BN before this conv), g = dx * act'(z) from that BN's input at the same position
};

// The row GEMM of the forward and the dgrad: y[rows][n] (=, or += with kAccum) a[rows][k] * B[k][n] with
// B = w^T for the forward (w[n][k], kTransW false) and B = w for the dgrad (w[k][n], kTransW true: staged
// transposed into the same shared-memory layout). Grid (n / BN, chunks), block 256 (the header comment).
// kE == BnGrad (the dgrad only): AE is then the producer BN's activation and ep its per-channel inputs
// (gamma, beta, mean, invstd: save_*; x: its input, the layout of y); with a plain A staging AE is A, with the
// BN-backward staging (kA == Backward: the following BN's dx formed on load, activation A) both run, each
// with its own BN and activation.
template <int BN, PwA kA, Act A, bool kTransW, bool kAccum, PwEpi kE, Act AE = A>
__global__ void __launch_bounds__(kPwThreads, 2)
    pwconv_rows_kernel(int rows, int k, int n, long long tiles, int chunks, const bfloat* __restrict__ a,
                       const bfloat* __restrict__ w, bfloat* __restrict__ y, PwStage st, PwStage ep,
                       float* __restrict__ part) {
    rt::pdl_entry();
    constexpr bool kStats = kE == PwEpi::Stats, kBnGrad = kE == PwEpi::BnGrad, kRed = kE != PwEpi::None;
    static_assert(!kBnGrad || (kA != PwA::Apply && kTransW), "the BN-backward epilogue is the dgrad's");
    static_assert(kBnGrad || AE == A, "AE is the BN-backward epilogue's activation");
    constexpr int NF = BN / 8;                                     // accumulator fragments per warp (8 columns each)
    constexpr int kWVecs = BN * kPwTileK / 8;                      // 16-byte w vectors per step
    constexpr int kWPer = (kWVecs + kPwThreads - 1) / kPwThreads;  // 1
    constexpr bool kBwd = kA == PwA::Backward;
    constexpr int kChan = kA == PwA::Plain ? 1 : kPwMaxPrologueK;  // per-channel constants kept
    static_assert(kWVecs <= kPwThreads, "one w vector per thread at most");
    __shared__ __align__(16) bfloat as[2][kPwTileM][kPitch];
    __shared__ __align__(16) bfloat ws[2][BN][kPitch];
    __shared__ float c_mean[kChan], c_scale[kChan], c_beta[kChan];
    __shared__ float c_inv[kBwd ? kChan : 1], c_mg[kBwd ? kChan : 1], c_mgx[kBwd ? kChan : 1];
    __shared__ float shift_s[kStats ? BN : 1];
    __shared__ float red[2][kRed ? kWarps : 1][kRed ? BN : 1];
    __shared__ float e_mean[kBnGrad ? BN : 1], e_inv[kBnGrad ? BN : 1], e_scale[kBnGrad ? BN : 1],
        e_beta[kBnGrad ? BN : 1];

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int n0 = static_cast<int>(blockIdx.x) * BN;
    const int chunk = static_cast<int>(blockIdx.y);
    const long long tile_lo = pwconv_tile_begin(tiles, chunks, chunk),
                    tile_hi = pwconv_tile_begin(tiles, chunks, chunk + 1);
    const int ksteps = k / kPwTileK;
    const long long steps = (tile_hi - tile_lo) * ksteps;

    if constexpr (kA != PwA::Plain) {
        // The per-channel constants: load_bn_apply8's (Apply) or load_chan8's and the coefficients
        // (Backward), computed once per block.
        for (int c = tid; c < k; c += kPwThreads) {
            if constexpr (kA == PwA::Apply)
                pw::stage_apply_consts(st, c, c, c_mean, c_scale, c_beta);
            else
                pw::stage_backward_consts(st, c, c, k, c_mean, c_inv, c_scale, c_beta, c_mg, c_mgx);
        }
        __syncthreads();
    }
    if constexpr (kBnGrad) {  // the producer BN's constants of this block's columns, as load_chan8 forms them
        for (int c = tid; c < BN; c += kPwThreads) {
            const int ch = n0 + c;
            e_inv[c] = __ldg(ep.invstd + ch);
            e_scale[c] = __ldg(ep.gamma + ch) * e_inv[c];
            e_mean[c] = __ldg(ep.mean + ch);
            e_beta[c] = __ldg(ep.beta + ch);
        }
        __syncthreads();
    }

    // This thread's share of a step: a vectors kAVecs (rows tid/4 + 64i, k offset 8*(tid%4)), one w vector.
    const int a_row = tid / 4, a_k = 8 * (tid % 4);
    uint4 ra[kAVecs], rx[kBwd ? kAVecs : 1], rw[kWPer];
    auto load_step = [&](long long s) {
        const long long tile = tile_lo + s / ksteps;
        const int kk = static_cast<int>(s % ksteps) * kPwTileK;
#pragma unroll
        for (int i = 0; i < kAVecs; ++i) {
            const long long row = tile * kPwTileM + a_row + i * (kPwTileM / kAVecs);
            const size_t off = static_cast<size_t>(row) * k + kk + a_k;
            ra[i] = row < rows ? __ldg(reinterpret_cast<const uint4*>(a + off)) : make_uint4(0, 0, 0, 0);
            if constexpr (kBwd)
                rx[i] = row < rows ? __ldg(reinterpret_cast<const uint4*>(st.x + off)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < kWPer; ++i) {
            const int v = tid + i * kPwThreads;
            if (v < kWVecs) {
                // forward: row n0 + v/4 of w[n][k], k offset 8*(v%4); dgrad: row kk + v/(BN/8) of w[k][n],
                // n offset 8*(v%(BN/8)).
                const size_t off = kTransW ? static_cast<size_t>(kk + v / (BN / 8)) * n + n0 + 8 * (v % (BN / 8))
                                           : static_cast<size_t>(n0 + v / 4) * k + kk + 8 * (v % 4);
                rw[i] = __ldg(reinterpret_cast<const uint4*>(w + off));
            }
        }
    };
    auto store_step = [&](long long s, int buf) {
        const int kk = static_cast<int>(s % ksteps) * kPwTileK;
#pragma unroll
        for (int i = 0; i < kAVecs; ++i) {
            uint4 u = ra[i];
            if constexpr (kA != PwA::Plain) {
                float v[8];
                unpack8(u, v);
                if constexpr (kA == PwA::Apply) {
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int c = kk + a_k + j;
                        v[j] = act_fwd<A>(fmaf(v[j] - c_mean[c], c_scale[c], c_beta[c]));
                    }
                } else {
                    float xb[8];
                    unpack8(rx[i], xb);
                    const int c = kk + a_k;  // the dx pass's per-channel values, from shared memory
                    pw::bn_dx8<A>(v, xb, c_mean + c, c_inv + c, c_scale + c, c_beta + c, c_mg + c, c_mgx + c);
                }
                u = pw::pack8_bf16(v);
            }
            *reinterpret_cast<uint4*>(&as[buf][a_row + i * (kPwTileM / kAVecs)][a_k]) = u;
        }
#pragma unroll
        for (int i = 0; i < kWPer; ++i) {
            const int v = tid + i * kPwThreads;
            if (v < kWVecs) {
                if constexpr (kTransW) {  // 8 columns of one k row: one element into each of 8 n rows
                    const int kr = v / (BN / 8), nc = 8 * (v % (BN / 8));
                    const bfloat* e = reinterpret_cast<const bfloat*>(&rw[i]);
#pragma unroll
                    for (int j = 0; j < 8; ++j) ws[buf][nc + j][kr] = e[j];
                } else {
                    *reinterpret_cast<uint4*>(&ws[buf][v / 4][8 * (v % 4)]) = rw[i];
                }
            }
        }
    };

    float acc[NF][4];
#pragma unroll
    for (int f = 0; f < NF; ++f) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
    // Stats: shift, shifted sum, shifted sum of squares; BnGrad: s1 = sum g, s2 = sum g * xhat.
    float sh[NF][2], s1[NF][2], s2[NF][2];
#pragma unroll
    for (int f = 0; f < NF; ++f)
        for (int j = 0; j < 2; ++j) sh[f][j] = s1[f][j] = s2[f][j] = 0.0f;

    if (steps > 0) {
        load_step(0);
        store_step(0, 0);
    }
    __syncthreads();
    for (long long s = 0; s < steps; ++s) {
        const int buf = static_cast<int>(s & 1);
        if (s + 1 < steps) load_step(s + 1);
#pragma unroll
        for (int kk = 0; kk < kPwTileK; kk += 16) {
            uint32_t af[4];
            ldmatrix_x4(af, &as[buf][16 * warp + (lane % 8) + 8 * ((lane / 8) % 2)][kk + 8 * (lane / 16)]);
#pragma unroll
            for (int fp = 0; fp < NF / 2; ++fp) {
                uint32_t b4[4];
                ldmatrix_x4(b4, &ws[buf][16 * fp + (lane % 8) + 8 * (lane / 16)][kk + 8 * ((lane / 8) % 2)]);
                const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
                mma_bf16_16816(acc[2 * fp], af, b0);
                mma_bf16_16816(acc[2 * fp + 1], af, b1);
            }
        }
        if (s % ksteps == ksteps - 1) {  // the tile's last step: its epilogue
            const long long tile = tile_lo + s / ksteps;
            const long long ra_row = tile * kPwTileM + 16 * warp + g, rb_row = ra_row + 8;
            uint32_t u[NF][2];
#pragma unroll
            for (int f = 0; f < NF; ++f) {
                const int col = n0 + 8 * f + 2 * t;
                uint32_t* pa = reinterpret_cast<uint32_t*>(y + ra_row * n + col);
                uint32_t* pb = reinterpret_cast<uint32_t*>(y + rb_row * n + col);
                if constexpr (kAccum) {  // y += the sum: y read once, one rounding
                    const uint32_t oa = ra_row < rows ? *pa : 0u, ob = rb_row < rows ? *pb : 0u;
                    u[f][0] = pack_bf16x2(bf16x2_lo(oa) + acc[f][0], bf16x2_hi(oa) + acc[f][1]);
                    u[f][1] = pack_bf16x2(bf16x2_lo(ob) + acc[f][2], bf16x2_hi(ob) + acc[f][3]);
                } else {
                    u[f][0] = pack_bf16x2(acc[f][0], acc[f][1]);
                    u[f][1] = pack_bf16x2(acc[f][2], acc[f][3]);
                }
                if (ra_row < rows) *pa = u[f][0];
                if (rb_row < rows) *pb = u[f][1];
                acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
            }
            if constexpr (kStats) {
                if (tile == tile_lo) {  // the block's shift: its first row's stored values (always a valid row)
                    if (warp == 0 && g == 0) {
#pragma unroll
                        for (int f = 0; f < NF; ++f) {
                            shift_s[8 * f + 2 * t] = bf16x2_lo(u[f][0]);
                            shift_s[8 * f + 2 * t + 1] = bf16x2_hi(u[f][0]);
                        }
                    }
                    __syncthreads();
#pragma unroll
                    for (int f = 0; f < NF; ++f)
                        for (int j = 0; j < 2; ++j) sh[f][j] = shift_s[8 * f + 2 * t + j];
                }
#pragma unroll
                for (int f = 0; f < NF; ++f) {
                    if (ra_row < rows) {
                        const float d0 = bf16x2_lo(u[f][0]) - sh[f][0], d1 = bf16x2_hi(u[f][0]) - sh[f][1];
                        s1[f][0] += d0;
                        s2[f][0] = fmaf(d0, d0, s2[f][0]);
                        s1[f][1] += d1;
                        s2[f][1] = fmaf(d1, d1, s2[f][1]);
                    }
                    if (rb_row < rows) {
                        const float d0 = bf16x2_lo(u[f][1]) - sh[f][0], d1 = bf16x2_hi(u[f][1]) - sh[f][1];
                        s1[f][0] += d0;
                        s2[f][0] = fmaf(d0, d0, s2[f][0]);
                        s1[f][1] += d1;
                        s2[f][1] = fmaf(d1, d1, s2[f][1]);
                    }
                }
            }
            if constexpr (kBnGrad) {  // the stored dx (u) and the BN's input at the same two columns
#pragma unroll
                for (int f = 0; f < NF; ++f) {
                    const int cl = 8 * f + 2 * t;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const long long row = h ? rb_row : ra_row;
                        if (row >= rows) continue;
                        const uint32_t xb = __ldg(reinterpret_cast<const uint32_t*>(ep.x + row * n + n0 + cl));
                        bn_grad_add<AE>(bf16x2_lo(xb), bf16x2_lo(u[f][h]), e_mean[cl], e_inv[cl], e_scale[cl],
                                        e_beta[cl], s1[f][0], s2[f][0]);
                        bn_grad_add<AE>(bf16x2_hi(xb), bf16x2_hi(u[f][h]), e_mean[cl + 1], e_inv[cl + 1],
                                        e_scale[cl + 1], e_beta[cl + 1], s1[f][1], s2[f][1]);
                    }
                }
            }
        }
        if (s + 1 < steps) store_step(s + 1, buf ^ 1);
        __syncthreads();
    }

    if constexpr (kRed) {
        // Lanes of one column (the 8 groups g) by a fixed butterfly; lanes 0-3 hold the warp's sums.
#pragma unroll
        for (int f = 0; f < NF; ++f)
            for (int j = 0; j < 2; ++j)
                for (int off = 4; off < 32; off *= 2) {
                    s1[f][j] += __shfl_xor_sync(0xffffffffu, s1[f][j], off);
                    s2[f][j] += __shfl_xor_sync(0xffffffffu, s2[f][j], off);
                }
        if (g == 0) {
#pragma unroll
            for (int f = 0; f < NF; ++f)
                for (int j = 0; j < 2; ++j) {
                    red[0][warp][8 * f + 2 * t + j] = s1[f][j];
                    red[1][warp][8 * f + 2 * t + j] = s2[f][j];
                }
        }
        __syncthreads();
        if (tid < BN) {
            float a1 = 0.0f, a2 = 0.0f;
            for (int wi = 0; wi < kWarps; ++wi) {
                a1 += red[0][wi][tid];
                a2 += red[1][wi][tid];
            }
            const size_t col = static_cast<size_t>(n0 + tid);
            if constexpr (kStats) {
                part[static_cast<size_t>(chunk) * n + col] = shift_s[tid];
                part[static_cast<size_t>(chunks + chunk) * n + col] = a1;
                part[static_cast<size_t>(2 * chunks + chunk) * n + col] = a2;
            } else {  // BnGrad: sum g, then sum g * xhat
                part[static_cast<size_t>(chunk) * n + col] = a1;
                part[static_cast<size_t>(chunks + chunk) * n + col] = a2;
            }
        }
    }
}

// The statistics' second pass (kernels/bn_stats_chunks.cuh). Grid finalize_blocks, block (32, 8): a chunk
// holds the rows of its tiles that exist.
__global__ void pwconv_stats_finalize_kernel(int rows, int n, long long tiles, int chunks,
                                             const float* __restrict__ part, float* __restrict__ save_mean,
                                             float* __restrict__ save_invstd, float* __restrict__ running_mean,
                                             float* __restrict__ running_var, double momentum, double eps) {
    rt::pdl_entry();
    const auto count_of = [&](int c) {
        const long long lo = pwconv_tile_begin(tiles, chunks, c) * kPwTileM;
        const long long end = pwconv_tile_begin(tiles, chunks, c + 1) * kPwTileM;
        return static_cast<double>((end < rows ? end : rows) - lo);
    };
    bn_chunk_stats_finalize<kPwFinalizeX, kPwFinalizeY>(n, chunks, part, static_cast<double>(rows), count_of, save_mean,
                                                        save_invstd, running_mean, running_var, momentum, eps);
}

}  // namespace
}  // namespace kern
