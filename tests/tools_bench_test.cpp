// The CPU-testable core of `slidefuse bench`, part 1: timing statistics and the JSON schema (round
// trip, and the validator catching each kind of problem). Part 2 (tests/tools_bench_device_test.cpp):
// the batch-size search, NVML, device info, commit lookup and the per-layer table; the roofline and
// peak table are in tests/tools_bench_roofline_test.cpp. Fixtures: tests/support/bench_fixtures.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/nvml.h"
#include "tests/support/bench_fixtures.h"
#include "tests/support/compare.h"
#include "tools/bench_report.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace tools;
using namespace sftest::bench;

// Problems of `doc` after `mutate`; expects one containing every `parts`.
void expect_problem(const std::function<void(json&)>& mutate, std::initializer_list<const char*> parts) {
    json doc = fake_doc();
    mutate(doc);
    const std::vector<std::string> problems = validate_bench_json(doc);
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    const bool found = std::any_of(problems.begin(), problems.end(), [&](const std::string& p) {
        return std::all_of(parts.begin(), parts.end(), [&](const char* s) { return p.find(s) != std::string::npos; });
    });
    EXPECT_TRUE(found) << "no problem mentions all of {" << *parts.begin() << ", ...}; got:" << all;
}

// ---- statistics ----

TEST(ToolsBench, PercentilesInterpolateBetweenRanks) {
    const std::vector<double> v = {7, 3, 10, 1, 5, 2, 9, 4, 8, 6};  // 1..10 shuffled
    EXPECT_DOUBLE_EQ(median(v), 5.5);
    EXPECT_DOUBLE_EQ(percentile(v, 10), 1.9);  // position 0.9
    EXPECT_DOUBLE_EQ(percentile(v, 90), 9.1);  // position 8.1
    EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
    EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
    EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
    EXPECT_DOUBLE_EQ(median({4}), 4);
    const TimingStats s = timing_stats({2, 4, 4, 4, 5, 5, 7, 9});
    EXPECT_DOUBLE_EQ(s.mean, 5);
    EXPECT_DOUBLE_EQ(s.stddev, 2);  // the textbook population example
    EXPECT_DOUBLE_EQ(s.median, 4.5);
    EXPECT_EQ(s.min, 2);
    EXPECT_EQ(s.max, 9);
    SF_EXPECT_ERROR(percentile({}, 50), "empty");
    SF_EXPECT_ERROR(percentile({1}, 101), "101");
    SF_EXPECT_ERROR(timing_stats({1, 2, NAN}), "timing 2");
    SF_EXPECT_ERROR(timing_stats({1, 0}), "timing 1 is 0");
}

// ---- schema ----

TEST(ToolsBench, RecordRoundTripsAndValidates) {
    const json doc = fake_doc();
    const std::vector<std::string> problems = validate_bench_json(doc);
    for (const std::string& p : problems) ADD_FAILURE() << p;
    const json back = json::parse(doc.dump(2));
    EXPECT_EQ(back, doc);
    EXPECT_TRUE(validate_bench_json(back).empty());

    const json& run = back["runs"][1];
    EXPECT_EQ(run["batch"], 256);
    EXPECT_EQ(run["timed_steps"], 50);
    EXPECT_EQ(run["status"], "ok");
    EXPECT_FALSE(run.contains("error"));
    EXPECT_EQ(run["timings_ms"].size(), 50u);
    EXPECT_DOUBLE_EQ(run["samples_per_s"].get<double>(), 256 * 1000.0 / run["median_ms"].get<double>());
    EXPECT_DOUBLE_EQ(run["nvml"]["power_w_mean"].get<double>(), 680);
    EXPECT_DOUBLE_EQ(run["nvml"]["sm_clock_mhz_min"].get<double>(), 1755);
    EXPECT_EQ(back["runs"][0]["nvml"]["available"], false);
    EXPECT_TRUE(back["runs"][0]["nvml"]["power_w_mean"].is_null());
    EXPECT_EQ(back["device"]["cuda"], "13.0");
    EXPECT_EQ(back["device"]["driver"], "570.86.15");
    EXPECT_EQ(back["commit"], "0123456789abcdef0123456789abcdef01234567");
    EXPECT_EQ(back["device"]["cudnn"], "9.19.0");
    EXPECT_EQ(back["device"]["compute_capability"], "9.0");

    const fs::path path = fs::temp_directory_path() / ("sf_bench_" + std::to_string(::getpid()) + ".json");
    write_bench_json(path.string(), doc);
    EXPECT_EQ(read_bench_json(path.string()), doc);
    json bad = doc;
    bad["runs"][0]["median_ms"] = 1.0;
    SF_EXPECT_ERROR(write_bench_json(path.string(), bad), "runs[0].median_ms");
    std::ofstream(path) << bad.dump();
    const std::string name = path.string();
    SF_EXPECT_ERROR(read_bench_json(name), name.c_str(), "1 problems", "runs[0].median_ms");
    std::ofstream(path) << "{ not json";
    SF_EXPECT_ERROR(read_bench_json(path.string()), "not JSON");
    fs::remove(path);
}

