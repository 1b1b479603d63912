// Programmatic dependent launch (rt::Exec::pdl, what `bench step --pdl` runs) through the whole CUDA
// network and step: every kernel of the project then starts with griddepcontrol.wait
// (runtime/launch.cuh), so two captured steps must give bitwise the same master weights, AdamW
// moments, running statistics, counters, loss and gradient norm as plain launches, and an eval
// forward the same logits. On a GPU the captured micro-step must also contain programmatic edges
// (the launches took the attribute; without it none); the CPU emulation runs plain launches and
// reports none, so there the test checks the plumbing and the bitwise results only.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "model/train_step_cuda.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

TEST(CudaStep, PdlIsBitwiseEqualToPlainLaunches) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(3);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    GpuRig plain(cpu, true, 1, model::UpOrder::ConvFirst);
    GpuRig pdl(cpu, true, 1, model::UpOrder::ConvFirst, false, 1, true);
    EXPECT_FALSE(plain.exec.pdl);
    EXPECT_TRUE(pdl.exec.pdl);
    // Step 1 runs eagerly, steps 2 and 3 capture and replay the graphs (CudaTrainStep::micro_step).
    for (size_t k = 0; k < b.pixels.size(); ++k) {
        for (GpuRig* r : {&plain, &pdl}) {
            r->train_step(b.pixels[k], b.labels[k]);
        }
    }
    const model::GraphNodeCounts& gp = plain.step.micro_graph_nodes();
    const model::GraphNodeCounts& gq = pdl.step.micro_graph_nodes();
    ASSERT_TRUE(gp.captured && gq.captured);
    EXPECT_EQ(gp.kernels, gq.kernels);  // the same launches, only their dependencies differ
    EXPECT_EQ(gp.total(), gq.total());
    EXPECT_EQ(gp.programmatic_edges, 0);
    EXPECT_GT(gp.edges, 0);
    std::printf("micro-step graph: %d kernel nodes; edges %d plain, %d with PDL of which %d programmatic\n",
                gq.kernels, gp.edges, gq.edges, gq.programmatic_edges);
#ifndef SF_EMU
    EXPECT_GT(gq.programmatic_edges, gq.kernels / 2) << "the project's kernels are most of the step's launches";
#else
    EXPECT_EQ(gq.programmatic_edges, 0);  // the emulation runs plain launches
#endif
    expect_rigs_bitwise_equal(plain, pdl);
}

}  // namespace
