// CPU reference bilinear upsampling (kernels/upsample.h): a hand-computed x2 case, x2/x4/x8 against
// an independent naive formula (exact on small integers), backward vs finite differences and as
// the exact transpose, accumulation, thread-count independence, and bad factors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/upsample.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

using kern::Shape4;

size_t out_numel(const Shape4& s, int f) { return static_cast<size_t>(s.n) * s.h * f * s.w * f * s.c; }

template <class T>
std::vector<T> upsample(const Shape4& s, int f, const std::vector<T>& x) {
    std::vector<T> y(out_numel(s, f));
    kern::upsample_bilinear_forward_ref(s, f, x.data(), y.data());
    return y;
}

// F.interpolate(scale_factor=f, mode='bilinear', align_corners=False) written out per output pixel,
// straight from the documented formula, in double.
std::vector<double> naive_upsample(const Shape4& s, int f, const std::vector<double>& x) {
    const int OH = s.h * f, OW = s.w * f;
    std::vector<double> y(out_numel(s, f));
    auto src = [f](int o, int in, int& i0, int& i1) {
        const double p = std::max((o + 0.5) / f - 0.5, 0.0);
        i0 = static_cast<int>(std::floor(p));
        i1 = std::min(i0 + 1, in - 1);
        return p - i0;
    };
    auto at = [&](int n, int h, int w, int c) { return x[((static_cast<size_t>(n) * s.h + h) * s.w + w) * s.c + c]; };
    for (int n = 0; n < s.n; ++n)
        for (int oh = 0; oh < OH; ++oh)
            for (int ow = 0; ow < OW; ++ow) {
                int h0, h1, w0, w1;
                const double lh = src(oh, s.h, h0, h1), lw = src(ow, s.w, w0, w1);
                for (int c = 0; c < s.c; ++c)
                    y[((static_cast<size_t>(n) * OH + oh) * OW + ow) * s.c + c] =
                        (1 - lh) * ((1 - lw) * at(n, h0, w0, c) + lw * at(n, h0, w1, c)) +
                        lh * ((1 - lw) * at(n, h1, w0, c) + lw * at(n, h1, w1, c));
            }
    return y;
}

TEST(KernelsUpsample, X2HandComputed) {
    // One 2x2 map (values differ along both axes by different steps, so a swapped axis shows) in
    // channel 0; channel 1 holds -2*x+1 (interpolation is affine-preserving).
    // 1-D x2 of [a, b] is [a, 0.75a+0.25b, 0.25a+0.75b, b].
    const Shape4 s{1, 2, 2, 2};
    const std::vector<double> x = {1, -1, 2, -3, 3, -5, 4, -7};
    const std::vector<double> ch0 = {1.0, 1.25, 1.75, 2.0,  //
                                     1.5, 1.75, 2.25, 2.5,  //
                                     2.5, 2.75, 3.25, 3.5,  //
                                     3.0, 3.25, 3.75, 4.0};
    std::vector<double> want;
    for (double v : ch0) {
        want.push_back(v);
        want.push_back(-2 * v + 1);
    }
    EXPECT_EQ(upsample(s, 2, x), want);
}

TEST(KernelsUpsample, MatchesNaiveFormulaExactly) {
    // Lambdas are multiples of 1/(2f) and the inputs small integers, so every result is exact in
    // both float and double.
    const Shape4 shapes[] = {{2, 3, 5, 3}, {1, 1, 1, 2}, {1, 4, 2, 1}, {3, 2, 3, 5}};
    for (int f : {2, 4, 8}) {
        for (const Shape4& s : shapes) {
            const std::vector<double> x = sftest::random_ints(s.numel(), 11 + f, -8, 8);
            const std::string what = "f=" + std::to_string(f) + " shape " + std::to_string(s.n) + "x" +
                                     std::to_string(s.h) + "x" + std::to_string(s.w) + "x" + std::to_string(s.c);
            const std::vector<double> want = naive_upsample(s, f, x);
            EXPECT_TRUE(sftest::close_elementwise(upsample(s, f, x), want, 0, 0, what + " double"));
            const std::vector<float> xf(x.begin(), x.end());
            EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(upsample(s, f, xf)), want, 0, 0, what + " float"));
        }
    }
}

