// Test support for `slidefuse eval` / `predict` tests on the CPU backend: the eval CSV reader, a run folder
// (config.resolved.yaml, checkpoints/ckpt-00000003.safetensors of a freshly initialised network with
// non-trivial BatchNorm running statistics), an exported weight file without a run folder, and a
// dataset root with val/ (7 generated samples at 64x128) and test/ (an empty shard).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/generator.h"
#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/init.h"
#include "model/net.h"
#include "tools/config.h"

namespace sftest {

constexpr int kEvalH = 64, kEvalW = 128;  // small canvas: grid 16x32

struct EvalFiles {
    std::string root;
    std::vector<data::GenSample> val;  // the val split's samples, in file order
    std::string ckpt() const { return root + "/run/checkpoints/ckpt-00000003.safetensors"; }
    std::string weights() const { return root + "/weights.safetensors"; }
    std::string run_config() const { return root + "/run/config.resolved.yaml"; }
};

// One row of `slidefuse eval --csv`: the sample id, then its 13 columns in file order (gap_x ..
// combined_err); columns 0..9 are floats (coordinates, scores), read back exactly.
struct CsvRow {
    uint64_t id;
    double v[13];  // gap_x .. combined_err, CSV column order; 0..9 are floats (coordinates, scores)
};

inline std::vector<CsvRow> read_eval_csv(const std::string& path) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    EXPECT_EQ(line.rfind("sample,gap_x,gap_y,slider_x,slider_y,pred_gap_x", 0), 0u) << line;
    std::vector<CsvRow> rows;
    while (std::getline(f, line)) {
        CsvRow r{};
        std::replace(line.begin(), line.end(), ',', ' ');
        std::istringstream ss(line);
        ss >> r.id;
        for (int k = 0; k < 13; ++k) {
            std::string tok;
            ss >> tok;
            r.v[k] =
                k < 10 ? static_cast<double>(std::strtof(tok.c_str(), nullptr)) : std::strtod(tok.c_str(), nullptr);
        }
        EXPECT_FALSE(ss.fail()) << line;
        rows.push_back(r);
    }
    return rows;
}

// The run's checkpoint loaded into a CPU network, changed by edit(net) (its parameters and buffers are
// net.plan().master() / buffers()), and saved in the same run folder as the checkpoint of `step`, so that
// its config is found. Returns its path.
template <class Edit>
std::string write_edited_checkpoint(const EvalFiles& f, int64_t step, Edit&& edit) {
    model::SiderNet net(model::NetShape{1, 2, kEvalH, kEvalW}, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    const model::CheckpointView v{&net.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()};
    model::load_checkpoint(f.ckpt(), v, nullptr);
    edit(net);
    model::RunState rs;
    rs.step = step;
    rs.epoch = 1;
    rs.out_dir = f.root + "/run";
    char name[64];
    std::snprintf(name, sizeof(name), "/run/checkpoints/ckpt-%08lld.safetensors", static_cast<long long>(step));
    const std::string path = f.root + name;
    model::save_checkpoint(path, v, rs);
    return path;
}

// Writes the files under `root` (which must exist and be empty).
inline EvalFiles write_eval_files(const std::string& root) {
    namespace fs = std::filesystem;
    EvalFiles f;
    f.root = root;
    data::GenConfig g;
    g.seed = 11;
    g.height = kEvalH;
    g.width = kEvalW;
    fs::create_directories(root + "/data/val");
    fs::create_directories(root + "/data/test");
    data::ShardWriter val(root + "/data/val/val_000000.sfshard", data::ShardSpec{kEvalH, kEvalW, 1, false});
    for (uint64_t i = 0; i < 7; ++i) {
        f.val.push_back(data::generate_sample(g, 37 * i + 3));
        val.add(f.val.back().pixels.data(), f.val.back().label);
    }
    val.finish();
    data::ShardWriter empty(root + "/data/test/test_000000.sfshard", data::ShardSpec{kEvalH, kEvalW, 1, false});
    empty.finish();

    const std::string yaml =
        "model: {input_channels: 2, input_height: 64, input_width: 128}\n"
        "train: {backend: cpu, amp: fp32, batch_size: 4, seed: 3, num_workers: 1, prefetch_factor: 2}\n"
        "data: {source: shards, processed_dir: " +
        root + "/data}\n";
    const tools::TrainConfig cfg = tools::parse_config(yaml, {}, "test.yaml");
    fs::create_directories(root + "/run/checkpoints");
    tools::write_resolved_config(cfg, f.run_config());
    model::SiderNet net(model::NetShape{1, 2, kEvalH, kEvalW}, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), 3, p.master(), p.buffers(), p.counters());
    // Non-trivial BatchNorm running statistics, so eval mode differs from train mode.
    for (size_t i = 0; i < net.table().buffer_floats; ++i) p.buffers()[i] += 0.05f * static_cast<float>(i % 7);
    const model::CheckpointView v{&net.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()};
    model::RunState rs;
    rs.step = 3;
    rs.epoch = 1;
    rs.out_dir = root + "/run";
    model::save_checkpoint(f.ckpt(), v, rs);
    model::export_weights(f.weights(), v);  // no run folder beside it
    return f;
}

}  // namespace sftest
