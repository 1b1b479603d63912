// Pointwise (1x1) convolution backward-filter on bf16 tensor cores (kernels/pwconv_cuda.h,
// docs/KERNELS_PWCONV.md, "The wgrad"): dw[cout][cin] += sum over rows of dy^T x, reduced over fixed row
// chunks into fp32 partials (pass 1) and added to dw in fp64 in a fixed order (pass 2), with the
// producer's BN prologue on x and the consumer's BN-backward prologue on dy.
#include <cstdint>

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

using pw::kPitch;
using pw::PwA;
using pw::PwStage;

// The wgrad's staged tiles are stored transposed, one bf16 per store, by threads whose rows (the tile's
// channels) differ by 8: at the 80-byte pitch those rows start in the same bank, so the store of a warp's
// four channel groups would be 4-way conflicted. The 16-byte column groups are swizzled by the row's group
// instead: column c of row r lives at c ^ (8 * ((r / 8) % 4)), which keeps each 8-column (16-byte) group
// contiguous and 16-byte aligned for ldmatrix and puts the four groups of a warp's store in distinct banks.
__device__ __forceinline__ int wgrad_col(int row, int col) { return col ^ (((row >> 3) & 3) << 3); }

// The wgrad, pass 1: dw tile (o0..o0+31, i0..i0+31) over the rows of chunk blockIdx.z. Block 128 threads,
// 4 warps, warp w computing dw rows 16 (w / 2).. and columns 16 (w % 2).. (two accumulator fragments). A step
// stages 32 rows: thread t loads row t / 4's 8 couts of dy (and of the BN input x_bn with kDy == Backward) and
// 8 cins of x at offset 8 (t % 4), applies the prologues, and stores them transposed (dy^T[o][row],
// x^T[i][row], columns swizzled by wgrad_col), so that both mma operands are read by ldmatrix as in the row
// GEMM. Rows past the end are staged as zeros whatever the prologues (they must add nothing; either side's
// zero would do, both are kept so that neither prologue's value at x = 0 can ever reach a sum). The partials of the tile are written to
// part[chunk][o][i] (fp32).
template <PwA kDy, Act ADy, bool kXPro, Act AX>
__global__ void __launch_bounds__(kPwWgradThreads)
    pwconv_wgrad_kernel(int rows, int cin, int cout, long long steps_total, int chunks, const bfloat* __restrict__ x,
                        const bfloat* __restrict__ dy, PwStage sdy, PwStage sx, float* __restrict__ part) {
    rt::pdl_entry();
    constexpr int T = kPwWgradTile;
    constexpr bool kBwd = kDy == PwA::Backward;
    __shared__ __align__(16) bfloat as[2][T][kPitch];  // dy^T: [o][row]
    __shared__ __align__(16) bfloat bs[2][T][kPitch];  // x^T:  [i][row]
    __shared__ float d_mean[kBwd ? T : 1], d_inv[kBwd ? T : 1], d_scale[kBwd ? T : 1], d_beta[kBwd ? T : 1],
        d_mg[kBwd ? T : 1], d_mgx[kBwd ? T : 1];
    __shared__ float x_mean[kXPro ? T : 1], x_scale[kXPro ? T : 1], x_beta[kXPro ? T : 1];

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int i0 = static_cast<int>(blockIdx.x) * T, o0 = static_cast<int>(blockIdx.y) * T;
    const int chunk = static_cast<int>(blockIdx.z);
    const long long s_lo = pwconv_tile_begin(steps_total, chunks, chunk), s_hi = pwconv_tile_begin(steps_total, chunks, chunk + 1);
    if (tid < T) {
        if constexpr (kBwd)
            pw::stage_backward_consts(sdy, o0 + tid, tid, cout, d_mean, d_inv, d_scale, d_beta, d_mg, d_mgx);
        if constexpr (kXPro) pw::stage_apply_consts(sx, i0 + tid, tid, x_mean, x_scale, x_beta);
    }
    if constexpr (kBwd || kXPro) __syncthreads();

    const int r = tid / 4, cg = 8 * (tid % 4);
    uint4 rdy, rxb, rx;
    bool valid = false;
    auto load_step = [&](long long s) {
        const long long row = s * T + r;
        valid = row < rows;
        const size_t od = static_cast<size_t>(row) * cout + o0 + cg, ox = static_cast<size_t>(row) * cin + i0 + cg;
        rdy = valid ? __ldg(reinterpret_cast<const uint4*>(dy + od)) : make_uint4(0, 0, 0, 0);
        if constexpr (kBwd) rxb = valid ? __ldg(reinterpret_cast<const uint4*>(sdy.x + od)) : make_uint4(0, 0, 0, 0);
        rx = valid ? __ldg(reinterpret_cast<const uint4*>(x + ox)) : make_uint4(0, 0, 0, 0);
    };
    auto store_step = [&](int buf) {
        float vd[8], vx[8];
        unpack8(rdy, vd);
        unpack8(rx, vx);
        if constexpr (kBwd) {
            float xb[8];
            unpack8(rxb, xb);
            pw::bn_dx8<ADy>(vd, xb, d_mean + cg, d_inv + cg, d_scale + cg, d_beta + cg, d_mg + cg, d_mgx + cg);
#pragma unroll
            for (int j = 0; j < 8; ++j) vd[j] = valid ? vd[j] : 0.0f;
        }
        if constexpr (kXPro) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                vx[j] = valid ? act_fwd<AX>(fmaf(vx[j] - x_mean[cg + j], x_scale[cg + j], x_beta[cg + j])) : 0.0f;
        }
        const int rs = r ^ cg;  // wgrad_col(cg + j, r) for every j < 8 (cg is a multiple of 8 below 32)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            as[buf][cg + j][rs] = __float2bfloat16_rn(vd[j]);
            bs[buf][cg + j][rs] = __float2bfloat16_rn(vx[j]);
        }
    };

    float acc[2][4];
