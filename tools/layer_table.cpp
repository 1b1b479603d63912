// Per-layer table and its JSON form (tools/layer_table.h).
#include "tools/layer_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "runtime/error.h"

namespace tools {

using nlohmann::json;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json cost_json(const OpCost& c) {
    return {{"tensor_flops", c.tensor_flops}, {"simt_flops", c.simt_flops}, {"bytes", c.bytes}};
}

json peaks_json(const DevicePeaks& p) {
    return {{"device", p.device},
            {"entry", p.entry},
            {"source", p.source},
            {"tensor_tflops", p.tensor_tflops},
            {"simt_tflops", p.simt_tflops},
            {"hbm_gbps", p.hbm_gbps},
            {"known", p.known()}};
}

void check_row(const LayerRow& row) {
    SF_CHECK(!row.name.empty(), "layer report: a row has no name");
    SF_CHECK(std::isfinite(row.fwd_ms) && row.fwd_ms >= 0 && std::isfinite(row.bwd_ms) && row.bwd_ms >= 0,
             "layer report: row %s has times fwd %g ms, bwd %g ms; expected finite values >= 0", row.name.c_str(),
             row.fwd_ms, row.bwd_ms);
}

// "12.3%" or "-" when unknown.
std::string pct(double share) { return std::isfinite(share) ? rt::format("%.1f%%", 100 * share) : "-"; }
std::string num(const char* fmt, double v) { return std::isfinite(v) ? rt::format(fmt, v) : "-"; }

}  // namespace

LayerRow layer_row(std::string name, std::vector<double> fwd_samples_ms, std::vector<double> bwd_samples_ms,
                   const OpCost& fwd, const OpCost& bwd) {
    LayerRow r;
    r.name = std::move(name);
    r.fwd_ms = fwd_samples_ms.empty() ? 0 : median(fwd_samples_ms);
    r.bwd_ms = bwd_samples_ms.empty() ? 0 : median(bwd_samples_ms);
    r.fwd_samples_ms = std::move(fwd_samples_ms);
    r.bwd_samples_ms = std::move(bwd_samples_ms);
    r.fwd = fwd;
    r.bwd = bwd;
    check_row(r);
    return r;
}

LayerTotals layer_totals(const LayerReport& r) {
    LayerTotals t;
    for (const LayerRow& row : r.rows) {
        t.fwd_ms += row.fwd_ms;
        t.bwd_ms += row.bwd_ms;
        t.cost += row.fwd + row.bwd;
        t.floor_ms += roofline(row.fwd + row.bwd, row.fwd_ms + row.bwd_ms, r.peaks).floor_ms;
    }
    t.ms = t.fwd_ms + t.bwd_ms;
    t.aggregate = roofline(t.cost, t.ms, r.peaks);
    const bool step = r.step_ms > 0 && std::isfinite(r.step_ms);
    t.outside_ms = step ? r.step_ms - t.ms : kNan;
    t.times_floor = step && t.floor_ms > 0 ? r.step_ms / t.floor_ms : kNan;
    return t;
}

