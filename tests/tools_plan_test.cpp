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
    // Overwrite-mode dgrad runs beta = 0 plans: 0 zeroed; the bound (no beta = 0 engine anywhere) is
    // every byte first written by a backward-data. The per-shape modes are the planner's ConvUse.
    EXPECT_EQ(g["dgrad_first_write_bytes"].get<size_t>(), m.grad_dgrad_first);
    EXPECT_GT(m.grad_dgrad_first, 0u);
    EXPECT_EQ(g["copies_per_micro_step"].get<size_t>(), m.grad_copies);
    EXPECT_EQ(g["copied_per_micro_step_bytes"].get<size_t>(), m.grad_copied);
    EXPECT_GT(m.grad_copied, 0u);
    EXPECT_EQ(g["dgrad_first_write_zeroed_bytes"].get<size_t>(), 0u);
    EXPECT_EQ(g["dgrad_first_write_zeroed_bound_bytes"].get<size_t>(), m.grad_dgrad_first);
    size_t o = 0, acc = 0, both = 0;
    for (const model::ConvUse& u : net.plan().convs())
        if (u.dgrad) (u.needs_overwrite() && u.needs_accumulate() ? both : (u.needs_overwrite() ? o : acc)) += 1;
    EXPECT_EQ(g["conv_dgrad_modes"]["overwrite_only"].get<size_t>(), o);
    EXPECT_EQ(g["conv_dgrad_modes"]["accumulate_only"].get<size_t>(), acc);
    EXPECT_EQ(g["conv_dgrad_modes"]["both"].get<size_t>(), both);
    const std::string text = tools::plan_text(d);
    for (const char* k : {"activation_grads", "optimizer_state", "zeroed per micro-step", "batch 4", "2x128x256",
                          "by beta=0 plans: 0.00 MB zeroed", "a dry run builds no plans",
                          "without a beta=0 cuDNN engine", "conv backward-data plans per shape"})
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

// --up-order: the network of that order is planned; both orders' up-path work is reported.
TEST(PlanCommand, UpOrderPlansThatNetworkAndReportsBothOrdersUpPaths) {
    const nlohmann::json d =
        tools::plan_json(parse({"--height", "128", "--width", "256", "--batch", "4", "--up-order", "conv_first"}));
    EXPECT_EQ(d["shape"]["fusion_up_order"], "conv_first");
    model::NetShape s{4, 2, 128, 256, model::UpOrder::ConvFirst};
    const model::SiderNetCuda cf(s, model::DryRun{});
    EXPECT_EQ(d["regions"]["activations"]["bytes"].get<size_t>(), cf.plan().memory().activations);
    const nlohmann::json& u = d["fusion_up_paths"];
    EXPECT_EQ(u["count"], 10);
    EXPECT_LT(u["conv_first"]["bytes"].get<double>(), u["upsample_first"]["bytes"].get<double>());
    EXPECT_LT(u["conv_first"]["flops"].get<double>(), u["upsample_first"]["flops"].get<double>());
    // The same figures whichever order is planned.
    const nlohmann::json e = tools::plan_json(parse({"--height", "128", "--width", "256", "--batch", "4"}));
    EXPECT_EQ(e["shape"]["fusion_up_order"], "upsample_first");
    EXPECT_EQ(e["fusion_up_paths"], u);
    EXPECT_GT(e["regions"]["activations"]["bytes"].get<size_t>(), cf.plan().memory().activations);
    EXPECT_NE(tools::plan_text(d).find("fusion up paths conv_first"), std::string::npos);
}

