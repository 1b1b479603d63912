// The device session's bench phase at its real size, without a GPU: `bench step --configs
// configs/bench/session_ab.txt --batch-sizes 128 --size 256x512 --layers --layers-batch 128`, autotuned, as
// scripts/gpu_session.sh runs it, under the emulation's launch-only mode (tests/emu/streams.h). Every
// configuration builds its full-size network (plans, workspace, the variants' autotuning), runs its eager
// per-layer table where the list asks for one and its captured step; every kernel launch is checked against
// the limits the GPU enforces (grid, block, static shared memory, the sm_90 build's registers and launch
// bounds: docs/EMULATION.md) and every cuDNN execution against its plan (tensors bound and inside device
// allocations of their extent, alignment, workspace), and nothing is computed. The kernels' own tests run
// them at small sizes; here only a shape that exists at batch 128 x 256 x 512 (a grid dimension past 65535,
// a block count past 2^31, a workspace or arena too small) would fail, before a device session does.
// Emulation only: on a GPU the bench phase itself is this check.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/device_info.h"
#include "runtime/exec.h"
#include "runtime/nvml.h"
#include "tests/emu/streams.h"
#include "tests/support/compare.h"
#include "tests/support/temp_dir.h"
#include "tools/bench_configs.h"
#include "tools/bench_report.h"

namespace {

// Launch-only mode for the scope of one test.
struct LaunchOnly {
    LaunchOnly() { sfemu_set_launch_only(true); }
    ~LaunchOnly() { sfemu_set_launch_only(false); }
};

TEST(FullSizeLaunch, TheSessionsBenchPhaseLaunchesEveryConfiguration) {
    const std::string list = sftest::source_dir() + "/configs/bench/session_ab.txt";
    sftest::TempDir dir("sf_full_size_launch");
    // The device command's options (scripts/gpu_session.sh), with no warm-up and two timed steps: the
    // launches, not their times, are the subject.
    tools::StepBenchOptions o =
        tools::parse_step_bench_args({"--batch-sizes", "128", "--size", "256x512", "--layers", "--layers-batch", "128",
                                      "--warmup", "0", "--configs", list, "--json-dir", dir.path + "/out"});
    constexpr int kSteps = 2;
    o.steps = kSteps;
    std::vector<tools::BenchConfig> cfgs =
        tools::select_bench_configs(tools::read_bench_configs(o.configs, o.args), o.only);
    ASSERT_GT(cfgs.size(), 10u);
    for (tools::BenchConfig& c : cfgs) c.options.steps = kSteps;
    tools::ValidateOptions validate;
    validate.min_timed_steps = kSteps;
    int rc = -1;
    {
        const LaunchOnly on;
        rt::CudaContext ctx;
        const rt::DeviceInfo dev = rt::query_device_info(0);
        rt::Nvml nvml(dev.pci_bus_id, dev.ordinal);
        tools::BenchHeader h;
        h.command = "bench step --configs session_ab.txt (launch-only emulation)";
        h.commit = "test";
        h.device = dev;
        rc = tools::bench_configs(ctx, nvml, h, o, cfgs, validate);
    }
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::ifstream sf(o.json_dir + "/configs_summary.json");
    ASSERT_TRUE(sf.good()) << "no configs_summary.json";
    const nlohmann::json summary = nlohmann::json::parse(sf);
    EXPECT_TRUE(summary.value("skipped", nlohmann::json::array()).empty()) << summary.dump();
    EXPECT_FALSE(summary.contains("context_lost")) << summary.dump();
    // Every configuration of the list, and the base again, wrote a record whose run is ok at batch 128.
    std::vector<std::string> names;
    for (const tools::BenchConfig& c : cfgs) names.push_back(c.name);
    names.push_back(cfgs.front().name + "_again");
    for (const std::string& n : names) {
        SCOPED_TRACE(n);
        const nlohmann::json r = tools::read_bench_json(o.json_dir + "/" + n + ".json", validate);
        ASSERT_EQ(r["runs"].size(), 1u);
        EXPECT_EQ(r["runs"][0]["status"], "ok") << r["runs"][0].value("error", "");
        EXPECT_EQ(r["runs"][0]["batch"], 128);
        EXPECT_EQ(r["runs"][0]["timed_steps"], kSteps);
    }
    // The per-layer tables the list asks for: the base's (the command's --layers) and bench_all's (its own).
    EXPECT_TRUE(tools::read_bench_json(o.json_dir + "/" + cfgs.front().name + ".json", validate).contains("layers"));
    EXPECT_TRUE(tools::read_bench_json(o.json_dir + "/bench_all.json", validate).contains("layers"));
}

}  // namespace
