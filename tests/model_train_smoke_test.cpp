// CPU training smoke run: on a fixed small batch the loss must fall, the weights must move,
// nothing may become non-finite, and two identical runs must agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "data/fixed_batch.h"
#include "model/init.h"
#include "model/train_step.h"
#include "tests/support/compare.h"

namespace {

struct SmokeRun {
    std::vector<double> losses;
    std::vector<float> final_master;
};

SmokeRun train_fixed(int steps) {
    model::NetShape shape;
    shape.batch = 2;
    shape.channels = 2;
    shape.height = 64;
    shape.width = 128;
    model::SiderNet net(shape, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), 42, p.master(), p.buffers(), p.counters());
    const data::FixedSamples batch =
        data::make_fixed_samples(5, shape.batch, shape.channels, shape.height, shape.width);
    std::copy(batch.input.begin(), batch.input.end(), net.input());
    model::OptimConfig oc;
    model::TrainStep step(net, model::LossConfig{}, oc);
    SmokeRun r;
    for (int k = 0; k < steps; ++k) {
        const model::StepStats s = step.step(rt::Exec::cpu(), batch.labels.data(), 1e-3);
        EXPECT_FALSE(s.skipped) << "step " << k;
        EXPECT_TRUE(std::isfinite(s.grad_norm)) << "step " << k;
        r.losses.push_back(s.mean_loss);
    }
    r.losses.push_back(step.evaluate(rt::Exec::cpu(), batch.labels.data(), true).total);
    r.final_master.assign(p.master(), p.master() + net.table().flat_size);
    return r;
}

TEST(TrainSmoke, LossFallsOnAFixedBatchAndRunsAreReproducible) {
    const int steps = 12;
    const SmokeRun a = train_fixed(steps);
    for (double l : a.losses) ASSERT_TRUE(std::isfinite(l));
    const double first = a.losses.front(), last = a.losses.back();
    std::printf("[smoke] loss step 0: %.4f, after %d steps: %.4f\n", first, steps, last);
    EXPECT_LT(last, 0.5 * first) << "the loss did not fall enough";
    const SmokeRun b = train_fixed(steps);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(0, std::memcmp(a.final_master.data(), b.final_master.data(), a.final_master.size() * sizeof(float)));
}

}  // namespace
