// Branch lanes in the memory plan (kern::ConvPolicy::branch_lanes; docs/GPU_STEP.md "Branch lanes"):
//   - each lane's layers get a workspace region of their own (Planner::set_lanes / set_lane);
//   - a parallel section of the traced backward (GradTape::Section) keeps the gradients different lanes
//     touch apart whatever their lifetimes, and refuses one that two lanes touch;
//   - the network planned with lanes marks one section per HRNet stage, and, judged from the raw traced
//     events, no two gradients that different lanes of a section touch share a byte, nor any two whose
//     lifetimes intersect.
// The CUDA step with lanes, bitwise against one stream: tests/gpu/model_step_branch_lanes_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "model/net.h"
#include "model/planner.h"
#include "tests/support/compare.h"

namespace {

const model::NetShape kSmall{2, 2, 64, 128};  // batch, channels, height, width

// A toy plan on the host: three activations a, b, c whose gradients the trace touches as `trace` says.
struct ToyPlan {
    model::Planner p{rt::MemKind::Host};
    model::ActT<float> a, b, c;
    explicit ToyPlan(int lanes) {
        p.set_lanes(lanes);
        declare();
    }
    void declare() {
        a = p.act<float>({1, 8, 8, 16}, "a");
        b = p.act<float>({1, 8, 8, 16}, "b");
        c = p.act<float>({1, 8, 8, 16}, "c");
    }
};

size_t end_of(const model::GradSlot& g) { return g.offset + g.bytes; }
bool share_bytes(const model::GradSlot& x, const model::GradSlot& y) {
    return x.offset < end_of(y) && y.offset < end_of(x);
}

TEST(BranchLanes, EachLaneHasItsOwnWorkspace) {
    model::Planner p(rt::MemKind::Host);
    SF_EXPECT_ERROR(p.set_lanes(0), "set_lanes(0)");
    SF_EXPECT_ERROR(p.set_lanes(rt::StreamLanes::kMaxLanes + 1), "set_lanes(5)");
    p.set_lanes(3);
    SF_EXPECT_ERROR(p.set_lane(3), "set_lane(3): the plan has 3 lane(s)");
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) {
            p.tape().begin_trace();
            p.tape().end_trace();
            p.plan_grads();
            p.finish_sizing();
        }
        p.act<float>({1, 2, 2, 8}, "x");  // one activation, in both passes
        std::vector<float*> ws;
        for (int k = 0; k < 3; ++k) {
            p.set_lane(k);
            ws.push_back(p.workspace(100 + 10 * k));  // the region: the largest request, 120 floats
        }
        p.set_lane(0);
        if (pass == 0) {
            for (float* w : ws) EXPECT_EQ(w, nullptr);  // sizing: nothing bound yet
            continue;
        }
        p.finish_binding();
        // 120 floats rounded up to 256 bytes (64 floats) per lane, each lane at its own offset.
        EXPECT_EQ(p.workspace_lane_bytes(), 128 * sizeof(float));
        EXPECT_EQ(p.memory().workspace, 3 * 128 * sizeof(float));
        for (int k = 0; k < 3; ++k) {
            EXPECT_EQ(ws[static_cast<size_t>(k)], p.workspace_base() + 128 * k) << "lane " << k;
            EXPECT_EQ(p.workspace_base(k), ws[static_cast<size_t>(k)]);
            EXPECT_EQ(reinterpret_cast<uintptr_t>(ws[static_cast<size_t>(k)]) % 256, 0u);
        }
        SF_EXPECT_ERROR(p.workspace_base(3), "workspace_base(3)");
    }
    model::Planner late(rt::MemKind::Host);
    late.workspace(10);
    SF_EXPECT_ERROR(late.set_lanes(2), "before the sizing pass");
}

// Without the section, a (ops 0-1) and b (ops 2-3) never live together and share bytes; inside one, on
// two lanes, they may run at once and must not. c, first written after the section, may share with both.
TEST(BranchLanes, ASectionKeepsItsGradientsApart) {
    for (const bool section : {false, true}) {
        ToyPlan t(2);
        model::GradTape& tape = t.p.tape();
        bool acc[1];
        tape.begin_trace();
        {
            model::GradTape::Active on(tape);
            if (section) model::grad_section_begin();
            model::grad_op({}, {t.a.g}, acc);
            model::grad_op({t.a.g}, {}, acc);
            if (section) model::grad_section_lane(1);
            model::grad_op({}, {t.b.g}, acc);
            model::grad_op({t.b.g}, {}, acc);
            if (section) model::grad_section_end();
            model::grad_op({}, {t.c.g}, acc);
            model::grad_op({t.c.g}, {}, acc);
        }
        tape.end_trace();
        ASSERT_EQ(tape.sections().size(), section ? 1u : 0u);
        t.p.plan_grads();
        const std::vector<model::GradSlot>& g = t.p.grad_slots();
        ASSERT_EQ(g.size(), 3u);
        if (section) {
            EXPECT_EQ(tape.sections()[0].first_op, 0);
            EXPECT_EQ(tape.sections()[0].end_op, 4);
            EXPECT_EQ(tape.events()[2].lane, 1);
            EXPECT_EQ(tape.events()[4].section, -1);
        }
        EXPECT_EQ(share_bytes(g[0], g[1]), !section) << (section ? "with" : "without") << " the section";
        EXPECT_TRUE(share_bytes(g[0], g[2]) || share_bytes(g[1], g[2]));  // c reuses the section's bytes
    }
}

