// CPU reference element-wise helpers and weighted FPN fusion (kernels/eltwise.h): add (with
// aliasing), accumulate, fill, fusion hand values and softplus threshold, fusion backward vs fp64
// finite differences over a, b, wa, wb, accumulation, thread-count independence, fp32 dispatch.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/eltwise.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

TEST(KernelsEltwise, AddAccumulateFill) {
    const std::vector<double> a = {1, -2, 3.5, 0}, b = {0.5, 2, -1, 7};
    std::vector<double> y(4);
    kern::add_ref(4, a.data(), b.data(), y.data());
    EXPECT_EQ(y, (std::vector<double>{1.5, 0, 2.5, 7}));

    std::vector<double> ya = a, yb = b;
    kern::add_ref(4, ya.data(), b.data(), ya.data());  // y aliases a
    kern::add_ref(4, a.data(), yb.data(), yb.data());  // y aliases b
    EXPECT_EQ(ya, y);
    EXPECT_EQ(yb, y);
    std::vector<double> twice = a;
    kern::add_ref(4, twice.data(), twice.data(), twice.data());  // all three alias
    EXPECT_EQ(twice, (std::vector<double>{2, -4, 7, 0}));

    std::vector<double> acc = {10, 20, 30, 40};
    kern::accumulate_ref(4, a.data(), acc.data());
    EXPECT_EQ(acc, (std::vector<double>{11, 18, 33.5, 40}));

    std::vector<float> f(7, 1.f);
    kern::fill_ref(5, 2.5f, f.data() + 1);
    EXPECT_EQ(f, (std::vector<float>{1.f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 1.f}));
}

TEST(KernelsEltwise, FusionEqualWeightsIsScaledMean) {
    // wa = wb = 1: y = (a + b)/2 * 2sp/(2sp + 1e-4), sp = softplus(1) = log(1 + e).
    const std::vector<double> a = {1, -2, 3, 0.25}, b = {3, 2, -1, 0.75};
    const double wa = 1, wb = 1;
    std::vector<double> y(4);
    kern::fusion_forward_ref(4, a.data(), b.data(), &wa, &wb, y.data());
    const double sp = std::log(1 + std::exp(1.0));
    EXPECT_NEAR(sp, 1.3132616875182228, 1e-15);
    std::vector<double> want(4);
    for (size_t i = 0; i < 4; ++i) want[i] = (a[i] + b[i]) / 2 * (2 * sp / (2 * sp + 1e-4));
    EXPECT_TRUE(sftest::close_elementwise(y, want, 1e-16, 1e-15, "fusion wa=wb=1"));
}

TEST(KernelsEltwise, FusionSoftplusThresholdAndLargeWeights) {
    // softplus(x) = x above 20 (torch's threshold); log1p(exp(x)) below, finite for very negative x.
    const std::vector<double> a = {2}, b = {-4};
    double y = 0;
    const double wa = 30, wb = -30;
    kern::fusion_forward_ref(1, a.data(), b.data(), &wa, &wb, &y);
    const double sb = std::log1p(std::exp(-30.0));
    EXPECT_NEAR(y, (30 * 2 + sb * -4) / (30 + sb + 1e-4), 1e-15);

    // Float with a huge weight: no overflow, y -> a.
    const std::vector<float> af = {1.5f}, bf = {-7.f};
    const float big = 1e4f, small = -1e4f;
    float yf = 0;
    kern::fusion_forward_ref(1, af.data(), bf.data(), &big, &small, &yf);
    EXPECT_TRUE(std::isfinite(yf));
    EXPECT_NEAR(yf, 1.5f, 1e-6f);
}

struct FusionCase {
    double wa, wb;
};

