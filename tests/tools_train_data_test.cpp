// `slidefuse train` on shard data: generated shards read through the loader, and
// data.source=synthetic generating its dataset on first use; mismatched shards refused.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "data/generator.h"
#include "data/shard.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tools/commands.h"

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

}  // namespace
