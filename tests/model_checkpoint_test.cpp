// Checkpoint files (model/checkpoint.h): bitwise round trip of weights, buffers, AdamW state and
// run state (on the real model's table and on a tiny hand-made one), PyTorch layout in the file,
// exported weight files, every kind of corrupt file refused with its reason (and the destination
// left untouched), and the folder logic (names, listing, pruning, --resume auto's choice).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>

#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"
#include "tests/support/log_lines.h"
#include "tests/support/temp_dir.h"

namespace {

struct TempDir : sftest::TempDir {
    TempDir() : sftest::TempDir("sf_ckpt") {}
};

// Host storage for one CheckpointView of a table, filled with reproducible random values
// (padding of the flat ranges stays zero, exp_avg_sq and running_var are positive).
struct State {
    const model::ParamTable* table;
    std::vector<float> master, m, v, buffers;
    std::vector<int64_t> counters;
    explicit State(const model::ParamTable& t)
        : table(&t),
          master(t.flat_size),
          m(t.flat_size),
          v(t.flat_size),
          buffers(t.buffer_floats),
          counters(t.counters) {}
    void randomize(uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-2.f, 2.f);
        for (const auto& p : table->params)
            for (size_t i = 0; i < p.numel; ++i) {
                master[p.offset + i] = u(rng);
                m[p.offset + i] = u(rng);
                v[p.offset + i] = std::fabs(u(rng)) + 1e-30f;
            }
        for (auto& b : buffers) b = std::fabs(u(rng));
        for (auto& c : counters) c = static_cast<int64_t>(rng() % 100000);
    }
    model::CheckpointView view(bool adam = true) {
        return {table,          master.data(),  adam ? m.data() : nullptr, adam ? v.data() : nullptr,
                buffers.data(), counters.data()};
    }
    bool operator==(const State& o) const {
        auto same = [](const auto& a, const auto& b) {
            return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
        };
        return same(master, o.master) && same(m, o.m) && same(v, o.v) && same(buffers, o.buffers) &&
               same(counters, o.counters);
    }
};

// A small table with the three kinds of entries: a conv weight (KRSC <-> OIHW), a vector and a
// (1,) parameter, BN running statistics and a num_batches_tracked counter.
model::ParamTable tiny_table() {
    model::ParamTable t;
    t.params.push_back({"head.conv.weight", {4, 2, 3, 3}, 72, 0, true});
    t.params.push_back({"head.conv.bias", {4}, 4, 80, false});
    t.params.push_back({"fuse.weight_a", {1}, 1, 96, false});
    t.flat_size = 112;
    t.buffers.push_back({"head.bn.running_mean", {4}, 4, 0, false});
    t.buffers.push_back({"head.bn.running_var", {4}, 4, 4, false});
    t.buffers.push_back({"head.bn.num_batches_tracked", {}, 1, 0, true});
    t.buffer_floats = 8;
    t.counters = 1;
    return t;
}

model::RunState odd_run_state() {
    model::RunState rs;
    rs.step = 1234567;
    rs.adam_step = 1234500;
    rs.skipped = 67;
    rs.epoch = 42;
    rs.bad_streak = 3;
    rs.seed = ~uint64_t{0} - 5;
    rs.cursor_epoch = 43;
    rs.cursor_batch = 17;
    rs.config_hash = "0123456789abcdef";
    rs.best_metric = 1.0 / 3.0;
    rs.best_metric_name = "hit_le_5px";
    rs.epochs_without_improvement = 4;
    rs.es_best = -std::numeric_limits<double>::infinity();
    rs.guard_best = std::numeric_limits<double>::infinity();
    rs.window_loss_sum = 123.456789012345678;
    rs.window_steps = 7;
    rs.out_dir = "runs/some run";
    return rs;
}

using sftest::LogLines;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