std::string format_layer_table(const LayerReport& r) {
    size_t w = 5;  // "total"
    for (const LayerRow& row : r.rows) w = std::max(w, row.name.size());
    w = std::min<size_t>(w, 48);
    const int iw = static_cast<int>(w);
    std::string out = rt::format("per-layer times (%s, batch %d, %dx%dx%d, median of %d step%s)\n",
                                 r.config.mode.c_str(), r.config.batch, r.config.height, r.config.width,
                                 r.config.channels, r.timed_steps, r.timed_steps == 1 ? "" : "s");
    out += rt::format("%-*s %9s %9s %9s %9s %9s %8s %8s  %s\n", iw, "layer", "fwd ms", "bwd ms", "GB", "GFLOP", "GB/s",
                      "TFLOP/s", "roofline", "bound");
    auto line = [&](const std::string& name, double f, double b, const OpCost& c, const Roofline& rl) {
        const std::string shown = name.size() > w ? name.substr(0, w - 1) + "~" : name;
        out +=
            rt::format("%-*s %9.3f %9.3f %9.3f %9.2f %9s %8s %8s%s%s\n", iw, shown.c_str(), f, b, c.bytes / 1e9,
                       c.flops() / 1e9, num("%.1f", rl.achieved_gbps).c_str(), num("%.2f", rl.achieved_tflops).c_str(),
                       pct(rl.share).c_str(), *rl.bound ? "  " : "", rl.bound);
    };
    for (const LayerRow& row : r.rows)
        line(row.name, row.fwd_ms, row.bwd_ms, row.fwd + row.bwd,
             roofline(row.fwd + row.bwd, row.fwd_ms + row.bwd_ms, r.peaks));
    const LayerTotals t = layer_totals(r);
    Roofline total = t.aggregate;  // the totals line shows the sum of floors against the sum of times
    total.share = t.ms > 0 ? t.floor_ms / t.ms : kNan;
    total.bound = "";
    line("total", t.fwd_ms, t.bwd_ms, t.cost, total);

    if (r.step_ms > 0)
        out += rt::format("step: %.3f ms measured; the layers add up to %.3f ms (%.3f ms outside them)\n", r.step_ms,
                          t.ms, t.outside_ms);
    if (r.peaks.known()) {
        out += rt::format("floor: %.3f ms as the sum of per-layer floors, %.3f ms as one roofline over the whole step",
                          t.floor_ms, t.aggregate.floor_ms);
        out += std::isfinite(t.times_floor) ? rt::format("; the step takes %.2fx its floor\n", t.times_floor) : "\n";
        out += rt::format("peaks: %s: %.1f TFLOP/s bf16 tensor, %.1f TFLOP/s fp32, %.0f GB/s (%s)\n",
                          r.peaks.entry.empty() ? r.peaks.device.c_str() : r.peaks.entry.c_str(), r.peaks.tensor_tflops,
                          r.peaks.simt_tflops, r.peaks.hbm_gbps, r.peaks.source.c_str());
    } else {
        out +=
            rt::format("no roofline: peaks of \"%s\" unknown (%s)\n", r.peaks.device.c_str(), r.peaks.source.c_str());
    }
    return out;
}

json layer_report_json(const LayerReport& r) {
    SF_CHECK(!r.rows.empty(), "layer report: no rows");
    SF_CHECK(r.timed_steps >= 1, "layer report: timed_steps must be >= 1, got %d", r.timed_steps);
    std::set<std::string> names;
    json rows = json::array();
    for (const LayerRow& row : r.rows) {
        check_row(row);
        SF_CHECK(names.insert(row.name).second, "layer report: duplicate row name %s", row.name.c_str());
        const OpCost c = row.fwd + row.bwd;
        const double ms = row.fwd_ms + row.bwd_ms;
        const Roofline rl = roofline(c, ms, r.peaks);
        json j = {{"name", row.name},
                  {"fwd_ms", row.fwd_ms},
                  {"bwd_ms", row.bwd_ms},
                  {"ms", ms},
                  {"fwd", cost_json(row.fwd)},
                  {"bwd", cost_json(row.bwd)},
                  {"gb", c.bytes / 1e9},
                  {"gflop", c.flops() / 1e9},
                  {"gbps", num_or_null(rl.achieved_gbps)},
                  {"tflops", num_or_null(rl.achieved_tflops)},
                  {"floor_ms", num_or_null(rl.floor_ms)},
                  {"roofline_share", num_or_null(rl.share)},
                  {"bound", rl.bound}};
        if (!row.fwd_samples_ms.empty()) j["fwd_samples_ms"] = row.fwd_samples_ms;
        if (!row.bwd_samples_ms.empty()) j["bwd_samples_ms"] = row.bwd_samples_ms;
        rows.push_back(j);
    }
    const LayerTotals t = layer_totals(r);
    const bool step = r.step_ms > 0 && std::isfinite(r.step_ms);
    json doc = {{"config", run_config_json(r.config, static_cast<size_t>(r.timed_steps))},
            {"peaks", peaks_json(r.peaks)},
            {"rows", rows},
            {"total",
             {{"fwd_ms", t.fwd_ms},
              {"bwd_ms", t.bwd_ms},
              {"ms", t.ms},
              {"gb", t.cost.bytes / 1e9},
              {"gflop", t.cost.flops() / 1e9},
              {"gbps", num_or_null(t.aggregate.achieved_gbps)},
              {"tflops", num_or_null(t.aggregate.achieved_tflops)},
              {"floor_ms", num_or_null(t.floor_ms)},
              {"roofline_share", num_or_null(t.ms > 0 ? t.floor_ms / t.ms : kNan)}}},
            {"step",
             {{"measured_ms", step ? json(r.step_ms) : json(nullptr)},
              {"layers_ms", t.ms},
              {"outside_layers_ms", num_or_null(t.outside_ms)},
              {"floor_ms", num_or_null(t.floor_ms)},
              {"aggregate_floor_ms", num_or_null(t.aggregate.floor_ms)},
              {"times_floor", num_or_null(t.times_floor)}}}};
    if (!r.conv_plans.empty()) doc["conv_plans"] = r.conv_plans;
    return doc;
}

