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

#include "kernels/bn_act_cuda.h"
#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "runtime/cuda_check.h"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kFinalizeX = 32;  // channels per finalize block
constexpr int kFinalizeY = 8;   // chunk lanes per finalize block

// ---- device helpers (load8, store8: kernels/cuda_util.cuh) ----

// Per-thread parameters of the 8 channels of group g: z = (x - mean) * scale + beta, scale = gamma*invstd.
// The forward apply and both backward kernels compute z with exactly these operations, so the
// backward's act'(z) (the ReLU mask in particular) sees the forward's z bit for bit.
struct Chan8 {
    float mean[8], invstd[8], scale[8], beta[8];
};

__device__ __forceinline__ Chan8 load_chan8(int g, const float* __restrict__ gamma, const float* __restrict__ beta,
                                            const float* __restrict__ mean, const float* __restrict__ invstd) {
    Chan8 p;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int ch = 8 * g + j;
        p.mean[j] = __ldg(mean + ch);
        p.invstd[j] = __ldg(invstd + ch);
        p.scale[j] = __ldg(gamma + ch) * p.invstd[j];
        p.beta[j] = __ldg(beta + ch);
    }
    return p;
}

// g = dy * act'(z) and xhat = (x - mean) * invstd for one element of channel j.
template <Act A>
__device__ __forceinline__ void grad_xhat(const Chan8& p, int j, float x, float dy, float& g, float& xhat) {
    const float d = x - p.mean[j];
    xhat = d * p.invstd[j];
    g = dy * act_grad<A>(fmaf(d, p.scale[j], p.beta[j]));
}

// Sums acc[0..16) over threadIdx.y (row lanes) with a fixed tree; the totals land in the threads with
// threadIdx.y == 0. Requires blockDim.y a power of two and blockDim.x * blockDim.y <= kBnActThreads.
// Every thread of the block must call it (it synchronises). Layout sm[j][t] (t = linear thread id):
// consecutive threads touch consecutive words, no bank conflicts.
__device__ __forceinline__ void block_reduce16(float (&acc)[16]) {
    __shared__ float sm[16][kBnActThreads];
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 16; ++j) sm[j][t] = acc[j];
    __syncthreads();
    // Step s: lanes [0, s) add lanes [s, 2s); writers and the lanes read are disjoint.
    for (int s = blockDim.y / 2; s > 0; s >>= 1) {
        if (static_cast<int>(threadIdx.y) < s) {
#pragma unroll
            for (int j = 0; j < 16; ++j) sm[j][t] += sm[j][t + s * blockDim.x];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0) {
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[j] = sm[j][t];
    }
}

// Writes one chunk's partials of the 8 channels of group g: part[0 .. chunks*C) = first sums (chunk
// major), part[chunks*C .. 2*chunks*C) = second sums.
__device__ __forceinline__ void store_partials(const float (&acc)[16], int g, int c, int chunks, int chunk,
                                               float* __restrict__ part) {
    float* p0 = part + static_cast<size_t>(chunk) * c + 8 * g;
    float* p1 = part + static_cast<size_t>(chunks + chunk) * c + 8 * g;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        p0[j] = acc[j];
        p1[j] = acc[8 + j];
    }
}

// Rows [begin, end) of chunk k of `chunks`: an even split, every chunk non-empty since chunks <= rows.
__device__ __forceinline__ size_t chunk_begin(size_t rows, int chunks, int k) {
    return rows * static_cast<size_t>(k) / static_cast<size_t>(chunks);
}

