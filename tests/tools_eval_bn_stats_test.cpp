// `slidefuse eval --bn-stats batch`: every BatchNorm normalizes with the batch's own statistics, as in
// training (docs/EVAL_PREDICT.md, "Batch statistics"). Checked by what the switch must and must not
// depend on: (1) the results do not depend on the checkpoint's running statistics at all (a copy of
// the checkpoint with every running mean and variance changed gives bitwise the same CSV), where the
// default eval does; (2) they do depend on the batch a sample is in (batch 5 against batch 7), and a
// short last batch is normalized over its own samples: each batch of the command's output equals
// that batch run alone through an InferenceModel of its size on inputs this test preprocesses.
// Also the refusals: an unknown value, and a batch too small for batch statistics.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/preprocess.h"
#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tests/support/eval_fixture.h"
#include "tests/support/temp_dir.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/eval_model.h"

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
    std::ifstream f(path);
    return json::parse(f);
}

// cmd_eval with its table captured; returns the CSV rows.
std::vector<sftest::CsvRow> eval_csv(const std::string& ckpt, const std::string& out_stem,
                                     std::vector<std::string> extra) {
    std::vector<std::string> args = {"--checkpoint", ckpt, "--csv", out_stem + ".csv", "--out", out_stem + ".json"};
    args.insert(args.end(), extra.begin(), extra.end());
    ::testing::internal::CaptureStdout();
    const int rc = tools::cmd_eval(args);
    const std::string table = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(rc, 0) << table;
    return sftest::read_eval_csv(out_stem + ".csv");
}

// The same checkpoint with every BatchNorm running statistic changed (means shifted, variances
// scaled), saved in the same run folder so that its config is found.
std::string write_restatted_checkpoint(const sftest::EvalFiles& f) {
    return sftest::write_edited_checkpoint(f, 5, [](model::SiderNet& net) {
        float* b = net.plan().buffers();
        EXPECT_GT(net.table().buffer_floats, 5000u);  // 139 BatchNorm layers' means and variances
        for (size_t i = 0; i < net.table().buffer_floats; ++i) b[i] = 1.75f * b[i] + 0.25f;
    });
}

bool same_predictions(const sftest::CsvRow& a, const sftest::CsvRow& b) {
    for (int k = 4; k < 10; ++k)
        if (a.v[k] != b.v[k]) return false;
    return true;
}

// Samples whose predicted points or scores differ (untrained weights with batch statistics saturate
// the scores at 1, so the points count too).
int predictions_differing(const std::vector<sftest::CsvRow>& a, const std::vector<sftest::CsvRow>& b) {
    int d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += !same_predictions(a[i], b[i]);
    return d;
}

TEST(EvalBnStats, BatchStatisticsNeverReadTheRunningOnes) {
    sftest::TempDir tmp("sf_evalbn");
    const sftest::EvalFiles f = sftest::write_eval_files(tmp.path);
    const std::string other = write_restatted_checkpoint(f);
    const std::vector<std::string> batch = {"--bn-stats", "batch", "--batch-size", "4"};
    const auto a = eval_csv(f.ckpt(), tmp.path + "/a", batch);
    const auto b = eval_csv(other, tmp.path + "/b", batch);
    ASSERT_EQ(a.size(), f.val.size());
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_predictions(a[i], b[i])) << "sample " << i;
    const json j = read_json(tmp.path + "/a.json");
    EXPECT_EQ(j["bn_stats"], "batch");
    EXPECT_EQ(j["samples"], static_cast<int>(f.val.size()));

    // The default reads them: the same two checkpoints predict otherwise, and otherwise than batch mode.
    const auto ra = eval_csv(f.ckpt(), tmp.path + "/ra", {"--batch-size", "4"});
    const auto rb = eval_csv(other, tmp.path + "/rb", {"--batch-size", "4"});
    EXPECT_EQ(read_json(tmp.path + "/ra.json")["bn_stats"], "running");
    EXPECT_EQ(predictions_differing(ra, rb), static_cast<int>(ra.size())) << "running statistics not read";
    EXPECT_EQ(predictions_differing(ra, a), static_cast<int>(ra.size())) << "--bn-stats batch changed nothing";
}

