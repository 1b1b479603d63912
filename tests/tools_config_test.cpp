// tools/config: defaults = the 1.1.1 recipe, the shipped configs, the original's 1.1.1 file loading
// unchanged, every kind of error naming its key path (and file:line or the override), overrides,
// the to_yaml round trip (field by field), the atomic writer and the config hash.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#include "runtime/error.h"
#include "runtime/log.h"
#include "tests/tools_config_test_util.h"
#include "tools/config.h"

namespace {

using namespace config_test;

// ---- defaults and shipped configs ----

TEST(ToolsConfig, DefaultsAreThe111Recipe) {
    const TrainConfig c;
    EXPECT_EQ(c.model.name, "Lite-HRNet-18+LiteFPN");
    EXPECT_EQ(c.model.input_channels, 2);
    EXPECT_EQ(c.model.input_height, 256);
    EXPECT_EQ(c.model.input_width, 512);
    EXPECT_EQ(c.optimizer.name, "AdamW");
    EXPECT_EQ(c.optimizer.lr, 3e-4);
    EXPECT_EQ(c.optimizer.betas[0], 0.9);
    EXPECT_EQ(c.optimizer.betas[1], 0.999);
    EXPECT_EQ(c.optimizer.eps, 1e-8);
    EXPECT_EQ(c.optimizer.weight_decay, 0.05);
    EXPECT_EQ(c.optimizer.clip_grad_norm, 1.0);
    EXPECT_EQ(c.sched.type, tools::SchedType::Sgdr);
    EXPECT_EQ(c.sched.epochs, 20);
    EXPECT_EQ(c.sched.warmup_epochs, 1);  // T_0
    EXPECT_EQ(c.sched.t_mult, 2);
    EXPECT_EQ(c.sched.cosine_min_lr, 3e-6);
    EXPECT_EQ(c.train.amp, tools::AmpMode::Bf16);
    EXPECT_EQ(c.train.batch_size, 128);
    EXPECT_EQ(c.train.gradient_accumulation_steps, 1);
    EXPECT_EQ(c.train.seed, 42u);
    EXPECT_EQ(c.train.backend, tools::Backend::Cuda);
    EXPECT_FALSE(c.train.deterministic);
    EXPECT_EQ(c.train.num_workers, 8);
    EXPECT_EQ(c.train.prefetch_factor, 8);
    EXPECT_EQ(c.train.max_steps, 0);
    EXPECT_EQ(c.loss.variant, model::LossVariant::Sider);
    EXPECT_EQ(c.loss.weights.heatmap, 1.0);
    EXPECT_EQ(c.loss.weights.offset, 1.0);
    EXPECT_EQ(c.loss.weights.hard_negative, 1.5);
    EXPECT_EQ(c.loss.weights.angle, 0.5);
    EXPECT_EQ(c.loss.weights.padding_bce, 0.3);
    EXPECT_EQ(c.loss.weights.y_axis, 0.8);
    EXPECT_EQ(c.eval.eval_interval, 1);
    EXPECT_EQ(c.eval.select_by, "hit_le_5px");
    EXPECT_EQ(c.eval.metrics, (std::vector<std::string>{"mae_px", "rmse_px", "hit_le_2px", "hit_le_5px"}));
    EXPECT_TRUE(c.eval.early_stopping.enabled);
    EXPECT_EQ(c.eval.early_stopping.min_epochs, 10);
    EXPECT_EQ(c.eval.early_stopping.min_improvement, 0.5);
    EXPECT_EQ(c.eval.early_stopping.patience, 5);
    EXPECT_EQ(c.eval.early_stopping.second_guard.metric, "mae_px");
    EXPECT_EQ(c.eval.early_stopping.second_guard.min_delta, 0.5);
    EXPECT_EQ(c.eval.early_stopping.second_guard.mode, tools::GuardMode::Min);
    EXPECT_EQ(c.logging.log_interval, 10);
    EXPECT_EQ(c.checkpoints.save_interval, 1);
    EXPECT_TRUE(c.checkpoints.save_best);
}

TEST(ToolsConfig, EmptyTextAndEmptySectionsGiveDefaults) {
    EXPECT_TRUE(parse("") == TrainConfig{});
    EXPECT_TRUE(parse("# nothing\n") == TrainConfig{});
    EXPECT_TRUE(parse("train:\noptimizer:\n") == TrainConfig{});
}

TEST(ToolsConfig, DefaultYamlEqualsDefaults) {
    LogCapture log;
    const TrainConfig c = tools::load_config(SF_SOURCE_DIR "/configs/default.yaml", {});
    EXPECT_EQ(tools::to_yaml(c), tools::to_yaml(TrainConfig{}));
    EXPECT_TRUE(c == TrainConfig{});
    EXPECT_TRUE(log.lines.empty()) << "default.yaml has no ignored keys, got: " << log.lines.at(0).second;
}

TEST(ToolsConfig, CpuSmokeYamlIsATinyCpuRun) {
    const TrainConfig c = tools::load_config(SF_SOURCE_DIR "/configs/cpu_smoke.yaml", {});
    EXPECT_EQ(c.train.backend, tools::Backend::Cpu);
    EXPECT_EQ(c.train.amp, tools::AmpMode::Fp32);
    EXPECT_EQ(c.data.source, tools::DataSource::Fixed);
    EXPECT_EQ(c.data.num_samples, 4);
    EXPECT_EQ(c.train.batch_size, 2);
    EXPECT_EQ(c.model.input_height, 64);
    EXPECT_EQ(c.model.input_width, 128);
    EXPECT_GT(c.train.max_steps, 0);
    EXPECT_LE(c.train.max_steps, 50);
    EXPECT_EQ(c.logging.log_interval, 1);
    EXPECT_FALSE(c.eval.early_stopping.enabled);
    EXPECT_GE(c.optimizer.lr, 1e-3);
}

TEST(ToolsConfig, Original111FileLoadsAndIgnoresItsExtraKeysAtInfoLevel) {
    LogCapture log;
    const TrainConfig c = parse(kOriginal111);
    TrainConfig expected;
    expected.checkpoints.save_dir = "D:\\Hacker\\Sider_CAPTCHA_Solver\\src\\checkpoints\\1.1.1";
    expected.logging.log_dir = "D:\\Hacker\\Sider_CAPTCHA_Solver\\logs\\log-1.1.1";
    EXPECT_EQ(tools::to_yaml(c), tools::to_yaml(expected));
    EXPECT_TRUE(c == expected);

    ASSERT_EQ(log.lines.size(), 1u) << "the ignored keys are reported once";
    EXPECT_EQ(log.lines[0].first, rt::LogLevel::Info);
    const std::string& msg = log.lines[0].second;
    std::istringstream ignored(
        "checkpoints.save_strategy eval.vis_fail_k eval.visualization hardware.allow_tf32 hardware.cudnn_allow_tf32 "
        "hardware.cudnn_benchmark hardware.device hardware.matmul_allow_tf32 logging.auto_launch_tensorboard "
        "logging.tb_items logging.tensorboard_dir logging.tensorboard_port logging.time_tracking "
        "model.model_path monitoring timestamp train.channels_last train.compile_mode train.compile_model "
        "train.non_blocking train.persistent_workers train.pin_memory");
    for (std::string key; ignored >> key;) EXPECT_TRUE(contains(msg, key));
    EXPECT_FALSE(contains(msg, "cudnn_deterministic")) << "cudnn_deterministic is used, not ignored";
}

TEST(ToolsConfig, HardwareCudnnDeterministicMapsToTrainDeterministic) {
    EXPECT_TRUE(parse("hardware:\n  cudnn_deterministic: true\n").train.deterministic);
    EXPECT_FALSE(parse("hardware:\n  cudnn_deterministic: false\n").train.deterministic);
    EXPECT_TRUE(parse("hardware:\n  cudnn_deterministic: true\ntrain:\n  deterministic: true\n").train.deterministic);
    const std::string e = parse_error("train:\n  deterministic: false\nhardware:\n  cudnn_deterministic: true\n");
    EXPECT_TRUE(
        contains(e, "test.yaml:4: config key 'hardware.cudnn_deterministic': conflicts with train.deterministic"));
    EXPECT_TRUE(contains(parse_error("hardware:\n  cudnn_determinstic: true\n"),
                         "config key 'hardware.cudnn_determinstic': unknown key (allowed under 'hardware': "
                         "cudnn_deterministic)"));
}

// ---- amp ----

TEST(ToolsConfig, LoggingTensorboardAndPlotSwitches) {
    const TrainConfig d;
    EXPECT_TRUE(d.logging.tensorboard);
    EXPECT_TRUE(d.logging.plot);
    const TrainConfig c = parse("logging:\n  tensorboard: false\n  plot: false\n");
    EXPECT_FALSE(c.logging.tensorboard);
    EXPECT_FALSE(c.logging.plot);
    EXPECT_TRUE(contains(parse_error("logging:\n  tensorboard: maybe\n"), "logging.tensorboard"));
}

TEST(ToolsConfig, AmpAcceptsBooleansAndNames) {
    EXPECT_EQ(parse("train:\n  amp: true\n").train.amp, tools::AmpMode::Bf16);
    EXPECT_EQ(parse("train:\n  amp: false\n").train.amp, tools::AmpMode::Fp32);
    EXPECT_EQ(parse("train:\n  amp: bf16\n").train.amp, tools::AmpMode::Bf16);
    EXPECT_EQ(parse("train:\n  amp: fp32\n").train.amp, tools::AmpMode::Fp32);
    EXPECT_EQ(parse("train:\n  amp: fp32\n", {"train.amp=true"}).train.amp, tools::AmpMode::Bf16);
}

TEST(ToolsConfig, AmpRejectsOtherValues) {
    EXPECT_TRUE(contains(parse_error("train:\n  amp: fp16\n"),
                         "test.yaml:2: config key 'train.amp': expected one of true, false, bf16, fp32, got 'fp16'"));
    EXPECT_TRUE(contains(parse_error("train:\n  amp: 1\n"), "config key 'train.amp': expected one of"));
    EXPECT_TRUE(contains(parse_error("train:\n  amp: [bf16]\n"), "got a list"));
    EXPECT_TRUE(contains(parse_error("train:\n  amp:\n"), "got an empty value"));
}

// ---- errors ----

// The cuda section: the kernels' choices, each key checked, and what a switch builds on required.
TEST(ToolsConfig, CudaSectionSwitchesAndWhatTheyNeed) {
    const TrainConfig d = parse("");
    EXPECT_FALSE(d.cuda.pdl || d.cuda.pw_custom || d.cuda.dw_fused_bwd || d.cuda.dw_stats);
    EXPECT_TRUE(d.cuda.dw_variants);
    EXPECT_EQ(d.cuda.bn_row_batch, 1);
    EXPECT_EQ(d.cuda.bn_min_blocks, 1);
    const TrainConfig c = parse(
        "model:\n  fuse_expand_dw: true\ncuda:\n  pdl: true\n  dw_variants: false\n  bn_row_batch: 4\n"
        "  bn_min_blocks: 3\n"
        "  upsample_row_loads: true\n  dw_fused_bwd: true\n  dw_fused_bn_bwd: true\n  dw_fused_bn_grad: true\n"
        "  pw_custom: true\n  pw_stats: true\n  pw_bn_grad: true\n  pw_bn_bwd: true\n  dw_stats: true\n");
    EXPECT_TRUE(c.cuda.pdl && !c.cuda.dw_variants && c.cuda.bn_row_batch == 4 && c.cuda.bn_min_blocks == 3 &&
                c.cuda.upsample_row_loads && c.cuda.dw_fused_bwd && c.cuda.dw_fused_bn_bwd && c.cuda.dw_fused_bn_grad &&
                c.cuda.pw_custom && c.cuda.pw_stats && c.cuda.pw_bn_grad && c.cuda.pw_bn_bwd && c.cuda.dw_stats);
    EXPECT_TRUE(parse("", {"cuda.pw_custom=true", "cuda.pw_stats=true"}).cuda.pw_stats) << "as overrides";
    EXPECT_TRUE(contains(parse_error("cuda:\n  bn_row_batch: 3\n"),
                         "test.yaml:2: config key 'cuda.bn_row_batch': expected 1 or 4, got 3"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  bn_min_blocks: 4\n"),
                         "test.yaml:2: config key 'cuda.bn_min_blocks': expected 1 or 3, got 4"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  pdl: often\n"), "config key 'cuda.pdl'"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  pw_stats: true\n"),
                         "config key 'cuda.pw_stats': true needs cuda.pw_custom: true"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  pw_bn_grad: true\n"), "'cuda.pw_bn_grad': true needs cuda.pw_custom"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  pw_bn_bwd: true\n"), "'cuda.pw_bn_bwd': true needs cuda.pw_custom"));
    EXPECT_TRUE(
        contains(parse_error("cuda:\n  pw_fused_bwd: true\n"), "'cuda.pw_fused_bwd': true needs cuda.pw_custom"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  dw_fused_bn_bwd: true\n"),
                         "'cuda.dw_fused_bn_bwd': true needs cuda.dw_fused_bwd: true"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  dw_fused_bwd: true\n  dw_fused_bn_grad: true\n"),
                         "'cuda.dw_fused_bn_grad': true needs cuda.dw_fused_bwd: true and model.fuse_expand_dw: true"));
    EXPECT_TRUE(contains(parse_error("cuda:\n  head_bn_grad: true\n"),
                         "'cuda.head_bn_grad': true needs model.fuse_head_bn: true"));
    EXPECT_TRUE(parse("model:\n  fuse_head_bn: true\ncuda:\n  head_bn_grad: true\n").cuda.head_bn_grad);
    EXPECT_TRUE(contains(parse_error("model:\n  fuse_head_bn: true\ncuda:\n  head_bn_dx: true\n"),
                         "'cuda.head_bn_dx': true needs cuda.head_bn_grad: true"));
    EXPECT_TRUE(
        parse("model:\n  fuse_head_bn: true\ncuda:\n  head_bn_grad: true\n  head_bn_dx: true\n").cuda.head_bn_dx);
    EXPECT_TRUE(
        contains(parse_error("cuda:\n  pw_custom_kernel: true\n"), "config key 'cuda.pw_custom_kernel': unknown key"));
}

