// Device-side BatchNorm + activation arithmetic shared by every kernel that forms a BN output or its
// input gradient: kernels/bn_act.cu (the apply and backward passes) and the depthwise kernels (the
// fused LiteBlock's prologue and the fused backward's BN prologue, docs/KERNELS_DWCONV.md). One
// definition keeps them bitwise equal: a depthwise conv that applies its producer's BatchNorm +
// activation on load sees exactly the bf16 values the stand-alone apply pass would have stored, and
// one that forms its dy from its consumer's BN backward, the values the dx pass would have stored.
// Included by .cu files only.
#pragma once
#include <cuda_bf16.h>

#include "kernels/cuda_util.cuh"
#include "kernels/tensor.h"

namespace kern {

// The activations as activation_ref.cpp defines them. ReLU lets NaN through (torch's clamp_min);
// its derivative is 0 at z <= 0 (threshold_backward). SiLU' = s * (1 + z * (1 - s)).
__device__ __forceinline__ float bn_sigmoid(float z) { return 1.0f / (1.0f + __expf(-z)); }

template <Act A>
__device__ __forceinline__ float act_fwd(float z) {
    if constexpr (A == Act::Silu) return z * bn_sigmoid(z);
    if constexpr (A == Act::Relu) return (z > 0.0f || isnan(z)) ? z : 0.0f;
    return z;
}

template <Act A>
__device__ __forceinline__ float act_grad(float z) {
    if constexpr (A == Act::Silu) {
        const float s = bn_sigmoid(z);
        return s * (1.0f + z * (1.0f - s));
    }
    if constexpr (A == Act::Relu) return z <= 0.0f ? 0.0f : 1.0f;
    return 1.0f;
}

// The forward's per-channel constants of the 8 channels of group g: z = fmaf(x - m, scale, b) with
// scale = gamma * invstd, the product the backward forms too (same z, same ReLU mask).
// eval: `inv_or_var` holds the running variance, inverted here as 1/sqrt(var + eps) in fp64;
// otherwise it holds the batch invstd.
struct BnApply8 {
    float m[8], scale[8], b[8];
};

__device__ __forceinline__ BnApply8 load_bn_apply8(int g, const float* __restrict__ gamma,
                                                   const float* __restrict__ beta, const float* __restrict__ mean,
                                                   const float* __restrict__ inv_or_var, bool eval, double eps) {
    BnApply8 p;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int ch = 8 * g + j;
        const float inv = eval ? static_cast<float>(1.0 / sqrt(static_cast<double>(__ldg(inv_or_var + ch)) + eps))
                               : __ldg(inv_or_var + ch);
        p.m[j] = __ldg(mean + ch);
        p.scale[j] = __ldg(gamma + ch) * inv;
        p.b[j] = __ldg(beta + ch);
    }
    return p;
}

// act(bn(x)) of channel j of the group, in fp32 (not yet rounded).
template <Act A>
__device__ __forceinline__ float bn_act_value(const BnApply8& p, int j, float x) {
    return act_fwd<A>(fmaf(x - p.m[j], p.scale[j], p.b[j]));
}

// The bf16 value the apply pass stores for x (store8 rounds to nearest even), back in fp32.
template <Act A>
__device__ __forceinline__ float bn_act_value_bf16(const BnApply8& p, int j, float x) {
    return __bfloat162float(__float2bfloat16_rn(bn_act_value<A>(p, j, x)));
}

// The forward statistics' last step for channel ch, from fp64 sums of x shifted by k = shift() (s0 =
// sum(x - k), s1 = sum((x - k)^2) over n = rows values): save_mean, save_invstd (biased variance) and
// the running statistics (unbiased variance, momentum). bn_act_stats_finalize_kernel (k = x[row 0][ch])
// and the pointwise conv's statistics epilogue (kernels/pwconv.cu, per-chunk shifts merged first) share
// it. The shift is a callable, read after s0 / n, the order the statistics kernel was measured with.
template <class Shift>
__device__ __forceinline__ void bn_stats_write(int ch, double n, const Shift& shift, double s0, double s1,
                                               float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                               float* __restrict__ running_mean, float* __restrict__ running_var,
                                               double momentum, double eps) {
    const double dm = s0 / n;  // mean - k
    const double mean = shift() + dm;
    const double var = fmax(s1 / n - dm * dm, 0.0);
    const double invstd = 1.0 / sqrt(var + eps);
    const double unbiased = var * n / (n - 1.0);
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(invstd);
    running_mean[ch] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_mean[ch]) + momentum * mean);
    running_var[ch] = static_cast<float>((1.0 - momentum) * static_cast<double>(running_var[ch]) + momentum * unbiased);
}

// ---- the backward's per-element arithmetic: kernels/bn_act_rows.cuh, and the fused depthwise
// backward's BN prologue (kernels/dwconv_bwd_fused.cu), which forms dx on load as the dx pass stores it ----

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

// The dx pass's coefficients of group g's 8 channels: mg = coef[8g + j] (mean(g)), mgx = coef[c + 8g + j]
// (mean(g * xhat)), as bn_act_backward_stats / bn_act_backward_finalize write them.
__device__ __forceinline__ void load_bn_coef8(int g, int c, const float* __restrict__ coef, float (&mg)[8],
                                              float (&mgx)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        mg[j] = coef[8 * g + j];
        mgx[j] = coef[c + 8 * g + j];
    }
}

// g = dy * act'(z) and xhat = (x - mean) * invstd for one element of channel j.
template <Act A>
__device__ __forceinline__ void grad_xhat(const Chan8& p, int j, float x, float dy, float& g, float& xhat) {
    const float d = x - p.mean[j];
    xhat = d * p.invstd[j];
    g = dy * act_grad<A>(fmaf(d, p.scale[j], p.beta[j]));
}

// The backward's dx of one element of channel j: gamma*invstd * (g - mg - xhat * mgx), with the
// channel's coefficients mg = mean(g), mgx = mean(g * xhat) (bn_act_backward's coef), in fp32.
template <Act A>
__device__ __forceinline__ float bn_act_dx_value(const Chan8& p, int j, float x, float dy, float mg, float mgx) {
    float gr, xhat;
    grad_xhat<A>(p, j, x, dy, gr, xhat);
    return p.scale[j] * (gr - fmaf(xhat, mgx, mg));
}

// One element of a BN's backward reductions, with bn_act_backward_stats's arithmetic (grad_xhat, then
// the sums as bn_act_rows.cuh's reduce_add adds them): the conv epilogues of kern::BnGradSums.
template <Act A>
__device__ __forceinline__ void bn_grad_add(float x, float dx, float mean, float invstd, float scale, float beta,
                                            float& sum_g, float& sum_gx) {
    Chan8 p;
    p.mean[0] = mean;
    p.invstd[0] = invstd;
    p.scale[0] = scale;
    p.beta[0] = beta;
    float gr, xhat;
    grad_xhat<A>(p, 0, x, dx, gr, xhat);
    sum_g += gr;
    sum_gx = fmaf(gr, xhat, sum_gx);
}

}  // namespace kern
