// NetShape::fuse_dw_pw in the whole CUDA network and step (`bench step --fuse-dw-pw`, model.fuse_dw_pw):
// every depthwise ConvBN leaves its BN + SiLU to the 1x1 conv after it (a LiteBlock's project, a DSConv's
// pointwise conv), which applies it as it loads the depthwise conv's output, in the forward and again in
// its backward-filter (kernels/pwconv_cuda.h); the depthwise activation is never stored.
// The prologue forms bf16(silu(bn(x))) with kernels/bn_act_device.cuh, the value the apply pass stores,
// and the project's 1x1 kernels multiply it exactly as they multiply the stored tensor, so with the
// deterministic policy and the project's 1x1 kernels running every supported 1x1 shape in both networks
// (ConvPolicy::pw_custom), the fused step is bitwise the unfused one. With cuDNN running the other 1x1
// passes (no pw_custom) the fused network is judged against the CPU reference instead
// (CudaStep.AllFusionsMicroStepMatchesTheCpuReference, model_step_fusions_reference_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/pwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/train_step_cuda.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

// Three steps with and without the fusion, then the eval forward (the prologue with the running
// statistics): weights, moments, running statistics, counters, loss, gradient norm and logits bitwise
// equal; the fused plan stores exactly the depthwise outputs less. Both networks run the project's 1x1
// kernels with their statistics epilogue (pw_custom, pw_stats: the fused 1x1 ConvBN's conv then runs
// prologue and epilogue in one kernel) and the fused LiteBlock (its depthwise conv applies the expand's BN
// on load and leaves its own to the project conv): every fusion of a LiteBlock at once. The prologue
// forward without the epilogue runs in the eval forward here and in the next test's train forward (each
// network of this test takes about 3 minutes under the CPU emulation, so the combinations are not all run).
TEST(CudaStep, FuseDwPwIsBitwiseEqualToUnfused) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(3);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    const int pw = 2, fuse_other = kFuseExpandDw;  // pw_stats; the fused LiteBlock
    GpuRig plain(cpu, true, 1, order, fuse_other, 1, false, 0, pw),
        fused(cpu, true, 1, order, fuse_other | kFuseDwPw, 1, false, 0, pw);
    plain.step.set_use_graphs(false);  // eager against captured: the fusion must survive capture too
    for (int k = 0; k < 3; ++k)
        for (GpuRig* r : {&plain, &fused})
            r->train_step(b.pixels[static_cast<size_t>(k)], b.labels[static_cast<size_t>(k)]);
    expect_rigs_bitwise_equal(plain, fused);

    const model::Planner& pp = plain.net.plan();
    const model::Planner& pf = fused.net.plan();
    const std::vector<model::LayerUse>& layers = pf.layers();
    size_t dw_bytes = 0;
    int producers = 0, consumers = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        const model::LayerUse& l = layers[i];
        if (l.bn_applied_by_consumer && l.shape.groups > 1) {  // (with fuse_expand_dw the expands are producers too)
            ++producers;
            dw_bytes += (l.shape.out().numel() * sizeof(kern::bf16) + 255) / 256 * 256;
        }
        if (l.input_bn_prologue && l.shape.k == 1) {
            ++consumers;
            EXPECT_TRUE(layers[i - 1].bn_applied_by_consumer && layers[i - 1].shape.groups > 1) << l.name;
            // The prologue's forward and wgrad run the project's kernel whatever GpuOps chose for the shape.
            EXPECT_EQ(fused.net.gpu_ops()->impl_of(l.shape), model::ConvImpl::CustomPointwise) << l.name;
        }
    }
    EXPECT_EQ(producers, 2 + 2 * 2 + 3 * 3 + 4 * 2 + 18);  // every LiteBlock's and DSConv's depthwise ConvBN
    EXPECT_EQ(consumers, producers);
    EXPECT_EQ(pp.memory().activations, pf.memory().activations + dw_bytes);
    EXPECT_EQ(pp.memory().activation_grads, pf.memory().activation_grads);
}

// Without pw_custom the fused 1x1 convs' backward-data is cuDNN's (the shape's impl), their forward and
// wgrad the project's kernel with the prologue. The dry run of that network plans the same activations
// and reserves the wgrad partials in the layers' workspace; the CPU reference with the same NetShape
// stores every activation (it never fuses). One step runs, and GpuOps describes the fused shapes.
TEST(CudaStep, FuseDwPwRunsWithCudnnDgradAndPlansItsWorkspace) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    GpuRig fused(cpu, true, 1, model::UpOrder::ConvFirst, kFuseDwPw);
    size_t most = 0;
    int consumers = 0;
    for (const model::LayerUse& l : fused.net.plan().layers()) {
        if (!l.input_bn_prologue) continue;
        ++consumers;
        EXPECT_NE(fused.net.gpu_ops()->impl_of(l.shape), model::ConvImpl::CustomPointwise) << l.name;
        most = std::max(most, kern::pwconv_wgrad_workspace_floats(l.shape));
    }
    EXPECT_GT(consumers, 0);
    EXPECT_GE(fused.net.plan().workspace_floats(), most);
    const model::SiderNetCuda dry(fused.net.shape(), model::DryRun{});
    EXPECT_EQ(dry.plan().memory().activations, fused.net.plan().memory().activations);
    EXPECT_GE(dry.plan().workspace_floats(), most);  // the network's adds cuDNN's workspace to the layers'
    model::NetShape s = net_shape();
    s.fuse_dw_pw = true;
    const model::SiderNet cpu_dry(s, model::DryRun{});
    const model::SiderNet cpu_plain(net_shape(), model::DryRun{});
    EXPECT_EQ(cpu_dry.plan().memory().activations, cpu_plain.plan().memory().activations);

    fused.load(b.pixels[0], b.labels[0]);
    fused.step.micro_step(0);
    fused.step.optimizer_step();
    fused.ctx.synchronize();
    const model::CudaStepStats st = fused.step.read_stats();
    EXPECT_TRUE(std::isfinite(st.loss.total));
    EXPECT_EQ(st.steps_applied, 1);
    bool described = false;
    for (const std::string& line : fused.net.gpu_ops()->describe())
        described = described || line.find("prologue: forward and wgrad custom-pointwise") != std::string::npos;
    EXPECT_TRUE(described);
}

}  // namespace
