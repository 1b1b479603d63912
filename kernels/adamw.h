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
