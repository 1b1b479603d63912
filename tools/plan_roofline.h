// `slidefuse plan --roofline`: the training step's floor at a GPU's peaks, from the step's cost model
// (tools/step_model.h) on a dry-run plan: no GPU. The floor charges every pass of every layer and op
// with max(its FLOPs at the compute peak, its bytes at the bandwidth), summed: a lower bound on the
// step time of the current design (each kernel moving exactly the bytes it must, at the peak),
// which a measured `bench step` is read against, and which ranks what to fuse next.
// JSON: the "roofline" object of the plan document (tools/plan_report.h):
//   {"peaks": {device, entry, source, tensor_tflops, simt_tflops, hbm_gbps},
//    "batch", "kernel_switches" (bench step's flags of those modelled), "floor_ms", "memory_ms", "compute_ms",
//    "samples_per_s_bound", "per_sample": {"bytes", "flops", "tensor_flops"}, "by_kind": [{"name", "rows", "bytes",
//    "flops", "tensor_flops", "floor_ms", "share"}] (step_kinds order), "by_part": [the same per StepPart, "rows" =
//    passes]}
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/net.h"
#include "tools/plan_report.h"
#include "tools/roofline.h"

namespace tools {

// The peaks --roofline uses: --device's datasheet entry, the measured ceilings of --ceilings FILE in
// its place, explicit --peak-tflops / --peak-gbps over both. Throws naming an unreadable file.
DevicePeaks plan_roofline_peaks(const PlanArgs& a);
// The "roofline" object for the plan's shape at those peaks. Throws when the peaks are unknown.
nlohmann::json plan_roofline_json(const PlanArgs& a);
// kernels: the CUDA step's kernel switches the model charges (PlanArgs::kernels; nullptr: none).
nlohmann::json plan_roofline_json(const model::NetShape& shape, bool cuda, const DevicePeaks& peaks,
                                  const kern::ConvPolicy* kernels = nullptr);
std::string plan_roofline_text(const nlohmann::json& roofline);

}  // namespace tools
