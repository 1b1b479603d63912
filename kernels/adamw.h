// Optimizer ops over the flat parameter range (DESIGN §3): global gradient L2 norm and AdamW
// with PyTorch semantics (torch.optim.AdamW, amsgrad=False):
//   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// with g = grad * grad_scale (grad_scale = the clip factor of clip_grad_norm_).
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/exec.h"

namespace kern {

struct AdamWHyper {
    double lr = 3e-4;
    double beta1 = 0.9, beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.05;
};

// sqrt(sum g^2), accumulated in double over fixed chunks (thread-count independent).
double grad_norm_ref(size_t n, const float* g);
// Clip factor of torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
double clip_factor(double norm, double max_norm);
// One AdamW update at step `step` (1-based) over n elements.
void adamw_step_ref(size_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h, int64_t step,
                    double grad_scale);

double grad_norm(const rt::Exec& ex, size_t n, const float* g);
void adamw_step(const rt::Exec& ex, size_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h,
                int64_t step, double grad_scale);

}  // namespace kern

// ---- device-resident optimizer (CUDA, DESIGN §4) ----
namespace kern {

// Per-step scalars in device memory, updated by a tiny kernel inside the captured graph; nothing
// is passed by value per step, so one graph serves the whole run.
struct DeviceStepState {
    int64_t step = 0;          // AdamW steps taken (incremented by adamw_cuda when the update applies)
    float lr = 0;              // learning rate of this step (written by the schedule kernel / host)
    float max_grad_norm = 1;   // clip threshold; <= 0: no clipping
    float grad_norm = 0;       // global L2 norm of this step's gradients (written by grad_norm_cuda)
    float clip_scale = 1;      // min(1, max / (norm + 1e-6))
    float step_size = 0;       // lr / (1 - beta1^step)
    float bc2_sqrt = 1;        // sqrt(1 - beta2^step)
    int32_t nonfinite = 0;     // 1 when the norm is NaN/Inf: the update is skipped, weights untouched
    int32_t skipped = 0;       // steps skipped so far
};

}  // namespace kern
