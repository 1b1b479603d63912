// Bench JSON records: statistics, builders, provenance (tools/bench_report.h, docs/BENCH.md describes
// every field). The validator and read/write_bench_json are in tools/bench_validate.cpp.
#include "tools/bench_report.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace tools {

using nlohmann::json;

namespace {

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

// ---- statistics ----

double percentile(std::vector<double> values, double pct) {
    SF_CHECK(!values.empty(), "percentile of an empty list");
    SF_CHECK(pct >= 0 && pct <= 100, "percentile %g outside [0, 100]", pct);
    std::sort(values.begin(), values.end());
    const double pos = pct / 100.0 * static_cast<double>(values.size() - 1);
    const size_t i = static_cast<size_t>(std::floor(pos));
    if (i + 1 >= values.size()) return values.back();
    const double frac = pos - static_cast<double>(i);
    return values[i] + frac * (values[i + 1] - values[i]);
}

double median(std::vector<double> values) { return percentile(std::move(values), 50); }

TimingStats timing_stats(const std::vector<double>& ms) {
    SF_CHECK(!ms.empty(), "timing statistics of an empty list of timings");
    for (size_t i = 0; i < ms.size(); ++i)
        SF_CHECK(std::isfinite(ms[i]) && ms[i] > 0, "timing %zu is %g ms; timings must be finite and > 0", i, ms[i]);
    TimingStats s;
    s.n = ms.size();
    s.median = percentile(ms, 50);
    s.p10 = percentile(ms, 10);
    s.p90 = percentile(ms, 90);
    s.min = *std::min_element(ms.begin(), ms.end());
    s.max = *std::max_element(ms.begin(), ms.end());
    double sum = 0;
    for (double v : ms) sum += v;
    s.mean = sum / static_cast<double>(s.n);
    double sq = 0;
    for (double v : ms) sq += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(sq / static_cast<double>(s.n));
    return s;
}

// ---- builders ----

json device_json(const rt::DeviceInfo& d, const std::string& driver) {
    const bool a = d.available;
    auto dev = [a](json v) { return a ? v : json(nullptr); };  // device fields are null without a device
    return {
        {"name", dev(d.name)},
        {"driver", str_or_null(driver)},
        {"cuda", str_or_null(rt::cuda_version_string(d.cuda_runtime_version))},
        {"cudnn", str_or_null(rt::cudnn_version_string(d.cudnn_version))},
        {"available", a},
        {"reason", str_or_null(d.reason)},
        {"ordinal", dev(d.ordinal)},
        {"pci_bus_id", dev(str_or_null(d.pci_bus_id))},
        {"compute_capability", dev(rt::format("%d.%d", d.cc_major, d.cc_minor))},
        {"sm_count", dev(d.sm_count)},
        {"memory_bytes", dev(d.memory_bytes)},
        {"l2_bytes", dev(d.l2_bytes)},
        {"memory_bus_bits", dev(d.memory_bus_bits)},
        {"sm_clock_mhz", dev(num_or_null(d.sm_clock_mhz))},
        {"mem_clock_mhz", dev(num_or_null(d.mem_clock_mhz))},
        {"theoretical_mem_gbps", dev(d.theoretical_mem_gbps() > 0 ? json(d.theoretical_mem_gbps()) : json(nullptr))},
        {"cuda_driver", str_or_null(rt::cuda_version_string(d.cuda_driver_version))},
        {"cudnn_compiled", str_or_null(rt::cudnn_version_string(d.cudnn_compiled))}};
}

json nvml_json(const rt::NvmlSummary& s) {
    const bool a = s.available;
    auto f = [a](double v) { return a ? num_or_null(v) : json(nullptr); };
    return {{"available", a},
            {"reason", str_or_null(s.reason)},
            {"samples", s.samples},
            {"failed_reads", s.failed_reads},
            {"interval_ms", f(s.interval_ms)},
            {"window_s", f(s.window_s)},
            {"power_w_mean", f(s.power_w.mean())},
            {"power_w_max", f(s.power_w.max)},
            {"power_limit_w", f(s.power_limit_w.max)},
            {"sm_util_mean", f(s.gpu_util_pct.mean())},
            {"sm_util_min", f(s.gpu_util_pct.min)},
            {"mem_util_mean", f(s.mem_util_pct.mean())},
            {"sm_clock_mhz_mean", f(s.sm_clock_mhz.mean())},
            {"sm_clock_mhz_min", f(s.sm_clock_mhz.min)},
            {"sm_clock_mhz_max", f(s.sm_clock_mhz.max)},
            {"mem_clock_mhz_mean", f(s.mem_clock_mhz.mean())},
            {"temperature_c_max", f(s.temperature_c.max)},
            {"throttle_reasons", a ? json(s.throttle_reasons_any) : json(nullptr)}};
}

json run_config_json(const RunConfig& c, size_t timed_steps) {
    return {{"batch", c.batch},          {"height", c.height}, {"width", c.width},
            {"channels", c.channels},    {"mode", c.mode},     {"warmup_steps", c.warmup_steps},
            {"timed_steps", timed_steps}};
}

json run_json(const BenchRun& r) {
    SF_CHECK(r.status == "ok" || r.status == "oom" || r.status == "error",
             "bench run: status '%s' is not ok, oom or error", r.status.c_str());
    SF_CHECK(r.status == "ok" || !r.error.empty(), "bench run: status %s needs an error message", r.status.c_str());
    json j = run_config_json(r.config, r.timings_ms.size());
    j["timings_ms"] = r.timings_ms;
    const bool timed = r.status == "ok" || !r.timings_ms.empty();
    const TimingStats s = timed ? timing_stats(r.timings_ms) : TimingStats{};
    auto stat = [timed](double v) { return timed ? json(v) : json(nullptr); };
    j["median_ms"] = stat(s.median);
    j["p10_ms"] = stat(s.p10);
    j["p90_ms"] = stat(s.p90);
    j["mean_ms"] = stat(s.mean);
    j["min_ms"] = stat(s.min);
    j["max_ms"] = stat(s.max);
    j["stddev_ms"] = stat(s.stddev);
    j["ms_per_step"] = stat(s.median);
    j["samples_per_s"] = stat(r.config.batch * 1000.0 / s.median);
    j["peak_mem_bytes"] = r.peak_mem_bytes > 0 ? json(r.peak_mem_bytes) : json(nullptr);
    j["status"] = r.status;
    if (r.status != "ok") j["error"] = r.error;
    j["nvml"] = nvml_json(r.nvml);
    if (!r.extra.is_null()) j["extra"] = r.extra;
    return j;
}

json bench_document(const BenchHeader& h, const std::vector<json>& runs, const json& batch_search, const json& layers) {
    json doc = {{"schema", kBenchSchema},
                {"tool", h.tool},
                {"commit", h.commit.empty() ? "unknown" : h.commit},
                {"date", h.date.empty() ? utc_timestamp() : h.date},
                {"command", h.command},
                {"device", device_json(h.device, h.driver)},
                {"runs", runs}};
    if (!batch_search.is_null()) doc["batch_search"] = batch_search;
    if (!layers.is_null()) doc["layers"] = layers;
    return doc;
}

// ---- provenance ----

std::string utc_timestamp() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

namespace {

namespace fs = std::filesystem;

std::string first_line(const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    if (!in || !std::getline(in, line)) return "";
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
}

bool is_sha(const std::string& s) {
    return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c); });
}