TEST(ToolsBench, ValidatorCatchesEachKindOfProblem) {
    EXPECT_FALSE(validate_bench_json(json::array()).empty());
    expect_problem([](json& d) { d["schema"] = "slidefuse.bench/0"; }, {"schema", "slidefuse.bench/1"});
    expect_problem([](json& d) { d.erase("tool"); }, {"tool: missing"});
    expect_problem([](json& d) { d["commit"] = ""; }, {"commit", "empty"});
    expect_problem([](json& d) { d["device"].erase("driver"); }, {"device.driver: missing"});
    expect_problem([](json& d) { d["runs"][1]["nvml"]["speed"] = 1; }, {"runs[1].nvml.speed: unknown field"});
    expect_problem([](json& d) { d["date"] = "21/11/2026"; }, {"date"});
    for (const char* bad : {"2026-11-21", "2026-11-21T09:30:00Y", "2026-11-21T09:30:00.Z", "2026-11-21T09:30:00+1"})
        expect_problem([&](json& d) { d["date"] = bad; }, {"date", bad});
    for (const char* good : {"2026-11-21T09:30:00", "2026-11-21T09:30:00.5Z", "2026-11-21T09:30:00-0530"}) {
        json d = fake_doc();
        d["date"] = good;
        EXPECT_TRUE(validate_bench_json(d).empty()) << good;
    }
    expect_problem([](json& d) { d["device"]["name"] = ""; }, {"device.name", "empty"});
    expect_problem([](json& d) { d["device"]["sm_count"] = 0; }, {"device.sm_count"});
    expect_problem(
        [](json& d) {
            d["device"] = device_json(rt::DeviceInfo{}, "");
            d["device"]["reason"] = nullptr;
        },
        {"device.reason"});
    expect_problem([](json& d) { d["device"]["cudnn"] = 91900; }, {"device.cudnn", "string"});
    expect_problem([](json& d) { d["runs"][0]["timings_ms"][3] = -1.0; }, {"runs[0].timings_ms[3]"});
    expect_problem([](json& d) { d["runs"][0]["timings_ms"][4] = "fast"; }, {"runs[0].timings_ms[4]"});
    expect_problem([](json& d) { d["runs"] = json::array({run_json(fake_run(8, 49))}); }, {"49 timed steps", "50"});
    expect_problem([](json& d) { d["runs"][1]["timed_steps"] = 51; }, {"timed_steps is 51"});
    expect_problem([](json& d) { d["runs"][1]["median_ms"] = 1.0; }, {"runs[1].median_ms", "median"});
    expect_problem([](json& d) { d["runs"][1]["p90_ms"] = 1.0; }, {"runs[1].p90_ms"});
    expect_problem([](json& d) { d["runs"][1]["samples_per_s"] = 1.0; }, {"runs[1].samples_per_s", "batch"});
    expect_problem([](json& d) { d["runs"][1]["height"] = 250; }, {"runs[1].height", "multiple of 32"});
    expect_problem([](json& d) { d["runs"][1]["channels"] = 3; }, {"runs[1].channels"});
    expect_problem([](json& d) { d["runs"][1]["mode"] = "fast"; }, {"runs[1].mode", "graph"});
    expect_problem([](json& d) { d["runs"][1]["batch"] = 0; }, {"runs[1].batch"});
    expect_problem([](json& d) { d["runs"][1]["peak_mem_bytes"] = 0; }, {"peak_mem_bytes"});
    expect_problem([](json& d) { d["runs"][1].erase("nvml"); }, {"runs[1].nvml: missing"});
    expect_problem([](json& d) { d["runs"][1]["status"] = "slow"; }, {"runs[1].status", "oom"});
    expect_problem([](json& d) { d["runs"][1]["status"] = "oom"; }, {"runs[1].error: missing"});
    expect_problem([](json& d) { d["runs"][1].erase("mean_ms"); }, {"runs[1].mean_ms: missing"});
    expect_problem([](json& d) { d["runs"][0]["nvml"]["reason"] = nullptr; }, {"runs[0].nvml.reason"});
    expect_problem([](json& d) { d["runs"][1]["nvml"]["samples"] = 0; }, {"runs[1].nvml.samples"});
    expect_problem([](json& d) { d["runs"][1]["nvml"]["power_w_mean"] = 900.0; }, {"power_w_mean", "exceeds"});
    expect_problem([](json& d) { d["runs"][1]["nvml"]["sm_util_mean"] = 130.0; }, {"sm_util_mean", "outside"});
    expect_problem([](json& d) { d["batch_search"]["largest"] = 400; }, {"batch_search.largest", "392"});
    expect_problem([](json& d) { d["batch_search"]["probes"][0]["feasible"] = false; }, {"probes[0].feasible"});
    expect_problem([](json& d) { d["batch_search"]["probes"][1]["batch"] = 17; }, {"probes[1].batch", "granule"});
    expect_problem([](json& d) { d["batch_search"]["fastest"] = 8; }, {"batch_search.fastest"});
    expect_problem([](json& d) { d["batch_search"]["capped"] = true; }, {"batch_search.capped"});
    expect_problem([](json& d) { d["layers"]["rows"][0]["gb"] = 1.0; }, {"layers.rows[0].gb"});
    expect_problem([](json& d) { d["layers"]["conv_plans"] = "engine 70"; }, {"layers.conv_plans", "array"});
    expect_problem([](json& d) { d["layers"]["conv_plans"][0] = 3; }, {"layers.conv_plans[0]", "string"});
    expect_problem([](json& d) { d["layers"]["rows"][0]["roofline_share"] = 0.99; }, {"rows[0].roofline_share"});
    expect_problem([](json& d) { d["layers"]["rows"][0]["fwd_ms"] = 2.2; }, {"rows[0].fwd_ms", "median"});
    expect_problem([](json& d) { d["layers"]["rows"][1]["name"] = "adamw"; }, {"duplicate layer name adamw"});
    expect_problem([](json& d) { d["layers"]["total"]["ms"] = 1.0; }, {"layers.total.ms"});
    expect_problem([](json& d) { d["layers"]["step"]["times_floor"] = 2.0; }, {"layers.step.times_floor"});
    expect_problem([](json& d) { d["layers"]["peaks"]["known"] = false; }, {"peaks.known"});
    expect_problem(
        [](json& d) {
            d["runs"] = json::array();
            d.erase("batch_search");
            d.erase("layers");
        },
        {"no measurement"});
    // A targeted change gives exactly one problem (no cascade that would bury it).
    json doc = fake_doc();
    doc["runs"][1]["min_ms"] = 0.5;
    EXPECT_EQ(validate_bench_json(doc).size(), 1u);
    // A record from a machine without GPU or NVML is valid.
    doc = fake_doc();
    doc["device"] = device_json(rt::query_device_info(0), "");
    if (!doc["device"]["available"].get<bool>()) {
        EXPECT_TRUE(validate_bench_json(doc).empty());
    }
}

