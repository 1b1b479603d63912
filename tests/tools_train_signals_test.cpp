// `slidefuse train` on the CPU backend, end to end, part 2: SIGTERM/SIGINT (the flag, then a child
// `slidefuse train` process finishing its step with a checkpoint that resumes bitwise, a second signal
// exiting at once) and `slidefuse export` (and, when /usr/bin/python3 has torch, the PyTorch reference
// loading it). Part 1: tests/tools_train_resume_test.cpp; helpers: tests/support/train_runs.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/generator.h"
#include "model/checkpoint.h"
#include "model/net.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"
#include "tests/support/temp_dir.h"
#include "tests/support/train_runs.h"
#include "tools/signals.h"
#include "tools/train.h"

namespace tools {
int cmd_export(const std::vector<std::string>& args);  // tools/cmd_export.cpp
}

namespace {

using nlohmann::json;
using namespace sftest::train;

// ---- signals ----

TEST(TrainSignals, FirstSignalOnlySetsTheFlagAndHandlersAreRestored) {
    struct sigaction before;
    ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
    {
        tools::StopSignals s;
        EXPECT_FALSE(s.requested());
        SF_EXPECT_ERROR(tools::StopSignals second, "already installed");
        ASSERT_EQ(raise(SIGINT), 0);  // the process survives the first signal
        EXPECT_TRUE(s.requested());
        EXPECT_EQ(s.signal_number(), SIGINT);
        EXPECT_STREQ(tools::signal_name(s.signal_number()), "SIGINT");
    }
    struct sigaction after;
    ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
    EXPECT_EQ(after.sa_handler, before.sa_handler);
}

// The slidefuse executable: SF_SLIDEFUSE_EXE (set by the build), $SF_SLIDEFUSE, or ../slidefuse
// next to this test executable (the CMake build layout: <build>/tests/<test exe>, <build>/slidefuse).
std::string slidefuse_exe() {
    std::vector<std::string> candidates;
#ifdef SF_SLIDEFUSE_EXE
    candidates.push_back(SF_SLIDEFUSE_EXE);
#endif
    if (const char* e = std::getenv("SF_SLIDEFUSE")) candidates.push_back(e);
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back((self.parent_path().parent_path() / "slidefuse").string());
    for (const auto& c : candidates)
        if (::access(c.c_str(), X_OK) == 0) return c;
    return "";
}

// Starts `slidefuse train args...` with stdout and stderr into log; returns the pid.
pid_t spawn_train(const std::string& exe, const std::vector<std::string>& args, const std::string& log) {
    std::vector<std::string> all = {exe, "train"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : all) argv.push_back(&s[0]);
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        ::execv(argv[0], argv.data());
        _exit(127);
    }
    return pid;
}

// Waits until metrics.jsonl holds at least n step records (false after 120 s or if the child ended).
bool wait_for_steps(const std::string& metrics, size_t n, pid_t pid) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        std::ifstream f(metrics);
        std::string l;
        size_t steps = 0;
        while (std::getline(f, l)) steps += l.find("\"loss\"") != std::string::npos;
        if (steps >= n) return true;
        if (waitpid(pid, nullptr, WNOHANG) != 0) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

