// GpuOps's choice for a 1x1 shape with the project's kernel's epilogues (ConvPolicy::pw_stats, pw_bn_grad;
// model/gpu_ops.cpp, GpuOps::time_pointwise): autotuned, the kernel is timed with the epilogues the shape's
// layers run (ConvUse::stats_epilogue, bn_grad_epilogue) and cuDNN's time includes the BN passes they
// remove (the describe line says how much); without the flags, or without the policy, nothing is credited.
// Then the shape's epilogues run where the custom kernel won (dgrad_bn_grad_runs, conv_forward_stats_runs).
// The depthwise forward's statistics epilogue (ConvPolicy::dw_stats; GpuOps::time_depthwise,
// time_prologue_forward): only the staged forward variants timed, each with it, cuDNN credited with the
// statistics pass, and the forwards through GpuOps give the plain forward's y with the statistics of y.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/planner.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

// A 1x1 conv (n 2, 16x32, 64 -> 32) the step runs with a dgrad in overwrite mode.
model::ConvUse pointwise_use(bool epilogues) {
    model::ConvUse u;
    u.shape = kern::ConvShape{2, 16, 32, 64, 32, 1, 1, 0, 1, false};
    u.dgrad = true;
    u.dgrad_overwrite = true;
    u.stats_epilogue = u.bn_grad_epilogue = epilogues;
    u.bn_grad_act = epilogues ? kern::Act::Silu : kern::Act::None;
    return u;
}

// The timing policy of these tests: autotuned, one run per candidate, one cuDNN candidate.
kern::ConvPolicy autotuned() {
    kern::ConvPolicy p;
    p.autotune = true;
    p.autotune_iters = 1;
    p.max_candidates = 1;
    return p;
}

// GpuOps prepared for one shape under a policy, its workspace bound; `lines` is describe(), printed.
struct Prepared {
    model::GpuOps ops;
    std::unique_ptr<sftest::DeviceBuffer> ws;
    std::vector<std::string> lines;
    Prepared(const rt::Exec& ex, const kern::ConvPolicy& p, const model::ConvUse& u) : ops(ex, p) {
        ops.prepare({u});
        ws = std::make_unique<sftest::DeviceBuffer>(ops.workspace_bytes());
        ops.bind_workspace(ws->p, ops.workspace_bytes());
        lines = ops.describe();
        for (const std::string& l : lines) std::printf("  %s\n", l.c_str());
    }
};

// describe()'s line of the shape after an autotuned prepare with pw_custom (+ pw_stats and pw_bn_grad).
std::string autotuned_line(const rt::CudaContext& ctx, const model::ConvUse& u, bool epilogue_policy,
                           bool* bn_grad_runs, bool* stats_runs) {
    kern::ConvPolicy p = autotuned();
    p.pw_custom = true;
    p.pw_stats = p.pw_bn_grad = epilogue_policy;
    const Prepared pr(ctx.exec(), p, u);
    const model::GpuOps& ops = pr.ops;
    const std::vector<std::string>& lines = pr.lines;
    *bn_grad_runs = ops.dgrad_bn_grad_runs(u.shape);
    *stats_runs = ops.conv_forward_stats_runs(u.shape);
    const bool custom = ops.impl_of(u.shape) == model::ConvImpl::CustomPointwise;
    EXPECT_EQ(*bn_grad_runs, custom && epilogue_policy);
    EXPECT_EQ(*stats_runs, custom && epilogue_policy);
    return lines.empty() ? std::string() : lines[0];
}

TEST(ModelGpuOpsGpu, PointwiseEpiloguesTimedAndCredited) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const std::string credited = "BN passes the custom kernel's epilogues remove";
    bool bn_grad = false, stats = false;
    const std::string with = autotuned_line(ctx, pointwise_use(true), true, &bn_grad, &stats);
    EXPECT_NE(with.find(credited), std::string::npos) << with;
    const std::string no_flags = autotuned_line(ctx, pointwise_use(false), true, &bn_grad, &stats);
    EXPECT_EQ(no_flags.find(credited), std::string::npos) << no_flags;
    const std::string no_policy = autotuned_line(ctx, pointwise_use(true), false, &bn_grad, &stats);
    EXPECT_EQ(no_policy.find(credited), std::string::npos) << no_policy;
}