TEST(ToolsBench, FailedRunsAndBaselineRecordsValidate) {
    BenchRun oom;
    oom.config.batch = 4096;
    oom.status = "oom";
    oom.error = "cudaErrorMemoryAllocation: out of memory (planned 93.1 GiB)";
    oom.nvml = rt::NvmlSummary::unavailable("not sampled");
    const json j = run_json(oom);
    EXPECT_TRUE(j["median_ms"].is_null());
    EXPECT_TRUE(j["peak_mem_bytes"].is_null());
    EXPECT_EQ(j["error"], oom.error);
    json doc = fake_doc();
    doc["runs"].push_back(j);
    for (const std::string& p : validate_bench_json(doc)) ADD_FAILURE() << p;
    oom.error.clear();
    SF_EXPECT_ERROR(run_json(oom), "status oom needs an error message");
    oom.status = "crashed";
    SF_EXPECT_ERROR(run_json(oom), "status 'crashed'");

    // What tools/baselines/bench_schema.py writes for a PyTorch run: the shared core only.
    json base = {{"schema", "slidefuse.bench/1"},
                 {"tool", "pytorch-eager_bf16_cl"},
                 {"commit", "unknown"},
                 {"date", "2026-11-21T09:30:00.123+00:00"},
                 {"device",
                  {{"name", "NVIDIA H100 80GB HBM3"},
                   {"driver", "570.86.15"},
                   {"cuda", "12.8"},
                   {"cudnn", "90100"},
                   {"torch", "2.9.0"}}},
                 {"runs", json::array()},
                 {"nvml", json::object()}};
    json run = run_config_json(RunConfig{128, 256, 512, 2, "eager_bf16_cl", 10}, 50);
    const TimingStats st = timing_stats(fake_run(128, 50).timings_ms);
    run.update({{"timings_ms", fake_run(128, 50).timings_ms},
                {"median_ms", st.median},
                {"p10_ms", st.p10},
                {"p90_ms", st.p90},
                {"samples_per_s", 128 * 1000.0 / st.median},
                {"peak_mem_bytes", nullptr},
                {"status", "ok"}});
    base["runs"].push_back(run);
    for (const std::string& p : validate_bench_json(base)) ADD_FAILURE() << p;
    base["runs"][0]["p10_ms"] = 1.0;  // the core statistics are still checked
    EXPECT_EQ(validate_bench_json(base).size(), 1u);
    base["tool"] = "slidefuse";  // our own records need the extended fields
    EXPECT_GT(validate_bench_json(base).size(), 5u);
}

}  // namespace
