// The CUDA TrainBackend of `slidefuse train` (train.backend: cuda): model::CudaTrainStep over a
// SiderNetCuda, fed by the shard loader through data::DeviceFeed's two device slots (the copy of
// batch k+1 overlaps the compute of batch k), statistics read from the device's per-step ring
// only when the loop asks for them (docs/GPU_STEP.md). In a job of several ranks each rank takes the
// GPU of its node-local rank and the step allreduces its gradients through NCCL (runtime/nccl.h).
#include "tools/train_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/device_feed.h"
#include "kernels/conv_cudnn.h"
#include "model/gpu_ops.h"
#include "model/init.h"
#include "model/train_step_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/log.h"
#include "runtime/nccl.h"
#include "runtime/profile.h"
#include "tools/cuda_policy.h"
#include "tools/train.h"

namespace tools {

int cuda_nccl_world(int comm_world, const char* env) {
    const std::string v = env ? env : "";
    SF_CHECK(v.empty() || v == "0" || v == "1", "SF_NCCL_WORLD1=%s: expected 1 (NCCL path in a world of 1) or 0",
             v.c_str());
    if (comm_world > 1) return comm_world;
    return v == "1" ? 1 : 0;
}

int cuda_rank_device(int comm_world, int rank, int local_rank, int visible_gpus) {
    if (comm_world <= 1) return 0;
    // A launcher that confines each rank to its own GPU (srun --gpus-per-task=1, or a per-rank
    // CUDA_VISIBLE_DEVICES) leaves one visible device: that one, whatever the node-local rank.
    if (visible_gpus == 1) return 0;
    rt::check_rank_device(rank, local_rank, visible_gpus);
    return local_rank;
}

int cuda_train_device() {
    const rt::Comm& c = rt::comm();
    if (c.world() <= 1) return 0;
    return cuda_rank_device(c.world(), c.rank(), c.local_rank(), rt::visible_gpus());
}

namespace {

model::LrSchedule lr_schedule(const TrainConfig& c, int64_t steps_per_epoch, int64_t total) {
    model::LrSchedule s;
    s.sgdr = c.sched.type == SchedType::Sgdr;
    s.base_lr = c.optimizer.lr;
    s.eta_min = c.sched.cosine_min_lr;
    s.t0 = c.sched.warmup_epochs;
    s.t_mult = c.sched.t_mult;
    s.warmup_steps = c.sched.warmup_steps;
    s.total_steps = std::max<int64_t>(1, total);
    s.steps_per_epoch = std::max<int64_t>(1, steps_per_epoch);
    return s;
}

class CudaBackend : public TrainBackend {
public:
    CudaBackend(const TrainConfig& c, bool no_graph, int64_t steps_per_epoch, int64_t total)
        : cfg_(c),
          ctx_(cuda_train_device()),
          ex_(cuda_exec(ctx_, c.cuda)),
          net_(model::NetShape{c.train.batch_size, c.model.input_channels, c.model.input_height, c.model.input_width,
                               resolve_up_order(c.model.fusion_up_order, Backend::Cuda), c.model.fuse_expand_dw,
                               c.model.fuse_dw_pw, c.model.merge_heads, c.model.fuse_head_bn, c.model.fuse_up_bn},
               ex_, cuda_conv_policy(c.cuda, c.train.deterministic)),
          step_(net_, ex_, loss_config(c), optim_config(c), lr_schedule(c, steps_per_epoch, total),
                c.train.gradient_accumulation_steps) {
        step_.set_use_graphs(!no_graph);
        const int world = cuda_nccl_world(rt::comm().world(), std::getenv("SF_NCCL_WORLD1"));
        if (world > 0) {  // the unique id is broadcast over rt::comm(); every rank gets here
            nccl_ = std::make_unique<rt::NcclComm>(rt::comm().rank(), world, ctx_.exec().device);
            step_.set_allreduce(nccl_.get(), world);
        }
        const model::ParamTable& t = net_.table();
        master_.assign(t.flat_size, 0.0f);
        m_.assign(t.flat_size, 0.0f);
        v_.assign(t.flat_size, 0.0f);
        buffers_.assign(t.buffer_floats, 0.0f);
        counters_.assign(t.counters, 0);
        model::init_parameters(t, c.train.seed, master_.data(), buffers_.data(), counters_.data());
        step_.upload(view());
        const model::MemoryPlan mp = net_.plan().memory();
        SF_LOG_INFO("CUDA network: %.1f MB params, %.1f MB activations, %.1f MB activation grads, %.1f MB workspace",
                    mp.params / 1e6, mp.activations / 1e6, mp.activation_grads / 1e6, mp.workspace / 1e6);
        for (const std::string& line : net_.gpu_ops()->describe()) SF_LOG_DEBUG("conv plan: %s", line.c_str());
    }
    ~CudaBackend() override {
        try {
            ctx_.synchronize();
        } catch (const std::exception& e) {
            SF_LOG_ERROR("CUDA backend shutdown: %s", e.what());
        }
    }

    std::string describe() const override {
        std::string s = step_.use_graphs() ? "the CUDA backend (captured step" : "the CUDA backend (eager, --no-graph";
        s += std::string(", fusion up paths ") + model::up_order_name(net_.shape().up_order);
        // What the network runs (its policy and Exec), not what the config asked: the test of the wiring.
        s += ", kernels: " + cuda_section_summary(cuda_section_of(net_.gpu_ops()->policy(), ex_.pdl));
        if (nccl_) s += ", gradient allreduce: " + nccl_->describe();
        return s + ")";
    }
    const model::ParamTable& table() const override { return net_.table(); }