TEST(ToolsConfig, UnknownKeyNamesPathLineAndAllowedKeys) {
    EXPECT_TRUE(contains(parse_error("optimizer:\n  lr: 0.001\n  lrr: 0.1\n"),
                         "test.yaml:3: config key 'optimizer.lrr': unknown key (allowed under 'optimizer': betas, "
                         "clip_grad_norm, eps, lr, name, weight_decay)"));
    EXPECT_TRUE(
        contains(parse_error("optimiser:\n  lr: 0.001\n"),
                 "test.yaml:1: config key 'optimiser': unknown key (allowed at the top level: checkpoints, cuda, "
                 "data, eval, hardware, logging, loss, model, optimizer, sched, train)"));
    EXPECT_TRUE(contains(parse_error("eval:\n  early_stopping:\n    second_guard:\n      metirc: mae_px\n"),
                         "test.yaml:4: config key 'eval.early_stopping.second_guard.metirc': unknown key (allowed "
                         "under 'eval.early_stopping.second_guard': metric, min_delta, mode)"));
    EXPECT_TRUE(contains(parse_error("loss:\n  weights:\n    focal: 1.0\n"), "config key 'loss.weights.focal'"));
    EXPECT_TRUE(contains(parse_error("train:\n  ema_decay: 0.999\n"), "config key 'train.ema_decay': unknown key"));
}

