// The pointwise (1x1) convolution's backward in one pass over its operands (kernels/pwconv_cuda.h,
// docs/KERNELS_PWCONV.md "The fused backward"): dx (= or +=) dy * w and dw += dy^T x from the same staged
// tiles, so dy (with the BN-backward prologue: the BN's output gradient and its input) and x are read once
// for both gradients instead of once by the dgrad and again by the wgrad.
//
// Grid: the wgrad's chunks (pwconv_wgrad_geometry: chunk c owns the 32-row steps [steps*c/chunks,
// steps*(c+1)/chunks)); block 256 threads, 8 warps; every block holds all of w (cout x cin) in shared
// memory and the fp32 accumulators of all of dw (cout * cin / 256 per thread: at most 32, hence cin * cout
// <= 8192). Per step: the 32 rows of dy (through the BN-backward prologue) and of x (through the producer's
// BN + activation) are staged in their natural [row][channel] layout, double-buffered, the next step's
// global loads in flight during the current step's mma:
//   dgrad  dx[32][cin] = dy[32][cout] * w[cout][cin]: A = dy (ldmatrix), B = w (ldmatrix .trans);
//          rounded to bf16 and stored (or added to the old dx, one rounding) at once;
//   wgrad  acc[cout][cin] += dy^T[cout][32] * x[32][cin]: A = dy (ldmatrix .trans), B = x (.trans).
// At the chunk's end the accumulators go to the partials part[chunk][o][i]; the finalize kernel adds the
// chunks to dw in fp64 in a fixed order.
//
// Bitwise: the fragments hold the values the separate kernels stage (the same prologue arithmetic, the same
// bf16 roundings), and each accumulator sees the same mma sequence: dx's the dgrad's (k = cout in increasing
// order from zero, the same epilogue), dw's the wgrad's (the same chunks of 32-row steps, two k-steps per
// step, the same finalize). So dx and dw are bit for bit pwconv_backward_data_cuda's and
// pwconv_backward_filter_cuda's (the tests require it), on a GPU and under the emulation.
#include <cstdint>
#include <string>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
#include "kernels/pwconv_cuda.h"
#include "kernels/pwconv_device.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

using pw::PwA;
using pw::PwStage;

