// The CPU-testable core of `slidefuse bench`: timing statistics, the JSON schema (round trip, and
// the validator catching each kind of problem; the roofline and peak table are in
// tests/tools_bench_roofline_test.cpp), the batch-size search on synthetic probes, the NVML monitor
// without NVML (and its sampler on a synthetic reader), device info without a GPU, commit lookup,
// and the per-layer table.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/nvml.h"
#include "tests/support/compare.h"
#include "tools/batch_search.h"
#include "tools/bench_report.h"
#include "tools/layer_table.h"
#include "tools/roofline.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace tools;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// ---- fixtures: a complete, valid record ----

rt::DeviceInfo fake_h100() {
    rt::DeviceInfo d;
    d.available = true;
    d.ordinal = 0;
    d.name = "NVIDIA H100 80GB HBM3";
    d.pci_bus_id = "00000000:19:00.0";
    d.cc_major = 9;
    d.sm_count = 132;
    d.memory_bytes = size_t(80) << 30;
    d.l2_bytes = size_t(50) << 20;
    d.memory_bus_bits = 5120;
    d.sm_clock_mhz = 1980;
    d.mem_clock_mhz = 2619;
    d.cuda_driver_version = 12080;
    d.cuda_runtime_version = 13000;
    d.cudnn_version = d.cudnn_compiled = 91900;
    return d;
}

rt::NvmlSummary fake_nvml() {
    rt::NvmlSummary s;
    s.available = true;
    s.samples = 3;
    s.interval_ms = 50;
    s.window_s = 0.12;
    for (double p : {650.0, 690.0, 700.0}) s.power_w.add(p);
    s.power_limit_w.add(700);
    for (double u : {98.0, 100.0, 100.0}) s.gpu_util_pct.add(u);
    s.mem_util_pct.add(60);
    for (double c : {1755.0, 1980.0, 1900.0}) s.sm_clock_mhz.add(c);
    s.mem_clock_mhz.add(2619);
    s.temperature_c.add(61);
    s.throttle_reasons_any = 4;
    return s;
}

BenchRun fake_run(int batch, int n) {
    BenchRun r;
    r.config.batch = batch;
    r.config.warmup_steps = 20;
    for (int i = 0; i < n; ++i) r.timings_ms.push_back(40.0 + 0.37 * ((i * 7) % 11));
    r.peak_mem_bytes = size_t(21) << 30;
    r.nvml = fake_nvml();
    return r;
}

BatchSearchResult fake_search() {
    BatchSearchOptions o;
    o.budget_bytes = size_t(40) << 30;
    return search_batch_size(
        [](int b) {
            BatchProbe p;
            p.fits = true;
            p.bytes_needed = (size_t(1) << 30) + size_t(b) * (size_t(100) << 20);
            p.samples_per_s = b <= 256 ? 30.0 * b : 7680.0 - b;
            return p;
        },
        o);
}

LayerReport fake_layers() {
    LayerReport r;
    r.config.batch = 128;
    r.config.mode = "eager";
    r.timed_steps = 3;
    r.peaks = peaks_for_device("NVIDIA H100 80GB HBM3");
    kern::ConvShape c{128, 64, 128, 128, 64, 3, 1, 1, 1, true};
    const FwdBwd head = conv_bn_act_cost(c, kern::Act::Relu, true);
    r.rows.push_back(layer_row("heads.0.conv1", {1.9, 2.0, 2.4}, {4.1, 4.0, 3.8}, head.fwd, head.bwd));
    r.rows.push_back(layer_row("loss", {0.11, 0.1, 0.12}, {}, loss_cost(128, 64, 128), {}));
    r.rows.push_back(layer_row("adamw", {0.05, 0.05, 0.06}, {}, adamw_cost(3284270) + grad_norm_cost(3284270), {}));
    r.step_ms = 9.5;
    r.conv_plans = {"n128 64x128 c64->64 k3 s1 g1: cudnn (cudnn 1.200 ms, custom -1.000 ms per fwd+bwd; -1 = not timed)"};
    return r;
}

BenchHeader fake_header() {
    BenchHeader h;
    h.tool = "slidefuse";
    h.command = "slidefuse bench step --batch 128,256 --json out.json";
    h.commit = "0123456789abcdef0123456789abcdef01234567";
    h.date = "2026-11-21T09:30:00Z";
    h.device = fake_h100();
    h.driver = "570.86.15";
    return h;
}