// HEAD of one git folder: a detached sha, or the ref it names, loose or in packed-refs (for a
// linked work tree, also in the common folder named by `commondir`).
std::string head_commit(const fs::path& git) {
    const std::string head = first_line(git / "HEAD");
    if (is_sha(head)) return head;
    if (head.rfind("ref: ", 0) != 0) return "";
    const std::string ref = head.substr(5);
    std::vector<fs::path> dirs = {git};
    const std::string common = first_line(git / "commondir");
    if (!common.empty()) dirs.push_back(fs::path(common).is_absolute() ? fs::path(common) : git / common);
    for (const fs::path& d : dirs) {
        const std::string loose = first_line(d / ref);
        if (is_sha(loose)) return loose;
        std::ifstream packed(d / "packed-refs");
        for (std::string line; std::getline(packed, line);)
            if (line.size() > 41 && line.compare(41, std::string::npos, ref) == 0 && is_sha(line.substr(0, 40)))
                return line.substr(0, 40);
    }
    return "";
}

}  // namespace

std::string read_git_commit(const std::string& dir) {
    std::error_code ec;
    fs::path p = fs::absolute(dir, ec);
    if (ec) return "";
    for (;;) {
        const fs::path dot = p / ".git";
        if (fs::is_directory(dot, ec)) return head_commit(dot);
        if (fs::is_regular_file(dot, ec)) {  // a work tree or submodule: "gitdir: <path>"
            const std::string line = first_line(dot);
            if (line.rfind("gitdir: ", 0) != 0) return "";
            const fs::path g = line.substr(8);
            return head_commit(g.is_absolute() ? g : p / g);
        }
        if (!p.has_parent_path() || p.parent_path() == p) return "";
        p = p.parent_path();
    }
}

std::string detect_git_commit() {
    if (const char* env = std::getenv("SLIDEFUSE_COMMIT"); env && *env) return env;
#ifdef SF_GIT_COMMIT
    if (*SF_GIT_COMMIT) return SF_GIT_COMMIT;
#endif
    std::string c = read_git_commit(".");
    if (!c.empty()) return c;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) c = read_git_commit(exe.parent_path().string());
    return c.empty() ? "unknown" : c;
}

}  // namespace tools
