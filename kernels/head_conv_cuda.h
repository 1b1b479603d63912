// CUDA final 1x1 conv (with bias) of the four heads (kernels/head_conv.cu): bf16 input x (rows =
// N*H*W, Cin) -> fp32 logits y (rows, Cout), Cin = 64 and Cout in {1, 2, 4} in the model (the loss
// runs in fp32). Too small for cuDNN/cuBLASLt to be worth a plan: the forward is a read of x plus a
// dot product per output, the backward one pass over x and dy. Declared without CUDA types so g++
// code can call it. Design and numerics: docs/KERNELS_ELTWISE.md. Reference: conv_*_ref (conv.h)
// with k = 1, bias = true.
//
//   forward:  y[r, k] = b[k] + sum_j x[r, j] * w[k, j]                     (y overwritten)
//   backward: dx[r, j] += sum_k dy[r, k] * w[k, j]   (bf16)
//             dw[k, j] += sum_r dy[r, k] * x[r, j],  db[k] += sum_r dy[r, k]   (fp32, deterministic)
// x and dx may be a Cin-channel slice of wider rows: `pitch` elements from one row's start to the next
// (0: Cin), so that a head reads and writes its 64 channels of the four heads' merged conv1 output
// (NetShape::merge_heads) in place.
// pro (null: none; NetShape::fuse_head_bn): x is the producer's pre-BN output and both kernels read it
// through that BN + activation, bf16(act(bn(x))) per element (kernels/bn_fusion.h, DwPrologue; its
// vectors hold Cin entries, x's channels), as the apply pass would have stored it: the results are the
// plain kernels' on that pass's output, bit for bit. dx is then the gradient of the BN + activation's
// output, as without.
// Preconditions (rt::Error naming the value): CUDA Exec; Cin a multiple of 8 in [8, 64]; Cout in
// [1, 8]; pitch 0 or a multiple of 8 >= Cin; x and dx 16-byte aligned; w, b, y, dy, dw, db, ws non-null and 4-byte
// aligned; dx not aliasing x; workspace at least head_conv_workspace_floats; a prologue as
// check_dw_prologue (kernels/bn_fusion.h) wants it, its vectors apart from every output. rows == 0 is a no-op.
// Launchers enqueue on ex.stream, never allocate and never synchronise (CUDA-graph capturable).
#pragma once
#include <cstddef>

#include "kernels/bf16.h"
#include "kernels/bn_fusion.h"
#include "runtime/exec.h"

