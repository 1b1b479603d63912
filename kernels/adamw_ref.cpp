#include <cmath>
#include <vector>

#include "kernels/adamw.h"
#include "runtime/error.h"

namespace kern {

namespace {
constexpr size_t kChunks = 64;  // fixed reduction split: results do not depend on the thread count
}

double grad_norm_ref(size_t n, const float* g) {
    std::vector<double> part(kChunks, 0.0);
    const size_t chunk = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < kChunks; ++c) {
        double s = 0;
        const size_t end = std::min(n, (c + 1) * chunk);
        for (size_t i = c * chunk; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
        part[c] = s;
    }
    double s = 0;
    for (double v : part) s += v;
    return std::sqrt(s);
}

double clip_factor(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0;
    return std::min(1.0, max_norm / (norm + 1e-6));
}

void adamw_step_ref(size_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h, int64_t step,
                    double grad_scale) {
    SF_CHECK(step >= 1, "AdamW step must be >= 1, got %lld", static_cast<long long>(step));
    const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(step)));
    const double step_size = h.lr / bc1;
    const double decay = 1.0 - h.lr * h.weight_decay;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) {
        const double gi = static_cast<double>(g[i]) * grad_scale;
        const double mi = m[i] + (1.0 - h.beta1) * (gi - m[i]);
        const double vi = h.beta2 * v[i] + (1.0 - h.beta2) * gi * gi;
        const double denom = std::sqrt(vi) / bc2_sqrt + h.eps;
        p[i] = static_cast<float>(p[i] * decay - step_size * mi / denom);
        m[i] = static_cast<float>(mi);
        v[i] = static_cast<float>(vi);
    }
}

double grad_norm(const rt::Exec& ex, size_t n, const float* g) {
    SF_CHECK(!ex.is_cuda(), "grad_norm: CUDA backend not implemented yet");
    return grad_norm_ref(n, g);
}

void adamw_step(const rt::Exec& ex, size_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h,
                int64_t step, double grad_scale) {
    SF_CHECK(!ex.is_cuda(), "adamw_step: CUDA backend not implemented yet");
    adamw_step_ref(n, p, g, m, v, h, step, grad_scale);
}

}  // namespace kern
