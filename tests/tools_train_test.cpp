// `slidefuse train` end to end on the CPU backend: outputs written, metrics logged, validation
// reported, the final checkpoint written, and bad input refused with a message naming the problem.
// (Checkpoints and resume: tests/tools_train_resume_test.cpp.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/checkpoint.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tools/config.h"
#include "tools/train.h"

namespace {

std::string temp_dir(const std::string& tag) {
    char tmpl[] = "/tmp/sf_train_XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    return std::string(d) + "/" + tag;
}

std::vector<std::string> lines_of(const std::string& path) {
    std::ifstream f(path);
    std::vector<std::string> out;
    std::string l;
    while (std::getline(f, l)) out.push_back(l);
    return out;
}

const std::string kSmoke = std::string(SF_SOURCE_DIR) + "/configs/cpu_smoke.yaml";

TEST(TrainCli, SmokeConfigRunsAndWritesItsOutputs) {
    const std::string out = temp_dir("run"), ck = out + "/../ck";
    struct Cleanup {  // the checkpoint is ~40 MB
        std::string dir;
        ~Cleanup() {
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
        }
    } cleanup{std::filesystem::path(out).parent_path().string()};
    ASSERT_EQ(tools::cmd_train({"--config", kSmoke, "--out", out, "checkpoints.save_dir=" + ck, "train.max_steps=3",
                                "logging.log_interval=1"}),
              0);
    const tools::TrainConfig resolved = tools::load_config(out + "/config.resolved.yaml", {});
    EXPECT_EQ(resolved.train.max_steps, 3);
    EXPECT_EQ(resolved.train.backend, tools::Backend::Cpu);
    const auto lines = lines_of(out + "/metrics.jsonl");
    int steps = 0, validations = 0;
    for (const auto& l : lines) {
        if (l.find("\"validation\":true") != std::string::npos) {
            ++validations;
            EXPECT_NE(l.find("\"hit_le_5px\""), std::string::npos) << l;
        } else {
            ++steps;
            EXPECT_NE(l.find("\"loss\""), std::string::npos) << l;
            EXPECT_NE(l.find("\"lr\""), std::string::npos) << l;
            // data.source=fixed has no loader to wait for: exactly 0 of the interval.
            const nlohmann::json j = nlohmann::json::parse(l);
            ASSERT_TRUE(j.contains("loader_wait_fraction")) << l;
            EXPECT_EQ(j["loader_wait_fraction"].get<double>(), 0.0) << l;
        }
    }
    EXPECT_EQ(steps, 3);
    EXPECT_GE(validations, 1);
    EXPECT_EQ(model::list_checkpoints(ck), std::vector<std::string>{model::checkpoint_path(ck, 3)});
    // The console's story is in train.log: the start, progress lines with the recent and average
    // rate, validation, the end line and the validation table.
    std::string log;
    for (const auto& l : lines_of(out + "/train.log")) log += l + "\n";
    for (const char* part :
         {"[slidefuse info] training ", "step 3/3 | epoch", "samples/s (avg ", "validation after epoch",
          "done: 3 steps", "samples/s on average", " epoch |    step |  mae_px | hit@2px | hit@5px"})
        EXPECT_NE(log.find(part), std::string::npos) << part << " not in train.log:\n" << log;
    EXPECT_NE(lines.front().find("\"samples_per_s_avg\""), std::string::npos) << lines.front();
    int event_files = 0;
    for (const auto& e : std::filesystem::directory_iterator(out))
        event_files += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    EXPECT_EQ(event_files, 1);
}

TEST(TrainCli, TensorboardFilesCanBeTurnedOff) {
    const std::string out = temp_dir("notb"), ck = out + "/ck";
    ASSERT_EQ(tools::cmd_train({"--config", kSmoke, "--out", out, "checkpoints.save_dir=" + ck, "train.max_steps=1",
                                "logging.tensorboard=false", "logging.plot=false"}),
              0);
    for (const auto& e : std::filesystem::directory_iterator(out))
        EXPECT_NE(e.path().filename().string().rfind("events.out.tfevents.", 0), 0u) << e.path();
    EXPECT_TRUE(std::filesystem::exists(out + "/train.log"));
    std::filesystem::remove_all(std::filesystem::path(out).parent_path());
}

TEST(TrainCli, BadInputIsRefusedWithTheReason) {
    const std::string out = temp_dir("bad");
    auto expect_error = [&](std::vector<std::string> args, const std::string& needle) {
        try {
            tools::cmd_train(args);
            ADD_FAILURE() << "accepted: " << needle;
        } catch (const rt::Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error({"--config", kSmoke, "--out", out, "train.batchsize=2"}, "train.batchsize");
    expect_error({"--config", kSmoke, "--out", out, "train.backend=cuda"}, "train.backend=cpu");
    expect_error({"--config", kSmoke, "--out", out, "data.num_samples=1"}, "data.num_samples");
    expect_error({"--out", out}, "--config");
    expect_error({"--config", kSmoke, "--bogus"}, "--bogus");
    expect_error({"--config", kSmoke, "--resume"}, "--resume needs a value");
    expect_error({"--config", "/nonexistent/x.yaml"}, "/nonexistent/x.yaml");
}

}  // namespace
