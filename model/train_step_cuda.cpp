#include "model/train_step_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/adamw_cuda.h"
#include "kernels/eltwise_cuda.h"
#include "kernels/preprocess.h"
#include "model/decode_cuda.h"
#include "model/device_util.h"
#include "model/train_step_cuda_guard.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/nccl.h"
#include "runtime/profile.h"

namespace model {

// Device-side buffers of the step (one arena, sealed at construction) and the pinned readback.
struct CudaTrainStep::Device {
    rt::Arena dev{"train step", rt::MemKind::Device};
    rt::Arena pinned{"train step readback", rt::MemKind::Pinned};
    kern::DeviceStepState* state = nullptr;
    DeviceLossTerms* loss = nullptr;
    double* step_loss = nullptr;  // sum of this step's micro-batch totals (moved into the ring)
    StepRecord* history = nullptr;
    StepRecord* h_history = nullptr;
    float* valid_avg = nullptr;
    float* valid_min = nullptr;
    double* norm_partials = nullptr;
    int32_t* epoch = nullptr;
    void* loss_ws = nullptr;
    size_t loss_ws_bytes = 0;
    Decoded* decoded = nullptr;
    DeviceMetricSums* metrics = nullptr;
    // pinned readback
    kern::DeviceStepState* h_state = nullptr;
    DeviceLossTerms* h_loss = nullptr;
    DeviceMetricSums* h_metrics = nullptr;
    cudaEvent_t stats_ready = nullptr;
    bool stats_pending = false;
    const uint8_t* pixels[kSlots] = {nullptr, nullptr};
    const data::Label* labels[kSlots] = {nullptr, nullptr};
    // BN running statistics and num_batches_tracked as of the last applied step (the roll-back
    // target of a skipped one, model/train_step_cuda_guard.h).
    float* shadow_buffers = nullptr;
    int64_t* shadow_counters = nullptr;
};

CudaTrainStep::CudaTrainStep(SiderNetCuda& net, const rt::Exec& ex, const LossConfig& loss, const OptimConfig& optim,
                             const LrSchedule& sched, int accum)
    : net_(net), ex_(ex), loss_(loss), optim_(optim), sched_(sched), accum_(accum), d_(std::make_unique<Device>()) {
    SF_CHECK(ex.is_cuda(), "CudaTrainStep needs a CUDA Exec (got %s)", rt::backend_name(ex.backend));
    SF_CHECK(accum >= 1, "gradient accumulation steps must be >= 1, got %d", accum);
    net.shape().validate_for_training();
    SF_CHECK(sched.steps_per_epoch >= 1 && sched.total_steps >= 1 && sched.t0 >= 1 && sched.t_mult >= 1,
             "invalid learning-rate schedule (steps per epoch %lld, total %lld, T_0 %d, T_mult %d)",
             static_cast<long long>(sched.steps_per_epoch), static_cast<long long>(sched.total_steps), sched.t0,
             sched.t_mult);
    const NetShape& s = net.shape();
    // The loss grid, the valid masks and decode use loss.stride; the network's logits are at 1/4.
    SF_CHECK(loss.stride == 4 && net.grid_h() * loss.stride == s.height && net.grid_w() * loss.stride == s.width,
             "loss stride %d does not match the network's output stride 4 (input %dx%d, grid %dx%d)", loss.stride,
             s.height, s.width, net.grid_h(), net.grid_w());
    const size_t cells = static_cast<size_t>(s.batch) * net.grid_h() * net.grid_w();
    const size_t n = net.table().flat_size;
    Device& d = *d_;
    d.loss_ws_bytes = loss_workspace_bytes(loss_, s.batch, net.grid_h(), net.grid_w());
    const size_t o_state = d.dev.reserve(sizeof(kern::DeviceStepState), 256, "step state");
    const size_t o_loss = d.dev.reserve(sizeof(DeviceLossTerms), 256, "loss terms");
    const size_t o_sloss = d.dev.reserve(sizeof(double), 256, "step loss");
    const size_t o_hist = d.dev.reserve(kHistory * sizeof(StepRecord), 256, "step history");
    const size_t p_hist = d.pinned.reserve(kHistory * sizeof(StepRecord), 64, "step history");
    const size_t o_vavg = d.dev.reserve(cells * sizeof(float), 256, "valid mask (avg)");
    const size_t o_vmin = d.dev.reserve(cells * sizeof(float), 256, "valid mask (min)");
    const size_t o_norm = d.dev.reserve(kern::grad_norm_partials(n) * sizeof(double), 256, "grad norm partials");
    const size_t o_epoch = d.dev.reserve(sizeof(int32_t), 256, "epoch");
    const size_t o_lws = d.dev.reserve(std::max<size_t>(d.loss_ws_bytes, 1), 256, "loss workspace");
    const size_t o_dec = d.dev.reserve(static_cast<size_t>(s.batch) * sizeof(Decoded), 256, "decoded");
    const size_t o_met = d.dev.reserve(sizeof(DeviceMetricSums), 256, "metric sums");
    const ParamTable& t = net.table();
    const size_t o_sbuf = d.dev.reserve(std::max<size_t>(t.buffer_floats, 1) * sizeof(float), 256, "BN stats shadow");
    const size_t o_scnt = d.dev.reserve(std::max<size_t>(t.counters, 1) * sizeof(int64_t), 256, "BN counters shadow");
    const size_t p_state = d.pinned.reserve(sizeof(kern::DeviceStepState), 64, "step state");
    const size_t p_loss = d.pinned.reserve(sizeof(DeviceLossTerms), 64, "loss terms");
    const size_t p_met = d.pinned.reserve(sizeof(DeviceMetricSums), 64, "metric sums");
    d.dev.allocate();  // zero-filled: counters, partials (the grad-norm counter must start at 0), sums
    d.pinned.allocate();
    d.dev.seal();
    d.pinned.seal();
    d.state = d.dev.ptr<kern::DeviceStepState>(o_state);
    d.loss = d.dev.ptr<DeviceLossTerms>(o_loss);
    d.step_loss = d.dev.ptr<double>(o_sloss);
    d.history = d.dev.ptr<StepRecord>(o_hist);
    d.h_history = d.pinned.ptr<StepRecord>(p_hist);
    d.valid_avg = d.dev.ptr<float>(o_vavg);
    d.valid_min = d.dev.ptr<float>(o_vmin);
    d.norm_partials = d.dev.ptr<double>(o_norm);
    d.epoch = d.dev.ptr<int32_t>(o_epoch);
    d.loss_ws = d.dev.at(o_lws);
    d.decoded = d.dev.ptr<Decoded>(o_dec);
    d.metrics = d.dev.ptr<DeviceMetricSums>(o_met);
    d.shadow_buffers = d.dev.ptr<float>(o_sbuf);
    d.shadow_counters = d.dev.ptr<int64_t>(o_scnt);
    d.h_state = d.pinned.ptr<kern::DeviceStepState>(p_state);
    d.h_loss = d.pinned.ptr<DeviceLossTerms>(p_loss);
    d.h_metrics = d.pinned.ptr<DeviceMetricSums>(p_met);
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&d.stats_ready, cudaEventDisableTiming));
    sync_bn_shadow();
    set_counters(0, 0);
}