json fake_doc() {
    const BenchHeader h = fake_header();
    BenchRun small = fake_run(128, 60);
    small.nvml = rt::NvmlSummary::unavailable("NVML unavailable: dlopen failed");
    return bench_document(h, {run_json(small), run_json(fake_run(256, 50))}, batch_search_json(fake_search()),
                          layer_report_json(fake_layers()));
}

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

// ---- batch-size search ----

BatchProbeFn limit_probe(int limit, std::vector<int>* seen = nullptr) {
    return [=](int b) {
        if (seen) seen->push_back(b);
        BatchProbe p;
        p.fits = b <= limit;
        if (!p.fits) p.note = "cudaErrorMemoryAllocation";
        return p;
    };
}

TEST(ToolsBench, BatchSearchMonotoneMemoryBudget) {
    const BatchSearchResult r = fake_search();  // 1 GiB + 100 MiB per sample within 40 GiB: b <= 399.36
    EXPECT_EQ(r.largest, 392);
    EXPECT_EQ(r.first_infeasible, 400);
    EXPECT_FALSE(r.capped);
    EXPECT_FALSE(r.probe_limit_hit);
    EXPECT_LE(static_cast<int>(r.probes.size()), max_probes_needed(r.options));
    for (const BatchProbeRecord& p : r.probes) {
        EXPECT_EQ(p.batch % 8, 0);
        EXPECT_EQ(p.feasible, p.probe.bytes_needed <= (size_t(40) << 30)) << p.batch;
        EXPECT_EQ(p.why.empty(), p.feasible);
    }
    EXPECT_EQ(r.probes[6].batch, 512);
    EXPECT_EQ(r.probes[6].why, "needs 51.00 GiB, over the 40.00 GiB budget");
    EXPECT_EQ(r.fastest, 256);  // 7,680 samples/s; 384 gives 7,296; 512 is over budget
    EXPECT_EQ(r.fastest_samples_per_s, 7680);
    const BatchSearchResult again = fake_search();  // deterministic
    ASSERT_EQ(again.probes.size(), r.probes.size());
    for (size_t i = 0; i < r.probes.size(); ++i) EXPECT_EQ(again.probes[i].batch, r.probes[i].batch);
}

TEST(ToolsBench, BatchSearchOomThresholdAndNonPowerOfTwo) {
    std::vector<int> seen;
    BatchSearchResult r = search_batch_size(limit_probe(1000, &seen));
    EXPECT_EQ(r.largest, 1000);
    EXPECT_EQ(seen, (std::vector<int>{8, 16, 32, 64, 128, 256, 512, 1024, 768, 896, 960, 992, 1008, 1000}));
    EXPECT_STREQ(r.probes[7].phase, "double");
    EXPECT_STREQ(r.probes[8].phase, "bisect");
    EXPECT_NE(r.probes[7].why.find("cudaErrorMemoryAllocation"), std::string::npos);
    EXPECT_EQ(r.fastest, 0);  // nothing timed

    r = search_batch_size(limit_probe(300));
    EXPECT_EQ(r.largest, 296);
    EXPECT_EQ(r.first_infeasible, 304);
    // Every limit up to the cap: the answer is the limit rounded down to the granule, within the bound.
    BatchSearchOptions o;
    o.max_batch = 1000;  // -> 1000, not a power of two times 8
    for (int limit = 8; limit <= 1100; ++limit) {
        r = search_batch_size(limit_probe(limit), o);
        ASSERT_EQ(r.largest, std::min(limit, 1000) / 8 * 8) << limit;
        ASSERT_EQ(r.capped, limit >= 1000) << limit;
        ASSERT_LE(static_cast<int>(r.probes.size()), max_probes_needed(o)) << limit;
    }
    EXPECT_EQ(max_probes_needed(BatchSearchOptions{}), 10 + 8);  // 8..4096 doubling, 256 granules bisected
}