namespace kern {

constexpr int kHeadConvMaxCin = 64;  // one 8-channel group per lane: the weights stay in registers
constexpr int kHeadConvMaxCout = 8;
constexpr int kHeadConvLanes = 8;      // threads per row (one 8-channel group each; idle past Cin/8)
constexpr int kHeadConvThreads = 256;  // 32 rows x 8 lanes per block
constexpr int kHeadConvRowsPerBlock = kHeadConvThreads / kHeadConvLanes;
constexpr size_t kHeadConvMaxBlocks = 8192;  // forward grid cap (grid-stride beyond)
constexpr int kHeadConvChunks = 1024;        // most row chunks of the backward reduction

// Launch geometry for (rows, Cin, Cout): a pure function of them.
struct HeadConvPlan {
    size_t rows = 0;
    int cin = 0, cout = 0;
    int pitch = 0;                // elements between rows of x and dx (Cin when asked for 0)
    int groups = 0;               // Cin / 8
    int forward_blocks = 0;       // min(ceil(rows / 32), kHeadConvMaxBlocks); 0 when rows == 0
    int chunks = 0;               // backward blocks: min(ceil(rows / 32), kHeadConvChunks), row chunks
    int finalize_blocks = 0;      // ceil((Cout*Cin + Cout) / 32) blocks of (32, 8)
    size_t workspace_floats = 0;  // chunks * (Cout*Cin + Cout): per-chunk partial dw then db
};

// Throws rt::Error for Cin not a multiple of 8 in [8, 64] (naming cin), Cout outside [1, 8] (naming
// cout) or a pitch below Cin or not a multiple of 8 (naming pitch). rows == 0 gives an empty plan.
HeadConvPlan head_conv_plan(size_t rows, int cin, int cout, int pitch = 0);

// x (rows, Cin; rows pitch apart) bf16; w (Cout, Cin) fp32 master weights; b (Cout) fp32; y (rows, Cout)
// fp32 overwritten.
void head_conv_forward_cuda(const rt::Exec& ex, size_t rows, int cin, int cout, const bf16* x, const float* w,
                            const float* b, float* y, int pitch = 0, const DwPrologue* pro = nullptr);

// fp32 scratch the backward needs (no initialisation): head_conv_plan(rows, cin, cout).workspace_floats.
size_t head_conv_workspace_floats(size_t rows, int cin, int cout);

// The prologue BatchNorm's backward reductions, gathered by the backward from the dx it stores (NetShape::
// fuse_head_bn: the BN is the producer's, its input the x the backward reads anyway): per element g = dx *
// act'(z) and xhat = (x - mean) * invstd with bn_act_backward_stats's arithmetic (bn_grad_add), dx the bf16
// value stored; summed per row chunk of the backward (k < head_conv_chunks(rows)) into partials laid out as
// bn_act_backward_finalize reads them for a BN of `channels` channels, this conv's being [channel, channel + cin):
// part[k * channels + channel + c] = chunk k's sum g, part[(chunks + k) * channels + channel + c] its sum g * xhat.
// The caller runs bn_act_backward_finalize(ex, rows, channels, chunks, part, dgamma, dbeta, coef) once every conv
// over those channels (the four heads over the merged conv1's) has written its columns. Train mode only (the
// prologue's batch statistics). dx, dw and db are bitwise the same with or without it. The sums are the same
// values as bn_act_backward_stats's on the stored dx, in another summation order (within fp32 rounding).
struct HeadBnGrad {
    float* part = nullptr;
    int channels = 0;  // the BN's channels: the partials' row length
    int channel = 0;   // the first of this conv's channels among them
};
// The backward's row chunks for `rows` rows (head_conv_plan's chunks; 0 when rows == 0).
int head_conv_chunks(size_t rows);
// The partials' floats for a BN of `channels` channels over `rows` rows: 2 * head_conv_chunks(rows) * channels.
size_t head_conv_bn_grad_floats(size_t rows, int channels);

// x (rows, Cin) bf16 (the forward input); dy (rows, Cout) fp32; w (Cout, Cin) fp32;
// dx (rows, Cin) bf16 += (accumulate = false: overwritten, never read); dw (Cout, Cin) +=; db (Cout) +=.
// x and dx rows pitch apart (the channels between the slices untouched).
// bng (null: none; needs pro, in train mode): the prologue BN's backward reductions (HeadBnGrad), the partials
// apart from every other argument. dx null (needs bng, accumulate false; kern::ConvPolicy::head_bn_dx): nothing
// stored, the sums taken of the values that would have been (head_bn_dx_cuda forms them again): dw, db and the
// partials bitwise as with dx.
void head_conv_backward_cuda(const rt::Exec& ex, size_t rows, int cin, int cout, const bf16* x, const float* dy,
                             const float* w, bf16* dx, float* dw, float* db, float* ws, size_t ws_floats,
                             bool accumulate = true, int pitch = 0, const DwPrologue* pro = nullptr,
                             const HeadBnGrad* bng = nullptr);

// ---- the prologue BN's dx from the logits' gradient (kern::ConvPolicy::head_bn_dx) ----
// With the heads' conv2 backward storing no dx (above), the BN's dx pass forms each element's dy where it needs
// it: the value the conv2 backward would have stored, bf16(0 + sum_k dlogits[r, k] * w[k, c - channel]) (its
// fmaf chain over k in order, rounded to nearest even), from the fp32 logits' gradient and weights of the head
// whose channels hold c. So dx here is bitwise bn_act_backward_dx's on the dy the conv2s would have stored, and
// that tensor (rows x channels bf16, written once and read once) never exists.
constexpr int kHeadBnDxMaxHeads = 4;
// One conv2 over the BN's channels [channel, channel + cin): its logits' gradient dy (rows, cout) fp32 and its
// weights w (cout, cin) fp32, as head_conv_backward_cuda takes them.
struct HeadDxSource {
    int channel = 0;
    int cin = 0;
    int cout = 0;
    const float* dy = nullptr;
    const float* w = nullptr;
};
// x (rows, channels) bf16: the BN's input (the heads' conv1 output, pre-BN); gamma, beta, mean, invstd
// (channels): the BN's, train mode (save_mean, save_invstd); coef (2 * channels): mean(g), then mean(g * xhat)
// (bn_act_backward_finalize of the conv2s' HeadBnGrad partials); dx (rows, channels) bf16 OVERWRITTEN.
// heads: `nheads` sources in [1, kHeadBnDxMaxHeads] whose channel ranges tile [0, channels) in order, each a
// multiple of 8 channels starting at a multiple of 8, cin <= kHeadConvMaxCin, cout in [1, kHeadConvMaxCout].
// Preconditions (rt::Error naming the value): CUDA Exec; channels a multiple of 8 in [8, 256]; rows >= 2; x, dx
// 16-byte aligned, not overlapping; every vector, dy and w non-null and 4-byte aligned, none overlapping dx.
// rows == 0 is refused (a BN in train mode has rows >= 2). Enqueues on ex.stream, never allocates nor synchronises.
constexpr int kHeadBnDxMaxChannels = 256;
void head_bn_dx_cuda(const rt::Exec& ex, Act act, size_t rows, int channels, const HeadDxSource* heads, int nheads,
                     const bf16* x, const float* gamma, const float* beta, const float* mean, const float* invstd,
                     const float* coef, bf16* dx);

}  // namespace kern