#pragma unroll
    for (int f = 0; f < 2; ++f) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
    const int wm = 16 * (warp / 2), wn = 16 * (warp % 2);
    load_step(s_lo);
    store_step(0);
    __syncthreads();
    for (long long s = s_lo; s < s_hi; ++s) {
        const int buf = static_cast<int>((s - s_lo) & 1);
        if (s + 1 < s_hi) load_step(s + 1);
#pragma unroll
        for (int kk = 0; kk < T; kk += 16) {
            uint32_t af[4], b4[4];
            const int ra = wm + (lane % 8) + 8 * ((lane / 8) % 2), rb = wn + (lane % 8) + 8 * (lane / 16);
            ldmatrix_x4(af, &as[buf][ra][wgrad_col(ra, kk + 8 * (lane / 16))]);
            ldmatrix_x4(b4, &bs[buf][rb][wgrad_col(rb, kk + 8 * ((lane / 8) % 2))]);
            const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
            mma_bf16_16816(acc[0], af, b0);
            mma_bf16_16816(acc[1], af, b1);
        }
        if (s + 1 < s_hi) store_step(buf ^ 1);
        __syncthreads();
    }
    float* tile = part + static_cast<size_t>(chunk) * cout * cin;
#pragma unroll
    for (int f = 0; f < 2; ++f) {
        const size_t col = static_cast<size_t>(i0 + wn + 8 * f + 2 * t);
        *reinterpret_cast<float2*>(tile + static_cast<size_t>(o0 + wm + g) * cin + col) = make_float2(acc[f][0], acc[f][1]);
        *reinterpret_cast<float2*>(tile + static_cast<size_t>(o0 + wm + g + 8) * cin + col) =
            make_float2(acc[f][2], acc[f][3]);
    }
}

// The wgrad, pass 2: dw[e] += the fixed-order fp64 sum of the chunks' partials (finalize_partials).
__global__ void pwconv_wgrad_finalize_kernel(int entries, int chunks, const float* __restrict__ part,
                                             float* __restrict__ dw) {
    rt::pdl_entry();
    finalize_partials<kPwFinalizeX, kPwFinalizeY>(entries, chunks, part, AddTo{dw});
}

}  // namespace

PwWgradPlan pwconv_wgrad_plan(const ConvShape& s) {
    const PwConvPlan p = pwconv_plan(s);
    return pwconv_wgrad_geometry(p.rows, p.k, p.n);
}

size_t pwconv_wgrad_workspace_floats(const ConvShape& s) {
    const PwWgradPlan p = pwconv_wgrad_plan(s);
    return static_cast<size_t>(p.chunks) * static_cast<size_t>(p.entries);
}

