// Learning-rate schedules.
// sgdr: torch CosineAnnealingWarmRestarts(T_0, T_mult, eta_min) stepped once per epoch, as the
//       original (MODEL_SPEC §5): constant within an epoch.
// warmup_cosine: linear warmup over `warmup` steps from 0, then cosine to eta_min at `total`.
#pragma once
#include <cstdint>

namespace model {

double sgdr_lr(double base_lr, double eta_min, int t0, int t_mult, int epoch /* 0-based */);
double warmup_cosine_lr(double base_lr, double eta_min, int64_t warmup, int64_t total, int64_t step /* 0-based */);

}  // namespace model
