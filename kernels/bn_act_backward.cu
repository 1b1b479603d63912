// CUDA BatchNorm + activation, backward launchers (kernels/bn_act_cuda.h, docs/KERNELS_BN_ACT.md):
// bn_act_backward, its two halves bn_act_backward_stats / bn_act_backward_dx, and the finalize alone.
// The row kernels are kernels/bn_act_rows.cuh's, the checks and dispatch kernels/bn_act_launch.cuh's,
// the plan kernels/bn_act.cu's. Pass 1 reduces sum g and sum g*xhat per channel into per-chunk
// partials, pass 2 adds the chunks in a fixed order in fp64 (dgamma, dbeta and the dx coefficients),
// pass 3 writes dx; no atomics, so two runs agree bit for bit.
#include <cstddef>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_launch.cuh"
#include "kernels/bn_act_rows.cuh"
#include "kernels/cuda_util.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

// Backward, pass 2. grid finalize_blocks, block (32, 8). dbeta += sum g, dgamma += sum g*xhat;
// coef[0..C) = sum g / rows, coef[C..2C) = sum g*xhat / rows for the dx pass.
template <int R>
__global__ void bn_act_backward_finalize_kernel(size_t rows, int c, int chunks, const float* __restrict__ part,
                                                float* __restrict__ dgamma, float* __restrict__ dbeta,
                                                float* __restrict__ coef) {
    rt::pdl_entry();
    double s0, s1;
    finalize_sums<R>(c, chunks, part, s0, s1);
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    if (threadIdx.y != 0 || ch >= c) return;
    dbeta[ch] += static_cast<float>(s0);
    dgamma[ch] += static_cast<float>(s1);
    coef[ch] = static_cast<float>(s0 / static_cast<double>(rows));
    coef[c + ch] = static_cast<float>(s1 / static_cast<double>(rows));
}

// min_blocks 3 runs a backward row kernel's capped form only where it raises the resident blocks: where
// the measured kernel holds more than 80 registers per thread (fewer than 3 blocks of 256 fit; the SiLU
// forms, the four-row forms, the upsampled sources). Below that the cap would only cost registers: the
// identity dx at 62 registers holds 4 blocks, capped 3 (docs/KERNELS_BN_ACT.md). Asked of the loaded
// kernel once per kernel (cudaFuncGetAttributes; the emulation answers with the sm_90 build's figures).
constexpr int kCappedRegs = 80;  // 65,536 / (256 x 3), in units of 8
bool cap_raises_blocks(const void* measured) {
    static std::mutex mu;
    static std::unordered_map<const void*, bool> memo;
    std::lock_guard<std::mutex> lock(mu);
    const auto it = memo.find(measured);
    if (it != memo.end()) return it->second;
    cudaFuncAttributes a{};
    SF_CUDA_CHECK(cudaFuncGetAttributes(&a, measured));
    return memo[measured] = a.numRegs > kCappedRegs;
}
template <class K>
K pick_kernel(const BnActPlan& pl, K measured, K capped) {
    return pl.min_blocks == 3 && cap_raises_blocks(reinterpret_cast<const void*>(measured)) ? capped : measured;
}

template <Act A>
void launch_backward(const rt::Exec& ex, const BnActPlan& pl, const bf16* x, const bf16* dy, const float* gamma,
                     const float* beta, const float* mean, const float* invstd, bf16* dx, float* dgamma, float* dbeta,
                     float* ws, const float* given_coef, const BnUpsampled* up) {
    const dim3 block(pl.block_x, pl.block_y);
    const float* coef = given_coef;
    if (!given_coef) {
        float* part = ws;                                           // 2 * chunks * C
        float* wcoef = ws + 2 * static_cast<size_t>(pl.chunks) * pl.c;  // 2 * C (bn_act_backward_coef_offset)
        with_source(pl, x, up, [&](auto src, auto rb) {
            constexpr int R = decltype(rb)::value;
            using Src = decltype(src);
            const auto kernel = pick_kernel(pl, bn_act_backward_reduce_kernel<A, R, Src>,
                                            bn_act_backward_reduce_capped_kernel<A, R, Src>);
            rt::launch(ex, "bn_act_backward_reduce_kernel", kernel, dim3(pl.grid_x, pl.chunks), block, 0, pl.rows, pl.c,
                       pl.chunks, src, dev(dy), gamma, beta, mean, invstd, part);
        });
        with_row_batch(pl, [&](auto rb) {
            rt::launch(ex, "bn_act_backward_finalize_kernel", bn_act_backward_finalize_kernel<decltype(rb)::value>,
                       pl.finalize_blocks, dim3(kFinalizeX, kFinalizeY), 0, pl.rows, pl.c, pl.chunks, part, dgamma,
                       dbeta, wcoef);
        });
        coef = wcoef;
    }
    if (!dx) return;  // bn_act_backward_stats: the coefficients stay in the workspace
    with_source(pl, x, up, [&](auto src, auto rb) {
        constexpr int R = decltype(rb)::value;
        using Src = decltype(src);
        const auto kernel =
            pick_kernel(pl, bn_act_backward_dx_kernel<A, R, Src>, bn_act_backward_dx_capped_kernel<A, R, Src>);
        rt::launch(ex, "bn_act_backward_dx_kernel", kernel, dim3(pl.grid_x, pl.apply_grid_y), block, 0, pl.rows, pl.c,
                   src, dev(dy), gamma, beta, mean, invstd, coef, dev(dx));
    });
}

}  // namespace

