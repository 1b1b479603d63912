// CPU reference BatchNorm2d (kernels/batchnorm_ref.cpp): hand-computed statistics, running-stat
// update (with the unbiased factor) and eval mode; an independent naive forward on random data; fp64
// finite differences of the backward; accuracy with a large mean in fp32; thread-count independence;
// accumulation, argument checks and backend dispatch.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/batchnorm.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

using Vec = std::vector<double>;

template <class T>
std::vector<T> cast(const Vec& v) {
    return std::vector<T>(v.begin(), v.end());
}

// Train-mode forward in T on double inputs; returns y, save_mean, save_invstd, running_mean, running_var.
template <class T>
std::vector<Vec> train(size_t rows, int c, const Vec& x, const Vec& gamma, const Vec& beta, const Vec& rm0,
                       const Vec& rv0, double momentum, double eps) {
    const auto tx = cast<T>(x), tg = cast<T>(gamma), tb = cast<T>(beta);
    std::vector<T> y(x.size()), mean(c), invstd(c), rm = cast<T>(rm0), rv = cast<T>(rv0);
    kern::batchnorm_forward_train_ref<T>(rows, c, tx.data(), tg.data(), tb.data(), y.data(), mean.data(), invstd.data(),
                                         rm.data(), rv.data(), momentum, eps);
    return {sftest::to_double(y), sftest::to_double(mean), sftest::to_double(invstd), sftest::to_double(rm),
            sftest::to_double(rv)};
}

TEST(KernelsBatchNorm, HandTrainForwardAndRunningStats) {
    // rows 4, c 2. Channel 0 = 1,2,3,4: mean 2.5, biased var 1.25, unbiased 5/3. Channel 1 constant 2:
    // mean 2, var 0, so invstd = 1/sqrt(eps) and y = beta.
    const Vec x = {1, 2, 2, 2, 3, 2, 4, 2}, gamma = {2, 1}, beta = {0.5, -1};
    const double eps = 1e-5, m = 0.1;
    const std::vector<Vec> out = train<double>(4, 2, x, gamma, beta, {0, 1}, {1, 1}, m, eps);
    const double is0 = 1 / std::sqrt(1.25 + eps), is1 = 1 / std::sqrt(eps);
    Vec y(8);
    for (int r = 0; r < 4; ++r) y[2 * r] = (r + 1 - 2.5) * is0 * 2 + 0.5, y[2 * r + 1] = -1;
    EXPECT_TRUE(sftest::close_elementwise(out[0], y, 1e-14, 1e-14, "y"));
    EXPECT_TRUE(sftest::close_elementwise(out[1], {2.5, 2}, 0, 1e-15, "save_mean"));
    EXPECT_TRUE(sftest::close_elementwise(out[2], {is0, is1}, 0, 1e-15, "save_invstd"));
    EXPECT_TRUE(sftest::close_elementwise(out[3], {0.9 * 0 + 0.1 * 2.5, 0.9 * 1 + 0.1 * 2}, 0, 1e-15, "running_mean"));
    EXPECT_TRUE(sftest::close_elementwise(out[4], {0.9 * 1 + 0.1 * (5.0 / 3.0), 0.9 * 1 + 0.1 * 0}, 0, 1e-15,
                                          "running_var (unbiased)"));
}

TEST(KernelsBatchNorm, HandEval) {
    // running mean (1, -2), var (4, 0.25), eps 0: y0 = (x - 1) / 2 * 2 + 0.5, y1 = (x + 2) / 0.5 - 1.
    const std::vector<float> x = {1, 2, 2, 2, 3, 2, 4, 2}, gamma = {2, 1}, beta = {0.5f, -1};
    const std::vector<float> rm = {1, -2}, rv = {4, 0.25f};
    std::vector<float> y(8);
    kern::batchnorm_forward_eval_ref(4, 2, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), 0.0, y.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), {0.5, 7, 1.5, 7, 2.5, 7, 3.5, 7}, 0, 0, "y"));
}

TEST(KernelsBatchNorm, HandBackwardConstantGradient) {
    // dy constant per channel: dx = 0 (it only shifts the mean), dbeta = rows * dy, dgamma = 0
    // because sum xhat = 0. Accumulated onto the initial values.
    const Vec x = {1, 5, 2, -1, 4, 0, 7, 3}, gamma = {2, 3}, beta = {0, 0};
    const std::vector<Vec> f = train<double>(4, 2, x, gamma, beta, {0, 0}, {1, 1}, 0.1, 1e-5);
    const Vec dy = {0.5, -2, 0.5, -2, 0.5, -2, 0.5, -2};
    Vec dx(8, 1.0), dgamma = {10, 20}, dbeta = {100, 200};
    kern::batchnorm_backward_ref<double>(4, 2, x.data(), dy.data(), gamma.data(), f[1].data(), f[2].data(), dx.data(),
                                         dgamma.data(), dbeta.data());
    EXPECT_TRUE(sftest::close_elementwise(dx, Vec(8, 1.0), 1e-14, 0, "dx"));
    EXPECT_TRUE(sftest::close_elementwise(dgamma, {10, 20}, 1e-13, 0, "dgamma"));
    EXPECT_TRUE(sftest::close_elementwise(dbeta, {102, 192}, 0, 0, "dbeta"));
}