void expect_same_run_state(const model::RunState& a, const model::RunState& b) {
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.adam_step, b.adam_step);
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.skipped, b.skipped);
    EXPECT_EQ(a.bad_streak, b.bad_streak);
    EXPECT_EQ(a.seed, b.seed);
    EXPECT_EQ(a.cursor_epoch, b.cursor_epoch);
    EXPECT_EQ(a.cursor_batch, b.cursor_batch);
    EXPECT_EQ(a.config_hash, b.config_hash);
    EXPECT_TRUE(same_bits(a.best_metric, b.best_metric)) << a.best_metric << " vs " << b.best_metric;
    EXPECT_EQ(a.best_metric_name, b.best_metric_name);
    EXPECT_EQ(a.epochs_without_improvement, b.epochs_without_improvement);
    EXPECT_TRUE(same_bits(a.es_best, b.es_best));
    EXPECT_TRUE(same_bits(a.guard_best, b.guard_best));
    EXPECT_TRUE(same_bits(a.window_loss_sum, b.window_loss_sum));
    EXPECT_EQ(a.window_steps, b.window_steps);
    EXPECT_EQ(a.out_dir, b.out_dir);
}

TEST(Checkpoint, RealModelRoundTripIsBitwiseAndInPyTorchLayout) {
    model::SiderNet net(model::NetShape{1, 2, 32, 32}, rt::MemKind::Host);
    const model::ParamTable& t = net.table();
    State a(t), b(t);
    a.randomize(1);
    const TempDir tmp;
    const std::string& dir = tmp.path;
    const std::string path = dir + "/c.safetensors";
    model::save_checkpoint(path, a.view(), odd_run_state());
    model::RunState rs;
    model::load_checkpoint(path, b.view(), &rs);
    EXPECT_TRUE(a == b);
    expect_same_run_state(rs, odd_run_state());

    // The file itself: PyTorch names, OIHW conv weights, I64 scalar counters, AdamW state beside.
    const rt::SafeTensors st = rt::SafeTensors::load(path);
    EXPECT_EQ(st.names().size(), 3 * t.params.size() + t.buffers.size());
    const model::ParamInfo& w = *t.find("stem.conv1.conv.weight");
    ASSERT_TRUE(w.conv_weight);
    const rt::TensorData& tw = st.get(w.name);
    EXPECT_EQ(tw.shape, (std::vector<int64_t>{32, 2, 3, 3}));
    for (size_t i = 0; i < w.numel; i += 7) {
        float x;
        std::memcpy(&x, tw.bytes.data() + 4 * i, 4);
        ASSERT_EQ(x, a.master[w.offset + model::storage_index(w, i)]) << "torch index " << i;
    }
    EXPECT_TRUE(st.has("optimizer.exp_avg_sq.stem.conv1.conv.weight"));
    EXPECT_EQ(st.get("stem.conv1.bn.num_batches_tracked").dtype, rt::DType::I64);
    EXPECT_TRUE(st.get("stem.conv1.bn.num_batches_tracked").shape.empty());
    EXPECT_EQ(st.metadata().at("slidefuse.version"), "1");
    EXPECT_EQ(st.metadata().at("slidefuse.kind"), "checkpoint");
    EXPECT_EQ(model::checkpoint_input_channels(path), 2);
}

TEST(Checkpoint, ExportedWeightsHoldOnlyTheStateDict) {
    const model::ParamTable t = tiny_table();
    State a(t), b(t);
    a.randomize(2);
    const TempDir tmp;
    const std::string& dir = tmp.path;
    const std::string path = dir + "/w.safetensors";
    model::export_weights(path, a.view());
    const rt::SafeTensors st = rt::SafeTensors::load(path);
    EXPECT_EQ(st.names(),
              (std::vector<std::string>{"fuse.weight_a", "head.bn.num_batches_tracked", "head.bn.running_mean",
                                        "head.bn.running_var", "head.conv.bias", "head.conv.weight"}));
    EXPECT_EQ(st.metadata().at("slidefuse.kind"), "weights");
    EXPECT_EQ(st.metadata().count("run.step"), 0u);
    model::load_checkpoint(path, b.view(false), nullptr);  // the eval/predict path: weights only
    EXPECT_EQ(a.master, b.master);
    EXPECT_EQ(a.buffers, b.buffers);
    EXPECT_EQ(a.counters, b.counters);
    model::RunState rs;
    SF_EXPECT_ERROR(model::load_checkpoint(path, b.view(false), &rs), path.c_str(), "no run state");
    SF_EXPECT_ERROR(model::load_checkpoint(path, b.view(true), nullptr), path.c_str(), "no optimizer state");
}

