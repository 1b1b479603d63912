// LibTorch C++ baseline of the slidefuse training step (baseline (d) of the benchmark): the
// Sider_CAPTCHA_Solver 1.1 model written with torch::nn modules (module names = the PyTorch
// state_dict keys of tools/reference/sider_ref.py, checked against tests/data/sider_state_dict.tsv
// by tests/baselines/test_baselines.py), the counter-based initialisation of docs/MODEL.md, the
// loss of tools/baselines/loss_vec.py (same tensor ops, `sider` and `corrected`), AdamW + global
// grad-norm clipping, timed with CUDA events like `slidefuse bench step`, JSON "slidefuse.bench/1".
//
// Modes: bf16_cl (default) = autocast to bf16 + channels_last + cudnn.benchmark, the original's
// setup; fp32 = float32, NCHW. Autocast in C++: at::autocast::set_autocast_enabled(kCUDA, true)
// + set_autocast_dtype(kCUDA, kBFloat16) (set_enabled / set_autocast_gpu_dtype before LibTorch
// 2.4) around the forward only, then at::autocast::clear_cache() — exactly what Python's
// torch.autocast context does on entry and exit: the same dispatcher-level casts (convs in bf16,
// fp32 master weights, cached bf16 weight copies dropped after every forward), no GradScaler.
// Differences from the Python eager baseline: torch::optim::AdamW updates parameter by parameter
// (the Python runs use torch's fused AdamW on CUDA; the C++ API has neither it nor foreach); the head activations (sigmoid,
// tanh, normalise) that sider_ref's forward also returns are not computed (the loss applies its own).
//
// usage: libtorch_baseline [--mode bf16_cl|fp32] [--device cuda|cpu] [--batch-sizes 64,128,256]
//          [--height 256] [--width 512] [--steps 50] [--warmup 10] [--data DIR | --synthetic]
//          [--pool 4] [--loss-variant sider|corrected] [--seed 42] [--json OUT] [--commit SHA]
//        libtorch_baseline --check-dir DIR [...]   self-check for the tests (see check_dir())
// Files: lt_model (modules, init), lt_data (shards, batches, preprocessing), lt_loss, lt_train (the
// step), lt_check (--check-dir), this one (timing, JSON, command line).
#include "lt_train.h"

#ifdef SF_BASELINE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif


#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ltb {

std::string jnum(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return buf;
}

