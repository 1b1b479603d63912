// Custom CUDA pointwise (1x1) convolution forward on bf16 tensor cores (kernels/pwconv.cu), with the two
// BatchNorm fusions a 1x1 ConvBN needs to stop making extra passes over its activations
// (docs/KERNELS_PWCONV.md, docs/perf/OPTIMIZATION_LOG.md entry 19):
//
//   x (N, H, W, K) bf16 NHWC, viewed as rows = N*H*W by K;  w (Nout, 1, 1, K) bf16 KRSC, i.e. w[n*K + k];
//   y (N, H, W, Nout) bf16:  y = x * w^T, fp32 accumulation (mma.sync m16n8k16), rounded once.
//   prologue (optional): x is the producing layer's pre-BatchNorm output and the kernel multiplies
//             bf16(act(bn(x))) instead, the value bn_act_forward_* would have stored, bit for bit
//             (kernels/bn_act_device.cuh): the producer's activation is never written to memory.
//   statistics (optional): the batch statistics of y for the BatchNorm that follows (save_mean,
//             save_invstd and the running statistics, as bn_stats_train writes them) from the bf16
//             values the kernel stores, gathered in its epilogue: no separate pass reads y.
//
// Deterministic: the row tiles are split into a fixed number of chunks (a function of the shape, never
// of the device), each block sums its chunk's outputs in a fixed order with its own shift, and the
// finalize kernel merges the chunks in order in fp64. Two runs are bitwise equal; the statistics are not
// bitwise those of bn_stats_train (another summation order), they agree to fp32 rounding (tests).
//
// Declared without CUDA types so g++ code can call it. Launchers check (rt::Error, before any launch):
// CUDA Exec; a supported shape; bf16 pointers non-null and 16-byte aligned; fp32 vectors 4-byte
// aligned; outputs not aliasing inputs; a large enough workspace. They enqueue on ex.stream, never
// allocate and never synchronise (CUDA-graph capturable).
#pragma once
#include <cstddef>
#include <string>

#include "kernels/bf16.h"
#include "kernels/bn_fusion.h"
#include "kernels/conv.h"
#include "runtime/exec.h"