// Rewrites a saved file through `edit` (tensors and metadata), to make corrupt variants.
std::string rewrite(
    const std::string& src, const std::string& dst,
    const std::function<void(std::map<std::string, rt::TensorData>&, std::map<std::string, std::string>&)>& edit) {
    const rt::SafeTensors in = rt::SafeTensors::load(src);
    std::map<std::string, rt::TensorData> tensors;
    for (const auto& n : in.names()) tensors[n] = in.get(n);
    std::map<std::string, std::string> meta = in.metadata();
    edit(tensors, meta);
    rt::SafeTensors out;
    for (const auto& kv : tensors) out.add(kv.first, kv.second.dtype, kv.second.shape, kv.second.bytes.data());
    out.metadata() = meta;
    out.save(dst);
    return dst;
}

void set_float(rt::TensorData& t, size_t i, float x) { std::memcpy(t.bytes.data() + 4 * i, &x, 4); }

TEST(Checkpoint, CorruptFilesAreRefusedWithTheReasonAndLeaveTheDestinationUntouched) {
    const model::ParamTable t = tiny_table();
    State a(t);
    a.randomize(3);
    const TempDir tmp;
    const std::string& dir = tmp.path;
    const std::string good = dir + "/good.safetensors";
    model::save_checkpoint(good, a.view(), odd_run_state());
    State dst(t);
    dst.randomize(4);
    const State before = dst;
    model::RunState rs;
    using Tensors = std::map<std::string, rt::TensorData>;
    using Meta = std::map<std::string, std::string>;
    auto refused = [&](const std::string& path, std::vector<const char*> parts) {
        try {
            model::load_checkpoint(path, dst.view(), &rs);
            ADD_FAILURE() << "accepted " << path;
        } catch (const rt::Error& e) {
            for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
        EXPECT_TRUE(dst == before) << path << " changed the destination";
    };

    // Bytes: truncated data, a file shorter than its header length, a header that is not JSON.
    std::string bytes;
    {
        std::ifstream f(good, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(f), {});
    }
    auto write_bytes = [&](const std::string& name, const std::string& content) {
        std::ofstream(dir + "/" + name, std::ios::binary) << content;
        return dir + "/" + name;
    };
    refused(write_bytes("trunc.safetensors", bytes.substr(0, bytes.size() - 100)), {"truncated or damaged", "outside"});
    refused(write_bytes("short.safetensors", bytes.substr(0, 5)), {"truncated"});
    refused(write_bytes("header.safetensors", bytes.substr(0, 40)), {"truncated or damaged", "header length"});
    std::string bad_json = bytes;
    bad_json[8] = 'x';  // the header's opening brace
    refused(write_bytes("json.safetensors", bad_json), {"not valid JSON"});

    // Keys, shapes, dtypes.
    refused(rewrite(good, dir + "/missing.safetensors", [](Tensors& ts, Meta&) { ts.erase("head.conv.bias"); }),
            {"missing", "head.conv.bias"});
    refused(rewrite(good, dir + "/missing_opt.safetensors",
                    [](Tensors& ts, Meta&) { ts.erase("optimizer.exp_avg.fuse.weight_a"); }),
            {"missing", "optimizer.exp_avg.fuse.weight_a"});
    refused(rewrite(good, dir + "/unknown.safetensors",
                    [](Tensors& ts, Meta&) { ts["tamh.gate.weight"] = ts["fuse.weight_a"]; }),
            {"unknown", "tamh.gate.weight"});
    refused(rewrite(good, dir + "/shape.safetensors",
                    [](Tensors& ts, Meta&) {
                        ts["head.conv.weight"].shape = {4, 2, 9, 1};
                    }),
            {"head.conv.weight", "F32 [4,2,9,1]", "expected F32 [4,2,3,3]"});
    refused(rewrite(good, dir + "/dtype.safetensors",
                    [](Tensors& ts, Meta&) {
                        rt::TensorData& c = ts["head.bn.num_batches_tracked"];
                        c.dtype = rt::DType::F64;
                    }),
            {"head.bn.num_batches_tracked", "is F64", "expected I64"});

    // Values.
    refused(rewrite(good, dir + "/nan.safetensors",
                    [](Tensors& ts, Meta&) { set_float(ts["head.conv.weight"], 5, std::nanf("")); }),
            {"non-finite", "head.conv.weight", "index 5"});
    refused(rewrite(good, dir + "/inf.safetensors",
                    [](Tensors& ts, Meta&) { set_float(ts["optimizer.exp_avg.head.conv.bias"], 1, INFINITY); }),
            {"non-finite", "optimizer.exp_avg.head.conv.bias"});
    refused(rewrite(good, dir + "/neg_v.safetensors",
                    [](Tensors& ts, Meta&) { set_float(ts["optimizer.exp_avg_sq.head.conv.bias"], 0, -1.f); }),
            {"negative", "optimizer.exp_avg_sq.head.conv.bias"});
    refused(rewrite(good, dir + "/nan_stat.safetensors",
                    [](Tensors& ts, Meta&) { set_float(ts["head.bn.running_mean"], 3, std::nanf("")); }),
            {"non-finite", "head.bn.running_mean"});

    // Metadata: version, kind, run state.
    refused(rewrite(good, dir + "/version.safetensors", [](Tensors&, Meta& m) { m["slidefuse.version"] = "2"; }),
            {"version 2", "reads version 1"});
    refused(rewrite(good, dir + "/kind.safetensors", [](Tensors&, Meta& m) { m["slidefuse.kind"] = "optimizer"; }),
            {"unknown file kind"});
    refused(rewrite(good, dir + "/no_step.safetensors", [](Tensors&, Meta& m) { m.erase("run.step"); }),
            {"run.step", "missing"});
    refused(rewrite(good, dir + "/bad_int.safetensors", [](Tensors&, Meta& m) { m["run.cursor_batch"] = "-1"; }),
            {"run.cursor_batch", "not a valid integer"});
    refused(rewrite(good, dir + "/bad_num.safetensors", [](Tensors&, Meta& m) { m["run.es_best"] = "1.5x"; }),
            {"run.es_best", "not a valid number"});
    refused(rewrite(good, dir + "/inconsistent.safetensors", [](Tensors&, Meta& m) { m["run.adam_step"] = "5"; }),
            {"inconsistent run state"});
    refused(rewrite(good, dir + "/foreign.safetensors", [](Tensors&, Meta& m) { m.clear(); }),
            {"no slidefuse metadata"});
    refused(dir + "/absent.safetensors", {"no such checkpoint file"});

    // A foreign state dict (e.g. saved by PyTorch: no metadata, no optimizer) still loads as weights.
    const std::string foreign = rewrite(good, dir + "/foreign_w.safetensors", [](Tensors& ts, Meta& m) {
        m.clear();
        for (auto it = ts.begin(); it != ts.end();) it = it->first.rfind("optimizer.", 0) == 0 ? ts.erase(it) : ++it;
    });
    State w(t);
    model::load_checkpoint(foreign, w.view(false), nullptr);
    EXPECT_EQ(w.master, a.master);
}

TEST(Checkpoint, RunStateRoundTripsExtremeDoubles) {
    const model::ParamTable t = tiny_table();
    State a(t);
    a.randomize(5);
    const TempDir tmp;
    const std::string& dir = tmp.path;
    for (double x : {0.0, -0.0, 5e-324, 1.7976931348623157e308, 0.1, -1e-300, std::nan("")}) {
        model::RunState rs = odd_run_state();
        rs.window_loss_sum = x;  // NaN: a skipped step's loss inside the open log window
        rs.best_metric = x;
        model::save_checkpoint(dir + "/x.safetensors", a.view(), rs);
        model::RunState got;
        model::load_checkpoint(dir + "/x.safetensors", a.view(), &got);
        EXPECT_TRUE(same_bits(got.window_loss_sum, x) || (std::isnan(x) && std::isnan(got.window_loss_sum))) << x;
        EXPECT_TRUE(same_bits(got.best_metric, x) || (std::isnan(x) && std::isnan(got.best_metric))) << x;
    }
}

TEST(CheckpointFolder, NamesListingPruningAndLatest) {
    EXPECT_EQ(model::checkpoint_path("ck", 12), "ck/ckpt-00000012.safetensors");
    EXPECT_EQ(model::checkpoint_path("ck", 123456789), "ck/ckpt-123456789.safetensors");
    EXPECT_EQ(model::best_checkpoint_path("ck"), "ck/best.safetensors");
    const TempDir tmp;
    const std::string& dir = tmp.path;
    EXPECT_TRUE(model::list_checkpoints(dir + "/absent").empty());
    EXPECT_EQ(model::latest_checkpoint(dir + "/absent"), "");

    const model::ParamTable t = tiny_table();
    State a(t);
    a.randomize(6);
    model::RunState rs = odd_run_state();
    for (int64_t step : {10, 2, 123456789, 30}) {
        rs.step = step;
        rs.adam_step = step;
        rs.skipped = rs.bad_streak = 0;
        model::save_checkpoint(model::checkpoint_path(dir, step), a.view(), rs);
    }
    for (const char* other : {"ckpt-00000005.safetensors.tmp", "best.safetensors", "ckpt-abc.safetensors",
                              "ckpt-.safetensors", "notes.txt", "ckpt-00000007.safetensors.bak"})
        std::ofstream(dir + "/" + other) << "x";
    EXPECT_EQ(model::list_checkpoints(dir),
              (std::vector<std::string>{model::checkpoint_path(dir, 2), model::checkpoint_path(dir, 10),
                                        model::checkpoint_path(dir, 30), model::checkpoint_path(dir, 123456789)}));

    model::prune_checkpoints(dir, 2);
    EXPECT_EQ(model::list_checkpoints(dir),
              (std::vector<std::string>{model::checkpoint_path(dir, 30), model::checkpoint_path(dir, 123456789)}));
    for (const char* other : {"ckpt-00000005.safetensors.tmp", "best.safetensors", "notes.txt"})
        EXPECT_TRUE(std::filesystem::exists(dir + "/" + other)) << other;
    SF_EXPECT_ERROR(model::prune_checkpoints(dir, 0), "keep_last");

    // --resume auto: the newest loadable one; a damaged newer file is skipped with a warning.
    EXPECT_EQ(model::latest_checkpoint(dir), model::checkpoint_path(dir, 123456789));
    std::ofstream(model::checkpoint_path(dir, 999999999), std::ios::binary) << "garbage";
    LogLines log;
    EXPECT_EQ(model::latest_checkpoint(dir), model::checkpoint_path(dir, 123456789));
    ASSERT_EQ(log.lines.size(), 1u);
    EXPECT_EQ(log.lines[0].first, rt::LogLevel::Warn);
    EXPECT_NE(log.lines[0].second.find("ckpt-999999999"), std::string::npos) << log.lines[0].second;
    // Exported weights (no run state) are not resumable either.
    model::export_weights(model::checkpoint_path(dir, 1000000000), a.view());
    EXPECT_EQ(model::latest_checkpoint(dir), model::checkpoint_path(dir, 123456789));
}

}  // namespace