// ConvPolicy::pw_bn_bwd: a 1x1 shape marked ConvUse::bn_bwd_prologue has its dgrad (both modes) and wgrad timed
// with the BN-backward prologue and cuDNN credited with the dx pass; pw_fused_bn_runs where the kernel won.
TEST(ModelGpuOpsGpu, PointwiseBnBackwardPrologueTimedAndCredited) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const bool marked : {true, false}) {
        model::ConvUse u = pointwise_use(false);
        u.dgrad_accumulate = true;  // both dgrad modes
        u.bn_bwd_prologue = marked;
        u.bn_bwd_act = marked ? kern::Act::Silu : kern::Act::None;
        kern::ConvPolicy p = autotuned();
        p.pw_custom = p.pw_bn_bwd = true;
        const Prepared pr(ctx.exec(), p, u);
        const model::GpuOps& ops = pr.ops;
        const std::vector<std::string>& lines = pr.lines;
        ASSERT_FALSE(lines.empty());
        EXPECT_EQ(lines[0].find("BN passes the custom kernel's epilogues remove") != std::string::npos, marked)
            << lines[0];
        const bool custom = ops.impl_of(u.shape) == model::ConvImpl::CustomPointwise;
        EXPECT_EQ(ops.pw_fused_bn_runs(u.shape), marked && custom);
    }
}

// ConvPolicy::pw_fused_bwd: a 1x1 shape marked ConvUse::pw_fused_bwd has its backward timed as the fused pass (both
// dgrad modes; with the BN-backward prologue where the shape is marked for it too, and the producer's BN-backward
// epilogue in the overwrite mode where some layer gathers its producer's reductions), as the step runs it; not where
// the kernel refuses the combination (the epilogue with a ReLU BN-backward prologue), nor unmarked, nor without the
// policy. GpuOps::pw_fused_backward where the custom kernel won, with a producer's sums only under pw_bn_grad.
TEST(ModelGpuOpsGpu, PointwiseFusedBackwardTimedAsOnePass) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const std::string timed = "custom's backward timed as the fused dgrad + wgrad";
    // 0: marked; 1: marked, with the BN-backward prologue; 2: marked, a bn_grad epilogue too; 3: not marked;
    // 4: marked, the policy without pw_fused_bwd; 5: marked, the epilogue with a ReLU BN-backward prologue.
    kern::BnGradSums sums;  // the producer's reductions as GpuOps::pw_fused_backward is asked for them
    sums.act = kern::Act::Silu;
    for (int c = 0; c < 6; ++c) {
        model::ConvUse u = pointwise_use(false);
        u.dgrad_accumulate = true;  // both dgrad modes
        u.pw_fused_bwd = c != 3;
        u.bn_bwd_prologue = c == 1 || c == 5;
        u.bn_bwd_act = c == 1 ? kern::Act::Silu : c == 5 ? kern::Act::Relu : kern::Act::None;
        u.bn_grad_epilogue = c == 2 || c == 5;
        u.bn_grad_act = c == 2 || c == 5 ? kern::Act::Silu : kern::Act::None;
        kern::ConvPolicy p = autotuned();
        p.pw_custom = true;
        p.pw_fused_bwd = c != 4;
        p.pw_bn_bwd = c == 1 || c == 5;
        p.pw_bn_grad = c == 2 || c == 5;
        const Prepared pr(ctx.exec(), p, u);
        ASSERT_FALSE(pr.lines.empty());
        EXPECT_EQ(pr.lines[0].find(timed) != std::string::npos, c <= 2) << c << ": " << pr.lines[0];
        const bool custom = pr.ops.impl_of(u.shape) == model::ConvImpl::CustomPointwise;
        EXPECT_EQ(pr.ops.pw_fused_backward(u.shape, nullptr), custom && c != 4) << c;
        EXPECT_EQ(pr.ops.pw_fused_backward(u.shape, nullptr, &sums), custom && (c == 2 || c == 5)) << c;
    }
}

// A depthwise conv (n 2, 16x32, 64 channels, stride 1) with a dgrad in overwrite mode, marked for the
// statistics epilogue; prologue: planned with a SiLU BN prologue too (the fused LiteBlock's).
model::ConvUse depthwise_use(bool prologue) {
    model::ConvUse u;
    u.shape = kern::ConvShape{2, 16, 32, 64, 64, 3, 1, 1, 64, false};
    u.dgrad = true;
    u.dgrad_overwrite = true;
    u.stats_epilogue = true;
    u.bn_prologue = prologue;
    u.prologue_act = prologue ? kern::Act::Silu : kern::Act::None;
    return u;
}