namespace kern {

// ---- geometry (shared by the plan, the kernels and the tests) ----
constexpr int kPwThreads = 256;      // 8 warps per block
constexpr int kPwTileM = 128;        // rows per tile: 16 per warp
constexpr int kPwTileK = 32;         // K per staged step (two mma k-steps)
constexpr int kPwMaxChunks = 1024;   // row-tile chunks per column block (the statistics' partials)
constexpr int kPwMaxPrologueK = 512; // the prologue keeps K channels' constants in shared memory
constexpr int kPwFinalizeX = 32, kPwFinalizeY = 8;

struct PwConvPlan {
    long long rows = 0;  // N*H*W
    int k = 0, n = 0;    // input and output channels
    int bn = 0;          // output channels per block: 64 when n % 64 == 0, else 32
    int n_blocks = 0;    // n / bn (grid.x)
    long long tiles = 0; // ceil(rows / kPwTileM)
    int chunks = 0;      // min(tiles, kPwMaxChunks) (grid.y); chunk c owns tiles [tiles*c/chunks, tiles*(c+1)/chunks)
    int finalize_blocks = 0;
};

constexpr PwConvPlan pwconv_geometry(long long rows, int k, int n) {
    PwConvPlan p;
    p.rows = rows;
    p.k = k;
    p.n = n;
    p.bn = n % 64 == 0 ? 64 : 32;
    p.n_blocks = n / p.bn;
    p.tiles = (rows + kPwTileM - 1) / kPwTileM;
    p.chunks = static_cast<int>(p.tiles < kPwMaxChunks ? p.tiles : kPwMaxChunks);
    p.finalize_blocks = (n + kPwFinalizeX - 1) / kPwFinalizeX;
    return p;
}

// First row tile of chunk c: chunk c owns tiles [pwconv_tile_begin(c), pwconv_tile_begin(c + 1)), every
// chunk non-empty when chunks <= tiles (the kernels and the finalize use exactly this).
constexpr long long pwconv_tile_begin(long long tiles, int chunks, int c) { return tiles * c / chunks; }

// The wgrad's geometry (pwconv_backward_filter_cuda): dw[cout][cin] += sum over rows of dy[row][o] x[row][i],
// a GEMM reduced over the rows. Blocks of 128 threads own a 32 x 32 (cout x cin) tile of dw and a chunk of
// 32-row steps; each writes its tile's fp32 partial sums, and a finalize kernel adds the chunks in a fixed
// order in fp64 (dw +=). chunks = min(steps, kPwMaxChunks, kPwWgradPartials / (cout * cin), at least 1): a
// function of the shape only.
constexpr int kPwWgradThreads = 128;
constexpr int kPwWgradTile = 32;                   // cout and cin per block, rows per step
constexpr long long kPwWgradPartials = 1LL << 22;  // floats of partials at most (16 MiB) beyond one chunk

struct PwWgradPlan {
    long long rows = 0;
    int cin = 0, cout = 0;
    long long steps = 0;  // ceil(rows / 32)
    int chunks = 0;       // chunk c owns steps [pwconv_tile_begin(steps, chunks, c), ...(c + 1))
    int m_blocks = 0, n_blocks = 0;  // cout / 32 (grid.y), cin / 32 (grid.x)
    long long entries = 0;           // cout * cin
    long long finalize_blocks = 0;   // ceil(entries / 32)
};

constexpr PwWgradPlan pwconv_wgrad_geometry(long long rows, int cin, int cout) {
    PwWgradPlan p;
    p.rows = rows;
    p.cin = cin;
    p.cout = cout;
    p.steps = (rows + kPwWgradTile - 1) / kPwWgradTile;
    p.entries = static_cast<long long>(cin) * cout;
    long long c = kPwWgradPartials / p.entries;
    if (c > kPwMaxChunks) c = kPwMaxChunks;
    if (c > p.steps) c = p.steps;
    p.chunks = static_cast<int>(c < 1 ? 1 : c);
    p.m_blocks = cout / kPwWgradTile;
    p.n_blocks = cin / kPwWgradTile;
    p.finalize_blocks = (p.entries + kPwFinalizeX - 1) / kPwFinalizeX;
    return p;
}

// k == 1, stride 1, pad 0, groups 1, no bias, cin and cout positive multiples of 32, positive dims,
// rows * max(cin, cout) below 2^40 and rows below 2^31 (32-bit row indexing). Never throws.
bool pwconv_supported(const ConvShape& s);
// Throws rt::Error naming what is unsupported, with its value.
PwConvPlan pwconv_plan(const ConvShape& s);
// fp32 workspace of the statistics epilogue: 3 * chunks * cout floats (per chunk and channel: the
// chunk's shift, its shifted sum and its shifted sum of squares). Scratch: no initialisation needed.
size_t pwconv_workspace_floats(const ConvShape& s);

// y = conv1x1(x, w), overwritten. pro: null, or the producer's BN + activation applied to x on load
// (train statistics or eval running statistics, as for the depthwise kernels; cin <= 512). stats:
// null, or the statistics of y (BnStatsOut, kernels/bn_fusion.h) written as described above, with `workspace` of at least
// pwconv_workspace_floats(s) floats (two launches: the conv, then the finalize).
void pwconv_forward_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y,
                         const DwPrologue* pro = nullptr, const BnStatsOut* stats = nullptr, float* workspace = nullptr,
                         size_t workspace_floats = 0);

// dx = dy * w (the convolution's input gradient: dx (N,H,W,cin), dy (N,H,W,cout), w as for the forward);
// accumulate: dx += (each element read once, the fp32 sum added, one rounding), else overwritten.
// bnb: null, or dy is the gradient of the BatchNorm that follows this conv, and the kernel forms the conv
// output's gradient on load, bit for bit the value bn_act_backward's dx pass would have stored
// (DwBnBackward; x there is this conv's output, (N,H,W,cout); cout <= 512).
// bng: null, or the preceding BatchNorm's backward reductions from the dx stored (BnGradSums; with bnb as well
// since 2026-11-28: the dx stored, and so the sums, bitwise those of bnb alone followed by bng on its dx),
// with `workspace` of at least pwconv_dgrad_workspace_floats(s) floats (two launches: the dgrad, then the
// finalize). dx itself is bitwise the same with or without it.
void pwconv_backward_data_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                               bool accumulate = false, const DwBnBackward* bnb = nullptr,
                               const BnGradSums* bng = nullptr, float* workspace = nullptr, size_t workspace_floats = 0);
