// CUDA optimizer over the flat parameter range (kernels/adamw_cuda.h, DESIGN §3-§4): global gradient
// L2 norm, fused AdamW (+clip, decay, bias correction, bf16 working copy, grad zeroing) and the
// SGDR learning-rate schedule. All per-step scalars live in kern::DeviceStepState in device memory.
// Both big kernels are bandwidth-bound (AdamW: 5 x 4 bytes read, 18 bytes written per element), so
// they move float4 (and 4 x bf16 = 64-bit) vectors; the n % 4 tail goes to global threads 0..2.
// The norm is deterministic: a fixed grid (a function of n only), per-thread sums in a fixed order,
// a fixed reduction tree per block, and the block partials summed in a fixed tree by the last block.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/adamw_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace kern {

namespace {

constexpr int kWarps = kOptimThreads / 32;
constexpr double kPi = 3.14159265358979323846;  // the constant of model/schedule.cpp

// Sum of s over the block in a fixed order (shuffle tree per warp, then warp 0 over the warp sums).
// The result is valid in thread 0. Every thread of the block must call it.
__device__ double block_sum(double s, double* smem /* kWarps */) {
    __syncthreads();  // smem may still be read by warp 0 of a previous call
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) smem[warp] = s;
    __syncthreads();
    s = 0;
    if (warp == 0) {
        s = lane < kWarps ? smem[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    }
    return s;
}

// Thread 0 of the last block: norm, clip factor (clip_factor of adamw_ref.cpp), nonfinite flag and
// the bias corrections of the upcoming step, all in double, stored as fp32.
__device__ void grad_norm_publish(double sumsq, double beta1, double beta2, DeviceStepState* state) {
    const double norm = sqrt(sumsq);
    const bool finite = isfinite(norm);
    const double max_norm = state->max_grad_norm;
    const double clip = max_norm <= 0 ? 1.0 : fmin(1.0, max_norm / (norm + 1e-6));
    const double t = static_cast<double>(state->step + 1);
    state->grad_norm = static_cast<float>(norm);
    state->clip_scale = finite ? static_cast<float>(clip) : 1.0f;
    state->nonfinite = finite ? 0 : 1;
    state->step_size = static_cast<float>(static_cast<double>(state->lr) / (1.0 - pow(beta1, t)));
    state->bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(beta2, t)));
}

// The AdamW update of one element (adamw_step_ref's operation order, in fp32).
struct StepScalars {
    float scale, decay, step_size, bc2_sqrt;
};

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWCoeffs& c,
                                              const StepScalars& s) {
    const float gi = g * s.scale;
    const float mi = m + c.one_minus_beta1 * (gi - m);
    const float vi = c.beta2 * v + c.one_minus_beta2 * gi * gi;
    const float denom = sqrtf(vi) / s.bc2_sqrt + c.eps;
    p = p * s.decay - s.step_size * mi / denom;
    m = mi;
    v = vi;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// ---- kernels ----

// grad (n) fp32 -> partials[blockIdx.x] = this block's sum of squares (double); the last block to
// finish (ticket from the counter after a fence) sums the partials and publishes into state.
// Grid: grad_norm_grid(n) blocks of kOptimThreads.
__global__ void __launch_bounds__(kOptimThreads)
    grad_norm_kernel(size_t n, const float* __restrict__ grad, double* __restrict__ partials,
                     unsigned* __restrict__ counter, double beta1, double beta2, DeviceStepState* state) {
    rt::pdl_entry();
    __shared__ double smem[kWarps];
    __shared__ bool is_last;
    const size_t groups = n / 4;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const float4* __restrict__ g4 = reinterpret_cast<const float4*>(grad);
    double s = 0;
    for (size_t i = tid; i < groups; i += stride) {
        const float4 g = __ldg(g4 + i);
        s += static_cast<double>(g.x) * g.x;
        s += static_cast<double>(g.y) * g.y;
        s += static_cast<double>(g.z) * g.z;
        s += static_cast<double>(g.w) * g.w;
    }
    if (tid < n - 4 * groups) {
        const float g = __ldg(grad + 4 * groups + tid);
        s += static_cast<double>(g) * g;
    }
    s = block_sum(s, smem);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = s;
        __threadfence();  // the partial is visible device-wide before this block's ticket is
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;  // block-uniform: the whole last block goes on

    __threadfence();  // pairs with the other blocks' fences before their tickets
    double t = 0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) t += __ldcg(partials + b);  // L2, not L1
    t = block_sum(t, smem);
    if (threadIdx.x == 0) {
        grad_norm_publish(t, beta1, beta2, state);
        *counter = 0;  // ready for the next launch (kernel boundaries order this store)
    }
}

