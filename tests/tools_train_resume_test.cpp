// `slidefuse train` checkpoints and resume on the CPU backend, end to end, part 1: data sources
// continue exactly from a cursor; a resumed run (mid-epoch, at an epoch boundary) gives the same
// metrics.jsonl losses and the same final checkpoint, bit for bit, as an uninterrupted run; config
// changes are refused unless allowed; early stopping follows the original's rule; a run of non-finite
// steps stops with a checkpoint; the loop with deferred statistics. Part 2 (signals, export):
// tests/tools_train_signals_test.cpp; helpers: tests/support/train_runs.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/generator.h"
#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"
#include "tests/support/log_lines.h"
#include "tests/support/temp_dir.h"
#include "tests/support/train_runs.h"
#include "tools/train.h"

namespace {

using nlohmann::json;
using namespace sftest::train;


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

}  // namespace
