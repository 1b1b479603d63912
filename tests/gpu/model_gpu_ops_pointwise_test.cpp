// GpuOps's choice for a 1x1 shape with the project's kernel's epilogues (ConvPolicy::pw_stats, pw_bn_grad;
// model/gpu_ops.cpp, GpuOps::time_pointwise): autotuned, the kernel is timed with the epilogues the shape's
// layers run (ConvUse::stats_epilogue, bn_grad_epilogue) and cuDNN's time includes the BN passes they
// remove (the describe line says how much); without the flags, or without the policy, nothing is credited.
// Then the shape's epilogues run where the custom kernel won (dgrad_bn_grad_runs, conv_forward_stats_runs).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/conv_cudnn.h"
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

// describe()'s line of the shape after an autotuned prepare with pw_custom (+ pw_stats and pw_bn_grad).
std::string autotuned_line(const rt::CudaContext& ctx, const model::ConvUse& u, bool epilogue_policy,
                           bool* bn_grad_runs, bool* stats_runs) {
    kern::ConvPolicy p;
    p.autotune = true;
    p.autotune_iters = 1;
    p.max_candidates = 1;
    p.pw_custom = true;
    p.pw_stats = p.pw_bn_grad = epilogue_policy;
    model::GpuOps ops(ctx.exec(), p);
    ops.prepare({u});
    sftest::DeviceBuffer ws(ops.workspace_bytes());
    ops.bind_workspace(ws.p, ops.workspace_bytes());
    const std::vector<std::string> lines = ops.describe();
    for (const std::string& l : lines) std::printf("  %s\n", l.c_str());
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

}  // namespace
