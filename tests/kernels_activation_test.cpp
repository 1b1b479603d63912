// CPU reference activations (kernels/activation.h): hand-computed values, behaviour at large |x|,
// fp64 backward vs central finite differences (probe L = sum(y*r)), accumulation into dx, and the
// fp32 dispatch path.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/activation.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

using kern::Act;

std::vector<double> act_fwd(Act a, const std::vector<double>& x) {
    std::vector<double> y(x.size());
    kern::act_forward_ref(a, x.size(), x.data(), y.data());
    return y;
}

// Returns the gradient added to a non-zero starting dx, so accumulation is checked too.
template <class Backward>
std::vector<double> added_grad(size_t n, Backward&& backward) {
    std::vector<double> dx = sftest::random_uniform(n, 99, -3, 3);
    const std::vector<double> dx0 = dx;
    backward(dx.data());
    for (size_t i = 0; i < n; ++i) dx[i] -= dx0[i];
    return dx;
}

// Random inputs in [-4, 4] kept at least 0.05 away from 0 (the ReLU kink).
std::vector<double> inputs_away_from_zero(size_t n, uint64_t seed) {
    std::vector<double> x = sftest::random_uniform(n, seed, -4, 4);
    for (double& v : x)
        if (std::fabs(v) < 0.05) v = v < 0 ? v - 0.05 : v + 0.05;
    return x;
}

TEST(KernelsActivation, SigmoidHandValues) {
    const std::vector<double> x = {0, 1, -1, 2, 100, -100, 1000, -1000};
    const std::vector<double> want = {
        0.5, 0.7310585786300049, 0.2689414213699951, 0.8807970779778823, 1.0, 3.720075976020836e-44, 1.0, 0.0};
    std::vector<double> y(x.size());
    kern::sigmoid_forward_ref(x.size(), x.data(), y.data());
    EXPECT_TRUE(sftest::close_elementwise(y, want, 0, 1e-15, "sigmoid"));
}

TEST(KernelsActivation, SigmoidFloatLargeInputsStayFinite) {
    const std::vector<float> x = {88.f, -88.f, 200.f, -200.f, 1e30f, -1e30f};
    std::vector<float> y(x.size());
    kern::sigmoid_forward_ref(x.size(), x.data(), y.data());
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_TRUE(std::isfinite(y[i])) << "x=" << x[i];
        EXPECT_GE(y[i], 0.f);
        EXPECT_LE(y[i], 1.f);
    }
    EXPECT_EQ(y[2], 1.f);
    EXPECT_EQ(y[3], 0.f);
}

TEST(KernelsActivation, SiluHandValues) {
    const std::vector<double> x = {0, 1, -1, 2, -2};
    const std::vector<double> want = {0, 0.7310585786300049, -0.2689414213699951, 1.7615941559557646,
                                      -0.2384058440442351};
    EXPECT_TRUE(sftest::close_elementwise(act_fwd(Act::Silu, x), want, 0, 1e-15, "silu"));
}

TEST(KernelsActivation, ReluAndIdentityHandValues) {
    const std::vector<double> x = {-2.5, -0.0, 0.0, 1e-300, 3.25};
    EXPECT_EQ(act_fwd(Act::Relu, x), (std::vector<double>{0, 0, 0, 1e-300, 3.25}));
    EXPECT_EQ(act_fwd(Act::None, x), x);
}

TEST(KernelsActivation, ReluPropagatesNan) {
    const std::vector<double> x = {std::numeric_limits<double>::quiet_NaN()};
    EXPECT_TRUE(std::isnan(act_fwd(Act::Relu, x)[0]));
}

TEST(KernelsActivation, SiluReluLargeMagnitude) {
    const std::vector<double> x = {100, -100, 1e4, -1e4, 1e300, -1e300};
    const std::vector<double> silu = act_fwd(Act::Silu, x);
    const std::vector<double> silu_want = {100, -100 * 3.720075976020836e-44, 1e4, 0, 1e300, 0};
    EXPECT_TRUE(sftest::close_elementwise(silu, silu_want, 0, 1e-14, "silu large"));
    EXPECT_EQ(act_fwd(Act::Relu, x), (std::vector<double>{100, 0, 1e4, 0, 1e300, 0}));

    // Gradients: SiLU' -> 1 for x -> +inf and -> 0 for x -> -inf; ReLU' is the step. No NaN.
    const std::vector<double> ones(x.size(), 1.0);
    std::vector<double> g_silu(x.size(), 0.0), g_relu(x.size(), 0.0);
    kern::act_backward_ref(Act::Silu, x.size(), x.data(), ones.data(), g_silu.data());
    kern::act_backward_ref(Act::Relu, x.size(), x.data(), ones.data(), g_relu.data());
    EXPECT_TRUE(sftest::close_elementwise(g_silu, {1, 0, 1, 0, 1, 0}, 1e-38, 1e-14, "silu' large"));
    EXPECT_EQ(g_relu, (std::vector<double>{1, 0, 1, 0, 1, 0}));

    // Same in float, where a naive x/(1+exp(-x)) would overflow exp.
    const std::vector<float> xf = {100.f, -100.f, 1e4f, -1e4f, 1e30f, -1e30f};
    const std::vector<float> onesf(xf.size(), 1.f);
    std::vector<float> yf(xf.size()), gf(xf.size(), 0.f);
    kern::act_forward_ref(Act::Silu, xf.size(), xf.data(), yf.data());
    kern::act_backward_ref(Act::Silu, xf.size(), xf.data(), onesf.data(), gf.data());
    for (size_t i = 0; i < xf.size(); ++i) {
        EXPECT_TRUE(std::isfinite(yf[i]) && std::isfinite(gf[i])) << "x=" << xf[i];
        // x = -100 leaves a denormal (about -4e-42), hence the absolute tolerance.
        EXPECT_NEAR(yf[i], xf[i] > 0 ? xf[i] : 0.f, 1e-38) << "x=" << xf[i];
        EXPECT_NEAR(gf[i], xf[i] > 0 ? 1.f : 0.f, 1e-38) << "x=" << xf[i];
    }
}

