// `slidefuse plan --cudnn-device FILE`: every cuDNN convolution plan the CUDA step builds, built by
// the real cuDNN library for the GPU a device property JSON describes (rt::CudnnTarget,
// kern::conv_plan_probe), on a machine without that GPU (or without any). What it proves: the
// library accepts every graph we build and has an engine for every key the step needs, with the
// workspace each takes; what it cannot: that the engines run, their rounding or their speed.
// JSON (the "cudnn" member of the slidefuse.plan/1 document):
//   {"device": deviceName from the JSON (or the GPU's name), "source": the JSON's path, or "gpu 0
//    (cuDNN handle)" for --cudnn-device gpu, "cudnn_version": "9.19.0",
//    "policy": "deterministic"|"autotune", "keys", "planned", "failed", "failed_custom_covered",
//    "seconds", "workspace_bytes" (max over what the run prepares: the chosen plans, every candidate
//    under autotune, and the custom kernels' wgrad scratch), "dgrad_zeroed_bytes" (overwrite-mode
//    dgrad without a beta=0 plan), "variants": {name: keys}, "plans": [{"conv", "op", "mode",
//    "custom" (the custom kernel that may run the shape instead, or null), "required" (no custom
//    alternative, or its cuDNN plans are timed against it), "ok", "variant", "engine", "cudnn_ws",
//    "scratch", "workspace", "candidates", "max_workspace", "seconds", "reports", "error"}]}
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/conv_cudnn.h"
#include "runtime/cudnn_graph.h"
#include "tools/plan_report.h"

namespace tools {

// The JSON text of the device property file at `path` (throws naming the file if unreadable).
std::string read_device_json(const std::string& path);
// The finalized cuDNN device property descriptor of that JSON (read from `device_path`) and its
// "deviceName"; throws naming the file for text that is not a JSON object or that cuDNN refuses.
rt::CudnnDesc device_prop_descriptor(const std::string& device_json, const std::string& device_path,
                                     std::string* device_name);

// Plans of the dry-run network of `a` (bf16, the CUDA backend's shapes) for the device of
// `device_json` under `policy`. Throws rt::Error for a JSON cuDNN refuses (with cuDNN's reason).
nlohmann::json cudnn_plans_json(const PlanArgs& a, const std::string& device_json, const std::string& device_path,
                                const kern::ConvPolicy& policy);
// The same through a cuDNN handle on this machine's GPU 0 (what ConvPlanCache builds there, minus
// execution): `slidefuse plan --cudnn-device gpu`. Compared with the plans from that GPU's property
// JSON it shows whether planning without the device is faithful. Throws without a usable GPU.
nlohmann::json cudnn_plans_json_gpu(const PlanArgs& a, const kern::ConvPolicy& policy);
// Table of a cudnn_plans_json() document (one line per key; the variant reports with `verbose`).
std::string cudnn_plans_text(const nlohmann::json& c, bool verbose);

}  // namespace tools
