// The CUDA step with its NCCL gradient allreduce (model::CudaTrainStep::set_allreduce, runtime/nccl.h)
// on one GPU: a communicator of one rank, the allreduce inside the captured optimizer step.
//   - world 1 with NCCL equals the plain step bitwise over several steps of 2 accumulated
//     micro-batches (weights, bf16 copy, AdamW m/v, BN statistics and counters, every recorded
//     loss, gradient norm and skip flag): the allreduce of one rank and the scale 1/(accum*1)
//     change nothing;
//   - graph replay of the NCCL step equals its eager calls bitwise;
//   - a NaN weight still skips every step with NCCL in the sequence (eager and replayed).
// Needs libnccl.so.2 >= 2.18 on the loader path (scripts/gpu_test.sh adds a PyTorch environment's).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "model/train_step_cuda.h"
#include "runtime/nccl.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

#ifdef SF_EMU
constexpr int kAccum = 2, kSteps = 3;  // the CPU emulation: eager, capture, one replay
#else
constexpr int kAccum = 2, kSteps = 4;
#endif

// A rig, optionally with its own one-rank NCCL communicator in the step.
struct Rig {
    std::unique_ptr<rt::NcclComm> nccl;  // outlives the step and its graphs (destroyed last)
    std::unique_ptr<GpuRig> gpu;
    Rig(const model::SiderNet& init, bool with_nccl, bool graphs) {
        gpu = std::make_unique<GpuRig>(init, true, kAccum);
        if (with_nccl) {
            nccl = std::make_unique<rt::NcclComm>(0, 1, 0);
            gpu->step.set_allreduce(nccl.get(), 1);
        }
        gpu->step.set_use_graphs(graphs);
    }
    // kSteps optimizer steps of kAccum micro-batches each (eager first calls, capture, replays).
    void run(const HostBatches& b) {
        for (int k = 0; k < kSteps; ++k) {
            for (int a = 0; a < kAccum; ++a) {
                const size_t i = static_cast<size_t>(k * kAccum + a);
                gpu->load(b.pixels[i], b.labels[i]);
                gpu->step.micro_step(0);
            }
            gpu->step.optimizer_step();
            gpu->ctx.synchronize();
        }
    }
};

template <class T>
void expect_bitwise(GpuRig& a, const T* pa, GpuRig& b, const T* pb, size_t n, const char* what) {
    const std::vector<T> x = a.fetch(pa, n), y = b.fetch(pb, n);
    size_t first = n;
    for (size_t i = 0; i < n && first == n; ++i)
        if (std::memcmp(&x[i], &y[i], sizeof(T)) != 0) first = i;
    EXPECT_EQ(first, n) << what << ": first difference at element " << first << " of " << n;
}

// Every piece of state a step touches, and the step records, bitwise.
void expect_same_state(Rig& ra, Rig& rb) {
    GpuRig& a = *ra.gpu;
    GpuRig& b = *rb.gpu;
    const model::Planner& pa = a.net.plan();
    const model::Planner& pb = b.net.plan();
    const model::ParamTable& t = pa.table();
    expect_bitwise(a, pa.master(), b, pb.master(), t.flat_size, "master weights");
    expect_bitwise(a, pa.adam_m(), b, pb.adam_m(), t.flat_size, "AdamW m");
    expect_bitwise(a, pa.adam_v(), b, pb.adam_v(), t.flat_size, "AdamW v");
    expect_bitwise(a, pa.working(), b, pb.working(), t.flat_size, "bf16 working copy");
    expect_bitwise(a, pa.grad(), b, pb.grad(), t.flat_size, "gradients (zeroed)");
    expect_bitwise(a, pa.buffers(), b, pb.buffers(), t.buffer_floats, "BN running statistics");
    expect_bitwise(a, pa.counters(), b, pb.counters(), t.counters, "num_batches_tracked");
    const std::vector<model::StepRecord> ha = a.step.read_history(0), hb = b.step.read_history(0);
    ASSERT_EQ(ha.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(hb.size(), ha.size());
    for (size_t k = 0; k < ha.size(); ++k) {
        EXPECT_EQ(0, std::memcmp(&ha[k].mean_loss, &hb[k].mean_loss, sizeof(double))) << "loss of step " << k;
        EXPECT_EQ(0, std::memcmp(&ha[k].grad_norm, &hb[k].grad_norm, sizeof(float))) << "norm of step " << k;
        EXPECT_EQ(ha[k].nonfinite, hb[k].nonfinite) << "step " << k;
        EXPECT_TRUE(std::isfinite(ha[k].mean_loss)) << "step " << k;
    }
}

TEST(CudaStepNccl, WorldOneIsBitwiseEqualToThePlainStep) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(kSteps * kAccum);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    for (bool graphs : {false, true}) {
        Rig plain(cpu, false, graphs), dp(cpu, true, graphs);
        plain.run(b);
        dp.run(b);
        SCOPED_TRACE(graphs ? "graph replay" : "eager");
        expect_same_state(plain, dp);
        EXPECT_EQ(dp.gpu->step.read_stats().steps_applied, kSteps);
    }
}

TEST(CudaStepNccl, GraphReplayIsBitwiseEqualToEager) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(kSteps * kAccum);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    Rig eager(cpu, true, false), graph(cpu, true, true);
    eager.run(b);
    graph.run(b);
    expect_same_state(eager, graph);
    // The first run moved the weights: the comparison is not of two untouched states.
    const std::vector<float> w = graph.gpu->fetch(graph.gpu->net.plan().master(), cpu.table().flat_size);
    EXPECT_NE(0, std::memcmp(w.data(), cpu.plan().master(), w.size() * sizeof(float)));
}

TEST(CudaStepNccl, NonFiniteStepIsSkippedWithTheAllreduce) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(kSteps * kAccum);
    for (bool graphs : {false, true}) {
        model::SiderNet cpu(net_shape(), rt::MemKind::Host);
        init_cpu(cpu);
        cpu.plan().master()[cpu.table().params.front().offset] = std::nanf("");
        Rig dp(cpu, true, graphs);
        dp.run(b);
        const model::CudaStepStats s = dp.gpu->step.read_stats();
        EXPECT_EQ(s.steps_skipped, kSteps) << "graphs " << graphs;
        EXPECT_EQ(s.steps_applied, 0) << "graphs " << graphs;
        for (const model::StepRecord& r : dp.gpu->step.read_history(0)) EXPECT_EQ(r.nonfinite, 1);
    }
}

}  // namespace
