// `slidefuse train` on the CUDA backend, end to end (small synthetic dataset at 64x128, batch 4,
// train.deterministic so cuDNN's engine choice is fixed):
//   - a resumed run (4 steps, checkpoint, --resume auto, 4 more) gives the same metrics.jsonl
//     losses and the same final weights, bit for bit, as 8 uninterrupted steps;
//   - --no-graph (eager calls) and graph replay give bitwise-equal step losses;
//   - the loss falls over 40 steps (20 under the CPU emulation) and validation reports finite metrics;
//   - SF_NCCL_WORLD1=1 (the NCCL gradient allreduce of a world of 1 inside the captured step) gives
//     the same losses and final weights, bit for bit, as the plain step.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"
#include "tests/support/log_lines.h"
#include "tests/support/temp_dir.h"
#include "tools/commands.h"

namespace {

struct TempDir : sftest::TempDir {
    TempDir() : sftest::TempDir("sf_cuda_train") {}
};

std::vector<std::string> base_args(const std::string& root, const std::string& run) {
    return {
        "--config",
        sftest::source_dir() + "/configs/cpu_smoke.yaml",
        "--out",
        root + "/" + run,
        "train.backend=cuda",
        "train.amp=bf16",
        "train.batch_size=4",
        "train.deterministic=true",
        "train.num_workers=2",
        "train.prefetch_factor=2",
        "data.source=synthetic",
        "data.processed_dir=" + root + "/data",
        "data.num_samples=800",  // the smallest synthetic set with both splits is 641 samples
        "logging.log_interval=1",
        "sched.type=sgdr",  // lr by epoch only: train.max_steps can end a run mid-epoch
        "sched.warmup_epochs=1",
        "checkpoints.save_dir=" + root + "/" + run + "/ck",
        "checkpoints.save_interval=1",
        "checkpoints.keep_last=2",
#ifdef SF_EMU
        // Under the CPU emulation (docs/EMULATION.md) a step at 64x128 x 4 takes ~40 s: a
        // quarter of the pixels and half the batch keep every test to minutes.
        "model.input_height=32",
        "model.input_width=64",
        "train.batch_size=2",
        "eval.eval_interval=20",
#endif
    };
}

std::vector<double> step_losses(const std::string& metrics) {
    std::ifstream in(metrics);
    std::vector<double> out;
    std::string line;
    while (std::getline(in, line)) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (!j.contains("validation")) out.push_back(j.at("loss").get<double>());
    }
    return out;
}

TEST(CudaTrain, ResumeIsBitwiseEqualToAnUninterruptedRun) {
    SF_REQUIRE_GPU();
    TempDir t;
    std::vector<std::string> straight = base_args(t.path, "straight");
    straight.push_back("train.max_steps=8");
    ASSERT_EQ(tools::cmd_train(straight), 0);

    std::vector<std::string> first = base_args(t.path, "resumed");
    first.push_back("train.max_steps=4");
    ASSERT_EQ(tools::cmd_train(first), 0);
    std::vector<std::string> second = base_args(t.path, "resumed");
    second.insert(second.end(), {"train.max_steps=8", "--resume", "auto", "--allow-config-change"});
    {
        sftest::LogLines log;  // the changed train.max_steps is warned about, once
        ASSERT_EQ(tools::cmd_train(second), 0);
        EXPECT_EQ(log.warnings(), 1);
        EXPECT_TRUE(log.has(rt::LogLevel::Warn, "train.max_steps: 4 -> 8"));
    }

    const std::vector<double> a = step_losses(t.path + "/straight/metrics.jsonl");
    const std::vector<double> b = step_losses(t.path + "/resumed/metrics.jsonl");
    ASSERT_EQ(a.size(), 8u);
    EXPECT_EQ(a, b);
    const rt::SafeTensors x = rt::SafeTensors::load(model::checkpoint_path(t.path + "/straight/ck", 8));
    const rt::SafeTensors y = rt::SafeTensors::load(model::checkpoint_path(t.path + "/resumed/ck", 8));
    for (const std::string& name : x.names()) EXPECT_EQ(x.get(name).bytes, y.get(name).bytes) << name;
}

TEST(CudaTrain, EagerAndGraphStepsAreBitwiseEqual) {
    SF_REQUIRE_GPU();
    TempDir t;
    std::vector<std::string> graph = base_args(t.path, "graph");
    graph.push_back("train.max_steps=5");
    std::vector<std::string> eager = base_args(t.path, "eager");
    eager.insert(eager.end(), {"train.max_steps=5", "--no-graph"});
    ASSERT_EQ(tools::cmd_train(graph), 0);
    ASSERT_EQ(tools::cmd_train(eager), 0);
    const std::vector<double> a = step_losses(t.path + "/graph/metrics.jsonl");
    ASSERT_EQ(a.size(), 5u);
    EXPECT_EQ(a, step_losses(t.path + "/eager/metrics.jsonl"));
}