TEST(ToolsBench, BatchSearchCapGranuleLimitsAndErrors) {
    BatchSearchOptions o;
    o.max_batch = 100;  // -> 96
    std::vector<int> seen;
    BatchSearchResult r = search_batch_size(limit_probe(1 << 20, &seen), o);
    EXPECT_EQ(seen, (std::vector<int>{8, 16, 32, 64, 96}));
    EXPECT_TRUE(r.capped);
    EXPECT_EQ(r.largest, 96);
    EXPECT_EQ(r.first_infeasible, 0);

    o = BatchSearchOptions{};
    o.granule = 16;
    o.min_batch = 20;  // -> 32
    seen.clear();
    r = search_batch_size(limit_probe(200, &seen), o);
    EXPECT_EQ(seen.front(), 32);
    EXPECT_EQ(r.largest, 192);

    o = BatchSearchOptions{};
    o.max_probes = 3;
    r = search_batch_size(limit_probe(1000), o);
    EXPECT_TRUE(r.probe_limit_hit);
    EXPECT_EQ(r.largest, 32);
    EXPECT_EQ(r.probes.size(), 3u);

    o = BatchSearchOptions{};
    o.budget_bytes = size_t(2) << 30;
    const BatchProbeFn big = [](int b) {
        BatchProbe p;
        p.fits = true;
        p.bytes_needed = (size_t(3) << 30) + size_t(b);
        return p;
    };
    SF_EXPECT_ERROR(search_batch_size(big, o), "smallest batch, 8", "3.00 GiB", "2.00 GiB budget");
    SF_EXPECT_ERROR(search_batch_size(limit_probe(4)), "smallest batch, 8", "does not fit",
                    "cudaErrorMemoryAllocation");
    SF_EXPECT_ERROR(search_batch_size(limit_probe(100), o), "no bytes_needed");
    o = BatchSearchOptions{};
    o.granule = 0;
    SF_EXPECT_ERROR(search_batch_size(limit_probe(100), o), "granule must be >= 1");
    o = BatchSearchOptions{};
    o.max_batch = 7;
    SF_EXPECT_ERROR(search_batch_size(limit_probe(100), o), "max batch 7");
    SF_EXPECT_ERROR(search_batch_size(BatchProbeFn{}), "no probe function");
}

TEST(ToolsBench, BatchSearchFastestIgnoresInfeasibleAndPrefersSmallerOnTies) {
    const BatchSearchResult r = search_batch_size([](int b) {
        BatchProbe p;
        p.fits = b <= 600;
        p.samples_per_s = b == 16 || b == 64 ? 5000 : (p.fits ? 1000 : 1e9);  // an OOM "timing" must not win
        return p;
    });
    EXPECT_EQ(r.largest, 600);
    EXPECT_EQ(r.fastest, 16);
    EXPECT_EQ(r.fastest_samples_per_s, 5000);
    EXPECT_TRUE(validate_bench_json(bench_document(fake_header(), {}, batch_search_json(r))).empty());
}

// ---- NVML, device info, provenance ----

TEST(ToolsBench, NvmlAbsentGivesReasonNotCrash) {
    rt::Nvml missing("", 0, "libsf-no-such-nvml.so.1");
    EXPECT_FALSE(missing.ok());
    EXPECT_NE(missing.reason().find("dlopen(\"libsf-no-such-nvml.so.1\")"), std::string::npos) << missing.reason();
    EXPECT_FALSE(static_cast<bool>(missing.reader()));
    rt::NvmlSample s;
    std::string why;
    EXPECT_FALSE(missing.read(&s, &why));
    EXPECT_EQ(why, missing.reason());
    rt::NvmlSampler sampler(missing.reader(), 10, missing.reason());
    sampler.start();
    const rt::NvmlSummary sum = sampler.stop();
    EXPECT_FALSE(sum.available);
    EXPECT_EQ(sum.reason, missing.reason());
    const json j = nvml_json(sum);
    EXPECT_EQ(j["available"], false);
    EXPECT_TRUE(j["power_w_mean"].is_null());

    rt::Nvml wrong("", 0, "libm.so.6");  // loads, but is not NVML
    EXPECT_FALSE(wrong.ok());
    EXPECT_NE(wrong.reason().find("nvmlInit_v2 not found in libm.so.6"), std::string::npos) << wrong.reason();

    rt::Nvml real;  // the driver's NVML where there is one; a reason otherwise
    EXPECT_EQ(real.ok(), real.reason().empty()) << real.reason();
    if (real.ok()) {
        EXPECT_TRUE(real.read(&s, &why)) << why;
    }
}