    void train_step(BatchSource& data, int accum, double /*lr: computed on the device*/) override {
        // The loss gradient scale 1/(accum*world) is captured in the micro-step (CudaTrainStep).
        SF_CHECK(accum == cfg_.train.gradient_accumulation_steps,
                 "CUDA backend built for %d accumulation steps, called with %d", cfg_.train.gradient_accumulation_steps,
                 accum);
        for (int a = 0; a < accum; ++a) {
            const int slot = slot_;
            slot_ ^= 1;
            const data::HostBatch* b = data.next_raw();
            SF_CHECK(b != nullptr, "train.backend=cuda reads shard data (data.source shards or synthetic), not %s",
                     data.describe().c_str());
            // The micro-step reads the whole slot: a short batch would train on the previous
            // batch's tail (the training loader drops the last partial batch).
            SF_CHECK(b->n == cfg_.train.batch_size, "training batch of %d samples, train.batch_size is %d", b->n,
                     cfg_.train.batch_size);
            ensure_feed(*b);
            {
                const rt::Scope scope(ctx_.exec(), "data: copy");
                feed_->copy(*b, slot);
            }
            feed_->wait(ctx_.exec(), slot);
            step_.micro_step(slot);
            feed_->release(ctx_.exec(), slot);
            feed_->host_done(slot);
            data.release_raw();
        }
        step_.optimizer_step();
        // The device ring holds the last kHistory steps: read before it wraps.
        if (step_.steps_enqueued() - collected_ >= model::CudaTrainStep::kHistory / 2) drain();
    }

    std::vector<model::StepStats> collect_stats() override {
        drain();
        std::vector<model::StepStats> out = std::exchange(pending_, {});
        if (!out.empty()) out.back().loss = step_.read_stats().loss;  // the terms of the last micro-batch
        return out;
    }
    bool stats_are_free() const override { return false; }
    void synchronize() override { ctx_.synchronize(); }

    model::Metrics validate(BatchSource& val) override {
        ctx_.synchronize();
        step_.reset_eval_metrics();
        for (uint64_t k = 0; k < val.batches_per_epoch(); ++k) {
            const data::HostBatch* b = val.next_raw();
            SF_CHECK(b != nullptr, "train.backend=cuda validates on shard data, not %s", val.describe().c_str());
            ensure_feed(*b);
            const int slot = slot_;
            slot_ ^= 1;
            feed_->copy(*b, slot);
            feed_->wait(ctx_.exec(), slot);
            step_.eval_batch(slot, b->n);
            feed_->release(ctx_.exec(), slot);
            feed_->host_done(slot);
            val.release_raw();
        }
        const model::DeviceMetricSums s = step_.read_eval_metrics();
        return model::Metrics::from_sums(s.n, s.hit2, s.hit5, s.sum, s.sum_sq, s.sum_gap, s.sum_slider);
    }

    model::CheckpointView host_state() override {
        drain();  // adam_steps() counts every step enqueued before the copy
        step_.download(view());
        return view();
    }
    void commit_host_state() override { step_.upload(view()); }
    int64_t adam_steps() const override { return applied_; }
    void set_step_counters(int64_t applied, int64_t skipped) override {
        step_.set_counters(applied, skipped);
        applied_ = applied;
        collected_ = applied + skipped;
    }

private:
    model::CheckpointView view() {
        return {&net_.table(), master_.data(), m_.data(), v_.data(), buffers_.data(), counters_.data()};
    }

    void ensure_feed(const data::HostBatch& b) {
        if (feed_) return;
        SF_CHECK(b.spec.channels + 1 == cfg_.model.input_channels,
                 "shards hold %d pixel channel(s); model.input_channels=%d needs %d", b.spec.channels,
                 cfg_.model.input_channels, cfg_.model.input_channels - 1);
        feed_ = std::make_unique<data::DeviceFeed>(b.spec, cfg_.train.batch_size);
        for (int s = 0; s < model::CudaTrainStep::kSlots; ++s) step_.bind_slot(s, feed_->pixels(s), feed_->labels(s));
    }

    // Moves the device's records of the steps since the last read into pending_.
    void drain() {
        const std::vector<model::StepRecord> recs = step_.read_history(collected_);
        for (const model::StepRecord& r : recs) {
            model::StepStats s;
            s.mean_loss = r.mean_loss;
            s.loss.total = r.mean_loss;
            s.grad_norm = r.grad_norm;
            s.clip_scale = r.clip_scale;
            s.lr = r.lr;
            s.skipped = r.nonfinite != 0;
            applied_ += s.skipped ? 0 : 1;
            pending_.push_back(s);
        }
        collected_ += static_cast<int64_t>(recs.size());
    }

    const TrainConfig& cfg_;
    rt::CudaContext ctx_;
    rt::Exec ex_;  // the context's, with cuda.pdl: the network's and step's launches
    model::SiderNetCuda net_;
    // Data parallel (or SF_NCCL_WORLD1), else null; made in the constructor's body, destroyed after
    // the step whose optimizer graph captured its collectives.
    std::unique_ptr<rt::NcclComm> nccl_;
    model::CudaTrainStep step_;
    std::unique_ptr<data::DeviceFeed> feed_;
    std::vector<float> master_, m_, v_, buffers_;
    std::vector<int64_t> counters_;
    std::vector<model::StepStats> pending_;
    int slot_ = 0;
    int64_t collected_ = 0, applied_ = 0;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cuda_backend(const TrainConfig& cfg, bool no_graph, int64_t steps_per_epoch,
                                                int64_t total) {
    return std::make_unique<CudaBackend>(cfg, no_graph, steps_per_epoch, total);
}

}  // namespace tools
