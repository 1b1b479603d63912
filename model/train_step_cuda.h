// The CUDA training step (DESIGN §4), over a SiderNetCuda (bf16 activations, device memory):
//   micro-step (per batch slot):  uint8 pixels + labels of the slot -> bf16 input (preprocess)
//                                 -> soft valid mask -> zero activation grads -> forward (train)
//                                 -> fused loss (+ d loss / d logits, scaled 1/accum) -> backward
//                                 (parameter grads accumulate)
//   optimizer step:               lr from the schedule (device, from steps taken) -> global grad
//                                 norm + clip factor + non-finite flag -> fused AdamW (master, m, v,
//                                 bf16 working copy; grads zeroed; skipped when non-finite) -> BN
//                                 running statistics committed, or rolled back when skipped (a
//                                 skipped step changes nothing; model/train_step_cuda_guard.h)
// Data parallel (set_allreduce): the optimizer step starts with the NCCL allreduce (sum) of the flat
// fp32 gradient buffer and of the step's loss sum, each rank's loss gradient scaled 1/(accum*world),
// so every rank applies the identical update of the mean gradient over all ranks' samples.
// Every per-step value lives in device memory (kern::DeviceStepState, model::DeviceLossTerms), so
// each sequence is captured into a CUDA graph once (one micro-step graph per input slot, one
// optimizer graph; at its second call — the first runs eagerly so every kernel and cuDNN plan has
// run on the stream before capture) and replayed for the whole run; eager mode enqueues the same calls. Nothing
// allocates or synchronises inside a step. The host reads statistics through a pinned buffer and
// an event (request_stats / poll_stats), never by a per-step synchronisation.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/label.h"
#include "kernels/adamw.h"
#include "model/checkpoint.h"
#include "model/loss.h"
#include "model/decode_cuda.h"
#include "model/loss_cuda.h"
#include "model/net.h"
#include "model/train_step.h"
#include "runtime/exec.h"

struct CUgraphExec_st;
typedef CUgraphExec_st* cudaGraphExec_t;

namespace rt {
class NcclComm;
}

namespace model {

// The factor of d loss / d logits in a micro-step: 1/(accum*world), so that the sum over the ranks
// (the allreduce) of the sum over the accumulation steps is the gradient of the mean loss over every
// sample of the step. world 1: 1/accum exactly.
double loss_grad_scale(int accum, int world);

// The learning-rate schedule evaluated on the device from the optimizer steps attempted so far
// (applied + skipped, as the CPU trainer counts them): sgdr per epoch or warmup_cosine per step.
struct LrSchedule {
    bool sgdr = true;
    double base_lr = 3e-4, eta_min = 3e-6;
    int t0 = 1, t_mult = 2;                    // sgdr
    int64_t warmup_steps = 0, total_steps = 1;  // warmup_cosine
    int64_t steps_per_epoch = 1;
};

// One optimizer step as the device recorded it (a ring of kHistory entries, read in batches).
struct StepRecord {
    double mean_loss = 0;   // mean total loss over the step's micro-batches
    float grad_norm = 0;    // global L2 norm before clipping
    float lr = 0;           // learning rate of the step
    float clip_scale = 1;
    int32_t nonfinite = 0;  // the update was skipped
};

// What the host reads back (every log interval).
struct CudaStepStats {
    int64_t steps_applied = 0, steps_skipped = 0;
    double lr = 0, grad_norm = 0, clip_scale = 1;
    bool last_nonfinite = false;
    LossTerms loss;             // of the last micro-batch
};

// Host <-> device copies of a CUDA network's state (checkpoint views, model/checkpoint.h); null
// adam pointers are skipped. upload rewrites the bf16 working copy from the master weights and
// zeroes the gradients. Both synchronise ex.stream (between steps only).
void upload_state(const rt::Exec& ex, const Planner& p, const CheckpointView& v);
void download_state(const rt::Exec& ex, const Planner& p, const CheckpointView& v);

// Nodes of a captured step graph by type (cudaGraphGetNodes, cudaGraphNodeGetType): the kernels a
// replay launches (a cuDNN execution or an NCCL allreduce is one or more of them), copies, memsets,
// and the rest (event, host and other nodes). `captured` is false until the graph exists.
// edges: the graph's dependencies (cudaGraphGetEdges); programmatic_edges: those of type
// cudaGraphDependencyTypeProgrammatic, what the step's kernels launched with programmatic dependent
// launch become when captured (rt::Exec::pdl; 0 without it).
struct GraphNodeCounts {
    bool captured = false;
    int kernels = 0, memcpys = 0, memsets = 0, others = 0;
    int edges = 0, programmatic_edges = 0;
    int total() const { return kernels + memcpys + memsets + others; }
};

class CudaTrainStep {
public:
    static constexpr int kSlots = 2;
    static constexpr int kHistory = 1024;  // optimizer steps kept in the device ring

