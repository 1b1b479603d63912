// Device-side BatchNorm + activation arithmetic shared by every kernel that forms a BN output:
// kernels/bn_act.cu (the apply and backward passes) and kernels/dwconv.cu (the depthwise conv's
// fused prologue, docs/KERNELS_DWCONV.md). One definition keeps them bitwise equal: a depthwise conv
// that applies its producer's BatchNorm + activation on load sees exactly the bf16 values the
// stand-alone apply pass would have stored. Included by .cu files only.
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

}  // namespace kern
