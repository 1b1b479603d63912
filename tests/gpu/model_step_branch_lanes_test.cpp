// Branch lanes (kern::ConvPolicy::branch_lanes, what `bench step --branch-lanes` runs): the HRNet stages'
// branches on side streams of their own (rt::StreamLanes), forked from the compute stream and joined back
// per stage, each lane with its own workspace, the backward's gradients of concurrent branches kept apart
// by the plan (GradTape::Section). The same kernels on the same data: three steps (the first eager, the
// next two captured and replayed) give bitwise the same weights, moments, statistics, loss and gradient
// norm as one stream, and an eval forward (eager, on the lanes) the same logits. The captured micro-step
// has the same nodes and more edges (the forks and joins).
// Under the CPU emulation the captured graph replays its streams' chains interleaved
// (tests/emu/graphs.cpp, Emulation.CrossStreamCaptureReplaysBranchesInterleaved): branches that shared
// scratch or gradient bytes would disturb each other's results there. On a GPU they run at once.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/train_step_cuda.h"
#include "runtime/lanes.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

// Steps of a rig with and one without lanes, the same policy otherwise; the two compared bit for bit.
void expect_lanes_bitwise_equal(kern::ConvPolicy policy, int fuse) {
    const HostBatches b = make_batches(3);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    policy.branch_lanes = false;
    GpuRig one(cpu, policy, 1, model::UpOrder::ConvFirst, fuse);
    policy.branch_lanes = true;
    GpuRig lanes(cpu, policy, 1, model::UpOrder::ConvFirst, fuse);
    EXPECT_EQ(one.net.stream_lanes(), nullptr);
    ASSERT_NE(lanes.net.stream_lanes(), nullptr);
    EXPECT_EQ(lanes.net.stream_lanes()->size(), rt::StreamLanes::kMaxLanes);
    EXPECT_EQ(lanes.net.plan().lanes(), rt::StreamLanes::kMaxLanes);
    EXPECT_EQ(lanes.net.plan().tape().sections().size(), 3u);
    const model::MemoryPlan mo = one.net.plan().memory(), ml = lanes.net.plan().memory();
    EXPECT_GE(ml.activation_grads, mo.activation_grads);
    EXPECT_GE(ml.workspace, 4 * mo.workspace);
    for (size_t k = 0; k < b.pixels.size(); ++k)
        for (GpuRig* r : {&one, &lanes}) r->train_step(b.pixels[k], b.labels[k]);
    const model::GraphNodeCounts& go = one.step.micro_graph_nodes();
    const model::GraphNodeCounts& gl = lanes.step.micro_graph_nodes();
    ASSERT_TRUE(go.captured && gl.captured);
    EXPECT_EQ(go.kernels, gl.kernels);
    EXPECT_EQ(go.total(), gl.total());
    EXPECT_GT(gl.edges, go.edges);  // each stage's fork and join
    std::printf(
        "micro-step graph: %d nodes; edges %d on one stream, %d with branch lanes; activation grads %zu -> %zu "
        "B, workspace %zu -> %zu B\n",
        go.total(), go.edges, gl.edges, mo.activation_grads, ml.activation_grads, mo.workspace, ml.workspace);
    expect_rigs_bitwise_equal(one, lanes);
}

TEST(CudaStep, BranchLanesIsBitwiseEqualToOneStream) {
    SF_REQUIRE_GPU();
    expect_lanes_bitwise_equal(GpuRig::policy(true, 1, 0, 0), 0);
}

// With the switches whose kernels keep state in the layer workspace between passes (the fused depthwise
// backward's BN coefficients and partials, the 1x1 conv's statistics and BN-gradient epilogues, the
// depthwise statistics epilogue) and the fused LiteBlock: every lane's layers must find their own.
TEST(CudaStep, BranchLanesWithTheWorkspaceFusionsIsBitwiseEqualToOneStream) {
    SF_REQUIRE_GPU();
    expect_lanes_bitwise_equal(GpuRig::policy(true, 1, 4, 4, true), kFuseExpandDw);
}

}  // namespace
