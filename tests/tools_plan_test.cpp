// `slidefuse plan` (tools/plan_report.h): the JSON document's fields, its consistency with the
// planner, linearity of the batch-dependent regions, the text table, and bad arguments.
#include <gtest/gtest.h>

#include "model/net.h"
#include "tests/support/compare.h"
#include "tools/plan_report.h"

namespace {

tools::PlanArgs parse(const std::vector<std::string>& args) {
    bool help = false;
    const tools::PlanArgs a = tools::parse_plan_args(args, &help);
    EXPECT_FALSE(help);
    return a;
}

TEST(PlanCommand, JsonFieldsMatchThePlanner) {
    const tools::PlanArgs a = parse({"--height", "128", "--width", "256", "--batch", "4"});
    const nlohmann::json d = tools::plan_json(a);
    EXPECT_EQ(d["schema"], "slidefuse.plan/1");
    EXPECT_EQ(d["backend"], "cuda");
    EXPECT_EQ(d["activation_element_bytes"], 2);
    EXPECT_EQ(d["shape"]["batch"], 4);
    EXPECT_EQ(d["shape"]["height"], 128);
    model::NetShape s;
    s.batch = 4;
    s.height = 128;
    s.width = 256;
    const model::SiderNetCuda net(s, model::DryRun{});
    const model::MemoryPlan m = net.plan().memory();
    const nlohmann::json& r = d["regions"];
    EXPECT_EQ(d["parameters_count"].get<size_t>(), net.table().num_parameters());
    EXPECT_EQ(r["parameter_grads"]["bytes"].get<size_t>(), net.table().flat_size * 4);
    EXPECT_EQ(r["optimizer_state"]["bytes"].get<size_t>(), net.table().flat_size * 8);
    EXPECT_EQ(r["parameters"]["bytes"].get<size_t>() + r["parameter_grads"]["bytes"].get<size_t>() +
                  r["optimizer_state"]["bytes"].get<size_t>(),
              m.params);
    EXPECT_EQ(r["activations"]["bytes"].get<size_t>(), m.activations);
    EXPECT_EQ(r["activation_grads"]["bytes"].get<size_t>(), m.activation_grads);
    EXPECT_TRUE(r["parameters"]["per_sample"].is_null());
    EXPECT_DOUBLE_EQ(r["activations"]["per_sample"].get<double>(), m.activations / 4.0);
    size_t sum = 0;
    for (const auto& kv : r.items()) sum += kv.value()["bytes"].get<size_t>();
    EXPECT_EQ(d["total"]["bytes"].get<size_t>(), sum);
    const nlohmann::json& g = d["activation_grads"];
    EXPECT_EQ(g["zeroed_per_micro_step_bytes"].get<size_t>(), m.grad_zeroed);
    EXPECT_LT(g["shared_bytes"].get<size_t>(), g["unshared_bytes"].get<size_t>());
    EXPECT_FALSE(d["workspace"]["includes_conv_workspace"].get<bool>());
    // The conv workspace hook adds to the workspace region and says so.
    const nlohmann::json w = tools::plan_json(a, 1 << 20);
    EXPECT_EQ(w["regions"]["workspace"]["bytes"].get<size_t>(), r["workspace"]["bytes"].get<size_t>() + (1 << 20));
    EXPECT_TRUE(w["workspace"]["includes_conv_workspace"].get<bool>());
    const std::string text = tools::plan_text(d);
    for (const char* k : {"activation_grads", "optimizer_state", "zeroed per micro-step", "batch 4", "2x128x256"})
        EXPECT_NE(text.find(k), std::string::npos) << k << "\n" << text;
}

TEST(PlanCommand, BatchDependentRegionsAreLinearInTheBatch) {
    for (const char* backend : {"cuda", "cpu"}) {
        const nlohmann::json a = tools::plan_json(parse({"--batch", "4", "--backend", backend}));
        const nlohmann::json b = tools::plan_json(parse({"--batch", "8", "--backend", backend}));
        EXPECT_EQ(a["activation_element_bytes"], std::string(backend) == "cuda" ? 2 : 4);
        for (const char* k : {"activations", "activation_grads"}) {
            const double ra = a["regions"][k]["per_sample"].get<double>(),
                         rb = b["regions"][k]["per_sample"].get<double>();
            EXPECT_NEAR(rb / ra, 1.0, 0.01) << backend << " " << k;
        }
        for (const char* k : {"parameters", "parameter_grads", "optimizer_state", "buffers"})
            EXPECT_EQ(a["regions"][k]["bytes"], b["regions"][k]["bytes"]) << backend << " " << k;
    }
}

TEST(PlanCommand, BadArgumentsAreNamed) {
    bool help = false;
    SF_EXPECT_ERROR(tools::parse_plan_args({"--batch", "0"}, &help), "--batch", "positive integer", "'0'");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--height", "12x"}, &help), "--height", "'12x'");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--width"}, &help), "--width needs a value");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "tpu"}, &help), "cuda or cpu", "'tpu'");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--size", "3"}, &help), "unexpected argument '--size'");
    SF_EXPECT_ERROR(tools::plan_json(parse({"--height", "100"})), "height", "multiple of 32");
    SF_EXPECT_ERROR(tools::plan_json(parse({"--channels", "3"})), "channels");
    tools::parse_plan_args({"--help"}, &help);
    EXPECT_TRUE(help);
}

}  // namespace