TEST(KernelsActivation, ReluGradientAtZeroIsZero) {
    const std::vector<double> x = {0.0, -0.0, 1e-300, -1e-300};
    const std::vector<double> dy = {2, 3, 4, 5};
    std::vector<double> dx(x.size(), 0.0);
    kern::act_backward_ref(Act::Relu, x.size(), x.data(), dy.data(), dx.data());
    EXPECT_EQ(dx, (std::vector<double>{0, 0, 4, 0}));
}

TEST(KernelsActivation, ForwardInPlace) {
    const std::vector<double> x = inputs_away_from_zero(37, 5);
    for (Act a : {Act::None, Act::Silu, Act::Relu}) {
        std::vector<double> y = x;
        kern::act_forward_ref(a, y.size(), y.data(), y.data());
        EXPECT_EQ(y, act_fwd(a, x)) << kern::act_name(a);
    }
}

TEST(KernelsActivation, ActBackwardMatchesFiniteDifferences) {
    const size_t n = 64;
    const std::vector<double> x = inputs_away_from_zero(n, 1);
    const std::vector<double> r = sftest::random_uniform(n, 2);
    for (Act a : {Act::None, Act::Silu, Act::Relu}) {
        auto loss = [&](const std::vector<double>& xv) { return sftest::dot(act_fwd(a, xv), r); };
        const std::vector<double> want = sftest::numeric_gradient(loss, x);
        const std::vector<double> got =
            added_grad(n, [&](double* dx) { kern::act_backward_ref(a, n, x.data(), r.data(), dx); });
        EXPECT_TRUE(sftest::close_rel_l2(got, want, 1e-8, kern::act_name(a)));
    }
}

TEST(KernelsActivation, SigmoidBackwardMatchesFiniteDifferences) {
    const size_t n = 50;
    const std::vector<double> x = sftest::random_uniform(n, 3, -6, 6);
    const std::vector<double> r = sftest::random_uniform(n, 4);
    auto fwd = [&](const std::vector<double>& xv) {
        std::vector<double> y(n);
        kern::sigmoid_forward_ref(n, xv.data(), y.data());
        return y;
    };
    const std::vector<double> y = fwd(x);
    const std::vector<double> want =
        sftest::numeric_gradient([&](const std::vector<double>& xv) { return sftest::dot(fwd(xv), r); }, x);
    const std::vector<double> got =
        added_grad(n, [&](double* dx) { kern::sigmoid_backward_ref(n, y.data(), r.data(), dx); });
    EXPECT_TRUE(sftest::close_rel_l2(got, want, 1e-8, "sigmoid'"));
}

TEST(KernelsActivation, TanhHalfValuesAndBackward) {
    const std::vector<double> x0 = {0, 1, -1, 50};
    std::vector<double> y0(x0.size());
    kern::tanh_half_forward_ref(x0.size(), x0.data(), y0.data());
    EXPECT_TRUE(
        sftest::close_elementwise(y0, {0, 0.3807970779778824, -0.3807970779778824, 0.5}, 0, 1e-15, "tanh_half"));

    const size_t n = 50;
    const std::vector<double> x = sftest::random_uniform(n, 5, -3, 3);
    const std::vector<double> r = sftest::random_uniform(n, 6);
    auto fwd = [&](const std::vector<double>& xv) {
        std::vector<double> y(n);
        kern::tanh_half_forward_ref(n, xv.data(), y.data());
        return y;
    };
    const std::vector<double> y = fwd(x);
    const std::vector<double> want =
        sftest::numeric_gradient([&](const std::vector<double>& xv) { return sftest::dot(fwd(xv), r); }, x);
    const std::vector<double> got =
        added_grad(n, [&](double* dx) { kern::tanh_half_backward_ref(n, y.data(), r.data(), dx); });
    EXPECT_TRUE(sftest::close_rel_l2(got, want, 1e-8, "tanh_half'"));
}

