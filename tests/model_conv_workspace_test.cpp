// The device-free bound of the convolution workspace (model::conv_workspace_bound, model/gpu_ops.h)
// that the dry-run memory estimate of `bench step` counts: per conv, cuDNN's workspace limit plus the
// largest scratch a variant of its ops may take, and the custom kernels' scratch; the max over the
// network. Checked against hand-computed values and as a bound of every layout a plan can choose.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/stemconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/net.h"
#include "tests/support/compare.h"

namespace {

using kern::ConvShape;

TEST(ConvWorkspaceBound, HandComputed) {
    kern::ConvPolicy pol;  // 256 MiB limit
    const size_t lim = pol.max_workspace;
    // (N=4, 32x64, 64 -> 128, 3x3): x 4*32*64*64 bf16 = 1 MiB; w 128*9*64 fp32 = 294912 B.
    const ConvShape s{4, 32, 64, 64, 128, 3, 1, 1, 1, false};
    EXPECT_EQ(lim + s.weight_numel() * 4, model::conv_workspace_bound({{s, false}}, pol)) << "wgrad fp32 scratch";
    EXPECT_EQ(lim + s.in().numel() * 2, model::conv_workspace_bound({{s, true}}, pol)) << "dgrad bf16 scratch";
    // The max over convs, not the sum (plans share one region).
    const ConvShape big{4, 64, 128, 64, 64, 3, 1, 1, 1, false};
    EXPECT_EQ(lim + big.in().numel() * 2, model::conv_workspace_bound({{s, true}, {big, true}}, pol));
    // The limit is rounded up to the workspace alignment.
    pol.max_workspace = 1000;
    EXPECT_EQ(kern::conv_align_up(1000, kern::kConvWorkspaceAlign) + s.weight_numel() * 4,
              model::conv_workspace_bound({{s, false}}, pol));
    pol.max_workspace = 0;
    SF_EXPECT_ERROR(model::conv_workspace_bound({{s, false}}, pol), "no cuDNN workspace limit");
}

TEST(ConvWorkspaceBound, BoundsEveryLayoutOfTheNetwork) {
    const kern::ConvPolicy pol = kern::run_conv_policy(false);
    const model::NetShape shape{8, 2, 256, 512};
    const model::SiderNetCuda dry(shape, model::DryRun{});
    const std::vector<model::ConvUse>& convs = dry.plan().convs();
    ASSERT_FALSE(convs.empty());
    const size_t bound = model::conv_workspace_bound(convs, pol);
    size_t worst = 0;
    for (const model::ConvUse& u : convs) {
        for (kern::ConvOp op : {kern::ConvOp::Fprop, kern::ConvOp::Dgrad, kern::ConvOp::Wgrad}) {
            if (op == kern::ConvOp::Dgrad && !u.dgrad) continue;
            for (kern::ConvAccum a : kern::conv_accum_variants(op))  // cuDNN's own part at its limit
                worst = std::max(
                    worst,
                    kern::conv_workspace_layout(pol.max_workspace, kern::conv_scratch_bytes(op, a, u.shape)).total);
        }
        if (kern::dwconv3x3_supported(u.shape))
            worst = std::max(worst, kern::dwconv3x3_workspace_floats(u.shape) * sizeof(float));
        if (kern::stemconv_supported(u.shape))
            worst = std::max(worst, kern::stemconv_workspace_floats(u.shape) * sizeof(float));
    }
    EXPECT_EQ(worst, bound);
    // Grows with the batch (the batch search assumes memory non-decreasing in N).
    const model::SiderNetCuda dry16({16, 2, 256, 512}, model::DryRun{});
    EXPECT_GE(model::conv_workspace_bound(dry16.plan().convs(), pol), bound);
    std::printf("[workspace] conv workspace bound at batch 8, 256x512: %.1f MiB; at 16: %.1f MiB\n", bound / 1048576.0,
                model::conv_workspace_bound(dry16.plan().convs(), pol) / 1048576.0);
}

}  // namespace
