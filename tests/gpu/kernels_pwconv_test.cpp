// The tensor-core pointwise conv (kernels/pwconv_cuda.h):
//   - small-integer inputs give exact results (every partial sum is an integer bf16 and fp32 hold), so
//     the output equals an fp64 reference bit for bit: every product reached its (row, column), which
//     checks the mma/ldmatrix fragment layouts, the staging and the tile and chunk bookkeeping;
//   - random inputs against the fp64 reference within bf16 rounding plus fp32 accumulation;
//   - rows past the end are never written (a guard after y), for row counts that end mid-tile;
//   - the prologue equals, bit for bit, the plain kernel on the activation bn_act_forward_train /
//     bn_act_forward_eval stored (SiLU, ReLU, none; beta != 0);
//   - the statistics epilogue: y bitwise the plain kernel's; mean, invstd and the running statistics
//     against fp64 two-pass statistics of that y and against bn_stats_train on it, with a mean far
//     from zero (the shifted sums); two runs bitwise equal;
//   - bad shapes and arguments are refused with their documented errors;
// The dgrad: tests/gpu/kernels_pwconv_dgrad_test.cpp; the wgrad: tests/gpu/kernels_pwconv_wgrad_test.cpp; the cases and comparisons both use:
// tests/gpu/pwconv_test_util.h.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/bn_stats_ref.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"
#include "tests/gpu/pwconv_test_util.h"

namespace {

using namespace pwtest;

// y[r][o] = sum_i x[r][i] * w[o][i] in fp64.
std::vector<double> reference(const Case& k, const std::vector<float>& x, const std::vector<float>& w) {
    const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
    std::vector<double> y(rows * co);
    for (size_t r = 0; r < rows; ++r)
        for (size_t o = 0; o < co; ++o) {
            double s = 0;
            for (size_t i = 0; i < ci; ++i) s += static_cast<double>(x[r * ci + i]) * w[o * ci + i];
            y[r * co + o] = s;
        }
    return y;
}

// Device buffers for one case: x, w, y (with a guard of one row after it), an activation buffer, the
// BatchNorm vectors and a workspace for both the pwconv statistics and bn_act.
struct Rig {
    Case k;
    rt::Arena arena{"pwconv_test", rt::MemKind::Device};
    size_t o_x, o_act, o_w, o_y, o_y2, o_gamma, o_beta, o_ws, o_stat[8];
    size_t wsn;
    static constexpr float kSentinel = pwtest::kSentinel;

    explicit Rig(const Case& kc) : k(kc) {
        const kern::ConvShape s = shape_of(k);
        const size_t rows = rows_of(k);
        wsn = std::max(kern::pwconv_workspace_floats(s), kern::bn_act_workspace_floats(std::max<size_t>(rows, 2), k.cin));
        wsn = std::max(wsn, kern::bn_act_workspace_floats(std::max<size_t>(rows, 2), k.cout));
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        auto fl = [&](size_t n, const char* what) { return arena.reserve(n * 4, 256, what); };
        o_x = bf(rows * k.cin, "x");
        o_act = bf(rows * k.cin, "act");
        o_w = bf(static_cast<size_t>(k.cout) * k.cin, "w");
        o_y = bf((rows + 1) * k.cout, "y");
        o_y2 = bf((rows + 1) * k.cout, "y2");
        o_gamma = fl(k.cin, "gamma");
        o_beta = fl(k.cin, "beta");
        for (size_t& o : o_stat) o = fl(std::max(k.cin, k.cout), "statistics");
        o_ws = fl(wsn, "workspace");
        arena.allocate();
        arena.seal();
    }
    kern::bf16* B(size_t o) { return arena.ptr<kern::bf16>(o); }
    float* F(size_t o) { return arena.ptr<float>(o); }
    size_t ny() const { return rows_of(k) * k.cout; }
    void poison_y(size_t o) { upload_bf16(B(o), std::vector<float>(ny() + k.cout, kSentinel)); }
    // y, checking (EXPECT) that the guard row after it is intact.
    std::vector<float> y(size_t o, const std::string& what) {
        bool intact = true;
        std::vector<float> v = sftest::strip_guard(download_bf16(B(o), ny() + k.cout), ny(), kSentinel, intact);
        EXPECT_TRUE(intact) << what << ": the kernel wrote past the last row";
        return v;
    }
};

// The plain kernel on x, w (a fresh rig; the guard row checked); y.
std::vector<float> run_plain(const rt::CudaContext& ctx, const Case& k, const std::vector<float>& x,
                             const std::vector<float>& w, const std::string& what) {
    Rig rig(k);
    upload_bf16(rig.B(rig.o_x), x);
    upload_bf16(rig.B(rig.o_w), w);
    rig.poison_y(rig.o_y);
    kern::pwconv_forward_cuda(ctx.exec(), shape_of(k), rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y));
    ctx.synchronize();
    return rig.y(rig.o_y, what);
}


