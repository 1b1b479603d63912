// `slidefuse bench step --configs FILE` without a GPU (tools/bench_configs.h): the list's parsing
// (comments, blank lines, each configuration's switches on top of the command's options), every bad
// list named with its file and line, --only, the options that belong together, and the deadline
// rule. The run itself: tests/gpu/tools_bench_configs_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tests/support/temp_dir.h"
#include "tools/bench_configs.h"
#include "tools/bench_step.h"
#include "tools/cuda_policy.h"

namespace {

using tools::BenchConfig;

const std::vector<std::string> kCommon = {"--batch-sizes", "128",      "--size",     "160x320", "--steps", "60",
                                          "--configs",     "list.txt", "--json-dir", "out",     "--only",  "a",
                                          "--deadline-s",  "300"};

std::string error_of(const std::string& text, const std::vector<std::string>& common = kCommon) {
    try {
        tools::parse_bench_configs(text, "list.txt", common);
    } catch (const rt::Error& e) {
        return e.message();
    }
    return "";
}

TEST(BenchConfigs, EachLineIsTheCommandWithItsSwitches) {
    const std::vector<BenchConfig> c = tools::parse_bench_configs(
        "# A/Bs\n\nbase\n  pdl --pdl   # entry 14\nbn4 --bn-row-batch 4 --fuse-up-bn\nup.first-1 --up-order "
        "upsample_first\n",
        "list.txt", kCommon);
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0].name, "base");
    EXPECT_EQ(c[0].line, 3);
    EXPECT_TRUE(c[0].flags.empty());
    EXPECT_EQ(c[1].name, "pdl");
    EXPECT_EQ(c[1].line, 4);
    EXPECT_EQ(c[1].flags, (std::vector<std::string>{"--pdl"}));
    EXPECT_EQ(c[2].flags, (std::vector<std::string>{"--bn-row-batch", "4", "--fuse-up-bn"}));
    EXPECT_EQ(c[3].name, "up.first-1");
    for (const BenchConfig& x : c) {  // the command's options in every configuration
        EXPECT_EQ(x.options.batch_sizes, (std::vector<int>{128})) << x.name;
        EXPECT_EQ(x.options.height, 160) << x.name;
        EXPECT_EQ(x.options.width, 320) << x.name;
        EXPECT_EQ(x.options.steps, 60) << x.name;
        EXPECT_TRUE(x.options.configs.empty()) << x.name << ": the list's own options are not a configuration's";
        EXPECT_TRUE(x.options.json_dir.empty() && x.options.only.empty() && x.options.deadline_s == 0) << x.name;
    }
    EXPECT_FALSE(c[0].options.cuda.pdl);
    EXPECT_TRUE(c[1].options.cuda.pdl);
    EXPECT_EQ(c[1].options.cuda.bn_row_batch, 1);
    EXPECT_EQ(c[2].options.cuda.bn_row_batch, 4);
    EXPECT_TRUE(c[2].options.fuse_up_bn);
    EXPECT_FALSE(c[1].options.fuse_up_bn);
    EXPECT_EQ(c[0].options.up_order, model::UpOrder::ConvFirst);
    EXPECT_EQ(c[3].options.up_order, model::UpOrder::UpsampleFirst);
}

TEST(BenchConfigs, ImpliedSwitchesFollowTheOptionsParser) {
    const std::vector<BenchConfig> c =
        tools::parse_bench_configs("base\nbg --dw-fused-bn-grad\nps --pw-stats\n", "list.txt", kCommon);
    EXPECT_TRUE(c[1].options.cuda.dw_fused_bwd && c[1].options.fuse_expand_dw && c[1].options.cuda.dw_fused_bn_grad);
    EXPECT_TRUE(c[2].options.cuda.pw_custom && c[2].options.cuda.pw_stats);
}

