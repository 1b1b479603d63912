// CUDA BatchNorm (batch statistics) + SiLU/ReLU/None, forward and fused backward, on bf16 NHWC
// data viewed as (rows = N*H*W, C) (kernels/bn_act_cuda.h, docs/KERNELS_BN_ACT.md).
//
// Every row kernel uses the same geometry (BnActPlan): threadIdx.x picks an 8-channel group (one
// 128-bit load of 8 bf16 per row), threadIdx.y a row lane; a warp therefore reads contiguous memory
// (a block's groups are adjacent in a row, consecutive rows are adjacent). Per-channel parameters are
// loaded once per thread, outside the row loop.
// Reductions are deterministic: gridDim.y = a fixed number of row chunks, each thread sums its rows
// in order in fp32, the block combines its row lanes with a fixed-shape tree, each block writes its
// chunk's per-channel partials to the workspace, and a finalize kernel adds the chunks in a fixed
// order in fp64. No atomics anywhere, so two runs agree bit for bit.
// Forward statistics are SHIFTED sums, sum(x - K) and sum((x - K)^2) with K = x[row 0][c]: one pass
// over x, and no catastrophic cancellation in E[x^2] - E[x]^2 when |mean| >> std (K is a sample, so
// |mean - K| is of the order of the std).
// This file: the plan, the statistics and apply passes and the forward launchers; the backward
// launchers are in kernels/bn_act_backward.cu, what both share in kernels/bn_act_launch.cuh.
#include <algorithm>
#include <cstdint>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/bn_act_launch.cuh"
#include "kernels/bn_act_rows.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

// The row kernels (statistics, apply, backward reduce, dx) and their helpers: kernels/bn_act_rows.cuh.

// Forward statistics, pass 2. grid finalize_blocks, block (32, 8). Writes mean, invstd (biased
// variance) and updates the running statistics (unbiased variance), all from fp64.
template <int R, class Src>
__global__ void bn_act_stats_finalize_kernel(size_t rows, int c, int chunks, Src x, const float* __restrict__ part,
                                             float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                             float* __restrict__ running_mean, float* __restrict__ running_var,
                                             double momentum, double eps) {
    rt::pdl_entry();
    double s0, s1;
    finalize_sums<R>(c, chunks, part, s0, s1);
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    if (threadIdx.y != 0 || ch >= c) return;
    bn_stats_write(
        ch, static_cast<double>(rows), [&] { return static_cast<double>(x.first(ch)); }, s0, s1, save_mean, save_invstd,
        running_mean, running_var, momentum, eps);
}

template <Act A, bool kEval>
void launch_apply(const rt::Exec& ex, const BnActPlan& pl, const bf16* x, const float* gamma, const float* beta,
                  const float* mean, const float* invstd_or_var, double eps, const bf16* res, bf16* y,
                  const BnUpsampled* up) {
    const dim3 grid(pl.grid_x, pl.apply_grid_y), block(pl.block_x, pl.block_y);
    with_source(pl, x, up, [&](auto src, auto rb) {
        constexpr int R = decltype(rb)::value;
        using Src = decltype(src);
        if (res)
            rt::launch(ex, "bn_act_apply_kernel", bn_act_apply_kernel<A, kEval, true, R, Src>, grid, block, 0, pl.rows,
                       pl.c, src, gamma, beta, mean, invstd_or_var, eps, dev(res), dev(y));
        else
            rt::launch(ex, "bn_act_apply_kernel", bn_act_apply_kernel<A, kEval, false, R, Src>, grid, block, 0, pl.rows,
                       pl.c, src, gamma, beta, mean, invstd_or_var, eps, nullptr, dev(y));
    });
}

