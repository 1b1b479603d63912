// Pointwise (1x1) convolution forward and backward-data on bf16 tensor cores, with the producer's
// BatchNorm + activation applied on load (prologue) and the consumer's BatchNorm statistics gathered in the
// epilogue (kernels/pwconv_cuda.h, docs/KERNELS_PWCONV.md); the backward-filter is kernels/pwconv_wgrad.cu.
//
// A GEMM y[rows][n] = x[rows][k] * w[n][k]^T. Grid (n / BN column blocks, chunks); block 256 threads,
// 8 warps. A block owns BN output channels and a contiguous range of 128-row tiles (its chunk), and
// walks (tile, 32-wide k-step) pairs in order: each step's x rows and w rows are staged in shared
// memory (80-byte row pitch: the ldmatrix rows of a warp fall in distinct banks), double-buffered, the
// next step's global loads issued before the current step's mma so that they are in flight during it.
// The prologue is applied to the x values between the register and the shared-memory copy, with
// exactly bn_act_apply's arithmetic (kernels/bn_act_device.cuh). Warp w computes rows 16w..16w+15 of the
// tile and all BN columns: BN / 8 accumulator fragments, two mma k-steps per staged step.
// Epilogue, per tile: the accumulators rounded to bf16 and stored (rows past the end are not), and with
// statistics each thread adds its stored values, shifted by the block's own first row, to per-column
// fp32 sums; at the end of the chunk the block reduces them in a fixed order (lanes by a butterfly,
// warps in order) and writes (shift, sum, sum of squares) per column. The finalize kernel merges the
// chunks in fp64 in order (Chan's shift change), then writes the statistics as bn_stats_train does.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/bn_stats_chunks.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/pwconv_cuda.h"
#include "kernels/pwconv_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

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
    constexpr int NF = BN / 8;                        // accumulator fragments per warp (8 columns each)
    constexpr int kWVecs = BN * kPwTileK / 8;         // 16-byte w vectors per step
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
            if constexpr (kA == PwA::Apply) {
                const float inv = st.eval ? static_cast<float>(1.0 / sqrt(static_cast<double>(__ldg(st.invstd + c)) + st.eps))
                                          : __ldg(st.invstd + c);
                c_scale[c] = __ldg(st.gamma + c) * inv;
            } else {
                c_inv[c] = __ldg(st.invstd + c);
                c_scale[c] = __ldg(st.gamma + c) * c_inv[c];
                c_mg[c] = __ldg(st.coef + c);
                c_mgx[c] = __ldg(st.coef + k + c);
            }
            c_mean[c] = __ldg(st.mean + c);
            c_beta[c] = __ldg(st.beta + c);
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
            if constexpr (kBwd) rx[i] = row < rows ? __ldg(reinterpret_cast<const uint4*>(st.x + off)) : make_uint4(0, 0, 0, 0);
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
                    Chan8 p;  // the dx pass's per-channel values, from shared memory
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int c = kk + a_k + j;
                        p.mean[j] = c_mean[c];
                        p.invstd[j] = c_inv[c];
                        p.scale[j] = c_scale[c];
                        p.beta[j] = c_beta[c];
                    }
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int c = kk + a_k + j;
                        v[j] = bn_act_dx_value<A>(p, j, xb[j], v[j], c_mg[c], c_mgx[c]);
                    }
                }
                u.x = pack_bf16x2(v[0], v[1]);
                u.y = pack_bf16x2(v[2], v[3]);
                u.z = pack_bf16x2(v[4], v[5]);
                u.w = pack_bf16x2(v[6], v[7]);
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
__global__ void pwconv_stats_finalize_kernel(int rows, int n, long long tiles, int chunks, const float* __restrict__ part,
                                             float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                             float* __restrict__ running_mean, float* __restrict__ running_var,
                                             double momentum, double eps) {
    rt::pdl_entry();
    const auto count_of = [&](int c) {
        const long long lo = pwconv_tile_begin(tiles, chunks, c) * kPwTileM;
        const long long end = pwconv_tile_begin(tiles, chunks, c + 1) * kPwTileM;
        return static_cast<double>((end < rows ? end : rows) - lo);
    };
    bn_chunk_stats_finalize<kPwFinalizeX, kPwFinalizeY>(n, chunks, part, static_cast<double>(rows), count_of, save_mean,
                                                        save_invstd, running_mean, running_var, momentum, eps);
}