namespace {

// bn_act_backward (dx non-null) and bn_act_backward_stats (dx null: no dx pass): one set of checks,
// then the launches.
// bn_act_backward_dx (coef non-null): the dx pass alone with the given coefficients, no workspace.
void backward_checked(const char* op, const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy,
                      const float* gamma, const float* beta, const float* save_mean, const float* save_invstd, bf16* dx,
                      float* dgamma, float* dbeta, float* workspace, size_t workspace_floats, BnBackwardRows rk,
                      const float* coef = nullptr, const BnUpsampled* up = nullptr) {
    BnActPlan pl;
    if (dx) {
        pl = check_common(op, ex, rows, c, true, rk.row_batch, x, dx, up, rk.min_blocks);
    } else {
        rt::check_cuda_exec(op, ex);
        pl = bn_act_plan(rows, c, true, rk.row_batch, rk.min_blocks);
        SF_CHECK(rt::aligned(x, 16), "%s: x must be non-null and 16-byte aligned (got %p)", op,
                 static_cast<const void*>(x));
    }
    SF_CHECK(rt::aligned(dy, 16), "%s: dy must be non-null and 16-byte aligned (got %p)", op,
             static_cast<const void*>(dy));
    SF_CHECK(static_cast<const void*>(dy) != static_cast<const void*>(dx), "%s: dx must not alias dy", op);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_vec(op, "save_mean", save_mean);
    check_vec(op, "save_invstd", save_invstd);
    if (coef) {
        check_vec(op, "coef", coef);
        const size_t db = rows * static_cast<size_t>(c) * sizeof(bf16);
        SF_CHECK(!rt::overlap(dx, db, coef, 2 * static_cast<size_t>(c) * sizeof(float)),
                 "%s: dx must not alias coef", op);
    } else {
        check_vec(op, "dgamma", dgamma);
        check_vec(op, "dbeta", dbeta);
        check_workspace(op, pl, workspace, workspace_floats);
    }
    switch (act) {
        case Act::None:
            return launch_backward<Act::None>(ex, pl, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta,
                                              workspace, coef, up);
        case Act::Silu:
            return launch_backward<Act::Silu>(ex, pl, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta,
                                              workspace, coef, up);
        case Act::Relu:
            return launch_backward<Act::Relu>(ex, pl, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta,
                                              workspace, coef, up);
    }
    SF_FAIL("%s: activation %d is not one of none, silu, relu", op, static_cast<int>(act));
}

}  // namespace

void bn_act_backward(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy, const float* gamma,
                     const float* beta, const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma,
                     float* dbeta, float* workspace, size_t workspace_floats, BnBackwardRows rows_k,
                     const BnUpsampled* up) {
    const char* op = "bn_act_backward";
    SF_CHECK(!up || dx, "%s: dx is required", op);
    SF_CHECK(!up || !rt::overlap(dy, rows * static_cast<size_t>(c) * sizeof(bf16), up->lo,
                                 up->lo_shape.numel() * sizeof(bf16)),
             "%s: dy must not alias the upsampled source", op);
    backward_checked(op, ex, act, rows, c, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta, workspace,
                     workspace_floats, rows_k, nullptr, up);
}

size_t bn_act_backward_coef_offset(size_t rows, int c) {
    const BnActPlan pl = bn_act_plan(rows, c, true);
    return 2 * static_cast<size_t>(pl.chunks) * static_cast<size_t>(pl.c);
}

void bn_act_backward_stats(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy,
                           const float* gamma, const float* beta, const float* save_mean, const float* save_invstd,
                           float* dgamma, float* dbeta, float* workspace, size_t workspace_floats,
                           BnBackwardRows rows_k) {
    backward_checked("bn_act_backward_stats", ex, act, rows, c, x, dy, gamma, beta, save_mean, save_invstd, nullptr,
                     dgamma, dbeta, workspace, workspace_floats, rows_k);
}

void bn_act_backward_dx(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy,
                        const float* gamma, const float* beta, const float* save_mean, const float* save_invstd,
                        const float* coef, bf16* dx, BnBackwardRows rows_k) {
    check_vec("bn_act_backward_dx", "coef", coef);  // null would mean "gather them" to backward_checked
    backward_checked("bn_act_backward_dx", ex, act, rows, c, x, dy, gamma, beta, save_mean, save_invstd, dx, nullptr,
                     nullptr, nullptr, 0, rows_k, coef);
}

void bn_act_backward_finalize(const rt::Exec& ex, size_t rows, int c, int chunks, const float* part, float* dgamma,
                              float* dbeta, float* coef) {
    const char* op = "bn_act_backward_finalize";
    rt::check_cuda_exec(op, ex);
    SF_CHECK(c > 0 && chunks > 0 && rows >= 2, "%s: needs C > 0, chunks > 0 and rows >= 2 (C=%d chunks=%d rows=%zu)",
             op, c, chunks, rows);
    check_vec(op, "part", part);
    check_vec(op, "dgamma", dgamma);
    check_vec(op, "dbeta", dbeta);
    check_vec(op, "coef", coef);
    const size_t vb = static_cast<size_t>(c) * sizeof(float), pb = 2 * static_cast<size_t>(chunks) * vb;
    const void* outs[3] = {dgamma, dbeta, coef};
    const size_t ob[3] = {vb, vb, 2 * vb};
    for (int i = 0; i < 3; ++i) {
        SF_CHECK(!rt::overlap(outs[i], ob[i], part, pb), "%s: the outputs must not alias the partials", op);
        for (int j = 0; j < i; ++j)
            SF_CHECK(!rt::overlap(outs[i], ob[i], outs[j], ob[j]), "%s: dgamma, dbeta and coef must not overlap", op);
    }
    rt::launch(ex, "bn_act_backward_finalize_kernel", bn_act_backward_finalize_kernel<1>,
               static_cast<int>((c + kFinalizeX - 1) / kFinalizeX), dim3(kFinalizeX, kFinalizeY), 0, rows, c, chunks,
               part, dgamma, dbeta, coef);
}

}  // namespace kern
