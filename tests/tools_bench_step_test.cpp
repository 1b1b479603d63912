// `slidefuse bench step` on a machine without a GPU: option parsing (every bad input named), and
// the clear refusal when no CUDA device is usable. The measurement itself runs on a GPU host
// (docs/GPU_VERIFICATION.md).
#include <gtest/gtest.h>

#include "kernels/conv_cudnn.h"
#include "model/planner.h"
#include "model/train_step_cuda.h"
#include "tests/support/compare.h"
#include "tools/bench_allreduce.h"
#include "tools/bench_step.h"
#include "tools/commands.h"

namespace {

TEST(BenchStep, ParsesEveryOption) {
    const tools::StepBenchOptions o = tools::parse_step_bench_args({"--batch-sizes",
                                                                    "32,64,512",
                                                                    "--size",
                                                                    "160x320",
                                                                    "--channels",
                                                                    "4",
                                                                    "--steps",
                                                                    "60",
                                                                    "--warmup",
                                                                    "5",
                                                                    "--eager",
                                                                    "--deterministic",
                                                                    "--search",
                                                                    "--memory-budget-gb",
                                                                    "40",
                                                                    "--layers",
                                                                    "--layers-batch",
                                                                    "16",
                                                                    "--peak-tflops",
                                                                    "900",
                                                                    "--peak-gbps",
                                                                    "3000",
                                                                    "--up-order",
                                                                    "upsample_first",
                                                                    "--fuse-expand-dw",
                                                                    "--fuse-dw-pw",
                                                                    "--merge-heads",
                                                                    "--fuse-head-bn",
                                                                    "--fuse-up-bn",
                                                                    "--no-dw-variants",
                                                                    "--bn-row-batch",
                                                                    "4",
                                                                    "--bn-min-blocks",
                                                                    "3",
                                                                    "--pdl",
                                                                    "--dw-fused-bwd",
                                                                    "--upsample-row-loads",
                                                                    "--json",
                                                                    "out.json"});
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
    EXPECT_EQ(o.up_order, model::UpOrder::UpsampleFirst);
    EXPECT_TRUE(o.fuse_expand_dw);
    EXPECT_TRUE(o.fuse_dw_pw);
    EXPECT_TRUE(o.merge_heads);
    EXPECT_TRUE(o.fuse_head_bn);
    EXPECT_TRUE(o.fuse_up_bn);
    EXPECT_FALSE(o.cuda.dw_variants);
    EXPECT_EQ(o.cuda.bn_row_batch, 4);
    EXPECT_EQ(o.cuda.bn_min_blocks, 3);
    EXPECT_TRUE(o.cuda.pdl);
    EXPECT_TRUE(o.cuda.dw_fused_bwd);
    EXPECT_FALSE(o.cuda.dw_fused_bn_bwd);
    EXPECT_TRUE(o.cuda.upsample_row_loads);
    const tools::StepBenchOptions bn = tools::parse_step_bench_args({"--dw-fused-bwd-bn"});
    EXPECT_TRUE(bn.cuda.dw_fused_bwd && bn.cuda.dw_fused_bn_bwd);  // implies the fused backward
    EXPECT_FALSE(bn.cuda.dw_fused_bn_grad);
    const tools::StepBenchOptions bg = tools::parse_step_bench_args({"--dw-fused-bn-grad"});
    // implies the fused backward and the fused LiteBlock, whose expand BN it reduces
    EXPECT_TRUE(bg.cuda.dw_fused_bn_grad && bg.cuda.dw_fused_bwd && bg.fuse_expand_dw);
    EXPECT_FALSE(bg.cuda.dw_fused_bn_bwd);
    const tools::StepBenchOptions pg = tools::parse_step_bench_args({"--pw-bn-grad"});
    EXPECT_TRUE(pg.cuda.pw_bn_grad && pg.cuda.pw_custom);  // implies the project's 1x1 conv, whose dgrad gathers them
    EXPECT_FALSE(pg.cuda.pw_stats);
    const tools::StepBenchOptions ds = tools::parse_step_bench_args({"--dw-stats"});
    EXPECT_TRUE(ds.cuda.dw_stats);  // on its own: the depthwise kernels are candidates whatever the other switches
    EXPECT_FALSE(ds.cuda.pw_custom || ds.cuda.dw_fused_bwd || ds.fuse_dw_pw);
    const tools::StepBenchOptions pb = tools::parse_step_bench_args({"--pw-bn-bwd"});
    EXPECT_TRUE(pb.cuda.pw_bn_bwd && pb.cuda.pw_custom);  // implies the project's 1x1 conv, whose loads form the dx
    EXPECT_FALSE(pb.cuda.pw_stats || pb.cuda.pw_bn_grad);
    const tools::StepBenchOptions pf = tools::parse_step_bench_args({"--pw-fused-bwd"});
    EXPECT_TRUE(pf.cuda.pw_fused_bwd && pf.cuda.pw_custom);  // implies the project's 1x1 kernels, which it fuses
    EXPECT_FALSE(pf.cuda.pw_bn_bwd || pf.cuda.pw_bn_grad || pf.cuda.pw_stats);
    const tools::StepBenchOptions hb = tools::parse_step_bench_args({"--head-bn-grad"});
    EXPECT_TRUE(hb.cuda.head_bn_grad && hb.fuse_head_bn);  // implies the BN prologue whose input it reads
    EXPECT_FALSE(hb.merge_heads || hb.cuda.pw_custom || hb.cuda.head_bn_dx);
    const tools::StepBenchOptions hd = tools::parse_step_bench_args({"--head-bn-dx"});
    EXPECT_TRUE(hd.cuda.head_bn_dx && hd.cuda.head_bn_grad && hd.fuse_head_bn);  // the sums it needs, their prologue
    EXPECT_FALSE(hd.merge_heads || hd.cuda.pw_custom);
    const tools::StepBenchOptions hw = tools::parse_step_bench_args({"--height", "160", "--width", "320"});
    EXPECT_EQ(hw.height, 160);
    EXPECT_EQ(hw.width, 320);
    const tools::StepBenchOptions d = tools::parse_step_bench_args({});
    EXPECT_EQ(d.batch_sizes, (std::vector<int>{64, 128, 256}));
    EXPECT_EQ(d.height, 256);
    EXPECT_EQ(d.width, 512);
    EXPECT_EQ(d.steps, 50);
    EXPECT_FALSE(d.fuse_expand_dw);
    EXPECT_FALSE(d.fuse_dw_pw);
    EXPECT_FALSE(d.merge_heads);  // four heads' conv1 until a GPU says the merged one pays
    EXPECT_FALSE(d.fuse_head_bn);
    EXPECT_FALSE(d.fuse_up_bn);
    EXPECT_EQ(d.up_order, model::UpOrder::ConvFirst);  // what training on CUDA runs by default
    EXPECT_TRUE(d.cuda.dw_variants);
    EXPECT_EQ(d.cuda.bn_row_batch, 1);  // the measured kernels until a GPU says 4 pays
    EXPECT_EQ(d.cuda.bn_min_blocks, 1);  // the measured kernels' registers until a GPU says 3 blocks pay
    EXPECT_FALSE(d.cuda.pdl);           // plain launches until a GPU says PDL pays
    EXPECT_FALSE(d.cuda.dw_fused_bwd);  // the separate depthwise passes until a GPU says the fused one pays
    EXPECT_FALSE(d.cuda.dw_fused_bn_bwd);
    EXPECT_FALSE(d.cuda.dw_fused_bn_grad);
    EXPECT_FALSE(d.cuda.pw_bn_grad);
    EXPECT_FALSE(d.cuda.dw_stats);  // the statistics pass until a GPU says the epilogue pays
    EXPECT_FALSE(d.cuda.pw_bn_bwd);
    EXPECT_FALSE(d.cuda.upsample_row_loads);  // the measured upsampling backward until a GPU says the row loads pay
    EXPECT_FALSE(d.cuda.branch_lanes);        // one stream until a GPU says the lanes pay
    const tools::StepBenchOptions bl = tools::parse_step_bench_args({"--branch-lanes"});
    EXPECT_TRUE(bl.cuda.branch_lanes);
    EXPECT_FALSE(bl.cuda.pdl || bl.cuda.pw_custom || bl.fuse_expand_dw);  // on its own
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
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--bn-row-batch", "3"}), "--bn-row-batch must be 1 or 4, got 3");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--bn-row-batch", "0"}), "--bn-row-batch");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--bn-min-blocks", "2"}), "--bn-min-blocks must be 1 or 3, got 2");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"stray"}), "unexpected argument 'stray'");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--conv-candidates", "0"}), "--conv-candidates");
}

