// `slidefuse train` on shard data: generated shards read through the loader, and
// data.source=synthetic generating its dataset on first use; mismatched shards refused. Rank
// sharding of every source kind: the batches of W ranks interleave (rank r's k-th is global batch
// k*W + r) to the one-process batches bit for bit, a rank resumes from its own cursor, bad ranks
// and too small training splits are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/generator.h"
#include "data/shard.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tests/support/temp_dir.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/train_data.h"

namespace {

std::string temp_dir() {
    char tmpl[] = "/tmp/sf_train_data_XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    return d;
}

int count_lines_with(const std::string& path, const std::string& needle) {
    std::ifstream f(path);
    std::string l;
    int n = 0;
    while (std::getline(f, l)) n += l.find(needle) != std::string::npos;
    return n;
}

const std::string kSmoke = std::string(SF_SOURCE_DIR) + "/configs/cpu_smoke.yaml";

TEST(TrainData, TrainsFromGeneratedShardsAndValidatesOnTheValSplit) {
    const std::string root = temp_dir();
    data::GenConfig g;
    g.seed = 11;
    g.height = 64;
    g.width = 128;
    const data::DatasetSummary s = data::generate_dataset(g, 1000, root + "/data", 2, 256);
    ASSERT_EQ(s.samples[0] + s.samples[1] + s.samples[2], 1000u);
    ASSERT_GT(s.samples[1], 0u);
    const std::string out = root + "/run";
    ASSERT_EQ(tools::cmd_train({"--config", kSmoke, "--out", out, "data.source=shards",
                                "data.processed_dir=" + root + "/data", "train.max_steps=2", "train.num_workers=2",
                                "checkpoints.save_dir=" + root + "/ck"}),
              0);
    EXPECT_EQ(count_lines_with(out + "/metrics.jsonl", "\"grad_norm\""), 2);
    // Each step line says which share of its interval the loop waited for the loader.
    std::ifstream metrics(out + "/metrics.jsonl");
    for (std::string l; std::getline(metrics, l);) {
        if (l.find("\"grad_norm\"") == std::string::npos) continue;
        const double w = nlohmann::json::parse(l).at("loader_wait_fraction").get<double>();
        EXPECT_GE(w, 0.0) << l;
        EXPECT_LE(w, 1.01) << l;
    }
    // The validation line counts every val sample once, the short last batch included.
    EXPECT_EQ(count_lines_with(out + "/metrics.jsonl", "\"samples\":" + std::to_string(s.samples[1])), 1);
}

TEST(TrainData, SyntheticSourceGeneratesItsDatasetOnce) {
    const std::string root = temp_dir();
    const std::vector<std::string> args = {"--config",
                                           kSmoke,
                                           "data.source=synthetic",
                                           "data.processed_dir=" + root + "/synth",
                                           "data.num_samples=800",
                                           "train.max_steps=1"};
    std::vector<std::string> a1 = args, a2 = args;
    a1.insert(a1.end(), {"--out", root + "/run1"});
    a2.insert(a2.end(), {"--out", root + "/run2"});
    ASSERT_EQ(tools::cmd_train(a1), 0);
    const auto shards = data::list_shards(root + "/synth/train");
    ASSERT_FALSE(shards.empty());
    ASSERT_EQ(tools::cmd_train(a2), 0);  // second run reuses the dataset
    EXPECT_EQ(data::list_shards(root + "/synth/train"), shards);
}

TEST(TrainData, ShardsOfAnotherSizeAreRefused) {
    const std::string root = temp_dir();
    data::GenConfig g;
    g.height = 64;
    g.width = 128;
    data::generate_dataset(g, 1000, root + "/data", 2, 512);
    try {
        tools::cmd_train({"--config", kSmoke, "--out", root + "/run", "data.source=shards",
                          "data.processed_dir=" + root + "/data", "model.input_height=96",
                          "checkpoints.save_dir=" + root + "/ck"});
        FAIL() << "accepted 64x128 shards for a 96x128 model";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.input_height"), std::string::npos) << e.what();
    }
    try {
        tools::cmd_train({"--config", kSmoke, "--out", root + "/run", "data.source=shards",
                          "data.processed_dir=" + root + "/missing", "checkpoints.save_dir=" + root + "/ck"});
        FAIL() << "accepted a missing data folder";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
}

// ---- rank sharding of the batch sources ----

using tools::SplitRole;

struct Taken {
    int n = 0;  // real samples
    std::vector<float> input;
    std::vector<data::Label> labels;
    data::Cursor at;  // cursor before the batch
};

std::vector<Taken> take_batches(tools::BatchSource& s, const tools::TrainConfig& c, uint64_t count) {
    const size_t floats =
        static_cast<size_t>(c.train.batch_size) * c.model.input_height * c.model.input_width * c.model.input_channels;
    std::vector<Taken> out(count);
    for (Taken& t : out) {
        t.at = s.cursor();
        t.input.resize(floats);
        t.n = s.next(t.input.data(), t.labels);
    }
    return out;
}

bool same(const Taken& a, const Taken& b) {
    return a.n == b.n && a.input.size() == b.input.size() && a.labels.size() == b.labels.size() &&
           std::memcmp(a.input.data(), b.input.data(), a.input.size() * sizeof(float)) == 0 &&
           std::memcmp(a.labels.data(), b.labels.data(), a.labels.size() * sizeof(data::Label)) == 0;
}

// Two epochs of each of w ranks, interleaved per epoch (global batch j = batch j / w of rank
// j % w), equal bit for bit to the one-process batches. Returns the global batches per epoch.
uint64_t expect_ranks_interleave(const tools::TrainConfig& c, SplitRole role, int w) {
    auto one = tools::make_batch_source(c, role);
    const uint64_t bpe1 = one->batches_per_epoch();
    const std::vector<Taken> world1 = take_batches(*one, c, 2 * bpe1);
    std::vector<std::vector<Taken>> got(w);
    std::vector<uint64_t> bpe(w);
    for (int r = 0; r < w; ++r) {
        auto s = tools::make_batch_source(c, role, r, w);
        bpe[r] = s->batches_per_epoch();
        if (role == SplitRole::Train) {
            EXPECT_EQ(bpe[r], bpe[0]) << "rank " << r << ": unequal step counts";
        }
        got[r] = take_batches(*s, c, 2 * bpe[r]);
    }
    uint64_t global = 0;
    for (uint64_t e = 0; e < 2; ++e) {
        uint64_t j = 0;
        for (; j / w < bpe[j % w]; ++j) {
            const int r = static_cast<int>(j % w);
            const Taken& t = got[r][e * bpe[r] + j / w];
            EXPECT_EQ(t.at, (data::Cursor{e, j / w})) << "rank " << r << " counts its own batches";
            if (e * bpe1 + j >= world1.size()) {
                ADD_FAILURE() << "W " << w << ": more batches than one process";
                return 0;
            }
            EXPECT_TRUE(same(t, world1[e * bpe1 + j])) << "W " << w << " epoch " << e << " global batch " << j;
        }
        uint64_t held = 0;
        for (uint64_t b : bpe) held += b;
        EXPECT_EQ(held, j) << "a rank holds batches past the interleaved sequence";
        global = j;
    }
    return global;
}

TEST(TrainDataRanks, FixedSourceRanksInterleaveToTheOneProcessBatches) {
    for (const char* n : {"data.num_samples=13", "data.num_samples=12"}) {
        const tools::TrainConfig c = tools::load_config(kSmoke, {n});  // batch 2: 6 global batches
        for (int w : {2, 3}) {
            EXPECT_EQ(expect_ranks_interleave(c, SplitRole::Train, w), 6u / w * w) << n;
            EXPECT_EQ(expect_ranks_interleave(c, SplitRole::Val, w), 6u) << n << ": every val batch on one rank";
        }
    }
}

// The smoke config reading 20 generated 64x128 samples (shards of 8) from dir/data.
tools::TrainConfig small_shards_config(const std::string& dir, uint64_t seed) {
    data::GenConfig g;
    g.seed = seed;
    g.height = 64;
    g.width = 128;
    data::generate_dataset(g, 20, dir + "/data", 2, 8);
    return tools::load_config(kSmoke,
                              {"data.source=shards", "data.processed_dir=" + dir + "/data", "train.num_workers=2"});
}

TEST(TrainDataRanks, ShardSourceRanksInterleaveOnBothPaths) {
    const sftest::TempDir root("sf_train_ranks");
    const tools::TrainConfig c = small_shards_config(root.path, 5);
    for (int w : {2, 3}) EXPECT_GE(expect_ranks_interleave(c, SplitRole::Train, w), 2u);
    // The raw path (device backends) reads the same loader: sample ids interleave too.
    auto one = tools::make_batch_source(c, SplitRole::Train);
    std::vector<uint64_t> want;
    for (uint64_t k = 0; k < one->batches_per_epoch(); ++k) {
        const data::HostBatch* b = one->next_raw();
        want.insert(want.end(), b->sample_ids, b->sample_ids + b->n);
        one->release_raw();
    }
    std::vector<std::unique_ptr<tools::BatchSource>> ranks;
    for (int r = 0; r < 2; ++r) ranks.push_back(tools::make_batch_source(c, SplitRole::Train, r, 2));
    std::vector<uint64_t> merged;
    for (uint64_t j = 0; j < 2 * ranks[0]->batches_per_epoch(); ++j) {
        const data::HostBatch* b = ranks[j % 2]->next_raw();
        merged.insert(merged.end(), b->sample_ids, b->sample_ids + b->n);
        ranks[j % 2]->release_raw();
    }
    want.resize(merged.size());
    EXPECT_EQ(merged, want);
}

// Rank 1 of 2 resumed at each of its cursors continues exactly as the uninterrupted rank 1.
void expect_rank_seek_continues(const tools::TrainConfig& c) {
    auto straight = tools::make_batch_source(c, SplitRole::Train, 1, 2);
    const uint64_t bpe = straight->batches_per_epoch();
    ASSERT_GE(bpe, 2u);
    const std::vector<Taken> want = take_batches(*straight, c, 2 * bpe + 1);
    for (const Taken& t : want) {
        auto resumed = tools::make_batch_source(c, SplitRole::Train, 1, 2);
        resumed->seek(t.at);
        EXPECT_EQ(resumed->cursor(), t.at);
        EXPECT_TRUE(same(take_batches(*resumed, c, 1)[0], t))
            << "resumed at {" << t.at.epoch << ", " << t.at.batch << "}";
    }
}

TEST(TrainDataRanks, ARankResumesFromItsOwnCursor) {
    expect_rank_seek_continues(tools::load_config(kSmoke, {"data.num_samples=11"}));  // 2 batches per rank
    const sftest::TempDir root("sf_train_ranks");
    expect_rank_seek_continues(small_shards_config(root.path, 6));
}

TEST(TrainDataRanks, BadRanksAndTooSmallSplitsAreRefused) {
    const tools::TrainConfig c = tools::load_config(kSmoke, {"data.num_samples=5"});
    SF_EXPECT_ERROR(tools::make_batch_source(c, SplitRole::Train, 2, 2), "rank 2 outside [0, 2)");
    SF_EXPECT_ERROR(tools::make_batch_source(c, SplitRole::Train, -1, 2), "rank -1 outside [0, 2)");
    SF_EXPECT_ERROR(tools::make_batch_source(c, SplitRole::Val, 0, 0), "world size must be >= 1 (got 0)");
    SF_EXPECT_ERROR(tools::make_batch_source(c, SplitRole::Train, 0, 3), "data.num_samples (5)",
                    "train.batch_size 2 and world size 3", ">= 2 x 3 = 6");
    EXPECT_EQ(tools::make_batch_source(c, SplitRole::Train, 1, 2)->batches_per_epoch(), 1u);
    // Validation: 2 global batches over 3 ranks leave rank 2 with none, which it says when asked.
    auto val = tools::make_batch_source(c, SplitRole::Val, 2, 3);
    EXPECT_EQ(val->batches_per_epoch(), 0u);
    Taken t;
    t.input.resize(static_cast<size_t>(2) * 64 * 128 * 2);
    SF_EXPECT_ERROR(val->next(t.input.data(), t.labels), "rank 2 of 3 has no validation batch");

    const sftest::TempDir root("sf_train_ranks");
    data::GenConfig g;
    g.height = 64;
    g.width = 128;
    const data::DatasetSummary s = data::generate_dataset(g, 20, root.path + "/data", 2, 8);
    const tools::TrainConfig sc =
        tools::load_config(kSmoke, {"data.source=shards", "data.processed_dir=" + root.path + "/data"});
    const std::string samples = std::to_string(s.samples[0]) + " samples";
    SF_EXPECT_ERROR(tools::make_batch_source(sc, SplitRole::Train, 0, 64), samples.c_str(),
                    "make no batch of 2 for each of 64 rank(s)", "batch 2 x world 64 = 128 samples");
}

}  // namespace