TEST(BenchConfigs, ALineMayAskForItsOwnPerLayerTable) {
    // --layers on a line (the command's --layers is the base's): that configuration's record gets the table.
    const std::vector<BenchConfig> c =
        tools::parse_bench_configs("base\nall --pdl --layers\nplain --pdl\n", "list.txt", kCommon);
    EXPECT_TRUE(c[1].options.layers);
    EXPECT_EQ(c[1].flags, (std::vector<std::string>{"--pdl", "--layers"}));
    EXPECT_FALSE(c[2].options.layers);
    EXPECT_FALSE(c[0].options.layers);
}

TEST(BenchConfigs, EveryConfigSwitchIsAnOptionOfBenchStep) {
    for (const tools::ConfigSwitch& s : tools::kConfigSwitches) {
        std::vector<std::string> args = {s.flag};
        const std::string f = s.flag;
        if (s.takes_value) args.push_back(f == "--up-order" ? "conv_first" : f == "--bn-min-blocks" ? "3" : "4");
        EXPECT_NO_THROW(tools::parse_step_bench_args(args)) << s.flag;
    }
}

TEST(BenchConfigs, BadListsAreNamedWithTheirLine) {
    EXPECT_NE(error_of("base\n-x --pdl\n").find("list.txt:2: configuration name '-x'"), std::string::npos);
    EXPECT_NE(error_of("base\nbad/name\n").find("list.txt:2: configuration name 'bad/name'"), std::string::npos);
    EXPECT_NE(error_of(std::string("base\n") + std::string(65, 'n') + "\n").find("at most 64 characters"),
              std::string::npos);
    EXPECT_NE(error_of("base\nbase_again --pdl\n").find("list.txt:2: configuration name 'base_again'"),
              std::string::npos);
    EXPECT_NE(error_of("configs_summary\n").find("list.txt:1:"), std::string::npos);
    EXPECT_NE(error_of("base\n\npdl --pdl\npdl --pdl\n").find("list.txt:4: configuration 'pdl' repeats line 3's name"),
              std::string::npos);
    const std::string steps = error_of("base\nx --steps 5\n");
    EXPECT_NE(steps.find("list.txt:2: '--steps' is not a switch of a configuration"), std::string::npos) << steps;
    EXPECT_NE(steps.find("--fuse-up-bn"), std::string::npos) << "the message lists the switches: " << steps;
    EXPECT_NE(error_of("base\nx --json y.json\n").find("list.txt:2: '--json'"), std::string::npos);
    EXPECT_NE(error_of("base\nx pdl\n").find("list.txt:2: 'pdl' is not a switch"), std::string::npos);
    EXPECT_NE(error_of("base\nx --bn-row-batch\n").find("list.txt:2: --bn-row-batch needs a value"), std::string::npos);
    const std::string rows = error_of("base\nx --bn-row-batch 3\n");
    EXPECT_NE(rows.find("list.txt:2: configuration 'x': bench step: --bn-row-batch must be 1 or 4, got 3"),
              std::string::npos)
        << rows;
    EXPECT_NE(error_of("base\nx --up-order sideways\n").find("list.txt:2: configuration 'x':"), std::string::npos);
    EXPECT_NE(error_of("# nothing\n\n").find("list.txt: no configuration"), std::string::npos);
    EXPECT_EQ(error_of("base\n"), "") << "a base alone is a list";
}

TEST(BenchConfigs, ReadNamesAMissingFile) {
    try {
        tools::read_bench_configs("/nonexistent/list.txt", kCommon);
        FAIL() << "no throw";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.message()).find("--configs /nonexistent/list.txt: cannot read it"), std::string::npos);
    }
    sftest::TempDir d("sf_bench_configs_cpu");
    const std::string path = d.path + "/list.txt";
    std::ofstream(path) << "base\nx --nope\n";
    try {
        tools::read_bench_configs(path, kCommon);
        FAIL() << "no throw";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.message()).find(path + ":2: '--nope'"), std::string::npos) << e.message();
    }
}

