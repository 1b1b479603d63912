// `slidefuse check` on the CPU: the fp64 metrics on hand-made vectors (NaN never passes), the
// report's ordering and first-failure marking on hand-made captures (forward outputs first, then
// the loss, then gradients in backward order; the "~0" rule of a conv bias before BatchNorm), the
// table and JSON, the network's layer list against the planner's, and the planted perturbation:
// the CPU reference against itself with one layer's weights changed names exactly that layer's
// forward output first, through the library and through the command (exit codes 0/3/1, and 2 on
// a machine without a GPU).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/net.h"
#include "tests/support/compare.h"
#include "tools/check.h"
#include "tools/layer_check.h"

namespace {

using tools::CheckEntry;
using tools::CheckReport;
using tools::CheckTolerance;
using tools::Phase;
using tools::StepCapture;
using tools::TensorMetrics;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorMetrics metrics(const std::vector<float>& got, const std::vector<float>& ref) {
    return tools::compare_tensors(got.data(), ref.data(), got.size());
}

TEST(CheckMetrics, HandMadeVectors) {
    const std::vector<float> a = {1, -2, 3, 0.5f};
    TensorMetrics m = metrics(a, a);
    EXPECT_EQ(m.rel_l2, 0);
    EXPECT_NEAR(m.cosine, 1, 1e-15);
    EXPECT_EQ(m.numel, 4u);
    EXPECT_TRUE(tools::within(m, CheckTolerance{}));

    const std::vector<float> twice = {2, -4, 6, 1};
    m = metrics(twice, a);  // same direction, twice the size: rel L2 1, cosine 1
    EXPECT_NEAR(m.rel_l2, 1, 1e-15);
    EXPECT_NEAR(m.cosine, 1, 1e-15);
    EXPECT_NEAR(m.max_abs, 3, 1e-15);
    EXPECT_FALSE(tools::within(m, CheckTolerance{}));

    const std::vector<float> neg = {-1, 2, -3, -0.5f};
    m = metrics(neg, a);
    EXPECT_NEAR(m.rel_l2, 2, 1e-15);
    EXPECT_NEAR(m.cosine, -1, 1e-15);

    m = metrics({0, 1}, {1, 0});  // orthogonal, equal norms: rel L2 sqrt(2)
    EXPECT_NEAR(m.cosine, 0, 1e-15);
    EXPECT_NEAR(m.rel_l2, std::sqrt(2.0), 1e-15);

    m = metrics({0, 0}, {0, 0});
    EXPECT_EQ(m.rel_l2, 0);
    EXPECT_EQ(m.cosine, 1);
    m = metrics({3, 4}, {0, 0});  // zero reference: absolute L2, cosine 0
    EXPECT_NEAR(m.rel_l2, 5, 1e-15);
    EXPECT_EQ(m.cosine, 0);

    // 1% noise in one element of four: rel L2 = 0.01 * 3 / ||a||.
    m = metrics({1, -2, 3.03f, 0.5f}, a);
    EXPECT_NEAR(m.rel_l2, 0.03 / std::sqrt(14.25), 1e-7);
}

TEST(CheckMetrics, NonFiniteNeverPasses) {
    const std::vector<float> a = {1, 2, 3};
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (const std::vector<float>& bad : {std::vector<float>{1, nan, 3}, std::vector<float>{1, 2, inf}}) {
        const TensorMetrics m = metrics(bad, a);
        EXPECT_EQ(m.nonfinite, 1u);
        EXPECT_TRUE(std::isnan(m.rel_l2));
        EXPECT_TRUE(std::isnan(m.cosine));
        EXPECT_FALSE(tools::within(m, CheckTolerance{1e30, -1}));
        EXPECT_FALSE(tools::within(metrics(a, bad), CheckTolerance{1e30, -1}));  // in the reference too
    }
    TensorMetrics s = tools::compare_scalars(kNaN, 1.0);
    EXPECT_FALSE(tools::within(s, CheckTolerance{1e30, -1}, false));
    s = tools::compare_scalars(1.01, 1.0);
    EXPECT_NEAR(s.rel_l2, 0.01, 1e-12);
    EXPECT_TRUE(tools::within(s, CheckTolerance{}, false));  // scalars: no cosine
    EXPECT_FALSE(tools::within(s, CheckTolerance{}, true));  // with one (NaN): never
    EXPECT_NEAR(tools::compare_scalars(0.5, 0.0).rel_l2, 0.5, 1e-15);
}

// ---- hand-made captures: three layers, forward order 0 1 2, backward 2 1 0 ----

model::ParamTable small_table() {
    model::ParamTable t;
    size_t off = 0;
    auto add = [&](const std::string& name, size_t n) {
        model::ParamInfo p;
        p.name = name;
        p.numel = n;
        p.offset = off;
        off += 16;
        t.params.push_back(p);
    };
    add("stem.conv1.conv.weight", 6);
    add("stem.conv1.conv.bias", 2);  // before BatchNorm: its gradient is ~0
    add("stem.conv1.bn.weight", 2);
    add("stem.conv1.bn.bias", 2);
    add("lite_fpn.fuse_1_16.weight_a", 1);  // belongs to no conv layer: attached to the fuse's smooth
    add("lite_fpn.fuse_1_16.smooth.conv.weight", 4);
    add("dual_head.offset.conv2.weight", 4);
    add("dual_head.offset.conv2.bias", 2);
    t.flat_size = off;
    return t;
}

StepCapture small_capture() {
    StepCapture c;
    const char* names[3] = {"stem.conv1", "lite_fpn.fuse_1_16.smooth", "dual_head.offset.conv2"};
    for (int l = 0; l < 3; ++l) {
        tools::LayerCapture lc;
        lc.name = names[l];
        for (double v : sftest::random_uniform(8, 10 + l)) lc.out.push_back(static_cast<float>(v));
        for (double v : sftest::random_uniform(8, 20 + l)) lc.grad_out.push_back(static_cast<float>(v));
        c.layers.push_back(lc);
    }
    c.forward_order = {0, 1, 2};
    c.backward_order = {2, 1, 0};
    for (double v : sftest::random_uniform(small_table().flat_size, 30)) c.param_grads.push_back(static_cast<float>(v));
    c.param_grads[16] = 1e-8f;  // stem.conv1.conv.bias: rounding noise
    c.param_grads[17] = -2e-8f;
    c.loss.focal_gap = 1.5;
    c.loss.total = 2.0;
    return c;
}

const CheckEntry& first(const CheckReport& r) {
    EXPECT_GE(r.first_failure, 0);
    return r.entries.at(static_cast<size_t>(r.first_failure));
}

TEST(CheckReport, IdenticalCapturesPass) {
    const StepCapture c = small_capture();
    const CheckReport r = tools::build_report(c, c, small_table(), CheckTolerance{});
    EXPECT_TRUE(r.passed());
    EXPECT_EQ(r.failures(), 0u);
    // 3 outs + 3 grad outs + 8 parameter grads + 8 loss terms, every one in the evaluation order once.
    EXPECT_EQ(r.entries.size(), 22u);
    EXPECT_EQ(r.eval_order.size(), r.entries.size());
    EXPECT_NE(tools::verdict(r).find("all 22 tensors within tolerance"), std::string::npos) << tools::verdict(r);
    // The orphan scalar is reported with the fuse's smooth, named by what follows the shared part.
    bool found = false;
    for (const CheckEntry& e : r.entries)
        if (e.tensor == "grad weight_a") found = e.layer == "lite_fpn.fuse_1_16.smooth";
    EXPECT_TRUE(found);
}

// x * (1 + a * (+1, -1, +1, ...)): relative L2 a from x.
std::vector<float> scaled(const std::vector<float>& x, double a) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i] * (1.0 + (i % 2 ? -a : a)));
    return y;
}

