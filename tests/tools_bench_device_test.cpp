// The CPU-testable core of `slidefuse bench`, part 2: the batch-size search on synthetic probes, the
// NVML monitor without NVML (and its sampler on a synthetic reader), device info without a GPU, commit
// lookup, and the per-layer table. Part 1: tests/tools_bench_test.cpp; fixtures:
// tests/support/bench_fixtures.h.
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
#include "tests/support/bench_fixtures.h"
#include "tests/support/compare.h"
#include "tools/batch_search.h"
#include "tools/bench_report.h"
#include "tools/layer_table.h"
#include "tools/roofline.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace tools;
using namespace sftest::bench;

constexpr double kGiB = 1024.0 * 1024 * 1024;

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
