// `slidefuse plan --cudnn-device gpu --fusion-graphs --time` (tools/plan_fusion.h,
// tools/plan_fusion_time.h): through the GPU's cuDNN handle, the first shape's control and its fullest
// fused graph (fp32 scale + bias + SiLU + conv + genstats; PlanArgs::fusion_smoke: each fused graph
// costs seconds of runtime compilation on a GPU, and the command itself runs all 16) are planned; the
// control is executed and timed; the fused graph, when it has a plan, is executed, timed against the
// control + the step's own BN kernels, and its outputs checked (y against the conv of the apply pass's
// output, genstats' sums against fp64 sums of y). On an H100 / H200 it plans (2026-11-27), so this
// asserts that the fused graph computes what the step would need; under the emulated cuDNN (no
// pointwise or genstats operations) it is refused with cuDNN's status, and only the control runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/conv_cudnn_probe.h"
#include "runtime/cudnn_graph.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tools/plan_fusion.h"
#include "tools/plan_fusion_time.h"
#include "tools/plan_report.h"

namespace {

TEST(ToolsPlanFusionGpu, TimesTheStepsGraphsAndChecksThem) {
    SF_REQUIRE_GPU();
    tools::PlanArgs a;
    a.batch = 2;
    a.height = 64;
    a.width = 128;
    a.cudnn_device = "gpu";
    a.fusion_graphs = true;
    a.fusion_time = true;
    a.fusion_smoke = true;
    const nlohmann::json d = tools::cudnn_fusion_json_gpu(a);
    ASSERT_EQ(d["graphs"].size(), 4u) << d.dump(1);
    EXPECT_EQ(d["graphs"][1]["graph"], "scale+bias (fp32) + silu + conv + genstats");
    EXPECT_EQ(d["graphs"][2]["graph"], "pwconv");
    EXPECT_EQ(d["graphs"][3]["graph"], "scale+bias + silu + pwconv + statistics");
    int controls = 0, fused_planned = 0, fused_timed = 0, custom = 0;
    for (const nlohmann::json& g : d["graphs"]) {
        const std::string what = g["shape"].get<std::string>() + " / " + g["graph"].get<std::string>();
        if (g.contains("kernel")) {  // the project's 1x1 conv in the same roles: runs everywhere, checked
            ++custom;
            ASSERT_TRUE(g.contains("time")) << what;
            const nlohmann::json& t = g["time"];
            ASSERT_FALSE(t.contains("error")) << what << ": " << t.dump();
            EXPECT_EQ(t["label"], "pwconv") << what;
            EXPECT_GT(t["ms"].get<double>(), 0.0) << what;
            const bool both = g["graph"].get<std::string>().find("statistics") != std::string::npos;
            EXPECT_EQ(t["unfused"].contains("apply_ms"), both) << what;
            EXPECT_EQ(t["unfused"].contains("stats_ms"), both) << what;
            EXPECT_EQ(t["check"].contains("mean_err_in_std"), both) << what;
            EXPECT_LE(t["check"]["y_rel_l2"].get<double>(), 1e-2) << what;
            EXPECT_TRUE(t["ok"].get<bool>()) << what << ": " << t.dump();
            continue;
        }
        const bool planned = g["heuristic_plans"].get<int>() > 0;
        if (g["graph"] == "conv alone (control)") {
            ++controls;
            ASSERT_TRUE(planned) << what;
            ASSERT_TRUE(g.contains("time")) << what;
            ASSERT_FALSE(g["time"].contains("error")) << what << ": " << g["time"].dump();
            EXPECT_GT(g["time"]["ms"].get<double>(), 0.0) << what;
            continue;
        }
        EXPECT_EQ(g["graph"].get<std::string>().find("bf16"), std::string::npos) << what << ": fp32 affine only";
        EXPECT_EQ(g["graph"].get<std::string>().find("relu"), std::string::npos) << what;
        if (!planned) {
            EXPECT_FALSE(g.contains("time")) << what;
            continue;
        }
        ++fused_planned;
        ASSERT_TRUE(g.contains("time")) << what;
        const nlohmann::json& t = g["time"];
        ASSERT_FALSE(t.contains("error")) << what << ": " << t.dump();
        ++fused_timed;
        EXPECT_GT(t["ms"].get<double>(), 0.0) << what;
        const bool prologue = g["graph"].get<std::string>().find("scale+bias") != std::string::npos;
        const bool genstats = g["graph"].get<std::string>().find("genstats") != std::string::npos;
        EXPECT_EQ(t["unfused"].contains("apply_ms"), prologue) << what;
        EXPECT_EQ(t["unfused"].contains("stats_ms"), genstats) << what;
        EXPECT_EQ(t["check"].contains("y_rel_l2"), prologue) << what;
        EXPECT_EQ(t["check"].contains("sum_rel_err"), genstats) << what;
        EXPECT_TRUE(t["ok"].get<bool>()) << what << ": " << t.dump();
    }
    EXPECT_EQ(controls, 1);
    EXPECT_EQ(d["fused_timed"].get<int>(), fused_timed);
    EXPECT_EQ(d["fused_checks_ok"].get<int>(), fused_timed);
    EXPECT_EQ(fused_timed, fused_planned);
    EXPECT_EQ(custom, 2);
    EXPECT_EQ(d["custom_timed"].get<int>(), 2);
    EXPECT_EQ(d["custom_checks_ok"].get<int>(), 2);
    const std::string text = tools::cudnn_fusion_text(d);
    std::printf("%s", text.c_str());
    EXPECT_NE(text.find("timed: conv "), std::string::npos) << text;
    EXPECT_NE(text.find("project kernel kernels/pwconv.cu"), std::string::npos) << text;
    EXPECT_NE(text.find("timed: pwconv "), std::string::npos) << text;
    EXPECT_NE(text.find("project kernel rows timed: 2, their checks passed: 2"), std::string::npos) << text;
    EXPECT_NE(text.find("fused graphs timed: " + std::to_string(fused_timed)), std::string::npos) << text;
}

// The control convolution of a 1x1 shape d (channels last) as a plan, with its bindings (uids 1, 2, 3).
struct ControlPlan {
    rt::CudnnDesc plan;
    int64_t ws = 0;
    std::vector<tools::FusionBinding> bindings = {
        {1, tools::FusionRole::X}, {2, tools::FusionRole::W}, {3, tools::FusionRole::Y}};
};
ControlPlan control_plan(const rt::Exec& ex, const tools::FusionDims& d) {
    auto tensor = [](int64_t uid, std::vector<int64_t> dims) {
        rt::CudnnTensorSpec s;
        s.dtype = CUDNN_DATA_BFLOAT16;
        s.strides = rt::channels_last_strides(dims);
        s.dims = std::move(dims);
        s.uid = uid;
        return rt::cudnn_tensor(s);
    };
    const rt::CudnnDesc x = tensor(1, {d.n, d.c_in, d.h, d.w}), w = tensor(2, {d.c_out, d.c_in, d.k, d.k});
    const rt::CudnnDesc y = tensor(3, {d.n, d.c_out, d.h, d.w});
    rt::CudnnConvSpec cs;
    cs.pre_pad = cs.post_pad = {0, 0};
    cs.stride = cs.dilation = {1, 1};
    const rt::CudnnDesc cd = rt::cudnn_conv_desc(cs);
    rt::CudnnDesc op, graph;
    std::string why;
    SF_CHECK(kern::conv_cudnn_operation(kern::ConvOp::Fprop, x, w, y, cd, 0.0f, &op, &why), "%s", why.c_str());
    const rt::CudnnTarget t = rt::CudnnTarget::of(ex.cudnn);
    SF_CHECK(rt::cudnn_try_op_graph(t, {&op}, &graph, &why), "%s", why.c_str());
    ControlPlan c;
    for (const rt::CudnnEngineConfig& cfg : rt::cudnn_engine_configs(t, graph, &why))
        if (rt::cudnn_try_plan(t, cfg, &c.plan, &c.ws, &why)) return c;
    SF_FAIL("no plan for the control: %s", why.c_str());
}

// FusionTimer on its own, with a plain convolution standing in for a fused graph (the emulated cuDNN
// has no pointwise or genstats operations; on a GPU this checks the checks too): as what it is, it is
// timed against itself and passes; claimed to apply a SiLU prologue, its y is the plain conv's, not
// the conv of the apply pass's output, and the y check fails; claimed to write genstats' sums, it
// writes none, and that check fails. A fused graph before any control is refused.
TEST(ToolsPlanFusionGpu, TimerChecksCatchAGraphThatComputesSomethingElse) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const tools::FusionDims d{2, 32, 8, 16, 32, 1};
    tools::FusionTimer timer(ctx.exec(), d, 5);
    ControlPlan stand_in = control_plan(ctx.exec(), d);
    const nlohmann::json early = timer.time_fused(stand_in.plan, stand_in.ws, stand_in.bindings, false,
                                                  kern::Act::None, false, false);
    EXPECT_NE(early.value("error", "").find("control"), std::string::npos) << early.dump();