TEST(KernelsPwconvGpu, SmallIntegersAreExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9100;
    for (const Case& k : kCases) {
        const std::string what = name_of(k);
        // Every partial sum and output an integer within [-256, 256] (x in [-2, 2] for cin <= 128, in
        // [-1, 1] with at most 256 nonzero per row beyond): exact in fp32 whatever the order, and in bf16.
        const int xm = k.cin <= 128 ? 2 : 1;
        std::vector<float> x = bf16_exact(sftest::random_ints(rows_of(k) * k.cin, seed++, -xm, xm));
        std::vector<float> w = bf16_exact(sftest::random_ints(static_cast<size_t>(k.cout) * k.cin, seed++, -1, 1));
        if (k.cin > 128) {
            for (size_t r = 0; r < rows_of(k); ++r)
                for (int i = 256; i < k.cin; ++i) x[r * k.cin + i] = 0.0f;
        }
        const std::vector<float> y = run_plain(ctx, k, x, w, what);
        const std::vector<double> ref = reference(k, x, w);
        std::vector<float> reff(ref.begin(), ref.end());
        EXPECT_TRUE(bitwise(y, reff, what));
    }
}

TEST(KernelsPwconvGpu, MatchesTheFp64Reference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9200;
    for (const Case& k : kCases) {
        const std::string what = name_of(k);
        const std::vector<float> x = bf16_exact(sftest::random_uniform(rows_of(k) * k.cin, seed++, -1, 1));
        const std::vector<float> w = bf16_exact(sftest::random_uniform(static_cast<size_t>(k.cout) * k.cin, seed++, -1, 1));
        const std::vector<float> y = run_plain(ctx, k, x, w, what);
        const std::vector<double> ref = reference(k, x, w);
        // plus the fp32 accumulation of cin products of magnitude <= 1
        EXPECT_TRUE(within_rounding(y, ref, 1e-6 * k.cin, what));
    }
}

// A = bn_act_forward_* stored the activation and the plain kernel read it; B = the prologue.
TEST(KernelsPwconvGpu, PrologueEqualsTheStoredActivationBitForBit) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 9300;
    for (const Case& k : kCases) {
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin);
        if (rows < 2) continue;
        for (Act act : {Act::Silu, Act::Relu, Act::None}) {
            const std::string what = name_of(k) + " " + kern::act_name(act);
            // Per-channel offsets and scales: the statistics differ by channel, the mean is far from 0.
            const std::vector<double> u = sftest::random_uniform(rows * ci, seed++, -1, 1);
            const std::vector<double> off = sftest::random_uniform(ci, seed++, -3, 3);
            const std::vector<double> sc = sftest::random_uniform(ci, seed++, 0.2, 2);
            std::vector<double> xd(rows * ci);
            for (size_t i = 0; i < xd.size(); ++i) xd[i] = off[i % ci] + sc[i % ci] * u[i];
            Rig rig(k);
            upload_bf16(rig.B(rig.o_x), bf16_exact(xd));
            upload_bf16(rig.B(rig.o_w), bf16_exact(sftest::random_uniform(k.cout * ci, seed++, -0.5, 0.5)));
            upload(rig.F(rig.o_gamma), to_floats(sftest::random_uniform(ci, seed++, 0.5, 1.5)));
            upload(rig.F(rig.o_beta), to_floats(sftest::random_uniform(ci, seed++, -0.8, 0.8)));
            upload(rig.F(rig.o_stat[2]), to_floats(sftest::random_uniform(ci, seed++, -0.5, 0.5)));
            upload(rig.F(rig.o_stat[3]), to_floats(sftest::random_uniform(ci, seed++, 0.5, 2)));
            // Train: the batch statistics of x, the activation stored, then the plain kernel.
            kern::bn_act_forward_train(ex, act, rows, k.cin, rig.B(rig.o_x), rig.F(rig.o_gamma), rig.F(rig.o_beta),
                                       rig.B(rig.o_act), rig.F(rig.o_stat[0]), rig.F(rig.o_stat[1]),
                                       rig.F(rig.o_stat[2]), rig.F(rig.o_stat[3]), kMomentum, kEps, rig.F(rig.o_ws),
                                       rig.wsn);
            rig.poison_y(rig.o_y);
            rig.poison_y(rig.o_y2);
            kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_act), rig.B(rig.o_w), rig.B(rig.o_y));
            kern::DwPrologue pro;
            pro.act = act;
            pro.gamma = rig.F(rig.o_gamma);
            pro.beta = rig.F(rig.o_beta);
            pro.mean = rig.F(rig.o_stat[0]);
            pro.invstd = rig.F(rig.o_stat[1]);
            kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y2), &pro);
            ctx.synchronize();
            EXPECT_TRUE(bitwise(rig.y(rig.o_y2, what), rig.y(rig.o_y, what), what + " (train)"));
            // Eval: the running statistics the train pass just updated.
            kern::bn_act_forward_eval(ex, act, rows, k.cin, rig.B(rig.o_x), rig.F(rig.o_gamma), rig.F(rig.o_beta),
                                      rig.F(rig.o_stat[2]), rig.F(rig.o_stat[3]), kEps, rig.B(rig.o_act));
            rig.poison_y(rig.o_y);
            rig.poison_y(rig.o_y2);
            kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_act), rig.B(rig.o_w), rig.B(rig.o_y));
            pro.mean = rig.F(rig.o_stat[2]);
            pro.invstd = rig.F(rig.o_stat[3]);
            pro.eval = true;
            pro.eps = kEps;
            kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y2), &pro);
            ctx.synchronize();
            EXPECT_TRUE(bitwise(rig.y(rig.o_y2, what), rig.y(rig.o_y, what), what + " (eval)"));
        }
    }
}