// Per-channel fixed-order fp64 sums over the chunks of both partial arrays, for channel
// blockIdx.x * 32 + threadIdx.x; valid in threads with threadIdx.y == 0. Block (32, 8): lane y adds
// chunks y, y + 8, ...; then lane 0 adds the 8 lane sums in order.
__device__ __forceinline__ void finalize_sums(int c, int chunks, const float* __restrict__ part, double& s0,
                                              double& s1) {
    __shared__ double sm[2][kFinalizeY][kFinalizeX];
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    s0 = 0.0;
    s1 = 0.0;
    if (ch < c) {
        for (int k = threadIdx.y; k < chunks; k += kFinalizeY) {
            s0 += static_cast<double>(part[static_cast<size_t>(k) * c + ch]);
            s1 += static_cast<double>(part[static_cast<size_t>(chunks + k) * c + ch]);
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

// ---- kernels ----

// Forward statistics, pass 1. grid (grid_x, chunks), block (block_x, block_y). x (rows, C) ->
// part: sum(x - K), sum((x - K)^2) per (chunk, channel), K = x[0][channel].
__global__ void bn_act_stats_kernel(size_t rows, int c, int chunks, const bfloat* __restrict__ x,
                                    float* __restrict__ part) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < c / 8;
    float acc[16] = {};
    if (active) {
        float k[8], v[8];
        load8(x + 8 * g, k);
        const size_t end = chunk_begin(rows, chunks, blockIdx.y + 1);
        for (size_t r = chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y; r < end; r += blockDim.y) {
            load8(x + r * c + 8 * g, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float d = v[j] - k[j];
                acc[j] += d;
                acc[8 + j] = fmaf(d, d, acc[8 + j]);
            }
        }
    }
    block_reduce16(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) store_partials(acc, g, c, chunks, blockIdx.y, part);
}

// Forward statistics, pass 2. grid finalize_blocks, block (32, 8). Writes mean, invstd (biased
// variance) and updates the running statistics (unbiased variance), all from fp64.
__global__ void bn_act_stats_finalize_kernel(size_t rows, int c, int chunks, const bfloat* __restrict__ x,
                                             const float* __restrict__ part, float* __restrict__ save_mean,
                                             float* __restrict__ save_invstd, float* __restrict__ running_mean,
                                             float* __restrict__ running_var, double momentum, double eps) {
    double s0, s1;
    finalize_sums(c, chunks, part, s0, s1);
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    if (threadIdx.y != 0 || ch >= c) return;
    const double n = static_cast<double>(rows);
    const double dm = s0 / n;  // mean - K
    const double mean = static_cast<double>(__bfloat162float(x[ch])) + dm;
    const double var = fmax(s1 / n - dm * dm, 0.0);
    const double invstd = 1.0 / sqrt(var + eps);
    const double unbiased = var * n / (n - 1.0);
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(invstd);
    running_mean[ch] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_mean[ch]) + momentum * mean);
    running_var[ch] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_var[ch]) + momentum * unbiased);
}

// y = act((x - mean) * gamma * invstd + beta) [+ res], one pass. grid (grid_x, apply_grid_y), block
// (block_x, block_y), grid-stride over rows. kEval: `invstd` holds running_var, inverted here.
// kRes: the residual `res` (which may be y itself: each thread reads its 8 values before writing
// them, with a coherent load) is added in fp32 before the one rounding to bf16.
template <Act A, bool kEval, bool kRes>
__global__ void bn_act_apply_kernel(size_t rows, int c, const bfloat* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                    const float* __restrict__ invstd, double eps, const bfloat* res, bfloat* y) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= c / 8) return;  // no block-wide synchronisation in this kernel
    const BnApply8 p = load_bn_apply8(g, gamma, beta, mean, invstd, kEval, eps);  // the z load_chan8 forms
    float v[8], rv[8];
    for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
         r += static_cast<size_t>(gridDim.y) * blockDim.y) {
        load8(x + r * c + 8 * g, v);
        if constexpr (kRes) load8_rw(res + r * c + 8 * g, rv);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            v[j] = bn_act_value<A>(p, j, v[j]);
            if constexpr (kRes) v[j] = rv[j] + v[j];
        }
        store8(y + r * c + 8 * g, v);
    }
}

// Backward, pass 1. grid (grid_x, chunks), block (block_x, block_y). part: sum g, sum g*xhat per
// (chunk, channel), g = dy * act'(z) recomputed from x.
template <Act A>
__global__ void bn_act_backward_reduce_kernel(size_t rows, int c, int chunks, const bfloat* __restrict__ x,
                                              const bfloat* __restrict__ dy, const float* __restrict__ gamma,
                                              const float* __restrict__ beta, const float* __restrict__ mean,
                                              const float* __restrict__ invstd, float* __restrict__ part) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = g < c / 8;
    float acc[16] = {};
    if (active) {
        const Chan8 p = load_chan8(g, gamma, beta, mean, invstd);
        float v[8], d[8];
        const size_t end = chunk_begin(rows, chunks, blockIdx.y + 1);
        for (size_t r = chunk_begin(rows, chunks, blockIdx.y) + threadIdx.y; r < end; r += blockDim.y) {
            load8(x + r * c + 8 * g, v);
            load8(dy + r * c + 8 * g, d);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                float gr, xhat;
                grad_xhat<A>(p, j, v[j], d[j], gr, xhat);
                acc[j] += gr;
                acc[8 + j] = fmaf(gr, xhat, acc[8 + j]);
            }
        }
    }
    block_reduce16(acc);  // all threads, active or not
    if (active && threadIdx.y == 0) store_partials(acc, g, c, chunks, blockIdx.y, part);
}

