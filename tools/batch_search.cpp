// Batch-size search: doubling then bisection over granule multiples (tools/batch_search.h).
#include "tools/batch_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/error.h"
#include "tools/bench_report.h"

namespace tools {

using nlohmann::json;

namespace {

double gib(size_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

// Options with min/max turned into granule multiples; throws naming an invalid value.
BatchSearchOptions normalised(const BatchSearchOptions& o) {
    SF_CHECK(o.granule >= 1, "batch search: granule must be >= 1, got %d", o.granule);
    SF_CHECK(o.min_batch >= 0, "batch search: min batch must be >= 0, got %d", o.min_batch);
    SF_CHECK(o.max_probes >= 1, "batch search: max probes must be >= 1, got %d", o.max_probes);
    BatchSearchOptions n = o;
    const int first = o.min_batch > 0 ? o.min_batch : o.granule;
    n.min_batch = (first + o.granule - 1) / o.granule * o.granule;
    n.max_batch = o.max_batch / o.granule * o.granule;
    SF_CHECK(n.max_batch >= n.min_batch,
             "batch search: max batch %d holds no multiple of the granule %d at or above the smallest batch %d",
             o.max_batch, o.granule, n.min_batch);
    return n;
}

int ceil_log2(long long x) {  // x >= 1
    int k = 0;
    while ((1ll << k) < x) ++k;
    return k;
}

}  // namespace

int max_probes_needed(const BatchSearchOptions& options) {
    const BatchSearchOptions o = normalised(options);
    // Doubling: min, 2 min, 4 min, ... up to the cap (the cap itself probed when doubling overshoots).
    int doubling = 1;
    for (long long b = o.min_batch; b < o.max_batch; b *= 2) ++doubling;
    // Bisection: the bracket (lo, hi] spans at most the last doubling step, hi - lo <= max - max/2.
    const long long span = (o.max_batch - o.max_batch / 2 + o.granule - 1) / o.granule;
    return doubling + ceil_log2(std::max(1ll, span));
}

BatchSearchResult search_batch_size(const BatchProbeFn& probe, const BatchSearchOptions& options) {
    SF_CHECK(static_cast<bool>(probe), "batch search: no probe function");
    BatchSearchResult r;
    r.options = normalised(options);
    const BatchSearchOptions& o = r.options;

    // Probes one batch and records it; returns whether it is feasible.
    auto feasible = [&](int batch, const char* phase) {
        BatchProbeRecord rec;
        rec.batch = batch;
        rec.phase = phase;
        rec.probe = probe(batch);
        if (!rec.probe.fits) {
            rec.why = rec.probe.note.empty() ? "does not fit" : "does not fit: " + rec.probe.note;
        } else if (o.budget_bytes > 0) {
            SF_CHECK(rec.probe.bytes_needed > 0,
                     "batch search: probe(%d) reported no bytes_needed, which a memory budget needs", batch);
            if (rec.probe.bytes_needed > o.budget_bytes)
                rec.why = rt::format("needs %.2f GiB, over the %.2f GiB budget", gib(rec.probe.bytes_needed),
                                     gib(o.budget_bytes));
        }
        rec.feasible = rec.why.empty();
        r.probes.push_back(rec);
        return rec.feasible;
    };
    auto out_of_probes = [&] { return static_cast<int>(r.probes.size()) >= o.max_probes; };

    if (!feasible(o.min_batch, "double")) {
        const BatchProbeRecord& first = r.probes.front();
        SF_FAIL("batch search: the smallest batch, %d (granule %d), is not feasible: %s", o.min_batch, o.granule,
                first.why.c_str());
    }
    int lo = o.min_batch, hi = 0;  // lo feasible; hi the first infeasible (0: none yet)
    while (hi == 0 && lo < o.max_batch && !out_of_probes()) {
        const int next = static_cast<int>(std::min<long long>(2ll * lo, o.max_batch));
        if (feasible(next, "double"))
            lo = next;
        else
            hi = next;
    }
    while (hi != 0 && hi - lo > o.granule && !out_of_probes()) {
        const int mid = lo + (hi - lo) / o.granule / 2 * o.granule;
        if (feasible(mid, "bisect"))
            lo = mid;
        else
            hi = mid;
    }
    r.largest = lo;
    r.first_infeasible = hi;
    r.capped = hi == 0 && lo == o.max_batch;
    r.probe_limit_hit = !r.capped && (hi == 0 || hi - lo > o.granule);

    for (const BatchProbeRecord& p : r.probes) {  // fastest; ties go to the smaller batch
        if (!p.feasible || !(p.probe.samples_per_s > 0)) continue;
        if (p.probe.samples_per_s > r.fastest_samples_per_s ||
            (p.probe.samples_per_s == r.fastest_samples_per_s && p.batch < r.fastest)) {
            r.fastest = p.batch;
            r.fastest_samples_per_s = p.probe.samples_per_s;
        }
    }
    return r;
}

// ---- JSON ----

namespace {

json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

json batch_search_json(const BatchSearchResult& r) {
    json probes = json::array();
    for (const BatchProbeRecord& p : r.probes)
        probes.push_back({{"batch", p.batch},
                          {"phase", p.phase},
                          {"fits", p.probe.fits},
                          {"bytes_needed", p.probe.bytes_needed > 0 ? json(p.probe.bytes_needed) : json(nullptr)},
                          {"samples_per_s", p.probe.samples_per_s > 0 ? json(p.probe.samples_per_s) : json(nullptr)},
                          {"feasible", p.feasible},
                          {"why", str_or_null(p.why)},
                          {"note", str_or_null(p.probe.note)}});
    const BatchSearchOptions& o = r.options;
    return {{"budget_bytes", o.budget_bytes > 0 ? json(o.budget_bytes) : json(nullptr)},
            {"granule", o.granule},
            {"min_batch", o.min_batch},
            {"max_batch", o.max_batch},
            {"max_probes", o.max_probes},
            {"largest", r.largest},
            {"first_infeasible", r.first_infeasible > 0 ? json(r.first_infeasible) : json(nullptr)},
            {"capped", r.capped},
            {"probe_limit_hit", r.probe_limit_hit},
            {"fastest", r.fastest > 0 ? json(r.fastest) : json(nullptr)},
            {"fastest_samples_per_s", r.fastest > 0 ? json(r.fastest_samples_per_s) : json(nullptr)},
            {"probes", probes}};
}

namespace {

constexpr long long kMaxBatch = 1 << 20;
constexpr long long kMaxBytes = std::numeric_limits<long long>::max();

// What the probes say the summary fields must be.
struct ProbeSummary {
    long long largest = 0, first_infeasible = -1, fastest = -1;
    double fastest_sps = 0;
    bool complete = true;  // every probe could be read
};

// Checks one probe record and folds it into *sum.
void check_probe(JsonChecker& c, const json& p, const std::string& pp, long long granule, long long budget,
                 ProbeSummary* sum) {
    c.known_keys(p, pp, {"batch", "phase", "fits", "bytes_needed", "samples_per_s", "feasible", "why", "note"});
    long long batch = 0, bytes = 0;
    bool fits = false, feasible = false;
    double sps = 0;
    std::string why, phase;
    if (!c.integer(p, pp, "batch", &batch, 1, kMaxBatch) || !c.boolean(p, pp, "fits", &fits) ||
        !c.boolean(p, pp, "feasible", &feasible) || !c.integer(p, pp, "bytes_needed", &bytes, 1, kMaxBytes, true) ||
        !c.number(p, pp, "samples_per_s", &sps, 0, 1e12, true)) {
        sum->complete = false;
        return;
    }
    if (c.string(p, pp, "phase", &phase) && phase != "double" && phase != "bisect")
        c.add(pp + ".phase", "\"" + phase + "\"; expected \"double\" or \"bisect\"");
    c.string(p, pp, "why", &why, false, feasible);  // required when infeasible
    if (granule > 0 && batch % granule != 0)
        c.add(pp + ".batch", rt::format("%lld is not a multiple of the granule %lld", batch, granule));
    const bool expect = fits && (budget <= 0 || (bytes > 0 && bytes <= budget));
    if (feasible != expect)
        c.add(pp + ".feasible", rt::format("%s, but fits is %s and it needs %lld bytes of a %lld budget (-1: none)",
                                           feasible ? "true" : "false", fits ? "true" : "false", bytes, budget));
    if (feasible) sum->largest = std::max(sum->largest, batch);
    if (!feasible && (sum->first_infeasible < 0 || batch < sum->first_infeasible)) sum->first_infeasible = batch;
    if (feasible && std::isfinite(sps) && sps > 0 &&
        (sps > sum->fastest_sps || (sps == sum->fastest_sps && batch < sum->fastest))) {
        sum->fastest = batch;
        sum->fastest_sps = sps;
    }
}

}  // namespace

void validate_batch_search_json(JsonChecker& c, const json& b, const std::string& path) {
    c.known_keys(b, path,
                 {"budget_bytes", "granule", "min_batch", "max_batch", "max_probes", "largest", "first_infeasible",
                  "capped", "probe_limit_hit", "fastest", "fastest_samples_per_s", "probes"});
    long long budget = 0, granule = 0, lo = 0, hi = 0, i = 0, largest = 0, first_bad = 0, fastest = 0;
    double fastest_sps = 0;
    bool capped = false, limit = false;
    c.integer(b, path, "budget_bytes", &budget, 1, kMaxBytes, true);
    c.integer(b, path, "granule", &granule, 1, kMaxBatch);
    c.integer(b, path, "min_batch", &lo, 1, kMaxBatch);
    c.integer(b, path, "max_batch", &hi, 1, kMaxBatch);
    c.integer(b, path, "max_probes", &i, 1, kMaxBatch);
    c.integer(b, path, "largest", &largest, 1, kMaxBatch);
    c.integer(b, path, "first_infeasible", &first_bad, 1, kMaxBatch, true);
    c.boolean(b, path, "capped", &capped);
    c.boolean(b, path, "probe_limit_hit", &limit);
    c.integer(b, path, "fastest", &fastest, 1, kMaxBatch, true);
    c.number(b, path, "fastest_samples_per_s", &fastest_sps, 0, 1e12, true);
    const json* probes = c.get(b, path, "probes");
    if (!probes) return;
    if (!probes->is_array() || probes->empty()) return c.add(path + ".probes", "expected a non-empty array");
    ProbeSummary want;
    for (size_t k = 0; k < probes->size(); ++k)
        check_probe(c, (*probes)[k], rt::format("%s.probes[%zu]", path.c_str(), k), granule, budget, &want);
    if (!want.complete) return;
    if (largest != want.largest)
        c.add(path + ".largest", rt::format("%lld, but the largest feasible probe is %lld", largest, want.largest));
    if (first_bad != want.first_infeasible)
        c.add(path + ".first_infeasible", rt::format("%lld, but the smallest infeasible probe is %lld (-1: none)",
                                                     first_bad, want.first_infeasible));
    if (fastest != want.fastest)
        c.add(path + ".fastest",
              rt::format("%lld, but the fastest feasible probe is %lld (-1: none)", fastest, want.fastest));
    else if (fastest > 0)
        c.same(path, "fastest_samples_per_s", fastest_sps, want.fastest_sps, "the fastest probe's samples_per_s");
    if (capped != (first_bad < 0 && largest == hi))
        c.add(path + ".capped", rt::format("%s disagrees with largest %lld, max_batch %lld and first_infeasible",
                                           capped ? "true" : "false", largest, hi));
}

}  // namespace tools
