// tools/cuda_policy.h without a GPU: every switch of the config's cuda section reaches the convolution
// policy (and comes back from it: what the CUDA backend reports it runs), the deterministic policy's
// settings are kept, and the summary names what differs from the defaults.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tools/config.h"
#include "tools/cuda_policy.h"

namespace {

using tools::CudaSection;

std::string yaml_of(const CudaSection& s) {
    tools::TrainConfig c;
    c.cuda = s;
    return tools::to_yaml(c);
}

std::vector<std::pair<std::string, std::function<void(CudaSection&)>>> toggles() {
    return {{"pdl", [](CudaSection& s) { s.pdl = true; }},
            {"dw_variants false", [](CudaSection& s) { s.dw_variants = false; }},
            {"bn_row_batch 4", [](CudaSection& s) { s.bn_row_batch = 4; }},
            {"bn_min_blocks 3", [](CudaSection& s) { s.bn_min_blocks = 3; }},
            {"upsample_row_loads", [](CudaSection& s) { s.upsample_row_loads = true; }},
            {"dw_fused_bwd", [](CudaSection& s) { s.dw_fused_bwd = true; }},
            {"dw_fused_bn_bwd", [](CudaSection& s) { s.dw_fused_bn_bwd = true; }},
            {"dw_fused_bn_grad", [](CudaSection& s) { s.dw_fused_bn_grad = true; }},
            {"pw_custom", [](CudaSection& s) { s.pw_custom = true; }},
            {"pw_stats", [](CudaSection& s) { s.pw_stats = true; }},
            {"pw_bn_grad", [](CudaSection& s) { s.pw_bn_grad = true; }},
            {"pw_bn_bwd", [](CudaSection& s) { s.pw_bn_bwd = true; }},
            {"pw_fused_bwd", [](CudaSection& s) { s.pw_fused_bwd = true; }},
            {"dw_stats", [](CudaSection& s) { s.dw_stats = true; }},
            {"head_bn_grad", [](CudaSection& s) { s.head_bn_grad = true; }},
            {"head_bn_dx", [](CudaSection& s) { s.head_bn_dx = true; }},
            {"branch_lanes", [](CudaSection& s) { s.branch_lanes = true; }}};
}

TEST(CudaPolicy, EverySwitchReachesThePolicyAndComesBack) {
    const CudaSection d;
    const kern::ConvPolicy base = tools::cuda_conv_policy(d, false);
    EXPECT_EQ(yaml_of(tools::cuda_section_of(base, false)), yaml_of(d));
    for (const auto& [name, toggle] : toggles()) {
        SCOPED_TRACE(name);
        CudaSection s;
        toggle(s);
        ASSERT_NE(yaml_of(s), yaml_of(d));
        const kern::ConvPolicy p = tools::cuda_conv_policy(s, false);
        EXPECT_EQ(yaml_of(tools::cuda_section_of(p, s.pdl)), yaml_of(s)) << "the policy lost or moved the switch";
        if (name != "pdl") {  // the Exec's, not the policy's
            EXPECT_NE(yaml_of(tools::cuda_section_of(p, false)), yaml_of(d)) << "the policy did not change";
        }
        EXPECT_EQ(tools::cuda_section_summary(s), name);
    }
}

TEST(CudaPolicy, KeepsTheRunPolicysOwnSettings) {
    CudaSection s;
    s.pw_custom = s.pw_stats = true;
    for (bool det : {false, true}) {
        const kern::ConvPolicy want = kern::run_conv_policy(det);
        const kern::ConvPolicy p = tools::cuda_conv_policy(s, det);
        EXPECT_EQ(p.deterministic, want.deterministic);
        EXPECT_EQ(p.autotune, want.autotune);
        EXPECT_EQ(p.max_candidates, want.max_candidates);
        EXPECT_EQ(p.max_workspace, want.max_workspace);
        EXPECT_TRUE(p.pw_custom && p.pw_stats);
    }
}

// The bench records' switch names are the config's keys: every key of the cuda section, each toggle changing
// its own entry only.
TEST(CudaPolicy, JsonHasEveryConfigKeyAndEachToggleMovesItsOwn) {
    const nlohmann::json d = tools::cuda_section_json(CudaSection{});
    const std::string yaml = yaml_of(CudaSection{});
    const size_t a = yaml.find("cuda:\n"), e = yaml.find("\noptimizer:");
    ASSERT_TRUE(a != std::string::npos && e != std::string::npos);
    size_t keys = 0;
    for (size_t p = yaml.find("\n  ", a); p != std::string::npos && p < e; p = yaml.find("\n  ", p + 1)) {
        const std::string key = yaml.substr(p + 3, yaml.find(':', p) - p - 3);
        EXPECT_TRUE(d.contains(key)) << key;
        ++keys;
    }
    EXPECT_EQ(keys, d.size());
    for (const auto& [name, toggle] : toggles()) {
        CudaSection s;
        toggle(s);
        const nlohmann::json j = tools::cuda_section_json(s);
        int moved = 0;
        for (const auto& kv : d.items()) moved += j.at(kv.key()) != kv.value();
        EXPECT_EQ(moved, 1) << name;
    }
}

TEST(CudaPolicy, SummaryNamesWhatDiffersFromTheDefaults) {
    CudaSection s;
    EXPECT_EQ(tools::cuda_section_summary(s), "defaults");
    s.pdl = s.pw_custom = s.pw_stats = true;
    s.bn_row_batch = 4;
    EXPECT_EQ(tools::cuda_section_summary(s), "pdl, bn_row_batch 4, pw_custom, pw_stats");
    s.bn_min_blocks = 3;
    EXPECT_EQ(tools::cuda_section_summary(s), "pdl, bn_row_batch 4, bn_min_blocks 3, pw_custom, pw_stats");
}

}  // namespace