// Backward, pass 2. grid finalize_blocks, block (32, 8). dbeta += sum g, dgamma += sum g*xhat;
// coef[0..C) = sum g / rows, coef[C..2C) = sum g*xhat / rows for the dx pass.
__global__ void bn_act_backward_finalize_kernel(size_t rows, int c, int chunks, const float* __restrict__ part,
                                                float* __restrict__ dgamma, float* __restrict__ dbeta,
                                                float* __restrict__ coef) {
    double s0, s1;
    finalize_sums(c, chunks, part, s0, s1);
    const int ch = blockIdx.x * kFinalizeX + threadIdx.x;
    if (threadIdx.y != 0 || ch >= c) return;
    dbeta[ch] += static_cast<float>(s0);
    dgamma[ch] += static_cast<float>(s1);
    coef[ch] = static_cast<float>(s0 / static_cast<double>(rows));
    coef[c + ch] = static_cast<float>(s1 / static_cast<double>(rows));
}

// Backward, pass 3: dx = gamma*invstd * (g - mean(g) - xhat * mean(g*xhat)), overwriting dx.
// grid (grid_x, apply_grid_y), block (block_x, block_y), grid-stride over rows.
template <Act A>
__global__ void bn_act_backward_dx_kernel(size_t rows, int c, const bfloat* __restrict__ x,
                                          const bfloat* __restrict__ dy, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, const float* __restrict__ mean,
                                          const float* __restrict__ invstd, const float* __restrict__ coef,
                                          bfloat* __restrict__ dx) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= c / 8) return;  // no block-wide synchronisation in this kernel
    const Chan8 p = load_chan8(g, gamma, beta, mean, invstd);
    float mg[8], mgx[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        mg[j] = coef[8 * g + j];
        mgx[j] = coef[c + 8 * g + j];
    }
    float v[8], d[8];
    for (size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
         r += static_cast<size_t>(gridDim.y) * blockDim.y) {
        load8(x + r * c + 8 * g, v);
        load8(dy + r * c + 8 * g, d);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            float gr, xhat;
            grad_xhat<A>(p, j, v[j], d[j], gr, xhat);
            v[j] = p.scale[j] * (gr - fmaf(xhat, mgx[j], mg[j]));
        }
        store8(dx + r * c + 8 * g, v);
    }
}

// ---- launch helpers ----

// Checks shared by the launchers; returns the plan.
BnActPlan check_common(const char* op, const rt::Exec& ex, size_t rows, int c, bool train, const bf16* x,
                       const void* out) {
    rt::check_cuda_exec(op, ex);
    const BnActPlan plan = bn_act_plan(rows, c, train);
    SF_CHECK(rt::aligned(x, 16) && rt::aligned(out, 16),
             "%s: bf16 tensors must be non-null and 16-byte aligned (x=%p out=%p)", op, static_cast<const void*>(x),
             out);
    SF_CHECK(static_cast<const void*>(x) != out, "%s: the output must not alias x", op);
    return plan;
}

void check_vec(const char* op, const char* name, const float* p) { rt::check_device_ptr(op, name, p, alignof(float)); }

void check_workspace(const char* op, const BnActPlan& plan, const float* ws, size_t ws_floats) {
    check_vec(op, "workspace", ws);
    SF_CHECK(ws_floats >= plan.workspace_floats,
             "%s: workspace of %zu floats is too small for rows=%zu C=%d (need bn_act_workspace_floats = %zu)", op,
             ws_floats, plan.rows, plan.c, plan.workspace_floats);
}

template <Act A, bool kEval>
void launch_apply(const rt::Exec& ex, const BnActPlan& pl, const bf16* x, const float* gamma, const float* beta,
                  const float* mean, const float* invstd_or_var, double eps, const bf16* res, bf16* y) {
    const dim3 grid(pl.grid_x, pl.apply_grid_y), block(pl.block_x, pl.block_y);
    if (res)
        bn_act_apply_kernel<A, kEval, true><<<grid, block, 0, ex.stream>>>(pl.rows, pl.c, dev(x), gamma, beta, mean,
                                                                           invstd_or_var, eps, dev(res), dev(y));
    else
        bn_act_apply_kernel<A, kEval, false><<<grid, block, 0, ex.stream>>>(pl.rows, pl.c, dev(x), gamma, beta, mean,
                                                                            invstd_or_var, eps, nullptr, dev(y));
    SF_CUDA_CHECK_LAUNCH();
}