namespace {

template <PwA kDy, Act ADy, bool kXPro, Act AX>
void launch_wgrad(const rt::Exec& ex, const PwWgradPlan& p, const bf16* x, const bf16* dy, const PwStage& sdy,
                  const PwStage& sx, float* part) {
    rt::launch(ex, "pwconv_wgrad_kernel", pwconv_wgrad_kernel<kDy, ADy, kXPro, AX>,
               dim3(p.n_blocks, p.m_blocks, p.chunks), dim3(kPwWgradThreads), 0, static_cast<int>(p.rows), p.cin,
               p.cout, p.steps, p.chunks, dev(x), dev(dy), sdy, sx, part);
}

// The x-side prologue's activation, then the dy side's.
template <PwA kDy, Act ADy>
void wgrad_x(const rt::Exec& ex, const PwWgradPlan& p, const DwPrologue* pro, const bf16* x, const bf16* dy,
             const PwStage& sdy, const PwStage& sx, float* part) {
    if (!pro) return launch_wgrad<kDy, ADy, false, Act::None>(ex, p, x, dy, sdy, sx, part);
    switch (pro->act) {
        case Act::Silu: return launch_wgrad<kDy, ADy, true, Act::Silu>(ex, p, x, dy, sdy, sx, part);
        case Act::Relu: return launch_wgrad<kDy, ADy, true, Act::Relu>(ex, p, x, dy, sdy, sx, part);
        default: return launch_wgrad<kDy, ADy, true, Act::None>(ex, p, x, dy, sdy, sx, part);
    }
}

}  // namespace

void pwconv_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                 float* workspace, size_t workspace_floats, const DwPrologue* pro,
                                 const DwBnBackward* bnb) {
    const char* op = "pwconv_backward_filter_cuda";
    rt::check_cuda_exec(op, ex);
    const PwWgradPlan p = pwconv_wgrad_plan(s);
    SF_CHECK(!pro || p.cin <= kPwMaxPrologueK, "%s: a prologue needs cin <= %d, got %d", op, kPwMaxPrologueK, p.cin);
    SF_CHECK(!bnb || p.cout <= kPwMaxPrologueK, "%s: a BN-backward prologue needs cout <= %d, got %d", op,
             kPwMaxPrologueK, p.cout);
    rt::check_device_ptr(op, "x", x, 16);
    rt::check_device_ptr(op, "dy", dy, 16);
    rt::check_device_ptr(op, "dw", dw, alignof(float));
    const size_t need = pwconv_wgrad_workspace_floats(s);
    rt::check_device_ptr(op, "workspace", workspace, 16);
    SF_CHECK(workspace_floats >= need, "%s: workspace of %zu floats, need %zu", op, workspace_floats, need);
    const size_t xb = static_cast<size_t>(p.rows) * p.cin * sizeof(bf16), dyb = static_cast<size_t>(p.rows) * p.cout * sizeof(bf16);
    const size_t dwb = static_cast<size_t>(p.entries) * sizeof(float), wsb = need * sizeof(float);
    SF_CHECK(!rt::overlap(dw, dwb, x, xb) && !rt::overlap(dw, dwb, dy, dyb) && !rt::overlap(dw, dwb, workspace, wsb),
             "%s: dw must not alias x, dy or the workspace", op);
    SF_CHECK(!rt::overlap(workspace, wsb, x, xb) && !rt::overlap(workspace, wsb, dy, dyb),
             "%s: the workspace must not alias x or dy", op);
    check_dw_prologue(op, pro, p.cin, {{dw, dwb}, {workspace, wsb}});
    check_dw_bn_backward(op, bnb, p.cout, dyb, {{dw, dwb}, {workspace, wsb}}, "dw and the workspace");
    PwStage sx{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    if (pro) sx = PwStage{pro->gamma, pro->beta, pro->mean, pro->invstd, nullptr, nullptr, pro->eval, pro->eps};
    PwStage sdy{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, false, 0.0};
    if (bnb) sdy = PwStage{bnb->gamma, bnb->beta, bnb->mean, bnb->invstd, bnb->coef, dev(bnb->x), false, 0.0};
    if (!bnb) wgrad_x<PwA::Plain, Act::None>(ex, p, pro, x, dy, sdy, sx, workspace);
    else if (bnb->act == Act::Silu) wgrad_x<PwA::Backward, Act::Silu>(ex, p, pro, x, dy, sdy, sx, workspace);
    else if (bnb->act == Act::Relu) wgrad_x<PwA::Backward, Act::Relu>(ex, p, pro, x, dy, sdy, sx, workspace);
    else wgrad_x<PwA::Backward, Act::None>(ex, p, pro, x, dy, sdy, sx, workspace);
    rt::launch(ex, "pwconv_wgrad_finalize_kernel", pwconv_wgrad_finalize_kernel,
               dim3(static_cast<unsigned>(p.finalize_blocks)), dim3(kPwFinalizeX, kPwFinalizeY), 0,
               static_cast<int>(p.entries), p.chunks, static_cast<const float*>(workspace), dw);
}

}  // namespace kern