TEST(BranchLanes, AGradientTwoLanesTouchIsRefused) {
    ToyPlan t(2);
    model::GradTape& tape = t.p.tape();
    bool acc[1];
    tape.begin_trace();
    {
        model::GradTape::Active on(tape);
        model::grad_section_begin();
        model::grad_op({}, {t.a.g}, acc);
        model::grad_section_lane(1);
        model::grad_op({t.a.g}, {t.b.g}, acc);  // lane 1 reads lane 0's gradient: a race
        model::grad_section_end();
    }
    tape.end_trace();
    SF_EXPECT_ERROR(t.p.plan_grads(), "parallel section 0", "gradient 'a' is touched on lanes 0 and 1");
    // Sections do not nest, and each one ends before the trace does.
    model::GradTape u;
    u.begin_trace();
    u.begin_section();
    SF_EXPECT_ERROR(u.begin_section(), "sections do not nest");
    SF_EXPECT_ERROR(u.end_trace(), "a parallel section still open");
    model::GradTape v;
    v.begin_section();  // outside a trace: nothing recorded
    v.set_lane(3);
    v.end_section();
    EXPECT_TRUE(v.sections().empty());
}

// The network's plan with lanes, judged from the raw trace: two gradients one section touches from different
// lanes may be in use at once (their streams run side by side), so they share no byte whatever their
// lifetimes; gradients whose raw lifetimes (first..last access) intersect share none either (the sequential
// rule, which also covers one lane's gradients and anything live across a section).
TEST(BranchLanes, TheNetworksPlanKeepsConcurrentGradientsApart) {
    kern::ConvPolicy lanes_policy;
    lanes_policy.branch_lanes = true;
    const model::SiderNetCuda plain(kSmall, model::DryRun{}), lanes(kSmall, model::DryRun{&lanes_policy});
    EXPECT_EQ(plain.plan().lanes(), 1);
    ASSERT_EQ(lanes.plan().lanes(), 4);
    EXPECT_TRUE(plain.plan().tape().sections().empty());
    const model::GradTape& tape = lanes.plan().tape();
    ASSERT_EQ(tape.sections().size(), 3u);  // stages 2, 3 and 4
    const std::vector<model::GradSlot>& g = lanes.plan().grad_slots();
    // Raw lifetimes and section lanes from the events.
    const size_t n = g.size();
    std::vector<int> first(n, INT32_MAX), last(n, -2);
    std::vector<std::vector<int>> lane_in(tape.sections().size(), std::vector<int>(n, -1));
    std::vector<int> lanes_seen(tape.sections().size(), 0);
    for (const model::GradTape::Event& e : tape.events()) {
        const size_t i = (reinterpret_cast<uintptr_t>(e.ptr) - model::kGradPlaceholderBase) / 256;
        ASSERT_LT(i, n);
        if (first[i] == INT32_MAX) first[i] = e.write ? e.op : -1;  // read first: live before the backward
        last[i] = std::max(last[i], e.op);
        if (e.section >= 0) {
            lane_in[static_cast<size_t>(e.section)][i] = e.lane;
            lanes_seen[static_cast<size_t>(e.section)] |= 1 << e.lane;
        }
    }
    EXPECT_EQ(lanes_seen[0], 0b1111);  // in backward order: stage 4, four branches
    EXPECT_EQ(lanes_seen[1], 0b111);
    EXPECT_EQ(lanes_seen[2], 0b11);
    size_t checked = 0, same_lane_shared = 0;
    for (size_t si = 0; si < tape.sections().size(); ++si) {
        for (size_t i = 0; i < n; ++i) {
            if (lane_in[si][i] < 0) continue;
            for (size_t j = 0; j < n; ++j) {
                if (j == i || lane_in[si][j] < 0) continue;
                if (lane_in[si][j] == lane_in[si][i]) {  // one stream: op order, the sequential rule
                    same_lane_shared += share_bytes(g[i], g[j]);
                    continue;
                }
                ++checked;
                ASSERT_FALSE(share_bytes(g[i], g[j]))
                    << "section " << si << ": " << g[i].what << " #" << i << " (lane " << lane_in[si][i] << ") and "
                    << g[j].what << " #" << j << " (lane " << lane_in[si][j] << ") share bytes";
            }
        }
    }
    // And the sequential rule everywhere, from the raw lifetimes: what lives together never shares bytes.
    for (size_t i = 0; i < n; ++i)
        for (size_t j = i + 1; j < n; ++j) {
            if (last[i] < -1 || last[j] < -1) continue;
            const bool live = first[i] <= last[j] && first[j] <= last[i];
            ASSERT_FALSE(live && share_bytes(g[i], g[j]))
                << g[i].what << " #" << i << " and " << g[j].what << " #" << j;
        }
    EXPECT_GT(same_lane_shared, 0u) << "one lane's gradients still share bytes by lifetime";
    EXPECT_GT(checked, 1000u);
    // The price: the branches' gradients no longer share bytes with each other.
    const model::MemoryPlan a = plain.plan().memory(), b = lanes.plan().memory();
    EXPECT_GE(b.activation_grads, a.activation_grads);
    EXPECT_EQ(b.activations, a.activations);
    EXPECT_EQ(b.workspace, 4 * a.workspace);  // a dry run's workspace: the reductions', per lane
    std::printf("[branch lanes] batch %d at %dx%d: activation grads %zu -> %zu B, workspace %zu -> %zu B\n",
                kSmall.batch, kSmall.height, kSmall.width, a.activation_grads, b.activation_grads, a.workspace,
                b.workspace);
}

}  // namespace
