// CPU reference convolution (kernels/conv_ref.cpp): hand-computed cases, an independent naive
// 7-loop convolution on random shapes (every code path: dot / axpy / depthwise, tile edges, runs longer
// than the wgrad run length), fp64 finite differences of every backward, thread-count independence,
// accumulation, shape validation and backend dispatch.
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

using kern::ConvShape;
using Vec = std::vector<double>;

ConvShape make_shape(int n, int h, int w, int cin, int cout, int k, int stride, int pad, int groups, bool bias) {
    ConvShape s;
    s.n = n, s.h = h, s.w = w, s.cin = cin, s.cout = cout;
    s.k = k, s.stride = stride, s.pad = pad, s.groups = groups, s.bias = bias;
    return s;
}

std::string describe(const ConvShape& s) {
    return rt::format("n%d h%d w%d cin%d cout%d k%d s%d p%d g%d%s", s.n, s.h, s.w, s.cin, s.cout, s.k, s.stride, s.pad,
                      s.groups, s.bias ? " bias" : "");
}

// Index helpers for the naive loops.
size_t nhwc(int n, int h, int w, int c, int H, int W, int C) {
    return ((static_cast<size_t>(n) * H + h) * W + w) * C + c;
}
size_t krsc(int ko, int r, int s, int ci, int K, int J) { return ((static_cast<size_t>(ko) * K + r) * K + s) * J + ci; }

// Calls f(y_index, x_index, w_index) for every multiply of the convolution (direct loops, written
// independently of the reference). Forward and both backwards of the naive conv are built on it.
template <class F>
void for_each_mac(const ConvShape& s, F f) {
    const int J = s.cin / s.groups, M = s.cout / s.groups, P = s.p(), Q = s.q();
    for (int n = 0; n < s.n; ++n)
        for (int p = 0; p < P; ++p)
            for (int q = 0; q < Q; ++q)
                for (int co = 0; co < s.cout; ++co)
                    for (int r = 0; r < s.k; ++r)
                        for (int t = 0; t < s.k; ++t)
                            for (int j = 0; j < J; ++j) {
                                const int h = p * s.stride - s.pad + r, w = q * s.stride - s.pad + t;
                                if (h < 0 || h >= s.h || w < 0 || w >= s.w) continue;
                                const int ci = (co / M) * J + j;
                                f(nhwc(n, p, q, co, P, Q, s.cout), nhwc(n, h, w, ci, s.h, s.w, s.cin),
                                  krsc(co, r, t, j, s.k, J));
                            }
}

Vec naive_forward(const ConvShape& s, const Vec& x, const Vec& w, const Vec* b) {
    Vec y(s.out().numel(), 0.0);
    for_each_mac(s, [&](size_t yi, size_t xi, size_t wi) { y[yi] += x[xi] * w[wi]; });
    if (b)
        for (size_t i = 0; i < y.size(); ++i) y[i] += (*b)[i % s.cout];
    return y;
}
Vec naive_dgrad(const ConvShape& s, const Vec& dy, const Vec& w) {
    Vec dx(s.in().numel(), 0.0);
    for_each_mac(s, [&](size_t yi, size_t xi, size_t wi) { dx[xi] += dy[yi] * w[wi]; });
    return dx;
}
Vec naive_wgrad(const ConvShape& s, const Vec& x, const Vec& dy) {
    Vec dw(s.weight_numel(), 0.0);
    for_each_mac(s, [&](size_t yi, size_t xi, size_t wi) { dw[wi] += dy[yi] * x[xi]; });
    return dw;
}
Vec naive_bgrad(const ConvShape& s, const Vec& dy) {
    Vec db(s.cout, 0.0);
    for (size_t i = 0; i < dy.size(); ++i) db[i % s.cout] += dy[i];
    return db;
}

template <class T>
std::vector<T> cast(const Vec& v) {
    return std::vector<T>(v.begin(), v.end());
}
Vec add(const Vec& a, const Vec& b) {
    Vec r(a.size());
    for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
    return r;
}

