// The BatchNorm fusions' interface shared by the project's convolution kernels (kernels/dwconv_cuda.h,
// kernels/pwconv_cuda.h): a producer's BN + activation applied on load (DwPrologue), a consumer BN's
// backward formed on load (DwBnBackward), a BN's backward reductions gathered in a backward-data
// epilogue (BnGradSums), a BN's batch statistics gathered in a forward epilogue (BnStatsOut), and the
// launchers' checks of each. Host-side declarations only (no CUDA types); the device arithmetic they
// share is kernels/bn_act_device.cuh. Design: docs/KERNELS_DWCONV.md, docs/KERNELS_PWCONV.md.
#pragma once
#include <cstddef>
#include <initializer_list>

#include "kernels/bf16.h"
#include "kernels/tensor.h"

namespace kern {

// The producer's BatchNorm + activation, applied to every input pixel on load (see the header comment):
// x' = bf16(act(fmaf(x - mean, gamma * inv, beta))) per channel, inv = invstd (train: the batch
// statistics bn_stats_train saved) or 1/sqrt(running_var + eps) (eval: `invstd` holds running_var).
// All four vectors have C fp32 entries.
struct DwPrologue {
    Act act = Act::None;
    const float* gamma = nullptr;
    const float* beta = nullptr;
    const float* mean = nullptr;    // train: save_mean; eval: running_mean
    const float* invstd = nullptr;  // train: save_invstd; eval: running_var
    bool eval = false;
    double eps = 0;  // eval only
};

// The fused backward's BN prologue (dwconv3x3_backward_fused_cuda): the conv's output feeds a
// BatchNorm + activation, and the dy the kernel is given is the gradient of that BN's output. The
// conv output's gradient is formed on load, bf16(gamma*invstd * (g - mean(g) - xhat * mean(g*xhat)))
// with g = dy * act'(z): the value bn_act_backward's dx pass would have stored, bit for bit, from the
// BN's input x (this conv's output), its saved batch statistics and the coefficients
// bn_act_backward_stats left in its workspace (kernels/bn_act_cuda.h). Padding stays zero.
struct DwBnBackward {
    Act act = Act::None;
    const bf16* x = nullptr;         // the BN's input: this conv's output (N,H,W,C), 16-byte aligned
    const float* gamma = nullptr;    // C
    const float* beta = nullptr;     // C
    const float* mean = nullptr;     // C: save_mean
    const float* invstd = nullptr;   // C: save_invstd
    const float* coef = nullptr;     // 2C: mean(g), then mean(g * xhat)
};

// The backward reductions of a BatchNorm + activation whose output gradient a conv's backward-data stores
// (the BN *before* that conv: the producer's, whose output the conv reads), gathered in that kernel's
// epilogue from the bf16 values it stores and the BN's input x at the same positions: sum g and
// sum g * xhat per channel (g = dx * act'(z), z = gamma * xhat + beta, xhat = (x - mean) * invstd), then
// what bn_act_backward_stats writes: dbeta += sum g, dgamma += sum g * xhat, and coef[0..C) = mean(g),
// coef[C..2C) = mean(g * xhat), for a consumer that forms that BN's dx on load (DwBnBackward) or a dx pass
// (bn_act_backward_dx). Not bitwise bn_act_backward_stats's sums (another order): within fp32 rounding of
// them, deterministic (fixed chunks, fp64 merge in a fixed order). Two kernels take it: the pointwise
// dgrad (pwconv_backward_data_cuda) and the fused depthwise backward (dwconv3x3_backward_fused_cuda, with
// its forward prologue: the BN is the prologue's).
struct BnGradSums {
    Act act = Act::None;
    const bf16* x = nullptr;         // the BN's input (N,H,W,C), 16-byte aligned
    const float* gamma = nullptr;    // C
    const float* beta = nullptr;     // C
    const float* mean = nullptr;     // C: save_mean
    const float* invstd = nullptr;   // C: save_invstd
    float* dgamma = nullptr;         // C, +=
    float* dbeta = nullptr;          // C, +=
    float* coef = nullptr;           // 2C, written
};

// A byte range a launcher writes, for check_dw_prologue.
struct DwWritten {
    const void* p;
    size_t bytes;
};
// The launchers' checks of a prologue (null: none): a known activation, its four C-vectors non-null,
// 4-byte aligned and apart from every output in `outs`, a finite eps > 0 in eval mode. rt::Error
// naming `op` otherwise. Shared by the depthwise and the pointwise (kernels/pwconv_cuda.h) launchers.
void check_dw_prologue(const char* op, const DwPrologue* pro, int c, std::initializer_list<DwWritten> outs);
// The same for a BN-backward prologue (null: none): a known activation, x non-null and 16-byte aligned,
// the five vectors (coef: 2C) non-null and 4-byte aligned, none of them nor x (x_bytes) overlapping an
// output in `outs` ("<op>: <outs_name> must not overlap the BN gamma vector", "... alias the BN input x").
void check_dw_bn_backward(const char* op, const DwBnBackward* bnb, int c, size_t x_bytes,
                          std::initializer_list<DwWritten> outs, const char* outs_name);
// A byte range a kernel reads or writes, named for the error (check_bn_grad_sums).
struct DwNamed {
    const void* p;
    size_t bytes;
    const char* name;
};
// The launchers' checks of a BN-backward epilogue (null: none): rows >= 2; x non-null, 16-byte aligned and
// apart from every range in `written` (what the kernel writes besides the three outputs); the four input
// vectors non-null and 4-byte aligned; dgamma, dbeta (C) and coef (2C) non-null, 4-byte aligned, apart from
// each other, from the four input vectors, from x (x_bytes) and from every range in `read` and `written`.
// rt::Error naming `op` and the pointers ("<op>: bng->coef must not alias bng->dbeta") otherwise.
void check_bn_grad_sums(const char* op, const BnGradSums* bng, int c, long long rows, size_t x_bytes,
                        std::initializer_list<DwNamed> read, std::initializer_list<DwNamed> written);

// The BatchNorm whose batch statistics a conv's forward gathers in its epilogue (train mode) from the bf16
// values it stores: per-block shifted sums, merged in fp64 in a fixed order by a finalize launch, then
// written as bn_stats_train writes them. Two kernels take it: the pointwise forward (pwconv_forward_cuda)
// and the staged depthwise forward (dwconv3x3_forward_cuda). Not bitwise bn_stats_train's statistics
// (another summation order): within fp32 rounding of them, deterministic. Outputs C-vectors.
struct BnStatsOut {
    float* save_mean = nullptr;
    float* save_invstd = nullptr;  // 1 / sqrt(biased variance + eps)
    float* running_mean = nullptr; // updated: (1 - momentum) * old + momentum * mean
    float* running_var = nullptr;  // updated with the unbiased variance
    double momentum = 0.1;
    double eps = 1e-5;
};
// The launchers' checks of a statistics epilogue (null: nothing checked): at least 2 values per channel
// (count); momentum in [0, 1]; a finite eps > 0; the workspace non-null, 4-byte aligned and of at least
// `need` floats; the four C-vectors non-null, 4-byte aligned, apart from each other, from the workspace and
// from every range in `apart` (the kernel's inputs and outputs); the workspace apart from those ranges too.
// rt::Error naming `op` and the pointers ("<op>: save_invstd must not alias y") otherwise.
void check_bn_stats_out(const char* op, const BnStatsOut* st, int c, long long count, const float* workspace,
                        size_t workspace_floats, size_t need, std::initializer_list<DwNamed> apart);

}  // namespace kern
