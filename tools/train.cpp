#include "tools/train.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/eval_step.h"
#include "model/init.h"
#include "model/schedule.h"
#include "runtime/device_report.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/log.h"
#include "runtime/profile.h"
#include "tools/progress.h"
#include "tools/run_dir.h"
#include "tools/run_log.h"
#include "tools/signals.h"
#include "tools/train_args.h"
#include "tools/train_cuda.h"
#include "tools/train_dist.h"
#include "tools/val_progress.h"

namespace tools {

namespace {

double lr_at(const TrainConfig& c, int64_t epoch, int64_t step, int64_t total) {
    if (c.sched.type == SchedType::Sgdr)
        return model::sgdr_lr(c.optimizer.lr, c.sched.cosine_min_lr, c.sched.warmup_epochs, c.sched.t_mult,
                              static_cast<int>(epoch));
    return model::warmup_cosine_lr(c.optimizer.lr, c.sched.cosine_min_lr, c.sched.warmup_steps, total, step);
}

// The training loop over a TrainBackend; its whole state is rs_ (what a checkpoint stores) plus
// the backend's tensors and the data cursor.
class Trainer {
public:
    Trainer(const TrainArgs& args, const TrainConfig& cfg);
    int run();
    // After an error that ends the run: the last completed step as a checkpoint marked with the error.
    void save_after_error(const std::string& what) noexcept;

private:
    void resume(const std::string& path);
    void open_outputs();
    void account(const model::StepStats& s);
    void log_step(const model::StepStats& s, int64_t epoch);
    bool validate_and_select(bool epoch_end);
    void save(const std::string& path, const model::CheckpointView& view);
    std::string save_step_checkpoint();
    [[noreturn]] void stop_on_bad_steps(const model::StepStats& s);