TEST(BenchStep, RefusesClearlyWithoutADevice) {
    std::string why;
    if (sftest::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the refusal path does not apply";
    SF_EXPECT_ERROR(tools::cmd_bench({"step", "--batch-sizes", "8", "--steps", "50"}), "bench step needs a CUDA device");
}

// --world N: N must be the job's world (a world of 1 here), at least 1; a job of several ranks must
// pass it.
TEST(BenchStep, WorldOption) {
    EXPECT_EQ(tools::parse_step_bench_args({}).world, 0);
    EXPECT_EQ(tools::parse_step_bench_args({"--world", "1"}).world, 1);
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--world", "2"}), "--world 2", "this job has 1 rank(s)",
                    "mpirun -np 2");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--world", "0"}), "--world", ">= 1");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--world", "-1"}), "--world", ">= 1");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--world", "two"}), "--world", "'two'");
    SF_EXPECT_ERROR(tools::parse_step_bench_args({"--world"}), "needs a value");
    tools::check_bench_world(4, 4);
    tools::check_bench_world(0, 1);
    SF_EXPECT_ERROR(tools::check_bench_world(0, 4), "launched as 4 ranks", "pass --world 4");
    SF_EXPECT_ERROR(tools::check_bench_world(2, 4), "--world 2", "this job has 4 rank(s)");
    tools::check_bench_world(1, 1, true);  // --search on one GPU
    SF_EXPECT_ERROR(tools::check_bench_world(4, 4, true), "--search", "with 4 ranks", "--batch-sizes");
}

