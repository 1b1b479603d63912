// The CPU reference backend of `slidefuse train` (tools/train.h make_cpu_backend): model::TrainStep
// over a host SiderNet; in a data-parallel job its gradients are summed over the ranks by MPI.
#include <utility>

#include "model/eval_step.h"
#include "model/init.h"
#include "runtime/dist.h"
#include "runtime/exec.h"
#include "tools/train.h"

namespace tools {

namespace {

class CpuBackend : public TrainBackend {
public:
    CpuBackend(const TrainConfig& c, bool deferred_stats)
        : net_(model::NetShape{c.train.batch_size, c.model.input_channels, c.model.input_height, c.model.input_width,
                               resolve_up_order(c.model.fusion_up_order, Backend::Cpu)},
               rt::MemKind::Host),
          step_(net_, loss_config(c), optim_config(c)),
          eval_(net_),
          ex_(rt::Exec::cpu()),
          deferred_(deferred_stats),
          world_(rt::comm().world()) {
        step_.set_comm(&rt::comm());  // data parallel: gradients summed over the ranks (a world of 1: nothing)
        const model::Planner& p = net_.plan();
        model::init_parameters(net_.table(), c.train.seed, p.master(), p.buffers(), p.counters());
    }
    std::string describe() const override { return "the CPU reference backend"; }
    const model::ParamTable& table() const override { return net_.table(); }
    void train_step(BatchSource& data, int accum, double lr) override {
        for (int a = 0; a < accum; ++a) {
            data.next(net_.input(), labels_);
            // 1 / (accum x ranks): the sum over the ranks is the mean over every sample of the step.
            step_.micro_step(ex_, labels_.data(), 1.0 / (static_cast<double>(accum) * world_));
        }
        pending_.push_back(step_.optimizer_step(ex_, lr));
    }
    std::vector<model::StepStats> collect_stats() override { return std::exchange(pending_, {}); }
    bool stats_are_free() const override { return !deferred_; }
    model::Metrics validate(BatchSource& val) override {
        model::Metrics m;
        for (uint64_t k = 0; k < val.batches_per_epoch(); ++k) {
            const int real = val.next(net_.input(), labels_);
            eval_.run(ex_, decoded_);
            for (int b = 0; b < real; ++b) m.add(decoded_[static_cast<size_t>(b)], labels_[static_cast<size_t>(b)]);
        }
        return m;
    }
    model::CheckpointView host_state() override {
        const model::Planner& p = net_.plan();
        return {&net_.table(), p.master(), p.adam_m(), p.adam_v(), p.buffers(), p.counters()};
    }
    void commit_host_state() override {}  // the step reads the host ranges directly
    int64_t adam_steps() const override { return step_.steps_done(); }
    void set_step_counters(int64_t applied, int64_t) override { step_.set_steps_done(applied); }

private:
    model::SiderNet net_;
    model::TrainStep step_;
    model::EvalStep eval_;
    rt::Exec ex_;
    std::vector<data::Label> labels_;
    std::vector<model::Decoded> decoded_;
    std::vector<model::StepStats> pending_;
    bool deferred_ = false;  // --deferred-stats: collected only where a device backend would be
    int world_ = 1;          // data-parallel ranks
};

}  // namespace

std::unique_ptr<TrainBackend> make_cpu_backend(const TrainConfig& cfg, bool deferred_stats) {
    return std::make_unique<CpuBackend>(cfg, deferred_stats);
}

}  // namespace tools
