// Bench JSON records: statistics, builders, validation, provenance (tools/bench_report.h,
// docs/BENCH.md describes every field).
#include "tools/bench_report.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>

#include "runtime/error.h"
#include "tools/batch_search.h"
#include "tools/layer_table.h"

namespace tools {

using nlohmann::json;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }
std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

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

// ---- JsonChecker ----

void JsonChecker::add(const std::string& path, const std::string& what) { problems.push_back(path + ": " + what); }

const json* JsonChecker::get(const json& obj, const std::string& path, const char* key) {
    if (!obj.is_object()) return nullptr;  // the caller reported the container already
    const auto it = obj.find(key);
    if (it == obj.end()) {
        add(join(path, key), "missing");
        return nullptr;
    }
    return &*it;
}

bool JsonChecker::object(const json& obj, const std::string& path, const char* key, const json** out) {
    const json* v = get(obj, path, key);
    *out = nullptr;
    if (!v) return false;
    if (!v->is_object()) {
        add(join(path, key), "expected an object, got " + v->dump());
        return false;
    }
    *out = v;
    return true;
}

bool JsonChecker::boolean(const json& obj, const std::string& path, const char* key, bool* out) {
    const json* v = get(obj, path, key);
    if (!v) return false;
    if (!v->is_boolean()) {
        add(join(path, key), "expected true or false, got " + v->dump());
        return false;
    }
    *out = v->get<bool>();
    return true;
}

bool JsonChecker::string(const json& obj, const std::string& path, const char* key, std::string* out, bool allow_empty,
                         bool allow_null) {
    const json* v = get(obj, path, key);
    if (!v) return false;
    if (v->is_null() && allow_null) return true;
    if (!v->is_string()) {
        add(join(path, key), "expected a string, got " + v->dump());
        return false;
    }
    if (!allow_empty && v->get<std::string>().empty()) {
        add(join(path, key), "must not be empty");
        return false;
    }
    *out = v->get<std::string>();
    return true;
}

bool JsonChecker::number(const json& obj, const std::string& path, const char* key, double* out, double lo, double hi,
                         bool allow_null) {
    const json* v = get(obj, path, key);
    if (!v) return false;
    if (v->is_null() && allow_null) {
        *out = kNan;
        return true;
    }
    if (!v->is_number() || !std::isfinite(v->get<double>())) {
        add(join(path, key), "expected a finite number, got " + v->dump());
        return false;
    }
    const double x = v->get<double>();
    if (x < lo || x > hi) {
        add(join(path, key), rt::format("%g is outside [%g, %g]", x, lo, hi));
        return false;
    }
    *out = x;
    return true;
}

bool JsonChecker::integer(const json& obj, const std::string& path, const char* key, long long* out, long long lo,
                          long long hi, bool allow_null) {
    const json* v = get(obj, path, key);
    if (!v) return false;
    if (v->is_null() && allow_null) {
        *out = -1;
        return true;
    }
    if (!v->is_number_integer()) {
        add(join(path, key), "expected an integer, got " + v->dump());
        return false;
    }
    const long long x = v->get<long long>();
    if (x < lo || x > hi) {
        add(join(path, key), rt::format("%lld is outside [%lld, %lld]", x, lo, hi));
        return false;
    }
    *out = x;
    return true;
}

void JsonChecker::known_keys(const json& obj, const std::string& path, const std::vector<const char*>& allowed) {
    if (!obj.is_object()) return;
    for (const auto& item : obj.items()) {
        const bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return item.key() == a; });
        if (!ok) add(join(path, item.key()), "unknown field");
    }
}

void JsonChecker::same(const std::string& path, const char* key, double got, double want, const char* what) {
    if (std::isnan(got) || std::isnan(want)) return;  // reported by the type check
    if (std::fabs(got - want) <= 1e-9 * std::max(std::fabs(got), std::fabs(want)) + 1e-12) return;
    add(join(path, key), rt::format("%.17g differs from %s, %.17g", got, what, want));
}

// ---- validation ----

