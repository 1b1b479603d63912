#include "tools/layer_check.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/error.h"

namespace tools {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kLossTerms[8] = {"focal_gap", "focal_slider", "offset", "hard_negative",
                                       "angle",     "padding_bce",  "y_axis", "total"};

double term(const model::LossTerms& t, int k) {
    const double v[8] = {t.focal_gap, t.focal_slider, t.offset, t.hard_negative,
                         t.angle,     t.padding_bce,  t.y_axis, t.total};
    return v[k];
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Leading dotted components two names share ("a.b.c", "a.b.d" -> 2).
int shared_components(const std::string& a, const std::string& b) {
    int n = 0;
    for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
        if (a[i] == '.') ++n;
    return n;
}

// Which layer each parameter belongs to: the layer whose name is its prefix, else (the weighted
// fuses' scalar weights) the layer sharing the most leading components with it. The tensor label
// is the name after the shared part.
struct ParamOwner {
    size_t layer = 0;
    std::string suffix;
};
std::vector<ParamOwner> assign_params(const std::vector<LayerCapture>& layers, const model::ParamTable& t) {
    std::vector<ParamOwner> owners;
    for (const model::ParamInfo& p : t.params) {
        ParamOwner o;
        int best = -1;
        for (size_t l = 0; l < layers.size(); ++l) {
            const std::string prefix = layers[l].name + ".";
            if (starts_with(p.name, prefix)) {
                o = {l, p.name.substr(prefix.size())};
                best = 1 << 30;
                break;
            }
            const int s = shared_components(p.name, layers[l].name);
            if (s > best) {
                best = s;
                o.layer = l;
            }
        }
        if (best < (1 << 30)) {
            size_t cut = 0;  // after the best-shared components
            for (int k = 0; k < best; ++k) cut = p.name.find('.', cut) + 1;
            o.suffix = p.name.substr(cut);
        }
        owners.push_back(o);
    }
    return owners;
}

// One parameter's slice of a capture's flat gradient range.
std::vector<float> param_grad(const StepCapture& c, const model::ParamInfo& p) {
    return std::vector<float>(c.param_grads.begin() + static_cast<long>(p.offset),
                              c.param_grads.begin() + static_cast<long>(p.offset + p.numel));
}

CheckEntry tensor_entry(const std::string& layer, const std::string& tensor, Phase phase, const std::vector<float>& got,
                        const std::vector<float>& ref, const CheckTolerance& tol) {
    SF_CHECK(got.size() == ref.size(), "check: %s '%s' has %zu elements, the reference %zu", layer.c_str(),
             tensor.c_str(), got.size(), ref.size());
    CheckEntry e;
    e.layer = layer;
    e.tensor = tensor;
    e.phase = phase;
    e.m = compare_tensors(got.data(), ref.data(), got.size());
    e.pass = within(e.m, tol);
    return e;
}

double norm(const float* p, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
    return std::sqrt(s);
}

// The parameter gradients' entries of layer l (network order), "~0" rule included.
void add_param_entries(CheckReport& r, std::vector<std::vector<size_t>>& param_entries, const StepCapture& ref,
                       const StepCapture& got, const model::ParamTable& t, const std::vector<ParamOwner>& owners,
                       size_t l) {
    for (size_t i = 0; i < t.params.size(); ++i) {
        if (owners[i].layer != l) continue;
        const model::ParamInfo& p = t.params[i];
        CheckEntry e = tensor_entry(ref.layers[l].name, "grad " + owners[i].suffix, Phase::Backward, param_grad(got, p),
                                    param_grad(ref, p), r.tol);
        e.param = static_cast<long>(i);
        const model::ParamInfo* beta = t.find(ref.layers[l].name + ".bn.bias");
        if (owners[i].suffix == "conv.bias" && beta) {
            e.rule = "~0";
            e.zero_scale = norm(ref.param_grads.data() + beta->offset, beta->numel);
            e.pass = e.m.nonfinite == 0 && e.m.got_norm <= 0.25 * e.zero_scale + 1e-6;
        }
        param_entries[l].push_back(r.entries.size());
        r.entries.push_back(e);
    }
}

// Entry indices in evaluation order: a wrong op shows first where it runs, and what follows it
// inherits its error. Forward outputs (as their forwards ended), loss terms, then per layer as its
// backward began: its output's gradient, its parameter gradients. Anything not observed goes last.
std::vector<size_t> evaluation_order(const StepCapture& ref, const std::vector<long>& out_entry,
                                     const std::vector<long>& grad_entry,
                                     const std::vector<std::vector<size_t>>& param_entries, size_t first_loss,
                                     size_t entries) {
    const size_t nl = out_entry.size();
    std::vector<size_t> order;
    std::vector<bool> placed(entries, false);
    auto place = [&](long i) {
        if (i >= 0 && !placed[static_cast<size_t>(i)]) {
            placed[static_cast<size_t>(i)] = true;
            order.push_back(static_cast<size_t>(i));
        }
    };
    for (size_t l : ref.forward_order) place(l < nl ? out_entry[l] : -1);
    for (size_t l = 0; l < nl; ++l) place(out_entry[l]);
    for (size_t i = first_loss; i < entries; ++i) place(static_cast<long>(i));
    for (size_t l : ref.backward_order) {
        if (l >= nl) continue;
        place(grad_entry[l]);
        for (size_t i : param_entries[l]) place(static_cast<long>(i));
    }
    for (size_t i = 0; i < entries; ++i) place(static_cast<long>(i));
    return order;
}

}  // namespace

TensorMetrics compare_tensors(const float* got, const float* ref, size_t n) {
    TensorMetrics m;
    m.numel = n;
    double dd = 0, rr = 0, gg = 0, gr = 0;
    for (size_t i = 0; i < n; ++i) {
        const double g = got[i], r = ref[i];
        if (!std::isfinite(g) || !std::isfinite(r)) {
            ++m.nonfinite;
            continue;
        }
        const double d = g - r;
        dd += d * d;
        rr += r * r;
        gg += g * g;
        gr += g * r;
        m.max_abs = std::max(m.max_abs, std::abs(d));
    }
    m.ref_norm = std::sqrt(rr);
    m.got_norm = std::sqrt(gg);
    if (m.nonfinite) {
        m.rel_l2 = m.cosine = m.max_abs = kNaN;
        return m;
    }
    m.rel_l2 = rr > 0 ? std::sqrt(dd / rr) : std::sqrt(dd);
    if (rr == 0 && gg == 0)
        m.cosine = 1;
    else if (rr == 0 || gg == 0)
        m.cosine = 0;
    else
        m.cosine = gr / std::sqrt(rr * gg);
    return m;
}

TensorMetrics compare_scalars(double got, double ref) {
    TensorMetrics m;
    m.numel = 1;
    m.ref_norm = std::abs(ref);
    m.got_norm = std::abs(got);
    m.cosine = kNaN;
    if (!std::isfinite(got) || !std::isfinite(ref)) {
        m.nonfinite = 1;
        m.rel_l2 = m.max_abs = kNaN;
        return m;
    }
    m.max_abs = std::abs(got - ref);
    m.rel_l2 = ref != 0 ? m.max_abs / std::abs(ref) : m.max_abs;
    return m;
}

bool within(const TensorMetrics& m, const CheckTolerance& tol, bool has_cosine) {
    if (m.nonfinite || !(m.rel_l2 <= tol.rel_l2)) return false;
    return !has_cosine || m.cosine >= tol.cosine;
}

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::Forward: return "forward";
        case Phase::Loss: return "loss";
        case Phase::Backward: return "backward";
    }
    return "?";
}

