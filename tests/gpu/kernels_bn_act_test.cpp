// CUDA BatchNorm + activation (kernels/bn_act.cu) vs the fp32 CPU references on the same
// bf16-rounded inputs (batchnorm_forward_train_ref + act_forward_ref forward, act_backward_ref +
// batchnorm_backward_ref backward):
//   - act in {None, SiLU, ReLU} x shapes (model-like, odd group counts, fewer rows than chunks):
//     y, dx, dgamma, dbeta within relative L2 1e-2; mean, invstd, running stats within 1e-5;
//     dgamma/dbeta accumulate into their initial values; nothing written past y or dx.
//   - eval mode (running statistics) within 1e-2.
//   - small-integer inputs with 2^k rows: mean and invstd bit-exact, dbeta exact (= initial + sum dy).
//   - two identical runs give bitwise-identical outputs (deterministic reductions).
//   - a residual (train and eval): y = r + act(bn(x)) against the references within 1e-2; in place
//     (r = y) bitwise equal to a separate r; r = 0 equal to no residual; guards intact; a residual
//     aliasing x or overlapping y in part is refused.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/gpu/bn_act_rig.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using namespace bnact;

TEST(KernelsBnActGpu, MatchesReferences) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Shape shapes[] = {{2 * 16 * 32, 64}, {4 * 8 * 8, 512}, {1000, 40}, {3, 8}, {2 * 64 * 128, 32}};
    uint64_t seed = 100;
    for (const Shape& s : shapes) {
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu}) {
            const std::string what =
                std::string(kern::act_name(act)) + " rows=" + std::to_string(s.rows) + " C=" + std::to_string(s.c);
            const Inputs in = random_inputs(s.rows, s.c, seed += 10);
            const Outputs got = run_gpu(ctx, act, in);
            const Outputs ref = run_ref(act, in);
            using sftest::close_rel_l2, sftest::to_double;
            EXPECT_TRUE(got.guards_intact) << what << ": wrote past y or dx";
            EXPECT_TRUE(close_rel_l2(to_double(got.y), to_double(ref.y), 1e-2, what + " y"));
            EXPECT_TRUE(close_rel_l2(to_double(got.mean), to_double(ref.mean), 1e-5, what + " mean"));
            EXPECT_TRUE(close_rel_l2(to_double(got.invstd), to_double(ref.invstd), 1e-5, what + " invstd"));
            EXPECT_TRUE(close_rel_l2(to_double(got.rm), to_double(ref.rm), 1e-5, what + " running_mean"));
            EXPECT_TRUE(close_rel_l2(to_double(got.rv), to_double(ref.rv), 1e-5, what + " running_var"));
            EXPECT_TRUE(close_rel_l2(to_double(got.dx), to_double(ref.dx), 1e-2, what + " dx"));
            EXPECT_TRUE(close_rel_l2(to_double(got.dgamma), to_double(ref.dgamma), 1e-2, what + " dgamma"));
            EXPECT_TRUE(close_rel_l2(to_double(got.dbeta), to_double(ref.dbeta), 1e-2, what + " dbeta"));
        }
    }
}

TEST(KernelsBnActGpu, EvalMatchesReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (const Shape& s : {Shape{1000, 40}, Shape{1, 64}, Shape{4 * 8 * 8, 512}}) {
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu}) {
            const std::string what =
                std::string(kern::act_name(act)) + " eval rows=" + std::to_string(s.rows) + " C=" + std::to_string(s.c);
            const Inputs in = random_inputs(s.rows, s.c, 7000 + s.rows + static_cast<int>(act));
            const size_t n = s.rows * s.c, c = static_cast<size_t>(s.c);
            rt::Arena arena("bn_act_eval_test", rt::MemKind::Device);
            const size_t o_x = arena.reserve(n * 2, 256, "x"), o_y = arena.reserve(n * 2, 256, "y");
            size_t o_vec[4];
            for (size_t& o : o_vec) o = arena.reserve(c * 4, 256, "vector");
            arena.allocate();
            arena.seal();
            float* v[4];
            for (int i = 0; i < 4; ++i) v[i] = arena.ptr<float>(o_vec[i]);
            upload_bf16(arena.ptr<kern::bf16>(o_x), in.x);
            upload(v[0], in.gamma);
            upload(v[1], in.beta);
            upload(v[2], in.rm);
            upload(v[3], in.rv);
            SF_CUDA_CHECK(cudaDeviceSynchronize());
            kern::bn_act_forward_eval(ex, act, s.rows, s.c, arena.ptr<kern::bf16>(o_x), v[0], v[1], v[2], v[3], kEps,
                                      arena.ptr<kern::bf16>(o_y));
            ctx.synchronize();
            const std::vector<float> got = download_bf16(arena.ptr<kern::bf16>(o_y), n);
            std::vector<float> z(n), want(n);
            kern::batchnorm_forward_eval_ref<float>(s.rows, s.c, in.x.data(), in.gamma.data(), in.beta.data(),
                                                    in.rm.data(), in.rv.data(), kEps, z.data());
            kern::act_forward_ref<float>(act, n, z.data(), want.data());
            EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(got), sftest::to_double(want), 1e-2, what + " y"));
        }
    }
}