TEST(CudaTrain, LossFallsAndValidationRuns) {
    SF_REQUIRE_GPU();
    TempDir t;
    std::vector<std::string> args = base_args(t.path, "learn");
#ifdef SF_EMU
    // Under the CPU emulation 20 steps (a step takes ~20 s there); the loss falls from ~235 to ~115
    // by step 20 at this learning rate.
    args.insert(args.end(), {"train.max_steps=20", "logging.log_interval=5"});
#else
    args.insert(args.end(), {"train.max_steps=40", "logging.log_interval=10"});
#endif
    ASSERT_EQ(tools::cmd_train(args), 0);
    std::ifstream in(t.path + "/learn/metrics.jsonl");
    std::string line;
    std::vector<double> window;
    bool validated = false;
    while (std::getline(in, line)) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("validation")) {
            validated = true;
            EXPECT_TRUE(std::isfinite(j.at("mae_px").get<double>()));
        } else {
            window.push_back(j.at("loss_mean_window").get<double>());
        }
    }
    EXPECT_TRUE(validated);
    ASSERT_GE(window.size(), 4u);
    EXPECT_LT(window.back(), 0.8 * window.front());
}

// The config's cuda section reaches the network (the backend's description, logged at the start, is read
// from the network's policy and Exec): the bitwise-equal switches (programmatic dependent launch, the
// BatchNorm rows four at a time, the upsampling backward's row loads) give the plain run's losses and final
// weights bit for bit.
TEST(CudaTrain, CudaSectionReachesTheNetworkAndItsBitwiseSwitchesKeepTheRun) {
    SF_REQUIRE_GPU();
    TempDir t;
    std::vector<std::string> plain = base_args(t.path, "plain");
    plain.push_back("train.max_steps=3");
    std::vector<std::string> fast = base_args(t.path, "fast");
    fast.insert(fast.end(),
                {"train.max_steps=3", "cuda.pdl=true", "cuda.bn_row_batch=4", "cuda.upsample_row_loads=true"});
    {
        sftest::LogLines log;
        ASSERT_EQ(tools::cmd_train(plain), 0);
        EXPECT_TRUE(log.has(rt::LogLevel::Info, "kernels: defaults"));
    }
    {
        sftest::LogLines log;
        ASSERT_EQ(tools::cmd_train(fast), 0);
        EXPECT_TRUE(log.has(rt::LogLevel::Info, "kernels: pdl, bn_row_batch 4, upsample_row_loads"));
    }
    const std::vector<double> a = step_losses(t.path + "/plain/metrics.jsonl");
    ASSERT_EQ(a.size(), 3u);
    EXPECT_EQ(a, step_losses(t.path + "/fast/metrics.jsonl"));
    const rt::SafeTensors x = rt::SafeTensors::load(model::checkpoint_path(t.path + "/plain/ck", 3));
    const rt::SafeTensors y = rt::SafeTensors::load(model::checkpoint_path(t.path + "/fast/ck", 3));
    for (const std::string& name : x.names()) EXPECT_EQ(x.get(name).bytes, y.get(name).bytes) << name;
}

TEST(CudaTrain, NcclWorldOneIsBitwiseEqualToThePlainStep) {
    SF_REQUIRE_GPU();
    TempDir t;
    std::vector<std::string> plain = base_args(t.path, "plain");
    plain.push_back("train.max_steps=5");
    std::vector<std::string> nccl = base_args(t.path, "nccl");
    nccl.push_back("train.max_steps=5");
    ASSERT_EQ(tools::cmd_train(plain), 0);
    ASSERT_EQ(setenv("SF_NCCL_WORLD1", "1", 1), 0);
    int rc = -1;
    try {
        rc = tools::cmd_train(nccl);
    } catch (...) {
        unsetenv("SF_NCCL_WORLD1");
        throw;
    }
    unsetenv("SF_NCCL_WORLD1");
    ASSERT_EQ(rc, 0);
    const std::vector<double> a = step_losses(t.path + "/plain/metrics.jsonl");
    ASSERT_EQ(a.size(), 5u);
    EXPECT_EQ(a, step_losses(t.path + "/nccl/metrics.jsonl"));
    const rt::SafeTensors x = rt::SafeTensors::load(model::checkpoint_path(t.path + "/plain/ck", 5));
    const rt::SafeTensors y = rt::SafeTensors::load(model::checkpoint_path(t.path + "/nccl/ck", 5));
    for (const std::string& name : x.names()) EXPECT_EQ(x.get(name).bytes, y.get(name).bytes) << name;
}

}  // namespace