namespace {

// ------------------------------------------------------------------------------------------------
// Timing and JSON
// ------------------------------------------------------------------------------------------------
double percentile_linear(std::vector<double> v, double q) {  // bench_schema.percentile
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

std::string jstr(const std::string& s) {
    std::string o = "\"";
    for (char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            o += '\\';
            o += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            o += buf;
        } else {
            o += ch;
        }
    }
    return o + "\"";
}

struct Run {
    int64_t batch = 0;
    std::vector<double> timings;
    int64_t peak = -1;  // -1: unknown
    std::string status = "ok", error;
};

std::string run_json(const Settings& s, const Run& r) {
    std::ostringstream o;
    o << "{\"batch\": " << r.batch << ", \"height\": " << s.height << ", \"width\": " << s.width
      << ", \"channels\": 2, \"mode\": " << jstr(s.mode) << ", \"warmup_steps\": " << s.warmup
      << ", \"timed_steps\": " << r.timings.size() << ", \"timings_ms\": [";
    for (size_t i = 0; i < r.timings.size(); ++i) o << (i ? ", " : "") << jnum(r.timings[i]);
    o << "], ";
    if (r.timings.empty()) {
        o << "\"median_ms\": null, \"p10_ms\": null, \"p90_ms\": null, \"samples_per_s\": null, ";
    } else {
        const double med = percentile_linear(r.timings, 0.5);
        o << "\"median_ms\": " << jnum(med) << ", \"p10_ms\": " << jnum(percentile_linear(r.timings, 0.1))
          << ", \"p90_ms\": " << jnum(percentile_linear(r.timings, 0.9))
          << ", \"samples_per_s\": " << jnum(static_cast<double>(r.batch) * 1000.0 / med) << ", ";
    }
    o << "\"peak_mem_bytes\": " << (r.peak < 0 ? std::string("null") : std::to_string(r.peak))
      << ", \"status\": " << jstr(r.status);
    if (!r.error.empty()) o << ", \"error\": " << jstr(r.error);
    // The C++ API has no fused or multi-tensor AdamW: say which update ran (compare.py lists it).
    o << ", \"extra\": {\"optimizer\": \"AdamW per-parameter (torch::optim)\"}";
    return o.str() + "}";
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string shell_line(const char* cmd) {
    std::string out;
    if (FILE* p = popen(cmd, "r")) {
        char buf[256];
        if (std::fgets(buf, sizeof(buf), p)) out = buf;
        const int rc = pclose(p);
        if (rc != 0) out.clear();
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
    return out;
}

std::string device_json(const torch::Device& dev) {
    std::ostringstream o;
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda()) {
        auto opt = [](const std::string& s) { return s.empty() ? std::string("null") : jstr(s); };
        const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
        int rt = 0;
        cudaRuntimeGetVersion(&rt);
        const std::string cuda = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
        const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
        o << "{\"name\": " << jstr(p->name) << ", \"driver\": "
          << opt(shell_line("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null"))
          << ", \"cuda\": " << jstr(cuda) << ", \"cudnn\": " << jstr(std::to_string(cudnn))
          << ", \"torch\": " << jstr(TORCH_VERSION) << "}";
        return o.str();
    }
#endif
    (void)dev;
    std::string cpu = shell_line("grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'");
    o << "{\"name\": " << jstr("CPU: " + (cpu.empty() ? std::string("unknown") : cpu))
      << ", \"driver\": null, \"cuda\": null, \"cudnn\": null, \"torch\": " << jstr(TORCH_VERSION) << "}";
    return o.str();
}

void sync(const torch::Device& dev) {
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index() < 0 ? -1 : dev.index());
#else
    (void)dev;
#endif
}

HostData load_data(const Settings& s, int64_t n) {
    HostData d = s.data.empty() ? synthetic(n, s.height, s.width, 1, s.seed) : read_shards(s.data, n);
    if (d.h != s.height || d.w != s.width)
        fail(s.data + ": shards are " + std::to_string(d.h) + "x" + std::to_string(d.w) + ", the benchmark input is " +
             std::to_string(s.height) + "x" + std::to_string(s.width) + " (--height/--width)");
    if (d.c != 1) fail(s.data + ": the baseline trains the 2-channel (gray + mask) model; shards hold RGB");
    return d;
}

Run bench_one(const Settings& s, int64_t batch, const torch::Device& dev) {
    Run r;
    r.batch = batch;
    try {
#ifdef SF_BASELINE_CUDA
        if (dev.is_cuda()) {
            at::globalContext().setBenchmarkCuDNN(s.amp());  // bf16_cl: cudnn.benchmark on
            c10::cuda::CUDACachingAllocator::emptyCache();
        }
#endif
        const HostData d = load_data(s, batch * s.pool);
        std::vector<Batch> pool;
        for (int k = 0; k < s.pool; ++k) pool.push_back(device_batch(d, k * batch, batch, dev));
        SiderModel m(2);
        init_weights(m, s.seed);
        m->to(dev);
        Trainer tr(m, s.amp(), s.channels_last(), s.variant_sider, dev.type());
        for (int i = 0; i < s.warmup; ++i) tr.step(pool[static_cast<size_t>(i % s.pool)]);
        sync(dev);
#ifdef SF_BASELINE_CUDA
        // Peak over the timed steps (as torch_baseline.py): not the warm-up's autotuning scratch.
        if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
        LossOut last;
#ifdef SF_BASELINE_CUDA
        if (dev.is_cuda()) {
            std::vector<at::cuda::CUDAEvent> ev;
            for (int i = 0; i < 2 * s.steps; ++i) ev.emplace_back(cudaEventDefault);
            for (int i = 0; i < s.steps; ++i) {
                ev[static_cast<size_t>(2 * i)].record();
                last = tr.step(pool[static_cast<size_t>((s.warmup + i) % s.pool)]);
                ev[static_cast<size_t>(2 * i + 1)].record();
            }
            sync(dev);
            for (int i = 0; i < s.steps; ++i)
                r.timings.push_back(ev[static_cast<size_t>(2 * i)].elapsed_time(ev[static_cast<size_t>(2 * i + 1)]));
            r.peak = static_cast<int64_t>(
                c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].peak);
        } else
#endif
        {
            for (int i = 0; i < s.steps; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                last = tr.step(pool[static_cast<size_t>((s.warmup + i) % s.pool)]);
                r.timings.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
        }
        const double loss = last.total.item<double>();
        if (!std::isfinite(loss)) {
            r.status = "error";
            r.error = "non-finite loss after the timed steps";
        }
    } catch (const std::exception& e) {
        std::string msg = e.what();
        const size_t nl = msg.find('\n');
        if (nl != std::string::npos) msg = msg.substr(0, nl);
        r.status = msg.find("out of memory") != std::string::npos ? "oom" : "error";
        r.error = msg;
        r.timings.clear();
        r.peak = -1;
    }
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    return r;
}

// ------------------------------------------------------------------------------------------------
// Command line
// ------------------------------------------------------------------------------------------------
const char* kUsage =
    "usage: libtorch_baseline [--mode bf16_cl|fp32] [--device cuda|cpu] [--batch-sizes 64,128,256]\n"
    "         [--height 256] [--width 512] [--steps 50] [--warmup 10] [--data DIR | --synthetic] [--pool 4]\n"
    "         [--loss-variant sider|corrected] [--seed 42] [--json OUT] [--commit SHA]\n"
    "       libtorch_baseline --check-dir DIR --batch-sizes N --height H --width W [--seed S] [--loss-variant V]\n";

int64_t to_int(const std::string& opt, const std::string& v, int64_t lo) {
    size_t used = 0;
    long long x = 0;
    try {
        x = std::stoll(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || x < lo) fail(opt + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
    return x;
}

Settings parse(int argc, char** argv) {
    Settings s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        }
        if (a == "--synthetic") {
            s.data.clear();
            continue;
        }
        if (i + 1 >= argc) fail(a + " needs a value\n" + kUsage);
        const std::string v = argv[++i];
        if (a == "--mode") {
            if (v != "bf16_cl" && v != "fp32") fail("--mode: bf16_cl or fp32, got '" + v + "'");
            s.mode = v;
        } else if (a == "--device") {
            s.device = v;
        } else if (a == "--batch-sizes" || a == "--batch") {
            s.batch_sizes.clear();
            std::stringstream ss(v);
            for (std::string t; std::getline(ss, t, ',');)
                if (!t.empty()) s.batch_sizes.push_back(to_int(a, t, 1));
            if (s.batch_sizes.empty()) fail(a + ": no batch size given");
        } else if (a == "--height") {
            s.height = to_int(a, v, 32);
        } else if (a == "--width") {
            s.width = to_int(a, v, 32);
        } else if (a == "--steps") {
            s.steps = static_cast<int>(to_int(a, v, 1));
        } else if (a == "--warmup") {
            s.warmup = static_cast<int>(to_int(a, v, 0));
        } else if (a == "--pool") {
            s.pool = static_cast<int>(to_int(a, v, 1));
        } else if (a == "--data") {
            s.data = v;
        } else if (a == "--loss-variant") {
            if (v != "sider" && v != "corrected") fail("--loss-variant: sider or corrected, got '" + v + "'");
            s.variant_sider = v == "sider";
        } else if (a == "--seed") {
            s.seed = static_cast<uint64_t>(to_int(a, v, 0));
        } else if (a == "--json") {
            s.json = v;
        } else if (a == "--commit") {
            s.commit = v;
        } else if (a == "--check-dir") {
            s.check_dir = v;
        } else {
            fail("unknown option '" + a + "'\n" + kUsage);
        }
    }
    if (s.height % 32 || s.width % 32) fail("--height and --width must be multiples of 32");
    return s;
}

int run(int argc, char** argv) {
    const Settings s = parse(argc, argv);
    if (!s.check_dir.empty()) return check_dir(s);
    std::string devname = s.device;
    if (devname.empty()) devname = torch::cuda::is_available() ? "cuda" : "cpu";
    const torch::Device dev(devname);
#ifndef SF_BASELINE_CUDA
    if (dev.is_cuda()) fail("this build of libtorch_baseline has no CUDA support (LibTorch without CUDA found at configure time)");
#endif
    if (dev.is_cuda() && !torch::cuda::is_available()) fail("--device " + devname + ": no CUDA device available");
    if (dev.is_cuda() && s.steps < 50)
        std::fprintf(stderr, "warning: %d timed steps; the benchmark rule is a median of >= 50\n", s.steps);
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda() && dev.index() >= 0) c10::cuda::set_device(dev.index());
#endif
    const std::string tool = "libtorch-" + s.mode;
    std::vector<Run> runs;
    bool failed = false;
    for (int64_t b : s.batch_sizes) {
        Run r = bench_one(s, b, dev);
        if (r.status == "ok") {
            std::printf("%s batch %lld: %.3f ms/step median (p10 %.3f, p90 %.3f), %.1f samples/s", tool.c_str(),
                        static_cast<long long>(b), percentile_linear(r.timings, 0.5), percentile_linear(r.timings, 0.1),
                        percentile_linear(r.timings, 0.9), static_cast<double>(b) * 1000.0 / percentile_linear(r.timings, 0.5));
            if (r.peak >= 0) std::printf(", peak %.2f GiB", static_cast<double>(r.peak) / (1 << 30));
            std::printf("\n");
        } else {
            std::printf("%s batch %lld: %s (%s)\n", tool.c_str(), static_cast<long long>(b), r.status.c_str(),
                        r.error.c_str());
            failed = failed || r.status == "error";
        }
        std::fflush(stdout);
        runs.push_back(r);
    }
    std::ostringstream o;
    o << "{\"schema\": \"slidefuse.bench/1\", \"tool\": " << jstr(tool) << ", \"commit\": " << jstr(s.commit)
      << ", \"date\": " << jstr(utc_now()) << ", \"device\": " << device_json(dev) << ", \"runs\": [";
    for (size_t i = 0; i < runs.size(); ++i) o << (i ? ",\n  " : "\n  ") << run_json(s, runs[i]);
    o << "\n]}\n";
    if (!s.json.empty()) {
        std::ofstream f(s.json);
        if (!(f << o.str())) fail("cannot write " + s.json);
    }
    return failed ? 1 : 0;
}

}  // namespace
}  // namespace ltb


int main(int argc, char** argv) {
    try {
        return ltb::run(argc, argv);
    } catch (const std::exception& e) {
        std::string msg = e.what();
        std::fprintf(stderr, "libtorch_baseline: error: %s\n", msg.c_str());
        return 2;
    }
}
