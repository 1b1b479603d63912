#include "model/schedule.h"

#include <cmath>

#include "runtime/error.h"

namespace model {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

double sgdr_lr(double base_lr, double eta_min, int t0, int t_mult, int epoch) {
    SF_CHECK(t0 >= 1 && t_mult >= 1 && epoch >= 0, "sgdr: need T_0 >= 1, T_mult >= 1, epoch >= 0 (got %d, %d, %d)", t0,
             t_mult, epoch);
    // Find the cycle holding `epoch`: cycles have lengths t0, t0*t_mult, t0*t_mult^2, ...
    int64_t t_i = t0, t_cur = epoch;
    while (t_cur >= t_i) {
        t_cur -= t_i;
        t_i *= t_mult;
    }
    return eta_min + (base_lr - eta_min) * (1.0 + std::cos(kPi * static_cast<double>(t_cur) / t_i)) / 2.0;
}

double warmup_cosine_lr(double base_lr, double eta_min, int64_t warmup, int64_t total, int64_t step) {
    SF_CHECK(warmup >= 0 && total >= 1 && step >= 0,
             "warmup_cosine: bad arguments (warmup %lld, total %lld, step %lld)", static_cast<long long>(warmup),
             static_cast<long long>(total), static_cast<long long>(step));
    if (step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (total <= warmup) return base_lr;
    const double t = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
    return eta_min + (base_lr - eta_min) * (1.0 + std::cos(kPi * t)) / 2.0;
}

}  // namespace model
