// `slidefuse train` (tools::cmd_train, tools/commands.h): the training driver. The loop (in
// tools/train.cpp) is backend-neutral: it asks a TrainBackend for steps, validations and the host
// view of its state, and owns the schedule, logging, checkpoints, resume, early stopping, signals
// and the non-finite-step limit (docs/CHECKPOINTS.md). Today the CPU reference backend
// (train.backend: cpu) runs on the data sources of tools/train_data.h; the CUDA step plugs in as a
// second TrainBackend.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/decode.h"
#include "model/train_step.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/train_data.h"

namespace tools {

std::string train_usage();

// --max-bad-steps default: this many consecutive non-finite (skipped) steps are tolerated; one
// more stops the run with a checkpoint and an error.
constexpr int kDefaultMaxBadSteps = 20;

// What the training loop needs from a backend.
class TrainBackend {
public:
    virtual ~TrainBackend() = default;
    virtual std::string describe() const = 0;  // e.g. "the CPU reference backend"
    virtual const model::ParamTable& table() const = 0;
    // Enqueues one optimizer step: `accum` batches from data (micro-steps, gradients scaled by
    // 1/accum), global-norm clip, AdamW at lr (a device backend computes the same lr itself). A
    // non-finite loss or gradient norm skips the update (StepStats::skipped; weights and AdamW
    // state untouched).
    virtual void train_step(BatchSource& data, int accum, double lr) = 0;
    // The statistics of every step enqueued since the previous call, in order. A device backend
    // synchronises here, so the loop calls it only when it needs them (log interval, epoch end,
    // signal, end of run) unless stats_are_free().
    virtual std::vector<model::StepStats> collect_stats() = 0;
    virtual bool stats_are_free() const = 0;  // true: collect after every step (CPU)
    virtual void synchronize() {}             // waits for every enqueued step (device backends)
    // One pass over the validation split: every real sample once (MODEL_SPEC §3.5 metrics).
    virtual model::Metrics validate(BatchSource& val) = 0;
    // Host view of weights, buffers and AdamW state, up to date (a device backend copies its
    // ranges to host memory first). After a checkpoint was loaded into it, commit_host_state()
    // makes the backend use it (device backends copy it back).
    virtual model::CheckpointView host_state() = 0;
    virtual void commit_host_state() = 0;
    // AdamW updates applied: the bias-correction step t.
    virtual int64_t adam_steps() const = 0;
    // Resume: the step counters of the checkpoint (applied = the bias-correction t; a backend that
    // derives the schedule from the steps attempted also needs the skipped ones).
    virtual void set_step_counters(int64_t applied, int64_t skipped) = 0;
};

// The CPU reference backend (model::TrainStep): parameters initialised from train.seed.
// deferred_stats: its statistics are collected only where a device backend's are (log points,
// epoch ends, signals), which must not change any output (tested).
std::unique_ptr<TrainBackend> make_cpu_backend(const TrainConfig& cfg, bool deferred_stats = false);
// The CUDA backend (model::CudaTrainStep, tools/train_cuda.cpp): same initial weights; needs a
// shard-backed data source (data.source shards or synthetic). `no_graph`: eager steps.
std::unique_ptr<TrainBackend> make_cuda_backend(const TrainConfig& cfg, bool no_graph, int64_t steps_per_epoch,
                                                int64_t total);

// The optimizer settings of the config (AdamW hyper-parameters, global-norm clip), both backends.
model::OptimConfig optim_config(const TrainConfig& cfg);

// The config hash a checkpoint records and a resume compares (RunState::config_hash): the text_hash of
// resume_config_yaml: the config with its output locations (logging.log_dir, checkpoints.save_dir)
// blanked and its output switches (logging.tensorboard, logging.plot) set, without the cuda section
// (the kernels' choices), so that a run's folders can move, its outputs and kernels change between save
// and resume.
std::string resume_config_hash(const TrainConfig& cfg);
// That config (output locations blanked).
TrainConfig resume_config(const TrainConfig& cfg);
// Its YAML without the cuda section: it goes into every checkpoint (RunState::config_yaml) so that a
// refused resume can name the keys that differ.
std::string resume_config_yaml(const TrainConfig& cfg);

// Validation metrics by name (metric_names(): mae_px, rmse_px, hit_le_2px, hit_le_5px).
std::map<std::string, double> metric_values(const model::Metrics& m);
bool higher_is_better(const std::string& metric);  // hit_* (percent); the *_px errors are lower-is-better

// Early stopping of the original (MODEL_SPEC §5; validator.py `_check_early_stopping`), its state
// kept in RunState (es_best, guard_best, epochs_without_improvement) so that it resumes exactly:
//   - validations of epochs < min_epochs change nothing;
//   - select_by improves when it beats es_best by more than 0 and by at least min_improvement
//     (the first counted epoch always does): es_best = value, counter = 0; otherwise counter += 1;
//   - second_guard: when its metric improves on guard_best by more than min_delta (mode min:
//     guard_best - value, max: value - guard_best): guard_best = value, counter = max(0, counter - 3);
//   - stop when counter >= patience.
class EarlyStopping {
public:
    explicit EarlyStopping(const EvalSection& eval) : eval_(eval) {}
    // The fresh-run state: es_best = -inf (higher-is-better select_by) or +inf, guard_best likewise
    // by mode, counter 0.
    void start(model::RunState& rs) const;
    // Feeds the validation after epoch `epoch` (1-based, completed). Returns true to stop.
    bool update(model::RunState& rs, int64_t epoch, const std::map<std::string, double>& values) const;
    bool stopped(const model::RunState& rs) const;  // enabled and counter >= patience

private:
    EvalSection eval_;
};

// best.safetensors: true when `value` of `metric` is strictly better than the best so far (the
// first validation, or a changed metric name, always is); updates best_metric/best_metric_name.
// Unlike the original (MODEL_SPEC §5 "best-model quirk") every validation counts, min_epochs or not.
bool update_best(model::RunState& rs, const std::string& metric, double value);

}  // namespace tools