TEST(BenchConfigs, OnlyKeepsTheBaseAndTheNamedInTheFilesOrder) {
    const std::vector<BenchConfig> all =
        tools::parse_bench_configs("base\na --pdl\nb --fuse-up-bn\nc --dw-stats\n", "list.txt", kCommon);
    EXPECT_EQ(tools::select_bench_configs(all, {}).size(), 4u);
    const std::vector<BenchConfig> some = tools::select_bench_configs(all, {"c", "a"});
    ASSERT_EQ(some.size(), 3u);
    EXPECT_EQ(some[0].name, "base");
    EXPECT_EQ(some[1].name, "a");
    EXPECT_EQ(some[2].name, "c");
    EXPECT_EQ(tools::select_bench_configs(all, {"base"}).size(), 1u);
    try {
        tools::select_bench_configs(all, {"a", "zz"});
        FAIL() << "no throw";
    } catch (const rt::Error& e) {
        EXPECT_NE(e.message().find("--only zz: no such configuration in the list (base, a, b, c)"), std::string::npos)
            << e.message();
    }
}

TEST(BenchConfigs, OptionsThatBelongTogether) {
    const tools::StepBenchOptions o = tools::parse_step_bench_args(
        {"--batch-sizes", "128", "--configs", "l.txt", "--json-dir", "d", "--only", "a,b", "--deadline-s", "200"});
    EXPECT_EQ(o.configs, "l.txt");
    EXPECT_EQ(o.json_dir, "d");
    EXPECT_EQ(o.only, (std::vector<std::string>{"a", "b"}));
    EXPECT_DOUBLE_EQ(o.deadline_s, 200);
    EXPECT_EQ(o.args.size(), 10u);
    const auto bad = [](const std::vector<std::string>& args) {
        try {
            tools::parse_step_bench_args(args);
        } catch (const rt::Error& e) {
            return e.message();
        }
        return std::string();
    };
    EXPECT_NE(bad({"--batch-sizes", "128", "--configs", "l.txt"}).find("--configs needs --json-dir"),
              std::string::npos);
    EXPECT_NE(bad({"--json-dir", "d"}).find("belong to --configs"), std::string::npos);
    EXPECT_NE(bad({"--only", "a"}).find("belong to --configs"), std::string::npos);
    EXPECT_NE(bad({"--deadline-s", "60"}).find("belong to --configs"), std::string::npos);
    const std::vector<std::string> list = {"--configs", "l.txt", "--json-dir", "d"};
    auto with = [&](std::vector<std::string> more) {
        more.insert(more.end(), list.begin(), list.end());
        return more;
    };
    EXPECT_NE(bad(with({"--batch-sizes", "64,128"})).find("one batch size; --batch-sizes lists 2"), std::string::npos);
    EXPECT_NE(bad(with({"--batch-sizes", "128", "--json", "x.json"})).find("--json does not apply"), std::string::npos);
    EXPECT_NE(bad(with({"--batch-sizes", "128", "--search"})).find("--search does not apply"), std::string::npos);
    EXPECT_NE(bad(with({"--batch-sizes", "128", "--only", "a,,b"})).find("an empty name"), std::string::npos);
    EXPECT_NE(bad(with({"--batch-sizes", "128", "--deadline-s", "-1"})).find("--deadline-s"), std::string::npos);
    EXPECT_NE(bad(with({"--batch-sizes", "128", "--configs", ""})).find("--configs needs a path"), std::string::npos);
}