// Independent naive forward in double (direct definition, one pass per channel).
std::vector<Vec> naive_train(size_t rows, int c, const Vec& x, const Vec& gamma, const Vec& beta, const Vec& rm,
                             const Vec& rv, double m, double eps) {
    Vec y(x.size()), mean(c), invstd(c), nrm(c), nrv(c);
    for (int j = 0; j < c; ++j) {
        double s = 0, ss = 0;
        for (size_t r = 0; r < rows; ++r) s += x[r * c + j];
        mean[j] = s / rows;
        for (size_t r = 0; r < rows; ++r) ss += (x[r * c + j] - mean[j]) * (x[r * c + j] - mean[j]);
        invstd[j] = 1 / std::sqrt(ss / rows + eps);
        nrm[j] = (1 - m) * rm[j] + m * mean[j];
        nrv[j] = (1 - m) * rv[j] + m * ss / (rows - 1);
        for (size_t r = 0; r < rows; ++r) y[r * c + j] = (x[r * c + j] - mean[j]) * invstd[j] * gamma[j] + beta[j];
    }
    return {y, mean, invstd, nrm, nrv};
}

TEST(KernelsBatchNorm, TrainAndEvalMatchNaive) {
    const size_t rows = 2 * 7 * 9;
    const int c = 13;
    const Vec x = sftest::random_uniform(rows * c, 1, -3, 5), gamma = sftest::random_uniform(c, 2, 0.5, 2);
    const Vec beta = sftest::random_uniform(c, 3), rm = sftest::random_uniform(c, 4),
              rv = sftest::random_uniform(c, 5, 0.5, 2);
    const std::vector<Vec> want = naive_train(rows, c, x, gamma, beta, rm, rv, 0.03, 1e-3);
    const std::vector<Vec> got = train<double>(rows, c, x, gamma, beta, rm, rv, 0.03, 1e-3);
    const char* names[5] = {"y", "save_mean", "save_invstd", "running_mean", "running_var"};
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(sftest::close_rel_l2(got[i], want[i], 1e-13, names[i]));

    // Eval mode normalises with the running statistics.
    Vec eval(x.size()), want_eval(x.size());
    kern::batchnorm_forward_eval_ref<double>(rows, c, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), 1e-3,
                                             eval.data());
    for (size_t i = 0; i < x.size(); ++i) {
        const size_t j = i % c;
        want_eval[i] = (x[i] - rm[j]) / std::sqrt(rv[j] + 1e-3) * gamma[j] + beta[j];
    }
    EXPECT_TRUE(sftest::close_rel_l2(eval, want_eval, 1e-13, "eval y"));
}

TEST(KernelsBatchNorm, Fp32AccurateWithLargeMean) {
    // x = 1000 + U(-1, 1): a one-pass E[x^2] - mean^2 in fp32 loses most digits of the variance.
    const size_t rows = 4096;
    const int c = 8;
    Vec x = sftest::random_uniform(rows * c, 6);
    for (double& v : x) v = static_cast<float>(v + 1000.0);  // exactly representable inputs for both runs
    const Vec gamma(c, 1.0), beta(c, 0.0), rm(c, 0.0), rv(c, 1.0);
    const std::vector<Vec> f = train<float>(rows, c, x, gamma, beta, rm, rv, 0.1, 1e-5);
    const std::vector<Vec> d = train<double>(rows, c, x, gamma, beta, rm, rv, 0.1, 1e-5);
    EXPECT_TRUE(sftest::close_rel_l2(f[0], d[0], 1e-6, "y"));
    EXPECT_TRUE(sftest::close_rel_l2(f[2], d[2], 1e-6, "save_invstd"));
    EXPECT_TRUE(sftest::close_rel_l2(f[4], d[4], 1e-6, "running_var"));
}