double loss_grad_scale(int accum, int world) {
    SF_CHECK(accum >= 1 && world >= 1, "loss gradient scale of %d accumulation steps over %d ranks", accum, world);
    return 1.0 / (static_cast<double>(accum) * world);
}

void CudaTrainStep::set_allreduce(rt::NcclComm* comm, int world) {
    SF_CHECK(comm && world >= 1 && world == comm->world(),
             "set_allreduce: a communicator of %d ranks for a world of %d", comm ? comm->world() : 0, world);
    // The micro-step graphs capture the loss gradient scale and the optimizer graph the allreduce.
    SF_CHECK(micro_runs_[0] == 0 && micro_runs_[1] == 0 && optim_runs_ == 0 && !optim_graph_,
             "set_allreduce after the first step");
    nccl_ = comm;
    world_ = world;
}

void CudaTrainStep::sync_bn_shadow() {
    const Planner& p = net_.plan();
    const ParamTable& t = p.table();
    SF_CUDA_CHECK(cudaMemcpyAsync(d_->shadow_buffers, p.buffers(), t.buffer_floats * sizeof(float),
                                  cudaMemcpyDeviceToDevice, ex_.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(d_->shadow_counters, p.counters(), t.counters * sizeof(int64_t),
                                  cudaMemcpyDeviceToDevice, ex_.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
}

CudaTrainStep::~CudaTrainStep() {
    // Destructors must not throw: failures are ignored here (the context is going away).
    for (cudaGraphExec_t& g : micro_graph_)
        if (g) cudaGraphExecDestroy(g);
    if (optim_graph_) cudaGraphExecDestroy(optim_graph_);
    if (d_ && d_->stats_ready) cudaEventDestroy(d_->stats_ready);
}

void CudaTrainStep::bind_slot(int slot, const uint8_t* pixels, const data::Label* labels) {
    SF_CHECK(slot >= 0 && slot < kSlots, "slot %d out of range [0, %d)", slot, kSlots);
    SF_CHECK(pixels && labels, "bind_slot(%d): null device pointers", slot);
    SF_CHECK(!micro_graph_[slot], "bind_slot(%d) after the slot's graph was captured", slot);
    d_->pixels[slot] = pixels;
    d_->labels[slot] = labels;
}

void CudaTrainStep::set_counters(int64_t applied, int64_t skipped) {
    SF_CHECK(applied >= 0 && skipped >= 0 && skipped <= INT32_MAX, "invalid step counters %lld/%lld",
             static_cast<long long>(applied), static_cast<long long>(skipped));
    kern::DeviceStepState st;
    st.step = applied;
    st.skipped = static_cast<int32_t>(skipped);
    st.max_grad_norm = static_cast<float>(optim_.clip_grad_norm);
    st.lr = static_cast<float>(sched_.base_lr);
    SF_CUDA_CHECK(cudaMemcpyAsync(d_->state, &st, sizeof(st), cudaMemcpyHostToDevice, ex_.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
    enqueued_ = applied + skipped;
}

void upload_state(const rt::Exec& ex, const Planner& p, const CheckpointView& v) {
    const ParamTable& t = p.table();
    SF_CHECK(v.table && v.table->flat_size == t.flat_size && v.table->buffer_floats == t.buffer_floats &&
                 v.table->counters == t.counters && v.master && v.buffers && v.counters,
             "upload: the host view does not match the network's parameter table");
    const size_t fb = t.flat_size * sizeof(float);
    SF_CUDA_CHECK(cudaMemcpyAsync(p.master(), v.master, fb, cudaMemcpyHostToDevice, ex.stream));
    if (v.adam_m) SF_CUDA_CHECK(cudaMemcpyAsync(p.adam_m(), v.adam_m, fb, cudaMemcpyHostToDevice, ex.stream));
    if (v.adam_v) SF_CUDA_CHECK(cudaMemcpyAsync(p.adam_v(), v.adam_v, fb, cudaMemcpyHostToDevice, ex.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(p.buffers(), v.buffers, t.buffer_floats * sizeof(float), cudaMemcpyHostToDevice,
                                  ex.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(p.counters(), v.counters, t.counters * sizeof(int64_t), cudaMemcpyHostToDevice,
                                  ex.stream));
    kern::convert_f32_to_bf16_cuda(ex, t.flat_size, p.master(), p.working());
    SF_CUDA_CHECK(cudaMemsetAsync(p.grad(), 0, fb, ex.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
}

void download_state(const rt::Exec& ex, const Planner& p, const CheckpointView& v) {
    const ParamTable& t = p.table();
    SF_CHECK(v.table && v.table->flat_size == t.flat_size && v.master && v.buffers && v.counters,
             "download: the host view does not match the network's parameter table");
    const size_t fb = t.flat_size * sizeof(float);
    SF_CUDA_CHECK(cudaMemcpyAsync(v.master, p.master(), fb, cudaMemcpyDeviceToHost, ex.stream));
    if (v.adam_m) SF_CUDA_CHECK(cudaMemcpyAsync(v.adam_m, p.adam_m(), fb, cudaMemcpyDeviceToHost, ex.stream));
    if (v.adam_v) SF_CUDA_CHECK(cudaMemcpyAsync(v.adam_v, p.adam_v(), fb, cudaMemcpyDeviceToHost, ex.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(v.buffers, p.buffers(), t.buffer_floats * sizeof(float), cudaMemcpyDeviceToHost,
                                  ex.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(v.counters, p.counters(), t.counters * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                  ex.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
}

void CudaTrainStep::upload(const CheckpointView& v) {
    upload_state(ex_, net_.plan(), v);
    sync_bn_shadow();  // the uploaded statistics are the new roll-back target
}
void CudaTrainStep::download(const CheckpointView& v) { download_state(ex_, net_.plan(), v); }

void CudaTrainStep::enqueue_micro(int slot) {
    Device& d = *d_;
    const NetShape& s = net_.shape();
    SF_CHECK(d.pixels[slot] && d.labels[slot], "micro_step(%d): slot not bound (bind_slot)", slot);
    {
        const rt::Scope scope(ex_, "data: preprocess");
        kern::preprocess_cuda(ex_, s.batch, s.height, s.width, s.channels - 1, d.pixels[slot], d.labels[slot],
                              net_.input());
        mask_grid_cuda(ex_, s.batch, s.height, s.width, s.channels, s.channels - 1, loss_.stride, net_.input(),
                       d.valid_avg, nullptr);
        net_.zero_activation_grads(ex_);
    }
    net_.forward(ex_, true);
    {
        const rt::Scope scope(ex_, "loss");
        const HeadGrads<float> g = net_.logit_grads();
        loss_forward_backward_cuda(ex_, loss_, net_.logits(), d.valid_avg, d.labels[slot], &g,
                                   loss_grad_scale(accum_, world_), d.loss, d.step_loss, d.loss_ws, d.loss_ws_bytes);
    }
    net_.backward(ex_);
}

void CudaTrainStep::enqueue_optimizer() {
    Device& d = *d_;
    const Planner& p = net_.plan();
    const size_t n = p.table().flat_size;
    const kern::AdamWConsts c = kern::adamw_consts(optim_.adamw);
    const rt::Scope scope(ex_, "optimizer");
    if (nccl_) {
        // One allreduce of the whole flat buffer (padding included) after the backward, not bucketed:
        // ~13 MB (docs/GPU_STEP.md). The loss sum too, so every rank records the same mean loss and a
        // non-finite loss on any rank (the sum is then non-finite) skips the step on every rank.
        const rt::Scope ar(ex_, "allreduce");
        nccl_->allreduce_sum(p.grad(), n, ex_.stream);
        nccl_->allreduce_sum(d.step_loss, 1, ex_.stream);
    }
    schedule_lr_cuda(ex_, sched_, d.state, d.epoch);
    kern::grad_norm_cuda(ex_, n, p.grad(), d.norm_partials, c, d.state);
    record_step_cuda(ex_, d.state, d.step_loss, accum_ * world_, d.history, kHistory);
    // state->nonfinite is settled: keep this step's running statistics, or undo them.
    bn_state_commit_cuda(ex_, d.state, p.buffers(), d.shadow_buffers, p.table().buffer_floats, p.counters(),
                         d.shadow_counters, p.table().counters);
    kern::adamw_cuda(ex_, n, p.master(), p.working(), p.grad(), p.adam_m(), p.adam_v(), c, d.state);
}

namespace {

// The nodes of `graph` by type.
GraphNodeCounts count_nodes(cudaGraph_t graph) {
    GraphNodeCounts c;
    size_t n = 0;
    SF_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0) SF_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
    for (size_t i = 0; i < n; ++i) {
        cudaGraphNodeType t;
        SF_CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &t));
        if (t == cudaGraphNodeTypeKernel)
            ++c.kernels;
        else if (t == cudaGraphNodeTypeMemcpy)
            ++c.memcpys;
        else if (t == cudaGraphNodeTypeMemset)
            ++c.memsets;
        else
            ++c.others;
    }
    size_t ne = 0;
    SF_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne));
    std::vector<cudaGraphNode_t> from(ne), to(ne);
    std::vector<cudaGraphEdgeData> data(ne);
    if (ne > 0) SF_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &ne));
    c.edges = static_cast<int>(ne);
    for (size_t i = 0; i < ne; ++i)
        if (data[i].type == cudaGraphDependencyTypeProgrammatic) ++c.programmatic_edges;
    c.captured = true;
    return c;
}

// Captures what `enqueue` puts on the stream into an instantiated graph; its nodes into *nodes.
template <class F>
cudaGraphExec_t capture(cudaStream_t stream, GraphNodeCounts* nodes, F&& enqueue) {
    SF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
        enqueue();
    } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(stream, &broken);  // leave the stream usable; the first error wins
        if (broken) cudaGraphDestroy(broken);
        throw;
    }
    cudaGraph_t graph = nullptr;
    SF_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    try {
        *nodes = count_nodes(graph);
    } catch (...) {
        cudaGraphDestroy(graph);
        throw;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    SF_CUDA_CHECK(err);
    return exec;
}

}  // namespace

void CudaTrainStep::micro_step(int slot) {
    SF_CHECK(slot >= 0 && slot < kSlots, "slot %d out of range [0, %d)", slot, kSlots);
    // The first call of each sequence runs eagerly (a real step: eager and replayed steps are
    // bitwise equal), so every kernel and cuDNN plan has run once on the stream before capture.
    if (use_graphs_ && micro_runs_[slot]++ > 0) {
        if (!micro_graph_[slot]) {
            GraphNodeCounts nodes;
            micro_graph_[slot] = capture(ex_.stream, &nodes, [&] { enqueue_micro(slot); });
            if (slot == 0) micro_nodes_ = nodes;
        }
        SF_CUDA_CHECK(cudaGraphLaunch(micro_graph_[slot], ex_.stream));
    } else {
        enqueue_micro(slot);
    }
}

void CudaTrainStep::optimizer_step() {
    if (use_graphs_ && optim_runs_++ > 0) {
        if (!optim_graph_) optim_graph_ = capture(ex_.stream, &optim_nodes_, [&] { enqueue_optimizer(); });
        SF_CUDA_CHECK(cudaGraphLaunch(optim_graph_, ex_.stream));
    } else {
        enqueue_optimizer();
    }
    ++enqueued_;
}

std::vector<StepRecord> CudaTrainStep::read_history(int64_t from) {
    SF_CHECK(from >= 0 && from <= enqueued_, "read_history(%lld): %lld steps enqueued", static_cast<long long>(from),
             static_cast<long long>(enqueued_));
    SF_CHECK(enqueued_ - from <= kHistory,
             "read_history: %lld steps since step %lld, but the device keeps the last %d (read more often)",
             static_cast<long long>(enqueued_ - from), static_cast<long long>(from), kHistory);
    Device& d = *d_;
    if (nccl_) nccl_->check_async_error();  // a failed peer: say so rather than wait on the stream
    SF_CUDA_CHECK(cudaMemcpyAsync(d.h_history, d.history, kHistory * sizeof(StepRecord), cudaMemcpyDeviceToHost,
                                  ex_.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
    std::vector<StepRecord> out;
    for (int64_t k = from; k < enqueued_; ++k) out.push_back(d.h_history[k % kHistory]);
    return out;
}

void CudaTrainStep::reset_eval_metrics() {
    SF_CUDA_CHECK(cudaMemsetAsync(d_->metrics, 0, sizeof(DeviceMetricSums), ex_.stream));
}

void CudaTrainStep::eval_batch(int slot, int n_real) {
    Device& d = *d_;
    const NetShape& s = net_.shape();
    SF_CHECK(slot >= 0 && slot < kSlots && d.pixels[slot], "eval_batch: slot %d not bound", slot);
    SF_CHECK(n_real >= 1 && n_real <= s.batch, "eval_batch: %d real samples in a batch of %d", n_real, s.batch);
    kern::preprocess_cuda(ex_, s.batch, s.height, s.width, s.channels - 1, d.pixels[slot], d.labels[slot],
                          net_.input());
    mask_grid_cuda(ex_, s.batch, s.height, s.width, s.channels, s.channels - 1, loss_.stride, net_.input(), nullptr,
                   d.valid_min);
    net_.forward(ex_, false);
    const HeadLogits<float> l = net_.logits();
    decode_cuda(ex_, s.batch, l.h, l.w, loss_.stride, l.gap, l.slider, l.offset, d.valid_min, d.decoded);
    metrics_accumulate_cuda(ex_, n_real, d.decoded, d.labels[slot], d.metrics);
}

DeviceMetricSums CudaTrainStep::read_eval_metrics() {
    SF_CUDA_CHECK(
        cudaMemcpyAsync(d_->h_metrics, d_->metrics, sizeof(DeviceMetricSums), cudaMemcpyDeviceToHost, ex_.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
    return *d_->h_metrics;
}

void CudaTrainStep::request_stats() {
    Device& d = *d_;
    SF_CHECK(!d.stats_pending, "request_stats() while a previous request is pending (poll_stats/read_stats first)");
    SF_CUDA_CHECK(cudaMemcpyAsync(d.h_state, d.state, sizeof(kern::DeviceStepState), cudaMemcpyDeviceToHost,
                                  ex_.stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(d.h_loss, d.loss, sizeof(DeviceLossTerms), cudaMemcpyDeviceToHost, ex_.stream));
    SF_CUDA_CHECK(cudaEventRecord(d.stats_ready, ex_.stream));
    d.stats_pending = true;
}

bool CudaTrainStep::poll_stats(CudaStepStats* out) {
    Device& d = *d_;
    SF_CHECK(d.stats_pending, "poll_stats() without a pending request_stats()");
    const cudaError_t q = cudaEventQuery(d.stats_ready);
    if (q == cudaErrorNotReady) return false;
    SF_CUDA_CHECK(q);
    d.stats_pending = false;
    CudaStepStats s;
    s.steps_applied = d.h_state->step;
    s.steps_skipped = d.h_state->skipped;
    s.lr = d.h_state->lr;
    s.grad_norm = d.h_state->grad_norm;
    s.clip_scale = d.h_state->clip_scale;
    s.last_nonfinite = d.h_state->nonfinite != 0;
    s.loss = to_loss_terms(*d.h_loss);
    *out = s;
    return true;
}

CudaStepStats CudaTrainStep::read_stats() {
    if (!d_->stats_pending) request_stats();
    SF_CUDA_CHECK(cudaEventSynchronize(d_->stats_ready));
    CudaStepStats s;
    SF_CHECK(poll_stats(&s), "statistics not ready after cudaEventSynchronize");
    return s;
}

}  // namespace model