// Random inputs for one shape, with non-zero initial gradients so accumulation is checked.
struct Case {
    ConvShape s;
    Vec x, w, b, dy, dx0, dw0, db0;
    explicit Case(const ConvShape& shape, uint64_t seed) : s(shape) {
        x = sftest::random_uniform(s.in().numel(), seed);
        w = sftest::random_uniform(s.weight_numel(), seed + 1);
        b = sftest::random_uniform(s.cout, seed + 2);
        dy = sftest::random_uniform(s.out().numel(), seed + 3);
        dx0 = sftest::random_uniform(x.size(), seed + 4);
        dw0 = sftest::random_uniform(w.size(), seed + 5);
        db0 = sftest::random_uniform(b.size(), seed + 6);
    }
};

// Runs all three references in T; returns y, dx, dw, db (backwards accumulated onto dx0/dw0/db0).
template <class T>
std::vector<Vec> run_ref(const Case& c) {
    const auto x = cast<T>(c.x), w = cast<T>(c.w), b = cast<T>(c.b), dy = cast<T>(c.dy);
    std::vector<T> y(c.s.out().numel()), dx = cast<T>(c.dx0), dw = cast<T>(c.dw0), db = cast<T>(c.db0);
    kern::conv_forward_ref<T>(c.s, x.data(), w.data(), c.s.bias ? b.data() : nullptr, y.data());
    kern::conv_backward_data_ref<T>(c.s, dy.data(), w.data(), dx.data());
    kern::conv_backward_filter_ref<T>(c.s, x.data(), dy.data(), dw.data(), c.s.bias ? db.data() : nullptr);
    return {sftest::to_double(y), sftest::to_double(dx), sftest::to_double(dw), sftest::to_double(db)};
}

// ---- hand-computed cases ----

TEST(KernelsConv, HandOnesKernelPad1) {
    const ConvShape s = make_shape(1, 3, 3, 1, 1, 3, 1, 1, 1, false);
    const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w(9, 1.0f);
    std::vector<float> y(9);
    kern::conv_forward_ref(s, x.data(), w.data(), static_cast<const float*>(nullptr), y.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), {12, 21, 16, 27, 45, 33, 24, 39, 28}, 0, 0, "y"));
}

TEST(KernelsConv, HandIsCrossCorrelationNotFlipped) {
    // Kernel with a single 1 right of the centre: y(i, j) = x(i, j + 1), zero past the edge.
    const ConvShape s = make_shape(1, 3, 3, 1, 1, 3, 1, 1, 1, false);
    const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {0, 0, 0, 0, 0, 1, 0, 0, 0};
    std::vector<float> y(9);
    kern::conv_forward_ref(s, x.data(), w.data(), static_cast<const float*>(nullptr), y.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), {2, 3, 0, 5, 6, 0, 8, 9, 0}, 0, 0, "y"));
}

TEST(KernelsConv, HandStride2Pad1) {
    // 4x4 input 1..16, 3x3 ones, stride 2, pad 1 -> 2x2 windows centred on (0,0) (0,2) (2,0) (2,2).
    const ConvShape s = make_shape(1, 4, 4, 1, 1, 3, 2, 1, 1, false);
    ASSERT_EQ(s.p(), 2);
    ASSERT_EQ(s.q(), 2);
    std::vector<float> x(16), w(9, 1.0f), y(4);
    for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i + 1);
    kern::conv_forward_ref(s, x.data(), w.data(), static_cast<const float*>(nullptr), y.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), {14, 30, 57, 99}, 0, 0, "y"));

    // dgrad with dy = 1: each input pixel gets the number of windows covering it, rows/cols {1,2,1,1}.
    const std::vector<float> dy(4, 1.0f);
    std::vector<float> dx(16, 0.0f);
    kern::conv_backward_data_ref(s, dy.data(), w.data(), dx.data());
    const double cover[4] = {1, 2, 1, 1};
    Vec want(16);
    for (int i = 0; i < 16; ++i) want[i] = cover[i / 4] * cover[i % 4];
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(dx), want, 0, 0, "dx"));
}

