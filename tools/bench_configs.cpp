// `slidefuse bench step --configs FILE --json-dir DIR` (tools/bench_configs.h): the list's parsing
// and checks (device-free, CPU-tested) and its run on a GPU.
#include "tools/bench_configs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tools/bench_runs.h"
#include "tools/layer_table.h"
#include "tools/roofline.h"

namespace tools {

const std::vector<ConfigSwitch> kConfigSwitches = {{"--up-order", true},          {"--fuse-expand-dw", false},
                                                   {"--fuse-dw-pw", false},       {"--merge-heads", false},
                                                   {"--fuse-head-bn", false},     {"--fuse-up-bn", false},
                                                   {"--no-dw-variants", false},   {"--bn-row-batch", true},
                                                   {"--bn-min-blocks", true},     {"--pdl", false},
                                                   {"--dw-fused-bwd", false},     {"--dw-fused-bwd-bn", false},
                                                   {"--dw-fused-bn-grad", false}, {"--upsample-row-loads", false},
                                                   {"--pw-custom", false},        {"--pw-stats", false},
                                                   {"--pw-bn-grad", false},       {"--dw-stats", false},
                                                   {"--pw-bn-bwd", false},        {"--pw-fused-bwd", false},
                                                   {"--head-bn-grad", false},     {"--head-bn-dx", false},
                                                   {"--branch-lanes", false},     {"--layers", false}};

namespace {

const ConfigSwitch* find_switch(const std::string& flag) {
    for (const ConfigSwitch& s : kConfigSwitches)
        if (flag == s.flag) return &s;
    return nullptr;
}

std::string switch_names() {
    std::string out;
    for (const ConfigSwitch& s : kConfigSwitches) out += std::string(out.empty() ? "" : " ") + s.flag;
    return out;
}

constexpr size_t kMaxNameLength = 64;
constexpr const char* kAgainSuffix = "_again";
constexpr const char* kSummaryName = "configs_summary";

bool valid_name(const std::string& n) {
    if (n.empty() || n.size() > kMaxNameLength || n[0] == '-') return false;
    for (char ch : n)
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '-'))
            return false;
    return true;
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The line's words, a '#' and what follows it left out.
std::vector<std::string> words_of(std::string line) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

// The command's arguments without the list's own options and their values.
std::vector<std::string> common_of(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--configs" || a == "--json-dir" || a == "--only" || a == "--deadline-s") {
            ++i;
            continue;
        }
        out.push_back(a);
    }
    return out;
}

std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
    return out;
}

}  // namespace

std::vector<BenchConfig> parse_bench_configs(const std::string& text, const std::string& origin,
                                             const std::vector<std::string>& common_args) {
    const std::vector<std::string> common = common_of(common_args);
    std::vector<BenchConfig> out;
    std::istringstream in(text);
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        const std::vector<std::string> w = words_of(line);
        if (w.empty()) continue;
        BenchConfig c;
        c.name = w[0];
        c.line = line_no;
        SF_CHECK(valid_name(c.name),
                 "%s:%d: configuration name '%s': letters, digits, '_', '.' and '-', at most %zu characters, not "
                 "starting with '-' (one configuration a line: NAME [SWITCH...])",
                 origin.c_str(), line_no, c.name.c_str(), kMaxNameLength);
        SF_CHECK(!ends_with(c.name, kAgainSuffix) && c.name != kSummaryName,
                 "%s:%d: configuration name '%s': names ending in '%s' and '%s' are the records of the base's second "
                 "run and of the summary",
                 origin.c_str(), line_no, c.name.c_str(), kAgainSuffix, kSummaryName);
        for (const BenchConfig& prev : out)
            SF_CHECK(prev.name != c.name, "%s:%d: configuration '%s' repeats line %d's name", origin.c_str(), line_no,
                     c.name.c_str(), prev.line);
        for (size_t i = 1; i < w.size(); ++i) {
            const ConfigSwitch* s = find_switch(w[i]);
            SF_CHECK(s != nullptr,
                     "%s:%d: '%s' is not a switch of a configuration (those are: %s); sizes, batch, steps and outputs "
                     "are the command's",
                     origin.c_str(), line_no, w[i].c_str(), switch_names().c_str());
            c.flags.push_back(w[i]);
            if (s->takes_value) {
                SF_CHECK(i + 1 < w.size(), "%s:%d: %s needs a value", origin.c_str(), line_no, w[i].c_str());
                c.flags.push_back(w[++i]);
            }
        }
        std::vector<std::string> args = common;
        args.insert(args.end(), c.flags.begin(), c.flags.end());
        try {
            c.options = parse_step_bench_args(args);
        } catch (const rt::Error& e) {
            SF_FAIL("%s:%d: configuration '%s': %s", origin.c_str(), line_no, c.name.c_str(), e.message().c_str());
        }
        out.push_back(std::move(c));
    }
    SF_CHECK(!out.empty(), "%s: no configuration (one a line: NAME [SWITCH...]; the first is the base)",
             origin.c_str());
    return out;
}