// kBnGrad: the dgrad's epilogue gathers the producer BN's backward reductions (BnGradSums; its activation AE) from the
// dx it stores and that BN's input (ep.x) at the same places, per thread over the chunk, reduced in a fixed order
// into part_bn (sum g, then sum g * xhat, per chunk and channel). With kXPro that BN is the prologue's (the launcher
// checks it), whose constants serve both.
template <int CIN, int COUT, PwA kDy, Act ADy, bool kXPro, Act AX, bool kBnGrad = false, Act AE = Act::Silu>
__global__ void __launch_bounds__(kPwThreads, 2)
    pwconv_bwd_fused_kernel(int rows, long long steps_total, int chunks, bool accumulate, const bfloat* __restrict__ x,
                            const bfloat* __restrict__ dy, const bfloat* __restrict__ w, bfloat* __restrict__ dx,
                            PwStage sdy, PwStage sx, float* __restrict__ part, PwStage ep,
                            float* __restrict__ part_bn) {
    rt::pdl_entry();
    constexpr int T = kPwWgradTile;             // rows per step
    constexpr int PD = COUT + 8, PX = CIN + 8;  // row pitches (bf16): 80, 144 or 272 bytes, 16 mod 128
    constexpr bool kBwd = kDy == PwA::Backward;
    constexpr int kWarps = kPwThreads / 32;
    constexpr int kDVec = T * COUT / 8, kXVec = T * CIN / 8;  // 16-byte vectors of a step
    constexpr int kDPer = (kDVec + kPwThreads - 1) / kPwThreads, kXPer = (kXVec + kPwThreads - 1) / kPwThreads;
    constexpr int kDgradUnits = 2 * (CIN / 16);  // (16-row block, 16-column pair) of dx
    constexpr int kDgradPer = (kDgradUnits + kWarps - 1) / kWarps;
    constexpr int kMo = COUT / 16;
    constexpr int kWgradUnits = kMo * (CIN / 16);  // (16 couts, 16 cins) of dw
    constexpr int kWgradPer = (kWgradUnits + kWarps - 1) / kWarps;
    static_assert(CIN % 32 == 0 && COUT % 32 == 0 && CIN * COUT <= 8192, "the fused backward's shapes");
    __shared__ __align__(16) bfloat ds[2][T][PD];  // dy as the dgrad reads it (the prologue applied): [row][o]
    __shared__ __align__(16) bfloat xs[2][T][PX];  // x as the wgrad reads it: [row][i]
    __shared__ __align__(16) bfloat ws[COUT][PX];  // w: [o][i]
    __shared__ float d_mean[kBwd ? COUT : 1], d_inv[kBwd ? COUT : 1], d_scale[kBwd ? COUT : 1], d_beta[kBwd ? COUT : 1],
        d_mg[kBwd ? COUT : 1], d_mgx[kBwd ? COUT : 1];
    // The x-side BN's mean, scale = gamma * invstd and beta: the prologue's, or without one the epilogue's (with
    // both they are the same BN); the epilogue's invstd apart. At the 8192-entry shapes with the epilogue these
    // fill the 48 KB of static shared memory to the byte.
    constexpr bool kXConsts = kXPro || kBnGrad;
    __shared__ float x_mean[kXConsts ? CIN : 1], x_scale[kXConsts ? CIN : 1], x_beta[kXConsts ? CIN : 1];
    __shared__ float e_inv[kBnGrad ? CIN : 1];

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int chunk = static_cast<int>(blockIdx.x);
    const long long s_lo = pwconv_tile_begin(steps_total, chunks, chunk),
                    s_hi = pwconv_tile_begin(steps_total, chunks, chunk + 1);

    // The per-channel constants, exactly as the separate kernels form them (the dgrad's row GEMM and the wgrad).
    if constexpr (kBwd)
        for (int c = tid; c < COUT; c += kPwThreads)
            pw::stage_backward_consts(sdy, c, c, COUT, d_mean, d_inv, d_scale, d_beta, d_mg, d_mgx);
    if constexpr (kXConsts)
        for (int c = tid; c < CIN; c += kPwThreads)
            pw::stage_apply_consts(kXPro ? sx : ep, c, c, x_mean, x_scale, x_beta);
    if constexpr (kBnGrad)
        for (int c = tid; c < CIN; c += kPwThreads) e_inv[c] = __ldg(ep.invstd + c);
    for (int v = tid; v < COUT * CIN / 8; v += kPwThreads) {  // w, once per block
        const int o = v / (CIN / 8), i8 = 8 * (v % (CIN / 8));
        *reinterpret_cast<uint4*>(&ws[o][i8]) =
            __ldg(reinterpret_cast<const uint4*>(w + static_cast<size_t>(o) * CIN + i8));
    }
    if constexpr (kBwd || kXPro || kBnGrad) __syncthreads();

    uint4 rd[kDPer], rb[kBwd ? kDPer : 1], rx[kXPer];
    auto load_step = [&](long long s) {
#pragma unroll
        for (int q = 0; q < kDPer; ++q) {
            const int v = tid + q * kPwThreads;
            if (kDVec % kPwThreads != 0 && v >= kDVec) break;
            const long long row = s * T + v / (COUT / 8);
            const size_t off = static_cast<size_t>(row) * COUT + 8 * (v % (COUT / 8));
            rd[q] = row < rows ? __ldg(reinterpret_cast<const uint4*>(dy + off)) : make_uint4(0, 0, 0, 0);
            if constexpr (kBwd)
                rb[q] = row < rows ? __ldg(reinterpret_cast<const uint4*>(sdy.x + off)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int q = 0; q < kXPer; ++q) {
            const int v = tid + q * kPwThreads;
            if (kXVec % kPwThreads != 0 && v >= kXVec) break;
            const long long row = s * T + v / (CIN / 8);
            const size_t off = static_cast<size_t>(row) * CIN + 8 * (v % (CIN / 8));
            rx[q] = row < rows ? __ldg(reinterpret_cast<const uint4*>(x + off)) : make_uint4(0, 0, 0, 0);
        }
    };
    // Rows past the end are staged as zeros whatever the prologues (the wgrad must add nothing for them; their
    // dx is never stored).
    auto store_step = [&](long long s, int buf) {
#pragma unroll
        for (int q = 0; q < kDPer; ++q) {
            const int v = tid + q * kPwThreads;
            if (kDVec % kPwThreads != 0 && v >= kDVec) break;
            const int r = v / (COUT / 8), c8 = 8 * (v % (COUT / 8));
            uint4 u = rd[q];
            if constexpr (kBwd) {
                const bool valid = s * T + r < rows;
                float vd[8], xb[8];
                unpack8(rd[q], vd);
                unpack8(rb[q], xb);
                pw::bn_dx8<ADy>(vd, xb, d_mean + c8, d_inv + c8, d_scale + c8, d_beta + c8, d_mg + c8, d_mgx + c8);
#pragma unroll
                for (int j = 0; j < 8; ++j) vd[j] = valid ? vd[j] : 0.0f;
                u = pw::pack8_bf16(vd);
            }
            *reinterpret_cast<uint4*>(&ds[buf][r][c8]) = u;
        }
#pragma unroll
        for (int q = 0; q < kXPer; ++q) {
            const int v = tid + q * kPwThreads;
            if (kXVec % kPwThreads != 0 && v >= kXVec) break;
            const int r = v / (CIN / 8), c8 = 8 * (v % (CIN / 8));
            uint4 u = rx[q];
            if constexpr (kXPro) {
                const bool valid = s * T + r < rows;
                float vx[8];
                unpack8(rx[q], vx);
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    vx[j] = valid ? act_fwd<AX>(fmaf(vx[j] - x_mean[c8 + j], x_scale[c8 + j], x_beta[c8 + j])) : 0.0f;
                u = pw::pack8_bf16(vx);
            }
            *reinterpret_cast<uint4*>(&xs[buf][r][c8]) = u;
        }
    };

    float accw[kWgradPer][2][4];
#pragma unroll
    for (int q = 0; q < kWgradPer; ++q)
        for (int f = 0; f < 2; ++f) accw[q][f][0] = accw[q][f][1] = accw[q][f][2] = accw[q][f][3] = 0.0f;
    // kBnGrad: this thread's sums g and g * xhat for its two columns of each dgrad fragment (fixed for the chunk).
    float s1[kBnGrad ? kDgradPer : 1][2][2], s2[kBnGrad ? kDgradPer : 1][2][2];
#pragma unroll
    for (int q = 0; q < (kBnGrad ? kDgradPer : 1); ++q)
        for (int f = 0; f < 2; ++f) s1[q][f][0] = s1[q][f][1] = s2[q][f][0] = s2[q][f][1] = 0.0f;

    load_step(s_lo);
    store_step(s_lo, 0);
    __syncthreads();
    for (long long s = s_lo; s < s_hi; ++s) {
        const int buf = static_cast<int>((s - s_lo) & 1);
        if (s + 1 < s_hi) load_step(s + 1);
            // dgrad: warp unit u = (16-row block u % 2, 16-column pair u / 2) of the step's dx.
#pragma unroll
        for (int q = 0; q < kDgradPer; ++q) {
            const int u = warp + q * kWarps;
            if (kDgradUnits % kWarps != 0 && u >= kDgradUnits) break;
            const int mb = u % 2, np = u / 2;
            float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int k = 0; k < COUT; k += 16) {
                uint32_t af[4], b4[4];
                ldmatrix_x4(af, &ds[buf][16 * mb + (lane % 8) + 8 * ((lane / 8) % 2)][k + 8 * (lane / 16)]);
                ldmatrix_x4_trans(b4, &ws[k + 8 * ((lane / 8) % 2) + (lane % 8)][16 * np + 8 * (lane / 16)]);
                const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
                mma_bf16_16816(acc[0], af, b0);
                mma_bf16_16816(acc[1], af, b1);
            }
            const long long ra_row = s * T + 16 * mb + g, rb_row = ra_row + 8;
#pragma unroll
            for (int f = 0; f < 2; ++f) {
                const int col = 16 * np + 8 * f + 2 * t;
                uint32_t* pa = reinterpret_cast<uint32_t*>(dx + ra_row * CIN + col);
                uint32_t* pb = reinterpret_cast<uint32_t*>(dx + rb_row * CIN + col);
                uint32_t ua, ub;
                if (accumulate) {  // dx += the sum: dx read once, one rounding (the dgrad's epilogue)
                    const uint32_t oa = ra_row < rows ? *pa : 0u, ob = rb_row < rows ? *pb : 0u;
                    ua = pack_bf16x2(bf16x2_lo(oa) + acc[f][0], bf16x2_hi(oa) + acc[f][1]);
                    ub = pack_bf16x2(bf16x2_lo(ob) + acc[f][2], bf16x2_hi(ob) + acc[f][3]);
                } else {
                    ua = pack_bf16x2(acc[f][0], acc[f][1]);
                    ub = pack_bf16x2(acc[f][2], acc[f][3]);
                }
                if (ra_row < rows) *pa = ua;
                if (rb_row < rows) *pb = ub;
                if constexpr (kBnGrad) {  // the stored dx and the BN's input at the same two columns
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const long long row = h ? rb_row : ra_row;
                        if (row >= rows) continue;
                        const uint32_t u = h ? ub : ua;
                        const uint32_t xb = __ldg(reinterpret_cast<const uint32_t*>(ep.x + row * CIN + col));
                        bn_grad_add<AE>(bf16x2_lo(xb), bf16x2_lo(u), x_mean[col], e_inv[col], x_scale[col], x_beta[col],
                                        s1[q][f][0], s2[q][f][0]);
                        bn_grad_add<AE>(bf16x2_hi(xb), bf16x2_hi(u), x_mean[col + 1], e_inv[col + 1], x_scale[col + 1],
                                        x_beta[col + 1], s1[q][f][1], s2[q][f][1]);
                    }
                }
            }
        }
        // wgrad: warp unit u = (couts 16 (u % kMo).., cins 16 (u / kMo)..), two k-steps of 16 rows.
#pragma unroll
        for (int kk = 0; kk < T; kk += 16) {
#pragma unroll
            for (int q = 0; q < kWgradPer; ++q) {
                const int u = warp + q * kWarps;
                if (kWgradUnits % kWarps != 0 && u >= kWgradUnits) break;
                const int mo = u % kMo, ni = u / kMo;
                uint32_t af[4], b4[4];
                ldmatrix_x4_trans(af, &ds[buf][kk + 8 * (lane / 16) + (lane % 8)][16 * mo + 8 * ((lane / 8) % 2)]);
                ldmatrix_x4_trans(b4, &xs[buf][kk + 8 * ((lane / 8) % 2) + (lane % 8)][16 * ni + 8 * (lane / 16)]);
                const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
                mma_bf16_16816(accw[q][0], af, b0);
                mma_bf16_16816(accw[q][1], af, b1);
            }
        }
        if (s + 1 < s_hi) store_step(s + 1, buf ^ 1);
        __syncthreads();
    }
    if constexpr (kBnGrad) {
        // The lanes of a column (the 8 groups g) by a fixed butterfly, then the column's two warps (its two 16-row
        // blocks) in order, through the x staging (free after the last step): [sum][row block][column].
        float* red = reinterpret_cast<float*>(&xs[0][0][0]);
        static_assert(4 * CIN * sizeof(float) <= sizeof(xs), "the reduction fits the x staging");
#pragma unroll
        for (int q = 0; q < kDgradPer; ++q) {
            const int u = warp + q * kWarps;
            if (kDgradUnits % kWarps != 0 && u >= kDgradUnits) break;
#pragma unroll
            for (int f = 0; f < 2; ++f)
                for (int j = 0; j < 2; ++j) {
                    for (int off = 4; off < 32; off *= 2) {
                        s1[q][f][j] += __shfl_xor_sync(0xffffffffu, s1[q][f][j], off);
                        s2[q][f][j] += __shfl_xor_sync(0xffffffffu, s2[q][f][j], off);
                    }
                    if (g == 0) {
                        const int mb = u % 2, c = 16 * (u / 2) + 8 * f + 2 * t + j;
                        red[mb * CIN + c] = s1[q][f][j];
                        red[(2 + mb) * CIN + c] = s2[q][f][j];
                    }
                }
        }
        __syncthreads();
        for (int c = tid; c < CIN; c += kPwThreads) {
            part_bn[static_cast<size_t>(chunk) * CIN + c] = red[c] + red[CIN + c];
            part_bn[static_cast<size_t>(chunks + chunk) * CIN + c] = red[2 * CIN + c] + red[3 * CIN + c];
        }
    }
    float* tile = part + static_cast<size_t>(chunk) * COUT * CIN;
