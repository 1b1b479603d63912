// Runs a user can trust (docs/CHECKPOINTS.md, docs/FORMAT.md): each run keeps its own checkpoint
// folder and two runs never share one; a dataset is used only when complete (its manifest) and
// as the config asks; small synthetic datasets have a val split or a clear minimum; unwritable
// folders are found before step 1; an error after step 1 leaves a marked checkpoint of the last
// good step; stale temp files go; a refused resume names the keys; predict goes on past a bad
// image; errors lead with what went wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/generator.h"
#include "data/loader.h"
#include "data/png.h"
#include "data/shard.h"
#include "data/shard_manifest.h"
#include "model/checkpoint.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"
#include "tests/support/log_lines.h"
#include "tests/support/temp_dir.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/train.h"

namespace {

namespace fs = std::filesystem;
using V = std::vector<std::string>;

const std::string kSmoke = std::string(SF_SOURCE_DIR) + "/configs/cpu_smoke.yaml";

struct TempDir : sftest::TempDir {
    TempDir() : sftest::TempDir("sf_safety") {}
};

using sftest::LogLines;

std::string meta(const std::string& path, const std::string& key) {
    const rt::SafeTensors st = rt::SafeTensors::load(path);
    const auto& m = st.metadata();
    auto it = m.find(key);
    return it == m.end() ? "" : it->second;
}

int step_records(const std::string& metrics) {
    std::ifstream f(metrics);
    std::string l;
    int n = 0;
    while (std::getline(f, l)) n += l.find("\"grad_norm\"") != std::string::npos;
    return n;
}

V with(V a, const V& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::vector<std::string> run_dirs(const std::string& log_dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(log_dir)) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

// ---- 1: every run its own checkpoint folder; no two runs share one ----

TEST(RunFolders, TwoDefaultRunsKeepTheirOwnCheckpointsAndASharedFolderIsRefused) {
    const TempDir t;
    const V base = {"--config", kSmoke, "logging.log_dir=" + t.path + "/runs", "train.max_steps=2"};
    ASSERT_EQ(tools::cmd_train(base), 0);
    ASSERT_EQ(tools::cmd_train(base), 0);  // the same second or not: a folder of its own
    const std::vector<std::string> runs = run_dirs(t.path + "/runs");
    ASSERT_EQ(runs.size(), 2u);
    for (const std::string& r : runs) {
        EXPECT_EQ(model::list_checkpoints(r + "/checkpoints"),
                  std::vector<std::string>{model::checkpoint_path(r + "/checkpoints", 2)})
            << r;
        EXPECT_EQ(step_records(r + "/metrics.jsonl"), 2) << r;
    }
    // Pointing a second run at the first's checkpoint folder, or at its output folder, is refused.
    SF_EXPECT_ERROR(
        tools::cmd_train(with(base, {"--out", t.path + "/other", "checkpoints.save_dir=" + runs[0] + "/checkpoints"})),
        "belongs to the run in", runs[0].c_str());
    SF_EXPECT_ERROR(tools::cmd_train(with(base, {"--out", runs[1]})), "holds another run's metrics.jsonl");
    EXPECT_EQ(model::list_checkpoints(runs[0] + "/checkpoints").size(), 1u);
    // --resume auto without --out continues the newest run (here: finished, nothing to do).
    ASSERT_EQ(tools::cmd_train(with(base, {"--resume", "auto"})), 0);
    EXPECT_EQ(run_dirs(t.path + "/runs").size(), 2u);
}

// ---- 2: only complete datasets, and only the one the config asks for ----

struct ScopedEnv {
    std::string name;
    ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~ScopedEnv() { unsetenv(name.c_str()); }
};

TEST(DatasetManifest, AnInterruptedGenerationIsNeverTrainedOn) {
    const TempDir t;
    const std::string data = t.path + "/synth";
    const V run = {
        "--config",         kSmoke, "data.source=synthetic", "data.processed_dir=" + data, "data.num_samples=641",
        "train.max_steps=1"};
    {
        const ScopedEnv stop("SF_TEST_GENERATE_STOP_AFTER_SHARDS", "1");
        SF_EXPECT_ERROR(tools::cmd_train(with(run, {"--out", t.path + "/r1"})), "stopped after 1 shards");
    }
    EXPECT_FALSE(data::has_manifest(data));
    // The same command again: the partial dataset is generated again, complete.
    {
        LogLines log;
        ASSERT_EQ(tools::cmd_train(with(run, {"--out", t.path + "/r2"})), 0);
        EXPECT_TRUE(log.has(rt::LogLevel::Warn, "interrupted generation")) << "no warning";
    }
    const data::DatasetManifest m = data::read_manifest(data);
    EXPECT_EQ(m.count, 802u);  // ceil(641 / 0.8): the smallest dataset with a val split
    EXPECT_GT(m.samples("val"), 0u);
    EXPECT_EQ(m.samples("train") + m.samples("val") + m.samples("test"), 802u);
    EXPECT_EQ(m.spec.height, 64);
    EXPECT_EQ(m.spec.width, 128);
    // Another seed, sample count or size: refused naming both datasets, nothing overwritten.
    SF_EXPECT_ERROR(tools::cmd_train(with(run, {"--out", t.path + "/r3", "train.seed=7"})), "holds another dataset",
                    "seed 42", "seed 7");
    SF_EXPECT_ERROR(tools::cmd_train(with(run, {"--out", t.path + "/r4", "data.num_samples=1600"})), "802 samples",
                    "2000 samples");
    SF_EXPECT_ERROR(tools::cmd_train(with(run, {"--out", t.path + "/r5", "model.input_height=96"})), "64x128",
                    "96x128");
    // data.source=shards: a dataset without its manifest, or with a changed shard, is refused.
    const V shards = {"--config", kSmoke, "data.source=shards", "data.processed_dir=" + data, "train.max_steps=1"};
    const std::string val = data::list_shards(data + "/val").front();
    {
        std::fstream f(val, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(-2, std::ios::end);  // inside the record-CRC section
        f.put('\x5a');
    }
    SF_EXPECT_ERROR(tools::cmd_train(with(shards, {"--out", t.path + "/r6"})), val.c_str(), "differs from");
    fs::remove(data + "/manifest.json");
    SF_EXPECT_ERROR(tools::cmd_train(with(shards, {"--out", t.path + "/r7"})), "manifest.json", "incomplete");
}

TEST(DatasetManifest, GenerateTakesHeightAndWidthAndRecordsThem) {
    const TempDir t;
    const std::string d = t.path + "/g";
    ASSERT_EQ(tools::cmd_generate({"--out", d, "--count", "120", "--height", "64", "--width", "160", "--threads", "1",
                                   "--shard-size", "50"}),
              0);
    const data::DatasetManifest m = data::read_manifest(d);
    EXPECT_EQ(m.spec.height, 64);
    EXPECT_EQ(m.spec.width, 160);
    EXPECT_EQ(m.source, "synthetic");
    for (const std::string& f : data::list_shards(d + "/train")) EXPECT_EQ(data::ShardReader(f).spec().width, 160);
    for (const char* split : {"train", "val", "test"}) data::verify_split(d, m, split);
    SF_EXPECT_ERROR(tools::cmd_generate({"--out", d + "2", "--count", "5", "--height", "abc"}), "--height");
    // Killed part-way (the hook stops it after one shard): no manifest, so the folder is incomplete.
    const ScopedEnv stop("SF_TEST_GENERATE_STOP_AFTER_SHARDS", "1");
    SF_EXPECT_ERROR(tools::cmd_generate({"--out", d + "3", "--count", "120", "--threads", "1", "--shard-size", "50",
                                         "--height", "64", "--width", "128"}),
                    "stopped after 1 shards");
    EXPECT_FALSE(data::has_manifest(d + "3"));
    SF_EXPECT_ERROR(data::read_manifest(d + "3"), "no dataset manifest");
}

// ---- 3: a synthetic dataset that train accepts has train and val samples ----

TEST(DatasetManifest, SmallSyntheticDatasetsNameTheirMinimum) {
    const TempDir t;
    SF_EXPECT_ERROR(tools::cmd_train({"--config", kSmoke, "--out", t.path + "/r", "data.source=synthetic",
                                      "data.processed_dir=" + t.path + "/d", "data.num_samples=64"}),
                    "data.num_samples=64 is too small", "the smallest is data.num_samples=");
    EXPECT_FALSE(fs::exists(t.path + "/d/train")) << "generated before refusing";
}

// ---- 5: unwritable folders before step 1; an error after step 1 keeps the last good step ----

TEST(RunFailures, AnUnwritableCheckpointFolderIsFoundBeforeStep1) {
    const TempDir t;
    std::string ro = t.path + "/ro";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec, fs::perm_options::replace);
    if (::geteuid() == 0) ro = "/proc";  // root writes through permissions; /proc takes no files
    SF_EXPECT_ERROR(tools::cmd_train({"--config", kSmoke, "--out", t.path + "/run", "checkpoints.save_dir=" + ro}),
                    "checkpoint folder", "not writable");
    EXPECT_EQ(step_records(t.path + "/run/metrics.jsonl"), 0);
}

// Shards written by hand: a train shard of 8 samples and a val shard of 2, with their manifest.
void write_tiny_dataset(const std::string& root) {
    data::GenConfig g;
    g.height = 64;
    g.width = 128;
    const data::ShardSpec spec{64, 128, 1, false};
    uint64_t index = 0;
    for (auto [split, n] : {std::pair<const char*, int>{"train", 8}, {"val", 2}}) {
        fs::create_directories(root + "/" + split);
        data::ShardWriter w(root + "/" + split + "/" + split + "_000000.sfshard", spec);
        for (int i = 0; i < n; ++i) {
            const data::GenSample s = data::generate_sample(g, index++);
            w.add(s.pixels.data(), s.label);
        }
        w.finish();
    }
    data::write_manifest(root, data::scan_dataset(root, "synthetic", 0, 10));
}

TEST(RunFailures, ACorruptRecordMidRunSavesTheLastGoodStepMarked) {
    const TempDir t;
    const std::string root = t.path + "/data";
    write_tiny_dataset(root);
    const std::string shard = root + "/train/train_000000.sfshard";
    // The records of the first two batches, as the trainer's loader orders them (seed 42, batch 2):
    // the loader reads that far ahead before step 1, and reports a failed read at the next next().
    data::LoaderConfig lc;
    lc.shards = {shard};
    lc.batch_size = 2;
    lc.workers = 1;
    lc.prefetch = 2;
    lc.seed = 42;
    std::vector<uint64_t> early;
    {
        data::Loader loader(lc);
        for (int b = 0; b < 2; ++b) {
            const data::HostBatch& batch = loader.next();
            early.insert(early.end(), batch.sample_ids, batch.sample_ids + batch.n);
            loader.release();
        }
    }
    uint64_t victim = 0;
    while (std::find(early.begin(), early.end(), victim) != early.end()) ++victim;
    const std::streamoff at = static_cast<std::streamoff>(data::kShardPixelsOffset + victim * 64 * 128 + 100);
    char original[2];
    {
        std::fstream f(shard, std::ios::binary | std::ios::in | std::ios::out);
        f.seekg(at);
        f.read(original, 2);
        f.seekp(at);
        f.put(static_cast<char>(original[0] ^ 0x5a));
        f.put(static_cast<char>(original[1] ^ 0x3c));
    }
    const std::string ck = t.path + "/ck";
    LogLines log;
    const V args = {"--config",
                    kSmoke,
                    "--out",
                    t.path + "/run",
                    "data.source=shards",
                    "data.processed_dir=" + root,
                    "checkpoints.save_dir=" + ck,
                    "train.num_workers=1",
                    "train.max_steps=4"};
    SF_EXPECT_ERROR(tools::cmd_train(args), "train_000000.sfshard");
    const std::string last = model::latest_checkpoint(ck);
    ASSERT_NE(last, "") << "no checkpoint of the last good step";
    const int64_t step = std::stoll(meta(last, "run.step"));
    EXPECT_GE(step, 1);
    EXPECT_LT(step, 4);
    EXPECT_EQ(step_records(t.path + "/run/metrics.jsonl"), step);
    EXPECT_NE(meta(last, "run.stopped_by_error").find("train_000000.sfshard"), std::string::npos);
    EXPECT_TRUE(log.has(rt::LogLevel::Info, "checkpoint of the last good step"));
    // The cause fixed, --resume auto takes the marked checkpoint and repeats the failed step.
    {
        std::fstream f(shard, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(at);
        f.write(original, 2);
    }
    ASSERT_EQ(tools::cmd_train(with(args, {"--resume", "auto"})), 0);
    EXPECT_TRUE(log.has(rt::LogLevel::Warn, "was saved after an error ended its run"));
    EXPECT_EQ(step_records(t.path + "/run/metrics.jsonl"), 4);
    EXPECT_EQ(meta(model::checkpoint_path(ck, 4), "run.stopped_by_error"), "");
    // ... and ends where a run that never failed ends, bit for bit.
    ASSERT_EQ(tools::cmd_train(with(args, {"--out", t.path + "/straight", "checkpoints.save_dir=" + t.path + "/ck2"})),
              0);
    const rt::SafeTensors a = rt::SafeTensors::load(model::checkpoint_path(ck, 4));
    const rt::SafeTensors b = rt::SafeTensors::load(model::checkpoint_path(t.path + "/ck2", 4));
    ASSERT_EQ(a.names(), b.names());
    for (const std::string& n : a.names()) ASSERT_EQ(a.get(n).bytes, b.get(n).bytes) << n;
}

// ---- 6: the smaller ones ----

TEST(RunDetails, StaleTempFilesGoAndAFolderIsNoConfig) {
    const TempDir t;
    const std::string ck = t.path + "/run/checkpoints";
    fs::create_directories(ck);
    std::ofstream(ck + "/ckpt-00000003.safetensors.tmp") << "partial";
    std::ofstream(t.path + "/run/config.resolved.yaml.tmp.1234") << "partial";
    std::ofstream(t.path + "/run/notes.tmp.txt") << "kept";
    {
        LogLines log;  // each removal is logged
        ASSERT_EQ(tools::cmd_train({"--config", kSmoke, "--out", t.path + "/run", "train.max_steps=1"}), 0);
    }
    EXPECT_FALSE(fs::exists(ck + "/ckpt-00000003.safetensors.tmp"));
    EXPECT_FALSE(fs::exists(t.path + "/run/config.resolved.yaml.tmp.1234"));
    EXPECT_TRUE(fs::exists(t.path + "/run/notes.tmp.txt"));
    EXPECT_EQ(model::list_checkpoints(ck), std::vector<std::string>{model::checkpoint_path(ck, 1)});
    SF_EXPECT_ERROR(tools::cmd_train({"--config", t.path, "--out", t.path + "/x"}), "is a folder");
}

TEST(RunDetails, ARefusedResumeNamesTheKeysThatDiffer) {
    const TempDir t;
    const V run = {"--config", kSmoke, "--out", t.path + "/run", "train.max_steps=2"};
    ASSERT_EQ(tools::cmd_train(run), 0);
    SF_EXPECT_ERROR(tools::cmd_train(with(run, {"--resume", "auto", "optimizer.lr=0.002", "sched.warmup_steps=3"})),
                    "optimizer.lr: 0.001 -> 0.002", "sched.warmup_steps: 2 -> 3");
}

TEST(RunDetails, PredictGoesOnPastABadImageAndFailsAtTheEnd) {
    const TempDir t;
    ASSERT_EQ(tools::cmd_train({"--config", kSmoke, "--out", t.path + "/run", "train.max_steps=1"}), 0);
    const std::string ckpt = model::checkpoint_path(t.path + "/run/checkpoints", 1);
    std::vector<uint8_t> px(40 * 80 * 3, 200);
    data::write_png(t.path + "/good.png", px.data(), 80, 40, 3);
    std::ofstream(t.path + "/bad.png") << "not a png";
    const std::string json = t.path + "/p.json";
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt, "--json", json, t.path + "/bad.png", t.path + "/good.png",
                                        t.path + "/missing.png"}),
                    "2 of 3 image(s) could not be read", "bad.png");
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
    ASSERT_EQ(j["predictions"].size(), 1u);
    EXPECT_EQ(j["predictions"][0]["image"], t.path + "/good.png");
    ASSERT_EQ(j["errors"].size(), 2u);
    EXPECT_EQ(j["errors"][1]["image"], t.path + "/missing.png");
}

