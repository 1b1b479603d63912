// The BatchNorm row kernels four rows per loop turn (kern::ConvPolicy::bn_row_batch = 4, what `bench
// step --bn-row-batch 4` runs) through the whole CUDA network and step: the layers pass the policy's
// value to every kern::bn_act_* call (a value the kernels refuse reaches them: the first forward
// throws naming it), and two captured steps give bitwise the same master weights, AdamW moments,
// running statistics, counters, loss and gradient norm as row_batch 1, and an eval forward the same
// logits (the kernels' own test, KernelsBnActGpu.RowBatchBitwiseEqualToOneRow, covers the batched
// reductions on tensors large enough to reach them).
#include <gtest/gtest.h>

#include <vector>

#include "model/gpu_ops.h"
#include "model/train_step_cuda.h"
#include "runtime/error.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

TEST(CudaStep, BnRowBatchFourIsBitwiseEqualToOne) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(2);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    {
        GpuRig bad(cpu, true, 1, model::UpOrder::ConvFirst, false, 3);
        bad.step.set_use_graphs(false);  // the throw must not leave a capture open
        bad.load(b.pixels[0], b.labels[0]);
        SF_EXPECT_ERROR(bad.step.micro_step(0), "row_batch must be 1 or 4, got 3");
        bad.ctx.synchronize();
    }
    GpuRig one(cpu, true, 1, model::UpOrder::ConvFirst), four(cpu, true, 1, model::UpOrder::ConvFirst, false, 4);
    EXPECT_EQ(one.net.gpu_ops()->bn_row_batch(), 1);
    EXPECT_EQ(four.net.gpu_ops()->bn_row_batch(), 4);
    for (size_t k = 0; k < b.pixels.size(); ++k) {
        for (GpuRig* r : {&one, &four}) {
            r->train_step(b.pixels[k], b.labels[k]);
        }
    }
    expect_rigs_bitwise_equal(one, four);
}

// The BatchNorm backward's row kernels compiled for 3 resident blocks (kern::ConvPolicy::bn_min_blocks = 3,
// `bench step --bn-min-blocks 3`) through the network, with the fusion up paths' upsampled BN sources
// (model.fuse_up_bn) so that every source form of the kernels runs: a value with no kernels reaches them
// (the first backward throws naming it), and two captured steps and an eval forward give bitwise the
// results of 1 (KernelsBnActGpu.MinBlocksThreeBitwiseEqualToOne covers the kernels on large tensors).
TEST(CudaStep, BnMinBlocksThreeIsBitwiseEqualToOne) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(2);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const auto with_min_blocks = [](int m) {
        kern::ConvPolicy p = GpuRig::policy(true, 1, 0, 0);
        p.bn_min_blocks = m;
        return p;
    };
    {
        GpuRig bad(cpu, with_min_blocks(2), 1, model::UpOrder::ConvFirst, kFuseUpBn);
        bad.step.set_use_graphs(false);  // the throw must not leave a capture open
        bad.load(b.pixels[0], b.labels[0]);
        SF_EXPECT_ERROR(bad.step.micro_step(0), "min_blocks must be 1 or 3, got 2");
        bad.ctx.synchronize();
    }
    GpuRig one(cpu, with_min_blocks(1), 1, model::UpOrder::ConvFirst, kFuseUpBn),
        three(cpu, with_min_blocks(3), 1, model::UpOrder::ConvFirst, kFuseUpBn);
    EXPECT_EQ(three.net.gpu_ops()->bn_backward_rows().min_blocks, 3);
    for (size_t k = 0; k < b.pixels.size(); ++k)
        for (GpuRig* r : {&one, &three}) r->train_step(b.pixels[k], b.labels[k]);
    expect_rigs_bitwise_equal(one, three);
}

}  // namespace
