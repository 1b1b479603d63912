// Fixtures of the `slidefuse bench` tests (tests/tools_bench_test.cpp, tests/tools_bench_device_test.cpp):
// a complete, schema-valid bench record and its parts (an H100's device info, an NVML summary, timed
// runs, a batch-size search, a per-layer table).
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>

#include "runtime/device_info.h"
#include "runtime/nvml.h"
#include "tools/batch_search.h"
#include "tools/bench_report.h"
#include "tools/layer_table.h"
#include "tools/roofline.h"

namespace sftest::bench {

using nlohmann::json;
using namespace tools;

inline rt::DeviceInfo fake_h100() {
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

inline rt::NvmlSummary fake_nvml() {
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

inline BenchRun fake_run(int batch, int n) {
    BenchRun r;
    r.config.batch = batch;
    r.config.warmup_steps = 20;
    for (int i = 0; i < n; ++i) r.timings_ms.push_back(40.0 + 0.37 * ((i * 7) % 11));
    r.peak_mem_bytes = size_t(21) << 30;
    r.nvml = fake_nvml();
    return r;
}

inline BatchSearchResult fake_search() {
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

inline LayerReport fake_layers() {
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

inline BenchHeader fake_header() {
    BenchHeader h;
    h.tool = "slidefuse";
    h.command = "slidefuse bench step --batch 128,256 --json out.json";
    h.commit = "0123456789abcdef0123456789abcdef01234567";
    h.date = "2026-11-21T09:30:00Z";
    h.device = fake_h100();
    h.driver = "570.86.15";
    return h;
}

inline json fake_doc() {
    const BenchHeader h = fake_header();
    BenchRun small = fake_run(128, 60);
    small.nvml = rt::NvmlSummary::unavailable("NVML unavailable: dlopen failed");
    return bench_document(h, {run_json(small), run_json(fake_run(256, 50))}, batch_search_json(fake_search()),
                          layer_report_json(fake_layers()));
}

}  // namespace sftest::bench