// Shapes for the statistics: many tiles (one chunk each under the emulation), a partial last tile, and
// on a GPU one with more tiles than kern::kPwMaxChunks (chunks of unequal tile counts).
std::vector<Case> stats_cases() {
    std::vector<Case> c = {{2, 40, 48, 32, 64}, {1, 33, 37, 64, 32}, {2, 3, 5, 128, 96}, {1, 20, 30, 64, 128}};
#ifndef SF_EMU
    c.push_back({8, 128, 130, 32, 32});  // 133,120 rows: 1,040 tiles in 1,024 chunks
#endif
    return c;
}

TEST(KernelsPwconvGpu, StatisticsEpilogueMatchesTheReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 9400;
    for (const Case& k : stats_cases()) {
        const std::string what = name_of(k);
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
        // x = 2 + 0.25 u and weights of mean 0.1: y's mean (about 0.2 cin) is many of its std away from 0.
        std::vector<double> xd = sftest::random_uniform(rows * ci, seed++, -1, 1);
        for (double& v : xd) v = 2 + 0.25 * v;
        std::vector<double> wd = sftest::random_uniform(co * ci, seed++, -0.2, 0.4);
        Rig rig(k);
        upload_bf16(rig.B(rig.o_x), bf16_exact(xd));
        upload_bf16(rig.B(rig.o_w), bf16_exact(wd));
        const std::vector<float> rm0(co, 0.25f), rv0(co, 1.5f);
        // A: the plain kernel, then bn_stats_train on its y. B: the kernel with its statistics epilogue.
        rig.poison_y(rig.o_y);
        rig.poison_y(rig.o_y2);
        for (int i : {2, 3, 6, 7}) upload(rig.F(rig.o_stat[i]), i % 4 == 2 ? rm0 : rv0);
        kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y));
        kern::bn_stats_train(ex, rows, k.cout, rig.B(rig.o_y), rig.F(rig.o_stat[0]), rig.F(rig.o_stat[1]),
                             rig.F(rig.o_stat[2]), rig.F(rig.o_stat[3]), kMomentum, kEps, rig.F(rig.o_ws), rig.wsn);
        kern::BnStatsOut st;
        st.save_mean = rig.F(rig.o_stat[4]);
        st.save_invstd = rig.F(rig.o_stat[5]);
        st.running_mean = rig.F(rig.o_stat[6]);
        st.running_var = rig.F(rig.o_stat[7]);
        st.momentum = kMomentum;
        st.eps = kEps;
        kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y2), nullptr, &st,
                                  rig.F(rig.o_ws), rig.wsn);
        ctx.synchronize();
        const std::vector<float> y = rig.y(rig.o_y, what), y2 = rig.y(rig.o_y2, what);
        EXPECT_TRUE(bitwise(y2, y, what + " y with the statistics epilogue"));
        std::vector<std::vector<float>> got(8);
        for (int i = 0; i < 8; ++i) got[i] = download(rig.F(rig.o_stat[i]), co);
        const std::vector<std::vector<float>> epi(got.begin() + 4, got.end()), ref(got.begin(), got.begin() + 4);
        const double spread = sftest::expect_bn_stats_of(y, co, rows, epi, ref, rm0, rv0, kMomentum, kEps, what);
        EXPECT_GT(spread, 5.0) << what << ": the test wants means far from 0 in units of the std";
        // Deterministic: a second run gives the same bits (the running statistics restored first).
        upload(rig.F(rig.o_stat[6]), rm0);
        upload(rig.F(rig.o_stat[7]), rv0);
        kern::pwconv_forward_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y2), nullptr, &st,
                                  rig.F(rig.o_ws), rig.wsn);
        ctx.synchronize();
        for (int i = 4; i < 8; ++i)
            EXPECT_TRUE(bitwise(download(rig.F(rig.o_stat[i]), co), got[i], what + " second run, statistic " + std::to_string(i)));
    }
}

