// The network at non-default configurations: 4-channel input (RGB + mask) and 160x320 input
// run forward in train and eval mode with the expected output grid and finite values.
#include <gtest/gtest.h>

#include <cmath>

#include "data/fixed_batch.h"
#include "model/init.h"
#include "model/net.h"
#include "tests/support/compare.h"

namespace {

TEST(Net, FourChannels160x320RunsWithTheRightGrid) {
    model::NetShape s;
    s.batch = 2;
    s.channels = 4;
    s.height = 160;
    s.width = 320;
    model::SiderNet net(s, rt::MemKind::Host);
    EXPECT_EQ(net.grid_h(), 40);
    EXPECT_EQ(net.grid_w(), 80);
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), 3, p.master(), p.buffers(), p.counters());
    const data::FixedSamples d = data::make_fixed_samples(9, s.batch, s.channels, s.height, s.width);
    std::copy(d.input.begin(), d.input.end(), net.input());
    for (bool train : {true, false}) {
        net.forward(rt::Exec::cpu(), train);
        const model::HeadLogits<float> l = net.logits();
        EXPECT_EQ(l.h, 40);
        EXPECT_EQ(l.w, 80);
        const size_t cells = static_cast<size_t>(l.n) * l.h * l.w;
        double energy = 0;
        for (size_t i = 0; i < cells * 4; ++i) {
            ASSERT_TRUE(std::isfinite(l.offset[i])) << "offset logit " << i << (train ? " (train)" : " (eval)");
            energy += std::fabs(l.offset[i]);
        }
        for (size_t i = 0; i < cells; ++i) ASSERT_TRUE(std::isfinite(l.gap[i]) && std::isfinite(l.slider[i]));
        EXPECT_GT(energy, 0.0);
    }
    // Eval mode reads the running statistics the train pass updated (momentum 0.1 from 0 / 1).
    const model::BufferInfo& rm = net.table().buffers[0];
    EXPECT_EQ(rm.name, "stem.conv1.bn.running_mean");
    double moved = 0;
    for (size_t i = 0; i < rm.numel; ++i) moved += std::fabs(p.buffers()[rm.offset + i]);
    EXPECT_GT(moved, 0.0);
    EXPECT_EQ(p.counters()[0], 1);
}

}  // namespace
