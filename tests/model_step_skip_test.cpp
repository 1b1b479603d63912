// A step skipped for a non-finite loss or gradient changes nothing on the CPU backend (model/train_step.h): the
// weights, the Adam moments, the BN running statistics and num_batches_tracked are bitwise what they
// were before the step's first micro-batch, even when an earlier micro-batch of the same step was
// finite and its forward moved the running statistics. A finite step does move them (so the
// comparison can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "data/fixed_batch.h"
#include "model/init.h"
#include "model/train_step.h"

namespace {

struct State {
    std::vector<float> master, m, buffers;
    std::vector<int64_t> counters;
};

State snapshot(const model::SiderNet& net) {
    const model::Planner& p = net.plan();
    const model::ParamTable& t = net.table();
    return {{p.master(), p.master() + t.flat_size},
            {p.adam_m(), p.adam_m() + t.flat_size},
            {p.buffers(), p.buffers() + t.buffer_floats},
            {p.counters(), p.counters() + t.counters}};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Rig {
    model::NetShape shape{2, 2, 64, 128};
    model::SiderNet net{shape, rt::MemKind::Host};
    data::FixedSamples batch = data::make_fixed_samples(5, shape.batch, shape.channels, shape.height, shape.width);
    model::TrainStep step{net, model::LossConfig{}, model::OptimConfig{}};
    Rig() {
        const model::Planner& p = net.plan();
        model::init_parameters(net.table(), 42, p.master(), p.buffers(), p.counters());
        load(false);
    }
    void load(bool poison) {
        std::copy(batch.input.begin(), batch.input.end(), net.input());
        if (poison) net.input()[0] = std::numeric_limits<float>::quiet_NaN();
    }
};

TEST(StepSkip, FiniteStepMovesTheRunningStatistics) {
    Rig r;
    const State before = snapshot(r.net);
    const model::StepStats s = r.step.step(rt::Exec::cpu(), r.batch.labels.data(), 1e-3);
    ASSERT_FALSE(s.skipped);
    const State after = snapshot(r.net);
    EXPECT_FALSE(bitwise_equal(before.buffers, after.buffers));
    EXPECT_FALSE(bitwise_equal(before.master, after.master));
    ASSERT_FALSE(after.counters.empty());
    for (size_t i = 0; i < after.counters.size(); ++i) EXPECT_EQ(before.counters[i] + 1, after.counters[i]) << i;
}

// Two micro-batches: the first finite (its forward moves the running statistics), the second with a
// NaN pixel: the loss stays finite (it drops non-finite terms and clamps logits, as the original
// does, so a non-finite total cannot be forced through the network) but the gradient norm is NaN.
// The step is skipped and both forwards are undone. A non-finite loss takes the same branch of
// TrainStep::optimizer_step.
TEST(StepSkip, NonFiniteGradientLeavesEverythingBitwiseUnchanged) {
    Rig r;
    // One applied step first, so the Adam moments and counters are not trivially zero.
    ASSERT_FALSE(r.step.step(rt::Exec::cpu(), r.batch.labels.data(), 1e-3).skipped);
    const State before = snapshot(r.net);
    r.step.micro_step(rt::Exec::cpu(), r.batch.labels.data(), 0.5);
    r.load(true);
    const model::LossTerms t = r.step.micro_step(rt::Exec::cpu(), r.batch.labels.data(), 0.5);
    const model::StepStats s = r.step.optimizer_step(rt::Exec::cpu(), 1e-3);
    std::printf("[skip] NaN pixel: loss %g, grad norm %g\n", t.total, s.grad_norm);
    EXPECT_FALSE(std::isfinite(t.total) && std::isfinite(s.grad_norm));
    ASSERT_TRUE(s.skipped);
    EXPECT_EQ(1, r.step.skipped_steps());
    const State after = snapshot(r.net);
    EXPECT_TRUE(bitwise_equal(before.buffers, after.buffers)) << "BN running statistics changed by a skipped step";
    EXPECT_EQ(before.counters, after.counters) << "num_batches_tracked changed by a skipped step";
    EXPECT_TRUE(bitwise_equal(before.master, after.master));
    EXPECT_TRUE(bitwise_equal(before.m, after.m));

    // The next finite step starts from the restored state and applies.
    r.load(false);
    EXPECT_FALSE(r.step.step(rt::Exec::cpu(), r.batch.labels.data(), 1e-3).skipped);
    const State next = snapshot(r.net);
    for (size_t i = 0; i < next.counters.size(); ++i) EXPECT_EQ(before.counters[i] + 1, next.counters[i]) << i;
}

}  // namespace
