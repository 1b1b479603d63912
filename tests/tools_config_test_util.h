// Helpers shared by the config test files: parsing with a fixed source name, expected-error
// capture, substring assertions, log capture and temporary directories.
#pragma once
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
#include "tools/config.h"

namespace config_test {

using tools::TrainConfig;

inline TrainConfig parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    return tools::parse_config(yaml, overrides, "test.yaml");
}

// The rt::Error message of parsing `yaml`; a test failure when it parses.
inline std::string parse_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    try {
        parse(yaml, overrides);
    } catch (const rt::Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected an error for:\n" << yaml;
    return "";
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
    if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "expected to find\n  " << part << "\nin\n" << text;
}

// Captures log lines for the lifetime of the object (replacing the test's warn-fails sink).
struct LogCapture {
    std::vector<std::pair<rt::LogLevel, std::string>> lines;
    rt::LogSink previous;
    LogCapture() {
        previous = rt::set_log_sink([this](rt::LogLevel l, const std::string& m) { lines.emplace_back(l, m); });
    }
    ~LogCapture() { rt::set_log_sink(previous); }
};

inline std::string make_temp_dir() {
    std::string tmpl = ::testing::TempDir() + "sf_config_test_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    return tmpl;
}

inline std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
        closedir(d);
    }
    return names;
}

inline void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

// The original's 1.1.1 training config, every key (MODEL_SPEC §5), with the recipe's values.

// The original 1.1.1 training config key set (values of the 1.1.1 recipe).
inline constexpr const char* kOriginal111 = R"(checkpoints:
  save_best: true
  save_dir: D:\Hacker\Sider_CAPTCHA_Solver\src\checkpoints\1.1.1
  save_interval: 1
  save_strategy:
  - name: epoch_{epoch:03d}.pth
  - name: best_model.pth
data:
  processed_dir: data/processed
eval:
  early_stopping:
    min_epochs: 10
    min_improvement: 0.5
    patience: 5
    second_guard:
      metric: mae_px
      min_delta: 0.5
      mode: min
  eval_interval: 1
  metrics:
  - mae_px
  - rmse_px
  - hit_le_2px
  - hit_le_5px
  select_by: hit_le_5px
  vis_fail_k: 10
  visualization:
    num_best_samples: 3
    save_heatmaps: true
hardware:
  allow_tf32: true
  cudnn_allow_tf32: true
  cudnn_benchmark: true
  cudnn_deterministic: false
  device: cuda
  matmul_allow_tf32: true
logging:
  auto_launch_tensorboard: true
  log_dir: D:\Hacker\Sider_CAPTCHA_Solver\logs\log-1.1.1
  log_interval: 10
  tb_items:
  - loss/train
  - hist/grad_layer_*
  tensorboard: true
  tensorboard_dir: D:\Hacker\Sider_CAPTCHA_Solver\logs\tensorboard\1.1.1
  tensorboard_port: 6006
  time_tracking:
    display_eta: true
    enabled: true
model:
  input_channels: 2
  model_path: src.models.lite_hrnet_18_fpn
  name: Lite-HRNet-18+LiteFPN
monitoring:
  wandb:
    enabled: false
    project: slider-captcha
    tags:
    - lite-hrnet
optimizer:
  betas:
  - 0.9
  - 0.999
  clip_grad_norm: 1.0
  eps: 1.0e-08
  lr: 0.0003
  name: AdamW
  weight_decay: 0.05
sched:
  cosine_min_lr: 3.0e-06
  epochs: 20
  warmup_epochs: 1
timestamp: '20250824_061929'
train:
  amp: true
  batch_size: 128
  channels_last: true
  compile_mode: default
  compile_model: false
  gradient_accumulation_steps: 1
  non_blocking: true
  num_workers: 8
  persistent_workers: true
  pin_memory: true
  prefetch_factor: 8
)";

}  // namespace config_test
