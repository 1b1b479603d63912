// The depthwise conv's BatchNorm prologue (kernels/dwconv_cuda.h, DwPrologue) and the statistics-only
// BatchNorm forward (kernels/bn_act_cuda.h, bn_stats_train): the fused LiteBlock's kernels.
//   - bn_stats_train writes the batch and running statistics bitwise equal to bn_act_forward_train's;
//   - forward and backward-filter reading the pre-BN tensor through the prologue equal, bit for bit,
//     the same kernels reading the activation bn_act_forward_train stored (train) or
//     bn_act_forward_eval stored (eval): SiLU, ReLU and none, stride 1 and 2, odd sizes, beta != 0 so
//     that act(bn(0)) != 0 and a prologue applied to the zero padding would show; the forward in every
//     variant that has a prologue (direct 8-channel ones, and the staged ones that apply it while
//     staging: partial blocks, 64-, 32-, 16- and 8-channel blocks) equal to it too;
//   - the same outputs against an independent fp64 host computation of bf16(act(bn(x))) followed by
//     the fp32 CPU convolution references;
//   - bad prologues and statistics inputs are refused with their documented errors.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using kern::Act;
using sftest::bf16_exact;
using sftest::bitwise;
using sftest::download;
using sftest::download_bf16;
using sftest::upload;
using sftest::upload_bf16;

constexpr double kMomentum = 0.1, kEps = 1e-5;

struct Case {
    int n, h, w, c, stride;
    Act act;
};

// Depthwise 3x3, pad 1, no bias.
kern::ConvShape shape_of(const Case& k) { return {k.n, k.h, k.w, k.c, k.c, 3, k.stride, 1, k.c, false}; }

std::string name_of(const Case& k) {
    return "n=" + std::to_string(k.n) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + "x" +
           std::to_string(k.c) + " stride " + std::to_string(k.stride) + " " + kern::act_name(k.act);
}

struct Inputs {
    std::vector<float> x, w, dy;            // x: the producer's pre-BN output (N,H,W,C), bf16-exact
    std::vector<float> gamma, beta, rm, rv;  // (C): rm, rv the running statistics before the step
};

Inputs make_inputs(const kern::ConvShape& s, uint64_t seed) {
    Inputs in;
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    const size_t c = static_cast<size_t>(s.cin);
    // Per-channel offsets and scales, so the statistics differ by channel and the mean is far from 0.
    const std::vector<double> u = sftest::random_uniform(nx, seed, -1, 1);
    const std::vector<double> off = sftest::random_uniform(c, seed + 1, -3, 3);
    const std::vector<double> sc = sftest::random_uniform(c, seed + 2, 0.2, 2);
    std::vector<double> x(nx);
    for (size_t i = 0; i < nx; ++i) x[i] = off[i % c] + sc[i % c] * u[i];
    in.x = bf16_exact(x);
    in.w = bf16_exact(sftest::random_uniform(nw, seed + 3, -0.5, 0.5));
    in.dy = bf16_exact(sftest::random_uniform(ny, seed + 4, -1, 1));
    auto floats = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    in.gamma = floats(sftest::random_uniform(c, seed + 5, 0.5, 1.5));
    in.beta = floats(sftest::random_uniform(c, seed + 6, -0.8, 0.8));  // act(beta) != 0: padding must stay 0
    in.rm = floats(sftest::random_uniform(c, seed + 7, -0.5, 0.5));
    in.rv = floats(sftest::random_uniform(c, seed + 8, 0.5, 2));
    return in;
}

// Everything both paths produced: A = stored activation (bn_act_forward_*, then the plain kernels),
// B = the prologue (bn_stats_train, then the kernels reading x through the prologue).
struct Results {
    std::vector<float> mean_a, invstd_a, rm_a, rv_a, mean_b, invstd_b, rm_b, rv_b;
    std::vector<float> y_a, y_b, dw_a, dw_b;  // train mode
    std::vector<float> ye_a, ye_b;            // eval mode (running statistics after the step)
    // The forward with the prologue in each other variant that has one (kern::dw_variant_prologue):
    // (variant, train y, eval y).
    struct Variant {
        int v;
        std::vector<float> y, ye;
    };
    std::vector<Variant> variants;
};