// The bf16-weights floor (build_report's `floor`): a tensor beyond the fixed tolerance passes, as
// rule "floor", only within the factor of how far the floor is off; an exact floor excuses nothing.
TEST(CheckReport, Bf16FloorExcusesOnlyWhatRoundingAloneCannotMeet) {
    const StepCapture ref = small_capture();
    const model::ParamTable t = small_table();
    StepCapture got = ref, floor = ref;
    got.layers[1].out = scaled(ref.layers[1].out, 0.1);     // beyond 5e-2
    floor.layers[1].out = scaled(ref.layers[1].out, 0.04);  // within 3x of a floor of 0.04
    got.layers[2].out = scaled(ref.layers[2].out, 0.5);     // far beyond a floor of 0.08
    floor.layers[2].out = scaled(ref.layers[2].out, 0.08);
    got.layers[0].grad_out = scaled(ref.layers[0].grad_out, 0.1);  // the floor is exact here
    const CheckReport without = tools::build_report(ref, got, t, CheckTolerance{});
    EXPECT_EQ(without.failures(), 3u);
    const CheckReport r = tools::build_report(ref, got, t, CheckTolerance{}, &floor, 3.0);
    EXPECT_EQ(r.failures(), 2u) << tools::verdict(r);
    for (const CheckEntry& e : r.entries) {
        if (e.layer == "lite_fpn.fuse_1_16.smooth" && e.tensor == "out") {
            EXPECT_TRUE(e.pass);
            EXPECT_EQ(e.rule, "floor");
            EXPECT_NEAR(e.floor.rel_l2, 0.04, 1e-6);
        }
        if (e.layer == "dual_head.offset.conv2" && e.tensor == "out") {
            EXPECT_FALSE(e.pass);
        }
        if (e.layer == "stem.conv1" && e.tensor == "grad out") {
            EXPECT_FALSE(e.pass);
            EXPECT_EQ(e.floor.rel_l2, 0);
        }
    }
    EXPECT_EQ(first(r).layer, "dual_head.offset.conv2");
    EXPECT_NE(tools::verdict(r).find("bf16-weights floor: rel L2 8.000e-02"), std::string::npos) << tools::verdict(r);
    // A smaller factor no longer excuses the first.
    EXPECT_EQ(tools::build_report(ref, got, t, CheckTolerance{}, &floor, 2.0).failures(), 3u);
    // Passing by the floor is said in the verdict.
    StepCapture only = ref;
    only.layers[1].out = got.layers[1].out;
    const CheckReport p = tools::build_report(ref, only, t, CheckTolerance{}, &floor, 3.0);
    EXPECT_TRUE(p.passed());
    EXPECT_NE(tools::verdict(p).find("1 of them only within 3x the bf16-weights floor"), std::string::npos)
        << tools::verdict(p);
}