namespace {

constexpr long long kMaxInt = std::numeric_limits<long long>::max();

// The device object: bench_schema.py's keys for every producer; slidefuse's details when "available"
// is there (required in slidefuse's own records).
void check_device(JsonChecker& c, const json& d, const std::string& path, bool ours) {
    std::string s;
    for (const char* k : {"name", "driver", "cuda", "cudnn"}) c.string(d, path, k, &s, false, true);
    if (!ours && !d.contains("available")) return;
    bool available = false;
    if (!c.boolean(d, path, "available", &available)) return;
    c.string(d, path, "cuda", &s);  // the linked runtime and cuDNN are known even without a device
    c.string(d, path, "cudnn", &s);
    c.string(d, path, "cudnn_compiled", &s);
    c.string(d, path, "cuda_driver", &s, false, true);
    const char* device_keys[] = {"name",
                                 "ordinal",
                                 "pci_bus_id",
                                 "compute_capability",
                                 "sm_count",
                                 "memory_bytes",
                                 "l2_bytes",
                                 "memory_bus_bits",
                                 "sm_clock_mhz",
                                 "mem_clock_mhz",
                                 "theoretical_mem_gbps"};
    if (!available) {  // the device fields are present and null; the reason says why
        c.string(d, path, "reason", &s);
        for (const char* k : device_keys)
            if (const json* v = c.get(d, path, k); v && !v->is_null())
                c.add(join(path, k), "must be null when the device is not available, got " + v->dump());
        return;
    }
    long long i = 0;
    double x = 0;
    c.string(d, path, "reason", &s, true, true);
    c.string(d, path, "name", &s);
    c.integer(d, path, "ordinal", &i, 0, 1 << 16);
    c.string(d, path, "pci_bus_id", &s, false, true);
    c.string(d, path, "compute_capability", &s);
    c.integer(d, path, "sm_count", &i, 1, 1 << 16);
    c.integer(d, path, "memory_bytes", &i, 1, kMaxInt);
    c.integer(d, path, "l2_bytes", &i, 0, kMaxInt);
    c.integer(d, path, "memory_bus_bits", &i, 0, 1 << 16);
    c.number(d, path, "sm_clock_mhz", &x, 0, 1e5, true);
    c.number(d, path, "mem_clock_mhz", &x, 0, 1e6, true);
    c.number(d, path, "theoretical_mem_gbps", &x, 0, 1e6, true);
}

void check_nvml(JsonChecker& c, const json& n, const std::string& path) {
    if (!n.is_object()) return c.add(path, "expected an object");
    c.known_keys(
        n, path,
        {"available", "reason", "samples", "failed_reads", "interval_ms", "window_s", "power_w_mean", "power_w_max",
         "power_limit_w", "sm_util_mean", "sm_util_min", "mem_util_mean", "sm_clock_mhz_mean", "sm_clock_mhz_min",
         "sm_clock_mhz_max", "mem_clock_mhz_mean", "temperature_c_max", "throttle_reasons"});
    bool available = false;
    std::string s;
    long long samples = 0, i = 0;
    c.integer(n, path, "samples", &samples, 0, kMaxInt);
    c.integer(n, path, "failed_reads", &i, 0, kMaxInt);
    if (!c.boolean(n, path, "available", &available)) return;
    c.string(n, path, "reason", &s, false, available);  // required (non-empty) when unavailable
    if (!available) return;
    if (samples < 1) c.add(join(path, "samples"), "an available NVML window needs at least one sample");
    double x = 0, mean = 0, lo = 0, hi = 0;
    c.number(n, path, "interval_ms", &x, 1e-3, 1e6);
    c.number(n, path, "window_s", &x, 0, 1e7);
    c.number(n, path, "power_w_mean", &mean, 0, 1e4, true);
    c.number(n, path, "power_w_max", &hi, 0, 1e4, true);
    if (mean > hi * (1 + 1e-12)) c.add(join(path, "power_w_mean"), rt::format("%g exceeds power_w_max %g", mean, hi));
    c.number(n, path, "power_limit_w", &x, 0, 1e4, true);
    c.number(n, path, "sm_util_mean", &mean, 0, 100, true);
    c.number(n, path, "sm_util_min", &lo, 0, 100, true);
    if (lo > mean * (1 + 1e-12)) c.add(join(path, "sm_util_min"), rt::format("%g exceeds sm_util_mean %g", lo, mean));
    c.number(n, path, "mem_util_mean", &x, 0, 100, true);
    c.number(n, path, "sm_clock_mhz_mean", &mean, 0, 1e5, true);
    c.number(n, path, "sm_clock_mhz_min", &lo, 0, 1e5, true);
    c.number(n, path, "sm_clock_mhz_max", &hi, 0, 1e5, true);
    if (lo > mean * (1 + 1e-12) || mean > hi * (1 + 1e-12))
        c.add(join(path, "sm_clock_mhz_mean"), rt::format("min %g <= mean %g <= max %g does not hold", lo, mean, hi));
    c.number(n, path, "mem_clock_mhz_mean", &x, 0, 1e6, true);
    c.number(n, path, "temperature_c_max", &x, -100, 300, true);
    c.integer(n, path, "throttle_reasons", &i, 0, kMaxInt, true);
}

// timings_ms of a run: finite values > 0 (into *ms); false when unusable.
bool check_timings(JsonChecker& c, const json& r, const std::string& path, std::vector<double>* ms) {
    const json* t = c.get(r, path, "timings_ms");
    const std::string tp = join(path, "timings_ms");
    if (!t) return false;
    if (!t->is_array()) {
        c.add(tp, "expected an array of milliseconds");
        return false;
    }
    bool ok = true;
    for (size_t k = 0; k < t->size(); ++k) {
        const json& v = (*t)[k];
        if (v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0) {
            ms->push_back(v.get<double>());
        } else {
            c.add(rt::format("%s[%zu]", tp.c_str(), k), "expected a finite time > 0 ms, got " + v.dump());
            ok = false;
        }
    }
    return ok;
}

// The statistics of an "ok" run recomputed from its timings; the extended ones (mean .. ms_per_step)
// are required in slidefuse's own records and checked wherever present.
void check_stats(JsonChecker& c, const json& r, const std::string& path, const std::vector<double>& ms, long long batch,
                 bool ours) {
    const TimingStats s = timing_stats(ms);
    const struct {
        const char* key;
        double want;
        const char* what;
        bool core;
    } stats[] = {{"median_ms", s.median, "the median of timings_ms", true},
                 {"p10_ms", s.p10, "their 10th percentile", true},
                 {"p90_ms", s.p90, "their 90th percentile", true},
                 {"samples_per_s", batch > 0 ? batch * 1000.0 / s.median : kNan, "batch * 1000 / median_ms", true},
                 {"mean_ms", s.mean, "their mean", false},
                 {"min_ms", s.min, "their minimum", false},
                 {"max_ms", s.max, "their maximum", false},
                 {"stddev_ms", s.stddev, "their standard deviation", false},
                 {"ms_per_step", s.median, "median_ms", false}};
    for (const auto& st : stats) {
        if (!st.core && !ours && !r.contains(st.key)) continue;
        double got = 0;
        if (c.number(r, path, st.key, &got, 0, 1e12)) c.same(path, st.key, got, st.want, st.what);
    }
}

void check_run(JsonChecker& c, const json& r, const std::string& path, const ValidateOptions& opt, bool ours) {
    if (!r.is_object()) return c.add(path, "expected an object");
    long long batch = 0, timed = 0, i = 0;
    validate_run_config(c, r, path, &batch, &timed, ours);
    std::string status, s;
    if (c.string(r, path, "status", &status) && status != "ok" && status != "oom" && status != "error")
        c.add(join(path, "status"), "\"" + status + "\"; expected \"ok\", \"oom\" or \"error\"");
    c.integer(r, path, "peak_mem_bytes", &i, status == "ok" && ours ? 1 : 0, kMaxInt, !(status == "ok" && ours));
    if (r.contains("nvml"))
        check_nvml(c, r["nvml"], join(path, "nvml"));
    else if (ours)
        c.add(join(path, "nvml"), "missing");
    if (r.contains("extra") && !r["extra"].is_object()) c.add(join(path, "extra"), "expected an object");
    std::vector<double> ms;
    const bool timings_ok = check_timings(c, r, path, &ms);
    if (timings_ok && timed > 0 && static_cast<long long>(ms.size()) != timed)
        c.add(join(path, "timings_ms"), rt::format("%zu values but timed_steps is %lld", ms.size(), timed));
    if (status != "ok") {  // a failed batch: the message says why; statistics are not checked
        c.string(r, path, "error", &s);
        return;
    }
    if (timings_ok && static_cast<long long>(ms.size()) < opt.min_timed_steps)
        c.add(join(path, "timings_ms"),
              rt::format("%zu timed steps; at least %d are required", ms.size(), opt.min_timed_steps));
    if (timings_ok && !ms.empty()) check_stats(c, r, path, ms, batch, ours);
}

}  // namespace