Results run_gpu(const rt::CudaContext& ctx, const Case& k, const Inputs& in) {
    const kern::ConvShape s = shape_of(k);
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    const size_t c = static_cast<size_t>(k.c), rows = s.in().pixels();
    const size_t wsn = std::max(kern::bn_act_workspace_floats(rows, k.c), kern::dwconv3x3_workspace_floats(s));
    rt::Arena arena("dwconv_prologue_test", rt::MemKind::Device);
    auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
    auto fl = [&](size_t n, const char* what) { return arena.reserve(n * 4, 256, what); };
    const size_t o_x = bf(nx, "x"), o_act = bf(nx, "act"), o_act_e = bf(nx, "act eval"), o_w = bf(nw, "w");
    const size_t o_dy = bf(ny, "dy"), o_ya = bf(ny, "ya"), o_yb = bf(ny, "yb"), o_yea = bf(ny, "yea"),
                 o_yeb = bf(ny, "yeb"), o_yv = bf(ny, "y variant");
    const size_t o_gamma = fl(c, "gamma"), o_beta = fl(c, "beta");
    size_t o_stat[8];
    for (size_t& o : o_stat) o = fl(c, "statistics");
    const size_t o_dwa = fl(nw, "dwa"), o_dwb = fl(nw, "dwb"), o_ws = fl(wsn, "workspace");
    arena.allocate();
    arena.seal();
    auto B = [&](size_t o) { return arena.ptr<kern::bf16>(o); };
    auto F = [&](size_t o) { return arena.ptr<float>(o); };
    upload_bf16(B(o_x), in.x);
    upload_bf16(B(o_w), in.w);
    upload_bf16(B(o_dy), in.dy);
    upload(F(o_gamma), in.gamma);
    upload(F(o_beta), in.beta);
    // o_stat: mean_a, invstd_a, rm_a, rv_a, mean_b, invstd_b, rm_b, rv_b
    upload(F(o_stat[2]), in.rm);
    upload(F(o_stat[3]), in.rv);
    upload(F(o_stat[6]), in.rm);
    upload(F(o_stat[7]), in.rv);
    upload(F(o_dwa), std::vector<float>(nw, 0.25f));
    upload(F(o_dwb), std::vector<float>(nw, 0.25f));
    SF_CUDA_CHECK(cudaDeviceSynchronize());

    const rt::Exec& ex = ctx.exec();
    float* ws = F(o_ws);
    // A: the stored activation.
    kern::bn_act_forward_train(ex, k.act, rows, k.c, B(o_x), F(o_gamma), F(o_beta), B(o_act), F(o_stat[0]),
                               F(o_stat[1]), F(o_stat[2]), F(o_stat[3]), kMomentum, kEps, ws, wsn);
    kern::dwconv3x3_forward_cuda(ex, s, B(o_act), B(o_w), B(o_ya));
    kern::dwconv3x3_backward_filter_cuda(ex, s, B(o_act), B(o_dy), F(o_dwa), ws, wsn);
    kern::bn_act_forward_eval(ex, k.act, rows, k.c, B(o_x), F(o_gamma), F(o_beta), F(o_stat[2]), F(o_stat[3]), kEps,
                              B(o_act_e));
    kern::dwconv3x3_forward_cuda(ex, s, B(o_act_e), B(o_w), B(o_yea));
    // B: the prologue.
    kern::bn_stats_train(ex, rows, k.c, B(o_x), F(o_stat[4]), F(o_stat[5]), F(o_stat[6]), F(o_stat[7]), kMomentum,
                         kEps, ws, wsn);
    kern::DwPrologue pro;
    pro.act = k.act;
    pro.gamma = F(o_gamma);
    pro.beta = F(o_beta);
    pro.mean = F(o_stat[4]);
    pro.invstd = F(o_stat[5]);
    kern::dwconv3x3_forward_cuda(ex, s, B(o_x), B(o_w), B(o_yb), &pro);
    kern::dwconv3x3_backward_filter_cuda(ex, s, B(o_x), B(o_dy), F(o_dwb), ws, wsn, &pro);
    kern::DwPrologue eval = pro;
    eval.mean = F(o_stat[6]);
    eval.invstd = F(o_stat[7]);
    eval.eval = true;
    eval.eps = kEps;
    kern::dwconv3x3_forward_cuda(ex, s, B(o_x), B(o_w), B(o_yeb), &eval);
    ctx.synchronize();

    Results r;
    const std::vector<float> poison(ny, std::numeric_limits<float>::quiet_NaN());  // a y element missed shows
    for (int v = 1; v < kern::kDwVariantCount; ++v) {
        if (!kern::dw_variant_prologue(v) || !kern::dwconv3x3_variant_supported(s, v, false)) continue;
        Results::Variant out{v, {}, {}};
        upload_bf16(B(o_yv), poison);
        kern::dwconv3x3_forward_cuda(ex, s, B(o_x), B(o_w), B(o_yv), &pro, v);
        ctx.synchronize();
        out.y = download_bf16(B(o_yv), ny);
        upload_bf16(B(o_yv), poison);
        kern::dwconv3x3_forward_cuda(ex, s, B(o_x), B(o_w), B(o_yv), &eval, v);
        ctx.synchronize();
        out.ye = download_bf16(B(o_yv), ny);
        r.variants.push_back(std::move(out));
    }
    std::vector<float>* stats[8] = {&r.mean_a, &r.invstd_a, &r.rm_a, &r.rv_a, &r.mean_b, &r.invstd_b, &r.rm_b, &r.rv_b};
    for (int i = 0; i < 8; ++i) *stats[i] = download(F(o_stat[i]), c);
    r.y_a = download_bf16(B(o_ya), ny);
    r.y_b = download_bf16(B(o_yb), ny);
    r.ye_a = download_bf16(B(o_yea), ny);
    r.ye_b = download_bf16(B(o_yeb), ny);
    r.dw_a = download(F(o_dwa), nw);
    r.dw_b = download(F(o_dwb), nw);
    return r;
}