#pragma unroll
    for (int q = 0; q < kWgradPer; ++q) {
        const int u = warp + q * kWarps;
        if (kWgradUnits % kWarps != 0 && u >= kWgradUnits) break;
        const int mo = u % kMo, ni = u / kMo;
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const size_t col = static_cast<size_t>(16 * ni + 8 * f + 2 * t);
            *reinterpret_cast<float2*>(tile + static_cast<size_t>(16 * mo + g) * CIN + col) =
                make_float2(accw[q][f][0], accw[q][f][1]);
            *reinterpret_cast<float2*>(tile + static_cast<size_t>(16 * mo + g + 8) * CIN + col) =
                make_float2(accw[q][f][2], accw[q][f][3]);
        }
    }
}

// dw[e] += the fixed-order fp64 sum of the chunks' partials (the wgrad's finalize: finalize_partials).
__global__ void pwconv_bwd_fused_finalize_kernel(int entries, int chunks, const float* __restrict__ part,
                                                 float* __restrict__ dw) {
    rt::pdl_entry();
    finalize_partials<kPwFinalizeX, kPwFinalizeY>(entries, chunks, part, AddTo{dw});
}

bool fused_channels(int c) { return c == 32 || c == 64 || c == 128; }

// One call's launch arguments, the same for every instance.
struct FusedArgs {
    const PwWgradPlan& p;
    bool accumulate;
    const bf16* x;
    const bf16* dy;
    const bf16* w;
    bf16* dx;
    PwStage sdy, sx, ep;
    float* part;     // the wgrad's partials
    float* part_bn;  // the epilogue's (bng), after them
};

