// The fused stride-1 depthwise backward (kern::ConvPolicy::dw_fused_bwd, what `bench step --dw-fused-bwd`
// runs) through the whole CUDA network and step: exactly the stride-1 depthwise convolutions run it
// (GpuOps::dw_fused_backward), and one micro-step's gradients equal the separate passes' bit for bit
// everywhere but in the fused layers' filter gradients (dx is the same bits, so every other gradient
// is), which agree to fp32 rounding of another summation order; the same loss; two fused networks
// give the same bits (the kernel's partition is fixed). With dw_fused_bn_bwd as well (`--dw-fused-bwd-bn`:
// each depthwise ConvBN's BN dx formed inside the fused kernel) every gradient is bitwise the fused
// one's. The fused LiteBlock (model.fuse_expand_dw: the expand's BN + SiLU applied inside the depthwise
// conv) runs its fused backward with that prologue, bitwise the fused backward of the stored path.
// The kernel itself: tests/gpu/kernels_dwconv_fused_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/train_step_cuda.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

// A depthwise 3x3 filter: torch shape (C, 1, 3, 3) with C > 1.
bool depthwise_weight(const model::ParamInfo& p) {
    return p.conv_weight && p.torch_shape.size() == 4 && p.torch_shape[0] > 1 && p.torch_shape[1] == 1 &&
           p.torch_shape[2] == 3 && p.torch_shape[3] == 3;
}

TEST(CudaStep, DwFusedBackwardMatchesSeparatePasses) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig sep(cpu, true, 1, order), fused(cpu, true, 1, order, false, 1, false, 1),
        again(cpu, true, 1, order, false, 1, false, 1), with_bn(cpu, true, 1, order, false, 1, false, 2);

    // Exactly the stride-1 depthwise shapes with a dgrad run fused (the deterministic policy runs every
    // depthwise shape on the custom kernels).
    int fused_shapes = 0;
    for (const model::ConvUse& u : fused.net.plan().convs()) {
        const bool want = u.dgrad && kern::dwconv3x3_fused_supported(u.shape);
        EXPECT_EQ(fused.net.gpu_ops()->dw_fused_backward(u.shape), want) << u.shape.describe();
        EXPECT_FALSE(sep.net.gpu_ops()->dw_fused_backward(u.shape)) << u.shape.describe();
        fused_shapes += want;
    }
    EXPECT_GT(fused_shapes, 0);

    EXPECT_FALSE(fused.net.gpu_ops()->dw_fused_bn());
    EXPECT_TRUE(with_bn.net.gpu_ops()->dw_fused_bn());
    // The dry run for that policy (what `bench step --dw-fused-bwd-bn` sizes a batch by) plans the same
    // gradient memory and lifetimes as the network binds.
    {
        kern::ConvPolicy pol;
        pol.dw_fused_bwd = pol.dw_fused_bn_bwd = true;
        const model::SiderNetCuda dry(with_bn.net.shape(), model::DryRun{&pol});
        const model::MemoryPlan d = dry.plan().memory(), r = with_bn.net.plan().memory();
        EXPECT_EQ(d.activations, r.activations);
        EXPECT_EQ(d.activation_grads, r.activation_grads);
        EXPECT_EQ(d.grad_tensors, r.grad_tensors);
        ASSERT_EQ(dry.plan().grad_slots().size(), with_bn.net.plan().grad_slots().size());
        for (size_t i = 0; i < dry.plan().grad_slots().size(); ++i) {
            const model::GradSlot &a = dry.plan().grad_slots()[i], &b = with_bn.net.plan().grad_slots()[i];
            EXPECT_TRUE(a.first == b.first && a.last == b.last && a.offset == b.offset) << a.what << " " << i;
        }
    }
    for (GpuRig* r : {&sep, &fused, &again, &with_bn}) {
        r->load(b.pixels[0], b.labels[0]);
        r->step.micro_step(0);
        r->ctx.synchronize();
    }
    const model::ParamTable& t = cpu.table();
    const std::vector<float> gs = sep.fetch(sep.net.plan().grad(), t.flat_size);
    const std::vector<float> gf = fused.fetch(fused.net.plan().grad(), t.flat_size);
    const std::vector<float> ga = again.fetch(again.net.plan().grad(), t.flat_size);
    const std::vector<float> gb = with_bn.fetch(with_bn.net.plan().grad(), t.flat_size);
    EXPECT_EQ(0, std::memcmp(gf.data(), ga.data(), t.flat_size * sizeof(float))) << "two fused networks differ";
    // The BN's dx formed inside the fused kernel: the values the dx pass stores, so every gradient is the
    // same bits (the depthwise filters' and the BN parameters' included).
    for (const model::ParamInfo& p : t.params)
        EXPECT_EQ(0, std::memcmp(gb.data() + p.offset, gf.data() + p.offset, p.numel * sizeof(float)))
            << p.name << ": with the BN's dx in the fused kernel";
    EXPECT_EQ(with_bn.step.read_stats().loss.total, fused.step.read_stats().loss.total);
    EXPECT_EQ(sep.step.read_stats().loss.total, fused.step.read_stats().loss.total);

    int depthwise = 0, differ = 0;
    for (const model::ParamInfo& p : t.params) {
        const float* a = gf.data() + p.offset;
        const float* s = gs.data() + p.offset;
        if (depthwise_weight(p)) {
            ++depthwise;
            differ += std::memcmp(a, s, p.numel * sizeof(float)) != 0;
            EXPECT_LE(rel_l2(a, s, p.numel), 1e-5) << p.name;
        } else {
            EXPECT_EQ(0, std::memcmp(a, s, p.numel * sizeof(float))) << p.name << " (not a depthwise filter)";
        }
    }
    EXPECT_GT(depthwise, 0);
    // The fused partition sums in another order: some filter gradient has other last bits (else the
    // fused kernel did not run, or summed exactly as the two-pass wgrad, which it does not).
    EXPECT_GT(differ, 0);
}