// ---- validation ----

namespace {

bool read_cost(JsonChecker& c, const json& row, const std::string& path, const char* key, OpCost* out) {
    const json* o = nullptr;
    if (!c.object(row, path, key, &o)) return false;
    const std::string p = path + "." + key;
    c.known_keys(*o, p, {"tensor_flops", "simt_flops", "bytes"});
    return c.number(*o, p, "tensor_flops", &out->tensor_flops, 0, 1e30) &
           c.number(*o, p, "simt_flops", &out->simt_flops, 0, 1e30) & c.number(*o, p, "bytes", &out->bytes, 0, 1e30);
}

// A number field that must equal `want`, or be null when want is not finite.
void derived(JsonChecker& c, const json& obj, const std::string& path, const char* key, double want, const char* what) {
    double got = 0;
    if (!c.number(obj, path, key, &got, -1e30, 1e30, true)) return;
    if (std::isfinite(want) != std::isfinite(got))
        c.add(path + "." + key, rt::format("%s but should be %s (%s)", std::isfinite(got) ? "a number" : "null",
                                           std::isfinite(want) ? "a number" : "null", what));
    else
        c.same(path, key, got, want, what);
}

void check_samples(JsonChecker& c, const json& row, const std::string& path, const char* key, double ms) {
    if (!row.contains(key)) return;
    const json& s = row[key];
    std::vector<double> v;
    for (const json& x : s)
        if (x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() >= 0) v.push_back(x.get<double>());
    if (!s.is_array() || s.empty() || v.size() != s.size())
        return c.add(path + "." + key, "expected a non-empty array of times >= 0 ms");
    c.same(path, key[0] == 'f' ? "fwd_ms" : "bwd_ms", ms, median(v), "the median of the samples");
}

DevicePeaks check_peaks(JsonChecker& c, const json& o, const std::string& pp) {
    DevicePeaks peaks;
    bool known = false;
    c.known_keys(o, pp, {"device", "entry", "source", "tensor_tflops", "simt_tflops", "hbm_gbps", "known"});
    c.string(o, pp, "device", &peaks.device, true);
    c.string(o, pp, "entry", &peaks.entry, true);
    c.string(o, pp, "source", &peaks.source);
    c.number(o, pp, "tensor_tflops", &peaks.tensor_tflops, 0, 1e6);
    c.number(o, pp, "simt_tflops", &peaks.simt_tflops, 0, 1e6);
    c.number(o, pp, "hbm_gbps", &peaks.hbm_gbps, 0, 1e7);
    if (c.boolean(o, pp, "known", &known) && known != peaks.known())
        c.add(pp + ".known", "disagrees with the peaks given");
    return peaks;
}

// Checks one row (its derived numbers recomputed at `peaks`); false when it cannot be read.
bool check_row_json(JsonChecker& c, const json& row, const std::string& rp, const DevicePeaks& peaks, LayerRow* r) {
    c.known_keys(row, rp,
                 {"name", "fwd_ms", "bwd_ms", "ms", "fwd", "bwd", "gb", "gflop", "gbps", "tflops", "floor_ms",
                  "roofline_share", "bound", "fwd_samples_ms", "bwd_samples_ms"});
    c.string(row, rp, "name", &r->name);
    if (!(c.number(row, rp, "fwd_ms", &r->fwd_ms, 0, 1e9) & c.number(row, rp, "bwd_ms", &r->bwd_ms, 0, 1e9) &
          read_cost(c, row, rp, "fwd", &r->fwd) & read_cost(c, row, rp, "bwd", &r->bwd)))
        return false;
    check_samples(c, row, rp, "fwd_samples_ms", r->fwd_ms);
    check_samples(c, row, rp, "bwd_samples_ms", r->bwd_ms);
    const OpCost cost = r->fwd + r->bwd;
    const Roofline rl = roofline(cost, r->fwd_ms + r->bwd_ms, peaks);
    derived(c, row, rp, "ms", r->fwd_ms + r->bwd_ms, "fwd_ms + bwd_ms");
    derived(c, row, rp, "gb", cost.bytes / 1e9, "bytes / 1e9");
    derived(c, row, rp, "gflop", cost.flops() / 1e9, "FLOPs / 1e9");
    derived(c, row, rp, "gbps", rl.achieved_gbps, "bytes / time");
    derived(c, row, rp, "tflops", rl.achieved_tflops, "FLOPs / time");
    derived(c, row, rp, "floor_ms", rl.floor_ms, "max(compute, memory) time at the peaks");
    derived(c, row, rp, "roofline_share", rl.share, "floor_ms / ms");
    std::string bound;
    if (c.string(row, rp, "bound", &bound) && bound != rl.bound)
        c.add(rp + ".bound", "\"" + bound + "\"; the peaks make it \"" + rl.bound + "\"");
    return true;
}

void check_totals(JsonChecker& c, const json& total, const std::string& tp, const LayerTotals& t) {
    c.known_keys(total, tp, {"fwd_ms", "bwd_ms", "ms", "gb", "gflop", "gbps", "tflops", "floor_ms", "roofline_share"});
    derived(c, total, tp, "fwd_ms", t.fwd_ms, "the sum over rows");
    derived(c, total, tp, "bwd_ms", t.bwd_ms, "the sum over rows");
    derived(c, total, tp, "ms", t.ms, "the sum over rows");
    derived(c, total, tp, "gb", t.cost.bytes / 1e9, "the sum over rows");
    derived(c, total, tp, "gflop", t.cost.flops() / 1e9, "the sum over rows");
    derived(c, total, tp, "gbps", t.aggregate.achieved_gbps, "total bytes / total time");
    derived(c, total, tp, "tflops", t.aggregate.achieved_tflops, "total FLOPs / total time");
    derived(c, total, tp, "floor_ms", t.floor_ms, "the sum of the rows' floors");
    derived(c, total, tp, "roofline_share", t.ms > 0 ? t.floor_ms / t.ms : kNan, "floor_ms / ms");
}

void check_step(JsonChecker& c, const json& step, const std::string& sp, const LayerTotals& t) {
    c.known_keys(step, sp,
                 {"measured_ms", "layers_ms", "outside_layers_ms", "floor_ms", "aggregate_floor_ms", "times_floor"});
    derived(c, step, sp, "layers_ms", t.ms, "the sum over rows");
    derived(c, step, sp, "outside_layers_ms", t.outside_ms, "measured_ms - layers_ms");
    derived(c, step, sp, "floor_ms", t.floor_ms, "the sum of the rows' floors");
    derived(c, step, sp, "aggregate_floor_ms", t.aggregate.floor_ms, "the roofline of the summed cost");
    derived(c, step, sp, "times_floor", t.times_floor, "measured_ms / floor_ms");
}

}  // namespace