template <int CIN, int COUT, PwA kDy, Act ADy, bool kXPro, bool kBnGrad>
void launch_fused(const rt::Exec& ex, const FusedArgs& a) {
    constexpr Act AX = kXPro ? Act::Silu : Act::None;
    rt::launch(
        ex, "pwconv_bwd_fused_kernel", pwconv_bwd_fused_kernel<CIN, COUT, kDy, ADy, kXPro, AX, kBnGrad, Act::Silu>,
        dim3(static_cast<unsigned>(a.p.chunks)), dim3(kPwThreads), 0, static_cast<int>(a.p.rows), a.p.steps, a.p.chunks,
        a.accumulate, dev(a.x), dev(a.dy), dev(a.w), dev(a.dx), a.sdy, a.sx, a.part, a.ep, a.part_bn);
}

// The x side's prologue (SiLU, the depthwise BN's, or none) and the epilogue (SiLU; not with a ReLU dy side), for a
// dy side chosen by fused_modes.
template <int CIN, int COUT, PwA kDy, Act ADy>
void fused_x(const rt::Exec& ex, const FusedArgs& a, bool pro, bool bng) {
    if constexpr (ADy != Act::Relu) {
        if (bng) {
            if (pro) return launch_fused<CIN, COUT, kDy, ADy, true, true>(ex, a);
            return launch_fused<CIN, COUT, kDy, ADy, false, true>(ex, a);
        }
    }
    if (pro) return launch_fused<CIN, COUT, kDy, ADy, true, false>(ex, a);
    launch_fused<CIN, COUT, kDy, ADy, false, false>(ex, a);
}