TEST(BenchConfigs, TheSessionListParsesWithTheSessionsCommand) {
    // configs/bench/session_ab.txt as scripts/gpu_session.sh runs it: the per-layer run as its base, then
    // the A/Bs, each with the switches its name says (a typo would cost a device session its bench).
    const std::vector<BenchConfig> c = tools::read_bench_configs(
        sftest::source_dir() + "/configs/bench/session_ab.txt",
        {"--batch-sizes", "128", "--size", "256x512", "--layers", "--layers-batch", "128", "--configs",
         "configs/bench/session_ab.txt", "--json-dir", "out", "--deadline-s", "400"});
    ASSERT_GE(c.size(), 20u);
    EXPECT_EQ(c[0].name, "bench_variants");
    EXPECT_TRUE(c[0].flags.empty()) << "the base is the default step";
    std::map<std::string, const BenchConfig*> by;
    for (const BenchConfig& x : c) by[x.name] = &x;
    ASSERT_TRUE(by.count("bench_pdl") && by.count("bench_bn4") && by.count("bench_dw0") && by.count("bench_all") &&
                by.count("bench_bnmb3") && by.count("bench_lanes"));
    EXPECT_EQ(by["bench_bnmb3"]->options.cuda.bn_min_blocks, 3);
    EXPECT_TRUE(by["bench_lanes"]->options.cuda.branch_lanes);
    EXPECT_TRUE(by["bench_pdl"]->options.cuda.pdl);
    EXPECT_EQ(by["bench_bn4"]->options.cuda.bn_row_batch, 4);
    EXPECT_FALSE(by["bench_dw0"]->options.cuda.dw_variants);
    const tools::StepBenchOptions& all = by["bench_all"]->options;
    EXPECT_TRUE(all.fuse_expand_dw && all.fuse_dw_pw && all.cuda.dw_fused_bn_bwd && all.cuda.dw_fused_bn_grad &&
                all.cuda.pdl && all.cuda.upsample_row_loads && all.cuda.pw_stats && all.cuda.pw_bn_grad &&
                all.cuda.dw_stats && all.cuda.pw_bn_bwd && all.merge_heads && all.fuse_head_bn && all.fuse_up_bn &&
                all.cuda.bn_row_batch == 4);
    EXPECT_NE(std::find(by["bench_all"]->flags.begin(), by["bench_all"]->flags.end(), "--layers"),
              by["bench_all"]->flags.end())
        << "every switch at once has its own per-layer table";
    ASSERT_TRUE(by.count("bench_all_lanes"));
    const tools::StepBenchOptions& all_lanes = by["bench_all_lanes"]->options;
    EXPECT_TRUE(all_lanes.cuda.branch_lanes && !all.cuda.branch_lanes);
    tools::StepBenchOptions same = all_lanes;
    same.cuda.branch_lanes = false;
    EXPECT_EQ(tools::cuda_section_json(same.cuda), tools::cuda_section_json(all.cuda))
        << "bench_all_lanes is bench_all and the lanes";
    EXPECT_TRUE(same.fuse_expand_dw && same.fuse_dw_pw && same.merge_heads && same.fuse_head_bn && same.fuse_up_bn);
    ASSERT_TRUE(by.count("bench_all_headbn") && by.count("bench_all_headdx"));
    tools::StepBenchOptions headdx = by["bench_all_headdx"]->options;
    EXPECT_TRUE(headdx.cuda.head_bn_dx && !by["bench_all_headbn"]->options.cuda.head_bn_dx);
    headdx.cuda.head_bn_dx = false;
    EXPECT_EQ(tools::cuda_section_json(headdx.cuda), tools::cuda_section_json(by["bench_all_headbn"]->options.cuda))
        << "bench_all_headdx is bench_all_headbn and --head-bn-dx";
    for (const BenchConfig& x : c) {
        EXPECT_EQ(x.options.batch_sizes, (std::vector<int>{128})) << x.name;
        EXPECT_EQ(x.options.height, 256) << x.name;
        EXPECT_EQ(x.options.up_order, model::UpOrder::ConvFirst) << x.name;
    }
}

TEST(BenchConfigs, DeadlineRule) {
    EXPECT_TRUE(tools::fits_deadline(1000, 1000, 0, 1000)) << "no deadline";
    EXPECT_TRUE(tools::fits_deadline(100, 10, 120, 10));
    EXPECT_FALSE(tools::fits_deadline(100, 10, 119.9, 10));
    EXPECT_FALSE(tools::fits_deadline(100, 30, 120, 0));
    EXPECT_TRUE(tools::fits_deadline(0, 0.5, 1, 0.5));
}

}  // namespace
