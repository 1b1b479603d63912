// CUDA launchers of the device-resident optimizer (kernels/adamw.cu), declared without CUDA types so
// g++ code (the training step, tests) can call them. One training step enqueues, in this order:
//   schedule_sgdr_cuda  (optional)  state->lr from an epoch counter in device memory
//   ... backward accumulates into grad ...
//   grad_norm_cuda                  global L2 norm, clip scale, nonfinite flag, bias corrections
//                                   of the upcoming step (state->step + 1)
//   adamw_cuda                      master, m, v, bf16 working copy; grad zeroed; step or skipped += 1
// Every per-step value lives in kern::DeviceStepState in device memory, so the sequence is captured
// into a CUDA graph once and replayed. The grid arithmetic is here (constexpr) so that CPU tests
// check exactly what the launchers use. Contract and numerics: docs/OPTIMIZER.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/bf16.h"
#include "runtime/exec.h"

namespace kern {

// Constants of the run (not per-step): passed by value at launch, so a captured graph keeps them.
struct AdamWConsts {
    double beta1 = 0.9, beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.05;
};
inline AdamWConsts adamw_consts(const AdamWHyper& h) { return {h.beta1, h.beta2, h.eps, h.weight_decay}; }

// The fp32 coefficients the AdamW kernel receives. The (1 - beta) terms are taken in double and then
// rounded: 1 - 0.999f is 1.3e-5 away (relative) from float(1 - 0.999), which would show in v.
struct AdamWCoeffs {
    float one_minus_beta1;
    float beta2, one_minus_beta2;
    float eps;
    float weight_decay;
};
inline AdamWCoeffs adamw_coeffs(const AdamWConsts& c) {
    return {static_cast<float>(1.0 - c.beta1), static_cast<float>(c.beta2), static_cast<float>(1.0 - c.beta2),
            static_cast<float>(c.eps), static_cast<float>(c.weight_decay)};
}

// ---- grid arithmetic (shared by the launchers and the CPU tests) ----
// Both kernels read the flat range as n/4 float4 groups (grid-stride loop) plus n%4 scalar tail
// elements handled by global threads 0..2; every launch has at least one block (the grad-norm
// kernel must always publish the state, AdamW must always count the step).
constexpr int kOptimThreads = 256;           // threads per block of every optimizer kernel
constexpr size_t kGradNormMaxBlocks = 1024;  // fixed cap: the reduction tree never depends on the device
constexpr size_t kAdamWMaxBlocks = 8192;     // element-wise, so the cap only bounds the launch
constexpr size_t kOptimVectorAlign = 16;     // bytes: fp32 ranges are read/written as float4
constexpr size_t kOptimWorkingAlign = 8;     // bytes: 4 bf16 of the working copy per 64-bit store

constexpr size_t optim_blocks(size_t n, size_t max_blocks) {
    const size_t groups = n / 4;
    const size_t b = (groups + kOptimThreads - 1) / kOptimThreads;
    return b < 1 ? 1 : (b > max_blocks ? max_blocks : b);
}
// Blocks of the grad-norm launch: a function of n only, so the summation order (per-thread
// grid-stride partials -> fixed block tree -> fixed tree over block partials in the last block)
// and hence the bits of the norm are the same on every device and every run.
constexpr size_t grad_norm_grid(size_t n) { return optim_blocks(n, kGradNormMaxBlocks); }
// Workspace of grad_norm_cuda, in doubles: one partial sum of squares per block, then one slot whose
// first 4 bytes are the blocks-done counter (uint32). Must be zero before the first launch (Arena
// allocations are zero-filled); the last block resets the counter, so it is reusable, for any n, by
// later launches on the same stream.
constexpr size_t grad_norm_partials(size_t n) { return grad_norm_grid(n) + 1; }
constexpr size_t adamw_grid(size_t n) { return optim_blocks(n, kAdamWMaxBlocks); }

// ---- launchers: enqueue on ex.stream, never allocate or synchronise ----

// grad: (n) fp32 device, 16-byte aligned. partials: grad_norm_partials(n) doubles of device
// workspace, 8-byte aligned. One launch. Reads state->{max_grad_norm, lr, step}; writes
// state->{grad_norm, clip_scale, nonfinite} and state->{step_size, bc2_sqrt} for step + 1, with
// beta1/beta2 from c. The sum of squares is accumulated in double (exact nonfinite detection:
// no finite fp32 gradient overflows it).
void grad_norm_cuda(const rt::Exec& ex, size_t n, const float* grad, double* partials, const AdamWConsts& c,
                    DeviceStepState* state);

// master, grad, m, v: (n) fp32 device, 16-byte aligned, identical offsets (the flat ranges);
// working: (n) bf16 device copy of master, 8-byte aligned, or null. One launch, after
// grad_norm_cuda of the same step. If state->nonfinite: master, m, v and working are left untouched
// and state->skipped += 1; else the AdamW update of adamw_step_ref with state->{lr, clip_scale,
// step_size, bc2_sqrt} and state->step += 1. In both cases grad is left zeroed for the next backward.
void adamw_cuda(const rt::Exec& ex, size_t n, float* master, bf16* working, float* grad, float* m, float* v,
                const AdamWConsts& c, DeviceStepState* state);

// state->lr = model::sgdr_lr(base_lr, eta_min, t0, t_mult, *epoch_device) (negative epochs count as 0).
// One single-thread launch; epoch_device: one int32 in device memory.
void schedule_sgdr_cuda(const rt::Exec& ex, DeviceStepState* state, double base_lr, double eta_min, int t0, int t_mult,
                        const int32_t* epoch_device);

}  // namespace kern