void validate_run_config(JsonChecker& c, const json& obj, const std::string& path, long long* batch, long long* timed,
                         bool strict_mode) {
    long long hw[2] = {0, 0}, ch = 0, i = 0;
    c.integer(obj, path, "batch", batch, 1, 1 << 20);
    for (int k = 0; k < 2; ++k) {
        const char* key = k == 0 ? "height" : "width";
        if (c.integer(obj, path, key, &hw[k], 32, 1 << 16) && hw[k] % 32 != 0)
            c.add(join(path, key), rt::format("%lld is not a multiple of 32", hw[k]));
    }
    if (c.integer(obj, path, "channels", &ch, 1, 4) && ch != 2 && ch != 4)
        c.add(join(path, "channels"), rt::format("%lld; the model takes 2 (gray, mask) or 4 (RGB, mask)", ch));
    std::string mode;
    if (c.string(obj, path, "mode", &mode) && strict_mode && mode != "graph" && mode != "eager")
        c.add(join(path, "mode"), "\"" + mode + "\"; expected \"graph\" or \"eager\"");
    c.integer(obj, path, "warmup_steps", &i, 0, kMaxInt);
    c.integer(obj, path, "timed_steps", timed, 0, kMaxInt);
}

namespace {

// ISO 8601 as bench_schema.py accepts it: YYYY-MM-DDTHH:MM:SS, then an optional fraction (.d+),
// then an optional Z or offset (+HH:MM, +HHMM). Hand-written: <regex> trips GCC 12's
// -Wmaybe-uninitialized in sanitizer builds.
bool is_date(const std::string& s) {
    auto digits = [&](size_t at, size_t n) {
        if (at + n > s.size()) return false;
        for (size_t k = at; k < at + n; ++k)
            if (!std::isdigit(static_cast<unsigned char>(s[k]))) return false;
        return true;
    };
    const std::string shape = "dddd-dd-ddTdd:dd:dd";
    if (s.size() < shape.size()) return false;
    for (size_t k = 0; k < shape.size(); ++k)
        if (shape[k] == 'd' ? !digits(k, 1) : s[k] != shape[k]) return false;
    size_t at = shape.size();
    if (at < s.size() && s[at] == '.') {
        const size_t start = ++at;
        while (digits(at, 1)) ++at;
        if (at == start) return false;
    }
    if (at == s.size()) return true;
    if (s[at] == 'Z') return at + 1 == s.size();
    if (s[at] != '+' && s[at] != '-') return false;
    if (!digits(at + 1, 2)) return false;
    at += 3;
    if (at < s.size() && s[at] == ':') ++at;
    return digits(at, 2) && at + 2 == s.size();
}

}  // namespace