void validate_layers_json(JsonChecker& c, const json& j, const std::string& path) {
    if (!j.is_object()) return c.add(path, "expected an object");
    c.known_keys(j, path, {"config", "peaks", "rows", "total", "step", "conv_plans"});
    if (j.contains("conv_plans")) {
        const json& cp = j["conv_plans"];
        if (!cp.is_array()) {
            c.add(path + ".conv_plans", "expected an array of strings");
        } else {
            for (size_t k = 0; k < cp.size(); ++k)
                if (!cp[k].is_string() || cp[k].get<std::string>().empty())
                    c.add(rt::format("%s.conv_plans[%zu]", path.c_str(), k), "expected a non-empty string");
        }
    }
    const json* o = nullptr;
    long long batch = 0, steps = 0;
    if (c.object(j, path, "config", &o)) {
        c.known_keys(*o, path + ".config",
                     {"batch", "height", "width", "channels", "mode", "warmup_steps", "timed_steps"});
        validate_run_config(c, *o, path + ".config", &batch, &steps, true);
    }
    LayerReport rep;
    if (c.object(j, path, "peaks", &o)) rep.peaks = check_peaks(c, *o, path + ".peaks");
    const json* rows = c.get(j, path, "rows");
    if (!rows) return;
    if (!rows->is_array() || rows->empty()) return c.add(path + ".rows", "expected a non-empty array");
    std::set<std::string> names;
    for (size_t k = 0; k < rows->size(); ++k) {
        const std::string rp = rt::format("%s.rows[%zu]", path.c_str(), k);
        LayerRow r;
        if (!check_row_json(c, (*rows)[k], rp, rep.peaks, &r)) continue;
        if (!r.name.empty() && !names.insert(r.name).second) c.add(rp + ".name", "duplicate layer name " + r.name);
        rep.rows.push_back(r);
    }
    if (rep.rows.size() != rows->size()) return;  // totals cannot be checked against broken rows
    const json* step = nullptr;
    double measured = 0;
    if (c.object(j, path, "step", &step) && c.number(*step, path + ".step", "measured_ms", &measured, 0, 1e9, true))
        rep.step_ms = std::isfinite(measured) ? measured : 0;
    const LayerTotals t = layer_totals(rep);
    if (c.object(j, path, "total", &o)) check_totals(c, *o, path + ".total", t);
    if (step) check_step(c, *step, path + ".step", t);
}

}  // namespace tools