// --fuse-expand-dw: every LiteBlock's expand output has no values (its gradient is still planned), so
// the activations shrink by exactly those tensors (256-byte aligned each); nothing else moves.
TEST(PlanCommand, FusedLiteBlockStoresNoExpandOutput) {
    const nlohmann::json d =
        tools::plan_json(parse({"--height", "128", "--width", "256", "--batch", "4", "--fuse-expand-dw"}));
    const nlohmann::json e = tools::plan_json(parse({"--height", "128", "--width", "256", "--batch", "4"}));
    EXPECT_EQ(d["shape"]["fuse_expand_dw"], true);
    EXPECT_EQ(e["shape"]["fuse_expand_dw"], false);
    model::NetShape s{4, 2, 128, 256};
    s.fuse_expand_dw = true;
    const model::SiderNetCuda fused(s, model::DryRun{});
    size_t expand = 0;
    int blocks = 0;
    for (const model::LayerUse& l : fused.plan().layers()) {
        if (!l.bn_applied_by_consumer) continue;
        ++blocks;
        expand += (l.shape.out().numel() * 2 + 255) / 256 * 256;
    }
    EXPECT_EQ(blocks, 23);  // every LiteBlock: 2 in the stem, 2*2 + 3*3 + 4*2 in the stages
    EXPECT_EQ(d["regions"]["activations"]["bytes"].get<size_t>() + expand,
              e["regions"]["activations"]["bytes"].get<size_t>());
    EXPECT_EQ(d["regions"]["activation_grads"], e["regions"]["activation_grads"]);
    EXPECT_EQ(d["activation_grads"]["tensors"], e["activation_grads"]["tensors"]);
    EXPECT_NE(tools::plan_text(d).find("fused LiteBlock expand+depthwise"), std::string::npos);
    bool help = false;
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "cpu", "--fuse-expand-dw"}, &help), "--fuse-expand-dw",
                    "--backend cpu");
}

// --fuse-dw-pw: every depthwise ConvBN (the LiteBlocks' and the down paths' DSConvs') leaves its BN + SiLU
// to the 1x1 conv after it, so its output has no values: the activations shrink by exactly those tensors;
// with --fuse-expand-dw as well, by both sets (the LiteBlock's depthwise conv is then consumer and
// producer). The gradients' plan does not move.
TEST(PlanCommand, FuseDwPwStoresNoDepthwiseActivation) {
    const std::vector<std::string> base = {"--height", "128", "--width", "256", "--batch", "4"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = base;
        a.insert(a.end(), extra.begin(), extra.end());
        return tools::plan_json(parse(a));
    };
    const nlohmann::json plain = with({}), d = with({"--fuse-dw-pw"}), both = with({"--fuse-dw-pw", "--fuse-expand-dw"});
    const nlohmann::json e = with({"--fuse-expand-dw"});
    EXPECT_EQ(d["shape"]["fuse_dw_pw"], true);
    EXPECT_EQ(plain["shape"]["fuse_dw_pw"], false);
    model::NetShape s{4, 2, 128, 256};
    s.fuse_dw_pw = true;
    const model::SiderNetCuda fused(s, model::DryRun{});
    const std::vector<model::LayerUse>& layers = fused.plan().layers();
    size_t dw_bytes = 0;
    int producers = 0, consumers = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        const model::LayerUse& l = layers[i];
        if (l.bn_applied_by_consumer) {
            ++producers;
            EXPECT_NE(l.name.find(".dw_conv"), std::string::npos) << l.name;
            EXPECT_GT(l.shape.groups, 1) << l.name;
            dw_bytes += (l.shape.out().numel() * 2 + 255) / 256 * 256;
        }
        if (l.input_bn_prologue) {
            ++consumers;
            EXPECT_EQ(l.shape.k, 1) << l.name;
            EXPECT_TRUE(l.name.find(".pw_project") != std::string::npos || l.name.find(".pw_conv") != std::string::npos)
                << l.name;
            ASSERT_GT(i, 0u);
            EXPECT_TRUE(layers[i - 1].bn_applied_by_consumer) << l.name;  // its producer is the layer before
        }
    }
    EXPECT_EQ(producers, 23 + 18);  // 23 LiteBlocks, 18 DSConvs (transitions and fusion down paths)
    EXPECT_EQ(consumers, producers);
    const auto act = [](const nlohmann::json& j) { return j["regions"]["activations"]["bytes"].get<size_t>(); };
    EXPECT_EQ(act(d) + dw_bytes, act(plain));
    EXPECT_EQ(act(both) + dw_bytes, act(e));
    EXPECT_EQ(d["regions"]["activation_grads"], plain["regions"]["activation_grads"]);
    EXPECT_EQ(d["activation_grads"]["tensors"], plain["activation_grads"]["tensors"]);
    EXPECT_NE(tools::plan_text(d).find("depthwise BN inside the 1x1 conv"), std::string::npos);
    // The CPU reference network ignores the switch (it never fuses).
    const model::SiderNet cpu(s, model::DryRun{});
    for (const model::LayerUse& l : cpu.plan().layers()) EXPECT_FALSE(l.bn_applied_by_consumer || l.input_bn_prologue);
    bool help = false;
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "cpu", "--fuse-dw-pw"}, &help), "--fuse-dw-pw",
                    "--backend cpu");
}

