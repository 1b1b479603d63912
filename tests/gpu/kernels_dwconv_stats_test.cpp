// The depthwise forward's BatchNorm statistics epilogue (kernels/dwconv_cuda.h, BnStatsOut; the staged
// variants):
//   - y is bitwise the y of the same variant without the epilogue (and so of variant 0), with and without
//     the producer's BN prologue;
//   - mean, invstd and the running statistics against fp64 two-pass statistics of that y and against
//     bn_stats_train on it, with per-channel means many standard deviations from 0 (the shifted sums),
//     for strides 1 and 2, partial spatial blocks, and 64-, 32-, 16- and 8-channel blocks; a second run
//     gives the same bits;
//   - bad arguments are refused with their documented errors (a direct variant, a short workspace,
//     outputs aliasing the inputs or each other, a single value per channel).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
#include "tests/support/bn_stats_ref.h"
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
    bool prologue;  // x is a producer's pre-BN output, read through its BN + SiLU
};

kern::ConvShape shape_of(const Case& k) { return {k.n, k.h, k.w, k.c, k.c, 3, k.stride, 1, k.c, false}; }

std::string name_of(const Case& k) {
    return "n=" + std::to_string(k.n) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + "x" +
           std::to_string(k.c) + " stride " + std::to_string(k.stride) + (k.prologue ? " with prologue" : "");
}

// Partial blocks in both directions (blocks are 8 x 32 outputs at stride 1, 4 x 16 at stride 2); channel
// blocks of 64 (c 128), 32 (c 96), 16 (c 48) and 8 (c 40).
std::vector<Case> cases() {
    std::vector<Case> c = {{2, 19, 45, 64, 1, false}, {2, 13, 37, 96, 2, false}, {1, 9, 33, 48, 1, true},
                           {2, 11, 21, 40, 2, true},  {3, 8, 32, 128, 1, false}, {1, 3, 5, 16, 1, false}};
#ifndef SF_EMU
    c.push_back({16, 64, 128, 64, 1, false});  // the network's 1/4 shape at batch 16: 512 chunks per channel
    c.push_back({16, 64, 128, 64, 2, true});
#endif
    return c;
}

struct Rig {
    rt::Arena arena{"dwconv_stats_test", rt::MemKind::Device};
    size_t o_x, o_w, o_y, o_y2, o_pro[4], o_stat[8], o_ws;
    size_t wsn;
    explicit Rig(const kern::ConvShape& s) {
        const size_t nx = s.in().numel(), ny = s.out().numel(), c = static_cast<size_t>(s.cin);
        wsn = std::max({kern::dwconv3x3_stats_workspace_floats(s), kern::bn_act_workspace_floats(s.out().pixels(), s.cin),
                        kern::bn_act_workspace_floats(s.in().pixels(), s.cin)});
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        auto fl = [&](size_t n, const char* what) { return arena.reserve(n * 4, 256, what); };
        o_x = bf(nx, "x");
        o_w = bf(s.weight_numel(), "w");
        o_y = bf(ny, "y");
        o_y2 = bf(ny, "y2");
        for (size_t& o : o_pro) o = fl(c, "prologue");
        for (size_t& o : o_stat) o = fl(c, "statistics");
        o_ws = fl(wsn, "workspace");
        arena.allocate();
        arena.seal();
    }
    kern::bf16* B(size_t o) { return arena.ptr<kern::bf16>(o); }
    float* F(size_t o) { return arena.ptr<float>(o); }
    kern::BnStatsOut stats(int first) {
        kern::BnStatsOut st;
        st.save_mean = F(o_stat[first]);
        st.save_invstd = F(o_stat[first + 1]);
        st.running_mean = F(o_stat[first + 2]);
        st.running_var = F(o_stat[first + 3]);
        st.momentum = kMomentum;
        st.eps = kEps;
        return st;
    }
    kern::DwPrologue prologue() {
        kern::DwPrologue p;
        p.act = Act::Silu;
        p.gamma = F(o_pro[0]);
        p.beta = F(o_pro[1]);
        p.mean = F(o_pro[2]);
        p.invstd = F(o_pro[3]);
        return p;
    }
};