TEST(CheckReport, ForwardBeforeLossBeforeBackwardInBackwardOrder) {
    const StepCapture ref = small_capture();
    const model::ParamTable t = small_table();
    StepCapture got = ref;
    got.layers[2].out[3] += 1.0f;       // forward, last layer
    got.layers[0].grad_out[0] += 1.0f;  // backward, last to run
    got.loss.total = 2.5;
    CheckReport r = tools::build_report(ref, got, t, CheckTolerance{});
    EXPECT_EQ(first(r).layer, "dual_head.offset.conv2");
    EXPECT_EQ(first(r).tensor, "out");
    EXPECT_EQ(first(r).phase, Phase::Forward);
    EXPECT_EQ(r.failures(), 3u);

    got.layers[2].out = ref.layers[2].out;
    r = tools::build_report(ref, got, t, CheckTolerance{});
    EXPECT_EQ(first(r).layer, "loss");
    EXPECT_EQ(first(r).tensor, "total");

    // Backward: layer 2 runs first, then layer 1 (grad out, then its parameter grads), then 0.
    got.loss = ref.loss;
    got.param_grads[5 * 16 + 1] += 1.0f;  // lite_fpn.fuse_1_16.smooth.conv.weight
    r = tools::build_report(ref, got, t, CheckTolerance{});
    EXPECT_EQ(first(r).layer, "lite_fpn.fuse_1_16.smooth");
    EXPECT_EQ(first(r).tensor, "grad conv.weight");
    EXPECT_EQ(first(r).phase, Phase::Backward);
    got.layers[1].grad_out[2] += 1.0f;
    r = tools::build_report(ref, got, t, CheckTolerance{});
    EXPECT_EQ(first(r).tensor, "grad out");
    EXPECT_EQ(first(r).layer, "lite_fpn.fuse_1_16.smooth");
}