size_t CheckReport::failures() const {
    size_t n = 0;
    for (const CheckEntry& e : entries) n += e.pass ? 0 : 1;
    return n;
}

namespace {

// got/ref/floor values of entry e (a tensor: an output, an output gradient or a parameter gradient).
const std::vector<float>* capture_tensor(const StepCapture& c, const CheckEntry& e, size_t layer,
                                         std::vector<float>* scratch, const model::ParamTable& t) {
    if (e.tensor == "out") return &c.layers[layer].out;
    if (e.tensor == "grad out") return &c.layers[layer].grad_out;
    SF_CHECK(e.param >= 0 && static_cast<size_t>(e.param) < t.params.size(), "check: '%s %s' names no parameter",
             e.layer.c_str(), e.tensor.c_str());
    *scratch = param_grad(c, t.params[static_cast<size_t>(e.param)]);
    return scratch;
}

// The floor's judgement of a tensor beyond the fixed tolerance (build_report's comment).
void apply_floor(CheckEntry& e, const StepCapture& ref, const StepCapture& floor, size_t layer,
                 const model::ParamTable& t, double factor) {
    std::vector<float> a, b;
    const std::vector<float>* f = capture_tensor(floor, e, layer, &a, t);
    const std::vector<float>* r = capture_tensor(ref, e, layer, &b, t);
    SF_CHECK(f->size() == r->size(), "check: floor '%s %s' has %zu values, the reference %zu", e.layer.c_str(),
             e.tensor.c_str(), f->size(), r->size());
    e.has_floor = true;
    e.floor = compare_tensors(f->data(), r->data(), f->size());
    if (e.pass || !e.rule.empty() || e.m.nonfinite) return;
    const bool rel_ok = e.m.rel_l2 <= factor * e.floor.rel_l2;
    const bool cos_ok = (1.0 - e.m.cosine) <= factor * factor * (1.0 - e.floor.cosine);
    if (rel_ok && cos_ok) {
        e.pass = true;
        e.rule = "floor";
    }
}

}  // namespace