TEST(KernelsDwconvStatsGpu, EpilogueMatchesTheStatisticsOfY) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 7100;
    int checked = 0;
    for (const Case& k : cases()) {
        const kern::ConvShape s = shape_of(k);
        const size_t nx = s.in().numel(), ny = s.out().numel(), c = static_cast<size_t>(k.c);
        const size_t count = s.out().pixels();
        Rig rig(s);
        // x = 1.5 + 0.25 u and weights of mean 0.1: every output channel's mean is many stds from 0.
        std::vector<double> xd = sftest::random_uniform(nx, seed++, -1, 1);
        for (double& v : xd) v = 1.5 + 0.25 * v;
        upload_bf16(rig.B(rig.o_x), bf16_exact(xd));
        upload_bf16(rig.B(rig.o_w), bf16_exact(sftest::random_uniform(s.weight_numel(), seed++, -0.1, 0.3)));
        // The prologue: gamma 1, beta 2, mean 1.5, invstd 4: SiLU of values in [1, 3].
        const float pv[4] = {1.0f, 2.0f, 1.5f, 4.0f};
        for (int i = 0; i < 4; ++i) upload(rig.F(rig.o_pro[i]), std::vector<float>(c, pv[i]));
        const kern::DwPrologue pro = rig.prologue();
        const kern::DwPrologue* pp = k.prologue ? &pro : nullptr;
        const std::vector<float> rm0(c, 0.25f), rv0(c, 1.5f);
        const std::vector<float> poison(ny, std::numeric_limits<float>::quiet_NaN());
        // The reference y: variant 0 (direct), then bn_stats_train on it.
        upload_bf16(rig.B(rig.o_y), poison);
        kern::dwconv3x3_forward_cuda(ex, s, rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y), pp, 0);
        upload(rig.F(rig.o_stat[2]), rm0);
        upload(rig.F(rig.o_stat[3]), rv0);
        kern::bn_stats_train(ex, count, k.c, rig.B(rig.o_y), rig.F(rig.o_stat[0]), rig.F(rig.o_stat[1]),
                             rig.F(rig.o_stat[2]), rig.F(rig.o_stat[3]), kMomentum, kEps, rig.F(rig.o_ws), rig.wsn);
        ctx.synchronize();
        const std::vector<float> y = download_bf16(rig.B(rig.o_y), ny);
        std::vector<std::vector<float>> ref(4);
        for (int i = 0; i < 4; ++i) ref[i] = download(rig.F(rig.o_stat[i]), c);
        for (int v = 0; v < kern::kDwVariantCount; ++v) {
            if (!kern::dw_variant_staged(v) || !kern::dwconv3x3_variant_supported(s, v, false)) continue;
            const std::string what = name_of(k) + " variant " + std::to_string(v);
            kern::BnStatsOut st = rig.stats(4);
            upload_bf16(rig.B(rig.o_y2), poison);
            upload(rig.F(rig.o_stat[6]), rm0);
            upload(rig.F(rig.o_stat[7]), rv0);
            kern::dwconv3x3_forward_cuda(ex, s, rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y2), pp, v, &st,
                                         rig.F(rig.o_ws), kern::dwconv3x3_stats_workspace_floats(s, v));
            ctx.synchronize();
            EXPECT_TRUE(bitwise(download_bf16(rig.B(rig.o_y2), ny), y, what + " y with the statistics epilogue"));
            std::vector<std::vector<float>> got(4);
            for (int i = 0; i < 4; ++i) got[i] = download(rig.F(rig.o_stat[4 + i]), c);
            const double spread = sftest::expect_bn_stats_of(y, c, count, got, ref, rm0, rv0, kMomentum, kEps, what);
            EXPECT_GT(spread, 3.0) << what << ": the test wants means far from 0 in units of the std";
            // Deterministic: a second run gives the same bits (the running statistics restored first).
            upload(rig.F(rig.o_stat[6]), rm0);
            upload(rig.F(rig.o_stat[7]), rv0);
            kern::dwconv3x3_forward_cuda(ex, s, rig.B(rig.o_x), rig.B(rig.o_w), rig.B(rig.o_y2), pp, v, &st,
                                         rig.F(rig.o_ws), rig.wsn);
            ctx.synchronize();
            for (int i = 0; i < 4; ++i)
                EXPECT_TRUE(bitwise(download(rig.F(rig.o_stat[4 + i]), c), got[i],
                                    what + " second run, statistic " + std::to_string(i)));
            ++checked;
        }
    }
    EXPECT_GE(checked, 12) << "every case runs at least two staged variants";
}

TEST(KernelsDwconvStatsGpu, BadInputsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const Case k{1, 8, 32, 64, 1, false};
    const kern::ConvShape s = shape_of(k);
    Rig rig(s);
    kern::bf16 *x = rig.B(rig.o_x), *w = rig.B(rig.o_w), *y = rig.B(rig.o_y);
    float* ws = rig.F(rig.o_ws);
    const int v = 6;
    ASSERT_TRUE(kern::dw_variant_staged(v));
    const size_t need = kern::dwconv3x3_stats_workspace_floats(s, v);
    EXPECT_EQ(need, 3u * 1 * 1 * 1 * 64) << "one 8 x 32 spatial block of 64 channels";
    const kern::BnStatsOut st = rig.stats(0);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, 0, &st, ws, need),
                    "variant 0", "has no statistics epilogue");
    SF_EXPECT_ERROR((void)kern::dwconv3x3_stats_workspace_floats(s, 0), "has no statistics epilogue");
    const std::string need_text = "need " + std::to_string(need);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &st, ws, need - 1), "workspace of",
                    need_text.c_str());
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &st, nullptr, need),
                    "workspace must be a non-null");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &st, reinterpret_cast<float*>(x), need),
                    "the workspace must not alias x");
    kern::BnStatsOut sb = st;
    sb.running_mean = nullptr;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &sb, ws, need),
                    "running_mean must be a non-null");
    sb = st;
    sb.save_mean = reinterpret_cast<float*>(y);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &sb, ws, need), "save_mean must not alias y");
    sb = st;
    sb.running_var = sb.save_invstd;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &sb, ws, need),
                    "running_var must not alias save_invstd");
    sb = st;
    sb.save_invstd = ws + 1;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &sb, ws, need),
                    "save_invstd must not alias the workspace");
    const kern::DwPrologue pro = rig.prologue();
    sb = st;
    sb.save_mean = const_cast<float*>(pro.mean);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, &pro, v, &sb, ws, need),
                    "save_mean must not alias the prologue mean");
    sb = st;
    sb.eps = 0;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &sb, ws, need), "eps must be > 0");
    sb = st;
    sb.momentum = -0.5;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, v, &sb, ws, need), "momentum -0.5");
    const kern::ConvShape one{1, 1, 1, 64, 64, 3, 1, 1, 64, false};
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(ex, one, x, w, y, nullptr, v, &st, ws, need),
                    "at least 2 values per channel, got 1");
}

}  // namespace