std::string slidefuse_exe() {
#ifdef SF_SLIDEFUSE_EXE
    if (::access(SF_SLIDEFUSE_EXE, X_OK) == 0) return SF_SLIDEFUSE_EXE;
#endif
    if (const char* e = std::getenv("SF_SLIDEFUSE")) return e;
    return "";
}

TEST(RunDetails, ErrorMessagesLeadWithWhatWentWrong) {
    const std::string exe = slidefuse_exe();
    ASSERT_NE(exe, "") << "no slidefuse executable (build the slidefuse target or set SF_SLIDEFUSE)";
    const TempDir t;
    const std::string cmd = exe + " train --config " + t.path + "/absent.yaml 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    EXPECT_NE(::pclose(p), 0);
    EXPECT_EQ(out.rfind("slidefuse: error: config file '" + t.path + "/absent.yaml'", 0), 0u) << out;
    const std::string cmd2 = exe + " generate --out " + t.path + "/g --count 0 2>&1";
    p = ::popen(cmd2.c_str(), "r");
    ASSERT_NE(p, nullptr);
    out.clear();
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
    EXPECT_EQ(out.rfind("slidefuse: error: --count: expected an integer", 0), 0u) << out;
    EXPECT_EQ(out.find(".cpp:"), std::string::npos) << out;
    // The source location goes to the debug log.
    const std::string cmd3 = "SF_LOG_LEVEL=debug " + cmd2;
    p = ::popen(cmd3.c_str(), "r");
    ASSERT_NE(p, nullptr);
    out.clear();
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
    EXPECT_NE(out.find("[slidefuse debug] error raised at "), std::string::npos) << out;
    EXPECT_NE(out.find("cmd_generate.cpp:"), std::string::npos) << out;
}

}  // namespace
