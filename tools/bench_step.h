// `slidefuse bench step` (tools/bench_step.cpp): whole-step throughput of the CUDA backend, the
// batch-size search and the per-layer roofline table. Options parsed by tools/cmd_bench.cpp.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/up_order.h"
#include "tools/config.h"

namespace model {
struct MemoryPlan;  // model/planner.h
}

namespace model {
struct GraphNodeCounts;
}

namespace tools {

struct StepBenchOptions {
    std::vector<int> batch_sizes = {64, 128, 256};
    int height = 256, width = 512, channels = 2;
    int steps = 50, warmup = 10;  // timed steps (median of these) and untimed warm-up steps
    bool eager = false;           // time the uncaptured calls instead of the graph replay
    bool deterministic = false;   // deterministic cuDNN engines, no autotuning
    int conv_candidates = 4;      // cuDNN plans timed per accumulation variant (kern::ConvPolicy)
    bool search = false;          // batch-size search (largest within the budget, fastest)
    size_t memory_budget_bytes = 0;  // search budget; 0 = free device memory
    bool layers = false;             // per-layer table (eager run)
    int layers_batch = 0;            // batch of the per-layer run (0 = the first batch size)
    double peak_tflops = 0, peak_gbps = 0;  // roofline overrides (0 = the device table)
    std::string ceilings;                   // --ceilings FILE: the overrides came from it (when not given)
    int world = 0;                          // --world N: NCCL allreduce over the job's N ranks; 0: none
    model::UpOrder up_order = model::UpOrder::ConvFirst;  // --up-order (model/up_order.h): the CUDA default
    bool fuse_expand_dw = false;  // --fuse-expand-dw (model.fuse_expand_dw: the fused LiteBlock)
    bool fuse_dw_pw = false;      // --fuse-dw-pw (model.fuse_dw_pw: depthwise BN + SiLU inside the next 1x1 conv)
    bool merge_heads = false;     // --merge-heads (model.merge_heads: the heads' conv1 as one 128 -> 256 ConvBN)
    bool fuse_head_bn = false;    // --fuse-head-bn (model.fuse_head_bn: the heads' conv1 BN + ReLU inside conv2)
    bool fuse_up_bn = false;      // --fuse-up-bn (model.fuse_up_bn: the up paths' upsample inside their BN's loads)
    // The kernels' switches (--pdl, --no-dw-variants, --bn-row-batch N, --bn-min-blocks N, --upsample-row-loads,
    // --dw-fused-bwd,
    // --dw-fused-bwd-bn, --dw-fused-bn-grad, --pw-custom, --pw-stats, --pw-bn-grad, --pw-bn-bwd, --pw-fused-bwd,
    // --dw-stats, --head-bn-grad, --head-bn-dx):
    // the config's cuda section (tools/config.h), mapped onto the network as training maps it
    // (tools/cuda_policy.h). The flags imply what they build on: --dw-fused-bwd-bn sets dw_fused_bwd,
    // --dw-fused-bn-grad dw_fused_bwd and fuse_expand_dw, --pw-stats / --pw-bn-grad / --pw-bn-bwd / --pw-fused-bwd
    // pw_custom, --head-bn-grad fuse_head_bn, --head-bn-dx head_bn_grad and fuse_head_bn.
    CudaSection cuda;
    std::string json;                       // output file ("" = none)
    // --configs FILE: several configurations of the step timed one after another in this process
    // (tools/bench_configs.h), each record DIR/NAME.json (--json-dir DIR); --only NAME,...: the base and
    // these; --deadline-s S: no configuration starts that would not end S seconds after the start.
    std::string configs, json_dir;
    std::vector<std::string> only;
    double deadline_s = 0;
    std::vector<std::string> args;  // the arguments parsed: each configuration's common options
};

// `slidefuse bench`'s usage text (tools/cmd_bench.cpp).
const char* bench_usage();
// Throws naming the bad option (usage in the message).
StepBenchOptions parse_step_bench_args(const std::vector<std::string>& args);
// --world N against the job's world: N must equal it (N = 1: a one-rank NCCL communicator, no MPI);
// a job of several ranks must pass --world (its ranks would otherwise time unrelated steps), and
// cannot --search (each rank would choose its next batch from its own timings: the ranks' NCCL
// calls would no longer match).
void check_bench_world(int n, int job_world, bool search = false);
// extra.graph_nodes of a graph run: {"micro_step": {...}, "optimizer": {...}}, each {kernels, memcpys,
// memsets, others, total} of the captured graph (model::CudaTrainStep::*_graph_nodes).
nlohmann::json graph_nodes_json(const model::GraphNodeCounts& micro, const model::GraphNodeCounts& optimizer);
// "graphs: N kernel nodes per micro-step (T nodes), M per optimizer step (U)" from a run's extra, or ""
// when it has no graph_nodes (eager runs).
std::string graph_nodes_line(const nlohmann::json& extra);

// Runs the benchmark; throws when no CUDA device is usable.
int bench_step(const StepBenchOptions& o, const std::string& command_line);

// The memory plan of batch b with o's network and policy, built dry (no device): the convolution
// workspace replaced by its upper bound, once per branch lane. `bench step --search` and the memory
// check before each batch judge it against the device's memory.
model::MemoryPlan dry_run_memory(int b, const StepBenchOptions& o);

}  // namespace tools