// nccl-tests' definitions: algbw = bytes / time, busbw = algbw * 2(N-1)/N.
TEST(BenchStep, AllreduceBandwidths) {
    EXPECT_DOUBLE_EQ(tools::allreduce_bus_factor(1), 0.0);
    EXPECT_DOUBLE_EQ(tools::allreduce_bus_factor(2), 1.0);
    EXPECT_DOUBLE_EQ(tools::allreduce_bus_factor(4), 1.5);
    EXPECT_DOUBLE_EQ(tools::allreduce_bus_factor(8), 1.75);
    const tools::AllreduceTiming t = tools::allreduce_timing(13000000, 4, 20, 40.0);
    EXPECT_EQ(t.bytes, 13000000u);
    EXPECT_EQ(t.reps, 20);
    EXPECT_DOUBLE_EQ(t.ms, 2.0);
    EXPECT_DOUBLE_EQ(t.algbw_gbps, 6.5);  // 13e6 B / 2e-3 s = 6.5e9 B/s
    EXPECT_DOUBLE_EQ(t.busbw_gbps, 9.75);
    const tools::AllreduceTiming one = tools::allreduce_timing(1000000, 1, 10, 1.0);
    EXPECT_DOUBLE_EQ(one.algbw_gbps, 10.0);
    EXPECT_DOUBLE_EQ(one.busbw_gbps, 0.0);  // nothing crosses a link in a world of 1
    SF_EXPECT_ERROR(tools::allreduce_timing(1, 2, 0, 1.0), "0 allreduces");
    SF_EXPECT_ERROR(tools::allreduce_timing(1, 2, 5, 0.0), "in 0 ms");
    SF_EXPECT_ERROR(tools::allreduce_timing(1, 0, 5, 1.0), "over 0 ranks");
    const tools::AllreduceTiming back = tools::allreduce_from_json(tools::allreduce_json(t));
    EXPECT_EQ(back.world, 4);
    EXPECT_EQ(back.reps, 20);
    EXPECT_EQ(back.bytes, t.bytes);
    EXPECT_DOUBLE_EQ(back.busbw_gbps, t.busbw_gbps);
    EXPECT_EQ(tools::allreduce_line(t), "allreduce 13.0 MB over 4 ranks: 2.000 ms (algbw 6.5 GB/s, busbw 9.8 GB/s)");
}

// extra.graph_nodes and its report line (what command A's bench run prints under each batch).
TEST(BenchStep, GraphNodesRecordAndLine) {
    model::GraphNodeCounts micro, optim;
    micro.captured = optim.captured = true;
    micro.kernels = 1484;
    micro.memcpys = 3;
    optim.kernels = 5;
    const nlohmann::json j = tools::graph_nodes_json(micro, optim);
    EXPECT_EQ(j["micro_step"]["kernels"], 1484);
    EXPECT_EQ(j["micro_step"]["memcpys"], 3);
    EXPECT_EQ(j["micro_step"]["memsets"], 0);
    EXPECT_EQ(j["micro_step"]["total"], 1487);
    EXPECT_EQ(j["optimizer"]["total"], 5);
    const nlohmann::json extra = {{"plan_seconds", 1.5}, {"graph_nodes", j}};
    EXPECT_EQ(tools::graph_nodes_line(extra),
              "graphs: 1484 kernel nodes per micro-step (1487 nodes), 5 per optimizer step (5)");
    EXPECT_EQ(j["micro_step"]["edges"], 0);
    EXPECT_EQ(j["micro_step"]["programmatic_edges"], 0);
    micro.edges = 1486;
    micro.programmatic_edges = 1100;  // --pdl: the line says how many of the edges PDL became
    const nlohmann::json pdl = {{"graph_nodes", tools::graph_nodes_json(micro, optim)}};
    EXPECT_EQ(tools::graph_nodes_line(pdl), "graphs: 1484 kernel nodes per micro-step (1487 nodes), 5 per optimizer "
                                            "step (5); 1100 of the micro-step's 1486 edges programmatic");
    EXPECT_EQ(tools::graph_nodes_line(nlohmann::json{{"plan_seconds", 1.5}}), "");  // eager runs
    EXPECT_EQ(tools::graph_nodes_line(nlohmann::json()), "");
}

// The memory a batch needs, judged without a device: with branch lanes the convolution workspace's bound
// once per lane (each lane's region holds the largest plan), the rest of the plan the one-stream one's.
TEST(BenchStep, DryRunMemoryHoldsAWorkspacePerLane) {
    tools::StepBenchOptions o = tools::parse_step_bench_args({"--height", "64", "--width", "128"});
    const model::MemoryPlan one = tools::dry_run_memory(2, o);
    o.cuda.branch_lanes = true;
    const model::MemoryPlan lanes = tools::dry_run_memory(2, o);
    EXPECT_GT(one.workspace, 0u);
    EXPECT_EQ(lanes.workspace, 4 * one.workspace);
    EXPECT_EQ(lanes.activations, one.activations);
    EXPECT_EQ(lanes.activation_grads, one.activation_grads);
}

}  // namespace