// Integers in [-4, 4] plus an integer channel offset, 4096 = 2^12 rows: every partial sum is an
// exact integer, so the mean (sum / 2^12) and the variance are exact on both sides, and so is
// invstd = 1 / sqrt(var + eps) (IEEE sqrt and division). dbeta = initial + sum dy exactly (act None).
TEST(KernelsBnActGpu, ExactOnSmallIntegers) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t rows = 4096;
    const int c = 64;
    Inputs in = random_inputs(rows, c, 4242);
    const std::vector<double> xi = sftest::random_ints(rows * c, 11, -4, 4);
    const std::vector<double> off = sftest::random_ints(c, 12, -8, 8);
    for (size_t i = 0; i < xi.size(); ++i) in.x[i] = static_cast<float>(xi[i] + off[i % c]);
    in.dy = to_float(sftest::random_ints(rows * c, 13, -3, 3));
    in.dbeta0 = to_float(sftest::random_ints(c, 14, -5, 5));
    const Outputs got = run_gpu(ctx, kern::Act::None, in);
    const Outputs ref = run_ref(kern::Act::None, in);
    std::vector<double> dbeta(in.dbeta0.begin(), in.dbeta0.end());
    for (size_t i = 0; i < in.dy.size(); ++i) dbeta[i % c] += in.dy[i];
    using sftest::close_elementwise, sftest::to_double;
    EXPECT_TRUE(close_elementwise(to_double(got.mean), to_double(ref.mean), 0, 0, "mean"));
    EXPECT_TRUE(close_elementwise(to_double(got.invstd), to_double(ref.invstd), 0, 0, "invstd"));
    EXPECT_TRUE(close_elementwise(to_double(got.dbeta), dbeta, 0, 0, "dbeta"));
    EXPECT_TRUE(close_elementwise(to_double(ref.dbeta), dbeta, 0, 0, "dbeta (reference)"));
}

TEST(KernelsBnActGpu, Deterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (kern::Act act : {kern::Act::Silu, kern::Act::Relu}) {
        for (const Shape& s : {Shape{2 * 64 * 128, 64}, Shape{128 * 8 * 16, 512}}) {
            const std::string what =
                std::string(kern::act_name(act)) + " rows=" + std::to_string(s.rows) + " C=" + std::to_string(s.c);
            const Inputs in = random_inputs(s.rows, s.c, 900 + s.c);
            expect_bitwise_equal(run_gpu(ctx, act, in), run_gpu(ctx, act, in), what);
        }
    }
}

TEST(KernelsBnActGpu, ResidualIsAddedInFp32BeforeTheOneRounding) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const bool train : {true, false}) {
        for (const Shape& s : {Shape{2 * 16 * 32, 64}, Shape{1000, 40}}) {
            for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu}) {
                const std::string what = std::string(kern::act_name(act)) + (train ? " train" : " eval") +
                                         " rows=" + std::to_string(s.rows) + " C=" + std::to_string(s.c);
                const Inputs in = random_inputs(s.rows, s.c, 5100 + s.c + static_cast<int>(act));
                const size_t n = s.rows * s.c;
                const std::vector<float> r = bf16_exact(sftest::random_uniform(n, 5200 + n, -2, 2));
                const std::vector<float> zero(n, 0.0f);
                bool guards = true;
                const std::vector<float> plain = run_forward_residual(ctx, act, in, nullptr, false, train, &guards);
                const std::vector<float> sep = run_forward_residual(ctx, act, in, &r, false, train, &guards);
                const std::vector<float> inplace = run_forward_residual(ctx, act, in, &r, true, train, &guards);
                const std::vector<float> with_zero = run_forward_residual(ctx, act, in, &zero, true, train, &guards);
                EXPECT_TRUE(guards) << what << ": wrote past y";
                EXPECT_TRUE(bitwise_equal(sep, inplace)) << what << ": in place differs from a separate residual";
                EXPECT_EQ(with_zero, plain) << what << ": a zero residual changed y";  // == : +0 and -0 agree
                // The reference: r + act(bn(x)) in fp32 (batch statistics in train, running ones in eval).
                std::vector<float> z(n), want(n);
                if (train) {
                    std::vector<float> mean(s.c), invstd(s.c), rm = in.rm, rv = in.rv;
                    kern::batchnorm_forward_train_ref<float>(s.rows, s.c, in.x.data(), in.gamma.data(), in.beta.data(),
                                                             z.data(), mean.data(), invstd.data(), rm.data(), rv.data(),
                                                             kMomentum, kEps);
                } else {
                    kern::batchnorm_forward_eval_ref<float>(s.rows, s.c, in.x.data(), in.gamma.data(), in.beta.data(),
                                                            in.rm.data(), in.rv.data(), kEps, z.data());
                }
                kern::act_forward_ref<float>(act, n, z.data(), want.data());
                for (size_t i = 0; i < n; ++i) want[i] += r[i];
                EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(sep), sftest::to_double(want), 1e-2, what + " y"));
                // One rounding: within half a bf16 ulp of the fp32 sum plus the fp32 BN's own error.
                size_t far = 0;
                for (size_t i = 0; i < n; ++i)
                    far += std::fabs(sep[i] - want[i]) > std::ldexp(std::fabs(want[i]), -8) + 1e-3f;
                EXPECT_EQ(far, 0u) << what << ": values further than one bf16 rounding from r + act(bn(x))";
            }
        }
    }
}

