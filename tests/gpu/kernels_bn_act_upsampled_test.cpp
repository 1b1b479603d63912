// The BatchNorm + activation kernels with their input formed by upsampling on load (kern::BnUpsampled;
// NetShape::fuse_up_bn): against upsample_bilinear_forward_bf16_cuda's stored output fed to the same
// launchers, bit for bit: the train forward (y, batch and running statistics), with and without a residual
// (separate and in place), the eval forward, the backward (dx, dgamma, dbeta); factors 2, 4 and 8, C 8 to 64,
// odd low-resolution sizes (edge taps), N 1 and 3, every activation; the stored path's row batch 4 asked
// for too (the upsampled source runs one row per turn). Bad sources are refused with their documented
// errors.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using kern::Act;
using kern::bf16;
using sftest::bitwise;
using sftest::DeviceBuffer;
using sftest::download;
using sftest::download_bf16;
using sftest::upload;
using sftest::upload_bf16;

constexpr double kMomentum = 0.1, kEps = 1e-5;

struct Case {
    kern::Shape4 lo;
    int factor;
    Act act;
    int row_batch;
};

std::string name_of(const Case& k) {
    return "lo " + std::to_string(k.lo.n) + "x" + std::to_string(k.lo.h) + "x" + std::to_string(k.lo.w) + "x" +
           std::to_string(k.lo.c) + " x" + std::to_string(k.factor) + " " + kern::act_name(k.act) + " row_batch " +
           std::to_string(k.row_batch);
}

// Everything one path writes: forward train (plain, with a separate residual, in place), eval, backward.
struct Outputs {
    std::vector<float> y, y_res, y_inplace, mean, invstd, rm, rv, y_eval, dx, dgamma, dbeta;
};

struct Inputs {
    std::vector<float> lo, res, dy, gamma, beta, rm, rv, dgamma0, dbeta0;
};

Inputs make_inputs(const Case& k, size_t rows, uint64_t seed) {
    Inputs in;
    const size_t c = static_cast<size_t>(k.lo.c), nlo = k.lo.numel(), n = rows * c;
    const std::vector<double> u = sftest::random_uniform(nlo, seed, -1, 1);
    const std::vector<double> off = sftest::random_uniform(c, seed + 1, -2, 2);
    std::vector<double> lo(nlo);
    for (size_t i = 0; i < nlo; ++i) lo[i] = off[i % c] + 1.5 * u[i];
    in.lo = sftest::bf16_exact(lo);
    in.res = sftest::bf16_exact(sftest::random_uniform(n, seed + 2, -1, 1));
    in.dy = sftest::bf16_exact(sftest::random_uniform(n, seed + 3, -1, 1));
    using sftest::to_floats;
    in.gamma = to_floats(sftest::random_uniform(c, seed + 4, 0.5, 1.5));
    in.beta = to_floats(sftest::random_uniform(c, seed + 5, -0.5, 0.5));
    in.rm = to_floats(sftest::random_uniform(c, seed + 6, -0.5, 0.5));
    in.rv = to_floats(sftest::random_uniform(c, seed + 7, 0.5, 2));
    in.dgamma0 = to_floats(sftest::random_uniform(c, seed + 8, -1, 1));
    in.dbeta0 = to_floats(sftest::random_uniform(c, seed + 9, -1, 1));
    return in;
}

