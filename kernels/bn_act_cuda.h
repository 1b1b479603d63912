// CUDA BatchNorm (batch statistics) fused with the activation that follows it (kernels/bn_act.cu),
// forward and backward, on bf16 NHWC data viewed as x (rows = N*H*W, C). Declared without CUDA
// types so g++ code (layers, planner, tests) can call it; device buffers of kern::bf16 are passed to
// the kernels as __nv_bfloat16. Design, numerics and workspace layout: docs/KERNELS_BN_ACT.md.
//
//   forward train: mean, invstd from the batch (fp32 partials, fp64 combine, deterministic);
//                  running_mean/var updated (momentum, unbiased variance); y = act(bn(x)) as bf16.
//   forward eval:  y = act(gamma * (x - running_mean) / sqrt(running_var + eps) + beta).
//   either forward with a residual r: y = r + act(...), summed in fp32 and rounded once (r may be
//                  y itself: a sum accumulated in place; otherwise it must not overlap y or x).
//   backward:      g = dy * act'(bn(x)) recomputed from x; dbeta += sum g, dgamma += sum g*xhat;
//                  dx = gamma*invstd*(g - sum(g)/rows - xhat*sum(g*xhat)/rows), OVERWRITTEN.
// Requirements checked by the launchers: CUDA Exec, C a positive multiple of 8, rows >= 2 in train
// mode (rows >= 1 in eval), bf16 tensors 16-byte aligned, fp32 vectors 4-byte aligned, outputs not
// aliasing inputs, workspace of at least bn_act_workspace_floats(rows, C) floats. Launchers enqueue
// on ex.stream, never allocate and never synchronise (CUDA-graph capturable).
#pragma once
#include <cstddef>

#include "kernels/bf16.h"
#include "kernels/tensor.h"
#include "runtime/exec.h"