CheckReport build_report(const StepCapture& ref, const StepCapture& got, const model::ParamTable& t,
                         const CheckTolerance& tol, const StepCapture* floor, double floor_factor) {
    const size_t nl = ref.layers.size();
    SF_CHECK(got.layers.size() == nl, "check: %zu layers captured, the reference has %zu", got.layers.size(), nl);
    for (size_t l = 0; l < nl; ++l)
        SF_CHECK(got.layers[l].name == ref.layers[l].name, "check: layer %zu is '%s', the reference's is '%s'", l,
                 got.layers[l].name.c_str(), ref.layers[l].name.c_str());
    SF_CHECK(ref.param_grads.size() >= t.flat_size && got.param_grads.size() >= t.flat_size,
             "check: parameter gradients hold %zu / %zu floats, the table needs %zu", got.param_grads.size(),
             ref.param_grads.size(), t.flat_size);
    CheckReport r;
    r.tol = tol;
    const std::vector<ParamOwner> owners = assign_params(ref.layers, t);
    std::vector<long> out_entry(nl, -1), grad_entry(nl, -1);
    std::vector<std::vector<size_t>> param_entries(nl);
    std::vector<size_t> entry_layer;  // the layer of each tensor entry
    for (size_t l = 0; l < nl; ++l) {
        const LayerCapture &a = got.layers[l], &b = ref.layers[l];
        if (!b.out.empty() || !a.out.empty()) {
            out_entry[l] = static_cast<long>(r.entries.size());
            r.entries.push_back(tensor_entry(b.name, "out", Phase::Forward, a.out, b.out, tol));
        }
        if (!b.grad_out.empty() || !a.grad_out.empty()) {
            grad_entry[l] = static_cast<long>(r.entries.size());
            r.entries.push_back(tensor_entry(b.name, "grad out", Phase::Backward, a.grad_out, b.grad_out, tol));
        }
        add_param_entries(r, param_entries, ref, got, t, owners, l);
        entry_layer.resize(r.entries.size(), l);
    }
    const size_t first_loss = r.entries.size();
    if (floor) {
        SF_CHECK(floor->layers.size() == nl && floor->param_grads.size() >= t.flat_size,
                 "check: the floor capture does not match the network");
        r.floor_factor = floor_factor;
        for (size_t i = 0; i < first_loss; ++i) apply_floor(r.entries[i], ref, *floor, entry_layer[i], t, floor_factor);
    }
    for (int k = 0; k < 8; ++k) {
        CheckEntry e;
        e.layer = "loss";
        e.tensor = kLossTerms[k];
        e.phase = Phase::Loss;
        e.has_cosine = false;
        e.got_value = term(got.loss, k);
        e.ref_value = term(ref.loss, k);
        e.m = compare_scalars(e.got_value, e.ref_value);
        e.pass = e.m.nonfinite == 0 && e.m.max_abs <= tol.rel_l2 * e.m.ref_norm + tol.loss_abs;
        r.entries.push_back(e);
    }

    r.eval_order = evaluation_order(ref, out_entry, grad_entry, param_entries, first_loss, r.entries.size());
    for (size_t i : r.eval_order)
        if (!r.entries[i].pass) {
            r.first_failure = static_cast<long>(i);
            break;
        }
    return r;
}