namespace {

// Offset in the file of float `index` of tensor `name` (8-byte header length, JSON header, data).
size_t float_offset(const std::string& path, const std::string& name, size_t index) {
    std::ifstream f(path, std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(&header[0], static_cast<std::streamsize>(n));
    const size_t key = header.find("\"" + name + "\"");
    const size_t offs = header.find("data_offsets", key);
    const size_t begin = std::strtoull(header.c_str() + header.find('[', offs) + 1, nullptr, 10);
    return 8 + n + begin + 4 * index;
}

void write_float_at(const std::string& path, size_t offset, float x) {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(reinterpret_cast<const char*>(&x), 4);
}

TEST(CheckpointChecksum, AFlippedWeightIsRefusedByEveryReaderAndSkippedByResumeAuto) {
    const model::ParamTable t = tiny_table();
    State a(t);
    a.randomize(8);
    const TempDir tmp;
    const std::string& dir = tmp.path;
    model::RunState rs = odd_run_state();
    rs.step = rs.adam_step = 5;
    rs.skipped = rs.bad_streak = 0;
    const std::string older = model::checkpoint_path(dir, 5), newer = model::checkpoint_path(dir, 10);
    model::save_checkpoint(older, a.view(), rs);
    rs.step = rs.adam_step = 10;
    model::save_checkpoint(newer, a.view(), rs);
    EXPECT_EQ(rt::SafeTensors::load(newer).metadata().at("slidefuse.checksum").rfind("crc32:", 0), 0u);

    // A finite, plausible-looking value (9.9e9 for a weight): only the checksum can tell.
    write_float_at(newer, float_offset(newer, "head.conv.weight", 3), 9.9e9f);
    State dst(t);
    model::RunState got;
    SF_EXPECT_ERROR(model::load_checkpoint(newer, dst.view(), &got), "checksum mismatch");
    SF_EXPECT_ERROR(model::load_checkpoint(newer, dst.view(false), nullptr), "checksum mismatch");
    {
        LogLines log;
        EXPECT_EQ(model::latest_checkpoint(dir), older);
        ASSERT_EQ(log.lines.size(), 1u);
        EXPECT_NE(log.lines[0].second.find("checksum mismatch"), std::string::npos) << log.lines[0].second;
    }
    // The run state is covered too.
    const std::string meta_flip =
        rewrite(older, dir + "/meta.safetensors", [](auto&, auto& m) { m["run.best_metric_name"] = "rmse_px"; });
    SF_EXPECT_ERROR(model::load_checkpoint(meta_flip, dst.view(), &got), "checksum mismatch");
    // Exported weights are sealed the same way.
    const std::string w = dir + "/w.safetensors";
    model::export_weights(w, a.view());
    model::load_checkpoint(w, dst.view(false), nullptr);
    write_float_at(w, float_offset(w, "head.bn.running_var", 0), 2.5f);
    SF_EXPECT_ERROR(model::load_checkpoint(w, dst.view(false), nullptr), "checksum mismatch");

    // A file from before checksums loads with a warning.
    const std::string old =
        rewrite(older, dir + "/old.safetensors", [](auto&, auto& m) { m.erase("slidefuse.checksum"); });
    LogLines log;
    model::load_checkpoint(old, dst.view(), &got);
    EXPECT_EQ(dst.master, a.master);
    ASSERT_EQ(log.lines.size(), 1u);
    EXPECT_EQ(log.lines[0].first, rt::LogLevel::Warn);
    EXPECT_NE(log.lines[0].second.find("no checksum"), std::string::npos) << log.lines[0].second;
}

}  // namespace
