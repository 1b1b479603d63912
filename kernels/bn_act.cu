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
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/bn_act_rows.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kFinalizeX = 32;  // channels per finalize block
constexpr int kFinalizeY = 8;   // chunk lanes per finalize block

// The row kernels (statistics, apply, backward reduce, dx) and their helpers: kernels/bn_act_rows.cuh.

// Chunks per lane whose partials the row_batch 4 finalize loads before adding the first of them.
constexpr int kFinalizeBatch = 16;

// Per-channel fixed-order fp64 sums over the chunks of both partial arrays, for channel
// blockIdx.x * 32 + threadIdx.x; valid in threads with threadIdx.y == 0. Block (32, 8): lane y adds
// chunks y, y + 8, ...; then lane 0 adds the 8 lane sums in order.
// R == 1 (the measured kernels): each chunk's two partials are loaded and added before the next
// chunk's are loaded (ptxas issues 8 loads per round trip: 16 round trips for 512 chunks).
// R == 4 (with the row kernels' row_batch 4): a lane loads kFinalizeBatch chunks' partials (32 loads)
// before adding the first, then adds them in the same order, so the sums are the same bits; a chunk
// past the end loads nothing and adds +0.0, which leaves a sum that started at +0.0 unchanged (such a
// sum is never -0.0). 4 round trips for 512 chunks.
template <int R>
__device__ __forceinline__ void finalize_sums(int c, int chunks, const float* __restrict__ part, double& s0,
                                              double& s1) {
    __shared__ double sm[2][kFinalizeY][kFinalizeX];
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    s0 = 0.0;
    s1 = 0.0;
    if (ch < c) {
        if constexpr (R == 1) {
            for (int k = threadIdx.y; k < chunks; k += kFinalizeY) {
                s0 += static_cast<double>(part[static_cast<size_t>(k) * c + ch]);
                s1 += static_cast<double>(part[static_cast<size_t>(chunks + k) * c + ch]);
            }
        } else {
            for (int k0 = threadIdx.y; k0 < chunks; k0 += kFinalizeBatch * kFinalizeY) {
                float a[kFinalizeBatch], b[kFinalizeBatch];
#pragma unroll
                for (int u = 0; u < kFinalizeBatch; ++u) {
                    const int k = k0 + u * kFinalizeY;
                    a[u] = k < chunks ? part[static_cast<size_t>(k) * c + ch] : 0.0f;
                    b[u] = k < chunks ? part[static_cast<size_t>(chunks + k) * c + ch] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < kFinalizeBatch; ++u) {
                    s0 += static_cast<double>(a[u]);
                    s1 += static_cast<double>(b[u]);
                }
            }
        }
    }
    sm[0][threadIdx.y][threadIdx.x] = s0;
    sm[1][threadIdx.y][threadIdx.x] = s1;
    __syncthreads();
    if (threadIdx.y == 0) {
        s0 = 0.0;
        s1 = 0.0;
        for (int l = 0; l < kFinalizeY; ++l) {
            s0 += sm[0][l][threadIdx.x];
            s1 += sm[1][l][threadIdx.x];
        }
    }
}

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

// ---- launch helpers ----

// An upsampled source (BnUpsampled, or none): x null then, the shape (rows, C) its upsampling's, its
// low-resolution tensor aligned and apart from the output.
void check_upsampled(const char* op, size_t rows, int c, const bf16* x, const BnUpsampled* up, const void* out,
                     size_t out_bytes) {
    if (!up) return;
    SF_CHECK(x == nullptr, "%s: x must be null when the BN input is formed by upsampling (up given)", op);
    const Shape4& s = up->lo_shape;
    upsample_check_args(op, s, up->factor);  // the factor and the index ranges the upsample kernels accept
    SF_CHECK(s.c == c, "%s: the upsampled source (%d,%d,%d,%d) must have C=%d", op, s.n, s.h, s.w, s.c, c);
    const size_t want = static_cast<size_t>(s.n) * (up->factor * s.h) * (up->factor * s.w);
    SF_CHECK(rows == want, "%s: rows=%zu, but x%d upsampling of (%d,%d,%d,%d) gives %zu", op, rows, up->factor, s.n,
             s.h, s.w, s.c, want);
    SF_CHECK(rt::aligned(up->lo, 16), "%s: the upsampled source must be non-null and 16-byte aligned (%p)", op,
             static_cast<const void*>(up->lo));
    SF_CHECK(!rt::overlap(out, out_bytes, up->lo, s.numel() * sizeof(bf16)),
             "%s: the output must not alias the upsampled source", op);
}

// Checks shared by the launchers; returns the plan. With an upsampled source (up), x is null.
BnActPlan check_common(const char* op, const rt::Exec& ex, size_t rows, int c, bool train, int row_batch, const bf16* x,
                       const void* out, const BnUpsampled* up = nullptr, int min_blocks = 1) {
    rt::check_cuda_exec(op, ex);
    const BnActPlan plan = bn_act_plan(rows, c, train, row_batch, min_blocks);
    SF_CHECK((up || rt::aligned(x, 16)) && rt::aligned(out, 16),
             "%s: bf16 tensors must be non-null and 16-byte aligned (x=%p out=%p)", op, static_cast<const void*>(x),
             out);
    SF_CHECK(static_cast<const void*>(x) != out, "%s: the output must not alias x", op);
    check_upsampled(op, rows, c, x, up, out, rows * static_cast<size_t>(c) * sizeof(bf16));
    return plan;
}

void check_vec(const char* op, const char* name, const float* p) { rt::check_device_ptr(op, name, p, alignof(float)); }

void check_workspace(const char* op, const BnActPlan& plan, const float* ws, size_t ws_floats) {
    check_vec(op, "workspace", ws);
    SF_CHECK(ws_floats >= plan.workspace_floats,
             "%s: workspace of %zu floats is too small for rows=%zu C=%d (need bn_act_workspace_floats = %zu)", op,
             ws_floats, plan.rows, plan.c, plan.workspace_floats);
}

// Calls f(std::integral_constant<int, R>{}) for the plan's rows per loop turn (kBnActRowBatches).
template <class F>
void with_row_batch(const BnActPlan& pl, F&& f) {
    switch (pl.row_batch) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 4: return f(std::integral_constant<int, 4>{});
    }
    SF_FAIL("bn_act: row_batch %d has no kernel (valid: 1, 4)", pl.row_batch);
}

// Calls f(src, std::integral_constant<int, R>{}) for the BN input's source: the stored x in the plan's rows per
// loop turn, or (up) the upsampling of up->lo, one row per turn (the batched loops load stored rows only).
template <class F>
void with_source(const BnActPlan& pl, const bf16* x, const BnUpsampled* up, F&& f) {
    if (up) {
        const Shape4& s = up->lo_shape;
        return f(RowsUpsampled{dev(up->lo), s.h, s.w, up->factor, s.c}, std::integral_constant<int, 1>{});
    }
    with_row_batch(pl, [&](auto rb) { f(RowsStored{dev(x)}, rb); });
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
