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
            {"upsample_row_loads", [](CudaSection& s) { s.upsample_row_loads = true; }},
            {"dw_fused_bwd", [](CudaSection& s) { s.dw_fused_bwd = true; }},
            {"dw_fused_bn_bwd", [](CudaSection& s) { s.dw_fused_bn_bwd = true; }},
            {"dw_fused_bn_grad", [](CudaSection& s) { s.dw_fused_bn_grad = true; }},
            {"pw_custom", [](CudaSection& s) { s.pw_custom = true; }},
            {"pw_stats", [](CudaSection& s) { s.pw_stats = true; }},
            {"pw_bn_grad", [](CudaSection& s) { s.pw_bn_grad = true; }},
            {"pw_bn_bwd", [](CudaSection& s) { s.pw_bn_bwd = true; }},
            {"dw_stats", [](CudaSection& s) { s.dw_stats = true; }}};
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

TEST(CudaPolicy, SummaryNamesWhatDiffersFromTheDefaults) {
    CudaSection s;
    EXPECT_EQ(tools::cuda_section_summary(s), "defaults");
    s.pdl = s.pw_custom = s.pw_stats = true;
    s.bn_row_batch = 4;
    EXPECT_EQ(tools::cuda_section_summary(s), "pdl, bn_row_batch 4, pw_custom, pw_stats");
}

}  // namespace
