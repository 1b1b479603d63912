// The project's tensor-core 1x1 conv in the whole CUDA network and step (kern::ConvPolicy::pw_custom, what
// `bench step --pw-custom` runs): under the deterministic policy (no timing: a custom candidate runs)
// exactly the 1x1 shapes kern::pwconv_supported accepts run it (GpuOps::impl_of), the others are
// unchanged; one micro-step's loss and gradients agree with cuDNN's convolutions to the rounding of another
// summation order; two such networks give the same bits (the kernels' partitions are fixed). The kernels
// themselves: tests/gpu/kernels_pwconv_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "kernels/pwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/train_step_cuda.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

TEST(CudaStep, PwCustomRunsThePointwiseConvsOnTheProjectKernels) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig base(cpu, true, 1, order), pw(cpu, true, 1, order, false, 1, false, 0, 1),
        again(cpu, true, 1, order, false, 1, false, 0, 1);

    int custom = 0;
    for (const model::ConvUse& u : pw.net.plan().convs()) {
        const bool want = kern::pwconv_supported(u.shape);
        EXPECT_EQ(pw.net.gpu_ops()->impl_of(u.shape) == model::ConvImpl::CustomPointwise, want) << u.shape.describe();
        EXPECT_NE(base.net.gpu_ops()->impl_of(u.shape), model::ConvImpl::CustomPointwise) << u.shape.describe();
        if (!want) {
            EXPECT_EQ(pw.net.gpu_ops()->impl_of(u.shape), base.net.gpu_ops()->impl_of(u.shape));
        }
        custom += want;
    }
    EXPECT_GT(custom, 0);
    std::printf("1x1 shapes on the project's kernels: %d of %zu planned convolutions\n", custom,
                pw.net.plan().convs().size());

    for (GpuRig* r : {&base, &pw, &again}) {
        r->load(b.pixels[0], b.labels[0]);
        r->step.micro_step(0);
        r->ctx.synchronize();
    }
    const model::ParamTable& t = cpu.table();
    const std::vector<float> g0 = base.fetch(base.net.plan().grad(), t.flat_size);
    const std::vector<float> g1 = pw.fetch(pw.net.plan().grad(), t.flat_size);
    const std::vector<float> g2 = again.fetch(again.net.plan().grad(), t.flat_size);
    EXPECT_EQ(0, std::memcmp(g1.data(), g2.data(), t.flat_size * sizeof(float))) << "two networks differ";
    const double l0 = base.step.read_stats().loss.total, l1 = pw.step.read_stats().loss.total;
    EXPECT_NEAR(l1, l0, 1e-3 * std::fabs(l0)) << "loss";
    // Gradients over the whole network: bf16 activations rounded in other places, the same math.
    double d = 0, r = 0, worst = 0;
    std::string worst_name;
    for (const model::ParamInfo& p : t.params) {
        double pd = 0, pr = 0;
        for (size_t i = 0; i < p.numel; ++i) {
            const double a = g1[p.offset + i], c = g0[p.offset + i];
            pd += (a - c) * (a - c);
            pr += c * c;
        }
        d += pd;
        r += pr;
        const double rel = pr > 0 ? std::sqrt(pd / pr) : std::sqrt(pd);
        if (rel > worst) worst = rel, worst_name = p.name;
    }
    const double total = std::sqrt(d / r);
    std::printf("gradient rel L2 against cuDNN's convolutions: %.3g over the network, worst %.3g (%s)\n", total, worst,
                worst_name.c_str());
    EXPECT_LE(total, 1e-2);
    EXPECT_LE(worst, 5e-2) << worst_name;
}