TEST(ToolsBench, NvmlSamplerStatisticsOnSyntheticReader) {
    int calls = 0;
    rt::NvmlSampler sampler(
        [&calls](rt::NvmlSample* s, std::string* why) {
            ++calls;
            if (calls == 2) {
                *why = "power: NVML error 15: GPU is lost";
                return false;
            }
            s->power_w = 100.0 + calls;  // 101, 103, 104, ...
            s->gpu_util_pct = calls % 2 ? 100 : 90;
            s->sm_clock_mhz = 1500;
            s->throttle_reasons = calls == 3 ? 4 : 1;
            s->has_throttle = true;
            return true;
        },
        1);
    EXPECT_FALSE(sampler.running());
    sampler.start();
    SF_EXPECT_ERROR(sampler.start(), "already running");
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    const rt::NvmlSummary s = sampler.stop();
    EXPECT_FALSE(sampler.running());
    ASSERT_GE(calls, 3);
    EXPECT_TRUE(s.available);
    EXPECT_EQ(s.samples + s.failed_reads, calls);
    EXPECT_EQ(s.failed_reads, 1);
    EXPECT_EQ(s.reason, "power: NVML error 15: GPU is lost");
    EXPECT_EQ(s.power_w.min, 101);
    EXPECT_EQ(s.power_w.max, 100.0 + calls);
    EXPECT_DOUBLE_EQ(s.power_w.mean(), (101.0 + (3 + calls) * (calls - 2) / 2.0 + 100.0 * (calls - 2)) / s.samples);
    EXPECT_EQ(s.sm_clock_mhz.mean(), 1500);
    EXPECT_EQ(s.throttle_reasons_any, 5u);
    EXPECT_EQ(s.temperature_c.n, 0);  // never read: no statistics, null in JSON
    EXPECT_TRUE(nvml_json(s)["temperature_c_max"].is_null());
    EXPECT_GT(s.window_s, 0.03);

    rt::NvmlSampler failing(
        [](rt::NvmlSample*, std::string* why) {
            *why = "boom";
            return false;
        },
        1);
    failing.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const rt::NvmlSummary f = failing.stop();
    EXPECT_FALSE(f.available);
    EXPECT_EQ(f.reason, "boom");
    EXPECT_GE(f.failed_reads, 1);
    {
        rt::NvmlSampler left_running(
            [](rt::NvmlSample* s, std::string*) {
                s->power_w = 1;
                return true;
            },
            1);
        left_running.start();
    }  // the destructor stops and joins
    rt::FieldStats st;
    st.add(NAN);
    EXPECT_EQ(st.n, 0);
    EXPECT_TRUE(std::isnan(st.mean()));
    SF_EXPECT_ERROR(rt::NvmlSampler([](rt::NvmlSample*, std::string*) { return true; }, 0).start(), "interval_ms");
}

TEST(ToolsBench, DeviceInfoWithoutGpu) {
    const rt::DeviceInfo d = rt::query_device_info(0);
    EXPECT_GE(d.cuda_runtime_version, 12000);
    EXPECT_GE(d.cudnn_version, 90000u);
    EXPECT_GE(d.cudnn_compiled, 90000u);
    std::string why;
    if (!sftest::gpu_available(&why)) {
        EXPECT_FALSE(d.available);
        EXPECT_FALSE(d.reason.empty());
        EXPECT_TRUE(d.name.empty());
        size_t free = 1, total = 1;
        EXPECT_FALSE(rt::query_device_memory(&free, &total, &why));
        EXPECT_FALSE(why.empty());
    } else {
        EXPECT_TRUE(d.available) << d.reason;
        EXPECT_FALSE(d.name.empty());
        EXPECT_GT(d.sm_count, 0);
        EXPECT_FALSE(rt::query_device_info(999).available);
        EXPECT_NE(rt::query_device_info(999).reason.find("does not exist"), std::string::npos);
    }
    json doc = fake_doc();
    doc["device"] = device_json(d, "");
    EXPECT_TRUE(validate_bench_json(doc).empty()) << validate_bench_json(doc).front();  // either way schema-valid
    EXPECT_EQ(rt::cuda_version_string(12080), "12.8");
    EXPECT_EQ(rt::cuda_version_string(13000), "13.0");
    EXPECT_EQ(rt::cuda_version_string(0), "");
    EXPECT_EQ(rt::cudnn_version_string(91900), "9.19.0");
    EXPECT_EQ(rt::cudnn_version_string(90102), "9.1.2");
    rt::DeviceInfo h = fake_h100();
    EXPECT_NEAR(h.theoretical_mem_gbps(), 2 * 2619e6 * 640 / 1e9, 1e-9);  // 3,352 GB/s
}