// Fused AdamW over the flat range, grid adamw_grid(n). Each element index is owned by exactly one
// thread. state->{nonfinite, lr, clip_scale, step_size, bc2_sqrt} are only read in this launch;
// state->step / state->skipped are written by block 0 thread 0 and read by no thread of this launch
// (the bias corrections were computed for step + 1 by grad_norm_kernel), so there is no race.
__global__ void __launch_bounds__(kOptimThreads)
    adamw_kernel(size_t n, float* __restrict__ master, __nv_bfloat16* __restrict__ working, float* __restrict__ grad,
                 float* __restrict__ m, float* __restrict__ v, AdamWCoeffs c, DeviceStepState* state) {
    rt::pdl_entry();
    const size_t groups = n / 4, tail = n - 4 * groups;
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    float4* __restrict__ g4 = reinterpret_cast<float4*>(grad);
    const bool skip = state->nonfinite != 0;
    if (skip) {
        // Weights, m, v and the working copy stay bit-exact; only the gradients are cleared, or a
        // single NaN would make every later step skip too.
        for (size_t i = tid; i < groups; i += stride) g4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tid < tail) grad[4 * groups + tid] = 0.f;
    } else {
        const float lr = state->lr;
        const StepScalars s{state->clip_scale, 1.0f - lr * c.weight_decay, state->step_size, state->bc2_sqrt};
        float4* __restrict__ p4 = reinterpret_cast<float4*>(master);
        float4* __restrict__ m4 = reinterpret_cast<float4*>(m);
        float4* __restrict__ v4 = reinterpret_cast<float4*>(v);
        uint2* __restrict__ w4 = reinterpret_cast<uint2*>(working);
        for (size_t i = tid; i < groups; i += stride) {
            float4 p = p4[i], mm = m4[i], vv = v4[i];
            const float4 g = g4[i];
            g4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
            adamw_element(p.x, g.x, mm.x, vv.x, c, s);
            adamw_element(p.y, g.y, mm.y, vv.y, c, s);
            adamw_element(p.z, g.z, mm.z, vv.z, c, s);
            adamw_element(p.w, g.w, mm.w, vv.w, c, s);
            p4[i] = p;
            m4[i] = mm;
            v4[i] = vv;
            if (w4 != nullptr) w4[i] = make_uint2(pack_bf16(p.x, p.y), pack_bf16(p.z, p.w));
        }
        if (tid < tail) {
            const size_t j = 4 * groups + tid;
            float p = master[j], mj = m[j], vj = v[j];
            const float g = grad[j];
            grad[j] = 0.f;
            adamw_element(p, g, mj, vj, c, s);
            master[j] = p;
            m[j] = mj;
            v[j] = vj;
            if (working != nullptr) working[j] = __float2bfloat16_rn(p);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        if (skip)
            state->skipped += 1;
        else
            state->step += 1;
    }
}

// state->lr from the device epoch counter: model::sgdr_lr (torch CosineAnnealingWarmRestarts stepped
// per epoch), same integer cycle search and the same double expression. One thread.
__global__ void schedule_sgdr_kernel(double base_lr, double eta_min, int t0, int t_mult,
                                     const int32_t* __restrict__ epoch, DeviceStepState* state) {
    rt::pdl_entry();
    const int32_t e = *epoch;
    int64_t t_i = t0, t_cur = e > 0 ? e : 0;
    if (t_mult == 1) {
        t_cur %= t_i;  // what the cycle search of sgdr_lr computes, in O(1)
    } else {
        while (t_cur >= t_i) {
            t_cur -= t_i;
            t_i *= t_mult;
        }
    }
    const double lr = eta_min + (base_lr - eta_min) * (1.0 + cos(kPi * static_cast<double>(t_cur) / t_i)) / 2.0;
    state->lr = static_cast<float>(lr);
}

