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
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using sftest::bf16_exact;
using sftest::upload_bf16;
using sftest::download_bf16;
using sftest::upload;
using sftest::download;

constexpr double kMomentum = 0.1, kEps = 1e-5;
constexpr size_t kGuard = 64;  // bf16 elements after y and dx that must stay untouched
const float kSentinel = 1232.0f;  // exactly representable in bf16 (the guards are stored as bf16)

struct Inputs {
    size_t rows = 0;
    int c = 0;
    std::vector<float> x, dy;                                 // (rows, C), bf16-exact
    std::vector<float> gamma, beta, rm, rv, dgamma0, dbeta0;  // (C)
};

struct Outputs {
    std::vector<float> y, dx;  // (rows, C), from bf16
    std::vector<float> mean, invstd, rm, rv, dgamma, dbeta;
    bool guards_intact = true;
};

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// Channel j: offset[j] + scale[j] * uniform(-1, 1), rounded to bf16.
Inputs random_inputs(size_t rows, int c, uint64_t seed) {
    Inputs in;
    in.rows = rows;
    in.c = c;
    const size_t n = rows * c;
    const std::vector<double> u = sftest::random_uniform(n, seed, -1, 1);
    const std::vector<double> off = sftest::random_uniform(c, seed + 1, -3, 3);
    const std::vector<double> sc = sftest::random_uniform(c, seed + 2, 0.25, 2);
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = off[i % c] + sc[i % c] * u[i];
    in.x = bf16_exact(x);
    in.dy = bf16_exact(sftest::random_uniform(n, seed + 3, -1, 1));
    in.gamma = to_float(sftest::random_uniform(c, seed + 4, 0.5, 1.5));
    in.beta = to_float(sftest::random_uniform(c, seed + 5, -0.5, 0.5));
    in.rm = to_float(sftest::random_uniform(c, seed + 6, -0.5, 0.5));
    in.rv = to_float(sftest::random_uniform(c, seed + 7, 0.5, 2));
    in.dgamma0 = to_float(sftest::random_uniform(c, seed + 8, -0.1, 0.1));
    in.dbeta0 = to_float(sftest::random_uniform(c, seed + 9, -0.1, 0.1));
    return in;
}

