// `slidefuse bench step --configs` on a GPU (tools/bench_configs.h): a list of three configurations
// run in one process writes the base's record (with its per-layer table), each other's record with
// that configuration's switches in its `extra`, the base's second run, and the summary naming them in
// run order; with a deadline already past, the base alone runs and every other configuration is listed
// as skipped. Each record passes the bench schema's validator (read back with read_bench_json).
// Under the CPU emulation at 32x64, batch 2 and two timed steps (the records' validator told so); on a
// GPU at 64x128, batch 4 with the schema's 50 steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/device_info.h"
#include "runtime/exec.h"
#include "runtime/nvml.h"
#include "tests/support/compare.h"
#include "tests/support/temp_dir.h"
#include "tools/bench_configs.h"
#include "tools/bench_report.h"

namespace {

#ifdef SF_EMU
// A step at 32x64 x 2 takes about 11 s under the emulation (docs/EMULATION.md): no warm-up steps.
const std::vector<std::string> kCommon = {"--batch-sizes", "2", "--size", "32x64", "--warmup", "0", "--deterministic"};
constexpr int kSteps = 2;
#else
const std::vector<std::string> kCommon = {"--batch-sizes", "4", "--size", "64x128", "--warmup", "2", "--deterministic"};
constexpr int kSteps = tools::kMinTimedSteps;
#endif

struct ListRun {
    sftest::TempDir dir{"sf_bench_configs"};
    tools::StepBenchOptions o;
    std::vector<tools::BenchConfig> cfgs;
    tools::ValidateOptions validate;
    ListRun(const std::string& list, std::vector<std::string> extra) {
        const std::string path = dir.path + "/list.txt";
        std::ofstream(path) << list;
        std::vector<std::string> args = kCommon;
        args.insert(args.end(), extra.begin(), extra.end());
        args.insert(args.end(), {"--configs", path, "--json-dir", dir.path + "/out"});
        o = tools::parse_step_bench_args(args);
        o.steps = kSteps;  // below the option's floor under the emulation; the records' checks agree
        cfgs = tools::select_bench_configs(tools::read_bench_configs(o.configs, o.args), o.only);
        for (tools::BenchConfig& c : cfgs) c.options.steps = kSteps;
        validate.min_timed_steps = kSteps;
    }
    int run() {
        rt::CudaContext ctx;
        const rt::DeviceInfo dev = rt::query_device_info(0);
        rt::Nvml nvml(dev.pci_bus_id, dev.ordinal);
        tools::BenchHeader h;
        h.command = "bench step (test)";
        h.commit = "test";
        h.device = dev;
        return tools::bench_configs(ctx, nvml, h, o, cfgs, validate);
    }
    nlohmann::json record(const std::string& name) const {
        return tools::read_bench_json(o.json_dir + "/" + name + ".json", validate);
    }
    nlohmann::json summary() const {
        std::ifstream f(o.json_dir + "/configs_summary.json");
        return nlohmann::json::parse(f);
    }
};

TEST(BenchConfigsGpu, EachConfigurationItsRecordThenTheBaseAgain) {
    SF_REQUIRE_GPU();
    ListRun s("# the base first\nbase\nrows4 --bn-row-batch 4   # its switch\n\nupsrow --upsample-row-loads --layers\n",
              {"--layers"});
    ASSERT_EQ(s.run(), 0);
    const nlohmann::json base = s.record("base");
    ASSERT_EQ(base["runs"].size(), 1u);
    EXPECT_EQ(base["runs"][0]["status"], "ok") << base["runs"][0].value("error", "");
    EXPECT_EQ(base["runs"][0]["timed_steps"], kSteps);
    EXPECT_EQ(base["runs"][0]["extra"]["config"], "base");
    EXPECT_EQ(base["runs"][0]["extra"]["bn_row_batch"], 1);
    EXPECT_TRUE(base.contains("layers")) << "--layers: the base's record carries the per-layer table";
    const nlohmann::json rows4 = s.record("rows4");
    EXPECT_EQ(rows4["runs"][0]["status"], "ok") << rows4["runs"][0].value("error", "");
    EXPECT_EQ(rows4["runs"][0]["extra"]["config"], "rows4");
    EXPECT_EQ(rows4["runs"][0]["extra"]["bn_row_batch"], 4);
    EXPECT_FALSE(rows4.contains("layers")) << "the base and the lines that ask have the per-layer table";
    EXPECT_NE(rows4["command"].get<std::string>().find("[configuration rows4: --bn-row-batch 4]"), std::string::npos);
    const nlohmann::json upsrow = s.record("upsrow");
    EXPECT_EQ(upsrow["runs"][0]["extra"]["upsample_row_loads"], true);
    EXPECT_EQ(upsrow["runs"][0]["extra"]["bn_row_batch"], 1) << "a switch of one configuration stays in it";
    ASSERT_TRUE(upsrow.contains("layers")) << "its own --layers: the per-layer table";
    EXPECT_FALSE(upsrow["layers"]["rows"].empty());
    const nlohmann::json again = s.record("base_again");
    EXPECT_EQ(again["runs"][0]["extra"]["config"], "base");
    const nlohmann::json sum = s.summary();
    std::vector<std::string> order;
    for (const auto& r : sum["runs"]) order.push_back(r["record"]);
    EXPECT_EQ(order, (std::vector<std::string>{"base", "rows4", "upsrow", "base_again"}));
    EXPECT_TRUE(sum["skipped"].empty());
    EXPECT_TRUE(sum.contains("base_drift_pct"));
    for (const auto& r : sum["runs"]) {
        EXPECT_EQ(r["status"], "ok") << r["record"];
        EXPECT_GT(r["median_ms"].get<double>(), 0.0) << r["record"];
        EXPECT_GT(r["seconds"].get<double>(), 0.0) << r["record"];
    }
}

TEST(BenchConfigsGpu, APassedDeadlineRunsTheBaseAloneAndListsTheRest) {
    SF_REQUIRE_GPU();
    ListRun s("base\nrows4 --bn-row-batch 4\npdl --pdl\n", {"--deadline-s", "0.001"});
    ASSERT_EQ(s.run(), 0);
    EXPECT_EQ(s.record("base")["runs"][0]["status"], "ok");
    EXPECT_FALSE(std::filesystem::exists(s.o.json_dir + "/rows4.json"));
    EXPECT_FALSE(std::filesystem::exists(s.o.json_dir + "/base_again.json"));
    const nlohmann::json sum = s.summary();
    EXPECT_EQ(sum["runs"].size(), 1u);
    EXPECT_EQ(sum["skipped"], (nlohmann::json{"rows4", "pdl", "base_again"}));
    EXPECT_DOUBLE_EQ(sum["deadline_s"].get<double>(), 0.001);
}

}  // namespace