template <bool kEval>
void apply(const rt::Exec& ex, Act act, const BnActPlan& pl, const bf16* x, const float* gamma, const float* beta,
           const float* mean, const float* invstd_or_var, double eps, const bf16* res, bf16* y) {
    switch (act) {
        case Act::None: launch_apply<Act::None, kEval>(ex, pl, x, gamma, beta, mean, invstd_or_var, eps, res, y); break;
        case Act::Silu: launch_apply<Act::Silu, kEval>(ex, pl, x, gamma, beta, mean, invstd_or_var, eps, res, y); break;
        case Act::Relu: launch_apply<Act::Relu, kEval>(ex, pl, x, gamma, beta, mean, invstd_or_var, eps, res, y); break;
    }
}

// The residual of a forward: null, or 16-byte aligned, not x, and either y itself or disjoint from it.
void check_residual(const char* op, size_t rows, int c, const bf16* x, const bf16* res, const bf16* y) {
    if (!res) return;
    SF_CHECK(rt::aligned(res, 16), "%s: the residual must be 16-byte aligned (%p)", op, static_cast<const void*>(res));
    const size_t n = rows * static_cast<size_t>(c);
    SF_CHECK(res != x, "%s: the residual must not alias x", op);
    SF_CHECK(res == y || res + n <= y || y + n <= res,
             "%s: the residual must be the output itself or not overlap it (res=%p y=%p, %zu elements)", op,
             static_cast<const void*>(res), static_cast<const void*>(y), n);
}