double act_host(Act a, double z) {
    if (a == Act::Silu) return z / (1.0 + std::exp(-z));
    if (a == Act::Relu) return z > 0 ? z : 0.0;
    return z;
}

const Case kCases[] = {
    {2, 15, 33, 64, 1, Act::Silu}, {2, 9, 17, 32, 2, Act::Silu}, {1, 16, 32, 128, 1, Act::Relu},
    {2, 7, 9, 16, 1, Act::None},   {3, 5, 7, 24, 2, Act::Relu},  {2, 1, 1, 8, 1, Act::Silu},
    {2, 2, 3, 8, 2, Act::None},
};

TEST(KernelsDwconvPrologueGpu, EqualsTheStoredActivationBitForBit) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 4100;
    for (const Case& k : kCases) {
        const std::string what = name_of(k);
        const Results r = run_gpu(ctx, k, make_inputs(shape_of(k), seed += 20));
        EXPECT_TRUE(bitwise(r.mean_b, r.mean_a, what + " save_mean"));
        EXPECT_TRUE(bitwise(r.invstd_b, r.invstd_a, what + " save_invstd"));
        EXPECT_TRUE(bitwise(r.rm_b, r.rm_a, what + " running_mean"));
        EXPECT_TRUE(bitwise(r.rv_b, r.rv_a, what + " running_var"));
        EXPECT_TRUE(bitwise(r.y_b, r.y_a, what + " forward (train)"));
        EXPECT_TRUE(bitwise(r.dw_b, r.dw_a, what + " backward-filter"));
        EXPECT_TRUE(bitwise(r.ye_b, r.ye_a, what + " forward (eval)"));
        // Every prologue-capable forward variant (staged ones included) gives the same bits.
        int staged = 0;
        for (const Results::Variant& v : r.variants) {
            const std::string vn =
                what + " variant " + std::to_string(v.v) + " (" + kern::dwconv3x3_variant_name(v.v) + ")";
            EXPECT_TRUE(bitwise(v.y, r.y_a, vn + " forward (train)"));
            EXPECT_TRUE(bitwise(v.ye, r.ye_a, vn + " forward (eval)"));
            staged += kern::dw_variant_staged(v.v) ? 1 : 0;
        }
        EXPECT_EQ(staged, 3) << what << ": the staged variants with a prologue ran";
        EXPECT_GE(r.variants.size(), 5u) << what;
    }
}

