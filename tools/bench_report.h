// JSON records of `slidefuse bench` in the schema "slidefuse.bench/1" that the baselines share
// (tools/baselines/bench_schema.py writes and checks the same core; docs/BENCH.md lists every
// field): builders from the measured values, the timing statistics they carry, and a validator that
// lists every problem of a record (used by the tests, by read/write_bench_json and by comparisons).
//
//   { "schema": "slidefuse.bench/1", "tool": "slidefuse", "commit", "date", "command",
//     "device": {name, driver, cuda, cudnn, + available, reason, sm_count, ...},   device_json()
//     "runs": [ {batch, height, width, channels, mode, warmup_steps, timed_steps, timings_ms,
//                median_ms, p10_ms, p90_ms, samples_per_s, peak_mem_bytes, status, error?,
//                + mean/min/max/stddev_ms, ms_per_step, nvml{...}} ],                run_json()
//     "batch_search": {...},   tools/batch_search.h   (optional)
//     "layers": {...},         tools/layer_table.h    (optional)
//     "extra": {...} }         free-form              (optional)
// The core (the fields bench_schema.py requires) is checked for every producer; the "+" fields are
// required in slidefuse's own records (tool "slidefuse") and checked wherever they appear.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/device_info.h"
#include "runtime/nvml.h"

namespace tools {

constexpr const char* kBenchSchema = "slidefuse.bench/1";
constexpr int kMinTimedSteps = 50;  // a run record needs at least this many timed steps

// ---- statistics of raw timings ----
// Percentile with linear interpolation between closest ranks (numpy's default): position
// pct/100 * (n - 1) in the sorted values. pct in [0, 100]; throws on an empty list.
double percentile(std::vector<double> values, double pct);
double median(std::vector<double> values);

struct TimingStats {
    size_t n = 0;
    double median = 0, p10 = 0, p90 = 0, mean = 0, min = 0, max = 0, stddev = 0;  // stddev: population
};
// Throws rt::Error on an empty list or a value that is not finite and > 0 (naming its index).
TimingStats timing_stats(const std::vector<double>& ms);

// ---- builders ----
constexpr const char* kBenchTool = "slidefuse";

struct RunConfig {
    int batch = 0;
    int height = 256, width = 512, channels = 2;
    std::string mode = "graph";  // "graph" (captured step replayed) | "eager"
    int warmup_steps = 0;        // steps run before the timed ones (not in timings_ms)
};

struct BenchRun {
    RunConfig config;
    std::vector<double> timings_ms;  // one per timed step (CUDA events around each step)
    size_t peak_mem_bytes = 0;       // device memory in use at the peak of the run (0 -> null)
    std::string status = "ok";       // "ok" | "oom" | "error" (then timings may be empty)
    std::string error;               // required when status != "ok"
    rt::NvmlSummary nvml;            // the timed window (NvmlSummary::unavailable(...) when absent)
    nlohmann::json extra;            // optional free-form object (null: left out)
};

struct BenchHeader {
    std::string tool = kBenchTool;
    std::string command;  // the command line
    std::string commit;   // "" -> "unknown"
    std::string date;     // "" -> utc_timestamp()
    rt::DeviceInfo device;
    std::string driver;  // the driver version string (rt::Nvml::driver_version()); "" -> null
};

nlohmann::json device_json(const rt::DeviceInfo& d, const std::string& driver);
nlohmann::json nvml_json(const rt::NvmlSummary& s);
// {batch, height, width, channels, mode, warmup_steps, timed_steps}: the head of a run record, and
// the "config" of the layer report.
nlohmann::json run_config_json(const RunConfig& c, size_t timed_steps);
// Throws rt::Error for status "ok" with bad timings (as timing_stats), an unknown status, or a
// failed run without an error message.
nlohmann::json run_json(const BenchRun& r);
// The document; batch_search and layers are added when not null.
nlohmann::json bench_document(const BenchHeader& h, const std::vector<nlohmann::json>& runs,
                              const nlohmann::json& batch_search = nullptr, const nlohmann::json& layers = nullptr);

// ---- validation ----
struct ValidateOptions {
    int min_timed_steps = kMinTimedSteps;  // for runs with status "ok"
};
// Every problem found, each "path: what is wrong" (e.g. "runs[0].median_ms: 12.5 differs from the
// median of timings_ms, 12.25"); empty when the document is valid.
std::vector<std::string> validate_bench_json(const nlohmann::json& doc, const ValidateOptions& options = {});

// Building block of the validators (also used by tools/layer_table.cpp): each check appends
// "path: problem" when the field is missing, has the wrong type or is out of range.
class JsonChecker {
public:
    std::vector<std::string> problems;

    void add(const std::string& path, const std::string& what);
    // The member `key` of `obj` (path names obj); null and a problem when missing.
    const nlohmann::json* get(const nlohmann::json& obj, const std::string& path, const char* key);
    bool object(const nlohmann::json& obj, const std::string& path, const char* key, const nlohmann::json** out);
    bool boolean(const nlohmann::json& obj, const std::string& path, const char* key, bool* out);
    // A string; when !allow_empty an empty one is a problem. allow_null: null passes (out untouched).
    bool string(const nlohmann::json& obj, const std::string& path, const char* key, std::string* out,
                bool allow_empty = false, bool allow_null = false);
    // A finite number in [lo, hi]; allow_null: null passes and *out becomes NaN.
    bool number(const nlohmann::json& obj, const std::string& path, const char* key, double* out, double lo, double hi,
                bool allow_null = false);
    // An integer in [lo, hi]; allow_null: null passes and *out becomes -1.
    bool integer(const nlohmann::json& obj, const std::string& path, const char* key, long long* out, long long lo,
                 long long hi, bool allow_null = false);
    // Every key of obj is in `allowed`.
    void known_keys(const nlohmann::json& obj, const std::string& path, const std::vector<const char*>& allowed);
    // `got` equals `want` to a relative 1e-9 (the builders write doubles exactly; this absorbs nothing
    // but the last bit), reported as "path.key: got differs from <what>, want".
    void same(const std::string& path, const char* key, double got, double want, const char* what);
};

// Checks the run_config_json fields inside `obj` (a run record, or the layer report's config);
// *batch and *timed_steps receive those values (unchanged when invalid). strict_mode: mode must be
// "graph" or "eager" (slidefuse's own records; the baselines name theirs freely).
void validate_run_config(JsonChecker& c, const nlohmann::json& obj, const std::string& path, long long* batch,
                         long long* timed_steps, bool strict_mode);

// Reads and validates a document; throws rt::Error naming the file and listing the problems.
nlohmann::json read_bench_json(const std::string& path, const ValidateOptions& options = {});
// Validates, then writes (2-space indent); throws listing the problems, or naming the file.
void write_bench_json(const std::string& path, const nlohmann::json& doc, const ValidateOptions& options = {});

// ---- provenance ----
std::string utc_timestamp();  // "2026-11-21T09:30:00Z"
// The commit checked out in the git work tree containing `dir` (walking up to the .git folder or
// file), read from .git/HEAD and the ref it names (loose or packed; no git process); "" if none.
std::string read_git_commit(const std::string& dir);
// $SLIDEFUSE_COMMIT if set (the variable bench_schema.py reads too), else the SF_GIT_COMMIT compile
// definition if the build defines one, else read_git_commit() of the working directory, then of the
// executable's folder; "unknown" when all fail.
std::string detect_git_commit();

}  // namespace tools