TEST(ModelGpuOpsGpu, DepthwiseStatisticsEpilogueTimedCreditedAndRun) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (const bool dw_stats : {true, false}) {
        for (const bool prologue : {false, true}) {
            const std::string what =
                std::string(dw_stats ? "dw_stats" : "no dw_stats") + (prologue ? ", prologue" : "");
            const model::ConvUse u = depthwise_use(prologue);
            const kern::ConvShape& s = u.shape;
            kern::ConvPolicy p = autotuned();
            p.dw_stats = dw_stats;
            const Prepared pr(ex, p, u);
            const model::GpuOps& ops = pr.ops;
            const std::vector<std::string>& lines = pr.lines;
            ASSERT_GE(lines.size(), 2u) << what;
            const std::string& head = lines[0];
            const std::string& variants = lines[1];
            EXPECT_EQ(head.find("BN passes the custom kernel's epilogues remove") != std::string::npos, dw_stats)
                << what << ": " << head;
            EXPECT_EQ(variants.find("with the BN statistics epilogue") != std::string::npos, dw_stats)
                << what << ": " << variants;
            // With the epilogue the direct variants are not timed: the forward list starts "[- ".
            const size_t fwd = variants.find("of [");
            ASSERT_NE(fwd, std::string::npos) << variants;
            EXPECT_EQ(variants.compare(fwd, 6, "of [- ") == 0, dw_stats) << what << ": " << variants;
            const bool custom = ops.impl_of(s) == model::ConvImpl::CustomDepthwise;
            EXPECT_EQ(ops.conv_forward_stats_runs(s), dw_stats && custom) << what;

            // Run the forward through GpuOps with the epilogue: y is the plain forward's, the statistics y's.
            const size_t nx = s.in().numel(), ny = s.out().numel(), c = static_cast<size_t>(s.cout);
            const size_t rows = s.out().pixels();
            const size_t wsf =
                std::max(kern::dwconv3x3_stats_workspace_floats(s), kern::bn_act_workspace_floats(rows, s.cout));
            sftest::DeviceBuffer x(nx * 2), w(s.weight_numel() * 2), y(ny * 2), y2(ny * 2), vec(12 * c * 4),
                ws(wsf * 4);
            std::vector<float> xv(nx), wv(s.weight_numel());
            for (size_t i = 0; i < nx; ++i) xv[i] = 1.0f + static_cast<float>((i * 7919) % 64) / 64.0f;
            for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 104729) % 32) / 64.0f - 0.125f;
            sftest::upload_bf16(x.h(), xv);
            sftest::upload_bf16(w.h(), wv);
            std::vector<float> vecs(12 * c, 0.0f);
            for (size_t i = 0; i < c; ++i)
                vecs[i] = 1.0f, vecs[c + i] = 0.5f, vecs[2 * c + i] = 1.5f, vecs[3 * c + i] = 2.0f;
            sftest::upload(vec.f(), vecs);
            kern::DwPrologue pro;
            pro.act = kern::Act::Silu;
            pro.gamma = vec.f();
            pro.beta = vec.f() + c;
            pro.mean = vec.f() + 2 * c;
            pro.invstd = vec.f() + 3 * c;
            kern::BnStatsOut st;
            st.save_mean = vec.f() + 4 * c;
            st.save_invstd = vec.f() + 5 * c;
            st.running_mean = vec.f() + 6 * c;
            st.running_var = vec.f() + 7 * c;
            if (prologue)
                ops.conv_forward_prologue(ex, s, x.h(), w.h(), y.h(), pro);
            else
                ops.conv_forward(ex, s, x.h(), w.h(), y.h());
            kern::bn_stats_train(ex, rows, s.cout, y.h(), vec.f() + 8 * c, vec.f() + 9 * c, vec.f() + 10 * c,
                                 vec.f() + 11 * c, 0.1, 1e-5, ws.f(), wsf);
            if (!dw_stats || (!custom && !prologue)) {
                if (prologue)
                    SF_EXPECT_ERROR(ops.conv_forward_prologue(ex, s, x.h(), w.h(), y2.h(), pro, &st, ws.f(), wsf),
                                    "runs only with ConvPolicy::dw_stats");
                else
                    SF_EXPECT_ERROR(ops.conv_forward_stats(ex, s, x.h(), w.h(), y2.h(), st, ws.f(), wsf),
                                    "the statistics epilogue runs only");
                continue;
            }
            if (prologue)
                ops.conv_forward_prologue(ex, s, x.h(), w.h(), y2.h(), pro, &st, ws.f(), wsf);
            else
                ops.conv_forward_stats(ex, s, x.h(), w.h(), y2.h(), st, ws.f(), wsf);
            ctx.synchronize();
            EXPECT_TRUE(sftest::bitwise(sftest::download_bf16(y2.h(), ny), sftest::download_bf16(y.h(), ny),
                                        what + ": y with the epilogue"));
            const std::vector<float> got = sftest::download(vec.f(), 12 * c);
            for (size_t i = 0; i < c; ++i) {
                EXPECT_NEAR(got[4 * c + i], got[8 * c + i], 1e-5 * (std::fabs(got[8 * c + i]) + 1.0f / got[9 * c + i]))
                    << what << " mean " << i;
                EXPECT_NEAR(got[5 * c + i], got[9 * c + i], 2e-5 * got[9 * c + i]) << what << " invstd " << i;
            }
        }
    }
}

}  // namespace
