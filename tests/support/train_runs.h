// Helpers of the `slidefuse train` end-to-end tests on the CPU backend (tests/tools_train_resume_test.cpp,
// tests/tools_train_signals_test.cpp): the cpu_smoke config writing into a temporary folder, the
// metrics.jsonl reader, and exact comparisons of step records, validation records and checkpoints.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/safetensors.h"
#include "tests/support/temp_dir.h"

namespace sftest::train {

using nlohmann::json;

inline const std::string kSmoke = std::string(SF_SOURCE_DIR) + "/configs/cpu_smoke.yaml";

struct TempDir : sftest::TempDir {
    TempDir() : sftest::TempDir("sf_resume") {}
};

// The smoke config writing into dir: run folder dir/run, checkpoints dir/ck, a metrics line per step.
inline std::vector<std::string> smoke_args(const std::string& dir, std::vector<std::string> extra) {
    std::vector<std::string> a = {
        "--config", kSmoke, "--out", dir + "/run", "checkpoints.save_dir=" + dir + "/ck", "logging.log_interval=1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

// metrics.jsonl: step records by step, validation records by step.
struct Metrics {
    std::map<int64_t, json> steps, validations;
};
inline Metrics read_metrics(const std::string& path) {
    Metrics m;
    std::ifstream f(path);
    std::string l;
    while (std::getline(f, l)) {
        const json j = json::parse(l);
        (j.contains("validation") ? m.validations : m.steps)[j.at("step").get<int64_t>()] = j;
    }
    return m;
}

// The training trajectory of a step record, compared exactly (JSON numbers round-trip doubles).
inline void expect_same_step(const json& a, const json& b) {
    for (const char* k : {"epoch", "loss", "loss_mean_window", "focal_gap", "focal_slider", "offset", "hard_negative",
                          "angle", "padding_bce", "y_axis", "lr", "grad_norm", "skipped_steps"})
        EXPECT_EQ(a.at(k), b.at(k)) << "step " << a.at("step") << " field " << k;
}

inline void expect_same_validation(const json& a, const json& b) {
    for (const char* k : {"epoch", "mae_px", "rmse_px", "hit_le_2px", "hit_le_5px", "gap_mae", "slider_mae", "samples"})
        EXPECT_EQ(a.at(k), b.at(k)) << "validation at step " << a.at("step") << " field " << k;
}

// Every tensor of two checkpoint files bitwise, and their run state except the keys in `skip`.
inline void expect_same_checkpoint(const std::string& a, const std::string& b, const std::vector<std::string>& skip) {
    const rt::SafeTensors x = rt::SafeTensors::load(a), y = rt::SafeTensors::load(b);
    ASSERT_EQ(x.names(), y.names());
    size_t differing = 0;
    for (const std::string& n : x.names())
        if (x.get(n).bytes != y.get(n).bytes && differing++ < 5) ADD_FAILURE() << "tensor " << n << " differs";
    EXPECT_EQ(differing, 0u);
    for (const auto& kv : x.metadata()) {
        if (std::find(skip.begin(), skip.end(), kv.first) != skip.end()) continue;
        EXPECT_EQ(kv.second, y.metadata().at(kv.first)) << kv.first;
    }
}

inline std::string meta(const std::string& path, const std::string& key) {
    return rt::SafeTensors::load(path).metadata().at(key);
}

// a followed by b.
inline std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace sftest::train
