// Batch-size search of `slidefuse bench` (docs/BENCH.md): the largest batch whose step fits a memory
// budget, and the fastest of the batches tried. Pure logic over a probe function, so it is tested on
// the CPU with synthetic probes; the bench's probe plans (and, when asked, times) a real step.
//
// Search, over multiples of `granule` only:
//   1. doubling from the smallest batch until a batch does not fit or the cap is reached;
//   2. bisection between the last batch that fitted and the first that did not, until they are one
//      granule apart.
// Memory is assumed non-decreasing in the batch (true of the step's plan: every activation grows
// with N). Deterministic: the probes depend only on the options and the answers. At most
// max_probes_needed(options) probes; every probe is recorded.
#pragma once
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tools {

// What probe(batch) reports.
struct BatchProbe {
    bool fits = false;         // the step could be planned / allocated / run (no out-of-memory)
    size_t bytes_needed = 0;   // device memory the batch needs; required when a budget is set
    double samples_per_s = 0;  // throughput when the probe timed the step; 0 = not timed
    std::string note;          // free text kept in the record (e.g. the out-of-memory message)
};
using BatchProbeFn = std::function<BatchProbe(int batch)>;

struct BatchSearchOptions {
    size_t budget_bytes = 0;  // a batch is feasible when it fits and needs at most this; 0: fits alone
    int granule = 8;          // every probed batch is a multiple of it
    int min_batch = 0;        // first batch tried, rounded up to a multiple of granule; 0 = granule
    int max_batch = 4096;     // cap, rounded down to a multiple of granule
    int max_probes = 64;      // safety bound; the search stops (probe_limit_hit) when reached
};

struct BatchProbeRecord {
    int batch = 0;
    const char* phase = "";  // "double" | "bisect"
    BatchProbe probe;
    bool feasible = false;
    std::string why;  // why not feasible ("" when feasible)
};

struct BatchSearchResult {
    BatchSearchOptions options;    // as normalised (granule multiples)
    int largest = 0;               // largest feasible batch found
    int first_infeasible = 0;      // smallest batch found infeasible; 0 = none (cap reached)
    bool capped = false;           // largest == max_batch: the limit lies at or above the cap
    bool probe_limit_hit = false;  // stopped by max_probes before the bracket closed
    int fastest = 0;               // feasible probed batch with the highest samples/s; 0 = none timed
    double fastest_samples_per_s = 0;
    std::vector<BatchProbeRecord> probes;  // in probe order
};

// Throws rt::Error for invalid options, for a probe that gives no bytes_needed while a budget is set,
// and when the smallest batch is not feasible (naming the batch, the bytes it needs and the budget).
BatchSearchResult search_batch_size(const BatchProbeFn& probe, const BatchSearchOptions& options = {});

// Largest number of probes the search can make for these options (doubling + bisection steps).
int max_probes_needed(const BatchSearchOptions& options);

// The "batch_search" object of the bench JSON (docs/BENCH.md): the options, the answers and every probe.
nlohmann::json batch_search_json(const BatchSearchResult& r);
class JsonChecker;  // tools/bench_report.h
// Appends the problems of a "batch_search" object to c: types and ranges, each probe's feasibility
// against fits and the budget, and largest / first_infeasible / fastest / capped recomputed from the
// probes.
void validate_batch_search_json(JsonChecker& c, const nlohmann::json& b, const std::string& path);

}  // namespace tools