std::vector<std::string> validate_bench_json(const json& doc, const ValidateOptions& options) {
    JsonChecker c;
    if (!doc.is_object()) {
        c.add("(document)", "expected a JSON object");
        return c.problems;
    }
    std::string s, tool;
    if (c.string(doc, "", "schema", &s) && s != kBenchSchema)
        c.add("schema", rt::format("\"%s\"; expected \"%s\"", s.c_str(), kBenchSchema));
    c.string(doc, "", "tool", &tool);
    const bool ours = tool == kBenchTool;
    c.string(doc, "", "commit", &s);
    if (c.string(doc, "", "date", &s) && !is_date(s))
        c.add("date", "\"" + s + "\" is not ISO 8601 (2026-11-21T09:30:00Z)");
    if (ours || doc.contains("command")) c.string(doc, "", "command", &s, true);
    const json* o = nullptr;
    if (c.object(doc, "", "device", &o)) check_device(c, *o, "device", ours);
    const json* runs = c.get(doc, "", "runs");
    if (runs && !runs->is_array()) c.add("runs", "expected an array");
    if (runs && runs->is_array())
        for (size_t k = 0; k < runs->size(); ++k) check_run(c, (*runs)[k], rt::format("runs[%zu]", k), options, ours);
    if (doc.contains("nvml") && !doc["nvml"].is_object() && !doc["nvml"].is_null()) c.add("nvml", "expected an object");
    if (doc.contains("batch_search")) {
        if (doc["batch_search"].is_object())
            validate_batch_search_json(c, doc["batch_search"], "batch_search");
        else
            c.add("batch_search", "expected an object");
    }
    if (doc.contains("layers")) validate_layers_json(c, doc["layers"], "layers");
    if (doc.contains("extra") && !doc["extra"].is_object()) c.add("extra", "expected an object");
    if (runs && runs->is_array() && runs->empty() && !doc.contains("batch_search") && !doc.contains("layers"))
        c.add("runs", "empty, and no batch_search or layers: the record holds no measurement");
    return c.problems;
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

// ---- files ----

json read_bench_json(const std::string& path, const ValidateOptions& options) {
    std::ifstream in(path);
    SF_CHECK(in.good(), "cannot read bench record %s", path.c_str());
    json doc;
    try {
        doc = json::parse(in);
    } catch (const json::exception& e) {
        SF_FAIL("%s: not JSON: %s", path.c_str(), e.what());
    }
    const std::vector<std::string> problems = validate_bench_json(doc, options);
    std::string list;
    for (const std::string& p : problems) list += "\n  " + p;
    SF_CHECK(problems.empty(), "%s: not a valid %s record (%zu problems):%s", path.c_str(), kBenchSchema,
             problems.size(), list.c_str());
    return doc;
}

void write_bench_json(const std::string& path, const json& doc, const ValidateOptions& options) {
    const std::vector<std::string> problems = validate_bench_json(doc, options);
    std::string list;
    for (const std::string& p : problems) list += "\n  " + p;
    SF_CHECK(problems.empty(), "bench record for %s is invalid (%zu problems):%s", path.c_str(), problems.size(),
             list.c_str());
    std::ofstream out(path);
    SF_CHECK(out.good(), "bench: cannot write %s", path.c_str());
    out << doc.dump(2) << "\n";
    SF_CHECK(out.good(), "bench: writing %s failed", path.c_str());
}

}  // namespace tools