TEST(CheckReport, ConvBiasBeforeBatchNormIsJudgedBySize) {
    const StepCapture ref = small_capture();
    StepCapture got = ref;
    got.param_grads[16] = -3e-8f;  // other noise: cosine meaningless, size negligible
    got.param_grads[17] = 1e-8f;
    CheckReport r = tools::build_report(ref, got, small_table(), CheckTolerance{});
    EXPECT_TRUE(r.passed()) << tools::verdict(r);
    got.param_grads[16] = 0.5f;  // as large as the bn.bias gradient: wrong
    r = tools::build_report(ref, got, small_table(), CheckTolerance{});
    EXPECT_EQ(first(r).tensor, "grad conv.bias");
    EXPECT_EQ(first(r).rule, "~0");
    EXPECT_NE(tools::verdict(r).find("expected ~0"), std::string::npos) << tools::verdict(r);
}

TEST(CheckReport, TableAndJson) {
    const StepCapture ref = small_capture();
    StepCapture got = ref;
    got.layers[1].out[0] = std::numeric_limits<float>::quiet_NaN();
    got.layers[2].out[1] += 0.5f;
    got.param_grads[16] = -3e-8f;  // conv bias noise: a huge relative L2 that passes ("~0")
    const CheckReport r = tools::build_report(ref, got, small_table(), CheckTolerance{});
    const std::string text = tools::format_report(r);
    // One line per layer, the first failure marked on its own line.
    size_t lines = 0;
    for (const std::string l : {"stem.conv1 ", "lite_fpn.fuse_1_16.smooth ", "dual_head.offset.conv2 "}) {
        const size_t at = text.find(l);
        ASSERT_NE(at, std::string::npos) << text;
        const std::string line = text.substr(at, text.find('\n', at) - at);
        EXPECT_EQ(line.find("<- first") != std::string::npos, l == std::string("lite_fpn.fuse_1_16.smooth ")) << line;
        EXPECT_EQ(line.find("conv.bias"), std::string::npos) << "a passing ~0 tensor shown as the worst: " << line;
        ++lines;
    }
    EXPECT_EQ(lines, 3u);
    EXPECT_NE(text.find("first beyond tolerance: lite_fpn.fuse_1_16.smooth [out] (forward: 1 non-finite values)"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("focal_gap"), std::string::npos);

    const nlohmann::json j = tools::report_json(r, {{"mode", "reference"}, {"config", {{"batch", 2}}}});
    EXPECT_EQ(j["schema"], "slidefuse.check/1");
    EXPECT_EQ(j["mode"], "reference");
    EXPECT_EQ(j["config"]["batch"], 2);
    EXPECT_FALSE(j["passed"].get<bool>());
    EXPECT_EQ(j["failures"], 2);
    EXPECT_EQ(j["first_failure"]["layer"], "lite_fpn.fuse_1_16.smooth");
    EXPECT_TRUE(j["first_failure"]["rel_l2"].is_null());  // NaN is written as null
    EXPECT_EQ(j["entries"].size(), r.entries.size());
    ASSERT_EQ(j["loss"].size(), 8u);
    EXPECT_EQ(j["loss"][0]["term"], "focal_gap");
    EXPECT_EQ(j["loss"][0]["reference"], 1.5);
    ASSERT_EQ(j["logits"].size(), 1u);
    EXPECT_EQ(j["logits"][0]["head"], "offset");
    EXPECT_FALSE(j["logits"][0]["pass"].get<bool>());
    // Parsed back: valid JSON text.
    EXPECT_EQ(nlohmann::json::parse(j.dump())["schema"], "slidefuse.check/1");
}

TEST(CheckReport, StructureMismatchIsAnError) {
    const StepCapture ref = small_capture();
    StepCapture got = ref;
    got.layers.pop_back();
    SF_EXPECT_ERROR(tools::build_report(ref, got, small_table(), CheckTolerance{}), "2 layers captured", "has 3");
    got = ref;
    got.layers[1].name = "other";
    SF_EXPECT_ERROR(tools::build_report(ref, got, small_table(), CheckTolerance{}), "layer 1 is 'other'");
    got = ref;
    got.layers[0].out.pop_back();
    SF_EXPECT_ERROR(tools::build_report(ref, got, small_table(), CheckTolerance{}), "stem.conv1 'out' has 7 elements");
}

}  // namespace
