// Per-layer report of `slidefuse bench` (eager mode): forward and backward time per layer beside the
// layer's FLOPs and bytes (tools/roofline.h), the achieved GB/s and TFLOP/s, the share of the
// roofline reached, and a total that says how far the whole step is from its floor. Printed as a
// table and written as the "layers" object of the bench JSON (docs/BENCH.md).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/bench_report.h"
#include "tools/roofline.h"

namespace tools {

struct LayerRow {
    std::string name;                    // e.g. "stage4.fusion.smooth_1_32"
    double fwd_ms = 0, bwd_ms = 0;       // per step (the median of the samples when there are samples)
    std::vector<double> fwd_samples_ms;  // raw per-step times (optional)
    std::vector<double> bwd_samples_ms;
    OpCost fwd, bwd;
};
// A row whose times are the medians of the raw samples (an empty list: 0 ms, e.g. no backward).
LayerRow layer_row(std::string name, std::vector<double> fwd_samples_ms, std::vector<double> bwd_samples_ms,
                   const OpCost& fwd, const OpCost& bwd);

struct LayerReport {
    RunConfig config;     // mode "eager"; warmup_steps as run
    int timed_steps = 1;  // steps each row's times were taken over
    DevicePeaks peaks;
    std::vector<LayerRow> rows;
    double step_ms = 0;  // the whole step measured on its own (0: not measured)
    // The conv plans the rig ran (model::GpuOps::describe(): per shape the implementation and, per
    // cuDNN key, engine, accumulation, workspace and autotuned ms): which pass is slow, and why.
    std::vector<std::string> conv_plans;
};

// Sums over the rows and the step-level comparison.
struct LayerTotals {
    double fwd_ms = 0, bwd_ms = 0, ms = 0;
    OpCost cost;
    double floor_ms = 0;     // sum of the rows' floors (each op bound on its own): NaN if peaks unknown
    Roofline aggregate;      // roofline of the summed cost: the floor if every op overlapped perfectly
    double outside_ms = 0;   // step_ms - ms (launch gaps, work in no row); NaN without step_ms
    double times_floor = 0;  // step_ms / floor_ms; NaN without step_ms or peaks
};
LayerTotals layer_totals(const LayerReport& r);

// Fixed-width text table: one line per layer, a totals line, the step line and the peaks used.
std::string format_layer_table(const LayerReport& r);
// The "layers" object of the bench JSON. Throws rt::Error for an empty report, a duplicate or empty
// row name, or a negative or non-finite time.
nlohmann::json layer_report_json(const LayerReport& r);
// Appends the problems of a "layers" object (recomputing every derived number) to c.
void validate_layers_json(JsonChecker& c, const nlohmann::json& layers, const std::string& path);

}  // namespace tools