// One path: stored (upsample_bilinear_forward_bf16_cuda into a buffer, the launchers reading it) or
// upsampled (the launchers given BnUpsampled, x null).
Outputs run_path(const rt::CudaContext& ctx, const Case& k, const Inputs& in, bool upsampled) {
    const rt::Exec& ex = ctx.exec();
    const int c = k.lo.c;
    const size_t rows = static_cast<size_t>(k.lo.n) * (k.factor * k.lo.h) * (k.factor * k.lo.w);
    const size_t n = rows * c, cc = static_cast<size_t>(c), wsn = kern::bn_act_workspace_floats(rows, c);
    DeviceBuffer lo(k.lo.numel() * 2), x(n * 2), y(n * 2), res(n * 2), yin(n * 2), dy(n * 2), dx(n * 2),
        vec(9 * cc * 4), ws(wsn * 4);
    upload_bf16(lo.h(), in.lo);
    upload_bf16(res.h(), in.res);
    upload_bf16(yin.h(), in.res);  // the in-place sum starts as the residual
    upload_bf16(dy.h(), in.dy);
    float* v = vec.f();
    float *gamma = v, *beta = v + cc, *mean = v + 2 * cc, *invstd = v + 3 * cc, *rm = v + 4 * cc, *rv = v + 5 * cc,
          *dgamma = v + 6 * cc, *dbeta = v + 7 * cc, *rm2 = v + 8 * cc;
    upload(gamma, in.gamma);
    upload(beta, in.beta);
    upload(rm, in.rm);
    upload(rv, in.rv);
    upload(rm2, in.rm);
    upload(dgamma, in.dgamma0);
    upload(dbeta, in.dbeta0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const kern::BnUpsampled up{lo.h(), k.lo, k.factor};
    const kern::BnUpsampled* u = upsampled ? &up : nullptr;
    const bf16* src = nullptr;
    if (!upsampled) {
        kern::upsample_bilinear_forward_bf16_cuda(ex, k.lo, k.factor, lo.h(), x.h());
        src = x.h();
    }
    Outputs o;
    const auto sync = [&] { SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream)); };
    // Train forward three times from the same running statistics (rm2 is a scratch copy's place: the
    // residual forms must not advance rm, rv twice over the plain one's).
    kern::bn_act_forward_train(ex, k.act, rows, c, src, gamma, beta, y.h(), mean, invstd, rm, rv, kMomentum, kEps,
                               ws.f(), wsn, nullptr, k.row_batch, u);
    sync();
    o.y = download_bf16(y.h(), n);
    o.mean = download(mean, cc);
    o.invstd = download(invstd, cc);
    o.rm = download(rm, cc);
    o.rv = download(rv, cc);
    kern::bn_act_forward_train(ex, k.act, rows, c, src, gamma, beta, y.h(), mean, invstd, rm2, rv, kMomentum, kEps,
                               ws.f(), wsn, res.h(), k.row_batch, u);
    sync();
    o.y_res = download_bf16(y.h(), n);
    kern::bn_act_forward_train(ex, k.act, rows, c, src, gamma, beta, yin.h(), mean, invstd, rm2, rv, kMomentum, kEps,
                               ws.f(), wsn, yin.h(), k.row_batch, u);
    sync();
    o.y_inplace = download_bf16(yin.h(), n);
    kern::bn_act_forward_eval(ex, k.act, rows, c, src, gamma, beta, rm, rv, kEps, y.h(), nullptr, k.row_batch, u);
    sync();
    o.y_eval = download_bf16(y.h(), n);
    kern::bn_act_backward(ex, k.act, rows, c, src, dy.h(), gamma, beta, mean, invstd, dx.h(), dgamma, dbeta, ws.f(),
                          wsn, k.row_batch, u);
    sync();
    o.dx = download_bf16(dx.h(), n);
    o.dgamma = download(dgamma, cc);
    o.dbeta = download(dbeta, cc);
    return o;
}