template <bool kEval>
void apply(const rt::Exec& ex, Act act, const BnActPlan& pl, const bf16* x, const float* gamma, const float* beta,
           const float* mean, const float* invstd_or_var, double eps, const bf16* res, bf16* y,
           const BnUpsampled* up = nullptr) {
    switch (act) {
        case Act::None:
            launch_apply<Act::None, kEval>(ex, pl, x, gamma, beta, mean, invstd_or_var, eps, res, y, up);
            break;
        case Act::Silu:
            launch_apply<Act::Silu, kEval>(ex, pl, x, gamma, beta, mean, invstd_or_var, eps, res, y, up);
            break;
        case Act::Relu:
            launch_apply<Act::Relu, kEval>(ex, pl, x, gamma, beta, mean, invstd_or_var, eps, res, y, up);
            break;
    }
}

// The residual of a forward: null, or 16-byte aligned, not x, and either y itself or disjoint from it.
void check_residual(const char* op, size_t rows, int c, const bf16* x, const bf16* res, const bf16* y,
                    const BnUpsampled* up = nullptr) {
    if (!res) return;
    SF_CHECK(!up || !rt::overlap(res, rows * static_cast<size_t>(c) * sizeof(bf16), up->lo,
                                 up->lo_shape.numel() * sizeof(bf16)),
             "%s: the residual must not alias the upsampled source", op);
    SF_CHECK(rt::aligned(res, 16), "%s: the residual must be 16-byte aligned (%p)", op, static_cast<const void*>(res));
    const size_t n = rows * static_cast<size_t>(c);
    SF_CHECK(res != x, "%s: the residual must not alias x", op);
    SF_CHECK(res == y || res + n <= y || y + n <= res,
             "%s: the residual must be the output itself or not overlap it (res=%p y=%p, %zu elements)", op,
             static_cast<const void*>(res), static_cast<const void*>(y), n);
}

}  // namespace

// ---- launchers ----

BnActPlan bn_act_plan(size_t rows, int c, bool train, int row_batch, int min_blocks) {
    SF_CHECK(c > 0 && c % 8 == 0, "bn_act: C must be a positive multiple of 8 (128-bit bf16 vectors), got C=%d", c);
    SF_CHECK(bn_act_row_batch_valid(row_batch), "bn_act: row_batch must be 1 or 4, got %d", row_batch);
    SF_CHECK(bn_act_min_blocks_valid(min_blocks), "bn_act: min_blocks must be 1 or 3, got %d", min_blocks);
    SF_CHECK(rows > 0, "bn_act: rows must be positive, got rows=%zu (C=%d)", rows, c);
    SF_CHECK(!train || rows > 1, "bn_act train: need more than 1 value per channel, got rows=%zu (C=%d)", rows, c);
    BnActPlan p;
    p.rows = rows;
    p.c = c;
    p.row_batch = row_batch;
    p.min_blocks = min_blocks;
    p.groups = c / 8;
    p.block_x = std::min(p.groups, 32);
    p.block_y = 1;
    while (p.block_x * p.block_y * 2 <= kBnActThreads) p.block_y *= 2;  // largest power of two that fits
    p.grid_x = (p.groups + p.block_x - 1) / p.block_x;
    p.chunks = static_cast<int>(std::min(rows, static_cast<size_t>(kBnActChunks)));
    // The element-wise passes: enough blocks that each thread gets row_batch rows where the cap allows
    // (no sum depends on it).
    const size_t row_blocks = (rows + p.block_y - 1) / p.block_y;
    const size_t turn_blocks = (row_blocks + row_batch - 1) / row_batch;
    p.apply_grid_y = static_cast<int>(std::min(turn_blocks, static_cast<size_t>(kBnActMaxApplyY)));
    p.finalize_blocks = (c + kFinalizeX - 1) / kFinalizeX;
    p.workspace_floats = 2 * static_cast<size_t>(p.chunks) * c + 2 * static_cast<size_t>(c);
    return p;
}

size_t bn_act_workspace_floats(size_t rows, int c) { return bn_act_plan(rows, c, false).workspace_floats; }