TEST(KernelsBatchNorm, BackwardMatchesFiniteDifferences) {
    const size_t rows = 2 * 3 * 4;
    const int c = 3;
    Vec x = sftest::random_uniform(rows * c, 10, -2, 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] += static_cast<double>(i % c);  // distinct channel means
    const Vec gamma = sftest::random_uniform(c, 11, 0.5, 2), beta = sftest::random_uniform(c, 12);
    const Vec r = sftest::random_uniform(rows * c, 13);  // probe: L = sum(y * r)
    const Vec rm(c, 0.0), rv(c, 1.0);
    auto loss = [&](const Vec& xv, const Vec& gv, const Vec& bv) {
        return sftest::dot(train<double>(rows, c, xv, gv, bv, rm, rv, 0.1, 1e-5)[0], r);
    };
    const std::vector<Vec> f = train<double>(rows, c, x, gamma, beta, rm, rv, 0.1, 1e-5);
    Vec dx(x.size(), 0.0), dgamma(c, 0.0), dbeta(c, 0.0);
    kern::batchnorm_backward_ref<double>(rows, c, x.data(), r.data(), gamma.data(), f[1].data(), f[2].data(), dx.data(),
                                         dgamma.data(), dbeta.data());
    EXPECT_TRUE(sftest::close_rel_l2(
        dx, sftest::numeric_gradient([&](const Vec& v) { return loss(v, gamma, beta); }, x), 1e-6, "dx"));
    EXPECT_TRUE(sftest::close_rel_l2(
        dgamma, sftest::numeric_gradient([&](const Vec& v) { return loss(x, v, beta); }, gamma), 1e-6, "dgamma"));
    EXPECT_TRUE(sftest::close_rel_l2(
        dbeta, sftest::numeric_gradient([&](const Vec& v) { return loss(x, gamma, v); }, beta), 1e-6, "dbeta"));
}

// Forward + backward in T; returns y, save_mean, save_invstd, rm, rv, dx, dgamma, dbeta.
template <class T>
std::vector<Vec> train_and_backward(size_t rows, int c, uint64_t seed) {
    const Vec x = sftest::random_uniform(rows * c, seed, -1, 3), dy = sftest::random_uniform(rows * c, seed + 1);
    const Vec gamma = sftest::random_uniform(c, seed + 2), beta = sftest::random_uniform(c, seed + 3);
    std::vector<Vec> out = train<T>(rows, c, x, gamma, beta, Vec(c, 0.0), Vec(c, 1.0), 0.1, 1e-5);
    const auto tx = cast<T>(x), tdy = cast<T>(dy), tg = cast<T>(gamma), tm = cast<T>(out[1]), ti = cast<T>(out[2]);
    std::vector<T> dx = cast<T>(sftest::random_uniform(rows * c, seed + 4)), dg(c, T(1)), db(c, T(-1));
    kern::batchnorm_backward_ref(rows, c, tx.data(), tdy.data(), tg.data(), tm.data(), ti.data(), dx.data(), dg.data(),
                                 db.data());
    out.push_back(sftest::to_double(dx));
    out.push_back(sftest::to_double(dg));
    out.push_back(sftest::to_double(db));
    return out;
}

// 1, 2 and 3 threads give identical bits; in double any change in summation order would show.
template <class T>
void expect_thread_count_independent() {
    const int saved = omp_get_max_threads();
    std::vector<std::vector<Vec>> runs;
    for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        runs.push_back(train_and_backward<T>(5003, 24, 40));
    }
    omp_set_num_threads(saved);
    for (size_t t = 1; t < runs.size(); ++t)
        for (size_t i = 0; i < runs[0].size(); ++i) {
            ASSERT_EQ(runs[0][i].size(), runs[t][i].size());
            EXPECT_EQ(0, std::memcmp(runs[0][i].data(), runs[t][i].data(), runs[0][i].size() * sizeof(double)))
                << (sizeof(T) == 4 ? "float" : "double") << " output " << i
                << " (y, mean, invstd, rm, rv, dx, dgamma, dbeta) differs between 1 and " << t + 1 << " threads";
        }
}

TEST(KernelsBatchNorm, BitwiseIndependentOfThreadCount) {
    expect_thread_count_independent<float>();
    expect_thread_count_independent<double>();
}

