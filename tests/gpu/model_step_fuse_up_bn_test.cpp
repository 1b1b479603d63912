// NetShape::fuse_up_bn (`bench step --fuse-up-bn`): each fusion up path in UpOrder::ConvFirst forms its
// bilinear upsample inside its BN passes' loads (kern::BnUpsampled) instead of storing the upsampled conv
// output. The BN kernels then compute what they compute on the stored tensor, bit for bit
// (tests/gpu/kernels_bn_act_upsampled_test.cpp), so the step is the unfused step's: three train steps of each
// (the unfused one eager, the fused one captured) give the same weights, moments, statistics, loss and eval
// logits; the plan stores exactly the 10 up paths' upsampled tensors less and the same gradients.
#include <gtest/gtest.h>

#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

TEST(CudaStep, FuseUpBnIsBitwiseEqualToUnfused) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(3);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig plain(cpu, true, 1, order, 0), fused(cpu, true, 1, order, kFuseUpBn);
    plain.step.set_use_graphs(false);  // eager against captured: the fusion must survive capture too
    for (int k = 0; k < 3; ++k)
        for (GpuRig* r : {&plain, &fused})
            r->train_step(b.pixels[static_cast<size_t>(k)], b.labels[static_cast<size_t>(k)]);
    expect_rigs_bitwise_equal(plain, fused);

    const model::Planner& pp = plain.net.plan();
    const model::Planner& pf = fused.net.plan();
    size_t up_bytes = 0;
    int up_paths = 0;
    for (const model::LayerUse& l : pf.layers()) {
        EXPECT_EQ(l.up_in_bn, l.upsample > 1) << l.name;
        if (!l.up_in_bn) continue;
        ++up_paths;
        const size_t hi = l.shape.out().numel() * static_cast<size_t>(l.upsample * l.upsample);
        up_bytes += (hi * sizeof(kern::bf16) + 255) / 256 * 256;
    }
    EXPECT_EQ(up_paths, 10);  // stage2: 1, stage3: 3, stage4: 6
    EXPECT_EQ(pp.memory().activations, pf.memory().activations + up_bytes);
    EXPECT_EQ(pp.memory().activation_grads, pf.memory().activation_grads);
}

}  // namespace
