// `slidefuse plan --roofline` (tools/plan_roofline.h).
#include "tools/plan_roofline.h"

#include <cstdio>

#include "runtime/error.h"
#include "tools/bench_ceilings.h"
#include "tools/step_model.h"

namespace tools {

namespace {

nlohmann::json group_json(const StepFloor::Group& g, double floor_ms) {
    return {{"name", g.name},
            {"rows", g.rows},
            {"bytes", g.cost.bytes},
            {"flops", g.cost.flops()},
            {"tensor_flops", g.cost.tensor_flops},
            {"floor_ms", g.floor_ms},
            {"share", floor_ms > 0 ? g.floor_ms / floor_ms : 0.0}};
}

}  // namespace

nlohmann::json plan_roofline_json(const model::NetShape& shape, bool cuda, const DevicePeaks& peaks,
                                  const kern::ConvPolicy* kernels) {
    SF_CHECK(peaks.known(), "plan --roofline: the peaks of \"%s\" are unknown (%s); name a known GPU with --device or "
             "give --peak-tflops and --peak-gbps", peaks.device.c_str(), peaks.source.c_str());
    Precision p;
    if (!cuda) p.act = p.weight = 4;
    const std::vector<StepModelRow> model_rows = step_model(shape, p, cuda ? kernels : nullptr);
    const StepFloor f = step_floor(model_rows, peaks);
    // Every row of the model, per sample: where the bytes go, layer by layer and pass by pass.
    nlohmann::json rows = nlohmann::json::array();
    for (const StepModelRow& m : model_rows) {
        nlohmann::json passes = nlohmann::json::object();
        for (int k = 0; k < static_cast<int>(StepPart::kCount); ++k) {
            const OpCost& c = m.part[k];
            if (c.bytes == 0 && c.flops() == 0) continue;
            passes[step_part_name(static_cast<StepPart>(k))] = {{"bytes", c.bytes / shape.batch},
                                                                {"flops", c.flops() / shape.batch}};
        }
        const OpCost all = m.fwd() + m.bwd();
        rows.push_back({{"name", m.name},
                        {"kind", m.kind},
                        {"bytes", all.bytes / shape.batch},
                        {"flops", all.flops() / shape.batch},
                        {"passes", passes}});
    }
    nlohmann::json kinds = nlohmann::json::array(), parts = nlohmann::json::array();
    for (const StepFloor::Group& g : f.by_kind) kinds.push_back(group_json(g, f.floor_ms));
    for (const StepFloor::Group& g : f.by_part)
        if (g.rows > 0) parts.push_back(group_json(g, f.floor_ms));
    return {{"peaks",
             {{"device", peaks.device},
              {"entry", peaks.entry},
              {"source", peaks.source},
              {"tensor_tflops", peaks.tensor_tflops},
              {"simt_tflops", peaks.simt_tflops},
              {"hbm_gbps", peaks.hbm_gbps}}},
            {"batch", shape.batch},
            {"kernel_switches", cuda && kernels ? kernel_switch_flags(*kernels) : std::vector<std::string>{}},
            {"floor_ms", f.floor_ms},
            {"memory_ms", f.memory_ms},
            {"compute_ms", f.compute_ms},
            {"samples_per_s_bound", shape.batch / (f.floor_ms * 1e-3)},
            {"per_sample",
             {{"bytes", f.cost.bytes / shape.batch},
              {"flops", f.cost.flops() / shape.batch},
              {"tensor_flops", f.cost.tensor_flops / shape.batch}}},
            {"by_kind", kinds},
            {"by_part", parts},
            {"rows_per_sample", rows}};
}

DevicePeaks plan_roofline_peaks(const PlanArgs& a) {
    double tflops = a.peak_tflops, gbps = a.peak_gbps;
    if (!a.ceilings.empty()) {  // measured on the GPU (explicit --peak-* win)
        const MeasuredPeaks m = read_ceilings(a.ceilings);
        if (tflops == 0) tflops = m.tensor_tflops;
        if (gbps == 0) gbps = m.hbm_gbps;
    }
    return peaks_for_device(a.device, tflops, gbps);
}

nlohmann::json plan_roofline_json(const PlanArgs& a) {
    return plan_roofline_json(plan_shape(a), a.cuda, plan_roofline_peaks(a), &a.kernels);
}

std::string plan_roofline_text(const nlohmann::json& r) {
    std::string out;
    char line[512];
    const nlohmann::json& pk = r["peaks"];
    const int batch = r["batch"].get<int>();
    std::snprintf(line, sizeof(line),
                  "step floor (modelled, tools/step_model.h; every pass at the peaks of %s: %.1f TFLOP/s bf16 tensor, "
                  "%.1f TFLOP/s fp32, %.0f GB/s; %s)\n",
                  pk["entry"].get<std::string>().empty() ? pk["device"].get<std::string>().c_str()
                                                         : pk["entry"].get<std::string>().c_str(),
                  pk["tensor_tflops"].get<double>(), pk["simt_tflops"].get<double>(), pk["hbm_gbps"].get<double>(),
                  pk["source"].get<std::string>().c_str());
    out += line;
    if (r.contains("kernel_switches") && !r["kernel_switches"].empty()) {
        std::string k;
        for (const nlohmann::json& f : r["kernel_switches"]) k += " " + f.get<std::string>();
        out += "  with the kernel switches" + k + " (a 1x1 conv's taken wherever the project's kernel could run it)\n";
    }
    auto table = [&](const char* title, const nlohmann::json& groups) {
        std::snprintf(line, sizeof(line), "  %-24s %6s %11s %12s %10s %7s\n", title, "count", "MB/sample",
                      "GFLOP/sample", "floor ms", "share");
        out += line;
        for (const nlohmann::json& g : groups) {
            std::snprintf(line, sizeof(line), "  %-24s %6d %11.1f %12.3f %10.3f %6.1f%%\n",
                          g["name"].get<std::string>().c_str(), g["rows"].get<int>(),
                          g["bytes"].get<double>() / batch / 1e6, g["flops"].get<double>() / batch / 1e9,
                          g["floor_ms"].get<double>(), 100 * g["share"].get<double>());
            out += line;
        }
    };
    table("by class", r["by_kind"]);
    table("by pass", r["by_part"]);
    const nlohmann::json& ps = r["per_sample"];
    std::snprintf(line, sizeof(line),
                  "  per sample: %.1f MB moved, %.3f GFLOP (%.3f on tensor cores)\n"
                  "  batch %d: floor %.3f ms per step (bytes alone %.3f ms, FLOPs alone %.3f ms): at most %.0f "
                  "samples/s with this design\n",
                  ps["bytes"].get<double>() / 1e6, ps["flops"].get<double>() / 1e9,
                  ps["tensor_flops"].get<double>() / 1e9, batch, r["floor_ms"].get<double>(),
                  r["memory_ms"].get<double>(), r["compute_ms"].get<double>(), r["samples_per_s_bound"].get<double>());
    out += line;
    return out;
}

}  // namespace tools