void check_consts(const AdamWConsts& c, const char* who) {
    SF_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "%s: betas must lie in [0, 1) (got %g, %g)",
             who, c.beta1, c.beta2);
    SF_CHECK(c.eps > 0 && c.weight_decay >= 0 && c.weight_decay < 1e30,
             "%s: need eps > 0 and a finite weight_decay >= 0 (got %g, %g)", who, c.eps, c.weight_decay);
}

void check_vector(const void* p, size_t n, const char* who, const char* what) {
    if (n != 0) rt::check_device_ptr(who, what, p, kOptimVectorAlign);
}

}  // namespace

// ---- launchers ----

void grad_norm_cuda(const rt::Exec& ex, size_t n, const float* grad, double* partials, const AdamWConsts& c,
                    DeviceStepState* state) {
    rt::check_cuda_exec("grad_norm_cuda", ex);
    check_consts(c, "grad_norm_cuda");
    check_vector(grad, n, "grad_norm_cuda", "grad");
    SF_CHECK(rt::aligned(partials, alignof(double)),
             "grad_norm_cuda: partials must be a non-null, 8-byte aligned device workspace (got %p)",
             static_cast<void*>(partials));
    SF_CHECK(rt::aligned(state, alignof(DeviceStepState)),
             "grad_norm_cuda: state must be a non-null, aligned device pointer (got %p)", static_cast<void*>(state));
    const size_t blocks = grad_norm_grid(n);
    unsigned* counter = reinterpret_cast<unsigned*>(partials + blocks);
    rt::launch(ex, "grad_norm_kernel", grad_norm_kernel, static_cast<unsigned>(blocks), kOptimThreads, 0, n, grad,
               partials, counter, c.beta1, c.beta2, state);
}

void adamw_cuda(const rt::Exec& ex, size_t n, float* master, bf16* working, float* grad, float* m, float* v,
                const AdamWConsts& c, DeviceStepState* state) {
    rt::check_cuda_exec("adamw_cuda", ex);
    check_consts(c, "adamw_cuda");
    check_vector(master, n, "adamw_cuda", "master");
    check_vector(grad, n, "adamw_cuda", "grad");
    check_vector(m, n, "adamw_cuda", "m");
    check_vector(v, n, "adamw_cuda", "v");
    SF_CHECK(working == nullptr || rt::aligned(working, kOptimWorkingAlign),
             "adamw_cuda: working must be null or an 8-byte aligned device pointer (got %p)",
             static_cast<void*>(working));
    SF_CHECK(rt::aligned(state, alignof(DeviceStepState)),
             "adamw_cuda: state must be a non-null, aligned device pointer (got %p)", static_cast<void*>(state));
    const unsigned blocks = static_cast<unsigned>(adamw_grid(n));
    rt::launch(ex, "adamw_kernel", adamw_kernel, blocks, kOptimThreads, 0, n, master,
               reinterpret_cast<__nv_bfloat16*>(working), grad, m, v, adamw_coeffs(c), state);
}

void schedule_sgdr_cuda(const rt::Exec& ex, DeviceStepState* state, double base_lr, double eta_min, int t0, int t_mult,
                        const int32_t* epoch_device) {
    rt::check_cuda_exec("schedule_sgdr_cuda", ex);
    SF_CHECK(t0 >= 1 && t_mult >= 1, "schedule_sgdr_cuda: need T_0 >= 1 and T_mult >= 1 (got %d, %d)", t0, t_mult);
    SF_CHECK(rt::aligned(state, alignof(DeviceStepState)) && rt::aligned(epoch_device, alignof(int32_t)),
             "schedule_sgdr_cuda: state and epoch_device must be non-null, aligned device pointers (got %p, %p)",
             static_cast<void*>(state), static_cast<const void*>(epoch_device));
    rt::launch(ex, "schedule_sgdr_kernel", schedule_sgdr_kernel, 1, 1, 0, base_lr, eta_min, t0, t_mult, epoch_device,
               state);
}

}  // namespace kern