// --merge-heads: the four heads' conv1 (3x3 128 -> 64 with bias, all reading Hf) as one 128 -> 256 layer
// named dual_head.conv1 whose backward-data is Hf's gradient's first write (overwrite); the parameter
// table unchanged (the merged layer gathers copies of the heads' own), the activations larger by exactly
// those copies (bf16 weight, fp32 weight gradient, eight 256-vectors), the same 4 conv2 layers.
TEST(PlanCommand, MergeHeadsPlansOneConvForTheFourHeads) {
    const std::vector<std::string> base = {"--height", "128", "--width", "256", "--batch", "4"};
    std::vector<std::string> with = base;
    with.push_back("--merge-heads");
    const nlohmann::json plain = tools::plan_json(parse(base)), d = tools::plan_json(parse(with));
    EXPECT_EQ(d["shape"]["merge_heads"], true);
    EXPECT_EQ(plain["shape"]["merge_heads"], false);
    EXPECT_NE(tools::plan_text(d).find("the heads' conv1 merged"), std::string::npos);
    model::NetShape s{4, 2, 128, 256};
    const model::SiderNetCuda four(s, model::DryRun{});
    s.merge_heads = true;
    const model::SiderNetCuda one(s, model::DryRun{});
    const model::ParamTable& ta = four.table();
    const model::ParamTable& tb = one.table();
    ASSERT_EQ(ta.params.size(), tb.params.size());
    for (size_t i = 0; i < ta.params.size(); ++i) {
        EXPECT_EQ(ta.params[i].name, tb.params[i].name);
        EXPECT_EQ(ta.params[i].offset, tb.params[i].offset);
        EXPECT_EQ(ta.params[i].torch_shape, tb.params[i].torch_shape);
    }
    ASSERT_EQ(ta.buffers.size(), tb.buffers.size());
    for (size_t i = 0; i < ta.buffers.size(); ++i) {
        EXPECT_EQ(ta.buffers[i].name, tb.buffers[i].name);
        EXPECT_EQ(ta.buffers[i].offset, tb.buffers[i].offset);
    }
    int heads_conv1 = 0, merged = 0, conv2 = 0;
    for (const model::LayerUse& l : one.plan().layers()) {
        if (l.name.rfind("dual_head.", 0) == 0 && l.name.find(".conv2") != std::string::npos) {
            ++conv2;  // each writes its slice of the merged gradient once: no read-add in the cost model
            EXPECT_FALSE(l.input_grad_accumulates) << l.name;
        }
        const bool head = l.name.rfind("dual_head.", 0) == 0 && l.name.size() > 6 &&
                          l.name.compare(l.name.size() - 6, 6, ".conv1") == 0;
        if (head && l.name != "dual_head.conv1") ++heads_conv1;
        if (l.name == "dual_head.conv1") {
            ++merged;
            EXPECT_EQ(l.shape.cin, 128);
            EXPECT_EQ(l.shape.cout, 256);
            EXPECT_EQ(l.shape.k, 3);
            EXPECT_TRUE(l.shape.bias);
            EXPECT_FALSE(l.input_grad_accumulates);  // Hf's gradient: written once, by this layer
        }
    }
    EXPECT_EQ(heads_conv1, 0);
    EXPECT_EQ(merged, 1);
    EXPECT_EQ(conv2, 4);
    int convs_256 = 0, convs_64 = 0;
    for (const model::ConvUse& u : one.plan().convs()) {
        if (u.shape.k != 3 || u.shape.cin != 128 || !u.shape.bias) continue;
        convs_256 += u.shape.cout == 256;
        convs_64 += u.shape.cout == 64;
        if (u.shape.cout == 256) {
            EXPECT_TRUE(u.needs_overwrite() && !u.needs_accumulate());
        }
    }
    EXPECT_EQ(convs_256, 1);
    EXPECT_EQ(convs_64, 0);
    // The weight's fp32 gradient and bf16 copy; bias, gamma, beta and their gradients, the running statistics.
    const size_t wn = 256 * 9 * 128, copies = wn * 4 + wn * 2 + 8 * 256 * 4;
    const auto act = [](const nlohmann::json& j) { return j["regions"]["activations"]["bytes"].get<size_t>(); };
    EXPECT_EQ(act(d), act(plain) + copies);
    // The CPU reference network ignores the switch; the plan command refuses it there.
    const model::SiderNet cpu(s, model::DryRun{});
    int cpu_heads = 0;
    for (const model::LayerUse& l : cpu.plan().layers())
        cpu_heads += l.name.find(".conv1") != std::string::npos && l.name.rfind("dual_head.", 0) == 0;
    EXPECT_EQ(cpu_heads, 4);
    bool help = false;
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "cpu", "--merge-heads"}, &help), "--merge-heads",
                    "--backend cpu");
}