// Empty when supported, else what is not, with its value.
std::string unsupported_reason(const ConvShape& s) {
    if (s.k != 1) return rt::format("kernel size k=%d (only 1x1)", s.k);
    if (s.stride != 1) return rt::format("stride=%d (only 1)", s.stride);
    if (s.pad != 0) return rt::format("pad=%d (only 0)", s.pad);
    if (s.groups != 1) return rt::format("groups=%d (only 1)", s.groups);
    if (s.bias) return "bias=true (no bias)";
    if (s.cin <= 0 || s.cin % 32 != 0) return rt::format("cin=%d (must be a positive multiple of 32)", s.cin);
    if (s.cout <= 0 || s.cout % 32 != 0) return rt::format("cout=%d (must be a positive multiple of 32)", s.cout);
    if (s.n <= 0 || s.h <= 0 || s.w <= 0)
        return rt::format("input dims n=%d h=%d w=%d (must be positive)", s.n, s.h, s.w);
    const double rows = static_cast<double>(s.n) * s.h * s.w;
    if (rows + kPwTileM > static_cast<double>(INT_MAX))
        return rt::format("%.0f rows (n=%d h=%d w=%d): too many for 32-bit row indexing", rows, s.n, s.h, s.w);
    if (rows * std::max(s.cin, s.cout) > 1099511627776.0)
        return rt::format("%.0f rows x %d channels: too large", rows, std::max(s.cin, s.cout));
    return "";
}

// pwconv_rows_kernel over the GEMM geometry g (rows, k, n: the GEMM's; for the dgrad k = cout, n = cin).
template <int BN, PwA kA, Act A, bool kTransW, bool kAccum, PwEpi kE, Act AE = A>
void launch_rows(const rt::Exec& ex, const PwConvPlan& g, const bf16* a, const bf16* w, bf16* y, const PwStage& st,
                 const PwStage& ep, float* part) {
    rt::launch(ex, "pwconv_rows_kernel", pwconv_rows_kernel<BN, kA, A, kTransW, kAccum, kE, AE>,
               dim3(g.n_blocks, g.chunks), dim3(kPwThreads), 0, static_cast<int>(g.rows), g.k, g.n, g.tiles, g.chunks,
               dev(a), dev(w), dev(y), st, ep, part);
}

// act: the A staging's activation, or with kE == BnGrad the producer BN's (the staging is then plain).
template <PwA kA, bool kTransW, bool kAccum, PwEpi kE>
void dispatch_rows(const rt::Exec& ex, const PwConvPlan& g, Act act, const bf16* a, const bf16* w, bf16* y,
                   const PwStage& st, float* part, const PwStage& ep = PwStage{}) {
    const auto go = [&](auto bn) {
        constexpr int BN = decltype(bn)::value;
        if constexpr (kA == PwA::Plain && kE != PwEpi::BnGrad) {
            launch_rows<BN, kA, Act::None, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
        } else {
            switch (act) {
                case Act::Silu: return launch_rows<BN, kA, Act::Silu, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
                case Act::Relu: return launch_rows<BN, kA, Act::Relu, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
                default: return launch_rows<BN, kA, Act::None, kTransW, kAccum, kE>(ex, g, a, w, y, st, ep, part);
            }
        }
    };
    if (g.bn == 64) go(std::integral_constant<int, 64>{});
    else go(std::integral_constant<int, 32>{});
}

// The dgrad with the following BN's dx formed on load (activation act) and the producer BN's backward
// reductions in the epilogue (activation act_e).
template <bool kAccum>
void dispatch_dgrad_both(const rt::Exec& ex, const PwConvPlan& g, Act act, Act act_e, const bf16* dy, const bf16* w,
                         bf16* dx, const PwStage& st, float* part, const PwStage& ep) {
    const auto go = [&](auto bn, auto a) {
        constexpr int BN = decltype(bn)::value;
        constexpr Act A = decltype(a)::value;
        switch (act_e) {
            case Act::Silu:
                return launch_rows<BN, PwA::Backward, A, true, kAccum, PwEpi::BnGrad, Act::Silu>(ex, g, dy, w, dx, st, ep, part);
            case Act::Relu:
                return launch_rows<BN, PwA::Backward, A, true, kAccum, PwEpi::BnGrad, Act::Relu>(ex, g, dy, w, dx, st, ep, part);
            default:
                return launch_rows<BN, PwA::Backward, A, true, kAccum, PwEpi::BnGrad, Act::None>(ex, g, dy, w, dx, st, ep, part);
        }
    };
    const auto with_bn = [&](auto a) {
        if (g.bn == 64) go(std::integral_constant<int, 64>{}, a);
        else go(std::integral_constant<int, 32>{}, a);
    };
    switch (act) {
        case Act::Silu: return with_bn(std::integral_constant<Act, Act::Silu>{});
        case Act::Relu: return with_bn(std::integral_constant<Act, Act::Relu>{});
        default: return with_bn(std::integral_constant<Act, Act::None>{});
    }
}

}  // namespace