std::vector<BenchConfig> read_bench_configs(const std::string& path, const std::vector<std::string>& common_args) {
    std::ifstream f(path);
    SF_CHECK(f.good(), "bench step: --configs %s: cannot read it", path.c_str());
    std::ostringstream text;
    text << f.rdbuf();
    SF_CHECK(!f.bad(), "bench step: --configs %s: read failed", path.c_str());
    return parse_bench_configs(text.str(), path, common_args);
}

std::vector<BenchConfig> select_bench_configs(const std::vector<BenchConfig>& all,
                                              const std::vector<std::string>& only) {
    if (only.empty()) return all;
    for (const std::string& n : only) {
        const bool known = std::any_of(all.begin(), all.end(), [&](const BenchConfig& c) { return c.name == n; });
        std::string names;
        for (const BenchConfig& c : all) names += (names.empty() ? "" : ", ") + c.name;
        SF_CHECK(known, "bench step: --only %s: no such configuration in the list (%s)", n.c_str(), names.c_str());
    }
    std::vector<BenchConfig> out;
    for (size_t i = 0; i < all.size(); ++i)
        if (i == 0 || std::find(only.begin(), only.end(), all[i].name) != only.end()) out.push_back(all[i]);
    return out;
}

std::vector<std::string> split_names(const std::string& opt, const std::string& v) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        const size_t comma = v.find(',', start);
        const std::string part = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        SF_CHECK(!part.empty(), "bench step: %s '%s': an empty name (NAME,NAME,...)", opt.c_str(), v.c_str());
        out.push_back(part);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

void check_configs_options(const StepBenchOptions& o) {
    if (o.configs.empty()) {
        SF_CHECK(o.json_dir.empty() && o.only.empty() && o.deadline_s == 0,
                 "bench step: --json-dir, --only and --deadline-s belong to --configs FILE");
        return;
    }
    SF_CHECK(!o.json_dir.empty(), "bench step: --configs needs --json-dir DIR (a record per configuration)");
    SF_CHECK(o.json.empty(),
             "bench step: --configs writes DIR/NAME.json for each configuration; --json does not apply");
    SF_CHECK(!o.search, "bench step: --configs times the listed configurations; --search does not apply");
    SF_CHECK(o.world == 0, "bench step: --configs runs on one GPU; --world does not apply");
    SF_CHECK(o.batch_sizes.size() == 1, "bench step: --configs times one batch size; --batch-sizes lists %zu",
             o.batch_sizes.size());
}

bool fits_deadline(double elapsed_s, double est_s, double deadline_s, double reserve_s) {
    return deadline_s <= 0 || elapsed_s + est_s + reserve_s <= deadline_s;
}