// --fuse-head-bn: the heads' conv1 (four, or merged) leave their BN + ReLU to their conv2, which read the
// pre-BN output through it: the activations smaller by exactly the heads' activation (N,H/4,W/4,4 x 64 bf16)
// less the eval means the fold adds (64 floats a head); the same parameter table; conv2 planned with its
// prologue. The CPU reference ignores it; the command refuses it there.
TEST(PlanCommand, FuseHeadBnStoresNoHeadActivation) {
    const std::vector<std::string> base = {"--height", "128", "--width", "256", "--batch", "4"};
    const auto act = [](const nlohmann::json& j) { return j["regions"]["activations"]["bytes"].get<size_t>(); };
    const size_t z = 4ull * 32 * 64 * 4 * 64 * 2, eval_means = 4 * 64 * 4;
    for (bool merge : {false, true}) {
        std::vector<std::string> plain_args = base;
        if (merge) plain_args.push_back("--merge-heads");
        std::vector<std::string> with = plain_args;
        with.push_back("--fuse-head-bn");
        const nlohmann::json plain = tools::plan_json(parse(plain_args)), d = tools::plan_json(parse(with));
        EXPECT_EQ(d["shape"]["fuse_head_bn"], true);
        EXPECT_EQ(plain["shape"]["fuse_head_bn"], false);
        EXPECT_NE(tools::plan_text(d).find("the heads' conv1 BN inside conv2"), std::string::npos);
        EXPECT_EQ(act(plain) - act(d), z - eval_means) << "merge " << merge;
        model::NetShape s{4, 2, 128, 256};
        s.merge_heads = merge;
        s.fuse_head_bn = true;
        const model::SiderNetCuda net(s, model::DryRun{});
        int producers = 0, consumers = 0;
        for (const model::LayerUse& l : net.plan().layers()) {
            if (l.name.rfind("dual_head.", 0) != 0) {
                EXPECT_FALSE(l.input_bn_prologue && l.shape.k == 1 && !l.batchnorm) << l.name;
                continue;
            }
            producers += l.bn_applied_by_consumer;
            consumers += l.input_bn_prologue;
            EXPECT_EQ(l.input_bn_prologue, l.name.find(".conv2") != std::string::npos) << l.name;
        }
        EXPECT_EQ(producers, merge ? 1 : 4);
        EXPECT_EQ(consumers, 4);
        EXPECT_EQ(net.table().flat_size,
                  model::SiderNetCuda(model::NetShape{4, 2, 128, 256}, model::DryRun{}).table().flat_size);
    }
    bool help = false;
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "cpu", "--fuse-head-bn"}, &help), "--fuse-head-bn",
                    "--backend cpu");
}