TEST(KernelsConv, HandWgradAndBias) {
    // x = 1..9, dy = 1, pad 1: dw(r, s) = sum of x over the window shifted by (r-1, s-1); db = 9.
    const ConvShape s = make_shape(1, 3, 3, 1, 1, 3, 1, 1, 1, true);
    const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, dy(9, 1.0f);
    std::vector<float> dw(9, 0.0f), db(1, 0.5f);
    kern::conv_backward_filter_ref(s, x.data(), dy.data(), dw.data(), db.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(dw), {12, 21, 16, 27, 45, 33, 24, 39, 28}, 0, 0, "dw"));
    EXPECT_EQ(db[0], 9.5f);  // accumulated onto 0.5
}

TEST(KernelsConv, HandGroups) {
    // cin 4, cout 2, groups 2, 1x1: out 0 sees channels 0,1; out 1 sees channels 2,3.
    const ConvShape s = make_shape(1, 1, 1, 4, 2, 1, 1, 0, 2, false);
    const std::vector<float> x = {1, 2, 3, 4}, w = {1, 10, 100, 1000};
    std::vector<float> y(2);
    kern::conv_forward_ref(s, x.data(), w.data(), static_cast<const float*>(nullptr), y.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), {21, 4300}, 0, 0, "y"));
}

TEST(KernelsConv, HandDepthwise) {
    // Channel 0 = 1..9 with a ones kernel; channel 1 = all ones with 2 at the kernel centre.
    const ConvShape s = make_shape(1, 3, 3, 2, 2, 3, 1, 1, 2, false);
    std::vector<float> x(18), w(18, 0.0f), y(18);
    for (int i = 0; i < 9; ++i) x[2 * i] = static_cast<float>(i + 1), x[2 * i + 1] = 1.0f;
    for (int i = 0; i < 9; ++i) w[i] = 1.0f;  // filter 0 (KRSC, Cin/groups = 1)
    w[9 + 4] = 2.0f;                          // filter 1 centre
    kern::conv_forward_ref(s, x.data(), w.data(), static_cast<const float*>(nullptr), y.data());
    const double c0[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
    Vec want(18);
    for (int i = 0; i < 9; ++i) want[2 * i] = c0[i], want[2 * i + 1] = 2;
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), want, 0, 0, "y"));
}

TEST(KernelsConv, HandBias) {
    const ConvShape s = make_shape(1, 1, 2, 1, 2, 1, 1, 0, 1, true);
    const std::vector<float> x = {3, -1}, w = {1, -1}, b = {0.5f, 10};
    std::vector<float> y(4);
    kern::conv_forward_ref(s, x.data(), w.data(), b.data(), y.data());
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(y), {3.5, 7, -0.5, 11}, 0, 0, "y"));
}

// ---- optimised reference vs the naive loops ----

std::vector<ConvShape> random_shapes() {
    return {
        make_shape(2, 6, 9, 5, 7, 1, 1, 0, 1, false),      // 1x1, dot forms both ways
        make_shape(1, 7, 5, 16, 24, 3, 1, 1, 1, true),     // axpy forms, full wgrad tiles
        make_shape(2, 9, 10, 12, 20, 3, 2, 1, 1, false),   // stride 2, tile edges
        make_shape(1, 8, 11, 8, 12, 3, 2, 1, 2, true),     // groups 2
        make_shape(2, 5, 7, 8, 16, 3, 1, 1, 4, false),     // groups 4 (2 -> 4 channels per group)
        make_shape(1, 6, 6, 10, 10, 3, 1, 1, 10, true),    // depthwise
        make_shape(2, 11, 7, 24, 24, 3, 2, 1, 24, false),  // depthwise stride 2, odd sizes
        make_shape(1, 7, 8, 3, 9, 5, 1, 2, 1, false),      // 5x5
        make_shape(1, 9, 9, 6, 8, 3, 2, 0, 1, false),      // no padding, stride 2
        make_shape(1, 5, 13, 9, 11, 3, 1, 2, 1, true),     // asymmetric H/W, pad > k/2
        make_shape(1, 3, 140, 16, 16, 3, 1, 1, 1, false),  // rows longer than the wgrad run
        make_shape(1, 3, 150, 32, 32, 3, 1, 1, 32, true),  // depthwise, long rows, > 16 channels
        make_shape(2, 10, 14, 2, 32, 3, 2, 1, 1, false),   // stem-like: 2 -> 32
        make_shape(1, 4, 6, 64, 1, 1, 1, 0, 1, true),      // head 64 -> 1
        make_shape(1, 4, 6, 64, 4, 1, 1, 0, 1, true),      // head 64 -> 4
        make_shape(1, 2, 2, 3, 5, 3, 3, 2, 1, false),      // stride 3 with padding > input
    };
}