TEST(KernelsBatchNorm, BackwardAccumulates) {
    const size_t rows = 50;
    const int c = 5;
    const Vec x = sftest::random_uniform(rows * c, 20), dy = sftest::random_uniform(rows * c, 21);
    const Vec gamma = sftest::random_uniform(c, 22), beta(c, 0.0);
    const std::vector<Vec> f = train<double>(rows, c, x, gamma, beta, Vec(c, 0.0), Vec(c, 1.0), 0.1, 1e-5);
    Vec dx1(x.size(), 0.0), dg1(c, 0.0), db1(c, 0.0);
    kern::batchnorm_backward_ref<double>(rows, c, x.data(), dy.data(), gamma.data(), f[1].data(), f[2].data(),
                                         dx1.data(), dg1.data(), db1.data());
    Vec dx2 = dx1, dg2 = dg1, db2 = db1;
    kern::batchnorm_backward_ref<double>(rows, c, x.data(), dy.data(), gamma.data(), f[1].data(), f[2].data(),
                                         dx2.data(), dg2.data(), db2.data());
    auto twice = [](Vec v) {
        for (double& e : v) e *= 2;
        return v;
    };
    EXPECT_TRUE(sftest::close_elementwise(dx2, twice(dx1), 0, 0, "dx"));
    EXPECT_TRUE(sftest::close_elementwise(dg2, twice(dg1), 0, 0, "dgamma"));
    EXPECT_TRUE(sftest::close_elementwise(db2, twice(db1), 0, 0, "dbeta"));
}

TEST(KernelsBatchNorm, RejectsBadArguments) {
    std::vector<float> b(64, 1.0f);
    float* p = b.data();
    try {
        kern::batchnorm_forward_train_ref<float>(1, 4, p, p, p, p, p, p, p, p, 0.1, 1e-5);
        ADD_FAILURE() << "rows=1 accepted in train mode";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("more than 1 value per channel"), std::string::npos) << e.what();
    }
    EXPECT_THROW(kern::batchnorm_forward_train_ref<float>(8, 0, p, p, p, p, p, p, p, p, 0.1, 1e-5), rt::Error);
    EXPECT_THROW(kern::batchnorm_forward_eval_ref<float>(8, -1, p, p, p, p, p, 1e-5, p), rt::Error);
    EXPECT_THROW(kern::batchnorm_backward_ref<float>(8, 2, p, nullptr, p, p, p, p, p, p), rt::Error);
}

TEST(KernelsBatchNorm, DispatchCpuRunsReferenceAndCudaFails) {
    const size_t rows = 30;
    const int c = 4;
    const auto x = cast<float>(sftest::random_uniform(rows * c, 50)),
               dy = cast<float>(sftest::random_uniform(rows * c, 51));
    const std::vector<float> g = {1, 2, 3, 4}, b = {0, 1, 0, 1};
    std::vector<float> y1(rows * c), y2(rows * c), m1(c), m2(c), i1(c), i2(c), rm1(c, 0.f), rm2(c, 0.f), rv1(c, 1.f),
        rv2(c, 1.f), dx1(rows * c, 0.f), dx2(rows * c, 0.f), dg1(c, 0.f), dg2(c, 0.f), db1(c, 0.f), db2(c, 0.f);
    const rt::Exec cpu = rt::Exec::cpu();
    kern::batchnorm_forward_train(cpu, rows, c, x.data(), g.data(), b.data(), y1.data(), m1.data(), i1.data(),
                                  rm1.data(), rv1.data(), 0.1, 1e-5);
    kern::batchnorm_forward_train_ref(rows, c, x.data(), g.data(), b.data(), y2.data(), m2.data(), i2.data(),
                                      rm2.data(), rv2.data(), 0.1, 1e-5);
    EXPECT_EQ(y1, y2);
    EXPECT_EQ(rv1, rv2);
    kern::batchnorm_backward(cpu, rows, c, x.data(), dy.data(), g.data(), m1.data(), i1.data(), dx1.data(), dg1.data(),
                             db1.data());
    kern::batchnorm_backward_ref(rows, c, x.data(), dy.data(), g.data(), m2.data(), i2.data(), dx2.data(), dg2.data(),
                                 db2.data());
    EXPECT_EQ(dx1, dx2);
    EXPECT_EQ(dg1, dg2);
    kern::batchnorm_forward_eval(cpu, rows, c, x.data(), g.data(), b.data(), rm1.data(), rv1.data(), 1e-5, y1.data());
    kern::batchnorm_forward_eval_ref(rows, c, x.data(), g.data(), b.data(), rm2.data(), rv2.data(), 1e-5, y2.data());
    EXPECT_EQ(y1, y2);

    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;
    EXPECT_THROW(kern::batchnorm_forward_train(cuda, rows, c, x.data(), g.data(), b.data(), y1.data(), m1.data(),
                                               i1.data(), rm1.data(), rv1.data(), 0.1, 1e-5),
                 rt::Error);
    EXPECT_THROW(kern::batchnorm_forward_eval(cuda, rows, c, x.data(), g.data(), b.data(), rm1.data(), rv1.data(), 1e-5,
                                              y1.data()),
                 rt::Error);
    EXPECT_THROW(kern::batchnorm_backward(cuda, rows, c, x.data(), dy.data(), g.data(), m1.data(), i1.data(),
                                          dx1.data(), dg1.data(), db1.data()),
                 rt::Error);
}

}  // namespace