TEST(ToolsConfig, WrongTypeNamesPathAndValue) {
    EXPECT_TRUE(contains(parse_error("train:\n  batch_size: abc\n"),
                         "test.yaml:2: config key 'train.batch_size': expected an integer, got 'abc'"));
    EXPECT_TRUE(contains(parse_error("train:\n  batch_size: 1.5\n"), "expected an integer, got '1.5'"));
    EXPECT_TRUE(contains(parse_error("train:\n  seed: '42'\n"),
                         "config key 'train.seed': expected an integer, got the quoted string '42'"));
    EXPECT_TRUE(
        contains(parse_error("optimizer:\n  lr: fast\n"), "config key 'optimizer.lr': expected a number, got 'fast'"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  lr: .inf\n"), "expected a number, got '.inf'"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  lr:\n"), "expected a number, got an empty value"));
    EXPECT_TRUE(contains(parse_error("checkpoints:\n  save_best: maybe\n"),
                         "config key 'checkpoints.save_best': expected a boolean (true or false), got 'maybe'"));
    EXPECT_TRUE(contains(parse_error("logging:\n  log_dir: [a, b]\n"),
                         "config key 'logging.log_dir': expected a string, got a list"));
    EXPECT_TRUE(contains(parse_error("optimizer: 5\n"), "config key 'optimizer': expected a section"));
    EXPECT_TRUE(contains(parse_error("sched:\n  type: cosine\n"),
                         "config key 'sched.type': expected one of sgdr, warmup_cosine, got 'cosine'"));
    EXPECT_TRUE(contains(parse_error("loss:\n  variant: fixed\n"),
                         "config key 'loss.variant': expected one of sider, corrected, got 'fixed'"));
    EXPECT_TRUE(contains(parse_error("- a\n- b\n"), "expected a mapping of sections at the top level"));
}

