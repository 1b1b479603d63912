// What the pointwise conv's kernels share (kernels/pwconv.cu: the row GEMM of the forward and the dgrad
// with the statistics finalize; kernels/pwconv_wgrad.cu: the wgrad; kernels/pwconv_bwd_fused.cu: both
// backward GEMMs in one pass): the staged row pitch, what the staging applies, its per-channel inputs and
// the per-vector arithmetic. Internal to those files.
#pragma once
#include <cstdint>

#include "kernels/bn_act_device.cuh"
#include "kernels/cuda_util.cuh"
#include "kernels/mma.cuh"
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

// The staging's per-channel constants of channel c, into slot i of shared-memory arrays, as every pwconv kernel
// forms them. The producer's BN apply (the x prologue): mean, beta and scale = gamma * invstd (eval: invstd =
// 1/sqrt(running_var + eps) in fp64, rounded; the values bn_act_apply uses).
__device__ __forceinline__ void stage_apply_consts(const PwStage& st, int c, int i, float* mean, float* scale,
                                                   float* beta) {
    const float inv = st.eval ? static_cast<float>(1.0 / sqrt(static_cast<double>(__ldg(st.invstd + c)) + st.eps))
                              : __ldg(st.invstd + c);
    scale[i] = __ldg(st.gamma + c) * inv;
    mean[i] = __ldg(st.mean + c);
    beta[i] = __ldg(st.beta + c);
}
// The consumer's BN backward (the dy prologue, load_chan8's values): invstd, scale = gamma * invstd, mean, beta and
// the coefficients mean(g), mean(g * xhat) (st.coef holds k of each).
__device__ __forceinline__ void stage_backward_consts(const PwStage& st, int c, int i, int k, float* mean, float* inv,
                                                      float* scale, float* beta, float* mg, float* mgx) {
    inv[i] = __ldg(st.invstd + c);
    scale[i] = __ldg(st.gamma + c) * inv[i];
    mean[i] = __ldg(st.mean + c);
    beta[i] = __ldg(st.beta + c);
    mg[i] = __ldg(st.coef + c);
    mgx[i] = __ldg(st.coef + k + c);
}

// Eight floats rounded to bf16 (nearest even) in one 16-byte vector, the lower channel in the low half.
__device__ __forceinline__ uint4 pack8_bf16(const float (&v)[8]) {
    uint4 u;
    u.x = pack_bf16x2(v[0], v[1]);
    u.y = pack_bf16x2(v[2], v[3]);
    u.z = pack_bf16x2(v[4], v[5]);
    u.w = pack_bf16x2(v[6], v[7]);
    return u;
}

// The BN-backward prologue on 8 channels: d[j] = bn_act_dx_value (the dx pass's value, bit for bit) from the BN's
// input xb[j] and its output's gradient d[j], with the per-channel constants (shared memory) at the group's first
// channel: mean, invstd, scale = gamma * invstd, beta and the coefficients mean(g), mean(g * xhat).
template <Act A>
__device__ __forceinline__ void bn_dx8(float (&d)[8], const float (&xb)[8], const float* mean, const float* inv,
                                       const float* scale, const float* beta, const float* mg, const float* mgx) {
    Chan8 p;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        p.mean[j] = mean[j];
        p.invstd[j] = inv[j];
        p.scale[j] = scale[j];
        p.beta[j] = beta[j];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) d[j] = bn_act_dx_value<A>(p, j, xb[j], d[j], mg[j], mgx[j]);
}

}  // namespace pw
}  // namespace kern
