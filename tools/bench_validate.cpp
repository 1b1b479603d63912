// Bench JSON validation (tools/bench_report.h, docs/BENCH.md describes every field): JsonChecker,
// validate_bench_json and its per-object checks, and read/write_bench_json, which refuse an invalid
// record. The builders and statistics are in tools/bench_report.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>

#include "runtime/error.h"
#include "tools/batch_search.h"
#include "tools/bench_report.h"
#include "tools/layer_table.h"

namespace tools {

using nlohmann::json;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

}  // namespace

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