// Train forward then backward on the GPU; y and dx start as sentinels (dx must be overwritten).
Outputs run_gpu(const rt::CudaContext& ctx, kern::Act act, const Inputs& in, int row_batch = 1) {
    const size_t n = in.rows * in.c, c = static_cast<size_t>(in.c);
    const size_t wsn = kern::bn_act_workspace_floats(in.rows, in.c);
    rt::Arena arena("bn_act_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(n * 2, 256, "x"), o_dy = arena.reserve(n * 2, 256, "dy");
    const size_t o_y = arena.reserve((n + kGuard) * 2, 256, "y"), o_dx = arena.reserve((n + kGuard) * 2, 256, "dx");
    size_t o_vec[8];
    for (size_t& o : o_vec) o = arena.reserve(c * 4, 256, "vector");
    const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* dy = arena.ptr<kern::bf16>(o_dy);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    kern::bf16* dx = arena.ptr<kern::bf16>(o_dx);
    float* v[8];
    for (int i = 0; i < 8; ++i) v[i] = arena.ptr<float>(o_vec[i]);
    float *gamma = v[0], *beta = v[1], *mean = v[2], *invstd = v[3], *rm = v[4], *rv = v[5], *dg = v[6], *db = v[7];
    upload_bf16(x, in.x);
    upload_bf16(dy, in.dy);
    upload_bf16(y, std::vector<float>(n + kGuard, kSentinel));
    upload_bf16(dx, std::vector<float>(n + kGuard, kSentinel));
    upload(gamma, in.gamma);
    upload(beta, in.beta);
    upload(rm, in.rm);
    upload(rv, in.rv);
    upload(dg, in.dgamma0);
    upload(db, in.dbeta0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight; ctx's stream is separate

    const rt::Exec& ex = ctx.exec();
    kern::bn_act_forward_train(ex, act, in.rows, in.c, x, gamma, beta, y, mean, invstd, rm, rv, kMomentum, kEps,
                               arena.ptr<float>(o_ws), wsn, nullptr, row_batch);
    kern::bn_act_backward(ex, act, in.rows, in.c, x, dy, gamma, beta, mean, invstd, dx, dg, db, arena.ptr<float>(o_ws),
                          wsn, row_batch);
    ctx.synchronize();

    Outputs out;
    std::vector<float> yg = download_bf16(y, n + kGuard), dxg = download_bf16(dx, n + kGuard);
    for (size_t i = n; i < n + kGuard; ++i) out.guards_intact &= yg[i] == kSentinel && dxg[i] == kSentinel;
    yg.resize(n);
    dxg.resize(n);
    out.y = yg;
    out.dx = dxg;
    out.mean = download(mean, c);
    out.invstd = download(invstd, c);
    out.rm = download(rm, c);
    out.rv = download(rv, c);
    out.dgamma = download(dg, c);
    out.dbeta = download(db, c);
    return out;
}

// The same computation with the fp32 CPU references.
Outputs run_ref(kern::Act act, const Inputs& in) {
    const size_t n = in.rows * in.c;
    Outputs r;
    std::vector<float> z(n);
    r.mean.resize(in.c);
    r.invstd.resize(in.c);
    r.rm = in.rm;
    r.rv = in.rv;
    kern::batchnorm_forward_train_ref<float>(in.rows, in.c, in.x.data(), in.gamma.data(), in.beta.data(), z.data(),
                                             r.mean.data(), r.invstd.data(), r.rm.data(), r.rv.data(), kMomentum, kEps);
    r.y.resize(n);
    kern::act_forward_ref<float>(act, n, z.data(), r.y.data());
    std::vector<float> g(n, 0.0f);
    kern::act_backward_ref<float>(act, n, z.data(), in.dy.data(), g.data());
    r.dx.assign(n, 0.0f);
    r.dgamma = in.dgamma0;
    r.dbeta = in.dbeta0;
    kern::batchnorm_backward_ref<float>(in.rows, in.c, in.x.data(), g.data(), in.gamma.data(), r.mean.data(),
                                        r.invstd.data(), r.dx.data(), r.dgamma.data(), r.dbeta.data());
    return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
    size_t rows;
    int c;
};

// Every output of a forward + backward (run_gpu) the same bits in a and b.
void expect_bitwise_equal(const Outputs& a, const Outputs& b, const std::string& what) {
    EXPECT_TRUE(bitwise_equal(a.y, b.y)) << what << " y";
    EXPECT_TRUE(bitwise_equal(a.mean, b.mean)) << what << " mean";
    EXPECT_TRUE(bitwise_equal(a.invstd, b.invstd)) << what << " invstd";
    EXPECT_TRUE(bitwise_equal(a.rm, b.rm)) << what << " running_mean";
    EXPECT_TRUE(bitwise_equal(a.rv, b.rv)) << what << " running_var";
    EXPECT_TRUE(bitwise_equal(a.dx, b.dx)) << what << " dx";
    EXPECT_TRUE(bitwise_equal(a.dgamma, b.dgamma)) << what << " dgamma";
    EXPECT_TRUE(bitwise_equal(a.dbeta, b.dbeta)) << what << " dbeta";
}

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

// One forward with a residual r: in place (y holds r first) or from a separate buffer; returns y.
// Train mode uses batch statistics, eval the running ones.
std::vector<float> run_forward_residual(const rt::CudaContext& ctx, kern::Act act, const Inputs& in,
                                        const std::vector<float>* r, bool in_place, bool train, bool* guards,
                                        int row_batch = 1) {
    const size_t n = in.rows * in.c, c = static_cast<size_t>(in.c);
    const size_t wsn = kern::bn_act_workspace_floats(in.rows, in.c);
    rt::Arena arena("bn_act_residual_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(n * 2, 256, "x"), o_r = arena.reserve(n * 2, 256, "r");
    const size_t o_y = arena.reserve((n + kGuard) * 2, 256, "y");
    size_t o_vec[6];
    for (size_t& o : o_vec) o = arena.reserve(c * 4, 256, "vector");
    const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* rb = arena.ptr<kern::bf16>(o_r);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    float* v[6];
    for (int i = 0; i < 6; ++i) v[i] = arena.ptr<float>(o_vec[i]);
    upload_bf16(x, in.x);
    std::vector<float> y0(n + kGuard, kSentinel);
    if (r && in_place) std::copy(r->begin(), r->end(), y0.begin());
    upload_bf16(y, y0);
    if (r && !in_place) upload_bf16(rb, *r);
    upload(v[0], in.gamma);
    upload(v[1], in.beta);
    upload(v[2], in.rm);
    upload(v[3], in.rv);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const kern::bf16* res = r ? (in_place ? y : rb) : nullptr;
    const rt::Exec& ex = ctx.exec();
    if (train)
        kern::bn_act_forward_train(ex, act, in.rows, in.c, x, v[0], v[1], y, v[4], v[5], v[2], v[3], kMomentum, kEps,
                                   arena.ptr<float>(o_ws), wsn, res, row_batch);
    else
        kern::bn_act_forward_eval(ex, act, in.rows, in.c, x, v[0], v[1], v[2], v[3], kEps, y, res, row_batch);
    ctx.synchronize();
    std::vector<float> got = download_bf16(y, n + kGuard);
    for (size_t i = n; i < n + kGuard; ++i) *guards &= got[i] == kSentinel;
    got.resize(n);
    return got;
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

// Rows per loop turn (kern::kBnActRowBatches): four rows' loads issued together, the rows then taken in
// the order of row_batch 1, so every output is the same bits: y, the statistics and running statistics,
// dx, dgamma, dbeta, the residual forms (in place and separate, train and eval) and bn_stats_train.
// 81,957 rows at C = 64 give the reductions' threads 5 rows per chunk (4 in a batched turn, then the
// tail) and the element-wise passes 4 or 5 rows per thread; the small shapes run the tails only.
// x and dy span 2^-8 .. 2^8 in magnitude, so that fp32 sums of a few rows round: a change in the order
// in which a thread adds its rows changes bits (with random_inputs' values those sums are often exact).
Inputs wide_inputs(size_t rows, int c, uint64_t seed) {
    Inputs in = random_inputs(rows, c, seed);
    const size_t n = rows * static_cast<size_t>(c);
    const std::vector<double> ex = sftest::random_uniform(2 * n, seed + 20, -8, 8);
    std::vector<double> x(n), dy(n);
    for (size_t i = 0; i < n; ++i) {
        x[i] = in.x[i] * std::exp2(std::floor(ex[i]));
        dy[i] = in.dy[i] * std::exp2(std::floor(ex[n + i]));
    }
    in.x = bf16_exact(x);
    in.dy = bf16_exact(dy);
    return in;
}

TEST(KernelsBnActGpu, RowBatchBitwiseEqualToOneRow) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Shape shapes[] = {{512 * 32 * 5 + 37, 64}, {1000, 40}, {37, 8}};
    for (const Shape& s : shapes) {
        const Inputs in = wide_inputs(s.rows, s.c, 1700 + s.c);
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu}) {
            for (int rb : kern::kBnActRowBatches) {
                if (rb == 1) continue;
                const std::string what = std::string(kern::act_name(act)) + " rows=" + std::to_string(s.rows) +
                                         " C=" + std::to_string(s.c) + " row_batch " + std::to_string(rb);
                const Outputs b = run_gpu(ctx, act, in, rb);
                EXPECT_TRUE(b.guards_intact) << what;
                expect_bitwise_equal(run_gpu(ctx, act, in), b, what);
                const std::vector<float> r = bf16_exact(sftest::random_uniform(s.rows * s.c, 1800 + s.c, -2, 2));
                for (bool train : {true, false})
                    for (bool in_place : {true, false}) {
                        bool ga = true, gb = true;
                        const std::vector<float> ya = run_forward_residual(ctx, act, in, &r, in_place, train, &ga);
                        const std::vector<float> yb = run_forward_residual(ctx, act, in, &r, in_place, train, &gb, rb);
                        EXPECT_TRUE(gb) << what;
                        EXPECT_TRUE(bitwise_equal(ya, yb))
                            << what << (train ? " train" : " eval") << (in_place ? " in place" : " separate");
                    }
            }
        }
        // The statistics alone (the fused LiteBlock's expand): the bits of the forward's.
        const size_t wsn = kern::bn_act_workspace_floats(s.rows, s.c), c = static_cast<size_t>(s.c);
        rt::Arena arena("bn_stats_row_batch_test", rt::MemKind::Device);
        const size_t o_x = arena.reserve(s.rows * c * 2, 256, "x"), o_st = arena.reserve(4 * c * 4, 256, "stats");
        const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
        arena.allocate();
        arena.seal();
        kern::bf16* x = arena.ptr<kern::bf16>(o_x);
        float* st = arena.ptr<float>(o_st);
        upload_bf16(x, in.x);
        std::vector<std::vector<float>> got;
        for (int rb : kern::kBnActRowBatches) {
            upload(st + 2 * c, in.rm);
            upload(st + 3 * c, in.rv);
            SF_CUDA_CHECK(cudaDeviceSynchronize());
            kern::bn_stats_train(ctx.exec(), s.rows, s.c, x, st, st + c, st + 2 * c, st + 3 * c, kMomentum, kEps,
                                 arena.ptr<float>(o_ws), wsn, rb);
            ctx.synchronize();
            got.push_back(download(st, 4 * c));
        }
        for (size_t i = 1; i < got.size(); ++i)
            EXPECT_TRUE(bitwise_equal(got[0], got[i])) << "bn_stats_train rows=" << s.rows << " C=" << s.c;
    }
}

// The finalize's fp64 sums of fp32 chunk partials are exact for ordinary data, so the test above
// cannot see the order in which a lane adds its chunks (a reversed batch passed it under the
// emulation). Here dy is +2^70 in chunks 128m + y and -2^70 in chunks 128m + 8 + y (y < 8; 4 rows per
// chunk) and small elsewhere: in the order of row_batch 1 each lane's pair cancels exactly before its
// small partials are added, so dbeta keeps them; any other order loses them to rounding.
TEST(KernelsBnActGpu, RowBatchFinalizeAddsChunksInOrder) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t rows = 512 * 4;
    const int c = 8;
    Inputs in = random_inputs(rows, c, 1900);
    const double big = std::exp2(70.0);
    for (size_t r = 0; r < rows; ++r) {
        const size_t j = (r / 4) % 128;
        for (int ch = 0; ch < c; ++ch)
            if (j < 16) in.dy[r * c + ch] = static_cast<float>(j < 8 ? big : -big);
    }
    const Outputs one = run_gpu(ctx, kern::Act::None, in, 1);
    for (int ch = 0; ch < c; ++ch)  // the small partials survived: the construction shows the order
        EXPECT_GT(std::fabs(one.dbeta[ch] - in.dbeta0[ch]), 1e-3f) << "channel " << ch;
    for (int rb : kern::kBnActRowBatches)
        if (rb != 1) expect_bitwise_equal(one, run_gpu(ctx, kern::Act::None, in, rb), "row_batch " + std::to_string(rb));
}

}  // namespace
