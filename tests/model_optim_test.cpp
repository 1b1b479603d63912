// AdamW, gradient norm / clipping and the LR schedules against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/adamw.h"
#include "model/schedule.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

TEST(Schedule, SgdrMatchesTheOriginalsPerEpochLr) {
    // MODEL_SPEC §5: CosineAnnealingWarmRestarts(T_0=1, T_mult=2, eta_min=3e-6), base 3e-4, epochs 1..20.
    const double want[20] = {3.00e-4, 3.00e-4, 1.51e-4, 3.00e-4, 2.57e-4, 1.51e-4, 4.65e-5, 3.00e-4, 2.89e-4, 2.57e-4,
                             2.08e-4, 1.51e-4, 9.47e-5, 4.65e-5, 1.43e-5, 3.00e-4, 2.97e-4, 2.89e-4, 2.75e-4, 2.57e-4};
    for (int e = 0; e < 20; ++e) {
        const double lr = model::sgdr_lr(3e-4, 3e-6, 1, 2, e);
        EXPECT_NEAR(lr, want[e], 0.006 * want[e]) << "epoch " << e + 1;
    }
    // Exact value in the middle of the 2-epoch cycle: eta_min + (base - eta_min)/2.
    EXPECT_DOUBLE_EQ(model::sgdr_lr(3e-4, 3e-6, 1, 2, 2), 3e-6 + (3e-4 - 3e-6) * 0.5);
    EXPECT_THROW(model::sgdr_lr(3e-4, 3e-6, 0, 2, 1), rt::Error);
}

TEST(Schedule, WarmupCosine) {
    EXPECT_DOUBLE_EQ(model::warmup_cosine_lr(1.0, 0.0, 4, 14, 0), 0.25);
    EXPECT_DOUBLE_EQ(model::warmup_cosine_lr(1.0, 0.0, 4, 14, 3), 1.0);
    EXPECT_DOUBLE_EQ(model::warmup_cosine_lr(1.0, 0.0, 4, 14, 4), 1.0);
    EXPECT_NEAR(model::warmup_cosine_lr(1.0, 0.0, 4, 14, 9), 0.5, 1e-12);
    EXPECT_NEAR(model::warmup_cosine_lr(1.0, 0.1, 4, 14, 14), 0.1, 1e-12);
    EXPECT_NEAR(model::warmup_cosine_lr(1.0, 0.1, 4, 14, 100), 0.1, 1e-12);  // stays at the floor
}

TEST(AdamW, TwoStepsMatchHandComputation) {
    // One element, PyTorch AdamW semantics, computed by hand in double.
    kern::AdamWHyper h;
    h.lr = 0.1;
    h.beta1 = 0.9;
    h.beta2 = 0.99;
    h.eps = 1e-8;
    h.weight_decay = 0.5;
    float p = 2.0f, m = 0.0f, v = 0.0f;
    const float g1 = 0.5f, g2 = -1.0f;
    kern::adamw_step_ref(1, &p, &g1, &m, &v, h, 1, 1.0);
    // step 1: p = 2*(1-0.05) - 0.1/(0.1) * 0.05 / (sqrt(0.0025)/sqrt(0.01) + 1e-8) = 1.9 - 1*0.05/(0.5+1e-8)
    double pe = 2.0 * 0.95 - (0.1 / 0.1) * 0.05 / (std::sqrt(0.0025) / std::sqrt(0.01) + 1e-8);
    EXPECT_NEAR(p, pe, 1e-6);
    EXPECT_NEAR(m, 0.05, 1e-7);
    EXPECT_NEAR(v, 0.0025, 1e-8);
    kern::adamw_step_ref(1, &p, &g2, &m, &v, h, 2, 0.5);  // grad scaled by the clip factor 0.5
    const double gs = -0.5, me = 0.05 + 0.1 * (gs - 0.05), ve = 0.99 * 0.0025 + 0.01 * gs * gs;
    pe = pe * 0.95 - (0.1 / (1 - 0.81)) * me / (std::sqrt(ve) / std::sqrt(1 - 0.9801) + 1e-8);
    EXPECT_NEAR(p, pe, 1e-6);
    EXPECT_NEAR(m, me, 1e-7);
    EXPECT_NEAR(v, ve, 1e-8);
}

TEST(AdamW, ZeroPaddingStaysZero) {
    kern::AdamWHyper h;
    std::vector<float> p(8, 0.0f), g(8, 0.0f), m(8, 0.0f), v(8, 0.0f);
    kern::adamw_step_ref(8, p.data(), g.data(), m.data(), v.data(), h, 1, 1.0);
    for (float x : p) EXPECT_EQ(x, 0.0f);
    EXPECT_THROW(kern::adamw_step_ref(8, p.data(), g.data(), m.data(), v.data(), h, 0, 1.0), rt::Error);
}

TEST(GradNorm, NormAndClipFactor) {
    std::vector<float> g(1000, 0.0f);
    g[3] = 3.0f;
    g[999] = 4.0f;
    EXPECT_DOUBLE_EQ(kern::grad_norm_ref(g.size(), g.data()), 5.0);
    EXPECT_NEAR(kern::clip_factor(5.0, 1.0), 1.0 / (5.0 + 1e-6), 1e-15);
    EXPECT_DOUBLE_EQ(kern::clip_factor(0.5, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(kern::clip_factor(50.0, 0.0), 1.0);  // clipping off
}

}  // namespace