// Independent of the GPU's BN kernels: bf16(act(bn(x))) in fp64 on the host from the statistics of x,
// then the fp32 CPU convolution references.
TEST(KernelsDwconvPrologueGpu, MatchesAHostReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 5100;
    for (const Case& k : kCases) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k);
        const Inputs in = make_inputs(s, seed += 20);
        const Results r = run_gpu(ctx, k, in);
        const size_t c = static_cast<size_t>(k.c), rows = s.in().pixels(), nx = s.in().numel();
        std::vector<double> sum(c, 0), sq(c, 0);
        for (size_t i = 0; i < nx; ++i) sum[i % c] += in.x[i];
        for (size_t i = 0; i < nx; ++i) {
            const double d = in.x[i] - sum[i % c] / static_cast<double>(rows);
            sq[i % c] += d * d;
        }
        std::vector<double> mean(c), invstd(c), rm(c), rv(c);
        for (size_t j = 0; j < c; ++j) {
            mean[j] = sum[j] / static_cast<double>(rows);
            const double var = sq[j] / static_cast<double>(rows);
            invstd[j] = 1.0 / std::sqrt(var + kEps);
            rm[j] = (1 - kMomentum) * in.rm[j] + kMomentum * mean[j];
            rv[j] = (1 - kMomentum) * in.rv[j] + kMomentum * var * rows / (rows - 1.0);
        }
        EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(r.mean_b), mean, 1e-5, what + " mean"));
        EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(r.invstd_b), invstd, 1e-5, what + " invstd"));
        EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(r.rv_b), rv, 1e-5, what + " running_var"));
        // act(bn(x)) with the batch (train) and the updated running (eval) statistics, rounded to bf16.
        std::vector<double> a(nx), ae(nx);
        for (size_t i = 0; i < nx; ++i) {
            const size_t j = i % c;
            a[i] = act_host(k.act, (in.x[i] - mean[j]) * invstd[j] * in.gamma[j] + in.beta[j]);
            ae[i] = act_host(k.act, (in.x[i] - rm[j]) / std::sqrt(rv[j] + kEps) * in.gamma[j] + in.beta[j]);
        }
        const std::vector<float> af = bf16_exact(a), aef = bf16_exact(ae);
        std::vector<float> y(s.out().numel()), ye(s.out().numel()), dw(s.weight_numel(), 0.25f);
        kern::conv_forward_ref<float>(s, af.data(), in.w.data(), nullptr, y.data());
        kern::conv_forward_ref<float>(s, aef.data(), in.w.data(), nullptr, ye.data());
        kern::conv_backward_filter_ref<float>(s, af.data(), in.dy.data(), dw.data(), nullptr);
        using sftest::close_rel_l2, sftest::to_double;
        EXPECT_TRUE(close_rel_l2(to_double(r.y_b), to_double(y), 1e-2, what + " forward (train)"));
        EXPECT_TRUE(close_rel_l2(to_double(r.ye_b), to_double(ye), 1e-2, what + " forward (eval)"));
        EXPECT_TRUE(close_rel_l2(to_double(r.dw_b), to_double(dw), 2e-3, what + " backward-filter"));
    }
}

TEST(KernelsDwconvPrologueGpu, BadInputsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const Case k{2, 8, 8, 16, 1, Act::Silu};
    const kern::ConvShape s = shape_of(k);
    const size_t nx = s.in().numel(), wsn = kern::dwconv3x3_workspace_floats(s);
    rt::Arena arena("dwconv_prologue_bad", rt::MemKind::Device);
    const size_t o_x = arena.reserve(nx * 2, 256, "x"), o_w = arena.reserve(s.weight_numel() * 2, 256, "w");
    const size_t o_y = arena.reserve(nx * 2, 256, "y"), o_v = arena.reserve(4 * 16 * 4, 256, "vectors");
    const size_t o_dw = arena.reserve(s.weight_numel() * 4, 256, "dw");
    const size_t o_ws = arena.reserve(std::max(wsn, kern::bn_act_workspace_floats(nx / 16, 16)) * 4, 256, "ws");
    arena.allocate();
    arena.seal();
    const kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    const kern::bf16* w = arena.ptr<kern::bf16>(o_w);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    float* v = arena.ptr<float>(o_v);
    float* dw = arena.ptr<float>(o_dw);
    float* ws = arena.ptr<float>(o_ws);
    kern::DwPrologue good;
    good.act = Act::Silu;
    good.gamma = v;
    good.beta = v + 16;
    good.mean = v + 32;
    good.invstd = v + 48;

    kern::DwPrologue p = good;
    p.gamma = nullptr;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, &p), "dwconv3x3_forward_cuda", "prologue gamma");
    p = good;
    p.invstd = reinterpret_cast<const float*>(y);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, &p), "must not alias the prologue invstd");
    p = good;
    p.mean = dw;
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(ex, s, x, x, dw, ws, wsn, &p),
                    "dwconv3x3_backward_filter_cuda", "prologue mean");
    p = good;
    p.eval = true;
    p.eps = 0;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, &p), "eval-mode prologue needs eps > 0");
    p = good;
    p.act = static_cast<Act>(7);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, &p), "prologue activation 7");
    // bn_stats_train: x missing, one row, a workspace too small.
    const size_t rows = s.in().pixels();
    SF_EXPECT_ERROR(kern::bn_stats_train(ex, rows, 16, nullptr, v, v + 16, v + 32, v + 48, 0.1, 1e-5, ws, wsn),
                    "bn_stats_train", "x must be non-null");
    SF_EXPECT_ERROR(kern::bn_stats_train(ex, 1, 16, x, v, v + 16, v + 32, v + 48, 0.1, 1e-5, ws, wsn),
                    "more than 1 value per channel");
    SF_EXPECT_ERROR(kern::bn_stats_train(ex, rows, 16, x, v, v + 16, v + 32, v + 48, 0.1, 1e-5, ws, 1),
                    "bn_stats_train", "workspace of 1 floats is too small");
    ctx.synchronize();
}

}  // namespace
