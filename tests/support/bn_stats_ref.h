// Test support: the check of a statistics epilogue's outputs (kern::BnStatsOut: a conv forward's epilogue
// gathering the following BatchNorm's batch statistics) against fp64 two-pass statistics of the y it stored
// and against kern::bn_stats_train on that y. Shared by the pointwise and depthwise forwards' tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace sftest {

// y: `count` rows of c channels (the stored bf16 values). got, ref: {save_mean, save_invstd, running_mean,
// running_var} of the epilogue and of bn_stats_train, both from running statistics rm0, rv0 (per channel)
// with `momentum`. Means within fp32 rounding of themselves plus 1e-5 of the channel's std (the shifted
// sums), invstd within 1e-5 (2e-5 against bn_stats_train), the running statistics likewise. Returns the
// largest |mean| / std over the channels, for the caller to require means far from 0.
inline double expect_bn_stats_of(const std::vector<float>& y, size_t c, size_t count,
                                 const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref,
                                 const std::vector<float>& rm0, const std::vector<float>& rv0, double momentum,
                                 double eps, const std::string& what) {
    std::vector<double> mean(c, 0), var(c, 0);
    for (size_t i = 0; i < y.size(); ++i) mean[i % c] += y[i];
    for (double& m : mean) m /= static_cast<double>(count);
    for (size_t i = 0; i < y.size(); ++i) var[i % c] += (y[i] - mean[i % c]) * (y[i] - mean[i % c]);
    double spread = 0;
    for (size_t j = 0; j < c; ++j) {
        var[j] /= static_cast<double>(count);
        spread = std::max(spread, std::fabs(mean[j]) / std::sqrt(var[j]));
        const double sd = std::sqrt(var[j]), invstd = 1.0 / std::sqrt(var[j] + eps);
        const double rm = (1 - momentum) * rm0[j] + momentum * mean[j];
        const double rv = (1 - momentum) * rv0[j] + momentum * var[j] * count / (count - 1.0);
        const std::string ch = what + " channel " + std::to_string(j);
        EXPECT_NEAR(got[0][j], mean[j], 1e-6 * std::fabs(mean[j]) + 1e-5 * sd) << ch << " mean";
        EXPECT_NEAR(got[1][j], invstd, 1e-5 * invstd) << ch << " invstd";
        EXPECT_NEAR(got[2][j], rm, 1e-6 * std::fabs(rm) + 1e-5 * sd) << ch << " running_mean";
        EXPECT_NEAR(got[3][j], rv, 1e-5 * rv) << ch << " running_var";
        EXPECT_NEAR(got[0][j], ref[0][j], 1e-6 * std::fabs(mean[j]) + 1e-5 * sd) << ch << " mean vs bn_stats_train";
        EXPECT_NEAR(got[1][j], ref[1][j], 2e-5 * invstd) << ch << " invstd vs bn_stats_train";
        EXPECT_NEAR(got[3][j], ref[3][j], 2e-5 * rv) << ch << " running_var vs bn_stats_train";
    }
    return spread;
}

}  // namespace sftest