int wait_exit_code(pid_t pid) {
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "status " << status;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(TrainSignals, SigtermFinishesTheStepWritesACheckpointAndTheResumeIsBitwise) {
    const std::string exe = slidefuse_exe();
    ASSERT_NE(exe, "") << "no slidefuse executable (build the slidefuse target or set SF_SLIDEFUSE)";
    const TempDir straight_dir, stopped_dir;
    const std::string& straight = straight_dir.path;
    const std::string& stopped = stopped_dir.path;
    const std::vector<std::string> extra = {"train.max_steps=8"};
    ASSERT_EQ(tools::cmd_train(smoke_args(straight, extra)), 0);

    const pid_t pid = spawn_train(exe, smoke_args(stopped, extra), stopped + "/log.txt");
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_for_steps(stopped + "/run/metrics.jsonl", 2, pid)) << read_file(stopped + "/log.txt");
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    ASSERT_EQ(wait_exit_code(pid), 0) << read_file(stopped + "/log.txt");
    const std::string log = read_file(stopped + "/log.txt");
    EXPECT_NE(log.find("stopped by SIGTERM after step"), std::string::npos) << log;
    const std::string ckpt = model::latest_checkpoint(stopped + "/ck");
    ASSERT_NE(ckpt, "") << log;
    const int64_t at = std::stoll(meta(ckpt, "run.step"));
    EXPECT_EQ(read_metrics(stopped + "/run/metrics.jsonl").steps.size(), static_cast<size_t>(at));
    EXPECT_LT(at, 8) << "the child finished before the signal arrived";

    ASSERT_EQ(tools::cmd_train(smoke_args(stopped, with(extra, {"--resume", "auto"}))), 0);
    const Metrics ms = read_metrics(straight + "/run/metrics.jsonl"), mr = read_metrics(stopped + "/run/metrics.jsonl");
    ASSERT_EQ(mr.steps.size(), 8u);
    for (int64_t s = 1; s <= 8; ++s) expect_same_step(ms.steps.at(s), mr.steps.at(s));
    expect_same_checkpoint(model::checkpoint_path(straight + "/ck", 8), model::checkpoint_path(stopped + "/ck", 8),
                           {"run.out_dir", "slidefuse.checksum"});
}

TEST(TrainSignals, SecondSignalExitsAtOnceWith130) {
    const std::string exe = slidefuse_exe();
    ASSERT_NE(exe, "") << "no slidefuse executable (build the slidefuse target or set SF_SLIDEFUSE)";
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    const pid_t pid = spawn_train(exe, smoke_args(d, {"train.max_steps=200"}), d + "/log.txt");
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_for_steps(d + "/run/metrics.jsonl", 1, pid)) << read_file(d + "/log.txt");
    // Two different signals are both delivered (two SIGTERMs could merge into one pending signal).
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    ASSERT_EQ(kill(pid, SIGINT), 0);
    EXPECT_EQ(wait_exit_code(pid), 130) << read_file(d + "/log.txt");
}

// ---- export ----

std::string train_two_steps_and_export(const std::string& d) {
    EXPECT_EQ(tools::cmd_train(smoke_args(d, {"train.max_steps=2"})), 0);
    const std::string out = d + "/weights.safetensors";
    EXPECT_EQ(tools::cmd_export({"--checkpoint", model::checkpoint_path(d + "/ck", 2), "--out", out}), 0);
    return out;
}

TEST(TrainExport, WritesTheStateDictOnly) {
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    const std::string w = train_two_steps_and_export(d);
    const rt::SafeTensors st = rt::SafeTensors::load(w);
    EXPECT_EQ(st.names().size(), 852u);  // MODEL_SPEC §8: 435 parameters + 417 buffers
    for (const auto& n : st.names()) EXPECT_NE(n.rfind("optimizer.", 0), 0u) << n;
    EXPECT_EQ(st.metadata().at("slidefuse.kind"), "weights");
    EXPECT_EQ(st.get("stem.conv1.bn.num_batches_tracked").to_double().at(0), 2.0);  // two train forwards
    // The weights equal the checkpoint's.
    const rt::SafeTensors ck = rt::SafeTensors::load(model::checkpoint_path(d + "/ck", 2));
    for (const auto& n : st.names()) ASSERT_EQ(st.get(n).bytes, ck.get(n).bytes) << n;
    SF_EXPECT_ERROR(tools::cmd_export({"--checkpoint", w}), "--out");
    SF_EXPECT_ERROR(tools::cmd_export({"--checkpoint", d + "/nope", "--out", d + "/x"}), "nope",
                    "no such checkpoint file");
    SF_EXPECT_ERROR(tools::cmd_export({"--bogus"}), "--bogus");
}

