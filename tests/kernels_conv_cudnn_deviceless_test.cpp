// cuDNN plans without a device (rt::CudnnTarget with a device property descriptor,
// kern::conv_plan_probe, `slidefuse plan --cudnn-device`), against the real cuDNN library
// installed here (>= 9.8) for the GPUs of configs/devices/. No GPU is used: what this proves is
// what the real library accepts and proposes for those GPUs, not that the plans run.
//   - the committed device files finalize; a missing key and a non-JSON file are refused with the
//     library's reason / a clear message;
//   - the data-type rule (tests/support/cudnn_probe.h) that the emulation follows holds for the real
//     library: engines only when x, w and y share a type;
//   - consequently the wgrad plans are the bf16-scratch variant (fp32 dW has no engine);
//   - every convolution key of the CUDA step at the gpu_quick size (256x512, batch 128) has a plan
//     on the H100 and the H200, under both policies; the plan command's JSON agrees;
//   - `plan --fusion-graphs`: every BatchNorm fusion graph is reported and the control convs plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/conv_cudnn_probe.h"
#include "runtime/cudnn_graph.h"
#include "tests/support/compare.h"
#include "tests/support/cudnn_probe.h"
#include "tools/plan_cudnn.h"
#include "tools/plan_fusion.h"

namespace {

const char* const kDevices[] = {"h100-sxm5-80gb.json", "h200-sxm-141gb.json"};

std::string device_path(const char* file) { return std::string(SF_SOURCE_DIR) + "/configs/devices/" + file; }

bool runtime_has_device_props() { return cudnnGetVersion() >= rt::kCudnnDevicePropMinRuntime; }

#define SF_REQUIRE_DEVICE_PROPS()                                                                  \
    do {                                                                                           \
        if (!runtime_has_device_props()) GTEST_SKIP() << "the cuDNN runtime here is older than 9.8"; \
    } while (0)

kern::ConvShape shape(int n, int h, int w, int cin, int cout, int k, int stride, int groups = 1) {
    return kern::ConvShape{n, h, w, cin, cout, k, stride, (k - 1) / 2, groups, false};
}

TEST(CudnnDeviceless, DeviceFilesFinalizeAndBadOnesAreRefused) {
    SF_REQUIRE_DEVICE_PROPS();
    for (const char* f : kDevices) {
        const rt::CudnnDesc d = rt::cudnn_device_prop_from_json(tools::read_device_json(device_path(f)));
        EXPECT_TRUE(d.finalized()) << f;
    }
    std::string json = tools::read_device_json(device_path(kDevices[0]));
    const size_t at = json.find("\"multiProcessorCount\"");
    ASSERT_NE(at, std::string::npos);
    json.replace(at, std::string("\"multiProcessorCount\"").size(), "\"multiProcessorCountX\"");
    // cuDNN's last-error string says only that a key is missing; its debug log names it.
    SF_EXPECT_ERROR(rt::cudnn_device_prop_from_json(json), "refuses this device property JSON", "HasMember",
                    "CUDNN_LOGERR_DBG=1");
    SF_EXPECT_ERROR(rt::cudnn_device_prop_from_json(""), "empty JSON");
    SF_EXPECT_ERROR(tools::read_device_json("/nonexistent/device.json"), "cannot read the device property file");
    tools::PlanArgs a;
    SF_EXPECT_ERROR(tools::cudnn_plans_json(a, "{not json", "bad.json", kern::run_conv_policy(true)), "bad.json",
                    "is not JSON");
    rt::CudnnTarget both{reinterpret_cast<cudnnHandle_t>(0x10), nullptr};
    const rt::CudnnDesc d = rt::cudnn_device_prop_from_json(tools::read_device_json(device_path(kDevices[0])));
    both.device = &d;
    SF_EXPECT_ERROR(both.validate("test"), "exactly one of a handle and a device property descriptor");
    SF_EXPECT_ERROR(rt::CudnnTarget{}.validate("test"), "exactly one");
    std::string why;
    if (!sftest::gpu_available(&why))
        SF_EXPECT_ERROR(tools::cudnn_plans_json_gpu(a, kern::run_conv_policy(true)),
                        "--cudnn-device gpu needs a usable CUDA device here");
}

TEST(CudnnDeviceless, EnginesOnlyForOneDataType) {
    SF_REQUIRE_DEVICE_PROPS();
    const rt::CudnnDesc d = rt::cudnn_device_prop_from_json(tools::read_device_json(device_path(kDevices[0])));
    const cudnnDataType_t types[] = {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
    for (kern::ConvOp op : {kern::ConvOp::Fprop, kern::ConvOp::Dgrad, kern::ConvOp::Wgrad})
        for (cudnnDataType_t x : types)
            for (cudnnDataType_t w : types)
                for (cudnnDataType_t y : types) {
                    std::string why;
                    const size_t n = sftest::cudnn_configs_for_types(rt::CudnnTarget::of(d), op, x, w, y, &why);
                    EXPECT_EQ(n > 0, sftest::cudnn_same_type_rule(x, w, y))
                        << kern::conv_op_name(op) << " x/w/y types " << x << "/" << w << "/" << y << ": " << n
                        << " configurations (" << why << "); if a newer cuDNN changed this, update the rule, the "
                        << "emulation (tests/emu/cudnn_descriptors.cpp) and docs/CONV_CUDNN.md";
                }
}

TEST(CudnnDeviceless, WgradTakesTheBf16ScratchVariant) {
    SF_REQUIRE_DEVICE_PROPS();
    const rt::CudnnDesc d = rt::cudnn_device_prop_from_json(tools::read_device_json(device_path(kDevices[0])));
    const kern::ConvShape s = shape(8, 32, 64, 64, 64, 3, 1);
    const kern::ConvPolicy pol = kern::run_conv_policy(true);
    const kern::ConvPlanProbe f = kern::conv_plan_probe(rt::CudnnTarget::of(d), s, kern::ConvOp::Fprop, false, pol);
    ASSERT_TRUE(f.ok) << f.error;
    EXPECT_EQ(f.accum, kern::ConvAccum::Overwrite);
    EXPECT_EQ(f.candidates, 1);
    const kern::ConvPlanProbe w = kern::conv_plan_probe(rt::CudnnTarget::of(d), s, kern::ConvOp::Wgrad, false, pol);
    ASSERT_TRUE(w.ok) << w.error;
    EXPECT_EQ(w.accum, kern::ConvAccum::ScratchBf16);
    EXPECT_EQ(w.scratch, s.weight_numel() * sizeof(kern::bf16));
    ASSERT_EQ(w.reports.size(), 3u);  // in-place and scratch-fp32 (no configurations), then scratch-bf16
    EXPECT_NE(w.reports[0].find("in-place(beta=1): no engine configurations"), std::string::npos) << w.reports[0];
    EXPECT_NE(w.reports[1].find("scratch-fp32+add: no engine configurations"), std::string::npos) << w.reports[1];
    const kern::ConvPlanProbe o = kern::conv_plan_probe(rt::CudnnTarget::of(d), s, kern::ConvOp::Dgrad, true, pol);
    ASSERT_TRUE(o.ok) << o.error;
    EXPECT_EQ(o.accum, kern::ConvAccum::Overwrite);  // a beta = 0 engine: nothing zeroed
    kern::ConvPolicy tuned = kern::run_conv_policy(false);
    const kern::ConvPlanProbe t = kern::conv_plan_probe(rt::CudnnTarget::of(d), s, kern::ConvOp::Fprop, false, tuned);
    ASSERT_TRUE(t.ok) << t.error;
    EXPECT_GT(t.candidates, 1);
    EXPECT_LE(t.candidates, tuned.max_candidates);
    EXPECT_GE(t.max_workspace, t.workspace);
}

TEST(CudnnDeviceless, EveryStepConvHasAPlanAtTheGpuQuickSize) {
    SF_REQUIRE_DEVICE_PROPS();
    tools::PlanArgs a;
    a.batch = 128;  // configs/gpu_quick.yaml
    a.height = 256;
    a.width = 512;
    // Both policies in the default fusion up-path order; the conv_first order (its 1x1 up-path convs
    // at the source resolution: new shapes) with the deterministic one.
    struct Case {
        bool deterministic;
        model::UpOrder order;
    };
    const Case cases[] = {{true, model::UpOrder::UpsampleFirst},
                          {false, model::UpOrder::UpsampleFirst},
                          {true, model::UpOrder::ConvFirst}};
    for (const char* f : kDevices)
        for (const Case& k : cases) {
            const bool deterministic = k.deterministic;
            a.up_order = k.order;
            const nlohmann::json c = tools::cudnn_plans_json(a, tools::read_device_json(device_path(f)),
                                                             device_path(f), kern::run_conv_policy(deterministic));
            SCOPED_TRACE(std::string(f) + (deterministic ? " deterministic " : " autotune ") +
                         model::up_order_name(k.order));
            EXPECT_EQ(c["failed"].get<size_t>(), 0u) << tools::cudnn_plans_text(c, true);
            EXPECT_EQ(c["failed_custom_covered"].get<size_t>(), 0u);
            EXPECT_EQ(c["planned"].get<size_t>(), c["keys"].get<size_t>());
            EXPECT_GT(c["keys"].get<size_t>(), 100u);
            size_t wgrad = 0;
            for (const nlohmann::json& p : c["plans"]) {
                ASSERT_TRUE(p["ok"].get<bool>()) << p.dump();
                if (p["op"] == "wgrad") {
                    ++wgrad;
                    EXPECT_EQ(p["variant"], "scratch-bf16+add") << p.dump();
                }
                EXPECT_LE(p["cudnn_ws"].get<size_t>(), size_t(256) << 20) << p.dump();  // the policy's limit
            }
            EXPECT_EQ(c["variants"]["scratch-bf16+add"].get<size_t>(), wgrad);
            EXPECT_EQ(c["dgrad_zeroed_bytes"].get<size_t>(), 0u);  // every overwrite dgrad has a beta = 0 plan
        }
}

// `plan --fusion-graphs` (tools/plan_fusion.h): every graph of the 4 shapes x 10 variants is reported,
// each control convolution (what the step plans) gets plans, and the counts add up. Whether the fused
// graphs plan is the library's answer, printed, not asserted: without a device cuDNN 9.19 gives them
// no plan; a GPU's handle may (scripts/gpu_verify.sh fused asks it).
TEST(CudnnDeviceless, FusionGraphsAreReportedAndTheControlPlans) {
    SF_REQUIRE_DEVICE_PROPS();
    bool help = false;
    const tools::PlanArgs a = tools::parse_plan_args(
        {"--batch", "2", "--height", "64", "--width", "128", "--cudnn-device", device_path(kDevices[0]),
         "--fusion-graphs"},
        &help);
    ASSERT_TRUE(a.fusion_graphs);
    const nlohmann::json d = tools::cudnn_fusion_json(a, tools::read_device_json(a.cudnn_device), a.cudnn_device);
    EXPECT_EQ(d["shapes"], 4);
    ASSERT_EQ(d["graphs"].size(), 40u);
    int control = 0, fused = 0;
    for (const nlohmann::json& g : d["graphs"]) {
        EXPECT_TRUE(g["accepted"].get<bool>()) << g.dump();  // cuDNN finalizes every graph we build
        EXPECT_GT(g["engines"].get<int>(), 0) << g.dump();
        EXPECT_LE(g["engines_planned"].get<int>(), g["engines_finalized"].get<int>()) << g.dump();
        EXPECT_LE(g["engines_finalized"].get<int>(), g["engines"].get<int>()) << g.dump();
        const bool planned = g["engines_planned"].get<int>() > 0 || g["heuristic_plans"].get<int>() > 0;
        if (g["graph"] == "conv alone (control)") {
            EXPECT_TRUE(planned) << g.dump();
            control += planned;
        } else {
            fused += planned;
        }
    }
    EXPECT_EQ(d["control_planned"], control);
    EXPECT_EQ(d["fused_planned"], fused);
    const std::string text = tools::cudnn_fusion_text(d);
    EXPECT_NE(text.find("scale+bias (fp32) + silu + conv + genstats"), std::string::npos);
    EXPECT_NE(text.find("control graphs with a plan: 4 of 4 shapes"), std::string::npos);
    std::printf("%s", text.c_str());
    SF_EXPECT_ERROR(tools::parse_plan_args({"--fusion-graphs"}, &help), "--fusion-graphs",
                    "give --cudnn-device FILE|gpu too");
    // Deviceless nothing is executed, and the report says so.
    EXPECT_NE(text.find("built and not executed"), std::string::npos);
    EXPECT_FALSE(d.contains("fused_timed"));
    // --time executes the graphs: only through a GPU's handle.
    SF_EXPECT_ERROR(tools::parse_plan_args({"--time"}, &help), "--time", "--fusion-graphs --cudnn-device gpu");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--cudnn-device", a.cudnn_device, "--fusion-graphs", "--time"}, &help),
                    "--time executes the fusion graphs");
    EXPECT_TRUE(tools::parse_plan_args({"--cudnn-device", "gpu", "--fusion-graphs", "--time"}, &help).fusion_time);
}

}  // namespace
