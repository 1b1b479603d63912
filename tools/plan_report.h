// `slidefuse plan`: the memory plan of the network for an input size and batch, from a dry-run
// planner (model/planner.h): nothing is allocated and no GPU is needed.
// JSON (schema "slidefuse.plan/1"):
//   {"schema", "backend": "cuda"|"cpu", "activation_element_bytes": 2|4,
//    "shape": {batch, channels, height, width, fusion_up_order}, "parameters_count",
//    "regions": {parameters, parameter_grads, optimizer_state, buffers, activations,
//                activation_grads, workspace: {"bytes", "per_sample" (null: independent of the batch)}},
//    "total": {"bytes", "per_sample"},
//    "activation_grads": {tensors, unshared_bytes, shared_bytes, zeroed_per_micro_step_bytes,
//                         zeroed_per_sample_bytes, dgrad_first_write_bytes (first written by a conv
//                         backward-data), dgrad_first_write_zeroed_bytes (of those, zeroed first: 0,
//                         beta = 0 plans), dgrad_first_write_zeroed_bound_bytes (zeroed if no shape had
//                         a beta = 0 engine: a dry run builds no plans), conv_dgrad_modes: {overwrite_only,
//                         accumulate_only, both} (conv shapes by the dgrad modes the backward needs)},
//    "workspace": {"bytes", "includes_conv_workspace"},
//    "fusion_up_paths": {count, upsample_first: {bytes, flops}, conv_first: {bytes, flops}} (per sample,
//                        forward + backward, the roofline model's: tools/roofline.h up_path_cost),
//    "roofline": (--roofline only) the step's modelled floor, tools/plan_roofline.h}
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "model/up_order.h"

namespace model {
struct NetShape;  // model/net.h
}

namespace tools {

extern const char* const kPlanSchema;  // "slidefuse.plan/1"

struct PlanArgs {
    int batch = 8, height = 256, width = 512, channels = 2;
    bool cuda = true;  // --backend cuda (bf16 activations) | cpu (fp32)
    std::string json;  // --json FILE ("" = none)
    // --cudnn-device FILE: also build every cuDNN plan for the device that JSON describes
    // (tools/plan_cudnn.h); --conv-policy deterministic|autotune (default deterministic);
    // --verbose: each variant's report.
    std::string cudnn_device;
    bool autotune = false;
    bool verbose = false;
    model::UpOrder up_order = model::UpOrder::UpsampleFirst;  // --up-order (model/up_order.h)
    bool fuse_expand_dw = false;  // --fuse-expand-dw (model.fuse_expand_dw; CUDA only)
    bool fuse_dw_pw = false;      // --fuse-dw-pw (model.fuse_dw_pw; CUDA only)
    bool merge_heads = false;     // --merge-heads (model.merge_heads; CUDA only)
    bool fuse_head_bn = false;    // --fuse-head-bn (model.fuse_head_bn; CUDA only)
    bool fuse_up_bn = false;      // --fuse-up-bn (model.fuse_up_bn; CUDA only)
    // The CUDA step's kernel switches (bench step's flags of the same names, with the same implications):
    // --dw-fused-bwd, --dw-fused-bwd-bn, --dw-fused-bn-grad (with --fuse-expand-dw), --dw-stats, --pw-stats,
    // --pw-bn-grad, --pw-bn-bwd (each with the project's 1x1 kernel, pw_custom). The dry run plans the layers
    // that take them (workspace included) and --roofline charges their passes (tools/step_model.h). CUDA only.
    kern::ConvPolicy kernels;
    bool any_kernel_switch() const;
    bool fusion_graphs = false;   // --fusion-graphs: cuDNN's BN fusion graphs (tools/plan_fusion.h)
    bool fusion_time = false;     // --time (with --fusion-graphs --cudnn-device gpu): execute and time them
    // Tests only: the first shape's control and its SiLU prologue + genstats graph, nothing else (on a
    // GPU each fused graph costs seconds of runtime compilation; the gpu suite runs under a deadline).
    bool fusion_smoke = false;
    // --roofline: the step's modelled floor (tools/plan_roofline.h) at the peaks of --device NAME
    // (the datasheet table, tools/roofline.h; default "H100 SXM"), overridden by --ceilings FILE
    // (`bench ceilings --json`) and --peak-tflops / --peak-gbps.
    bool roofline = false;
    std::string device = "H100 SXM";
    std::string ceilings;
    double peak_tflops = 0, peak_gbps = 0;
};

// The switches of `kernels` that are on, as bench step's flags ("--dw-stats", ...), in a fixed order.
std::vector<std::string> kernel_switch_flags(const kern::ConvPolicy& p);

// The network shape the arguments describe (batch, channels, size, fusion up-path order).
model::NetShape plan_shape(const PlanArgs& a);
// Throws rt::Error naming the bad option (and the usage).
PlanArgs parse_plan_args(const std::vector<std::string>& args, bool* help);
const char* plan_usage();

// The plan as a JSON document (schema above). conv_workspace_bytes: the cuDNN workspace bound to
// add to the planner's reduction workspace (0 = not known; the document says whether it is in).
nlohmann::json plan_json(const PlanArgs& a, size_t conv_workspace_bytes = 0);
// Human-readable table of a plan_json() document.
std::string plan_text(const nlohmann::json& doc);

}  // namespace tools