TEST(KernelsConv, MatchesNaiveDouble) {
    uint64_t seed = 100;
    for (const ConvShape& s : random_shapes()) {
        const Case c(s, seed += 10);
        const std::vector<Vec> got = run_ref<double>(c);
        const std::string what = describe(s);
        EXPECT_TRUE(
            sftest::close_rel_l2(got[0], naive_forward(s, c.x, c.w, s.bias ? &c.b : nullptr), 1e-13, what + " y"));
        EXPECT_TRUE(sftest::close_rel_l2(got[1], add(c.dx0, naive_dgrad(s, c.dy, c.w)), 1e-13, what + " dx"));
        EXPECT_TRUE(sftest::close_rel_l2(got[2], add(c.dw0, naive_wgrad(s, c.x, c.dy)), 1e-13, what + " dw"));
        const Vec db = s.bias ? add(c.db0, naive_bgrad(s, c.dy)) : c.db0;  // db untouched when null
        EXPECT_TRUE(sftest::close_rel_l2(got[3], db, 1e-13, what + " db"));
    }
}

TEST(KernelsConv, MatchesNaiveFloat) {
    uint64_t seed = 500;
    for (const ConvShape& s : random_shapes()) {
        const Case c(s, seed += 10);
        const std::vector<Vec> got = run_ref<float>(c);
        const std::string what = describe(s);
        // fp32 inputs are the double inputs rounded, so compare with the naive result on those.
        const Vec x = sftest::to_double(cast<float>(c.x)), w = sftest::to_double(cast<float>(c.w));
        const Vec b = sftest::to_double(cast<float>(c.b)), dy = sftest::to_double(cast<float>(c.dy));
        const Vec dx0 = sftest::to_double(cast<float>(c.dx0)), dw0 = sftest::to_double(cast<float>(c.dw0));
        EXPECT_TRUE(sftest::close_rel_l2(got[0], naive_forward(s, x, w, s.bias ? &b : nullptr), 2e-6, what + " y"));
        EXPECT_TRUE(sftest::close_rel_l2(got[1], add(dx0, naive_dgrad(s, dy, w)), 2e-6, what + " dx"));
        EXPECT_TRUE(sftest::close_rel_l2(got[2], add(dw0, naive_wgrad(s, x, dy)), 2e-6, what + " dw"));
    }
}

// ---- backward vs central finite differences (fp64) ----

void check_finite_differences(const ConvShape& s, uint64_t seed) {
    const Case c(s, seed);
    const Vec r = sftest::random_uniform(s.out().numel(), seed + 7);  // probe: L = sum(y * r)
    auto loss = [&](const Vec& x, const Vec& w, const Vec& b) {
        Vec y(s.out().numel());
        kern::conv_forward_ref<double>(s, x.data(), w.data(), s.bias ? b.data() : nullptr, y.data());
        return sftest::dot(y, r);
    };
    Vec dx(c.x.size(), 0.0), dw(c.w.size(), 0.0), db(c.b.size(), 0.0);
    kern::conv_backward_data_ref<double>(s, r.data(), c.w.data(), dx.data());
    kern::conv_backward_filter_ref<double>(s, c.x.data(), r.data(), dw.data(), s.bias ? db.data() : nullptr);
    const std::string what = describe(s);
    EXPECT_TRUE(sftest::close_rel_l2(dx, sftest::numeric_gradient([&](const Vec& v) { return loss(v, c.w, c.b); }, c.x),
                                     1e-7, what + " dx"));
    EXPECT_TRUE(sftest::close_rel_l2(dw, sftest::numeric_gradient([&](const Vec& v) { return loss(c.x, v, c.b); }, c.w),
                                     1e-7, what + " dw"));
    if (s.bias) {
        EXPECT_TRUE(sftest::close_rel_l2(
            db, sftest::numeric_gradient([&](const Vec& v) { return loss(c.x, c.w, v); }, c.b), 1e-7, what + " db"));
    }
}