    const TrainArgs& args_;
    const TrainConfig& cfg_;
    const int accum_;
    const int rank_, world_;  // data parallel (rt::comm()): only rank 0 writes outputs
    const bool rank0_;
    const Fault fault_;  // SF_FAULT (tests of failure handling)
    std::unique_ptr<BatchSource> train_data_, val_data_;
    std::unique_ptr<TrainBackend> backend_;
    EarlyStopping early_;
    model::RunState rs_;
    int64_t steps_per_epoch_ = 0, total_ = 0, start_step_ = 0, last_saved_ = -1;
    std::string out_, ckpt_dir_, resumed_from_;
    data::Cursor step_cursor_;  // the data cursor at the start of the step under way
    bool in_step_ = false;      // a step is under way (its data and state may be partly consumed)
    std::ofstream metrics_;
    RunLog run_log_;  // train.log, TensorBoard events, the closing table and plot
    Progress progress_{1};
    double first_loss_ = NAN, last_loss_ = NAN;
    double logged_wait_s_ = 0;  // train_data_->wait_seconds() at the previous log point
};

Trainer::Trainer(const TrainArgs& args, const TrainConfig& cfg)
    : args_(args),
      cfg_(cfg),
      accum_(cfg.train.gradient_accumulation_steps),
      rank_(rt::comm().rank()),
      world_(rt::comm().world()),
      rank0_(rank_ == 0),
      fault_(fault_from_env()),
      early_(cfg.eval) {
    // Before any data is read or generated: logs the GPU, driver and runtime; refuses an unusable one.
    // A rank checks (and makes current) its own GPU: no context of any rank lands on GPU 0.
    if (cfg.train.backend == Backend::Cuda) rt::check_cuda_device(cuda_train_device(), "train.backend=cuda");
    // Rank 0 generates a missing synthetic dataset; the others wait for it (same folder: a shared
    // file system across nodes).
    if (cfg.data.source == DataSource::Synthetic && rank0_) ensure_synthetic_dataset(cfg);
    if (world_ > 1) {
        const rt::ScopedCollectiveTimeout generation(7 * 24 * 3600.0);  // as long as generating takes
        rt::comm().barrier();
    }
    train_data_ = make_batch_source(cfg, SplitRole::Train, rank_, world_);
    val_data_ = make_batch_source(cfg, SplitRole::Val, rank_, world_);
    steps_per_epoch_ = static_cast<int64_t>(train_data_->batches_per_epoch()) / accum_;
    SF_CHECK(steps_per_epoch_ >= 1,
             "the training data (%s) is smaller than one optimizer step (%d x %d samples x %d ranks)",
             train_data_->describe().c_str(), cfg.train.batch_size, accum_, world_);
    total_ = steps_per_epoch_ * cfg.sched.epochs;
    if (cfg.train.max_steps > 0) total_ = std::min(total_, cfg.train.max_steps);
    SF_CHECK(cfg.train.backend == Backend::Cuda || args.profile.empty(),
             "--profile-steps brackets CUDA steps for nsys/ncu; it needs train.backend=cuda");
    backend_ = cfg.train.backend == Backend::Cuda ? make_cuda_backend(cfg, args.no_graph, steps_per_epoch_, total_)
                                                  : make_cpu_backend(cfg, args.deferred_stats);

    rs_.seed = cfg.train.seed;
    rs_.world_size = world_;
    rs_.config_hash = resume_config_hash(cfg);
    early_.start(rs_);
    rs_.config_yaml = resume_config_yaml(cfg);
    // Rank 0 picks the checkpoint and the output folder; every rank loads that checkpoint.
    std::string from = args.resume;
    if (from == "auto" && rank0_) {
        const std::string dir = resume_search_dir(cfg, args.out);
        from = dir.empty() ? "" : model::latest_checkpoint(dir);
        if (from.empty())
            SF_LOG_INFO("--resume auto: no checkpoint in %s; starting a new run",
                        dir.empty() ? (cfg.logging.log_dir + "/*/checkpoints").c_str() : dir.c_str());
    }
    if (from == "auto") from.clear();  // the other ranks: rank 0's choice follows
    rt::broadcast_string(from);
    if (!from.empty()) resume(from);
    if (rank0_)
        out_ = !args.out.empty() ? args.out : !rs_.out_dir.empty() ? rs_.out_dir : new_run_dir(cfg.logging.log_dir);
    rt::broadcast_string(out_);
    ckpt_dir_ = checkpoint_dir(cfg, out_);
    rs_.out_dir = out_;
    if (rank0_) open_outputs();
}

// Weights, buffers, AdamW state and step, data cursor, counters and early-stopping state.
void Trainer::resume(const std::string& path) {
    model::RunState saved;
    model::load_checkpoint(path, backend_->host_state(), &saved);
    if (saved.config_hash != rs_.config_hash) {
        const std::string diff = config_differences(saved.config_yaml, rs_.config_yaml);
        SF_CHECK(args_.allow_config_change,
                 "%s was written by a run with another configuration (%s): resume with the same config file and "
                 "overrides, or pass --allow-config-change",
                 path.c_str(), diff.c_str());
        SF_LOG_WARN(
            "--allow-config-change: resuming %s under another configuration (%s); the run continues from step "
            "%" PRId64 " with the new settings",
            path.c_str(), diff.c_str(), saved.step);
    }
    if (saved.world_size != world_) {
        // The cursor counts each rank's batches: another world size continues elsewhere in the data.
        SF_CHECK(args_.allow_config_change,
                 "%s was written by a run of %lld rank(s), this one has %d: the data position and the global batch "
                 "would change; resume with the same number of ranks, or pass --allow-config-change",
                 path.c_str(), static_cast<long long>(saved.world_size), world_);
        SF_LOG_WARN("--allow-config-change: resuming a %lld-rank run with %d rank(s)",
                    static_cast<long long>(saved.world_size), world_);
    }
    if (!saved.stopped_by_error.empty())
        SF_LOG_WARN("%s was saved after an error ended its run (%s); continuing from its step %" PRId64, path.c_str(),
                    saved.stopped_by_error.c_str(), saved.step);
    backend_->commit_host_state();
    backend_->set_step_counters(saved.adam_step, saved.skipped);
    saved.config_hash = rs_.config_hash;
    saved.seed = rs_.seed;
    saved.config_yaml = rs_.config_yaml;
    saved.world_size = world_;
    saved.stopped_by_error.clear();
    rs_ = saved;
    train_data_->seek(data::Cursor{rs_.cursor_epoch, rs_.cursor_batch});
    start_step_ = last_saved_ = rs_.step;
    resumed_from_ = path;
    if (world_ > 1) {
        int64_t lo = rs_.step, hi = rs_.step;
        rt::comm().allreduce(&lo, 1, rt::ReduceOp::Min);
        rt::comm().allreduce(&hi, 1, rt::ReduceOp::Max);
        SF_CHECK(lo == hi,
                 "the ranks resumed different steps from %s (%lld .. %lld): is the checkpoint folder on a "
                 "file system every node shares?",
                 path.c_str(), static_cast<long long>(lo), static_cast<long long>(hi));
    }
}

// Every output folder is checked (writable, owned by this run, no stale temp files) before step 1.
void Trainer::open_outputs() {
    ensure_writable_dir(out_, "output folder");
    ensure_writable_dir(ckpt_dir_, "checkpoint folder");
    SF_CHECK(!resumed_from_.empty() || !args_.resume.empty() || !std::filesystem::exists(out_ + "/metrics.jsonl"),
             "the output folder '%s' holds another run's metrics.jsonl: give each run its own --out, or continue "
             "that run with --resume auto",
             out_.c_str());
    claim_checkpoint_dir(ckpt_dir_, out_, resumed_from_);
    remove_stale_temp_files(out_);
    remove_stale_temp_files(ckpt_dir_);
    write_resolved_config(cfg_, out_ + "/config.resolved.yaml");
    const std::string path = out_ + "/metrics.jsonl";
    if (!resumed_from_.empty()) truncate_metrics(path, rs_.step);
    metrics_.open(path, resumed_from_.empty() ? std::ios::trunc : std::ios::app);
    SF_CHECK(metrics_.good(), "cannot write %s", path.c_str());
    run_log_.open(out_, cfg_.logging, resumed_from_.empty() ? 0 : rs_.step);
}

// Per-step bookkeeping of one step's statistics (in step order).
void Trainer::account(const model::StepStats& s) {
    rs_.skipped += s.skipped;
    rs_.bad_streak = s.skipped ? rs_.bad_streak + 1 : 0;
    if (std::isnan(first_loss_)) first_loss_ = s.mean_loss;
    last_loss_ = s.mean_loss;
    rs_.window_loss_sum += s.mean_loss;
    ++rs_.window_steps;
}

// The progress line and the metrics.jsonl record of a log point (s: the step just done).
void Trainer::log_step(const model::StepStats& s, int64_t epoch) {
    const double window = rs_.window_loss_sum / static_cast<double>(rs_.window_steps);
    // samples/s over the last log interval (validation and checkpoint time excluded), and on average
    const Progress::Rates r = progress_.rates(rs_.step);
    const double per_step = static_cast<double>(cfg_.train.batch_size) * accum_ * world_;  // the whole job's samples
    const double sps = r.recent * per_step, avg = r.average * per_step;
    // Share of the interval's training time spent waiting for the loader (0: it kept up).
    const double wait_s = train_data_->wait_seconds();
    const nlohmann::json wait_fraction =
        r.recent_seconds > 0 ? nlohmann::json((wait_s - logged_wait_s_) / r.recent_seconds) : nlohmann::json();
    logged_wait_s_ = wait_s;
    if (!rank0_) {  // the other ranks hold the same values and write nothing
        rs_.window_loss_sum = 0;
        rs_.window_steps = 0;
        return;
    }
    char body[256];
    std::snprintf(body, sizeof(body), "epoch %lld | loss %.4f | lr %.3e | grad norm %.3e | %.1f samples/s (avg %.1f)",
                  static_cast<long long>(epoch + 1), window, s.lr, s.grad_norm, sps, avg);
    progress_.update(rs_.step, body);
    const nlohmann::json j = {{"step", rs_.step},
                              {"epoch", epoch + 1},
                              {"loss", s.mean_loss},
                              {"loss_mean_window", window},
                              {"focal_gap", s.loss.focal_gap},
                              {"focal_slider", s.loss.focal_slider},
                              {"offset", s.loss.offset},
                              {"hard_negative", s.loss.hard_negative},
                              {"angle", s.loss.angle},
                              {"padding_bce", s.loss.padding_bce},
                              {"y_axis", s.loss.y_axis},
                              {"lr", s.lr},
                              {"grad_norm", s.grad_norm},
                              {"skipped_steps", rs_.skipped},
                              {"samples_per_s", sps},
                              {"samples_per_s_avg", avg},
                              {"loader_wait_fraction", wait_fraction}};
    metrics_ << j.dump() << "\n" << std::flush;
    run_log_.record(j);
    rs_.window_loss_sum = 0;
    rs_.window_steps = 0;
}

// Validation (MODEL_SPEC §3.5), best.safetensors, early stopping (epoch ends only). Returns true to stop.
bool Trainer::validate_and_select(bool epoch_end) {
    rt::heartbeat();          // validation may take as long as a step may (SF_DIST_TIMEOUT)
    backend_->synchronize();  // (validation waits anyway) the steps enqueued so far count as training time
    progress_.pause();        // the samples/s of training steps only
    progress_.finish();
    model::Metrics m;
    share_bn_buffers(*backend_);  // rank 0's running statistics everywhere (DDP's broadcast_buffers)
    if (rank0_) {
        ProgressSource val(*val_data_, "validation batch", stdout_is_tty());
        m = backend_->validate(val);
    } else {
        m = backend_->validate(*val_data_);
    }
    m = reduce_metrics(m);  // each rank validated its share of the split
    const std::map<std::string, double> v = metric_values(m);
    const int64_t epoch = (rs_.step - 1) / steps_per_epoch_ + 1;
    const std::string& select = cfg_.eval.select_by;
    const bool best = update_best(rs_, select, v.at(select));
    const bool stop = epoch_end && early_.update(rs_, epoch, v);
    SF_CONSOLE(
        "validation after epoch %lld: mae_px %.3f rmse_px %.3f hit_le_2px %.1f%% hit_le_5px %.1f%% (%zu samples)%s",
        static_cast<long long>(epoch), m.mae_px(), m.rmse_px(), m.hit_le_2px(), m.hit_le_5px(), m.count(),
        best ? " best" : "");
    nlohmann::json j = {{"validation", true}, {"epoch", epoch}, {"step", rs_.step}};
    for (const auto& kv : v) j[kv.first] = kv.second;
    j["samples"] = m.count();
    j["best"] = best;
    if (cfg_.eval.early_stopping.enabled) j["patience_counter"] = rs_.epochs_without_improvement;
    if (rank0_) {
        metrics_ << j.dump() << "\n" << std::flush;
        run_log_.record(j);
    }
    if (best && cfg_.checkpoints.save_best && rank0_)
        save(model::best_checkpoint_path(ckpt_dir_), backend_->host_state());
    progress_.resume();
    if (stop)
        SF_CONSOLE("early stopping after epoch %lld: %s has not improved by %g for %lld validations (best %g)",
                   static_cast<long long>(epoch), select.c_str(), cfg_.eval.early_stopping.min_improvement,
                   static_cast<long long>(rs_.epochs_without_improvement), rs_.es_best);
    return stop;
}

// view: backend_->host_state(), taken before adam_steps() is read (a device backend drains its steps).
void Trainer::save(const std::string& path, const model::CheckpointView& view) {
    const data::Cursor c = train_data_->cursor();
    rs_.cursor_epoch = c.epoch;
    rs_.cursor_batch = c.batch;
    rs_.adam_step = backend_->adam_steps();
    model::save_checkpoint(path, view, rs_);
}

// ckpt-<step>.safetensors (once per step), then keep_last pruning. Returns the path.
std::string Trainer::save_step_checkpoint() {
    const std::string path = model::checkpoint_path(ckpt_dir_, rs_.step);
    if (last_saved_ == rs_.step) return path;
    backend_->synchronize();  // (the save waits anyway) enqueued steps count as training time
    rt::heartbeat();
    progress_.pause();
    const model::CheckpointView view = backend_->host_state();  // one download for the check and the save
    check_ranks_agree(view, rs_.step);                          // every rank: the same weights, or the job stops
    if (rank0_) save(path, view);
    progress_.resume();
    if (rank0_) {
        model::prune_checkpoints(ckpt_dir_, cfg_.checkpoints.keep_last);
        SF_LOG_INFO("checkpoint %s", path.c_str());
    }
    last_saved_ = rs_.step;
    return path;
}

// The non-finite-step limit: checkpoint, then the error that ends the run (exit code 1).
void Trainer::stop_on_bad_steps(const model::StepStats& s) {
    const std::string path = save_step_checkpoint();
    progress_.finish();
    SF_FAIL(
        "%lld consecutive steps had a non-finite loss or gradient (the last at step %lld: loss %g, grad norm %g); "
        "the run stopped (--max-bad-steps %d) with checkpoint %s. Lower optimizer.lr or check the data",
        static_cast<long long>(rs_.bad_streak), static_cast<long long>(rs_.step), s.mean_loss, s.grad_norm,
        args_.max_bad_steps, path.c_str());
}

void Trainer::save_after_error(const std::string& what) noexcept {
    progress_.finish();
    if (rs_.step == start_step_) return;  // no step done: the state is the one the run started from
    // Only rank 0 writes; it holds the state every rank agreed on at the last completed step (the
    // other ranks end with the job: an error on one rank aborts them all).
    if (!rank0_) return;
    try {
        const std::string path = model::checkpoint_path(ckpt_dir_, rs_.step);
        if (last_saved_ == rs_.step) return;  // saved already (and named by the error)
        {
            // The step under way may have consumed part of its data: its start is where a resume continues.
            const data::Cursor c = in_step_ ? step_cursor_ : train_data_->cursor();
            const model::CheckpointView view = backend_->host_state();
            rs_.cursor_epoch = c.epoch;
            rs_.cursor_batch = c.batch;
            rs_.adam_step = backend_->adam_steps();
            rs_.stopped_by_error = what;
            model::save_checkpoint(path, view, rs_);
            last_saved_ = rs_.step;
        }
        SF_LOG_INFO(
            "the run stopped with an error after step %lld; checkpoint of the last good step (marked "
            "run.stopped_by_error): %s; continue with --resume auto once the cause is fixed",
            static_cast<long long>(rs_.step), path.c_str());
    } catch (const std::exception& e) {
        SF_LOG_WARN("the run stopped with an error after step %lld and its state could not be saved: %s",
                    static_cast<long long>(rs_.step), e.what());
    }
}

int Trainer::run() {
    SF_LOG_INFO(
        "training %s on %s: %zu parameters, batch %d x %d x %d rank(s), input %dx%dx%d, %lld steps (%lld per epoch), "
        "loss %s; train: %s; val: %s; output %s; checkpoints %s",
        cfg_.model.name.c_str(), backend_->describe().c_str(), backend_->table().num_parameters(),
        cfg_.train.batch_size, accum_, world_, cfg_.model.input_channels, cfg_.model.input_height,
        cfg_.model.input_width, static_cast<long long>(total_), static_cast<long long>(steps_per_epoch_),
        model::loss_variant_name(cfg_.loss.variant), train_data_->describe().c_str(), val_data_->describe().c_str(),
        out_.c_str(), ckpt_dir_.c_str());
    if (!resumed_from_.empty())
        SF_LOG_INFO("resumed from %s at step %" PRId64 " (epoch %" PRId64 ", %" PRId64 " skipped)",
                    resumed_from_.c_str(), rs_.step, rs_.epoch, rs_.skipped);
    if (rs_.step >= total_ || early_.stopped(rs_)) {
        std::printf("nothing to do: the run %s at step %lld\n", early_.stopped(rs_) ? "stopped early" : "ended",
                    static_cast<long long>(rs_.step));
        return 0;
    }
    StopSignals signals;
    const rt::HeartbeatScope heartbeat;  // data parallel: a rank stuck for SF_DIST_TIMEOUT ends the job
    progress_ = Progress(total_, rs_.step);
    std::string last;
    while (true) {
        const int64_t epoch = rs_.step / steps_per_epoch_;  // 0-based epoch of this step
        // --profile-steps a:b: the profiler captures steps a..b (1-based) and nothing else.
        const bool profiled = args_.profile.contains(rs_.step + 1);
        if (profiled && !args_.profile.contains(rs_.step)) rt::profiler_start();
        rt::heartbeat();
        inject_fault(fault_, rs_.step + 1, *backend_);
        step_cursor_ = train_data_->cursor();
        in_step_ = true;
        backend_->train_step(*train_data_, accum_, lr_at(cfg_, epoch, rs_.step, total_));
        in_step_ = false;
        ++rs_.step;
        if (profiled && !args_.profile.contains(rs_.step + 1)) {
            backend_->synchronize();  // the profiled range holds the whole step
            rt::profiler_stop();
        }
        const bool epoch_end = rs_.step % steps_per_epoch_ == 0;
        // Statistics: after every step where they are free, else only where the loop needs them.
        const bool log_point = rs_.step % cfg_.logging.log_interval == 0 || rs_.step == total_;
        // A stop signal on any rank stops every rank after this same step.
        const int stop_signal = agree_on_signal(signals.signal_number());
        model::StepStats s;
        if (backend_->stats_are_free() || log_point || epoch_end || stop_signal != 0) {
            const std::vector<model::StepStats> done = backend_->collect_stats();
            SF_CHECK(!done.empty(), "the backend returned no statistics for step %lld",
                     static_cast<long long>(rs_.step));
            for (const model::StepStats& d : done) account(d);
            s = done.back();
            if (log_point) log_step(s, epoch);
        }
        if (epoch_end) rs_.epoch = rs_.step / steps_per_epoch_;
        bool stop = false;
        if ((epoch_end && rs_.epoch % cfg_.eval.eval_interval == 0) || rs_.step == total_)
            stop = validate_and_select(epoch_end);
        if (epoch_end && rs_.epoch % cfg_.checkpoints.save_interval == 0) last = save_step_checkpoint();
        if (rs_.bad_streak > args_.max_bad_steps) stop_on_bad_steps(s);
        if (stop_signal != 0) {
            last = save_step_checkpoint();
            progress_.finish();
            SF_CONSOLE("stopped by %s%s after step %lld: checkpoint %s; continue with --resume auto",
                       signal_name(stop_signal), signals.requested() ? "" : " on another rank",
                       static_cast<long long>(rs_.step), last.c_str());
            return 0;
        }
        if (stop || rs_.step == total_) break;
    }
    last = save_step_checkpoint();
    progress_.finish();
    const double avg = progress_.rates(rs_.step).average * cfg_.train.batch_size * accum_ * world_;
    SF_CONSOLE(
        "done: %lld steps (%lld in this session) in %s, %.1f samples/s on average, loss %.4f -> %.4f, %lld skipped; "
        "outputs in %s; checkpoint %s",
        static_cast<long long>(rs_.step), static_cast<long long>(rs_.step - start_step_),
        format_duration(progress_.elapsed_s()).c_str(), avg, first_loss_, last_loss_,
        static_cast<long long>(rs_.skipped), out_.c_str(), last.c_str());
    if (rank0_) run_log_.finish();
    return 0;
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv) {
    const TrainArgs args = parse_train_args(argv);
    const TrainConfig cfg = load_config(args.config, args.overrides);
    Trainer trainer(args, cfg);
    try {
        return trainer.run();
    } catch (const rt::Error& e) {
        trainer.save_after_error(e.message());
        throw;
    } catch (const std::exception& e) {
        trainer.save_after_error(e.what());
        throw;
    }
}

}  // namespace tools
