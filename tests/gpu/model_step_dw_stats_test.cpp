// The depthwise ConvBNs' BatchNorm statistics from the staged depthwise forward's epilogue in the whole CUDA
// network and step (kern::ConvPolicy::dw_stats, what `bench step --dw-stats` runs): under the deterministic
// policy (no timing: the custom depthwise kernels run every depthwise shape) exactly the depthwise shapes
// take their statistics from the epilogue, in the first staged forward variant; two such networks give the
// same bits; the dry run for that policy reserves the epilogue's partials in the layers' workspace; the
// first such layer's running statistics agree with the statistics pass's to fp32 rounding. The step against
// the CPU reference: CudaStep.DwStatsMicroStepMatchesTheCpuReference and, with every fusion (the forward
// through the expand's BN prologue, the depthwise BN applied by its consumer),
// CudaStep.AllFusionsMicroStepMatchesTheCpuReference (model_step_fusions_reference_test.cpp). The kernel:
// tests/gpu/kernels_dwconv_stats_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// At this size and at initialisation the step is chaotic (docs/MODEL.md): the last-bit differences of the
// statistics (another summation order) grow through the network, so the gradients are judged against the
// CPU reference (step_reference.h), not against the statistics pass's step.
TEST(CudaStep, DwStatsTakesTheBnStatisticsFromTheDepthwiseEpilogue) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    for (const bool fused : {false, true}) {
        // fused: the fused LiteBlock (the depthwise forward through the expand's BN prologue) and the
        // depthwise BN applied by its 1x1 consumer (the depthwise ConvBN then runs no BN pass at all).
        const int fuse = fused ? kFuseExpandDw | kFuseDwPw : 0;
        const std::string what = fused ? "with the fused LiteBlock and fuse_dw_pw" : "plain";
        GpuRig base(cpu, true, 1, order, fuse), st(cpu, true, 1, order, fuse, 1, false, 0, 0, true),
            again(cpu, true, 1, order, fuse, 1, false, 0, 0, true);
        EXPECT_FALSE(base.net.gpu_ops()->dw_stats());
        EXPECT_TRUE(st.net.gpu_ops()->dw_stats());
        int runs = 0;
        size_t most = 0;
        for (const model::ConvUse& u : st.net.plan().convs()) {
            const bool r = st.net.gpu_ops()->conv_forward_stats_runs(u.shape);
            EXPECT_EQ(r, kern::dwconv3x3_supported(u.shape)) << what << " " << u.shape.describe();
            EXPECT_FALSE(base.net.gpu_ops()->conv_forward_stats_runs(u.shape)) << what << " " << u.shape.describe();
            EXPECT_EQ(u.stats_epilogue, kern::dwconv3x3_supported(u.shape)) << what << " " << u.shape.describe();
            if (r) most = std::max(most, kern::dwconv3x3_stats_workspace_floats(u.shape));
            runs += r;
        }
        EXPECT_GT(runs, 0) << what;
        // The variants the epilogue runs in: staged ones (the plain forward's and the prologue forward's).
        for (const std::string& line : st.net.gpu_ops()->describe()) {
            if (line.find("dwconv variants:") != std::string::npos) {
                EXPECT_NE(line.find("with the BN statistics epilogue"), std::string::npos) << what << ": " << line;
            }
        }
        {
            kern::ConvPolicy plain, with;
            plain.deterministic = with.deterministic = true;
            plain.autotune = with.autotune = false;
            with.dw_stats = true;
            const model::SiderNetCuda dp(st.net.shape(), model::DryRun{&plain}),
                dw(st.net.shape(), model::DryRun{&with});
            EXPECT_GE(dw.plan().workspace_floats(), most) << what;
            EXPECT_GE(dw.plan().workspace_floats(), dp.plan().workspace_floats()) << what;
        }
        for (GpuRig* r : {&base, &st, &again}) {
            r->load(b.pixels[0], b.labels[0]);
            r->step.micro_step(0);
            r->ctx.synchronize();
        }
        const model::ParamTable& t = cpu.table();
        const std::vector<float> g2 = st.fetch(st.net.plan().grad(), t.flat_size);
        const std::vector<float> g3 = again.fetch(again.net.plan().grad(), t.flat_size);
        EXPECT_EQ(0, std::memcmp(g2.data(), g3.data(), t.flat_size * sizeof(float))) << what << ": two networks differ";
        const model::Planner& p1 = base.net.plan();
        const model::Planner& p2 = st.net.plan();
        const std::vector<float> b1 = base.fetch(p1.buffers(), p1.table().buffer_floats);
        const std::vector<float> b2 = st.fetch(p2.buffers(), p2.table().buffer_floats);
        // The first layer whose statistics come from the epilogue sees the same input in both networks: its
        // running statistics agree to fp32 rounding (relative to the channel's spread).
        int checked = 0;
        for (const model::BufferInfo& bi : p1.table().buffers) {
            if (bi.name != "stem.lite_blocks.0.dw_conv.bn.running_var" &&
                bi.name != "stem.lite_blocks.0.dw_conv.bn.running_mean")
                continue;
            const bool var = bi.name.find("running_var") != std::string::npos;
            const size_t c = bi.numel;
            for (size_t i = 0; i < c; ++i) {
                // running_var within 2e-5 of itself; running_mean (0.1 * the mean, conv outputs of order 1 at this
                // initialisation) within 2e-5 + 1e-6 absolute.
                const double scale = var ? std::fabs(b1[bi.offset + i]) : 1.0;
                EXPECT_NEAR(b2[bi.offset + i], b1[bi.offset + i], 2e-5 * scale + (var ? 0.0 : 1e-6))
                    << what << " " << bi.name << " " << i;
            }
            ++checked;
        }
        EXPECT_EQ(checked, 2) << what << ": the stem's first depthwise BN buffers were not found";
    }
}

}  // namespace