// The dy side: plain, or the BN-backward prologue with its activation.
template <int CIN, int COUT>
void fused_modes(const rt::Exec& ex, const FusedArgs& a, const DwPrologue* pro, const DwBnBackward* bnb,
                 const BnGradSums* bng) {
    const bool p = pro != nullptr, g = bng != nullptr;
    if (!bnb)
        fused_x<CIN, COUT, PwA::Plain, Act::None>(ex, a, p, g);
    else if (bnb->act == Act::Silu)
        fused_x<CIN, COUT, PwA::Backward, Act::Silu>(ex, a, p, g);
    else if (bnb->act == Act::Relu)
        fused_x<CIN, COUT, PwA::Backward, Act::Relu>(ex, a, p, g);
    else
        fused_x<CIN, COUT, PwA::Backward, Act::None>(ex, a, p, g);
}

template <int CIN>
void fused_cout(const rt::Exec& ex, const FusedArgs& a, const DwPrologue* pro, const DwBnBackward* bnb,
                const BnGradSums* bng) {
    if (a.p.cout == 32) return fused_modes<CIN, 32>(ex, a, pro, bnb, bng);
    if (a.p.cout == 64) return fused_modes<CIN, 64>(ex, a, pro, bnb, bng);
    if constexpr (CIN * 128 <= 8192)
        if (a.p.cout == 128) return fused_modes<CIN, 128>(ex, a, pro, bnb, bng);
}