// ---- text ----

namespace {

std::string num(double v, const char* fmt) {
    if (std::isnan(v)) return "nan";
    char buf[32];
    std::snprintf(buf, sizeof buf, fmt, v);
    return buf;
}

// "1.23e-03 0.999987x" for an entry (blank when absent); x marks beyond tolerance.
std::string cell(const CheckReport& r, long i) {
    char buf[64];
    if (i < 0) {
        std::snprintf(buf, sizeof buf, "%-19s", "-");
        return buf;
    }
    const CheckEntry& e = r.entries[static_cast<size_t>(i)];
    std::snprintf(buf, sizeof buf, "%8s %9s%s", num(e.m.rel_l2, "%.2e").c_str(), num(e.m.cosine, "%.6f").c_str(),
                  e.pass ? " " : "x");
    return buf;
}

std::string describe(const CheckReport& r, const CheckEntry& e) {
    std::string why;
    if (e.m.nonfinite) return rt::format("%zu non-finite values", e.m.nonfinite);
    if (e.rule == "~0")
        return rt::format("|grad| %.3e > 0.25 x |grad bn.bias| %.3e (expected ~0)", e.m.got_norm, e.zero_scale);
    if (e.phase == Phase::Loss)
        return rt::format("got %.6g, reference %.6g (rel %.2e > %.1e)", e.got_value, e.ref_value, e.m.rel_l2,
                          r.tol.rel_l2);
    if (!(e.m.rel_l2 <= r.tol.rel_l2)) why += rt::format("rel L2 %.3e > %.1e", e.m.rel_l2, r.tol.rel_l2);
    if (!(e.m.cosine >= r.tol.cosine))
        why += (why.empty() ? "" : ", ") + rt::format("cosine %.9g < %.9g", e.m.cosine, r.tol.cosine);
    if (e.has_floor)
        why += rt::format("; bf16-weights floor: rel L2 %.3e, cosine %.9g", e.floor.rel_l2, e.floor.cosine);
    return why;
}

// The parameter gradient a layer's line shows: a failure before a pass, a tensor judged by its
// metrics before a "~0" one (whose relative error is noise), then the larger relative L2.
bool worse(const CheckEntry& a, const CheckEntry& b) {
    const int ra = (a.pass ? 0 : 2) + (a.rule.empty() ? 1 : 0), rb = (b.pass ? 0 : 2) + (b.rule.empty() ? 1 : 0);
    if (ra != rb) return ra > rb;
    return !(a.m.rel_l2 <= b.m.rel_l2);  // NaN counts as worse
}

}  // namespace

std::string verdict(const CheckReport& r) {
    if (r.passed()) {
        size_t by_floor = 0;
        for (const CheckEntry& e : r.entries) by_floor += e.rule == "floor" ? 1 : 0;
        std::string v = rt::format("check: all %zu tensors within tolerance (rel L2 <= %.1e, cosine >= %.9g)",
                                   r.entries.size(), r.tol.rel_l2, r.tol.cosine);
        if (by_floor)
            v += rt::format("; %zu of them only within %.0fx the bf16-weights floor", by_floor, r.floor_factor);
        return v;
    }
    const CheckEntry& e = r.entries[static_cast<size_t>(r.first_failure)];
    return rt::format("check: first beyond tolerance: %s [%s] (%s: %s); %zu of %zu tensors beyond", e.layer.c_str(),
                      e.tensor.c_str(), phase_name(e.phase), describe(r, e).c_str(), r.failures(), r.entries.size());
}