TEST(KernelsPwconvGpu, BadInputsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const Case k{1, 8, 8, 64, 64};
    const kern::ConvShape s = shape_of(k);
    Rig rig(k);
    const kern::bf16* x = rig.B(rig.o_x);
    const kern::bf16* w = rig.B(rig.o_w);
    kern::bf16* y = rig.B(rig.o_y);
    const char* op = "pwconv_forward_cuda";

    kern::ConvShape bad = s;
    bad.k = 3;
    bad.pad = 1;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, bad, x, w, y), "pwconv: unsupported shape", "k=3");
    bad = s;
    bad.cin = 48;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, bad, x, w, y), "cin=48", "multiple of 32");
    bad = s;
    bad.cout = 40;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, bad, x, w, y), "cout=40");
    bad = s;
    bad.stride = 2;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, bad, x, w, y), "stride=2");
    bad = s;
    bad.groups = 2;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, bad, x, w, y), "groups=2");
    bad = s;
    bad.bias = true;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, bad, x, w, y), "bias=true");
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, nullptr, w, y), op, "x must be a non-null");
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x + 1, w, y), "x must be a non-null, 16-byte aligned");
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, rig.B(rig.o_x)), "y must not alias x");
    const rt::Exec cpu = rt::Exec::cpu();
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(cpu, s, x, w, y), op, "called with a");

    kern::DwPrologue good;
    good.act = Act::Silu;
    good.gamma = rig.F(rig.o_gamma);
    good.beta = rig.F(rig.o_beta);
    good.mean = rig.F(rig.o_stat[0]);
    good.invstd = rig.F(rig.o_stat[1]);
    kern::DwPrologue p = good;
    p.beta = nullptr;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, &p), "prologue beta");
    p = good;
    p.mean = reinterpret_cast<const float*>(y);
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, &p), "must not alias the prologue mean");
    p = good;
    p.eval = true;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, &p), "eval-mode prologue needs eps > 0");
    p = good;
    p.act = static_cast<Act>(9);
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, &p), "prologue activation 9");
    kern::ConvShape wide = s;
    wide.n = 1;
    wide.h = 1;
    wide.w = 4;
    wide.cin = 1024;  // within x's allocation (4 rows of 1024 = 64 rows of 64)
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, wide, x, w, y, &good), "a prologue needs cin <= 512, got 1024");

    kern::BnStatsOut st;
    st.save_mean = rig.F(rig.o_stat[4]);
    st.save_invstd = rig.F(rig.o_stat[5]);
    st.running_mean = rig.F(rig.o_stat[6]);
    st.running_var = rig.F(rig.o_stat[7]);
    float* ws = rig.F(rig.o_ws);
    const size_t need = kern::pwconv_workspace_floats(s);
    const std::string need_text = "need " + std::to_string(need);
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &st, ws, need - 1), "workspace of",
                    need_text.c_str());
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &st, nullptr, need), "workspace must be a non-null");
    kern::BnStatsOut sb = st;
    sb.running_var = nullptr;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &sb, ws, need), "running_var must be a non-null");
    sb = st;
    sb.save_invstd = sb.save_mean;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &sb, ws, need), "save_invstd must not alias save_mean");
    sb = st;
    sb.save_mean = reinterpret_cast<float*>(y);
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &sb, ws, need), "save_mean must not alias y");
    sb = st;
    sb.eps = 0;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &sb, ws, need), "eps must be > 0");
    sb = st;
    sb.momentum = 1.5;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &sb, ws, need), "momentum 1.5");
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, s, x, w, y, nullptr, &st, reinterpret_cast<float*>(y), need),
                    "the workspace must not alias y");
    kern::ConvShape one = s;
    one.h = 1;
    one.w = 1;
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(ex, one, x, w, y, nullptr, &st, ws, need), "at least 2 values per channel, got 1");
}

}  // namespace