TEST(ToolsConfig, OutOfRangeNamesPathAndBound) {
    EXPECT_TRUE(contains(parse_error("optimizer:\n  lr: -1\n"), "config key 'optimizer.lr': expected > 0, got -1"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  lr: 0\n"), "expected > 0, got 0"));
    EXPECT_TRUE(
        contains(parse_error("train:\n  batch_size: 0\n"), "config key 'train.batch_size': expected >= 1, got 0"));
    EXPECT_TRUE(contains(parse_error("train:\n  batch_size: 99999999999\n"),
                         "expected >= 1 and <= 2147483647, got 99999999999"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  betas: [0.9, 1.0]\n"),
                         "config key 'optimizer.betas[1]': expected >= 0 and < 1, got 1.0"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  weight_decay: -0.01\n"), "expected >= 0, got -0.01"));
    EXPECT_TRUE(contains(parse_error("model:\n  input_width: 100\n"),
                         "config key 'model.input_width': expected a multiple of 32, got 100"));
    EXPECT_TRUE(contains(parse_error("model:\n  input_height: 16\n"), "expected >= 32, got 16"));
    EXPECT_TRUE(contains(parse_error("model:\n  fusion_up_order: conv\n"), "config key 'model.fusion_up_order'"));
    EXPECT_EQ(parse("model:\n  fusion_up_order: conv_first\n").model.fusion_up_order, tools::UpOrderSetting::ConvFirst);
    EXPECT_EQ(parse("model:\n  fusion_up_order: upsample_first\n").model.fusion_up_order,
              tools::UpOrderSetting::UpsampleFirst);
    EXPECT_EQ(parse("model:\n  fusion_up_order: auto\n").model.fusion_up_order, tools::UpOrderSetting::Auto);
    EXPECT_EQ(parse("model: {}\n").model.fusion_up_order, tools::UpOrderSetting::Auto);
    // auto: the faster order on CUDA, the original's on the CPU reference; a named order everywhere.
    using tools::Backend;
    using tools::UpOrderSetting;
    EXPECT_EQ(tools::resolve_up_order(UpOrderSetting::Auto, Backend::Cuda), model::UpOrder::ConvFirst);
    EXPECT_EQ(tools::resolve_up_order(UpOrderSetting::Auto, Backend::Cpu), model::UpOrder::UpsampleFirst);
    for (Backend b : {Backend::Cuda, Backend::Cpu}) {
        EXPECT_EQ(tools::resolve_up_order(UpOrderSetting::UpsampleFirst, b), model::UpOrder::UpsampleFirst);
        EXPECT_EQ(tools::resolve_up_order(UpOrderSetting::ConvFirst, b), model::UpOrder::ConvFirst);
    }
    EXPECT_STREQ(tools::up_order_setting_name(UpOrderSetting::Auto), "auto");
    EXPECT_STREQ(tools::up_order_setting_name(UpOrderSetting::ConvFirst), "conv_first");
    EXPECT_TRUE(parse("model:\n  fuse_expand_dw: true\n").model.fuse_expand_dw);
    EXPECT_FALSE(parse("model: {}\n").model.fuse_expand_dw);
    EXPECT_TRUE(parse("model:\n  fuse_dw_pw: true\n").model.fuse_dw_pw);
    EXPECT_FALSE(parse("model: {}\n").model.fuse_dw_pw);
    EXPECT_TRUE(contains(parse_error("model:\n  fuse_dw_pw: 2\n"), "config key 'model.fuse_dw_pw'"));
    EXPECT_TRUE(parse("model:\n  merge_heads: true\n").model.merge_heads);
    EXPECT_FALSE(parse("model: {}\n").model.merge_heads);
    EXPECT_TRUE(contains(parse_error("model:\n  merge_heads: 1.5\n"), "config key 'model.merge_heads'"));
    EXPECT_TRUE(parse("model:\n  fuse_head_bn: true\n").model.fuse_head_bn);
    EXPECT_FALSE(parse("model: {}\n").model.fuse_head_bn);
    EXPECT_TRUE(contains(parse_error("model:\n  fuse_head_bn: yes please\n"), "config key 'model.fuse_head_bn'"));
    EXPECT_TRUE(parse("model:\n  fuse_up_bn: true\n").model.fuse_up_bn);
    EXPECT_FALSE(parse("model: {}\n").model.fuse_up_bn);
    EXPECT_TRUE(contains(parse_error("model:\n  fuse_up_bn: 3\n"), "config key 'model.fuse_up_bn'"));
    EXPECT_TRUE(contains(parse_error("model:\n  fuse_expand_dw: sometimes\n"), "config key 'model.fuse_expand_dw'"));
    EXPECT_TRUE(contains(parse_error("model:\n  input_channels: 3\n"),
                         "config key 'model.input_channels': expected 2 or 4, got 3"));
    EXPECT_TRUE(contains(parse_error("sched:\n  cosine_min_lr: 0.001\n"),
                         "config key 'sched.cosine_min_lr': expected < optimizer.lr (0.0003), got 0.001"));
    EXPECT_TRUE(contains(parse_error("sched:\n  warmup_epochs: 0\n"), "config key 'sched.warmup_epochs'"));
    EXPECT_EQ(parse("sched:\n  type: warmup_cosine\n  warmup_epochs: 0\n  warmup_steps: 100\n").sched.warmup_steps,
              100);
    EXPECT_TRUE(contains(parse_error("eval:\n  select_by: acc\n"),
                         "config key 'eval.select_by': expected one of mae_px, rmse_px, hit_le_2px, hit_le_5px, "
                         "got 'acc'"));
    EXPECT_TRUE(contains(parse_error("eval:\n  metrics: [mae_px, mae_px]\n"),
                         "config key 'eval.metrics[1]': duplicate entry 'mae_px'"));
    EXPECT_TRUE(contains(parse_error("data:\n  num_samples: 0\n"), "config key 'data.num_samples': expected >= 1"));
    EXPECT_TRUE(contains(parse_error("data:\n  source: shards\n  processed_dir: ''\n"),
                         "config key 'data.processed_dir': expected a non-empty string"));
}

TEST(ToolsConfig, BadListLengthNamesPath) {
    EXPECT_TRUE(contains(parse_error("optimizer:\n  betas: [0.9]\n"),
                         "test.yaml:2: config key 'optimizer.betas': expected a list of 2 numbers, got a list of 1 "
                         "element(s)"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  betas: [0.9, 0.99, 0.999]\n"), "got a list of 3 element(s)"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  betas: 0.9\n"), "expected a list of 2 numbers, got '0.9'"));
    EXPECT_TRUE(
        contains(parse_error("eval:\n  metrics: []\n"), "config key 'eval.metrics': expected a non-empty list"));
}

TEST(ToolsConfig, DuplicateKeyIsAnError) {
    EXPECT_TRUE(contains(parse_error("train:\n  batch_size: 8\n  batch_size: 16\n"),
                         "test.yaml:3: config key 'train.batch_size': duplicate key"));
}

TEST(ToolsConfig, AllErrorsAreReportedTogether) {
    const std::string e = parse_error(
        "optimizer:\n  lr: -1\n  lrr: 2\ntrain:\n  amp: fp16\n  batch_size: x\nbogus: 1\n", {"eval.patience=3"});
    EXPECT_TRUE(contains(e, "config 'test.yaml': 6 error(s):"));
    EXPECT_TRUE(contains(e, "test.yaml:2: config key 'optimizer.lr': expected > 0, got -1"));
    EXPECT_TRUE(contains(e, "test.yaml:3: config key 'optimizer.lrr': unknown key"));
    EXPECT_TRUE(contains(e, "test.yaml:5: config key 'train.amp': expected one of"));
    EXPECT_TRUE(contains(e, "test.yaml:6: config key 'train.batch_size': expected an integer, got 'x'"));
    EXPECT_TRUE(contains(e, "test.yaml:7: config key 'bogus': unknown key"));
    EXPECT_TRUE(contains(e, "command-line override 'eval.patience=3': config key 'eval.patience': unknown key"));
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 6) << "a header line, then one line per error:\n" << e;
}

TEST(ToolsConfig, FileErrorsNameTheFileAndLine) {
    const std::string dir = make_temp_dir();
    const std::string path = dir + "/bad.yaml";
    write_file(path, "train:\n  batch_size: 4\n  amp: fp16\n");
    try {
        tools::load_config(path, {});
        ADD_FAILURE() << "no error";
    } catch (const rt::Error& e) {
        EXPECT_TRUE(contains(e.what(), path + ":3: config key 'train.amp'"));
    }
    write_file(path, "train:\n  batch_size: [4,\n  amp: bf16\n");
    try {
        tools::load_config(path, {});
        ADD_FAILURE() << "no error";
    } catch (const rt::Error& e) {
        EXPECT_TRUE(contains(e.what(), "config '" + path + "': 1 error(s):\n  " + path + ":"));
        EXPECT_TRUE(contains(e.what(), ": YAML syntax error: "));
    }
    try {
        tools::load_config(dir + "/missing.yaml", {});
        ADD_FAILURE() << "no error";
    } catch (const rt::Error& e) {
        EXPECT_TRUE(contains(e.what(), "config file '" + dir + "/missing.yaml': cannot open"));
    }
}

// ---- overrides ----

TEST(ToolsConfig, OverridesSetNestedKeysAndLists) {
    const TrainConfig c = parse("train:\n  batch_size: 64\n",
                                {"eval.early_stopping.patience=7", "optimizer.betas=[0.9,0.99]", "train.amp=fp32",
                                 "loss.weights.y_axis=0.5", "data.source=fixed", "train.batch_size=16",
                                 "eval.metrics=[mae_px, hit_le_5px]", "checkpoints.save_dir=/tmp/a b"});
    EXPECT_EQ(c.eval.early_stopping.patience, 7);
    EXPECT_EQ(c.optimizer.betas[0], 0.9);
    EXPECT_EQ(c.optimizer.betas[1], 0.99);
    EXPECT_EQ(c.train.amp, tools::AmpMode::Fp32);
    EXPECT_EQ(c.loss.weights.y_axis, 0.5);
    EXPECT_EQ(c.data.source, tools::DataSource::Fixed);
    EXPECT_EQ(c.train.batch_size, 16);
    EXPECT_EQ(c.eval.metrics, (std::vector<std::string>{"mae_px", "hit_le_5px"}));
    EXPECT_EQ(c.checkpoints.save_dir, "/tmp/a b");
    // the last of two overrides of one key wins; overrides are applied before validation
    EXPECT_EQ(parse("", {"train.seed=1", "train.seed=2"}).train.seed, 2u);
    EXPECT_EQ(parse("optimizer:\n  lr: -1\n", {"optimizer.lr=0.001"}).optimizer.lr, 0.001);
}

TEST(ToolsConfig, OverrideErrorsSayTheyCameFromTheCommandLine) {
    EXPECT_TRUE(contains(parse_error("", {"optimizer.lrr=1"}),
                         "command-line override 'optimizer.lrr=1': config key 'optimizer.lrr': unknown key (allowed "
                         "under 'optimizer': betas, clip_grad_norm, eps, lr, name, weight_decay)"));
    EXPECT_TRUE(contains(parse_error("train:\n  batch_size: 8\n", {"train.batch_size=abc"}),
                         "command-line override 'train.batch_size=abc': config key 'train.batch_size': expected an "
                         "integer, got 'abc'"));
    EXPECT_TRUE(contains(parse_error("", {"optimizer.betas=[0.9]"}), "command-line override 'optimizer.betas=[0.9]'"));
    EXPECT_TRUE(contains(parse_error("optimizer:\n  lr: 0.001\n", {"foo.bar=1"}),
                         "command-line override 'foo.bar=1': config key 'foo': unknown key"));
    EXPECT_TRUE(contains(parse_error("", {"optimizer.betas=[0.9, 2]"}),
                         "command-line override 'optimizer.betas=[0.9, 2]': config key 'optimizer.betas[1]'"));
}

TEST(ToolsConfig, MalformedOverridesAreErrors) {
    EXPECT_TRUE(
        contains(parse_error("", {"optimizer.lr"}), "command-line override 'optimizer.lr': expected key.path=value"));
    EXPECT_TRUE(contains(parse_error("", {"=1"}), "command-line override '=1': expected key.path=value"));
    EXPECT_TRUE(contains(parse_error("", {"optimizer..lr=1"}), "command-line override 'optimizer..lr=1'"));
    EXPECT_TRUE(contains(parse_error("train:\n  amp: bf16\n", {"train.amp.x=1"}),
                         "command-line override 'train.amp.x=1': config key 'train.amp' is not a section"));
    EXPECT_TRUE(contains(parse_error("", {"optimizer.betas=[0.9,"}), "the value is not valid YAML"));
    EXPECT_TRUE(contains(parse_error("", {"optimizer.lr="}), "expected a number, got an empty value"));
}

}  // namespace