bool python_has_torch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

// Writes the golden input and slidefuse's eval-mode logits with the exported weights (NCHW).
void write_io(const std::string& weights, const std::string& io, float perturb) {
    const rt::SafeTensors g = rt::SafeTensors::load(std::string(SF_TEST_DATA_DIR) + "/golden_sider.safetensors");
    const rt::TensorData& in = g.get("input");  // (2, 2, 64, 128) F32
    ASSERT_EQ(in.shape, (std::vector<int64_t>{2, 2, 64, 128}));
    const int n = 2, c = 2, h = 64, w = 128;
    model::SiderNet net(model::NetShape{n, c, h, w}, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    model::load_checkpoint(weights, {&net.table(), p.master(), nullptr, nullptr, p.buffers(), p.counters()}, nullptr);
    std::vector<float> x(in.numel());
    std::memcpy(x.data(), in.bytes.data(), in.bytes.size());
    for (int i = 0; i < n; ++i)
        for (int ch = 0; ch < c; ++ch)
            for (int y = 0; y < h; ++y)
                for (int xx = 0; xx < w; ++xx)
                    net.input()[((static_cast<size_t>(i) * h + y) * w + xx) * c + ch] =
                        x[((static_cast<size_t>(i) * c + ch) * h + y) * w + xx];
    net.forward(rt::Exec::cpu(), false);
    const model::HeadLogits<float> l = net.logits();
    rt::SafeTensors out;
    out.add("input", rt::DType::F32, in.shape, in.bytes.data());
    const std::pair<const char*, std::pair<const float*, int>> heads[] = {{"heatmap_gap", {l.gap, 1}},
                                                                          {"heatmap_piece", {l.slider, 1}},
                                                                          {"offset", {l.offset, 4}},
                                                                          {"angle", {l.angle, 2}}};
    for (const auto& hd : heads) {
        const int k = hd.second.second;
        std::vector<float> nchw(static_cast<size_t>(l.n) * k * l.h * l.w);
        for (int i = 0; i < l.n; ++i)
            for (int ch = 0; ch < k; ++ch)
                for (int y = 0; y < l.h; ++y)
                    for (int xx = 0; xx < l.w; ++xx)
                        nchw[((static_cast<size_t>(i) * k + ch) * l.h + y) * l.w + xx] =
                            hd.second.first[((static_cast<size_t>(i) * l.h + y) * l.w + xx) * k + ch];
        nchw[7] += perturb;
        out.add(std::string("logits.") + hd.first, rt::DType::F32, {l.n, k, l.h, l.w}, nchw.data());
    }
    out.save(io);
}

TEST(TrainExport, LoadsStrictlyIntoThePyTorchReferenceAndMatchesItsLogits) {
    if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch: tools/reference/check_export.py not run";
    const TempDir d_dir;
    const std::string& d = d_dir.path;
    const std::string w = train_two_steps_and_export(d);
    const std::string script = std::string(SF_SOURCE_DIR) + "/tools/reference/check_export.py";
    write_io(w, d + "/io.safetensors", 0.f);
    const std::string cmd = "/usr/bin/python3 " + script + " --weights " + w + " --io " + d + "/io.safetensors";
    EXPECT_EQ(std::system((cmd + " > " + d + "/py.txt 2>&1").c_str()), 0) << read_file(d + "/py.txt");
    // The check can fail: logits off by 1.0 in one element of each head.
    write_io(w, d + "/io_bad.safetensors", 1.f);
    const std::string bad = "/usr/bin/python3 " + script + " --weights " + w + " --io " + d + "/io_bad.safetensors";
    EXPECT_NE(std::system((bad + " > " + d + "/py_bad.txt 2>&1").c_str()), 0) << read_file(d + "/py_bad.txt");
}

}  // namespace