TEST(KernelsActivation, L2NormHandValues) {
    // Rows: (3,4) -> (0.6,0.8); (0,-5) -> (0,-1); zero row stays zero; a row with norm below eps is
    // divided by eps, not by its norm.
    const std::vector<double> x = {3, 4, 0, -5, 0, 0, 1e-13, 0};
    std::vector<double> y(x.size());
    kern::l2norm_forward_ref(4, 2, x.data(), y.data(), 1e-12);
    EXPECT_TRUE(sftest::close_elementwise(y, {0.6, 0.8, 0, -1, 0, 0, 0.1, 0}, 0, 1e-15, "l2norm"));

    std::vector<float> xf = {3.f, 4.f};
    kern::l2norm_forward_ref(1, 2, xf.data(), xf.data(), 1e-12);  // in place
    EXPECT_FLOAT_EQ(xf[0], 0.6f);
    EXPECT_FLOAT_EQ(xf[1], 0.8f);
}

TEST(KernelsActivation, L2NormBackwardMatchesFiniteDifferences) {
    // eps = 0.5 so both regimes are exercised: rows scaled to norms 2.0 (x/||x||) and 0.2 (x/eps).
    const int c = 3;
    const size_t rows = 6;
    const double eps = 0.5;
    std::vector<double> x = sftest::random_uniform(rows * c, 7);
    for (size_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int j = 0; j < c; ++j) ss += x[r * c + j] * x[r * c + j];
        const double target = r % 2 ? 2.0 : 0.2;
        for (int j = 0; j < c; ++j) x[r * c + j] *= target / std::sqrt(ss);
    }
    const std::vector<double> probe = sftest::random_uniform(rows * c, 8);
    auto loss = [&](const std::vector<double>& xv) {
        std::vector<double> y(xv.size());
        kern::l2norm_forward_ref(rows, c, xv.data(), y.data(), eps);
        return sftest::dot(y, probe);
    };
    const std::vector<double> want = sftest::numeric_gradient(loss, x);
    const std::vector<double> got =
        added_grad(x.size(), [&](double* dx) { kern::l2norm_backward_ref(rows, c, x.data(), probe.data(), dx, eps); });
    EXPECT_TRUE(sftest::close_rel_l2(got, want, 1e-8, "l2norm'"));

    // Default eps: every row is in the x/||x|| regime; the gradient is orthogonal to x per row.
    const std::vector<double> want2 = sftest::numeric_gradient(
        [&](const std::vector<double>& xv) {
            std::vector<double> y(xv.size());
            kern::l2norm_forward_ref(rows, c, xv.data(), y.data(), 1e-12);
            return sftest::dot(y, probe);
        },
        x);
    const std::vector<double> got2 = added_grad(
        x.size(), [&](double* dx) { kern::l2norm_backward_ref(rows, c, x.data(), probe.data(), dx, 1e-12); });
    EXPECT_TRUE(sftest::close_rel_l2(got2, want2, 1e-8, "l2norm' eps=1e-12"));
}

TEST(KernelsActivation, L2NormRejectsBadArguments) {
    std::vector<double> x(4), y(4);
    EXPECT_THROW(kern::l2norm_forward_ref(2, 0, x.data(), y.data(), 1e-12), rt::Error);
    EXPECT_THROW(kern::l2norm_forward_ref(2, 2, x.data(), y.data(), 0.0), rt::Error);
}

TEST(KernelsActivation, FloatDispatchMatchesReference) {
    const rt::Exec ex = rt::Exec::cpu();
    const size_t n = 100;
    std::vector<float> x(n);
    const std::vector<double> xd = inputs_away_from_zero(n, 9);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(xd[i]);
    std::vector<float> got(n), want(n);
    for (Act a : {Act::None, Act::Silu, Act::Relu}) {
        kern::act_forward(ex, a, n, x.data(), got.data());
        kern::act_forward_ref(a, n, x.data(), want.data());
        EXPECT_EQ(got, want) << kern::act_name(a);
        std::vector<float> g1(n, 1.f), g2(n, 1.f);
        kern::act_backward(ex, a, n, x.data(), x.data(), g1.data());
        kern::act_backward_ref(a, n, x.data(), x.data(), g2.data());
        EXPECT_EQ(g1, g2) << kern::act_name(a);
    }
    kern::sigmoid_forward(ex, n, x.data(), got.data());
    kern::sigmoid_forward_ref(n, x.data(), want.data());
    EXPECT_EQ(got, want);
    kern::tanh_half_forward(ex, n, x.data(), got.data());
    kern::tanh_half_forward_ref(n, x.data(), want.data());
    EXPECT_EQ(got, want);
    kern::l2norm_forward(ex, n / 4, 4, x.data(), got.data(), 1e-12);
    kern::l2norm_forward_ref(n / 4, 4, x.data(), want.data(), 1e-12);
    EXPECT_EQ(got, want);
}

}  // namespace