    ControlPlan control = control_plan(ctx.exec(), d);
    const nlohmann::json c = timer.set_control(std::move(control.plan), control.ws, control.bindings);
    ASSERT_FALSE(c.contains("error")) << c.dump();
    EXPECT_GT(c["ms"].get<double>(), 0.0);

    const nlohmann::json same = timer.time_fused(stand_in.plan, stand_in.ws, stand_in.bindings, false,
                                                 kern::Act::None, false, false);
    ASSERT_FALSE(same.contains("error")) << same.dump();
    EXPECT_TRUE(same["ok"].get<bool>()) << same.dump();
    EXPECT_GT(same["ms"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(same["unfused_ms"].get<double>(), c["ms"].get<double>());

    const nlohmann::json pro = timer.time_fused(stand_in.plan, stand_in.ws, stand_in.bindings, true,
                                                kern::Act::Silu, false, false);
    ASSERT_FALSE(pro.contains("error")) << pro.dump();
    EXPECT_GT(pro["check"]["y_rel_l2"].get<double>(), 1e-2) << pro.dump();
    EXPECT_FALSE(pro["ok"].get<bool>()) << pro.dump();
    EXPECT_GT(pro["unfused"]["apply_ms"].get<double>(), 0.0);

    const nlohmann::json gs = timer.time_fused(stand_in.plan, stand_in.ws, stand_in.bindings, false,
                                               kern::Act::None, false, true);
    ASSERT_FALSE(gs.contains("error")) << gs.dump();
    EXPECT_FALSE(gs["ok"].get<bool>()) << gs.dump();
    EXPECT_GT(gs["unfused"]["stats_ms"].get<double>(), 0.0);
}

// The project's 1x1 conv through the timer: refused before a control and on a shape it does not run
// (cin 48); plain and with the SiLU prologue and the statistics it is timed, against the control (and the
// apply and statistics passes), and its y and statistics pass their checks.
TEST(ToolsPlanFusionGpu, TimerTimesAndChecksTheProjectsPointwiseConv) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const tools::FusionDims d{2, 32, 8, 16, 64, 1};
    tools::FusionTimer timer(ctx.exec(), d, 6);
    EXPECT_NE(timer.time_custom(false, kern::Act::None, false).value("error", "").find("control"), std::string::npos);
    ControlPlan control = control_plan(ctx.exec(), d);
    ASSERT_FALSE(timer.set_control(std::move(control.plan), control.ws, control.bindings).contains("error"));
    for (const bool prologue : {false, true})
        for (const bool stats : {false, true}) {
            const nlohmann::json t = timer.time_custom(prologue, kern::Act::Silu, stats);
            const std::string what = std::string(prologue ? "prologue " : "") + (stats ? "statistics" : "plain");
            ASSERT_FALSE(t.contains("error")) << what << ": " << t.dump();
            EXPECT_TRUE(t["ok"].get<bool>()) << what << ": " << t.dump();
            EXPECT_GT(t["ms"].get<double>(), 0.0) << what;
            EXPECT_EQ(t["unfused"].contains("apply_ms"), prologue) << what;
            EXPECT_EQ(t["unfused"].contains("stats_ms"), stats) << what;
            EXPECT_LE(t["check"]["y_rel_l2"].get<double>(), 1e-2) << what;
            if (stats) {
                EXPECT_LE(t["check"]["mean_err_in_std"].get<double>(), 1e-3) << what;
            }
        }

    const tools::FusionDims odd{2, 48, 8, 16, 32, 1};
    tools::FusionTimer other(ctx.exec(), odd, 7);
    ControlPlan oc = control_plan(ctx.exec(), odd);
    ASSERT_FALSE(other.set_control(std::move(oc.plan), oc.ws, oc.bindings).contains("error"));
    EXPECT_NE(other.time_custom(false, kern::Act::None, false).value("error", "").find("not a shape the project's 1x1"),
              std::string::npos);
}

}  // namespace