bool pwconv_supported(const ConvShape& s) { return unsupported_reason(s).empty(); }

PwConvPlan pwconv_plan(const ConvShape& s) {
    const std::string why = unsupported_reason(s);
    SF_CHECK(why.empty(), "pwconv: unsupported shape: %s", why.c_str());
    return pwconv_geometry(static_cast<long long>(s.n) * s.h * s.w, s.cin, s.cout);
}

size_t pwconv_workspace_floats(const ConvShape& s) {
    const PwConvPlan pl = pwconv_plan(s);
    return 3 * static_cast<size_t>(pl.chunks) * static_cast<size_t>(pl.n);
}

void pwconv_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y,
                         const DwPrologue* pro, const BnStatsOut* stats, float* workspace, size_t workspace_floats) {
    const char* op = "pwconv_forward_cuda";
    rt::check_cuda_exec(op, ex);
    const PwConvPlan pl = pwconv_plan(s);
    SF_CHECK(!pro || pl.k <= kPwMaxPrologueK, "%s: a prologue needs cin <= %d, got %d", op, kPwMaxPrologueK, pl.k);
    rt::check_device_ptr(op, "x", x, 16);
    rt::check_device_ptr(op, "w", w, 16);
    rt::check_device_ptr(op, "y", y, 16);
    const size_t xb = static_cast<size_t>(pl.rows) * pl.k * sizeof(bf16), yb = static_cast<size_t>(pl.rows) * pl.n * sizeof(bf16);
    const size_t wb = static_cast<size_t>(pl.n) * pl.k * sizeof(bf16);
    SF_CHECK(!rt::overlap(y, yb, x, xb), "%s: y must not alias x", op);
    SF_CHECK(!rt::overlap(y, yb, w, wb), "%s: y must not alias w", op);
    check_dw_prologue(op, pro, pl.k, {{y, yb}});
    PwStage st{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    if (pro) st = PwStage{pro->gamma, pro->beta, pro->mean, pro->invstd, nullptr, nullptr, pro->eval, pro->eps};
    check_bn_stats_out(op, stats, pl.n, pl.rows, workspace, workspace_floats, stats ? pwconv_workspace_floats(s) : 0,
                       {{x, xb, "x"}, {w, wb, "w"}, {y, yb, "y"}});
    float* part = stats ? workspace : nullptr;
    const Act act = pro ? pro->act : Act::None;
    if (pro && stats) dispatch_rows<PwA::Apply, false, false, PwEpi::Stats>(ex, pl, act, x, w, y, st, part);
    else if (pro) dispatch_rows<PwA::Apply, false, false, PwEpi::None>(ex, pl, act, x, w, y, st, part);
    else if (stats) dispatch_rows<PwA::Plain, false, false, PwEpi::Stats>(ex, pl, act, x, w, y, st, part);
    else dispatch_rows<PwA::Plain, false, false, PwEpi::None>(ex, pl, act, x, w, y, st, part);
    if (stats)
        rt::launch(ex, "pwconv_stats_finalize_kernel", pwconv_stats_finalize_kernel, dim3(pl.finalize_blocks),
                   dim3(kPwFinalizeX, kPwFinalizeY), 0, static_cast<int>(pl.rows), pl.n, pl.tiles, pl.chunks,
                   static_cast<const float*>(part), stats->save_mean, stats->save_invstd, stats->running_mean,
                   stats->running_var, stats->momentum, stats->eps);
}

size_t pwconv_dgrad_workspace_floats(const ConvShape& s) {
    const PwConvPlan fwd = pwconv_plan(s);
    const PwConvPlan g = pwconv_geometry(fwd.rows, fwd.n, fwd.k);
    return 2 * static_cast<size_t>(g.chunks) * static_cast<size_t>(g.n);
}

void pwconv_backward_data_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                               bool accumulate, const DwBnBackward* bnb, const BnGradSums* bng, float* workspace,
                               size_t workspace_floats) {
    const char* op = "pwconv_backward_data_cuda";
    rt::check_cuda_exec(op, ex);
    const PwConvPlan fwd = pwconv_plan(s);
    const PwConvPlan g = pwconv_geometry(fwd.rows, fwd.n, fwd.k);  // dx[rows][cin] = dy[rows][cout] * w[cout][cin]
    SF_CHECK(!bnb || g.k <= kPwMaxPrologueK, "%s: a BN-backward prologue needs cout <= %d, got %d", op,
             kPwMaxPrologueK, g.k);
    rt::check_device_ptr(op, "dy", dy, 16);
    rt::check_device_ptr(op, "w", w, 16);
    rt::check_device_ptr(op, "dx", dx, 16);
    const size_t dyb = static_cast<size_t>(g.rows) * g.k * sizeof(bf16), dxb = static_cast<size_t>(g.rows) * g.n * sizeof(bf16);
    const size_t wb = static_cast<size_t>(g.n) * g.k * sizeof(bf16);
    SF_CHECK(!rt::overlap(dx, dxb, dy, dyb), "%s: dx must not alias dy", op);
    SF_CHECK(!rt::overlap(dx, dxb, w, wb), "%s: dx must not alias w", op);
    check_dw_bn_backward(op, bnb, g.k, dyb, {{dx, dxb}}, "dx");
    PwStage st{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    if (bnb) st = PwStage{bnb->gamma, bnb->beta, bnb->mean, bnb->invstd, bnb->coef, dev(bnb->x), false, 0.0};
    const Act act = bnb ? bnb->act : Act::None;
    if (bng) {
        const size_t need = pwconv_dgrad_workspace_floats(s), pb = need * sizeof(float);
        rt::check_device_ptr(op, "workspace", workspace, alignof(float));
        SF_CHECK(workspace_floats >= need, "%s: workspace of %zu floats, need %zu", op, workspace_floats, need);
        // With bnb as well, its BN's input and vectors are read too (checked apart from dx by check_dw_bn_backward
        // above; apart from the epilogue's outputs and workspace here; empty ranges without it), as the fused
        // depthwise launcher lists them.
        const DwBnBackward nb = bnb ? *bnb : DwBnBackward{};
        const size_t kb = bnb ? static_cast<size_t>(g.k) * sizeof(float) : 0;
        check_bn_grad_sums(op, bng, g.n, g.rows, dxb,
                           {{dy, dyb, "dy"}, {w, wb, "w"}, {nb.x, bnb ? dyb : 0, "bnb->x"}, {nb.gamma, kb, "bnb->gamma"},
                            {nb.beta, kb, "bnb->beta"}, {nb.mean, kb, "bnb->mean"}, {nb.invstd, kb, "bnb->invstd"},
                            {nb.coef, 2 * kb, "bnb->coef"}},
                           {{dx, dxb, "dx"}, {workspace, pb, "the workspace"}});
        if (bnb) check_dw_bn_backward(op, bnb, g.k, dyb, {{workspace, pb}}, "the workspace");
        SF_CHECK(!rt::overlap(workspace, pb, dy, dyb) && !rt::overlap(workspace, pb, w, wb),
                 "%s: the workspace must not alias dy or w", op);
        const PwStage ep{bng->gamma, bng->beta, bng->mean, bng->invstd, nullptr, dev(bng->x), false, 0.0};
        if (bnb && accumulate)
            dispatch_dgrad_both<true>(ex, g, bnb->act, bng->act, dy, w, dx, st, workspace, ep);
        else if (bnb)
            dispatch_dgrad_both<false>(ex, g, bnb->act, bng->act, dy, w, dx, st, workspace, ep);
        else if (accumulate)
            dispatch_rows<PwA::Plain, true, true, PwEpi::BnGrad>(ex, g, bng->act, dy, w, dx, st, workspace, ep);
        else
            dispatch_rows<PwA::Plain, true, false, PwEpi::BnGrad>(ex, g, bng->act, dy, w, dx, st, workspace, ep);
        bn_act_backward_finalize(ex, static_cast<size_t>(g.rows), g.n, g.chunks, workspace, bng->dgamma, bng->dbeta,
                                 bng->coef);
        return;
    }
    if (bnb && accumulate) dispatch_rows<PwA::Backward, true, true, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
    else if (bnb) dispatch_rows<PwA::Backward, true, false, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
    else if (accumulate) dispatch_rows<PwA::Plain, true, true, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
    else dispatch_rows<PwA::Plain, true, false, PwEpi::None>(ex, g, act, dy, w, dx, st, nullptr);
}

}  // namespace kern