    CudaTrainStep(SiderNetCuda& net, const rt::Exec& ex, const LossConfig& loss, const OptimConfig& optim,
                  const LrSchedule& sched, int accum);
    ~CudaTrainStep();
    CudaTrainStep(const CudaTrainStep&) = delete;
    CudaTrainStep& operator=(const CudaTrainStep&) = delete;

    // Device input of each slot (data::DeviceFeed's pixels/labels): (N,H,W,C-1) uint8 and N labels.
    // Fixed for the run (the graphs capture these addresses).
    void bind_slot(int slot, const uint8_t* pixels, const data::Label* labels);
    // Restores the optimizer's step counters (resume). Plan time; synchronises.
    void set_counters(int64_t applied, int64_t skipped);
    // Host <-> device copies of everything a checkpoint holds (model/checkpoint.h; null adam
    // pointers are skipped). upload also rewrites the bf16 working copy from the master weights.
    // Both synchronise: call them between steps (start, checkpoints, end).
    void upload(const CheckpointView& v);
    void download(const CheckpointView& v);

    // Enqueue one micro-step on the batch in `slot` / the optimizer step. With graphs on, the first
    // call of each kind captures it, later calls replay it.
    void micro_step(int slot);
    void optimizer_step();
    void set_use_graphs(bool on) { use_graphs_ = on; }
    // Data parallel over `world` ranks (comm->world()): before the first step. Every later step
    // scales its loss gradient 1/(accum*world) and its optimizer sequence begins with the in-place
    // allreduce (sum) of the gradients and of the step's loss sum, captured with it. Not owned.
    void set_allreduce(rt::NcclComm* comm, int world);
    int world() const { return world_; }
    bool use_graphs() const { return use_graphs_; }

    // Evaluation forward (BN running stats) + decode + metric sums of `n_real` samples of `slot`.
    void eval_batch(int slot, int n_real);
    void reset_eval_metrics();
    DeviceMetricSums read_eval_metrics();  // synchronises (end of validation)

    // Steps attempted so far (applied + skipped) as the host counts enqueued optimizer steps.
    int64_t steps_enqueued() const { return enqueued_; }
    // The records of steps [from, steps_enqueued()) (synchronises). Throws when more than
    // kHistory steps were enqueued since `from` (their records were overwritten).
    std::vector<StepRecord> read_history(int64_t from);

    // Statistics: request_stats enqueues the copy into the pinned buffer and records an event;
    // poll_stats returns true (and the values) once it completed; read_stats waits for it.
    void request_stats();
    bool poll_stats(CudaStepStats* out);
    CudaStepStats read_stats();

    const rt::Exec& exec() const { return ex_; }
    SiderNetCuda& net() { return net_; }

    // The nodes of the captured graphs (micro-step of slot 0, optimizer step); captured = false
    // before their capture (the second call of each) or with graphs off.
    const GraphNodeCounts& micro_graph_nodes() const { return micro_nodes_; }
    const GraphNodeCounts& optimizer_graph_nodes() const { return optim_nodes_; }

private:
    struct Device;  // device-side buffers and the pinned readback (train_step_cuda.cpp)
    void enqueue_micro(int slot);
    void enqueue_optimizer();
    void sync_bn_shadow();  // shadow = live BN statistics (construction, upload); synchronises

    SiderNetCuda& net_;
    rt::Exec ex_;
    LossConfig loss_;
    OptimConfig optim_;
    LrSchedule sched_;
    int accum_ = 1;
    int world_ = 1;                  // ranks whose gradients are summed (set_allreduce)
    rt::NcclComm* nccl_ = nullptr;  // null: no allreduce (a single process)
    bool use_graphs_ = true;
    std::unique_ptr<Device> d_;
    cudaGraphExec_t micro_graph_[kSlots] = {nullptr, nullptr};
    cudaGraphExec_t optim_graph_ = nullptr;
    int64_t micro_runs_[kSlots] = {0, 0}, optim_runs_ = 0;  // calls so far (the first runs eagerly)
    int64_t enqueued_ = 0;  // optimizer steps enqueued (applied + skipped, set_counters included)
    GraphNodeCounts micro_nodes_, optim_nodes_;
};

}  // namespace model
