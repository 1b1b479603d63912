// The dgrad modes of model::ConvUse (model/planner.h): which convolutions' backward-data overwrite
// their dx (the first contribution: a beta = 0 cuDNN plan) and which accumulate, as recorded from
// the traced backward of the real CUDA network before its plans are built; checked against the
// trace itself, and the step-time refusal of a mode that was not prepared.
#include <gtest/gtest.h>

#include <map>

#include "model/net.h"
#include "tests/support/compare.h"

namespace {

const model::NetShape kSmall{2, 2, 64, 128};  // batch, channels, height, width

// The modes recomputed from the tape's events: a conv backward-data write is an overwrite when it
// is the first access to its gradient (a gradient read first holds the loss's value: accumulate).
TEST(ModelDgradModes, RecordedFromTheTrace) {
    const model::SiderNetCuda net(kSmall, model::DryRun{});
    const model::Planner& p = net.plan();
    std::map<const void*, bool> seen;  // gradient -> already holds a value
    std::vector<model::ConvUse> expect = p.convs();
    for (model::ConvUse& u : expect) u.dgrad_overwrite = u.dgrad_accumulate = false;
    int dgrad_writes = 0;
    for (const model::GradTape::Event& e : p.tape().events()) {
        const bool had = seen.count(e.ptr) > 0;
        seen[e.ptr] = true;
        if (!e.write || !e.conv_dgrad) continue;
        ++dgrad_writes;
        int matches = 0;
        for (model::ConvUse& u : expect)
            if (model::same_conv_shape(u.shape, e.conv))
                (had ? u.dgrad_accumulate : u.dgrad_overwrite) = true, ++matches;
        EXPECT_EQ(matches, 1) << "a traced backward-data matches " << matches << " ConvUse entries";
    }
    size_t only_o = 0, only_a = 0, both = 0, dgrad = 0;
    ASSERT_EQ(p.convs().size(), expect.size());
    for (size_t i = 0; i < expect.size(); ++i) {
        const model::ConvUse& u = p.convs()[i];
        EXPECT_EQ(u.dgrad_overwrite, expect[i].dgrad_overwrite) << i;
        EXPECT_EQ(u.dgrad_accumulate, expect[i].dgrad_accumulate) << i;
        if (!u.dgrad) {  // no input gradient (the stem): no mode
            EXPECT_FALSE(u.dgrad_overwrite || u.dgrad_accumulate) << i;
            continue;
        }
        ++dgrad;
        EXPECT_TRUE(u.dgrad_overwrite || u.dgrad_accumulate) << "conv " << i << " needs a dgrad but none was traced";
        (u.dgrad_overwrite && u.dgrad_accumulate ? both : (u.dgrad_overwrite ? only_o : only_a)) += 1;
    }
    std::printf(
        "[dgrad modes] 64x128: %zu conv shapes, %zu with dgrad (%d traced backward-data): %zu overwrite only, "
        "%zu accumulate only, %zu both\n",
        p.convs().size(), dgrad, dgrad_writes, only_o, only_a, both);
    EXPECT_EQ(only_o + only_a + both, dgrad);
    EXPECT_GT(only_o + both, 0u);  // most dgrads are the first contribution to their dx
    EXPECT_GE(static_cast<size_t>(dgrad_writes), dgrad);
}

TEST(ModelDgradModes, UnpreparedModeIsRefused) {
    model::ConvUse u;
    u.shape = kern::ConvShape{2, 8, 16, 32, 64, 3, 1, 1, 1, false};
    u.dgrad = true;
    u.dgrad_overwrite = true;
    model::check_dgrad_mode(u, false);
    SF_EXPECT_ERROR(model::check_dgrad_mode(u, true), "asked to accumulate into dx", "only the overwrite mode",
                    "n2 8x16 c32->64 k3");
    u.dgrad_overwrite = false;
    u.dgrad_accumulate = true;
    model::check_dgrad_mode(u, true);
    SF_EXPECT_ERROR(model::check_dgrad_mode(u, false), "asked to overwrite dx", "only the accumulate mode");
    u.dgrad_accumulate = false;  // a hand-built list without modes: accumulate, as before the modes
    EXPECT_TRUE(u.needs_accumulate());
    EXPECT_FALSE(u.needs_overwrite());
    u.dgrad_overwrite = u.dgrad_accumulate = true;
    model::check_dgrad_mode(u, true);
    model::check_dgrad_mode(u, false);
    u.dgrad = false;
    SF_EXPECT_ERROR(model::check_dgrad_mode(u, true), "planned without an input gradient");
}

}  // namespace