TEST(KernelsBnActUpsampledGpu, BitwiseTheKernelsOnTheStoredUpsampling) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {
        {{1, 5, 7, 32}, 2, Act::None, 1}, {{3, 4, 6, 16}, 2, Act::Silu, 4},  {{1, 3, 5, 64}, 4, Act::Relu, 1},
        {{2, 2, 3, 8}, 8, Act::None, 4},  {{2, 8, 16, 32}, 2, Act::None, 1}, {{1, 1, 1, 8}, 4, Act::Silu, 1},
    };
    uint64_t seed = 500;
    for (const Case& k : cases) {
        SCOPED_TRACE(name_of(k));
        const size_t rows = static_cast<size_t>(k.lo.n) * (k.factor * k.lo.h) * (k.factor * k.lo.w);
        const Inputs in = make_inputs(k, rows, seed);
        seed += 20;
        const Outputs a = run_path(ctx, k, in, false), b = run_path(ctx, k, in, true);
        EXPECT_TRUE(bitwise(a.y, b.y, "y"));
        EXPECT_TRUE(bitwise(a.mean, b.mean, "save_mean"));
        EXPECT_TRUE(bitwise(a.invstd, b.invstd, "save_invstd"));
        EXPECT_TRUE(bitwise(a.rm, b.rm, "running_mean"));
        EXPECT_TRUE(bitwise(a.rv, b.rv, "running_var"));
        EXPECT_TRUE(bitwise(a.y_res, b.y_res, "y with a residual"));
        EXPECT_TRUE(bitwise(a.y_inplace, b.y_inplace, "y summed in place"));
        EXPECT_TRUE(bitwise(a.y_eval, b.y_eval, "eval y"));
        EXPECT_TRUE(bitwise(a.dx, b.dx, "dx"));
        EXPECT_TRUE(bitwise(a.dgamma, b.dgamma, "dgamma"));
        EXPECT_TRUE(bitwise(a.dbeta, b.dbeta, "dbeta"));
    }
}

TEST(KernelsBnActUpsampledGpu, BadSourcesAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const kern::Shape4 s{1, 4, 4, 16};
    const size_t rows = 8 * 8, n = rows * 16, wsn = kern::bn_act_workspace_floats(rows, 16);
    DeviceBuffer lo(s.numel() * 2 + 64), y(n * 2), x(n * 2), dy(n * 2), vec(8 * 16 * 4), ws(wsn * 4);
    float* v = vec.f();
    const kern::BnUpsampled up{lo.h(), s, 2};
    auto train = [&](const bf16* xs, size_t r, bf16* out, const bf16* res, const kern::BnUpsampled* u) {
        kern::bn_act_forward_train(ex, Act::None, r, 16, xs, v, v + 16, out, v + 32, v + 48, v + 64, v + 80, kMomentum,
                                   kEps, ws.f(), wsn, res, 1, u);
    };
    SF_EXPECT_ERROR(train(x.h(), rows, y.h(), nullptr, &up), "bn_act_forward_train", "x must be null");
    SF_EXPECT_ERROR(train(nullptr, rows - 8, y.h(), nullptr, &up), "bn_act_forward_train", "x2 upsampling", "gives 64");
    kern::BnUpsampled bad = up;
    bad.factor = 3;
    SF_EXPECT_ERROR(train(nullptr, rows, y.h(), nullptr, &bad), "factor 3");
    bad = up;
    bad.lo_shape.c = 8;
    SF_EXPECT_ERROR(train(nullptr, rows, y.h(), nullptr, &bad), "must have C=16");
    bad = up;
    bad.lo = lo.h() + 1;
    SF_EXPECT_ERROR(train(nullptr, rows, y.h(), nullptr, &bad), "16-byte aligned");
    // The output over the source; a residual over it; the backward's dy over it.
    const kern::BnUpsampled over{y.h(), s, 2};
    SF_EXPECT_ERROR(train(nullptr, rows, y.h(), nullptr, &over), "the output must not alias the upsampled source");
    const kern::BnUpsampled under{x.h(), s, 2};
    SF_EXPECT_ERROR(train(nullptr, rows, y.h(), x.h(), &under), "the residual must not alias the upsampled source");
    const kern::BnUpsampled on_dy{dy.h(), s, 2};
    SF_EXPECT_ERROR(kern::bn_act_backward(ex, Act::None, rows, 16, nullptr, dy.h(), v, v + 16, v + 32, v + 48, x.h(),
                                          v + 96, v + 112, ws.f(), wsn, 1, &on_dy),
                    "bn_act_backward", "dy must not alias the upsampled source");
    // Without a source, x stays required.
    SF_EXPECT_ERROR(train(nullptr, rows, y.h(), nullptr, nullptr), "bn_act_forward_train", "16-byte aligned");
}

}  // namespace