namespace {

using Clock = std::chrono::steady_clock;

// One record of the list: what the summary says of it.
struct Outcome {
    double seconds = 0;       // the whole run, per-layer table included
    double step_seconds = 0;  // the timed configuration alone (build, plans, capture, steps)
    double median_ms = 0;     // 0 when not "ok"
    bool failed = false;      // the run or its per-layer table ended in an error
};

// After a failed run: "" when the CUDA context still works, else the error that a second synchronize
// still reports (an illegal address, a launch failure: sticky, nothing more runs in this process).
std::string lost_context() {
    if (cudaDeviceSynchronize() == cudaSuccess) return "";
    (void)cudaGetLastError();
    const cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? "" : rt::format("%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

// The record of a configuration that failed before bench_one could time it.
BenchRun failed_run(int b, const StepBenchOptions& o, const std::string& why) {
    BenchRun r;
    r.config.batch = b;
    r.config.height = o.height;
    r.config.width = o.width;
    r.config.channels = o.channels;
    r.config.mode = o.eager ? "eager" : "graph";
    r.config.warmup_steps = o.warmup;
    r.status = "error";
    r.error = why;
    r.nvml = rt::NvmlSummary::unavailable("not timed");
    return r;
}

}  // namespace

int bench_configs(rt::CudaContext& ctx, rt::Nvml& nvml, const BenchHeader& h, const StepBenchOptions& o,
                  const std::vector<BenchConfig>& cfgs, const ValidateOptions& validate) {
    SF_CHECK(!cfgs.empty(), "bench step: --configs: no configuration to run");
    std::error_code ec;
    std::filesystem::create_directories(o.json_dir, ec);
    SF_CHECK(!ec, "bench step: --json-dir %s: %s", o.json_dir.c_str(), ec.message().c_str());
    const int b = o.batch_sizes.front();
    const Clock::time_point t0 = Clock::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    const std::string dir = o.json_dir;
    nlohmann::json summary = {{"command", h.command},
                              {"configs_file", o.configs},
                              {"batch", b},
                              {"deadline_s", o.deadline_s > 0 ? nlohmann::json(o.deadline_s) : nlohmann::json()},
                              {"runs", nlohmann::json::array()},
                              {"skipped", nlohmann::json::array()}};
    const auto write_summary = [&] {  // whole or not at all: a run killed at its limit may be writing it
        const std::string path = dir + "/" + kSummaryName + ".json", tmp = path + ".tmp";
        {
            std::ofstream f(tmp);
            f << summary.dump(2) << "\n";
            SF_CHECK(f.good(), "bench step: cannot write %s", tmp.c_str());
        }
        SF_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "bench step: cannot rename %s to %s", tmp.c_str(),
                 path.c_str());
    };
    std::printf("configurations: %zu of %s at batch %d, the base %s first and again last%s\n", cfgs.size(),
                o.configs.c_str(), b, cfgs.front().name.c_str(),
                o.deadline_s > 0 ? rt::format(", within %.0f s", o.deadline_s).c_str() : "");
    std::fflush(stdout);

    const auto run = [&](const BenchConfig& c, const std::string& record, bool layers) {
        Outcome out;
        const double start = elapsed();
        std::printf("[%.0f s] configuration %s%s%s\n", start, record.c_str(), c.flags.empty() ? "" : ": ",
                    joined(c.flags).c_str());
        std::fflush(stdout);
        BenchRun r;
        try {
            r = bench_one(ctx, nvml, nullptr, b, c.options);
        } catch (const rt::Error& e) {  // a plan that cannot be made (bench_one catches what fails later)
            r = failed_run(b, c.options, e.what());
        }
        out.step_seconds = elapsed() - start;
        if (!r.extra.is_object()) r.extra = nlohmann::json::object();
        r.extra["config"] = c.name;
        print_run(b, r);
        out.failed = r.status == "error";
        nlohmann::json layers_json;
        if (layers && r.status == "ok") {
            try {
                const LayerReport rep =
                    bench_layers(ctx, b, c.options, peaks_for_device(h.device.name, o.peak_tflops, o.peak_gbps));
                std::fputs(format_layer_table(rep).c_str(), stdout);
                std::printf("conv plans of the per-layer run (autotuned ms per call):\n");
                for (const std::string& line : rep.conv_plans) std::printf("  %s\n", line.c_str());
                layers_json = layer_report_json(rep);
            } catch (const rt::Error& e) {  // the record keeps its step timing; the list goes on
                std::printf("per-layer run of %s failed: %s\n", c.name.c_str(), e.what());
                summary["layers_error"] = e.what();
                out.failed = true;
            }
        }
        BenchHeader hh = h;
        hh.command = h.command + " [configuration " + c.name + (c.flags.empty() ? "" : ": " + joined(c.flags)) + "]";
        write_bench_json(dir + "/" + record + ".json", bench_document(hh, {run_json(r)}, nullptr, layers_json),
                         validate);
        out.seconds = elapsed() - start;
        if (r.status == "ok") out.median_ms = median(r.timings_ms);
        summary["runs"].push_back({{"record", record},
                                   {"config", c.name},
                                   {"flags", c.flags},
                                   {"status", r.status},
                                   {"median_ms", r.status == "ok" ? nlohmann::json(out.median_ms) : nlohmann::json()},
                                   {"seconds", out.seconds},
                                   {"file", record + ".json"}});
        write_summary();
        std::fflush(stdout);
        return out;
    };

    // A failed run that left the context unusable ends the list: exit status 3, and the summary's
    // "remaining" names what did not run (scripts/gpu_session.sh reruns those in a new process).
    const auto lost = [&](const Outcome& oc, const std::string& record, size_t next) {
        if (!oc.failed) return false;
        const std::string why = lost_context();
        if (why.empty()) return false;
        summary["context_lost"] = {{"after", record}, {"error", why}};
        summary["remaining"] = nlohmann::json::array();
        for (size_t k = next; k < cfgs.size(); ++k) summary["remaining"].push_back(cfgs[k].name);
        write_summary();
        std::printf(
            "[%.0f s] the CUDA context is lost after %s (%s): %zu configuration(s) not run, listed as "
            "\"remaining\" in %s/%s.json\n",
            elapsed(), record.c_str(), why.c_str(), cfgs.size() - next, dir.c_str(), kSummaryName);
        std::fflush(stdout);
        return true;
    };
    // A configuration with its own --layers (not only the command's, which every configuration inherits)
    // gets the per-layer table too.
    const auto own_layers = [](const BenchConfig& c) {
        return std::find(c.flags.begin(), c.flags.end(), "--layers") != c.flags.end();
    };
    const BenchConfig& base = cfgs.front();
    const Outcome first = run(base, base.name, o.layers || own_layers(base));
    if (lost(first, base.name, 1)) return kContextLostExit;
    // The next configuration's cost: the longest so far (the base's first run, autotuning included,
    // until one has run); the base's second run is kept in reserve.
    double est = first.step_seconds;
    bool measured = false;
    for (size_t i = 1; i < cfgs.size(); ++i) {
        // A per-layer run costs about what the base's first run did with its own (or twice a plain one).
        const double need = own_layers(cfgs[i]) ? std::max(est, o.layers ? first.seconds : 2.5 * est) : est;
        if (!fits_deadline(elapsed(), need, o.deadline_s, est)) {
            for (size_t k = i; k < cfgs.size(); ++k) summary["skipped"].push_back(cfgs[k].name);
            std::printf("[%.0f s] skipped, the deadline (%.0f s) being near: %zu configuration(s) from %s on\n",
                        elapsed(), o.deadline_s, cfgs.size() - i, cfgs[i].name.c_str());
            write_summary();
            break;
        }
        const Outcome oc = run(cfgs[i], cfgs[i].name, own_layers(cfgs[i]));
        if (lost(oc, cfgs[i].name, i + 1)) return kContextLostExit;
        if (!own_layers(cfgs[i])) {  // the estimate is a plain configuration's
            est = measured ? std::max(est, oc.seconds) : oc.seconds;
            measured = true;
        }
    }
    if (fits_deadline(elapsed(), est, o.deadline_s, 0)) {
        const Outcome again = run(base, base.name + kAgainSuffix, false);
        if (first.median_ms > 0 && again.median_ms > 0) {
            const double drift = 100.0 * (again.median_ms - first.median_ms) / first.median_ms;
            summary["base_drift_pct"] = drift;
            std::printf("base %s: %.3f ms per step first, %.3f ms again at the end (%+.2f%%)\n", base.name.c_str(),
                        first.median_ms, again.median_ms, drift);
        }
    } else {
        summary["skipped"].push_back(base.name + kAgainSuffix);
        std::printf("[%.0f s] the base's second run skipped (the deadline)\n", elapsed());
    }
    write_summary();
    std::printf("[%.0f s] wrote %zu record(s) and %s/%s.json\n", elapsed(), summary["runs"].size(), dir.c_str(),
                kSummaryName);
    return 0;
}

}  // namespace tools