bool same_bn(const DwPrologue& pro, const BnGradSums& bng) {
    return pro.gamma == bng.gamma && pro.beta == bng.beta && pro.mean == bng.mean && pro.invstd == bng.invstd &&
           pro.act == bng.act && !pro.eval;
}

}  // namespace

std::string pwconv_backward_fused_refusal(const ConvShape& s, const DwPrologue* pro, const DwBnBackward* bnb,
                                          const BnGradSums* bng) {
    if (!pwconv_supported(s)) {
        try {
            pwconv_plan(s);
        } catch (const rt::Error& e) {
            return e.what();
        }
        return "pwconv: unsupported shape";
    }
    if (!fused_channels(s.cin) || !fused_channels(s.cout) || s.cin * s.cout > 8192)
        return "the fused backward takes cin and cout of 32, 64 or 128 with cin * cout <= 8192 (all of dw in one "
               "block's registers), got cin=" +
               std::to_string(s.cin) + " cout=" + std::to_string(s.cout);
    if (pro && pro->act != Act::Silu)
        return std::string("the fused backward's x prologue is built for SiLU only (the depthwise BN's), got ") +
               act_name(pro->act);
    if (bng && bng->act != Act::Silu)
        return std::string(
                   "the fused backward's BN-backward epilogue is built for SiLU only (the depthwise BN's), "
                   "got ") +
               act_name(bng->act);
    if (bng && bnb && bnb->act == Act::Relu)
        return "the fused backward's BN-backward epilogue is not built with a ReLU BN-backward prologue";
    if (bng && pro && !same_bn(*pro, *bng))
        return "the fused backward's x prologue and BN-backward epilogue must be the same BatchNorm (train mode): the "
               "producer's";
    return "";
}

bool pwconv_backward_fused_supported(const ConvShape& s, const DwPrologue* pro, const DwBnBackward* bnb,
                                     const BnGradSums* bng) {
    return pwconv_backward_fused_refusal(s, pro, bnb, bng).empty();
}

size_t pwconv_backward_fused_workspace_floats(const ConvShape& s, bool bn_grad) {
    const PwWgradPlan p = pwconv_wgrad_plan(s);
    return pwconv_wgrad_workspace_floats(s) + (bn_grad ? 2 * static_cast<size_t>(p.chunks) * p.cin : 0);
}