TEST(KernelsUpsample, BackwardMatchesFiniteDifferences) {
    for (int f : {2, 4, 8}) {
        const Shape4 s{2, 3, 2, 2};
        const std::vector<double> x = sftest::random_uniform(s.numel(), 20 + f);
        const std::vector<double> r = sftest::random_uniform(out_numel(s, f), 30 + f);
        const std::vector<double> want = sftest::numeric_gradient(
            [&](const std::vector<double>& xv) { return sftest::dot(upsample(s, f, xv), r); }, x);
        std::vector<double> dx = sftest::random_uniform(s.numel(), 40 + f);  // accumulate onto this
        const std::vector<double> dx0 = dx;
        kern::upsample_bilinear_backward_ref(s, f, r.data(), dx.data());
        for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
        EXPECT_TRUE(sftest::close_rel_l2(dx, want, 1e-8, "f=" + std::to_string(f)));
    }
}

TEST(KernelsUpsample, BackwardIsExactTranspose) {
    // <up(x), r> == <x, up^T(r)> exactly on small integers (all partial sums are exact in double).
    for (int f : {2, 4, 8}) {
        const Shape4 s{2, 5, 3, 3};
        const std::vector<double> x = sftest::random_ints(s.numel(), 50 + f, -4, 4);
        const std::vector<double> r = sftest::random_ints(out_numel(s, f), 60 + f, -4, 4);
        std::vector<double> dx(s.numel(), 0.0);
        kern::upsample_bilinear_backward_ref(s, f, r.data(), dx.data());
        EXPECT_EQ(sftest::dot(upsample(s, f, x), r), sftest::dot(x, dx)) << "f=" << f;
        // Each input's weights sum to f*f (the weights of every output sum to 1).
        const std::vector<double> ones(out_numel(s, f), 1.0);
        std::vector<double> g(s.numel(), 0.0);
        kern::upsample_bilinear_backward_ref(s, f, ones.data(), g.data());
        double total = 0;
        for (double v : g) total += v;
        EXPECT_EQ(total, static_cast<double>(out_numel(s, f))) << "f=" << f;
    }
}

TEST(KernelsUpsample, BackwardIndependentOfThreadCount) {
    const Shape4 s{2, 16, 16, 8};
    const int f = 4;
    const std::vector<float> dy = [&] {
        const std::vector<double> d = sftest::random_uniform(out_numel(s, f), 70);
        return std::vector<float>(d.begin(), d.end());
    }();
    const int saved = omp_get_max_threads();
    std::vector<float> one(s.numel(), 0.5f), many(s.numel(), 0.5f);
    omp_set_num_threads(1);
    kern::upsample_bilinear_backward_ref(s, f, dy.data(), one.data());
    omp_set_num_threads(7);
    kern::upsample_bilinear_backward_ref(s, f, dy.data(), many.data());
    omp_set_num_threads(saved);
    EXPECT_EQ(one, many);
}

TEST(KernelsUpsample, RejectsUnsupportedFactor) {
    const Shape4 s{1, 2, 2, 1};
    std::vector<float> x(4), y(4 * 16 * 16);
    for (int f : {0, 1, 3, 16, -2}) {
        try {
            kern::upsample_bilinear_forward_ref(s, f, x.data(), y.data());
            ADD_FAILURE() << "factor " << f << " accepted";
        } catch (const rt::Error& e) {
            EXPECT_NE(std::string(e.what()).find("factor " + std::to_string(f)), std::string::npos) << e.what();
        }
        EXPECT_THROW(kern::upsample_bilinear_backward_ref(s, f, y.data(), x.data()), rt::Error) << f;
        EXPECT_THROW(kern::upsample_bilinear_forward(rt::Exec::cpu(), s, f, x.data(), y.data()), rt::Error) << f;
    }
}

TEST(KernelsUpsample, FloatDispatchMatchesReference) {
    const rt::Exec ex = rt::Exec::cpu();
    const Shape4 s{2, 3, 4, 5};
    const std::vector<double> xd = sftest::random_uniform(s.numel(), 80);
    const std::vector<float> x(xd.begin(), xd.end());
    std::vector<float> got(out_numel(s, 2)), want(out_numel(s, 2));
    kern::upsample_bilinear_forward(ex, s, 2, x.data(), got.data());
    kern::upsample_bilinear_forward_ref(s, 2, x.data(), want.data());
    EXPECT_EQ(got, want);
    std::vector<float> g1(s.numel(), 1.f), g2(s.numel(), 1.f);
    kern::upsample_bilinear_backward(ex, s, 2, got.data(), g1.data());
    kern::upsample_bilinear_backward_ref(s, 2, got.data(), g2.data());
    EXPECT_EQ(g1, g2);
}

}  // namespace