namespace kern {

// The BN input formed on load instead of read (NetShape::fuse_up_bn): the bilinear upsampling by `factor`
// (2, 4 or 8; kernels/upsample_cuda.h) of lo (lo_shape, bf16, 16-byte aligned), each element the bf16 value
// upsample_bilinear_forward_bf16_cuda would have stored, so that a forward or backward given `up` (x null,
// rows = N * factor*H * factor*W, C = lo_shape.c) computes, bit for bit, what it computes on that stored
// tensor, which then need not exist: a fusion up path's conv output in UpOrder::ConvFirst. The row kernels
// read lo instead of x (a quarter of the bytes and less), one row per loop turn whatever row_batch says.
struct BnUpsampled {
    const bf16* lo = nullptr;
    Shape4 lo_shape;
    int factor = 0;
};

// Row chunks of every reduction: fixed, independent of the device, so the summation order (and the
// result, bit for bit) depends only on (rows, C).
constexpr int kBnActChunks = 512;
constexpr int kBnActThreads = 256;     // threads per block of the row kernels (at most)
constexpr int kBnActMaxApplyY = 2048;  // cap on blocks along rows of the element-wise passes

// Rows per loop turn of the row kernels (statistics, apply, backward reduce and dx): 1, each row's
// load used before the next is issued (the kernels measured on the H100 and H200); 4, the loads of
// four of a thread's rows issued together, then the rows taken in the same order as with 1. The
// arithmetic and its order do not change, so every result is bitwise the same (tested): the choice is
// speed only (docs/KERNELS_BN_ACT.md, "Rows per loop turn").
constexpr int kBnActRowBatches[] = {1, 4};
constexpr bool bn_act_row_batch_valid(int r) { return r == 1 || r == 4; }

// The backward's two row kernels (reduce and dx) as compiled for the SM: 1, as measured on the H100 and
// H200 (no launch bound; their SiLU forms use 83 and 88 registers: 2 blocks of 256 resident, a quarter of
// an SM's warps); 3, the same code under __launch_bounds__(256, 3): registers capped at 80, 3 blocks,
// 24 warps (a few bytes of spills). Code and order of arithmetic are the same, so every result
// is bitwise the same (tested): speed only (docs/KERNELS_BN_ACT.md, "Registers and resident blocks";
// OPTIMIZATION_LOG.md entries 28-29).
constexpr int kBnActMinBlocks[] = {1, 3};
constexpr bool bn_act_min_blocks_valid(int m) { return m == 1 || m == 3; }

// How the backward's row kernels run: rows per loop turn and resident blocks (speed only). Converts from
// a row_batch, so the backward launchers take the forward's int where min_blocks is 1.
struct BnBackwardRows {
    int row_batch = 1;
    int min_blocks = 1;
    BnBackwardRows(int rb = 1, int mb = 1) : row_batch(rb), min_blocks(mb) {}  // NOLINT: implicit from row_batch
};

// Launch geometry of every bn_act kernel for one (rows, C); a pure function of (rows, C).
struct BnActPlan {
    size_t rows = 0;
    int c = 0;
    int row_batch = 1;        // rows per loop turn of the row kernels (kBnActRowBatches)
    int min_blocks = 1;       // resident blocks the backward's row kernels are compiled for (kBnActMinBlocks)
    int groups = 0;           // C / 8: 8-channel groups, one 128-bit (8 x bf16) vector each per row
    int block_x = 0;          // channel groups per block (threadIdx.x)
    int block_y = 0;          // row lanes per block (threadIdx.y), a power of two
    int grid_x = 0;           // blocks along channel groups: ceil(groups / block_x)
    int chunks = 0;           // row chunks of the reductions: min(rows, kBnActChunks); gridDim.y there
    int apply_grid_y = 0;     // blocks along rows of the element-wise passes (grid-stride beyond):
                              // min(ceil(rows / block_y / row_batch), kBnActMaxApplyY)
    int finalize_blocks = 0;  // ceil(C / 32) blocks of (32, 8) threads
    size_t workspace_floats = 0;
};

// Throws rt::Error for C not a positive multiple of 8 (naming C), rows == 0, rows < 2 when train, a
// row_batch that is not one of kBnActRowBatches or a min_blocks not one of kBnActMinBlocks.
BnActPlan bn_act_plan(size_t rows, int c, bool train, int row_batch = 1, int min_blocks = 1);

// fp32 workspace the train forward and the backward need: 2 * chunks * C + 2 * C floats. One
// buffer of this size serves both (they never run concurrently on one stream); its contents need
// no initialisation and are scratch between calls.
size_t bn_act_workspace_floats(size_t rows, int c);

// x (rows, C) bf16; gamma, beta (C); y (rows, C) bf16; save_mean, save_invstd (C) written;
// running_mean, running_var (C) updated in place: r = (1 - momentum) * r + momentum * batch value.
// residual (rows, C) bf16 or null: added to the output (see the header comment).
void bn_act_forward_train(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                          const float* beta, bf16* y, float* save_mean, float* save_invstd, float* running_mean,
                          float* running_var, double momentum, double eps, float* workspace, size_t workspace_floats,
                          const bf16* residual = nullptr, int row_batch = 1, const BnUpsampled* up = nullptr);

// The statistics half of bn_act_forward_train alone: save_mean, save_invstd written and the running
// statistics updated exactly as bn_act_forward_train does (bitwise), no output written. For a BN
// whose apply a consumer does on load (the depthwise conv's prologue, kernels/dwconv_cuda.h).
void bn_stats_train(const rt::Exec& ex, size_t rows, int c, const bf16* x, float* save_mean, float* save_invstd,
                    float* running_mean, float* running_var, double momentum, double eps, float* workspace,
                    size_t workspace_floats, int row_batch = 1);

// The apply half of bn_act_forward_train alone, with batch statistics already written (save_mean,
// save_invstd: by bn_stats_train, or by the pointwise conv's statistics epilogue, kernels/pwconv_cuda.h):
// y = act(bn(x)) (+ residual), bitwise what bn_act_forward_train writes given the same statistics.
void bn_act_apply_train(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                        const float* beta, const float* save_mean, const float* save_invstd, bf16* y,
                        const bf16* residual = nullptr, int row_batch = 1);

// x (rows, C) bf16; gamma, beta, running_mean, running_var (C); y (rows, C) bf16. No workspace.
void bn_act_forward_eval(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const float* gamma,
                         const float* beta, const float* running_mean, const float* running_var, double eps, bf16* y,
                         const bf16* residual = nullptr, int row_batch = 1, const BnUpsampled* up = nullptr);

// x (rows, C) bf16 conv output; dy (rows, C) bf16 gradient of the activation output; gamma, beta,
// save_mean, save_invstd (C) from the forward; dx (rows, C) bf16 overwritten; dgamma, dbeta (C) fp32
// accumulated (+=).
void bn_act_backward(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy, const float* gamma,
                     const float* beta, const float* save_mean, const float* save_invstd, bf16* dx, float* dgamma,
                     float* dbeta, float* workspace, size_t workspace_floats, BnBackwardRows rows_k = {},
                     const BnUpsampled* up = nullptr);

// bn_act_backward without its dx pass: dgamma, dbeta += (bitwise as bn_act_backward), and the dx pass's
// per-channel coefficients left in the workspace at bn_act_backward_coef(workspace, rows, c):
// coef[0..C) = mean(g), coef[C..2C) = mean(g * xhat) (g = dy * act'(z)), for a consumer that forms dx
// on load as the dx pass would have stored it (the fused depthwise backward's BN prologue,
// kernels/dwconv_cuda.h). The coefficients stay valid until the workspace is written again.
void bn_act_backward_stats(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy,
                           const float* gamma, const float* beta, const float* save_mean, const float* save_invstd,
                           float* dgamma, float* dbeta, float* workspace, size_t workspace_floats,
                           BnBackwardRows rows_k = {});
// Where the backward's coefficients (2 * C floats) sit in its workspace: after the 2 * chunks * C partials.
size_t bn_act_backward_coef_offset(size_t rows, int c);

// bn_act_backward's dx pass alone, with the coefficients another kernel wrote (coef[0..C) = mean(g),
// coef[C..2C) = mean(g * xhat): bn_act_backward_stats, bn_act_backward_finalize, or a conv's BN-backward
// epilogue, kern::BnGradSums): dx (rows, C) bf16 OVERWRITTEN, bitwise what bn_act_backward's dx pass writes
// given the same coefficients. No workspace; dgamma and dbeta are not touched.
void bn_act_backward_dx(const rt::Exec& ex, Act act, size_t rows, int c, const bf16* x, const bf16* dy,
                        const float* gamma, const float* beta, const float* save_mean, const float* save_invstd,
                        const float* coef, bf16* dx, BnBackwardRows rows_k = {});

// bn_act_backward's second pass on partials another kernel gathered (a conv's BN-backward epilogue,
// kern::BnGradSums): part[k * C + c] = chunk k's sum g, part[(chunks + k) * C + c] = its sum g * xhat;
// per channel the chunks are added in fp64 in bn_act_backward's fixed order (lane y: chunks y, y + 8, ...,
// then the 8 lanes in order), then dbeta += sum g, dgamma += sum g * xhat, coef = the two sums / rows.
void bn_act_backward_finalize(const rt::Exec& ex, size_t rows, int c, int chunks, const float* part, float* dgamma,
                              float* dbeta, float* coef);

}  // namespace kern
