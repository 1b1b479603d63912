// `slidefuse bench step` on a machine without a GPU: option parsing (every bad input named), and
// the clear refusal when no CUDA device is usable. The measurement itself runs on a GPU host
// (docs/GPU_VERIFICATION.md).
#include <gtest/gtest.h>

#include "kernels/conv_cudnn.h"
#include "tests/support/compare.h"
#include "tools/bench_step.h"
#include "tools/commands.h"

namespace {

TEST(BenchStep, ParsesEveryOption) {
    const tools::StepBenchOptions o = tools::parse_step_bench_args(
        {"--batch-sizes", "32,64,512", "--size", "160x320", "--channels", "4", "--steps", "60", "--warmup", "5",
         "--eager", "--deterministic", "--search", "--memory-budget-gb", "40", "--layers", "--layers-batch", "16",
         "--peak-tflops", "900", "--peak-gbps", "3000", "--json", "out.json"});
    EXPECT_EQ(o.batch_sizes, (std::vector<int>{32, 64, 512}));
    EXPECT_EQ(o.height, 160);
    EXPECT_EQ(o.width, 320);
    EXPECT_EQ(o.channels, 4);
    EXPECT_EQ(o.steps, 60);
    EXPECT_EQ(o.warmup, 5);
    EXPECT_TRUE(o.eager && o.deterministic && o.search && o.layers);
    EXPECT_EQ(o.memory_budget_bytes, static_cast<size_t>(40e9));
    EXPECT_EQ(o.layers_batch, 16);
    EXPECT_DOUBLE_EQ(o.peak_tflops, 900);
    EXPECT_DOUBLE_EQ(o.peak_gbps, 3000);
    EXPECT_EQ(o.json, "out.json");
    const tools::StepBenchOptions hw = tools::parse_step_bench_args({"--height", "160", "--width", "320"});
    EXPECT_EQ(hw.height, 160);
    EXPECT_EQ(hw.width, 320);
    const tools::StepBenchOptions d = tools::parse_step_bench_args({});
    EXPECT_EQ(d.batch_sizes, (std::vector<int>{64, 128, 256}));
    EXPECT_EQ(d.height, 256);
    EXPECT_EQ(d.width, 512);
    EXPECT_EQ(d.steps, 50);
    EXPECT_EQ(d.conv_candidates, kern::kConvDefaultCandidates);
    EXPECT_EQ(tools::parse_step_bench_args({"--conv-candidates", "16"}).conv_candidates, 16);
}

TEST(BenchStep, BadOptionsAreNamed) {
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--batch-sizes", "64,,128"}), "--batch-sizes");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--batch-sizes", "0"}), "--batch-sizes");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--size", "256"}), "HEIGHTxWIDTH");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--size", "250x512"}), "multiples of 32");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--channels", "3"}), "2 or 4");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--width", "500"}), "multiple of 32");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--steps"}), "needs a value");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--steps", "20"}), "at least 50 timed steps");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--frobnicate", "1"}), "unknown option '--frobnicate'");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"stray"}), "unexpected argument 'stray'");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--conv-candidates", "0"}), "--conv-candidates");
}

TEST(BenchStep, RefusesClearlyWithoutADevice) {
    std::string why;
    if (sftest::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the refusal path does not apply";
    SF_EXPECT_ERROR(tools::cmd_bench({"step", "--batch-sizes", "8", "--steps", "50"}), "bench step needs a CUDA device");
}

}  // namespace
