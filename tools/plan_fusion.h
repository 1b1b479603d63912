// `slidefuse plan --cudnn-device FILE|gpu --fusion-graphs`: does cuDNN have engines for the
// BatchNorm fusion graphs the step would need to move less memory (docs/perf/OPTIMIZATION_LOG.md,
// entry 0)? For a few of the step's convolution shapes at the plan's batch and size it builds, for the
// target (a device property JSON or the GPU's handle), the operation graphs of
//   conv alone (the control: every step convolution is planned this way),
//   conv + genstats (BN statistics in the convolution's epilogue),
//   scale + bias + act + conv (the previous layer's BN apply and activation in the prologue; act =
//     identity, ReLU, SiLU (cuDNN's swish); scale and bias fp32 or bf16), and the same + genstats,
// and reports per graph whether cuDNN accepts it, how many engines it has, how many of them
// finalize and give an execution plan, and what the heuristics propose. Nothing is executed: whether
// an engine exists, not whether it is fast. With `--time` (a GPU's handle only) the graphs the step
// would use (fp32 scale and bias, identity or SiLU) are executed, timed against the plain conv + the
// step's own BN kernels and checked (tools/plan_fusion_time.h; each graph's "time" member), and the
// document gains "fused_timed" and "fused_checks_ok". Without a device (a property JSON) cuDNN 9.19 gives no
// plan for any fused graph (the heuristics return none) while the control plans: only a run through a
// GPU's handle answers the question.
// JSON (the "cudnn_fusion" member of the slidefuse.plan/1 document):
//   {"device", "source", "cudnn_version", "shapes", "graphs": [{"shape", "graph", "accepted", "reason",
//    "engines", "engines_finalized", "engines_planned", "first_planned_engine", "heuristic_configs",
//    "heuristic_plans", "first_heuristic_plan", "workspace_bytes"}],
//    "control_planned": graphs of the control with a plan, "fused_planned": fused graphs with a plan}
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tools/plan_report.h"

namespace tools {

// For the device of `device_json` (read from `device_path`); throws naming the file for a JSON cuDNN
// refuses.
nlohmann::json cudnn_fusion_json(const PlanArgs& a, const std::string& device_json, const std::string& device_path);
// Through a cuDNN handle on this machine's GPU 0; throws without a usable GPU.
nlohmann::json cudnn_fusion_json_gpu(const PlanArgs& a);
// One line per graph, then the two counts.
std::string cudnn_fusion_text(const nlohmann::json& d);

}  // namespace tools