TEST(KernelsConv, BackwardMatchesFiniteDifferences) {
    check_finite_differences(make_shape(2, 5, 4, 4, 6, 3, 2, 1, 2, true), 11);   // groups, stride 2
    check_finite_differences(make_shape(1, 5, 6, 3, 3, 3, 1, 1, 3, true), 12);   // depthwise
    check_finite_differences(make_shape(1, 3, 4, 5, 9, 1, 1, 0, 1, false), 13);  // 1x1
    check_finite_differences(make_shape(1, 4, 5, 9, 10, 3, 1, 1, 1, true), 14);  // axpy paths
}

// ---- determinism, accumulation, validation, dispatch ----

// Runs the three references with 1, 2 and 3 threads and expects identical bits. In double, any
// change in summation order shows up; in float it would mostly be rounded away.
template <class T>
void expect_thread_count_independent(const ConvShape& s) {
    const int saved = omp_get_max_threads();
    const Case c(s, 900);
    std::vector<std::vector<Vec>> runs;
    for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        runs.push_back(run_ref<T>(c));
    }
    omp_set_num_threads(saved);
    for (size_t t = 1; t < runs.size(); ++t)
        for (int i = 0; i < 4; ++i) {
            ASSERT_EQ(runs[0][i].size(), runs[t][i].size());
            EXPECT_EQ(0, std::memcmp(runs[0][i].data(), runs[t][i].data(), runs[0][i].size() * sizeof(double)))
                << describe(s) << (sizeof(T) == 4 ? " float" : " double") << " output " << i << " (y, dx, dw, db)"
                << " differs between 1 and " << t + 1 << " threads";
        }
}

TEST(KernelsConv, BitwiseIndependentOfThreadCount) {
    for (const ConvShape& s :
         {make_shape(2, 17, 70, 16, 24, 3, 1, 1, 1, true), make_shape(2, 15, 33, 32, 32, 3, 2, 1, 32, true)}) {
        expect_thread_count_independent<float>(s);
        expect_thread_count_independent<double>(s);
    }
}

TEST(KernelsConv, BackwardAccumulates) {
    const ConvShape s = make_shape(1, 6, 5, 8, 8, 3, 1, 1, 1, true);
    const Case c(s, 77);
    const auto x = cast<float>(c.x), w = cast<float>(c.w), dy = cast<float>(c.dy);
    std::vector<float> dx1(x.size(), 0.0f), dw1(w.size(), 0.0f), db1(s.cout, 0.0f);
    kern::conv_backward_data_ref(s, dy.data(), w.data(), dx1.data());
    kern::conv_backward_filter_ref(s, x.data(), dy.data(), dw1.data(), db1.data());
    auto dx2 = dx1, dw2 = dw1, db2 = db1;
    kern::conv_backward_data_ref(s, dy.data(), w.data(), dx2.data());
    kern::conv_backward_filter_ref(s, x.data(), dy.data(), dw2.data(), db2.data());
    auto twice = [](std::vector<float> v) {
        for (float& e : v) e *= 2;  // exact in binary floating point
        return sftest::to_double(v);
    };
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(dx2), twice(dx1), 0, 0, "dx"));
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(dw2), twice(dw1), 0, 0, "dw"));
    EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(db2), twice(db1), 0, 0, "db"));
}

void expect_invalid(const ConvShape& s, const std::string& needle) {
    try {
        s.validate();
        ADD_FAILURE() << describe(s) << ": accepted, expected an error mentioning '" << needle << "'";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
            << "message '" << e.what() << "' does not mention '" << needle << "'";
    }
}