// bn_act_apply_train after bn_stats_train writes what bn_act_forward_train writes (y, the statistics), bit
// for bit, with and without a residual: the apply a producer's statistics epilogue pairs with
// (kernels/pwconv_cuda.h). A missing statistics vector is refused.
TEST(KernelsBnActGpu, ApplyTrainEqualsTheTrainForwardsApply) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (const Shape& s : {Shape{2 * 16 * 32, 64}, Shape{1000, 40}}) {
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu}) {
            for (const bool res : {false, true}) {
                const std::string what = std::string(kern::act_name(act)) + " rows=" + std::to_string(s.rows) +
                                         " C=" + std::to_string(s.c) + (res ? " residual" : "");
                const Inputs in = random_inputs(s.rows, s.c, 5300 + s.c + static_cast<int>(act));
                const size_t n = s.rows * s.c, c = static_cast<size_t>(s.c);
                const size_t wsn = kern::bn_act_workspace_floats(s.rows, s.c);
                sftest::DeviceBuffer x(n * 2), r(n * 2), y1(n * 2), y2(n * 2), v(10 * c * 4), ws(wsn * 4);
                upload_bf16(x.h(), in.x);
                upload_bf16(r.h(), bf16_exact(sftest::random_uniform(n, 5400 + n, -2, 2)));
                float* f = v.f();  // gamma, beta, then (mean, invstd, rm, rv) for A and for B
                upload(f, in.gamma);
                upload(f + c, in.beta);
                for (size_t k : {4, 8}) {
                    upload(f + k * c, in.rm);
                    upload(f + (k + 1) * c, in.rv);
                }
                const kern::bf16* rp = res ? r.h() : nullptr;
                kern::bn_act_forward_train(ex, act, s.rows, s.c, x.h(), f, f + c, y1.h(), f + 2 * c, f + 3 * c,
                                           f + 4 * c, f + 5 * c, kMomentum, kEps, ws.f(), wsn, rp);
                kern::bn_stats_train(ex, s.rows, s.c, x.h(), f + 6 * c, f + 7 * c, f + 8 * c, f + 9 * c, kMomentum,
                                     kEps, ws.f(), wsn);
                kern::bn_act_apply_train(ex, act, s.rows, s.c, x.h(), f, f + c, f + 6 * c, f + 7 * c, y2.h(), rp);
                ctx.synchronize();
                EXPECT_TRUE(bitwise_equal(download_bf16(y2.h(), n), download_bf16(y1.h(), n))) << what << ": y";
                for (size_t k = 0; k < 4; ++k)
                    EXPECT_TRUE(bitwise_equal(download(f + (6 + k) * c, c), download(f + (2 + k) * c, c)))
                        << what << ": statistic " << k;
            }
        }
    }
    sftest::DeviceBuffer x(64 * 8 * 2), y(64 * 8 * 2), v(4 * 8 * 4);
    SF_EXPECT_ERROR(kern::bn_act_apply_train(ex, kern::Act::Silu, 64, 8, x.h(), v.f(), v.f() + 8, v.f() + 16, nullptr,
                                             y.h()),
                    "bn_act_apply_train", "save_invstd");
}

TEST(KernelsBnActGpu, ResidualAliasingXOrPartOfYIsRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t rows = 64;
    const int c = 16;
    const size_t n = rows * c;
    rt::Arena arena("bn_act_residual_refusal", rt::MemKind::Device);
    const size_t o_x = arena.reserve(n * 2, 256, "x"), o_y = arena.reserve(2 * n * 2, 256, "y");
    const size_t o_v = arena.reserve(c * 4 * 4, 256, "vectors");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    float* v = arena.ptr<float>(o_v);
    const rt::Exec& ex = ctx.exec();
    auto eval = [&](const kern::bf16* res) {
        kern::bn_act_forward_eval(ex, kern::Act::None, rows, c, x, v, v + c, v + 2 * c, v + 3 * c, kEps, y, res);
    };
    auto expect_refused = [&](const kern::bf16* res, const char* needle) {
        try {
            eval(res);
            ADD_FAILURE() << "accepted a residual that should be refused: " << needle;
        } catch (const rt::Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_refused(x, "must not alias x");
    expect_refused(y + 8, "must be the output itself or not overlap it");
    expect_refused(y + 4, "16-byte aligned");
}

}  // namespace