// With pw_stats (`bench step --pw-stats`) the 1x1 ConvBNs whose conv runs on the project's kernel take
// their BN statistics from its epilogue: such layers exist in the test network (the deterministic policy
// runs every supported 1x1 conv there), two networks give the same bits, and the dry run for that policy
// reserves the epilogue's partials in the layers' workspace. The statistics themselves are checked against
// fp64 and bn_stats_train in tests/gpu/kernels_pwconv_test.cpp; the step against the CPU reference in
// CudaStep.PwStatsMicroStepMatchesTheCpuReference (model_step_fusions_reference_test.cpp): at this size and at
// initialisation the step is chaotic (docs/MODEL.md), so the last-bit differences of the statistics
// (another summation order) grow through the network and a direct comparison with the statistics pass
// says nothing (measured under the emulation: gradients 0.86 rel L2 apart, loss 0.29%, the first
// epilogue layer's running statistics within 1e-5).
TEST(CudaStep, PwStatsTakesTheBnStatisticsFromTheConvEpilogue) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig pw(cpu, true, 1, order, false, 1, false, 0, 1), st(cpu, true, 1, order, false, 1, false, 0, 2),
        again(cpu, true, 1, order, false, 1, false, 0, 2);
    EXPECT_FALSE(pw.net.gpu_ops()->pw_stats());
    EXPECT_TRUE(st.net.gpu_ops()->pw_stats());
    int runs = 0;
    size_t most = 0;
    for (const model::ConvUse& u : st.net.plan().convs()) {
        const bool r = st.net.gpu_ops()->conv_forward_stats_runs(u.shape);
        EXPECT_EQ(r, kern::pwconv_supported(u.shape)) << u.shape.describe();
        EXPECT_FALSE(pw.net.gpu_ops()->conv_forward_stats_runs(u.shape)) << u.shape.describe();
        if (r) most = std::max(most, kern::pwconv_workspace_floats(u.shape));
        runs += r;
    }
    EXPECT_GT(runs, 0);
    {
        kern::ConvPolicy plain, with;
        plain.pw_custom = with.pw_custom = with.pw_stats = true;
        const model::SiderNetCuda dp(st.net.shape(), model::DryRun{&plain}), dw(st.net.shape(), model::DryRun{&with});
        EXPECT_GE(dw.plan().workspace_floats(), most);
        EXPECT_GE(dw.plan().workspace_floats(), dp.plan().workspace_floats());
    }
    for (GpuRig* r : {&pw, &st, &again}) {
        r->load(b.pixels[0], b.labels[0]);
        r->step.micro_step(0);
        r->ctx.synchronize();
    }
    const model::ParamTable& t = cpu.table();
    const std::vector<float> g2 = st.fetch(st.net.plan().grad(), t.flat_size);
    const std::vector<float> g3 = again.fetch(again.net.plan().grad(), t.flat_size);
    EXPECT_EQ(0, std::memcmp(g2.data(), g3.data(), t.flat_size * sizeof(float))) << "two networks differ";
    const model::Planner& p1 = pw.net.plan();
    const model::Planner& p2 = st.net.plan();
    const std::vector<float> b1 = pw.fetch(p1.buffers(), p1.table().buffer_floats);
    const std::vector<float> b2 = st.fetch(p2.buffers(), p2.table().buffer_floats);
    // The first layer whose statistics come from the epilogue sees the same input in both networks: its
    // running statistics agree to fp32 rounding (relative to the channel's spread).
    for (const model::BufferInfo& bi : p1.table().buffers) {
        if (bi.name != "stem.lite_blocks.0.pw_expand.bn.running_var") continue;
        for (size_t i = 0; i < bi.numel; ++i)
            EXPECT_NEAR(b2[bi.offset + i], b1[bi.offset + i], 1e-5 * std::fabs(b1[bi.offset + i]))
                << bi.name << " " << i;
    }
}

// The depthwise BNs' backward reductions in their 1x1 consumer's dgrad epilogue (ConvPolicy::pw_bn_grad,
// `bench step --pw-bn-grad`): exactly the 1x1 convs the project's kernel runs gather them (GpuOps::
// dgrad_bn_grad_runs), and one micro-step changes only a summation order (steprig::expect_changed_order_only:
// the same plan and loss, some gradient not bitwise equal, each within relative L2 0.15 and all within 5e-2
// of the network without it; under the emulation at most 0.037 and 0.013: the bf16 roundings of the BN
// dx passes flip where the coefficients' last bits differ, and the flips spread), on the plain network (3 against 1:
// the depthwise layers then run the dx pass alone) and with every fusion (4 against 2, with the fused LiteBlock,
// fuse_dw_pw and the fused depthwise backward with its BN's dx inside and the expand BN's reductions: the fused kernel
// then takes the coefficients the dgrad gathered, no statistics pass). The kernel:
// KernelsPwconvGpu.DgradBnGradEpilogue*.
TEST(CudaStep, PwBnGradGathersTheDepthwiseBnGradientSums) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    for (const bool all : {false, true}) {
        const int fuse = all ? kFuseExpandDw | kFuseDwPw : 0, dw_fused = all ? 4 : 0;
        GpuRig base(cpu, true, 1, order, fuse, 1, false, dw_fused, all ? 2 : 1),
            epi(cpu, true, 1, order, fuse, 1, false, dw_fused, all ? 4 : 3);
        EXPECT_TRUE(epi.net.gpu_ops()->pw_bn_grad());
        EXPECT_FALSE(base.net.gpu_ops()->pw_bn_grad());
        int runs = 0;
        for (const model::ConvUse& u : epi.net.plan().convs()) {
            const bool r = epi.net.gpu_ops()->dgrad_bn_grad_runs(u.shape);
            EXPECT_EQ(r, u.dgrad && kern::pwconv_supported(u.shape)) << u.shape.describe();
            runs += r;
        }
        EXPECT_GT(runs, 0);
        expect_changed_order_only(base, epi, b, all ? "pw_bn_grad with every fusion" : "pw_bn_grad", 0.15, 5e-2);
    }
}

}  // namespace