TEST(ToolsBench, GitCommitFromWorkTree) {
    const fs::path root = fs::temp_directory_path() / ("sf_bench_git_" + std::to_string(::getpid()));
    const std::string sha = "89abcdef0123456789abcdef0123456789abcdef";
    fs::create_directories(root / ".git/refs/heads");
    fs::create_directories(root / "build/bin");
    std::ofstream(root / ".git/HEAD") << "ref: refs/heads/main\n";
    std::ofstream(root / ".git/refs/heads/main") << sha << "\n";
    EXPECT_EQ(read_git_commit((root / "build/bin").string()), sha);
    fs::remove(root / ".git/refs/heads/main");
    std::ofstream(root / ".git/packed-refs") << "# pack-refs with: peeled\n" << sha << " refs/heads/main\n";
    EXPECT_EQ(read_git_commit(root.string()), sha);
    std::ofstream(root / ".git/HEAD") << std::string(40, 'e') << "\n";  // detached
    EXPECT_EQ(read_git_commit(root.string()), std::string(40, 'e'));
    fs::create_directories(root / "wt");
    std::ofstream(root / "wt/.git") << "gitdir: " << (root / ".git").string() << "\n";
    EXPECT_EQ(read_git_commit((root / "wt").string()), std::string(40, 'e'));
    fs::remove_all(root);
    EXPECT_EQ(read_git_commit("/proc/self"), "");
    ::setenv("SLIDEFUSE_COMMIT", "feedbee", 1);
    EXPECT_EQ(detect_git_commit(), "feedbee");
    ::unsetenv("SLIDEFUSE_COMMIT");
    EXPECT_FALSE(detect_git_commit().empty());  // a sha here (a checkout), "unknown" elsewhere
}

// ---- per-layer table ----

TEST(ToolsBench, LayerTableTotalsTextAndJson) {
    const LayerReport rep = fake_layers();
    EXPECT_DOUBLE_EQ(rep.rows[0].fwd_ms, 2.0);  // medians of the samples
    EXPECT_DOUBLE_EQ(rep.rows[0].bwd_ms, 4.0);
    EXPECT_EQ(rep.rows[1].bwd_ms, 0);
    const LayerTotals t = layer_totals(rep);
    EXPECT_DOUBLE_EQ(t.ms, 2.0 + 4.0 + 0.11 + 0.05);
    double floor = 0;
    for (const LayerRow& r : rep.rows) floor += roofline(r.fwd + r.bwd, r.fwd_ms + r.bwd_ms, rep.peaks).floor_ms;
    EXPECT_DOUBLE_EQ(t.floor_ms, floor);
    EXPECT_LE(t.aggregate.floor_ms, t.floor_ms);
    EXPECT_DOUBLE_EQ(t.outside_ms, 9.5 - t.ms);
    EXPECT_DOUBLE_EQ(t.times_floor, 9.5 / floor);

    const std::string text = format_layer_table(rep);
    EXPECT_NE(text.find("heads.0.conv1"), std::string::npos) << text;
    EXPECT_NE(text.find("total"), std::string::npos);
    EXPECT_NE(text.find("TFLOP/s"), std::string::npos);
    EXPECT_NE(text.find(rt::format("%.2fx its floor", 9.5 / floor)), std::string::npos) << text;
    EXPECT_NE(text.find("H100 SXM"), std::string::npos);
    const Roofline head = roofline(rep.rows[0].fwd + rep.rows[0].bwd, 6.0, rep.peaks);
    EXPECT_NE(text.find(rt::format("%.1f%%", 100 * head.share)), std::string::npos) << text;

    const json j = layer_report_json(rep);
    EXPECT_EQ(j["rows"][0]["fwd_samples_ms"].size(), 3u);
    EXPECT_FALSE(j["rows"][1].contains("bwd_samples_ms"));
    EXPECT_DOUBLE_EQ(j["total"]["floor_ms"].get<double>(), floor);

    LayerReport unknown = rep;
    unknown.peaks = peaks_for_device("Tesla T4");
    unknown.step_ms = 0;
    EXPECT_NE(format_layer_table(unknown).find("no roofline"), std::string::npos);
    const json ju = layer_report_json(unknown);
    EXPECT_TRUE(ju["rows"][0]["floor_ms"].is_null());
    EXPECT_EQ(ju["rows"][0]["bound"], "unknown");
    EXPECT_TRUE(ju["step"]["measured_ms"].is_null());
    EXPECT_TRUE(validate_bench_json(bench_document(fake_header(), {}, nullptr, ju)).empty());

    LayerReport dup = rep;
    dup.rows.push_back(dup.rows[0]);
    SF_EXPECT_ERROR(layer_report_json(dup), "duplicate row name heads.0.conv1");
    SF_EXPECT_ERROR(layer_row("x", {-1}, {}, {}, {}), "row x");
    SF_EXPECT_ERROR(layer_report_json(LayerReport{}), "no rows");
}

}  // namespace