// The fused LiteBlock with the fused backward: every LiteBlock depthwise conv (planned with the expand's
// BN prologue) runs the fused kernel with the prologue, staging bf16(SiLU(BN(x))) from the expand's
// pre-BN output, the values the stored path's apply pass writes: one micro-step's gradients and loss
// bitwise those of the fused backward on the stored activation; with dw_fused_bn_bwd as well (its BN's dx
// formed in the same kernel), bitwise those of dw_fused_bn_bwd on the stored path.
TEST(CudaStep, FusedLiteBlockRunsTheFusedBackwardWithItsPrologue) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    // dw_fused 1: the fused backward; 2: with each depthwise ConvBN's BN dx inside it as well (both
    // prologues in the fused LiteBlock's kernel).
    for (int dw_fused : {1, 2}) {
        GpuRig stored(cpu, true, 1, order, false, 1, false, dw_fused),
            fused_block(cpu, true, 1, order, true, 1, false, dw_fused);
        int prologue_shapes = 0;
        for (const model::ConvUse& u : fused_block.net.plan().convs()) {
            if (!u.bn_prologue) continue;
            ++prologue_shapes;
            EXPECT_TRUE(fused_block.net.gpu_ops()->dw_fused_backward(u.shape)) << u.shape.describe();
        }
        EXPECT_GT(prologue_shapes, 0);
        EXPECT_EQ(fused_block.net.gpu_ops()->dw_fused_bn(), dw_fused == 2);
        for (GpuRig* r : {&stored, &fused_block}) {
            r->load(b.pixels[0], b.labels[0]);
            r->step.micro_step(0);
            r->ctx.synchronize();
        }
        const model::ParamTable& t = cpu.table();
        const std::vector<float> gs = stored.fetch(stored.net.plan().grad(), t.flat_size);
        const std::vector<float> gf = fused_block.fetch(fused_block.net.plan().grad(), t.flat_size);
        for (const model::ParamInfo& p : t.params)
            EXPECT_EQ(0, std::memcmp(gf.data() + p.offset, gs.data() + p.offset, p.numel * sizeof(float)))
                << p.name << " (dw_fused " << dw_fused << ")";
        EXPECT_EQ(fused_block.step.read_stats().loss.total, stored.step.read_stats().loss.total);
    }
}

// The expand BN's backward reductions in the fused LiteBlock's depthwise kernel (ConvPolicy::dw_fused_bn_grad,
// `bench step --dw-fused-bn-grad`), on both fused paths (3: the fused backward; 4: with the depthwise BN's
// dx inside it too), against the same network without it (1, 2): GpuOps reports it, the gradient plan is
// the same (the epilogue reports the passes it replaces), the loss is bitwise the same (the forward is),
// and the gradients differ (the expand BN sums in another order: not bitwise, which shows the epilogue ran)
// by little: each parameter's gradient within relative L2 0.15 (under the emulation at most 0.027, the
// first expand BN's weight, whose sum cancels most; a gradient the epilogue failed to add is 1), the whole
// flat gradient within 2e-2 (0.005 under the emulation). Its numerics: the kernel's test
// (tests/gpu/kernels_bn_grad_epilogue_test.cpp) and CudaStep.AllFusionsMicroStepMatchesTheCpuReference.
TEST(CudaStep, FusedLiteBlockGathersTheExpandBnGradientSums) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    for (int dw_fused : {3, 4}) {
        GpuRig base(cpu, true, 1, order, true, 1, false, dw_fused - 2), epi(cpu, true, 1, order, true, 1, false, dw_fused);
        EXPECT_TRUE(epi.net.gpu_ops()->dw_bn_grad());
        EXPECT_FALSE(base.net.gpu_ops()->dw_bn_grad());
        EXPECT_EQ(epi.net.gpu_ops()->dw_fused_bn(), dw_fused == 4);
        expect_changed_order_only(base, epi, b, "dw_fused " + std::to_string(dw_fused), 0.15, 2e-2);
    }
}

}  // namespace