// The 1x1 ConvBNs' BN dx formed in the project's dgrad and wgrad loads (ConvPolicy::pw_bn_bwd, `bench step
// --pw-bn-bwd`): the formed values are the dx pass's bits and the kernels' sums are the same, so training
// steps are bitwise those of the network with the dx pass (expect_rigs_bitwise_equal: weights, moments,
// statistics, loss, gradient norm, eval logits), on the plain network (two steps, one eager) and with every
// fusion (the fused LiteBlock, fuse_dw_pw, the fused depthwise backward with the expand BN's reductions in
// its epilogue: the expand's fused BN backward then takes those coefficients, no statistics pass; and
// pw_bn_grad: the project and DSConv pointwise dgrads run the prologue and the depthwise BN's epilogue at
// once). Exactly the 1x1 shapes the plan marked run it (GpuOps::pw_fused_bn_runs; the deterministic policy
// runs the project's kernel on every supported 1x1 shape).
TEST(CudaStep, PwBnBwdIsBitwiseTheDxPass) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(2);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    for (const bool all : {false, true}) {
        const std::string what = all ? "pw_bn_bwd with every fusion" : "pw_bn_bwd";
        const int fuse = all ? kFuseExpandDw | kFuseDwPw : 0;
        const kern::ConvPolicy base = GpuRig::policy(true, 1, all ? 4 : 0, all ? 3 : 1);
        kern::ConvPolicy with = base;
        with.pw_bn_bwd = true;
        GpuRig plain(cpu, base, 1, order, fuse), fused(cpu, with, 1, order, fuse);
        EXPECT_FALSE(plain.net.gpu_ops()->pw_bn_bwd());
        EXPECT_TRUE(fused.net.gpu_ops()->pw_bn_bwd());
        int runs = 0;
        for (const model::ConvUse& u : fused.net.plan().convs()) {
            const bool r = fused.net.gpu_ops()->pw_fused_bn_runs(u.shape);
            EXPECT_EQ(r, u.bn_bwd_prologue && kern::pwconv_supported(u.shape)) << what << " " << u.shape.describe();
            EXPECT_FALSE(plain.net.gpu_ops()->pw_fused_bn_runs(u.shape)) << what << " " << u.shape.describe();
            runs += r;
        }
        EXPECT_GT(runs, 0) << what;
        plain.step.set_use_graphs(false);  // eager against captured
        for (int k = 0; k < (all ? 1 : 2); ++k)
            for (GpuRig* r : {&plain, &fused})
                r->train_step(b.pixels[static_cast<size_t>(k)], b.labels[static_cast<size_t>(k)]);
        expect_rigs_bitwise_equal(plain, fused);
    }
}

namespace {

// The fused 1x1 backward's step tests: the network on `base` and the same with ConvPolicy::pw_fused_bwd (fuse: the
// model fusions), both from the same parameters; `run` steps both at least twice (the second micro-step is the
// captured one) and judges their results. The plan marks only the network with the switch, some layer of the test
// network is too wide for the kernel (so the rule refuses some), and the captured micro-step has one kernel fewer
// per layer marked (the dgrad, the wgrad and its finalize become the pass and the finalize; with a producer's BN
// sums gathered, the dgrad's finalize stays the pass's): the fused kernel ran where the plan said, and nowhere
// else. Returns how many marked layers gather their producer's BN sums.
int check_pw_fused_bwd(const kern::ConvPolicy& base, int fuse, const std::string& what,
                       const std::function<void(GpuRig& plain, GpuRig& fused)>& run) {
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    kern::ConvPolicy with = base;
    with.pw_fused_bwd = true;
    GpuRig plain(cpu, base, 1, model::UpOrder::ConvFirst, fuse), fused(cpu, with, 1, model::UpOrder::ConvFirst, fuse);
    EXPECT_FALSE(plain.net.gpu_ops()->pw_fused_bwd()) << what;
    EXPECT_TRUE(fused.net.gpu_ops()->pw_fused_bwd()) << what;
    int marked = 0, wide = 0, gathering = 0;
    for (const model::LayerUse& l : fused.net.plan().layers()) {
        marked += l.kernels.pw_fused_bwd;
        gathering += l.kernels.pw_fused_bwd && l.kernels.gathers_input_bn_sums;
        wide += l.shape.k == 1 && l.input_grad && !kern::pwconv_backward_fused_supported(l.shape);
    }
    for (const model::LayerUse& l : plain.net.plan().layers()) EXPECT_FALSE(l.kernels.pw_fused_bwd) << l.name;
    EXPECT_GT(marked, 0) << what;
    EXPECT_GT(wide, 0) << what << ": the test network has 1x1 convs too wide for the fused kernel";
    run(plain, fused);
    const model::GraphNodeCounts& gp = plain.step.micro_graph_nodes();
    const model::GraphNodeCounts& gf = fused.step.micro_graph_nodes();
    EXPECT_TRUE(gp.captured && gf.captured) << what;
    EXPECT_EQ(gp.kernels - gf.kernels, marked) << what;
    std::printf("%s: %d layers fused (%d gathering their producer's BN sums), micro-step kernels %d -> %d\n",
                what.c_str(), marked, gathering, gp.kernels, gf.kernels);
    return gathering;
}

}  // namespace

