// The memory plan and convolution list of the networks, computed without a device (dry-run
// planner): what the CUDA network will allocate and which convolution plans it will build,
// and the implementation choice logic of model/gpu_ops.h.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/pwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/net.h"
#include "tests/support/compare.h"

namespace {

model::NetShape full(int batch) { return {batch, 2, 256, 512}; }

TEST(Plan, DryRunTableEqualsTheAllocatedNetworksTable) {
    const model::NetShape s{1, 2, 64, 128};
    model::SiderNet host(s, rt::MemKind::Host);
    model::SiderNetCuda dry(s, model::DryRun{});
    const model::ParamTable& a = host.table();
    const model::ParamTable& b = dry.table();
    ASSERT_EQ(a.params.size(), b.params.size());
    EXPECT_EQ(a.flat_size, b.flat_size);
    EXPECT_EQ(a.buffer_floats, b.buffer_floats);
    EXPECT_EQ(a.counters, b.counters);
    for (size_t i = 0; i < a.params.size(); ++i) {
        EXPECT_EQ(a.params[i].name, b.params[i].name);
        EXPECT_EQ(a.params[i].offset, b.params[i].offset) << a.params[i].name;
    }
    EXPECT_TRUE(dry.plan().dry_run());
    EXPECT_EQ(dry.plan().master(), nullptr);  // nothing allocated
}

TEST(Plan, ConvolutionListCoversEveryShapeOnce) {
    model::SiderNetCuda dry(full(128), model::DryRun{});
    const std::vector<model::ConvUse>& convs = dry.plan().convs();
    std::set<std::string> keys;
    int no_dgrad = 0, depthwise = 0;
    for (const model::ConvUse& u : convs) {
        const kern::ConvShape& c = u.shape;
        const std::string key = std::to_string(c.h) + "x" + std::to_string(c.w) + ":" + std::to_string(c.cin) + ">" +
                                std::to_string(c.cout) + "k" + std::to_string(c.k) + "s" + std::to_string(c.stride) +
                                "g" + std::to_string(c.groups) + (c.bias ? "b" : "");
        EXPECT_TRUE(keys.insert(key).second) << "duplicate conv " << key;
        EXPECT_EQ(c.n, 128);
        if (!u.dgrad) {
            ++no_dgrad;
            EXPECT_EQ(c.cin, 2) << "only the first conv (on the network input) skips its input gradient";
        }
        if (c.groups > 1) {
            ++depthwise;
            EXPECT_EQ(c.groups, c.cin);
            EXPECT_EQ(c.k, 3);
        }
        // The heads' last 1x1 convs run as custom kernels, never through the conv list.
        EXPECT_FALSE(c.k == 1 && c.cout < 8) << key;
    }
    EXPECT_EQ(no_dgrad, 1);
    EXPECT_GT(depthwise, 0);
    // The stem's first conv: 3x3 stride 2 on the full-size input; the heads' conv1: 3x3 128->64 with bias.
    EXPECT_TRUE(keys.count("256x512:2>32k3s2g1"));
    EXPECT_TRUE(keys.count("64x128:128>64k3s1g1b"));
}

TEST(Plan, Bf16ActivationsTakeLessThanHalfTheFloatPlan) {
    model::SiderNetT<float> f(full(8), model::DryRun{});
    model::SiderNetCuda h(full(8), model::DryRun{});
    const model::MemoryPlan mf = f.plan().memory(), mh = h.plan().memory();
    // bf16 halves every tensor and the fused BN+activation stores one tensor where the CPU
    // stores two; only the fp32 logits and statistics stay the same size.
    EXPECT_LT(mh.activations, mf.activations / 2);
    // Activation gradients share memory by lifetime (model/planner_grads.cpp): the region is the
    // peak set of gradients live at once, the same tensors on both backends, so bf16 takes at most
    // half (the CPU's extra BN-output gradients are never part of that peak).
    EXPECT_LE(mh.activation_grads, mf.activation_grads / 2);
    EXPECT_EQ(mh.params, mf.params);
    EXPECT_EQ(mf.workspace, 0u);  // the CPU reference needs no shared scratch
    EXPECT_GT(mh.workspace, 0u);  // BN statistics, fusion and head reductions
    // Activations grow linearly with the batch (batch-size search relies on it).
    model::SiderNetCuda h2(full(16), model::DryRun{});
    const double ratio = static_cast<double>(h2.plan().memory().activations) / mh.activations;
    EXPECT_NEAR(ratio, 2.0, 0.01);
    std::printf("[plan] batch 8 at 256x512: params %.1f MB, activations %.1f MB, grads %.1f MB, workspace %.1f MB\n",
                mh.params / 1e6, mh.activations / 1e6, mh.activation_grads / 1e6, mh.workspace / 1e6);
}

TEST(Plan, DryRunPlansAreNeverAllocated) {
    model::Planner p(rt::MemKind::Device, true);
    SF_EXPECT_ERROR(p.finish_sizing(), "dry-run");
}

TEST(Plan, ConvImplementationChoice) {
    kern::ConvShape dw{2, 16, 32, 64, 64, 3, 1, 1, 64, false};
    kern::ConvShape dense{2, 16, 32, 64, 64, 3, 1, 1, 1, false};
    EXPECT_EQ(model::conv_candidates(dense), std::vector<model::ConvImpl>{model::ConvImpl::Cudnn});
    const std::vector<model::ConvImpl> c = model::conv_candidates(dw);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(model::pick_conv_impl(c, {0.5, 0.3}), model::ConvImpl::CustomDepthwise);
    EXPECT_EQ(model::pick_conv_impl(c, {0.3, 0.5}), model::ConvImpl::Cudnn);
    EXPECT_EQ(model::pick_conv_impl(c, {0.3, 0.3}), model::ConvImpl::Cudnn);  // ties: the first
    EXPECT_EQ(model::pick_conv_impl(c, {-1, 0.9}), model::ConvImpl::CustomDepthwise);
    SF_EXPECT_ERROR(model::pick_conv_impl(c, {-1, -1}), "no convolution implementation ran");
    SF_EXPECT_ERROR(model::pick_conv_impl(c, {0.1}), "2 candidates, 1 timings");
    // The project's 1x1 conv: a candidate only with pw_custom, and only for a shape it runs.
    const kern::ConvShape pw{2, 16, 32, 64, 32, 1, 1, 0, 1, false}, pw_odd{2, 16, 32, 48, 32, 1, 1, 0, 1, false};
    EXPECT_EQ(model::conv_candidates(pw), std::vector<model::ConvImpl>{model::ConvImpl::Cudnn});
    EXPECT_EQ(model::conv_candidates(pw, true),
              (std::vector<model::ConvImpl>{model::ConvImpl::Cudnn, model::ConvImpl::CustomPointwise}));
    EXPECT_EQ(model::conv_candidates(pw_odd, true), std::vector<model::ConvImpl>{model::ConvImpl::Cudnn});
    EXPECT_EQ(model::conv_candidates(dw, true), c);
    EXPECT_EQ(model::custom_workspace_floats(model::ConvImpl::CustomPointwise, pw), kern::pwconv_wgrad_workspace_floats(pw));
    EXPECT_EQ(model::custom_workspace_floats(model::ConvImpl::Cudnn, pw), 0u);
    EXPECT_STREQ(model::conv_impl_name(model::ConvImpl::CustomPointwise), "custom-pointwise");
    // The dry-run workspace bound covers the 1x1 wgrad's partials when the policy asks for the kernel.
    kern::ConvPolicy pol;
    const model::ConvUse u{pw, true};
    const size_t without = model::conv_workspace_bound({u}, pol);
    pol.pw_custom = true;
    EXPECT_GE(model::conv_workspace_bound({u}, pol), kern::pwconv_wgrad_workspace_floats(pw) * sizeof(float));
    EXPECT_GE(model::conv_workspace_bound({u}, pol), without);
}

}  // namespace
