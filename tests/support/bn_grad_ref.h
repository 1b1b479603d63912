// Test support: the fp64 reference of a BatchNorm + activation's backward reductions (what a conv's
// BN-backward epilogue, kern::BnGradSums, and kern::bn_act_backward_stats write), and the check of a
// kernel's [dgamma, dbeta, mean(g), mean(g * xhat)] against it and against the statistics pass.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/tensor.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace sftest {

// A BatchNorm input of rows x c values, uniform in [-1, 1) around per-channel offsets in [-2, 2) (so that
// the mean matters), bf16-exact; seeds seed and seed + 1.
inline std::vector<float> bn_input(size_t rows, size_t c, uint64_t seed) {
    const std::vector<double> u = random_uniform(rows * c, seed, -1, 1);
    const std::vector<double> off = random_uniform(c, seed + 1, -2, 2);
    std::vector<double> x(rows * c);
    for (size_t i = 0; i < x.size(); ++i) x[i] = off[i % c] + u[i];
    return bf16_exact(x);
}

// Per channel: sum g, sum g * xhat and the sums of their magnitudes, in fp64, over rows x C values
// (x the BN's input, dx its output gradient), z = gamma * xhat + beta, g = dx * act'(z).
struct BnGradRef {
    std::vector<double> sg, sgx, mg, mgx;
};

inline BnGradRef bn_grad_ref(kern::Act act, size_t rows, size_t c, const std::vector<float>& x,
                             const std::vector<float>& dx, const std::vector<float>& gamma,
                             const std::vector<float>& beta, const std::vector<float>& mean,
                             const std::vector<float>& invstd) {
    BnGradRef r{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), std::vector<double>(c, 0.0),
                std::vector<double>(c, 0.0)};
    for (size_t i = 0; i < rows; ++i)
        for (size_t ch = 0; ch < c; ++ch) {
            const double d = static_cast<double>(x[i * c + ch]) - mean[ch];
            const double xhat = d * invstd[ch];
            const double z = d * (static_cast<double>(gamma[ch]) * invstd[ch]) + beta[ch];
            const double dyv = dx[i * c + ch];
            double gr = 0.0;
            kern::act_backward_ref<double>(act, 1, &z, &dyv, &gr, false);
            r.sg[ch] += gr;
            r.sgx[ch] += gr * xhat;
            r.mg[ch] += std::fabs(gr);
            r.mgx[ch] += std::fabs(gr * xhat);
        }
    return r;
}

// got and pass: [dgamma (C), dbeta (C), coef (2C)] of the kernel under test and of bn_act_backward_stats on
// the same dx; dgamma and dbeta both started from d0. Each within 1e-5 of the magnitudes' sum of the fp64
// reference, and within twice that of the statistics pass.
inline void expect_bn_grad_near(const std::vector<float>& got, const std::vector<float>& pass, const BnGradRef& r,
                                const std::vector<float>& d0, size_t rows, size_t c, const std::string& what) {
    for (size_t ch = 0; ch < c; ++ch) {
        const double ref[4] = {d0[ch] + r.sgx[ch], d0[ch] + r.sg[ch], r.sg[ch] / rows, r.sgx[ch] / rows};
        const double tol[4] = {1e-5 * (r.mgx[ch] + std::fabs(d0[ch])) + 1e-6,
                               1e-5 * (r.mg[ch] + std::fabs(d0[ch])) + 1e-6, 1e-5 * r.mg[ch] / rows + 1e-9,
                               1e-5 * r.mgx[ch] / rows + 1e-9};
        const size_t at[4] = {ch, c + ch, 2 * c + ch, 3 * c + ch};
        const char* names[4] = {"dgamma", "dbeta", "mean(g)", "mean(g xhat)"};
        for (int q = 0; q < 4; ++q) {
            EXPECT_NEAR(got[at[q]], ref[q], tol[q]) << what << " " << names[q] << " channel " << ch;
            EXPECT_NEAR(got[at[q]], pass[at[q]], 2 * tol[q])
                << what << " " << names[q] << " channel " << ch << " against bn_act_backward_stats";
        }
    }
}

}  // namespace sftest