// --fuse-up-bn: the up paths' BN passes form the upsampled conv output on load (conv_first), so the activations
// are smaller by exactly the 10 up paths' upsampled tensors (each its own 256-byte aligned region); the
// gradients the same. The CPU reference ignores it; the command refuses it there.
TEST(PlanCommand, FuseUpBnStoresNoUpsampledConvOutputs) {
    const std::vector<std::string> base = {"--height", "128", "--width",    "256",
                                           "--batch",  "4",   "--up-order", "conv_first"};
    std::vector<std::string> with = base;
    with.push_back("--fuse-up-bn");
    const nlohmann::json plain = tools::plan_json(parse(base)), d = tools::plan_json(parse(with));
    EXPECT_EQ(d["shape"]["fuse_up_bn"], true);
    EXPECT_EQ(plain["shape"]["fuse_up_bn"], false);
    EXPECT_NE(tools::plan_text(d).find("the up paths' upsample inside their BN"), std::string::npos);
    model::NetShape s{4, 2, 128, 256, model::UpOrder::ConvFirst};
    s.fuse_up_bn = true;
    const model::SiderNetCuda net(s, model::DryRun{});
    size_t up_bytes = 0;
    int paths = 0;
    for (const model::LayerUse& l : net.plan().layers()) {
        EXPECT_EQ(l.up_in_bn, l.upsample > 1) << l.name;
        if (!l.up_in_bn) continue;
        ++paths;
        up_bytes += (l.shape.out().numel() * l.upsample * l.upsample * 2 + 255) / 256 * 256;
    }
    EXPECT_EQ(paths, 10);
    const auto bytes = [](const nlohmann::json& j, const char* r) { return j["regions"][r]["bytes"].get<size_t>(); };
    EXPECT_EQ(bytes(plain, "activations") - bytes(d, "activations"), up_bytes);
    EXPECT_EQ(bytes(plain, "activation_grads"), bytes(d, "activation_grads"));
    bool help = false;
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "cpu", "--fuse-up-bn"}, &help), "--fuse-up-bn",
                    "--backend cpu");
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
    SF_EXPECT_ERROR(tools::parse_plan_args({"--cudnn-device", "d.json", "--conv-policy", "fast"}, &help),
                    "deterministic or autotune", "'fast'");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--verbose"}, &help), "give --cudnn-device FILE too");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--conv-policy", "autotune"}, &help), "give --cudnn-device FILE too");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--up-order", "late"}, &help), "upsample_first or conv_first", "'late'");
    SF_EXPECT_ERROR(tools::parse_plan_args({"--cudnn-device", "d.json", "--backend", "cpu"}, &help),
                    "does not go with --backend cpu");
    const tools::PlanArgs c = parse({"--cudnn-device", "d.json", "--conv-policy", "autotune", "--verbose"});
    EXPECT_EQ(c.cudnn_device, "d.json");
    EXPECT_TRUE(c.autotune);
    EXPECT_TRUE(c.verbose);
    tools::parse_plan_args({"--help"}, &help);
    EXPECT_TRUE(help);
}

}  // namespace
