// `slidefuse train` checkpoints and resume on the CPU backend, end to end: data sources continue
// exactly from a cursor; a resumed run (mid-epoch, at an epoch boundary, after SIGTERM) gives the
// same metrics.jsonl losses and the same final checkpoint, bit for bit, as an uninterrupted run;
// config changes are refused unless allowed; early stopping follows the original's rule; a run of
// non-finite steps stops with a checkpoint; SIGTERM/SIGINT in a child `slidefuse train` process;
// `slidefuse export` and (when /usr/bin/python3 has torch) the PyTorch reference loading it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/generator.h"
#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"
#include "tests/support/log_lines.h"
#include "tests/support/temp_dir.h"
#include "tools/signals.h"
#include "tools/train.h"

namespace tools {
int cmd_export(const std::vector<std::string>& args);  // tools/cmd_export.cpp
}

namespace {

using nlohmann::json;

const std::string kSmoke = std::string(SF_SOURCE_DIR) + "/configs/cpu_smoke.yaml";

struct TempDir : sftest::TempDir {
    TempDir() : sftest::TempDir("sf_resume") {}
};

// The smoke config writing into dir: run folder dir/run, checkpoints dir/ck, a metrics line per step.
std::vector<std::string> smoke_args(const std::string& dir, std::vector<std::string> extra) {
    std::vector<std::string> a = {
        "--config", kSmoke, "--out", dir + "/run", "checkpoints.save_dir=" + dir + "/ck", "logging.log_interval=1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

// metrics.jsonl: step records by step, validation records by step.
struct Metrics {
    std::map<int64_t, json> steps, validations;
};
Metrics read_metrics(const std::string& path) {
    Metrics m;
    std::ifstream f(path);
    std::string l;
    while (std::getline(f, l)) {
        const json j = json::parse(l);
        (j.contains("validation") ? m.validations : m.steps)[j.at("step").get<int64_t>()] = j;
    }
    return m;
}

// The training trajectory of a step record, compared exactly (JSON numbers round-trip doubles).
void expect_same_step(const json& a, const json& b) {
    for (const char* k : {"epoch", "loss", "loss_mean_window", "focal_gap", "focal_slider", "offset", "hard_negative",
                          "angle", "padding_bce", "y_axis", "lr", "grad_norm", "skipped_steps"})
        EXPECT_EQ(a.at(k), b.at(k)) << "step " << a.at("step") << " field " << k;
}

void expect_same_validation(const json& a, const json& b) {
    for (const char* k : {"epoch", "mae_px", "rmse_px", "hit_le_2px", "hit_le_5px", "gap_mae", "slider_mae", "samples"})
        EXPECT_EQ(a.at(k), b.at(k)) << "validation at step " << a.at("step") << " field " << k;
}

// Every tensor of two checkpoint files bitwise, and their run state except the keys in `skip`.
void expect_same_checkpoint(const std::string& a, const std::string& b, const std::vector<std::string>& skip) {
    const rt::SafeTensors x = rt::SafeTensors::load(a), y = rt::SafeTensors::load(b);
    ASSERT_EQ(x.names(), y.names());
    size_t differing = 0;
    for (const std::string& n : x.names())
        if (x.get(n).bytes != y.get(n).bytes && differing++ < 5) ADD_FAILURE() << "tensor " << n << " differs";
    EXPECT_EQ(differing, 0u);
    for (const auto& kv : x.metadata()) {
        if (std::find(skip.begin(), skip.end(), kv.first) != skip.end()) continue;
        EXPECT_EQ(kv.second, y.metadata().at(kv.first)) << kv.first;
    }
}

std::string meta(const std::string& path, const std::string& key) {
    return rt::SafeTensors::load(path).metadata().at(key);
}

using sftest::LogLines;

// ---- data sources continue exactly from a cursor ----

struct Batch {
    std::vector<float> input;
    std::vector<data::Label> labels;
};

Batch take(tools::BatchSource& s, size_t floats) {
    Batch b;
    b.input.resize(floats);
    s.next(b.input.data(), b.labels);
    return b;
}

void expect_seek_continues(const tools::TrainConfig& c, int positions) {
    const size_t floats =
        static_cast<size_t>(c.train.batch_size) * c.model.input_height * c.model.input_width * c.model.input_channels;
    auto straight = tools::make_batch_source(c, tools::SplitRole::Train);
    const uint64_t bpe = straight->batches_per_epoch();
    for (int k = 0; k < positions; ++k) {
        const data::Cursor at = straight->cursor();
        EXPECT_EQ(at, (data::Cursor{static_cast<uint64_t>(k) / bpe, static_cast<uint64_t>(k) % bpe})) << k;
        const Batch want = take(*straight, floats);
        auto resumed = tools::make_batch_source(c, tools::SplitRole::Train);
        resumed->seek(at);
        const Batch got = take(*resumed, floats);
        ASSERT_EQ(got.input, want.input) << "batch " << k;
        ASSERT_EQ(0, std::memcmp(got.labels.data(), want.labels.data(), want.labels.size() * sizeof(data::Label)));
    }
    SF_EXPECT_ERROR(straight->seek(data::Cursor{0, bpe + 1}), "cursor batch");
}

TEST(TrainDataSeek, FixedSourceContinuesExactlyFromAnyCursor) {
    tools::TrainConfig c = tools::load_config(kSmoke, {"data.num_samples=7"});  // 3 batches of 2 per epoch
    expect_seek_continues(c, 8);
}

TEST(TrainDataSeek, ShardSourceContinuesExactlyFromAnyCursor) {
    const TempDir root_dir;
    const std::string& root = root_dir.path;
    data::GenConfig g;
    g.seed = 5;
    g.height = 64;
    g.width = 128;
    data::generate_dataset(g, 20, root + "/data", 2, 8);
    tools::TrainConfig c = tools::load_config(kSmoke, {"data.source=shards", "data.processed_dir=" + root + "/data",
                                                       "train.num_workers=2", "train.batch_size=4"});
    auto s = tools::make_batch_source(c, tools::SplitRole::Train);
    ASSERT_GE(s->batches_per_epoch(), 2u);
    expect_seek_continues(c, static_cast<int>(2 * s->batches_per_epoch() + 1));
}

// ---- resume gives the uninterrupted run's trajectory, bit for bit ----

// sgdr: the learning rate depends on the epoch only, so train.max_steps can end a run mid-epoch
// without changing the trajectory. Validation, best.safetensors and early stopping run every epoch.
const std::vector<std::string> kResumeCfg = {"sched.type=sgdr",
                                             "checkpoints.save_interval=1",
                                             "checkpoints.keep_last=20",
                                             "checkpoints.save_best=true",
                                             "eval.eval_interval=1",
                                             "eval.select_by=mae_px",
                                             "eval.early_stopping.enabled=true",
                                             "eval.early_stopping.min_epochs=0",
                                             "eval.early_stopping.patience=100"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

TEST(TrainResume, ResumedRunsReproduceTheUninterruptedRunBitwise) {
    const TempDir a_dir, b_dir, c_dir;
    const std::string& a = a_dir.path;
    const std::string& b = b_dir.path;
    const std::string& c = c_dir.path;
    // A: 7 steps straight (2 steps per epoch: 4 fixed samples, batch 2).
    ASSERT_EQ(tools::cmd_train(smoke_args(a, with(kResumeCfg, {"train.max_steps=7"}))), 0);
    // B: the same run ended after step 3 (mid-epoch), then resumed to step 7 (--resume auto).
    ASSERT_EQ(tools::cmd_train(smoke_args(b, with(kResumeCfg, {"train.max_steps=3"}))), 0);
    EXPECT_EQ(model::latest_checkpoint(b + "/ck"), model::checkpoint_path(b + "/ck", 3));
    EXPECT_EQ(meta(model::checkpoint_path(b + "/ck", 3), "run.cursor_batch"), "1");  // mid-epoch
    SF_EXPECT_ERROR(tools::cmd_train(smoke_args(b, with(kResumeCfg, {"train.max_steps=7", "--resume", "auto"}))),
                    "another configuration", "--allow-config-change");
    {
        LogLines log;
        ASSERT_EQ(tools::cmd_train(smoke_args(
                      b, with(kResumeCfg, {"train.max_steps=7", "--resume", "auto", "--allow-config-change"}))),
                  0);
        EXPECT_EQ(log.warnings(), 1);
    }
    // C: A's config resumed from A's epoch-boundary checkpoint by path, into other folders.
    ASSERT_EQ(tools::cmd_train(smoke_args(
                  c, with(kResumeCfg, {"train.max_steps=7", "--resume", model::checkpoint_path(a + "/ck", 4)}))),
              0);

    const Metrics ma = read_metrics(a + "/run/metrics.jsonl"), mb = read_metrics(b + "/run/metrics.jsonl"),
                  mc = read_metrics(c + "/run/metrics.jsonl");
    ASSERT_EQ(ma.steps.size(), 7u);
    ASSERT_EQ(mb.steps.size(), 7u);  // B's metrics.jsonl continued where its checkpoint was
    ASSERT_EQ(mc.steps.size(), 3u);  // steps 5..7
    for (int64_t s = 1; s <= 7; ++s) expect_same_step(ma.steps.at(s), mb.steps.at(s));
    for (int64_t s = 5; s <= 7; ++s) expect_same_step(ma.steps.at(s), mc.steps.at(s));
    for (int64_t s : {2, 4, 6, 7}) expect_same_validation(ma.validations.at(s), mb.validations.at(s));
    for (int64_t s : {6, 7}) expect_same_validation(ma.validations.at(s), mc.validations.at(s));
    EXPECT_EQ(mb.validations.count(3), 1u);  // B's end-of-run validation
    {  // B's train.log holds both sessions: the resumed one appended (the refused one never opened it)
        std::ifstream f(b + "/run/train.log");
        int starts = 0, resumed = 0;
        for (std::string l; std::getline(f, l);) {
            starts += l.find("[slidefuse info] training ") != std::string::npos;
            resumed += l.find("resumed from ") != std::string::npos;
        }
        EXPECT_EQ(starts, 2);
        EXPECT_EQ(resumed, 1);
    }

    const std::string a7 = model::checkpoint_path(a + "/ck", 7);
    // B validated once more (step 3), which may have moved its best metric; nothing else differs.
    expect_same_checkpoint(a7, model::checkpoint_path(b + "/ck", 7),
                           {"run.config_hash", "run.out_dir", "run.best_metric", "slidefuse.checksum"});
    // C's folders differ from A's: the config hash leaves output locations out (the checksum covers run.out_dir).
    expect_same_checkpoint(a7, model::checkpoint_path(c + "/ck", 7), {"run.out_dir", "slidefuse.checksum"});
    EXPECT_EQ(meta(a7, "run.step"), "7");
    EXPECT_EQ(meta(a7, "run.epoch"), "3");
    EXPECT_EQ(meta(a7, "run.cursor_epoch"), "3");
    EXPECT_EQ(meta(a7, "run.cursor_batch"), "1");
    EXPECT_TRUE(std::filesystem::exists(model::best_checkpoint_path(a + "/ck")));
    // Resuming a finished run does nothing.
    ASSERT_EQ(tools::cmd_train(smoke_args(a, with(kResumeCfg, {"train.max_steps=7", "--resume", "auto"}))), 0);
    EXPECT_EQ(read_metrics(a + "/run/metrics.jsonl").steps.size(), 7u);
}

TEST(TrainResume, CheckpointPolicyKeepsTheLastKAndTheBest) {
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    ASSERT_EQ(tools::cmd_train(smoke_args(
                  d, {"train.max_steps=9", "checkpoints.save_interval=2", "checkpoints.keep_last=2",
                      "checkpoints.save_best=true", "eval.eval_interval=1", "eval.early_stopping.enabled=false"})),
              0);
    // Epochs of 2 steps: periodic at steps 4 and 8, the end at 9; the last two kept.
    EXPECT_EQ(model::list_checkpoints(d + "/ck"),
              (std::vector<std::string>{model::checkpoint_path(d + "/ck", 8), model::checkpoint_path(d + "/ck", 9)}));
    const std::string best = model::best_checkpoint_path(d + "/ck");
    ASSERT_TRUE(std::filesystem::exists(best));
    const Metrics m = read_metrics(d + "/run/metrics.jsonl");
    int64_t best_step = -1;
    for (const auto& kv : m.validations)
        if (kv.second.at("best").get<bool>()) best_step = kv.first;
    EXPECT_EQ(meta(best, "run.step"), std::to_string(best_step));
    EXPECT_EQ(meta(best, "run.best_metric_name"), "hit_le_5px");
}

TEST(TrainResume, EarlyStoppingStopsTheRunAndAResumeHasNothingToDo) {
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    // Epoch 1 sets the bests; from epoch 2 nothing can improve by 1000 points: patience 1 -> stop.
    const std::vector<std::string> es = {"eval.eval_interval=1",
                                         "eval.early_stopping.enabled=true",
                                         "eval.early_stopping.min_epochs=1",
                                         "eval.early_stopping.patience=1",
                                         "eval.early_stopping.min_improvement=1000",
                                         "eval.early_stopping.second_guard.min_delta=1000000000"};
    ASSERT_EQ(tools::cmd_train(smoke_args(d, es)), 0);
    const Metrics m = read_metrics(d + "/run/metrics.jsonl");
    EXPECT_EQ(m.steps.size(), 4u);  // of 20
    EXPECT_EQ(m.validations.at(4).at("patience_counter"), 1);
    EXPECT_EQ(model::latest_checkpoint(d + "/ck"), model::checkpoint_path(d + "/ck", 4));
    EXPECT_EQ(meta(model::checkpoint_path(d + "/ck", 4), "run.epochs_without_improvement"), "1");
    ASSERT_EQ(tools::cmd_train(smoke_args(d, with(es, {"--resume", "auto"}))), 0);
    EXPECT_EQ(read_metrics(d + "/run/metrics.jsonl").steps.size(), 4u);
}

TEST(TrainResume, ConsecutiveNonFiniteStepsStopTheRunWithACheckpoint) {
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    // lr 1e30: the first update blows the weights up; every later gradient is NaN (skipped).
    SF_EXPECT_ERROR(tools::cmd_train(smoke_args(d, {"optimizer.lr=1e30", "--max-bad-steps", "2"})),
                    "3 consecutive steps had a non-finite loss or gradient", "--max-bad-steps 2");
    const std::string last = model::latest_checkpoint(d + "/ck");
    ASSERT_NE(last, "");
    EXPECT_EQ(meta(last, "run.bad_streak"), "3");
    EXPECT_EQ(meta(last, "run.skipped"), "3");
    const Metrics m = read_metrics(d + "/run/metrics.jsonl");
    EXPECT_EQ(m.steps.rbegin()->second.at("skipped_steps"), 3);
    SF_EXPECT_ERROR(tools::cmd_train(smoke_args(d, {"--max-bad-steps", "x"})), "--max-bad-steps", "'x'");
    SF_EXPECT_ERROR(tools::cmd_train(smoke_args(d, {"--resume", d + "/none.safetensors"})), "none.safetensors",
                    "no such checkpoint file");
}

// ---- the loop with statistics read only where a device backend reads them ----

// --deferred-stats makes the CPU backend report its steps in batches (log points, epoch ends,
// signals), as the CUDA backend does: every output must be the same as per-step collection.
TEST(TrainDeferredStats, OutputsEqualPerStepCollection) {
    const TempDir a_dir, b_dir;
    const std::vector<std::string> cfg = with(kResumeCfg, {"train.max_steps=7", "logging.log_interval=3"});
    auto args = [&](const std::string& d, bool deferred) {
        std::vector<std::string> a = smoke_args(d, cfg);  // log_interval=3 comes after smoke_args' 1: it wins
        if (deferred) a.push_back("--deferred-stats");
        return a;
    };
    ASSERT_EQ(tools::cmd_train(args(a_dir.path, false)), 0);
    ASSERT_EQ(tools::cmd_train(args(b_dir.path, true)), 0);
    const Metrics a = read_metrics(a_dir.path + "/run/metrics.jsonl");
    const Metrics b = read_metrics(b_dir.path + "/run/metrics.jsonl");
    ASSERT_EQ(a.steps.size(), 3u);  // steps 3, 6 and the last (7)
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (const auto& kv : a.steps) expect_same_step(kv.second, b.steps.at(kv.first));
    ASSERT_EQ(a.validations.size(), b.validations.size());
    for (const auto& kv : a.validations) expect_same_validation(kv.second, b.validations.at(kv.first));
    expect_same_checkpoint(model::checkpoint_path(a_dir.path + "/ck", 7), model::checkpoint_path(b_dir.path + "/ck", 7),
                           {"run.out_dir", "slidefuse.checksum"});
}

TEST(TrainDeferredStats, NonFiniteStepsStillStopTheRun) {
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    // Statistics collected at log points (every 8 steps) and epoch ends (every 2 steps here): the
    // streak of 3 skipped steps (2..4) is seen at the epoch end after step 4.
    SF_EXPECT_ERROR(tools::cmd_train(smoke_args(d, {"optimizer.lr=1e30", "--max-bad-steps", "2", "--deferred-stats",
                                                    "logging.log_interval=8"})),
                    "consecutive steps had a non-finite loss or gradient", "--max-bad-steps 2");
    const std::string last = model::latest_checkpoint(d + "/ck");
    ASSERT_NE(last, "");
    EXPECT_EQ(meta(last, "run.step"), "4");
    EXPECT_EQ(meta(last, "run.skipped"), "3");
}

// ---- early stopping and best selection, rule by rule ----

TEST(EarlyStoppingRule, FollowsTheOriginalWithMinImprovementAndTheSecondGuard) {
    tools::EvalSection e;
    e.select_by = "hit_le_5px";
    e.early_stopping.min_epochs = 3;
    e.early_stopping.min_improvement = 0.5;
    e.early_stopping.patience = 2;
    e.early_stopping.second_guard = {"mae_px", 0.5, tools::GuardMode::Min};
    const tools::EarlyStopping es(e);
    model::RunState rs;
    es.start(rs);
    EXPECT_EQ(rs.es_best, -INFINITY);
    EXPECT_EQ(rs.guard_best, INFINITY);
    struct Epoch {
        double hit5, mae;
        int64_t counter;
        bool stop;
    };
    const Epoch epochs[] = {
        {10, 50, 0, false},     // 1: before min_epochs: nothing counted
        {20, 40, 0, false},     // 2: idem
        {50, 10, 0, false},     // 3: first counted: best 50, guard 10
        {50.4, 9.6, 1, false},  // 4: +0.4 < 0.5; guard +0.4 not > 0.5
        {50.3, 9.0, 0, false},  // 5: counter 2, then guard +1.0 > 0.5 takes 3 off (floored at 0)
        {50.2, 9.0, 1, false},  // 6
        {50.9, 9.0, 0, false},  // 7: +0.9 from 50 counts
        {50.9, 9.0, 1, false},  // 8
        {51.3, 9.0, 2, true},   // 9: +0.4: patience 2 reached
    };
    for (int k = 0; k < 9; ++k) {
        const bool stop = es.update(rs, k + 1, {{"hit_le_5px", epochs[k].hit5}, {"mae_px", epochs[k].mae}});
        EXPECT_EQ(rs.epochs_without_improvement, epochs[k].counter) << "epoch " << k + 1;
        EXPECT_EQ(stop, epochs[k].stop) << "epoch " << k + 1;
    }
    EXPECT_EQ(rs.es_best, 50.9);
    EXPECT_EQ(rs.guard_best, 9.0);
    EXPECT_TRUE(es.stopped(rs));

    // min_improvement 0: strictly better only (the original's comparison); lower-is-better select_by.
    e.select_by = "mae_px";
    e.early_stopping.min_epochs = 0;
    e.early_stopping.min_improvement = 0;
    e.early_stopping.second_guard = {"hit_le_2px", 1e9, tools::GuardMode::Max};
    const tools::EarlyStopping es2(e);
    es2.start(rs);
    EXPECT_EQ(rs.es_best, INFINITY);
    EXPECT_EQ(rs.guard_best, -INFINITY);
    EXPECT_FALSE(es2.update(rs, 1, {{"mae_px", 3.0}, {"hit_le_2px", 1}}));  // guard: +inf > 1e9 -> counter stays 0
    EXPECT_FALSE(es2.update(rs, 2, {{"mae_px", 3.0}, {"hit_le_2px", 1}}));  // equal: no improvement
    EXPECT_EQ(rs.epochs_without_improvement, 1);
    EXPECT_TRUE(es2.update(rs, 3, {{"mae_px", 3.5}, {"hit_le_2px", 1}}));
    SF_EXPECT_ERROR(es2.update(rs, 4, {{"hit_le_2px", 1}}), "mae_px");

    e.early_stopping.enabled = false;
    const tools::EarlyStopping off(e);
    EXPECT_FALSE(off.update(rs, 5, {}));
    EXPECT_FALSE(off.stopped(rs));
}

TEST(EarlyStoppingRule, BestSelectionCountsEveryStrictImprovement) {
    model::RunState rs;
    EXPECT_TRUE(tools::update_best(rs, "hit_le_5px", 0));  // the first validation always
    EXPECT_FALSE(tools::update_best(rs, "hit_le_5px", 0));
    EXPECT_TRUE(tools::update_best(rs, "hit_le_5px", 0.5));
    EXPECT_FALSE(tools::update_best(rs, "hit_le_5px", NAN));
    EXPECT_TRUE(tools::update_best(rs, "mae_px", 9));  // another metric restarts the selection
    EXPECT_TRUE(tools::update_best(rs, "mae_px", 8));
    EXPECT_FALSE(tools::update_best(rs, "mae_px", 8.5));
    EXPECT_EQ(rs.best_metric, 8);
}

// ---- signals ----

TEST(TrainSignals, FirstSignalOnlySetsTheFlagAndHandlersAreRestored) {
    struct sigaction before;
    ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
    {
        tools::StopSignals s;
        EXPECT_FALSE(s.requested());
        SF_EXPECT_ERROR(tools::StopSignals second, "already installed");
        ASSERT_EQ(raise(SIGINT), 0);  // the process survives the first signal
        EXPECT_TRUE(s.requested());
        EXPECT_EQ(s.signal_number(), SIGINT);
        EXPECT_STREQ(tools::signal_name(s.signal_number()), "SIGINT");
    }
    struct sigaction after;
    ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
    EXPECT_EQ(after.sa_handler, before.sa_handler);
}

// The slidefuse executable: SF_SLIDEFUSE_EXE (set by the build), $SF_SLIDEFUSE, or ../slidefuse
// next to this test executable (the CMake build layout: <build>/tests/<test exe>, <build>/slidefuse).
std::string slidefuse_exe() {
    std::vector<std::string> candidates;
#ifdef SF_SLIDEFUSE_EXE
    candidates.push_back(SF_SLIDEFUSE_EXE);
#endif
    if (const char* e = std::getenv("SF_SLIDEFUSE")) candidates.push_back(e);
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back((self.parent_path().parent_path() / "slidefuse").string());
    for (const auto& c : candidates)
        if (::access(c.c_str(), X_OK) == 0) return c;
    return "";
}

// Starts `slidefuse train args...` with stdout and stderr into log; returns the pid.
pid_t spawn_train(const std::string& exe, const std::vector<std::string>& args, const std::string& log) {
    std::vector<std::string> all = {exe, "train"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : all) argv.push_back(&s[0]);
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        ::execv(argv[0], argv.data());
        _exit(127);
    }
    return pid;
}

// Waits until metrics.jsonl holds at least n step records (false after 120 s or if the child ended).
bool wait_for_steps(const std::string& metrics, size_t n, pid_t pid) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        std::ifstream f(metrics);
        std::string l;
        size_t steps = 0;
        while (std::getline(f, l)) steps += l.find("\"loss\"") != std::string::npos;
        if (steps >= n) return true;
        if (waitpid(pid, nullptr, WNOHANG) != 0) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

int wait_exit_code(pid_t pid) {
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "status " << status;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(TrainSignals, SigtermFinishesTheStepWritesACheckpointAndTheResumeIsBitwise) {
    const std::string exe = slidefuse_exe();
    ASSERT_NE(exe, "") << "no slidefuse executable (build the slidefuse target or set SF_SLIDEFUSE)";
    const TempDir straight_dir, stopped_dir;
    const std::string& straight = straight_dir.path;
    const std::string& stopped = stopped_dir.path;
    const std::vector<std::string> extra = {"train.max_steps=8"};
    ASSERT_EQ(tools::cmd_train(smoke_args(straight, extra)), 0);

    const pid_t pid = spawn_train(exe, smoke_args(stopped, extra), stopped + "/log.txt");
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_for_steps(stopped + "/run/metrics.jsonl", 2, pid)) << read_file(stopped + "/log.txt");
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    ASSERT_EQ(wait_exit_code(pid), 0) << read_file(stopped + "/log.txt");
    const std::string log = read_file(stopped + "/log.txt");
    EXPECT_NE(log.find("stopped by SIGTERM after step"), std::string::npos) << log;
    const std::string ckpt = model::latest_checkpoint(stopped + "/ck");
    ASSERT_NE(ckpt, "") << log;
    const int64_t at = std::stoll(meta(ckpt, "run.step"));
    EXPECT_EQ(read_metrics(stopped + "/run/metrics.jsonl").steps.size(), static_cast<size_t>(at));
    EXPECT_LT(at, 8) << "the child finished before the signal arrived";

    ASSERT_EQ(tools::cmd_train(smoke_args(stopped, with(extra, {"--resume", "auto"}))), 0);
    const Metrics ms = read_metrics(straight + "/run/metrics.jsonl"), mr = read_metrics(stopped + "/run/metrics.jsonl");
    ASSERT_EQ(mr.steps.size(), 8u);
    for (int64_t s = 1; s <= 8; ++s) expect_same_step(ms.steps.at(s), mr.steps.at(s));
    expect_same_checkpoint(model::checkpoint_path(straight + "/ck", 8), model::checkpoint_path(stopped + "/ck", 8),
                           {"run.out_dir", "slidefuse.checksum"});
}

TEST(TrainSignals, SecondSignalExitsAtOnceWith130) {
    const std::string exe = slidefuse_exe();
    ASSERT_NE(exe, "") << "no slidefuse executable (build the slidefuse target or set SF_SLIDEFUSE)";
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    const pid_t pid = spawn_train(exe, smoke_args(d, {"train.max_steps=200"}), d + "/log.txt");
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_for_steps(d + "/run/metrics.jsonl", 1, pid)) << read_file(d + "/log.txt");
    // Two different signals are both delivered (two SIGTERMs could merge into one pending signal).
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    ASSERT_EQ(kill(pid, SIGINT), 0);
    EXPECT_EQ(wait_exit_code(pid), 130) << read_file(d + "/log.txt");
}

// ---- export ----

std::string train_two_steps_and_export(const std::string& d) {
    EXPECT_EQ(tools::cmd_train(smoke_args(d, {"train.max_steps=2"})), 0);
    const std::string out = d + "/weights.safetensors";
    EXPECT_EQ(tools::cmd_export({"--checkpoint", model::checkpoint_path(d + "/ck", 2), "--out", out}), 0);
    return out;
}

TEST(TrainExport, WritesTheStateDictOnly) {
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    const std::string w = train_two_steps_and_export(d);
    const rt::SafeTensors st = rt::SafeTensors::load(w);
    EXPECT_EQ(st.names().size(), 852u);  // MODEL_SPEC §8: 435 parameters + 417 buffers
    for (const auto& n : st.names()) EXPECT_NE(n.rfind("optimizer.", 0), 0u) << n;
    EXPECT_EQ(st.metadata().at("slidefuse.kind"), "weights");
    EXPECT_EQ(st.get("stem.conv1.bn.num_batches_tracked").to_double().at(0), 2.0);  // two train forwards
    // The weights equal the checkpoint's.
    const rt::SafeTensors ck = rt::SafeTensors::load(model::checkpoint_path(d + "/ck", 2));
    for (const auto& n : st.names()) ASSERT_EQ(st.get(n).bytes, ck.get(n).bytes) << n;
    SF_EXPECT_ERROR(tools::cmd_export({"--checkpoint", w}), "--out");
    SF_EXPECT_ERROR(tools::cmd_export({"--checkpoint", d + "/nope", "--out", d + "/x"}), "nope",
                    "no such checkpoint file");
    SF_EXPECT_ERROR(tools::cmd_export({"--bogus"}), "--bogus");
}

bool python_has_torch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

// Writes the golden input and slidefuse's eval-mode logits with the exported weights (NCHW).
void write_io(const std::string& weights, const std::string& io, float perturb) {
    const rt::SafeTensors g = rt::SafeTensors::load(std::string(SF_TEST_DATA_DIR) + "/golden_sider.safetensors");
    const rt::TensorData& in = g.get("input");  // (2, 2, 64, 128) F32
    ASSERT_EQ(in.shape, (std::vector<int64_t>{2, 2, 64, 128}));
    const int n = 2, c = 2, h = 64, w = 128;
    model::SiderNet net(model::NetShape{n, c, h, w}, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    model::load_checkpoint(weights, {&net.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()}, nullptr);
    std::vector<float> x(in.numel());
    std::memcpy(x.data(), in.bytes.data(), in.bytes.size());
    for (int i = 0; i < n; ++i)
        for (int ch = 0; ch < c; ++ch)
            for (int y = 0; y < h; ++y)
                for (int xx = 0; xx < w; ++xx)
                    net.input()[((static_cast<size_t>(i) * h + y) * w + xx) * c + ch] =
                        x[((static_cast<size_t>(i) * c + ch) * h + y) * w + xx];
    net.forward(rt::Exec::cpu(), false);
    const model::HeadLogits<float> l = net.logits();
    rt::SafeTensors out;
    out.add("input", rt::DType::F32, in.shape, in.bytes.data());
    const std::pair<const char*, std::pair<const float*, int>> heads[] = {{"heatmap_gap", {l.gap, 1}},
                                                                          {"heatmap_piece", {l.slider, 1}},
                                                                          {"offset", {l.offset, 4}},
                                                                          {"angle", {l.angle, 2}}};
    for (const auto& hd : heads) {
        const int k = hd.second.second;
        std::vector<float> nchw(static_cast<size_t>(l.n) * k * l.h * l.w);
        for (int i = 0; i < l.n; ++i)
            for (int ch = 0; ch < k; ++ch)
                for (int y = 0; y < l.h; ++y)
                    for (int xx = 0; xx < l.w; ++xx)
                        nchw[((static_cast<size_t>(i) * k + ch) * l.h + y) * l.w + xx] =
                            hd.second.first[((static_cast<size_t>(i) * l.h + y) * l.w + xx) * k + ch];
        nchw[7] += perturb;
        out.add(std::string("logits.") + hd.first, rt::DType::F32, {l.n, k, l.h, l.w}, nchw.data());
    }
    out.save(io);
}

TEST(TrainExport, LoadsStrictlyIntoThePyTorchReferenceAndMatchesItsLogits) {
    if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch: tools/reference/check_export.py not run";
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    const std::string w = train_two_steps_and_export(d);
    const std::string script = std::string(SF_SOURCE_DIR) + "/tools/reference/check_export.py";
    write_io(w, d + "/io.safetensors", 0.f);
    const std::string cmd = "/usr/bin/python3 " + script + " --weights " + w + " --io " + d + "/io.safetensors";
    EXPECT_EQ(std::system((cmd + " > " + d + "/py.txt 2>&1").c_str()), 0) << read_file(d + "/py.txt");
    // The check can fail: logits off by 1.0 in one element of each head.
    write_io(w, d + "/io_bad.safetensors", 1.f);
    const std::string bad = "/usr/bin/python3 " + script + " --weights " + w + " --io " + d + "/io_bad.safetensors";
    EXPECT_NE(std::system((bad + " > " + d + "/py_bad.txt 2>&1").c_str()), 0) << read_file(d + "/py_bad.txt");
}

}  // namespace
