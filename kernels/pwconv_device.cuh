// What the pointwise conv's kernels share (kernels/pwconv.cu: the row GEMM of the forward and the dgrad
// with the statistics finalize; kernels/pwconv_wgrad.cu: the wgrad): the staged row pitch, what the
// A-side staging applies, and its per-channel inputs. Internal to those two files.
#pragma once
#include "kernels/cuda_util.cuh"
#include "kernels/pwconv_cuda.h"

namespace kern {
namespace pw {

constexpr int kPitch = kPwTileK + 8;  // bf16 per staged row (80 bytes)

// What the A operand's staging does to each loaded vector of 8 channels.
enum class PwA {
    Plain,     // nothing
    Apply,     // the producer's BN + activation (forward prologue): bf16(act(bn(x)))
    Backward,  // the consumer's BN backward (dgrad prologue): bf16(bn_act_dx_value(x_bn, dy)), x_bn a second input
};

// The per-channel inputs of the A staging, by value. Apply: gamma, beta, mean, invstd (eval: running_var),
// eval, eps. Backward: gamma, beta, mean, invstd (save_*), coef (2K: mean(g), mean(g * xhat)), x (the BN's
// input, the same layout as A).
struct PwStage {
    const float* gamma;
    const float* beta;
    const float* mean;
    const float* invstd;
    const float* coef;
    const bfloat* x;
    bool eval;
    double eps;
};

}  // namespace pw
}  // namespace kern