namespace {

// Batch statistics of x into save_mean/save_invstd and the running statistics (two launches).
void launch_stats(const rt::Exec& ex, const BnActPlan& pl, const bf16* x, float* save_mean, float* save_invstd,
                  float* running_mean, float* running_var, double momentum, double eps, float* workspace,
                  const BnUpsampled* up = nullptr) {
    with_source(pl, x, up, [&](auto src, auto rb) {
        rt::launch(ex, "bn_act_stats_kernel", bn_act_stats_kernel<decltype(rb)::value, decltype(src)>,
                   dim3(pl.grid_x, pl.chunks), dim3(pl.block_x, pl.block_y), 0, pl.rows, pl.c, pl.chunks, src,
                   workspace);
    });
    with_source(pl, x, up, [&](auto src, auto rb) {
        rt::launch(ex, "bn_act_stats_finalize_kernel", bn_act_stats_finalize_kernel<decltype(rb)::value, decltype(src)>,
                   pl.finalize_blocks, dim3(kFinalizeX, kFinalizeY), 0, pl.rows, pl.c, pl.chunks, src, workspace,
                   save_mean, save_invstd, running_mean, running_var, momentum, eps);
    });
}

void check_stats_vectors(const char* op, const float* save_mean, const float* save_invstd, const float* running_mean,
                         const float* running_var) {
    check_vec(op, "save_mean", save_mean);
    check_vec(op, "save_invstd", save_invstd);
    check_vec(op, "running_mean", running_mean);
    check_vec(op, "running_var", running_var);
}

}  // namespace

void bn_act_forward_train(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                          const float* beta, bf16* y, float* save_mean, float* save_invstd, float* running_mean,
                          float* running_var, double momentum, double eps, float* workspace, size_t workspace_floats,
                          const bf16* residual, int row_batch, const BnUpsampled* up) {
    const char* op = "bn_act_forward_train";
    const BnActPlan pl = check_common(op, ex, rows, c, true, row_batch, x, y, up);
    check_residual(op, rows, c, x, residual, y, up);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_stats_vectors(op, save_mean, save_invstd, running_mean, running_var);
    check_workspace(op, pl, workspace, workspace_floats);
    launch_stats(ex, pl, x, save_mean, save_invstd, running_mean, running_var, momentum, eps, workspace, up);
    apply<false>(ex, act, pl, x, gamma, beta, save_mean, save_invstd, eps, residual, y, up);
}

void bn_stats_train(const rt::Exec& ex, size_t rows, int c, const bf16* x, float* save_mean, float* save_invstd,
                    float* running_mean, float* running_var, double momentum, double eps, float* workspace,
                    size_t workspace_floats, int row_batch) {
    const char* op = "bn_stats_train";
    rt::check_cuda_exec(op, ex);
    const BnActPlan pl = bn_act_plan(rows, c, true, row_batch);
    SF_CHECK(rt::aligned(x, 16), "%s: x must be non-null and 16-byte aligned (got %p)", op,
             static_cast<const void*>(x));
    check_stats_vectors(op, save_mean, save_invstd, running_mean, running_var);
    check_workspace(op, pl, workspace, workspace_floats);
    launch_stats(ex, pl, x, save_mean, save_invstd, running_mean, running_var, momentum, eps, workspace);
}

void bn_act_apply_train(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                        const float* beta, const float* save_mean, const float* save_invstd, bf16* y,
                        const bf16* residual, int row_batch) {
    const char* op = "bn_act_apply_train";
    const BnActPlan pl = check_common(op, ex, rows, c, true, row_batch, x, y);
    check_residual(op, rows, c, x, residual, y);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_vec(op, "save_mean", save_mean);
    check_vec(op, "save_invstd", save_invstd);
    apply<false>(ex, act, pl, x, gamma, beta, save_mean, save_invstd, 0.0, residual, y);
}

void bn_act_forward_eval(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                         const float* beta, const float* running_mean, const float* running_var, double eps, bf16* y,
                         const bf16* residual, int row_batch, const BnUpsampled* up) {
    const char* op = "bn_act_forward_eval";
    const BnActPlan pl = check_common(op, ex, rows, c, false, row_batch, x, y, up);
    check_residual(op, rows, c, x, residual, y, up);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_vec(op, "running_mean", running_mean);
    check_vec(op, "running_var", running_var);
    apply<true>(ex, act, pl, x, gamma, beta, running_mean, running_var, eps, residual, y, up);
}

}  // namespace kern