TEST(KernelsEltwise, FusionBackwardMatchesFiniteDifferences) {
    const size_t n = 40;
    // Below and above the softplus threshold, and unequal weights.
    for (const FusionCase& fc : {FusionCase{1.0, 1.0}, FusionCase{-0.7, 2.3}, FusionCase{25.0, -3.0}}) {
        // Packed parameter vector p = [a (n), b (n), wa, wb].
        std::vector<double> p = sftest::random_uniform(2 * n, 90);
        p.push_back(fc.wa);
        p.push_back(fc.wb);
        const std::vector<double> r = sftest::random_uniform(n, 91);
        auto loss = [&](const std::vector<double>& q) {
            std::vector<double> y(n);
            kern::fusion_forward_ref(n, q.data(), q.data() + n, &q[2 * n], &q[2 * n + 1], y.data());
            return sftest::dot(y, r);
        };
        const std::vector<double> want = sftest::numeric_gradient(loss, p);

        std::vector<double> g = sftest::random_uniform(2 * n + 2, 92);  // accumulate onto this
        const std::vector<double> g0 = g;
        kern::fusion_backward_ref(n, p.data(), p.data() + n, &p[2 * n], &p[2 * n + 1], r.data(), g.data(), g.data() + n,
                                  &g[2 * n], &g[2 * n + 1]);
        for (size_t i = 0; i < g.size(); ++i) g[i] -= g0[i];
        const std::string what = "wa=" + std::to_string(fc.wa) + " wb=" + std::to_string(fc.wb);
        EXPECT_TRUE(sftest::close_rel_l2({g.begin(), g.begin() + 2 * n}, {want.begin(), want.begin() + 2 * n}, 1e-8,
                                         what + " da,db"));
        EXPECT_TRUE(sftest::close_elementwise({g[2 * n], g[2 * n + 1]}, {want[2 * n], want[2 * n + 1]}, 1e-9, 1e-7,
                                              what + " dwa,dwb"));
    }
}

TEST(KernelsEltwise, FusionBackwardIndependentOfThreadCount) {
    // double instantiation: dwa, dwb keep every bit of the double sums, so any dependence of the
    // summation order on the thread count shows.
    const size_t n = 100003;  // several reduction chunks plus a ragged end
    const std::vector<double> a = sftest::random_uniform(n, 1), b = sftest::random_uniform(n, 2),
                              dy = sftest::random_uniform(n, 3);
    const double wa = 0.3, wb = 1.7;
    auto run = [&](int threads, std::vector<double>& da, std::vector<double>& db, double& dwa, double& dwb) {
        omp_set_num_threads(threads);
        da.assign(n, 0.0);
        db.assign(n, 0.0);
        dwa = dwb = 0.0;
        kern::fusion_backward_ref(n, a.data(), b.data(), &wa, &wb, dy.data(), da.data(), db.data(), &dwa, &dwb);
    };
    const int saved = omp_get_max_threads();
    std::vector<double> da1, db1, da2, db2;
    double dwa1, dwb1, dwa2, dwb2;
    run(1, da1, db1, dwa1, dwb1);
    run(5, da2, db2, dwa2, dwb2);
    omp_set_num_threads(saved);
    EXPECT_EQ(da1, da2);
    EXPECT_EQ(db1, db2);
    EXPECT_EQ(dwa1, dwa2);
    EXPECT_EQ(dwb1, dwb2);
    EXPECT_NE(dwa1, 0.0);
}

TEST(KernelsEltwise, FloatDispatchMatchesReference) {
    const rt::Exec ex = rt::Exec::cpu();
    const size_t n = 33;
    const std::vector<double> ad = sftest::random_uniform(n, 4), bd = sftest::random_uniform(n, 5);
    const std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end());
    std::vector<float> got(n), want(n);
    kern::add(ex, n, a.data(), b.data(), got.data());
    kern::add_ref(n, a.data(), b.data(), want.data());
    EXPECT_EQ(got, want);
    kern::accumulate(ex, n, a.data(), got.data());
    kern::accumulate_ref(n, a.data(), want.data());
    EXPECT_EQ(got, want);
    kern::fill(ex, n, -3.25f, got.data());
    EXPECT_EQ(got, std::vector<float>(n, -3.25f));
    const float wa = 0.5f, wb = -0.25f;
    kern::fusion_forward(ex, n, a.data(), b.data(), &wa, &wb, got.data());
    kern::fusion_forward_ref(n, a.data(), b.data(), &wa, &wb, want.data());
    EXPECT_EQ(got, want);
    std::vector<float> g1(2 * n + 2, 0.f), g2(2 * n + 2, 0.f);
    kern::fusion_backward(ex, n, a.data(), b.data(), &wa, &wb, b.data(), g1.data(), g1.data() + n, &g1[2 * n],
                          &g1[2 * n + 1]);
    kern::fusion_backward_ref(n, a.data(), b.data(), &wa, &wb, b.data(), g2.data(), g2.data() + n, &g2[2 * n],
                              &g2[2 * n + 1]);
    EXPECT_EQ(g1, g2);
}

}  // namespace