void pwconv_backward_fused_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, const bf16* w,
                                bf16* dx, float* dw, bool accumulate, float* workspace, size_t workspace_floats,
                                const DwPrologue* pro, const DwBnBackward* bnb, const BnGradSums* bng) {
    const char* op = "pwconv_backward_fused_cuda";
    rt::check_cuda_exec(op, ex);
    const std::string why = pwconv_backward_fused_refusal(s, pro, bnb, bng);
    SF_CHECK(why.empty(), "%s: %s", op, why.c_str());
    const PwWgradPlan p = pwconv_wgrad_plan(s);
    rt::check_device_ptr(op, "x", x, 16);
    rt::check_device_ptr(op, "dy", dy, 16);
    rt::check_device_ptr(op, "w", w, 16);
    rt::check_device_ptr(op, "dx", dx, 16);
    rt::check_device_ptr(op, "dw", dw, alignof(float));
    const size_t need = pwconv_backward_fused_workspace_floats(s, bng != nullptr);
    rt::check_device_ptr(op, "workspace", workspace, 16);
    SF_CHECK(workspace_floats >= need, "%s: workspace of %zu floats, need %zu", op, workspace_floats, need);
    const size_t xb = static_cast<size_t>(p.rows) * p.cin * sizeof(bf16),
                 dyb = static_cast<size_t>(p.rows) * p.cout * sizeof(bf16);
    const size_t wb = static_cast<size_t>(p.entries) * sizeof(bf16),
                 dwb = static_cast<size_t>(p.entries) * sizeof(float);
    const size_t wsb = need * sizeof(float);
    SF_CHECK(!rt::overlap(dx, xb, x, xb) && !rt::overlap(dx, xb, dy, dyb) && !rt::overlap(dx, xb, w, wb),
             "%s: dx must not alias x, dy or w", op);
    SF_CHECK(!rt::overlap(dw, dwb, x, xb) && !rt::overlap(dw, dwb, dy, dyb) && !rt::overlap(dw, dwb, w, wb) &&
                 !rt::overlap(dw, dwb, dx, xb) && !rt::overlap(dw, dwb, workspace, wsb),
             "%s: dw must not alias x, dy, w, dx or the workspace", op);
    SF_CHECK(!rt::overlap(workspace, wsb, x, xb) && !rt::overlap(workspace, wsb, dy, dyb) &&
                 !rt::overlap(workspace, wsb, w, wb) && !rt::overlap(workspace, wsb, dx, xb),
             "%s: the workspace must not alias x, dy, w or dx", op);
    check_dw_prologue(op, pro, p.cin, {{dx, xb}, {dw, dwb}, {workspace, wsb}});
    check_dw_bn_backward(op, bnb, p.cout, dyb, {{dx, xb}, {dw, dwb}, {workspace, wsb}}, "dx, dw and the workspace");
    if (bng) {  // the epilogue reads its BN's input and vectors and writes dgamma, dbeta (+=) and coef
        const DwBnBackward nb = bnb ? *bnb : DwBnBackward{};
        const size_t kb = bnb ? static_cast<size_t>(p.cout) * sizeof(float) : 0;
        check_bn_grad_sums(op, bng, p.cin, p.rows, xb,
                           {{x, xb, "x"},
                            {dy, dyb, "dy"},
                            {w, wb, "w"},
                            {nb.x, bnb ? dyb : 0, "bnb->x"},
                            {nb.gamma, kb, "bnb->gamma"},
                            {nb.beta, kb, "bnb->beta"},
                            {nb.mean, kb, "bnb->mean"},
                            {nb.invstd, kb, "bnb->invstd"},
                            {nb.coef, 2 * kb, "bnb->coef"}},
                           {{dx, xb, "dx"}, {dw, dwb, "dw"}, {workspace, wsb, "the workspace"}});
    }
    const PwStage none{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    FusedArgs a{p, accumulate, x, dy, w, dx, none, none, none, workspace, nullptr};
    if (pro) a.sx = PwStage{pro->gamma, pro->beta, pro->mean, pro->invstd, nullptr, nullptr, pro->eval, pro->eps};
    if (bnb) a.sdy = PwStage{bnb->gamma, bnb->beta, bnb->mean, bnb->invstd, bnb->coef, dev(bnb->x), false, 0.0};
    if (bng) {
        a.ep = PwStage{bng->gamma, bng->beta, bng->mean, bng->invstd, nullptr, dev(bng->x), false, 0.0};
        a.part_bn = workspace + pwconv_wgrad_workspace_floats(s);
    }
    if (p.cin == 32)
        fused_cout<32>(ex, a, pro, bnb, bng);
    else if (p.cin == 64)
        fused_cout<64>(ex, a, pro, bnb, bng);
    else
        fused_cout<128>(ex, a, pro, bnb, bng);
    rt::launch(ex, "pwconv_bwd_fused_finalize_kernel", pwconv_bwd_fused_finalize_kernel,
               dim3(static_cast<unsigned>(p.finalize_blocks)), dim3(kPwFinalizeX, kPwFinalizeY), 0,
               static_cast<int>(p.entries), p.chunks, static_cast<const float*>(workspace), dw);
    if (bng)
        bn_act_backward_finalize(ex, static_cast<size_t>(p.rows), p.cin, p.chunks, a.part_bn, bng->dgamma, bng->dbeta,
                                 bng->coef);
}

}  // namespace kern