std::string format_report(const CheckReport& r) {
    std::string s = rt::format("%-44s %-19s %-19s %-16s %-19s\n", "layer", "out rel_l2 cos", "grad out rel_l2 cos",
                               "param grad", "rel_l2 cos");
    size_t i = 0;
    while (i < r.entries.size() && r.entries[i].phase != Phase::Loss) {
        const std::string layer = r.entries[i].layer;
        long out = -1, grad = -1, worst = -1;
        std::string first;
        for (; i < r.entries.size() && r.entries[i].layer == layer && r.entries[i].phase != Phase::Loss; ++i) {
            const CheckEntry& e = r.entries[i];
            if (static_cast<long>(i) == r.first_failure) first = e.tensor;
            if (e.tensor == "out")
                out = static_cast<long>(i);
            else if (e.tensor == "grad out")
                grad = static_cast<long>(i);
            else if (worst < 0 || worse(e, r.entries[static_cast<size_t>(worst)]))
                worst = static_cast<long>(i);
        }
        const std::string pname = worst < 0 ? "-" : r.entries[static_cast<size_t>(worst)].tensor.substr(5);
        s += rt::format("%-44s %s %s %-16.16s %s%s\n", layer.c_str(), cell(r, out).c_str(), cell(r, grad).c_str(),
                        pname.c_str(), cell(r, worst).c_str(), first.empty() ? "" : ("  <- first: " + first).c_str());
    }
    s += rt::format("\n%-14s %14s %14s %10s\n", "loss term", "reference", "got", "rel diff");
    for (; i < r.entries.size(); ++i) {
        const CheckEntry& e = r.entries[i];
        s += rt::format("%-14s %14.6g %14.6g %10s%s\n", e.tensor.c_str(), e.ref_value, e.got_value,
                        num(e.m.rel_l2, "%.2e").c_str(), e.pass ? "" : " x");
    }
    return s + "\n" + verdict(r) + "\n";
}

// ---- JSON ----

namespace {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json entry_json(const CheckEntry& e) {
    nlohmann::json j = {{"layer", e.layer},
                        {"tensor", e.tensor},
                        {"phase", phase_name(e.phase)},
                        {"numel", e.m.numel},
                        {"ref_norm", number(e.m.ref_norm)},
                        {"got_norm", number(e.m.got_norm)},
                        {"rel_l2", number(e.m.rel_l2)},
                        {"cosine", e.has_cosine ? number(e.m.cosine) : nlohmann::json(nullptr)},
                        {"max_abs", number(e.m.max_abs)},
                        {"nonfinite", e.m.nonfinite},
                        {"pass", e.pass}};
    if (!e.rule.empty()) j["rule"] = e.rule;
    if (e.has_floor) j["floor"] = {{"rel_l2", number(e.floor.rel_l2)}, {"cosine", number(e.floor.cosine)}};
    return j;
}

}  // namespace

nlohmann::json report_json(const CheckReport& r, const nlohmann::json& meta) {
    nlohmann::json j = {{"schema", kCheckSchema}};
    if (meta.is_object())
        for (auto it = meta.begin(); it != meta.end(); ++it) j[it.key()] = it.value();
    j["passed"] = r.passed();
    j["failures"] = r.failures();
    j["tolerance"] = {{"rel_l2", r.tol.rel_l2}, {"cosine", r.tol.cosine}, {"loss_abs", r.tol.loss_abs}};
    if (r.floor_factor > 0) j["tolerance"]["floor_factor"] = r.floor_factor;
    j["first_failure"] =
        r.passed() ? nlohmann::json(nullptr) : entry_json(r.entries[static_cast<size_t>(r.first_failure)]);
    j["verdict"] = verdict(r);
    nlohmann::json loss = nlohmann::json::array(), logits = nlohmann::json::array(), entries = nlohmann::json::array();
    for (const CheckEntry& e : r.entries) {
        entries.push_back(entry_json(e));
        if (e.phase == Phase::Loss)
            loss.push_back({{"term", e.tensor},
                            {"reference", number(e.ref_value)},
                            {"got", number(e.got_value)},
                            {"rel", number(e.m.rel_l2)},
                            {"pass", e.pass}});
        // The heads' last convs' outputs are the logits.
        const std::string suffix = ".conv2";
        if (e.tensor == "out" && starts_with(e.layer, "dual_head.") && e.layer.size() > suffix.size() &&
            e.layer.compare(e.layer.size() - suffix.size(), suffix.size(), suffix) == 0)
            logits.push_back({{"head", e.layer.substr(10, e.layer.size() - 10 - suffix.size())},
                              {"rel_l2", number(e.m.rel_l2)},
                              {"cosine", number(e.m.cosine)},
                              {"pass", e.pass}});
    }
    j["loss"] = loss;
    j["logits"] = logits;
    j["entries"] = entries;
    return j;
}

}  // namespace tools