// fp32 workspace of the dgrad's BN-backward epilogue: 2 * chunks * cin floats (scratch).
size_t pwconv_dgrad_workspace_floats(const ConvShape& s);

// The wgrad's plan (throws rt::Error naming what is unsupported) and its fp32 workspace: chunks * cout * cin
// floats (scratch, no initialisation needed).
PwWgradPlan pwconv_wgrad_plan(const ConvShape& s);
size_t pwconv_wgrad_workspace_floats(const ConvShape& s);

// dw += sum over rows of dy^T x (dw fp32 (cout, cin), the flat gradient buffer's layout of w). x, dy as
// for the forward and the dgrad. pro: null, or x is the producer's pre-BN output and the kernel uses
// bf16(act(bn(x))) as the forward's prologue does (cin <= 512); bnb: null, or dy is the following BN's
// output gradient, formed into the conv output's on load as the dgrad does (cout <= 512). Rows past the
// end add nothing. Deterministic: fixed chunks, fp64 finalize in a fixed order (two launches).
void pwconv_backward_filter_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw,
                                 float* workspace, size_t workspace_floats, const DwPrologue* pro = nullptr,
                                 const DwBnBackward* bnb = nullptr);

// ---- the fused backward (kernels/pwconv_bwd_fused.cu, docs/KERNELS_PWCONV.md "The fused backward") ----
// dx (=, or += with accumulate) dy * w and dw += dy^T x in one pass: dy (with bnb: the BN's output gradient
// and its input) and x (with pro: the producer's pre-BN output) read once for both gradients instead of once
// by the dgrad and again by the wgrad. dx and dw are bit for bit what pwconv_backward_data_cuda (same dy, w,
// accumulate, bnb) and pwconv_backward_filter_cuda (same x, dy, pro, bnb) give. Launches: the pass, the wgrad's
// fp64 finalize of the chunks, and with bng the BN-backward finalize. Shapes: pwconv_supported and cin, cout in
// {32, 64, 128} with cin * cout <= 8192 (every block holds all of dw's accumulators: the 1/4 and 1/8 LiteBlocks,
// the transitions, down paths and laterals of those widths); pro SiLU or none (the depthwise BN's); bnb any
// activation. bng (optional): the producer BN's backward reductions from the dx stored, as the dgrad's epilogue
// gathers them (BnGradSums; SiLU, the depthwise BN's; not with a ReLU bnb; with pro, the same BatchNorm in train
// mode), summed per chunk of the pass (not the dgrad's tiles: within fp32 rounding of its sums, not bitwise).
// The refusal names what is unsupported ("" when supported; never throws).
std::string pwconv_backward_fused_refusal(const ConvShape& s, const DwPrologue* pro = nullptr,
                                          const DwBnBackward* bnb = nullptr, const BnGradSums* bng = nullptr);
bool pwconv_backward_fused_supported(const ConvShape& s, const DwPrologue* pro = nullptr,
                                     const DwBnBackward* bnb = nullptr, const BnGradSums* bng = nullptr);
// The wgrad's partials, and with bn_grad the epilogue's after them (2 * chunks * cin).
size_t pwconv_backward_fused_workspace_floats(const ConvShape& s, bool bn_grad = false);
void pwconv_backward_fused_cuda(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, const bf16* w,
                                bf16* dx, float* dw, bool accumulate, float* workspace, size_t workspace_floats,
                                const DwPrologue* pro = nullptr, const DwBnBackward* bnb = nullptr,
                                const BnGradSums* bng = nullptr);

}  // namespace kern