TEST(EvalBnStats, EachBatchIsNormalizedOverItsOwnSamplesShortLastBatchIncluded) {
    sftest::TempDir tmp("sf_evalbn");
    const sftest::EvalFiles f = sftest::write_eval_files(tmp.path);
    ASSERT_EQ(f.val.size(), 7u);
    // Batch 5: batches {0..4} and {5, 6}. (A short batch of one sample would not tell: padding it with
    // copies of itself leaves its mean and biased variance as they are.)
    const auto by5 = eval_csv(f.ckpt(), tmp.path + "/by5", {"--bn-stats", "batch", "--batch-size", "5"});
    const auto by7 = eval_csv(f.ckpt(), tmp.path + "/by7", {"--bn-stats", "batch", "--batch-size", "7"});
    ASSERT_EQ(by5.size(), 7u);
    ASSERT_EQ(by7.size(), 7u);
    EXPECT_EQ(predictions_differing(by5, by7), 7) << "a sample's result does not depend on its batch";

    // Batches {0..4} and {5, 6}, each run alone at its own size.
    const tools::TrainConfig cfg = tools::load_config(f.run_config(), {});
    const tools::InferenceOptions opt{false, tools::BnStats::Batch};
    const size_t per = static_cast<size_t>(sftest::kEvalH) * sftest::kEvalW;
    for (int first : {0, 5}) {
        const int n = std::min(5, 7 - first);
        tools::InferenceModel m(cfg, n, tools::inspect_checkpoint(f.ckpt()), opt);
        ASSERT_EQ(m.bn_stats(), tools::BnStats::Batch);
        std::vector<uint8_t> pixels(per * n);
        std::vector<data::Label> labels;
        for (int b = 0; b < n; ++b) {
            const data::GenSample& s = f.val[static_cast<size_t>(first + b)];
            std::copy(s.pixels.begin(), s.pixels.end(), pixels.begin() + static_cast<long>(b * per));
            labels.push_back(s.label);
        }
        kern::preprocess_ref(n, sftest::kEvalH, sftest::kEvalW, 1, pixels.data(), labels.data(), m.input());
        std::vector<model::Decoded> d;
        m.run(d);
        ASSERT_EQ(d.size(), static_cast<size_t>(n));
        for (int b = 0; b < n; ++b) {
            const sftest::CsvRow& r = by5[static_cast<size_t>(first + b)];
            const float want[6] = {d[b].gap_x, d[b].gap_y, d[b].slider_x, d[b].slider_y, d[b].gap_score,
                                   d[b].slider_score};
            for (int k = 0; k < 6; ++k) EXPECT_EQ(r.v[4 + k], want[k]) << "sample " << first + b << " column " << k;
        }
    }
}

TEST(EvalBnStats, RefusesAnUnknownValueAndATooSmallBatch) {
    sftest::TempDir tmp("sf_evalbn");
    const sftest::EvalFiles f = sftest::write_eval_files(tmp.path);
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", f.ckpt(), "--bn-stats", "train", "--out", tmp.path + "/x.json"}),
                    "--bn-stats", "running", "batch", "'train'");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", f.ckpt(), "--bn-stats"}), "--bn-stats needs a value");
    // One value per channel at 1/32 (batch 1 at 32x32): no batch variance exists.
    tools::TrainConfig cfg = tools::load_config(f.run_config(), {});
    cfg.model.input_height = 32;
    cfg.model.input_width = 32;
    SF_EXPECT_ERROR(tools::InferenceModel(cfg, 1, tools::inspect_checkpoint(f.ckpt()),
                                          tools::InferenceOptions{false, tools::BnStats::Batch}),
                    "batch 1 at 32x32", "at least 2");
    // Running statistics have no such limit.
    tools::InferenceModel ok(cfg, 1, tools::inspect_checkpoint(f.ckpt()));
    EXPECT_EQ(ok.bn_stats(), tools::BnStats::Running);
}

}  // namespace