// The 1x1 dgrad and wgrad in one kernel (ConvPolicy::pw_fused_bwd, `bench step --pw-fused-bwd`): its dx and dw are
// the two kernels' bits, so training steps are bitwise those of the network without it (expect_rigs_bitwise_equal,
// after two steps), on the network with the project's 1x1 kernel alone (the plain ConvBN backward:
// GpuOps::conv_backward_fused) and with every fusion and the BN's dx in the conv loads (GpuOps::bn_pw_backward_fused:
// the expand's BN-backward prologue with SiLU, the project's with none and fuse_dw_pw's SiLU prologue on x); no
// producer's BN sums gathered (pw_bn_grad off: PwFusedBwdGathersTheProducerBnSums). Marks and kernel nodes:
// check_pw_fused_bwd.
TEST(CudaStep, PwFusedBwdIsBitwiseTheSeparatePasses) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(2);
    for (const bool all : {false, true}) {
        kern::ConvPolicy base = GpuRig::policy(true, 1, all ? 4 : 0, 1);
        base.pw_bn_bwd = all;
        const int gathering = check_pw_fused_bwd(
            base, all ? kFuseExpandDw | kFuseDwPw : 0,
            all ? "pw_fused_bwd with every fusion and pw_bn_bwd" : "pw_fused_bwd", [&](GpuRig& plain, GpuRig& fused) {
                for (int k = 0; k < 2; ++k)
                    for (GpuRig* r : {&plain, &fused})
                        r->train_step(b.pixels[static_cast<size_t>(k)], b.labels[static_cast<size_t>(k)]);
                expect_rigs_bitwise_equal(plain, fused);
            });
        EXPECT_EQ(gathering, 0);
    }
}

// The fused 1x1 backward on pw_bn_grad's consumers (the LiteBlock projects, the DSConv pointwise convs): the depthwise
// BN's reductions gathered in the fused pass's epilogue instead of the dgrad's. dx and dw are the two kernels' bits,
// the sums come per chunk of the pass instead of per dgrad tile: one micro-step changes only a summation order
// (expect_changed_order_only: the same plan and loss, some gradient not bitwise equal, each within relative L2 0.15
// and all within 5e-2, the bounds of PwBnGradGathersTheDepthwiseBnGradientSums; under the emulation 1.2e-7 and
// 2.7e-9 alone, 0.036 and 0.012 with every fusion, where the bf16 roundings of the BN dx passes flip), on the network
// with pw_bn_grad alone (the plain ConvBN backward: GpuOps::conv_backward_fused with the sums) and with every fusion
// and pw_bn_bwd (GpuOps::bn_pw_backward_fused with them: the project conv's x through fuse_dw_pw's prologue, the same
// BN). Marks and kernel nodes (check_pw_fused_bwd, on a second step): the gathering layers are among the fused.
TEST(CudaStep, PwFusedBwdGathersTheProducerBnSums) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    for (const bool all : {false, true}) {
        const std::string what = all ? "pw_fused_bwd on pw_bn_grad with every fusion" : "pw_fused_bwd on pw_bn_grad";
        kern::ConvPolicy base = GpuRig::policy(true, 1, all ? 4 : 0, all ? 4 : 3);
        base.pw_bn_bwd = all;
        const int gathering =
            check_pw_fused_bwd(base, all ? kFuseExpandDw | kFuseDwPw : 0, what, [&](GpuRig& plain, GpuRig& fused) {
                ASSERT_TRUE(fused.net.gpu_ops()->pw_bn_grad()) << what;
                expect_changed_order_only(plain, fused, b, what, 0.15, 5e-2);
                for (GpuRig* r : {&plain, &fused}) r->train_step(b.pixels[0], b.labels[0]);  // captured
            });
        EXPECT_GT(gathering, 0) << what;
    }
}