TEST(KernelsConv, ValidateRejectsBadShapes) {
    EXPECT_NO_THROW(make_shape(1, 4, 4, 6, 9, 3, 2, 1, 3, false).validate());
    expect_invalid(make_shape(0, 4, 4, 4, 4, 3, 1, 1, 1, false), "n=0");
    expect_invalid(make_shape(1, 4, -1, 4, 4, 3, 1, 1, 1, false), "w=-1");
    expect_invalid(make_shape(1, 4, 4, 0, 4, 3, 1, 1, 1, false), "cin=0");
    expect_invalid(make_shape(1, 4, 4, 4, 4, 0, 1, 1, 1, false), "k=0");
    expect_invalid(make_shape(1, 4, 4, 4, 4, 3, 0, 1, 1, false), "stride=0");
    expect_invalid(make_shape(1, 4, 4, 4, 4, 3, 1, -1, 1, false), "pad=-1");
    expect_invalid(make_shape(1, 4, 4, 4, 4, 3, 1, 1, 0, false), "groups=0");
    expect_invalid(make_shape(1, 4, 4, 6, 8, 3, 1, 1, 4, false), "does not divide cin=6");
    expect_invalid(make_shape(1, 4, 4, 8, 6, 3, 1, 1, 4, false), "does not divide cout=6");
    expect_invalid(make_shape(1, 2, 8, 4, 4, 5, 1, 1, 1, false), "larger than padded input 4x10");
}

TEST(KernelsConv, RefsRejectBadShapesAndMissingBias) {
    const ConvShape bad = make_shape(1, 4, 4, 6, 8, 3, 1, 1, 4, false);
    std::vector<float> buf(1024, 0.0f);
    EXPECT_THROW(kern::conv_forward_ref(bad, buf.data(), buf.data(), static_cast<const float*>(nullptr), buf.data()),
                 rt::Error);
    EXPECT_THROW(kern::conv_backward_data_ref(bad, buf.data(), buf.data(), buf.data()), rt::Error);
    EXPECT_THROW(kern::conv_backward_filter_ref(bad, buf.data(), buf.data(), buf.data(), buf.data()), rt::Error);
    const ConvShape with_bias = make_shape(1, 4, 4, 4, 4, 3, 1, 1, 1, true);
    EXPECT_THROW(
        kern::conv_forward_ref(with_bias, buf.data(), buf.data(), static_cast<const float*>(nullptr), buf.data()),
        rt::Error);
}

TEST(KernelsConv, DispatchCpuRunsReferenceAndCudaFails) {
    const ConvShape s = make_shape(1, 5, 6, 8, 12, 3, 1, 1, 1, true);
    const Case c(s, 31);
    const auto x = cast<float>(c.x), w = cast<float>(c.w), b = cast<float>(c.b), dy = cast<float>(c.dy);
    std::vector<float> y1(s.out().numel()), y2(y1.size()), dx1(x.size()), dx2(x.size()), dw1(w.size()), dw2(w.size()),
        db1(s.cout), db2(s.cout);
    const rt::Exec cpu = rt::Exec::cpu();
    kern::conv_forward(cpu, s, x.data(), w.data(), b.data(), y1.data());
    kern::conv_backward_data(cpu, s, dy.data(), w.data(), dx1.data());
    kern::conv_backward_filter(cpu, s, x.data(), dy.data(), dw1.data(), db1.data());
    kern::conv_forward_ref(s, x.data(), w.data(), b.data(), y2.data());
    kern::conv_backward_data_ref(s, dy.data(), w.data(), dx2.data());
    kern::conv_backward_filter_ref(s, x.data(), dy.data(), dw2.data(), db2.data());
    EXPECT_EQ(y1, y2);
    EXPECT_EQ(dx1, dx2);
    EXPECT_EQ(dw1, dw2);
    EXPECT_EQ(db1, db2);

    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;
    EXPECT_THROW(kern::conv_forward(cuda, s, x.data(), w.data(), b.data(), y1.data()), rt::Error);
    EXPECT_THROW(kern::conv_backward_data(cuda, s, dy.data(), w.data(), dx1.data()), rt::Error);
    EXPECT_THROW(kern::conv_backward_filter(cuda, s, x.data(), dy.data(), dw1.data(), db1.data()), rt::Error);
}

}  // namespace