template <Act A>
void launch_backward(const rt::Exec& ex, const BnActPlan& pl, const bf16* x, const bf16* dy, const float* gamma,
                     const float* beta, const float* mean, const float* invstd, bf16* dx, float* dgamma, float* dbeta,
                     float* ws) {
    float* part = ws;                                              // 2 * chunks * C
    float* coef = ws + 2 * static_cast<size_t>(pl.chunks) * pl.c;  // 2 * C
    const dim3 block(pl.block_x, pl.block_y);
    bn_act_backward_reduce_kernel<A><<<dim3(pl.grid_x, pl.chunks), block, 0, ex.stream>>>(
        pl.rows, pl.c, pl.chunks, dev(x), dev(dy), gamma, beta, mean, invstd, part);
    SF_CUDA_CHECK_LAUNCH();
    bn_act_backward_finalize_kernel<<<pl.finalize_blocks, dim3(kFinalizeX, kFinalizeY), 0, ex.stream>>>(
        pl.rows, pl.c, pl.chunks, part, dgamma, dbeta, coef);
    SF_CUDA_CHECK_LAUNCH();
    bn_act_backward_dx_kernel<A><<<dim3(pl.grid_x, pl.apply_grid_y), block, 0, ex.stream>>>(
        pl.rows, pl.c, dev(x), dev(dy), gamma, beta, mean, invstd, coef, dev(dx));
    SF_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- launchers ----

BnActPlan bn_act_plan(size_t rows, int c, bool train) {
    SF_CHECK(c > 0 && c % 8 == 0, "bn_act: C must be a positive multiple of 8 (128-bit bf16 vectors), got C=%d", c);
    SF_CHECK(rows > 0, "bn_act: rows must be positive, got rows=%zu (C=%d)", rows, c);
    SF_CHECK(!train || rows > 1, "bn_act train: need more than 1 value per channel, got rows=%zu (C=%d)", rows, c);
    BnActPlan p;
    p.rows = rows;
    p.c = c;
    p.groups = c / 8;
    p.block_x = std::min(p.groups, 32);
    p.block_y = 1;
    while (p.block_x * p.block_y * 2 <= kBnActThreads) p.block_y *= 2;  // largest power of two that fits
    p.grid_x = (p.groups + p.block_x - 1) / p.block_x;
    p.chunks = static_cast<int>(std::min(rows, static_cast<size_t>(kBnActChunks)));
    const size_t row_blocks = (rows + p.block_y - 1) / p.block_y;
    p.apply_grid_y = static_cast<int>(std::min(row_blocks, static_cast<size_t>(kBnActMaxApplyY)));
    p.finalize_blocks = (c + kFinalizeX - 1) / kFinalizeX;
    p.workspace_floats = 2 * static_cast<size_t>(p.chunks) * c + 2 * static_cast<size_t>(c);
    return p;
}

size_t bn_act_workspace_floats(size_t rows, int c) { return bn_act_plan(rows, c, false).workspace_floats; }

namespace {

// Batch statistics of x into save_mean/save_invstd and the running statistics (two launches).
void launch_stats(const rt::Exec& ex, const BnActPlan& pl, const bf16* x, float* save_mean, float* save_invstd,
                  float* running_mean, float* running_var, double momentum, double eps, float* workspace) {
    bn_act_stats_kernel<<<dim3(pl.grid_x, pl.chunks), dim3(pl.block_x, pl.block_y), 0, ex.stream>>>(
        pl.rows, pl.c, pl.chunks, dev(x), workspace);
    SF_CUDA_CHECK_LAUNCH();
    bn_act_stats_finalize_kernel<<<pl.finalize_blocks, dim3(kFinalizeX, kFinalizeY), 0, ex.stream>>>(
        pl.rows, pl.c, pl.chunks, dev(x), workspace, save_mean, save_invstd, running_mean, running_var, momentum, eps);
    SF_CUDA_CHECK_LAUNCH();
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
                          const bf16* residual) {
    const char* op = "bn_act_forward_train";
    const BnActPlan pl = check_common(op, ex, rows, c, true, x, y);
    check_residual(op, rows, c, x, residual, y);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_stats_vectors(op, save_mean, save_invstd, running_mean, running_var);
    check_workspace(op, pl, workspace, workspace_floats);
    launch_stats(ex, pl, x, save_mean, save_invstd, running_mean, running_var, momentum, eps, workspace);
    apply<false>(ex, act, pl, x, gamma, beta, save_mean, save_invstd, eps, residual, y);
}

void bn_stats_train(const rt::Exec& ex, size_t rows, int c, const bf16* x, float* save_mean, float* save_invstd,
                    float* running_mean, float* running_var, double momentum, double eps, float* workspace,
                    size_t workspace_floats) {
    const char* op = "bn_stats_train";
    rt::check_cuda_exec(op, ex);
    const BnActPlan pl = bn_act_plan(rows, c, true);
    SF_CHECK(rt::aligned(x, 16), "%s: x must be non-null and 16-byte aligned (got %p)", op,
             static_cast<const void*>(x));
    check_stats_vectors(op, save_mean, save_invstd, running_mean, running_var);
    check_workspace(op, pl, workspace, workspace_floats);
    launch_stats(ex, pl, x, save_mean, save_invstd, running_mean, running_var, momentum, eps, workspace);
}

void bn_act_forward_eval(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                         const float* beta, const float* running_mean, const float* running_var, double eps, bf16* y,
                         const bf16* residual) {
    const char* op = "bn_act_forward_eval";
    const BnActPlan pl = check_common(op, ex, rows, c, false, x, y);
    check_residual(op, rows, c, x, residual, y);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_vec(op, "running_mean", running_mean);
    check_vec(op, "running_var", running_var);
    apply<true>(ex, act, pl, x, gamma, beta, running_mean, running_var, eps, residual, y);
}

void bn_act_backward(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy, const float* gamma,
                     const float* beta, const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma,
                     float* dbeta, float* workspace, size_t workspace_floats) {
    const char* op = "bn_act_backward";
    const BnActPlan pl = check_common(op, ex, rows, c, true, x, dx);
    SF_CHECK(rt::aligned(dy, 16), "%s: dy must be non-null and 16-byte aligned (got %p)", op,
             static_cast<const void*>(dy));
    SF_CHECK(static_cast<const void*>(dy) != static_cast<const void*>(dx), "%s: dx must not alias dy", op);
    check_vec(op, "gamma", gamma);
    check_vec(op, "beta", beta);
    check_vec(op, "save_mean", save_mean);
    check_vec(op, "save_invstd", save_invstd);
    check_vec(op, "dgamma", dgamma);
    check_vec(op, "dbeta", dbeta);
    check_workspace(op, pl, workspace, workspace_floats);
    switch (act) {
        case Act::None:
            launch_backward<Act::None>(ex, pl, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta,
                                       workspace);
            break;
        case Act::Silu:
            launch_backward<Act::Silu>(ex, pl, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta,
                                       workspace);
            break;
        case Act::Relu:
            launch_backward<Act::Relu>(ex, pl, x, dy, gamma, beta, save_mean, save_invstd, dx, dgamma, dbeta,
                                       workspace);
            break;
    }
}

}  // namespace kern
