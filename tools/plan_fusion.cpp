// cuDNN's BatchNorm fusion graphs, built and planned, never executed (tools/plan_fusion.h).
#include "tools/plan_fusion.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/conv_cudnn_probe.h"
#include "runtime/cudnn_graph.h"
#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tools/plan_cudnn.h"
#include "tools/plan_fusion_time.h"

namespace tools {

namespace {

struct FusionShape {
    const char* name;
    int64_t n, c_in, h, w, c_out, k;
};

// Builds one graph's descriptors; each tensor gets a fresh uid, and each non-virtual one a role (what
// `--time` binds it to).
class GraphBuilder {
public:
    const rt::CudnnDesc& tensor(cudnnDataType_t t, std::vector<int64_t> dims, FusionRole role) {
        return tensor(t, std::move(dims), false, role);
    }
    const rt::CudnnDesc& virtual_tensor(cudnnDataType_t t, std::vector<int64_t> dims) {
        return tensor(t, std::move(dims), true, FusionRole::X);
    }
    // y = mode(x [, b]) in fp32.
    const rt::CudnnDesc& pointwise(cudnnPointwiseMode_t mode, const rt::CudnnDesc& x, const rt::CudnnDesc* b,
                                   const rt::CudnnDesc& y) {
        rt::CudnnDesc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
            .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
        pw.finalize();
        rt::CudnnDesc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
        if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
        op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
        op.finalize();
        keep(std::move(pw));
        return op_(std::move(op));
    }
    // Per-channel sum and sum of squares of x (fp32 outputs of shape (1, C, 1, 1)).
    const rt::CudnnDesc& genstats(const rt::CudnnDesc& x, int64_t c) {
        const rt::CudnnDesc& sum = tensor(CUDNN_DATA_FLOAT, {1, c, 1, 1}, FusionRole::Sum);
        const rt::CudnnDesc& sq = tensor(CUDNN_DATA_FLOAT, {1, c, 1, 1}, FusionRole::SqSum);
        rt::CudnnDesc op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
        const cudnnGenStatsMode_t m = CUDNN_GENSTATS_SUM_SQSUM;
        op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &m)
            .set_data_type(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_DATA_FLOAT)
            .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, x)
            .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
            .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sq);
        op.finalize();
        return op_(std::move(op));
    }
    bool conv(const rt::CudnnDesc& x, const rt::CudnnDesc& w, const rt::CudnnDesc& y, const rt::CudnnDesc& cd,
              std::string* why) {
        rt::CudnnDesc op;
        if (!kern::conv_cudnn_operation(kern::ConvOp::Fprop, x, w, y, cd, 0.0f, &op, why)) return false;
        op_(std::move(op));
        return true;
    }
    const std::vector<const rt::CudnnDesc*>& ops() const { return ops_; }
    const std::vector<FusionBinding>& bindings() const { return bindings_; }

private:
    const rt::CudnnDesc& tensor(cudnnDataType_t t, std::vector<int64_t> dims, bool is_virtual, FusionRole role) {
        rt::CudnnTensorSpec s;
        s.dtype = t;
        s.strides = rt::channels_last_strides(dims);
        s.dims = std::move(dims);
        s.uid = next_uid_++;
        s.is_virtual = is_virtual;
        if (!is_virtual) bindings_.push_back({s.uid, role});
        return keep(rt::cudnn_tensor(s));
    }
    const rt::CudnnDesc& keep(rt::CudnnDesc d) {
        descs_.push_back(std::make_unique<rt::CudnnDesc>(std::move(d)));
        return *descs_.back();
    }
    const rt::CudnnDesc& op_(rt::CudnnDesc d) {
        const rt::CudnnDesc& r = keep(std::move(d));
        ops_.push_back(&r);
        return r;
    }
    int64_t next_uid_ = 1;
    std::vector<std::unique_ptr<rt::CudnnDesc>> descs_;
    std::vector<const rt::CudnnDesc*> ops_;
    std::vector<FusionBinding> bindings_;
};

enum class Variant { Control, GenStats, Prologue, PrologueGenStats };

const char* act_name(cudnnPointwiseMode_t a) {
    return a == CUDNN_POINTWISE_IDENTITY ? "identity" : a == CUDNN_POINTWISE_RELU_FWD ? "relu" : "silu";
}

// A graph's record before any engine is tried (what stays of a refused graph).
nlohmann::json graph_record(bool accepted, const std::string& reason) {
    return {{"accepted", accepted},           {"reason", reason},          {"engines", 0},
            {"engines_finalized", 0},         {"engines_planned", 0},      {"first_planned_engine", nullptr},
            {"heuristic_configs", 0},         {"heuristic_plans", 0},      {"first_heuristic_plan", nullptr},
            {"workspace_bytes", nullptr}};
}

// Every engine of the graph by global index (the heuristics may propose fewer), then the heuristics'
// own proposals, each with whether it finalizes into an execution plan; the first of those plans (and
// its workspace) goes to *plan when given.
nlohmann::json probe_graph(const rt::CudnnTarget& t, const GraphBuilder& b, rt::CudnnDesc* first_plan = nullptr,
                           int64_t* first_ws = nullptr) {
    rt::CudnnDesc g;
    std::string why;
    const bool accepted = rt::cudnn_try_op_graph(t, b.ops(), &g, &why);
    nlohmann::json r = graph_record(accepted, why);
    if (!accepted) return r;
    const int64_t count = g.get_i64(CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT);
    int finalized = 0, planned = 0;
    for (int64_t i = 0; i < count; ++i) {
        rt::CudnnDesc e(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        e.set_desc(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g).set_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, i);
        if (t.device) e.set_desc(CUDNN_ATTR_ENGINE_DEVICEPROP, *t.device);
        std::string w;
        if (e.try_finalize(&w) != CUDNN_STATUS_SUCCESS) continue;
        ++finalized;
        rt::CudnnEngineConfig c;
        c.engine_id = i;
        c.cfg = rt::CudnnDesc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        c.cfg.set_desc(CUDNN_ATTR_ENGINECFG_ENGINE, e);
        if (c.cfg.try_finalize(&w) != CUDNN_STATUS_SUCCESS) continue;
        rt::CudnnDesc plan;
        int64_t ws = 0;
        if (!rt::cudnn_try_plan(t, c, &plan, &ws, &w)) continue;
        if (planned++ == 0) {
            r["first_planned_engine"] = i;
            r["workspace_bytes"] = ws;
        }
    }
    r["engines"] = count;
    r["engines_finalized"] = finalized;
    r["engines_planned"] = planned;
    const std::vector<rt::CudnnEngineConfig> cfgs = rt::cudnn_engine_configs(t, g, &why);
    int hplans = 0;
    for (const rt::CudnnEngineConfig& c : cfgs) {
        rt::CudnnDesc plan;
        int64_t ws = 0;
        std::string w;
        if (!rt::cudnn_try_plan(t, c, &plan, &ws, &w)) continue;
        if (hplans++ == 0) {
            r["first_heuristic_plan"] = c.describe() + rt::format(" ws %lld", static_cast<long long>(ws));
            if (first_plan) *first_plan = std::move(plan), *first_ws = ws;
        }
    }
    r["heuristic_configs"] = cfgs.size();
    r["heuristic_plans"] = hplans;
    if (cfgs.empty()) r["reason"] = why;
    return r;
}

kern::Act act_of(cudnnPointwiseMode_t a) {
    return a == CUDNN_POINTWISE_IDENTITY ? kern::Act::None : a == CUDNN_POINTWISE_RELU_FWD ? kern::Act::Relu
                                                                                         : kern::Act::Silu;
}

// "fused 0.123 ms, unfused 0.200 ms (conv 0.100 + apply 0.050 + stats 0.050): 1.63x; y rel L2 2e-03,
// sums 1e-06 / 2e-06: ok", "conv 0.100 ms" (control), or the error.
std::string fusion_time_text(const nlohmann::json& t) {
    if (t.contains("error")) return "not timed: " + t["error"].get<std::string>().substr(0, 160);
    if (!t.contains("unfused_ms")) return rt::format("timed: conv %.4f ms", t["ms"].get<double>());
    const std::string label = t.value("label", "fused");
    const nlohmann::json& u = t["unfused"];
    std::string parts = rt::format("conv %.4f", u["conv_ms"].get<double>());
    if (u.contains("apply_ms")) parts += rt::format(" + apply %.4f", u["apply_ms"].get<double>());
    if (u.contains("stats_ms")) parts += rt::format(" + stats %.4f", u["stats_ms"].get<double>());
    std::string check;
    const nlohmann::json& c = t["check"];
    const auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; };  // null: NaN
    if (c.contains("y_rel_l2")) check += rt::format("; y rel L2 %.1e", num(c["y_rel_l2"]));
    if (c.contains("sum_rel_err"))
        check += rt::format("; sums %.1e / %.1e", num(c["sum_rel_err"]), num(c["sqsum_rel_err"]));
    if (c.contains("mean_err_in_std"))
        check += rt::format("; mean %.1e std, invstd %.1e", num(c["mean_err_in_std"]), num(c["invstd_rel_err"]));
    return rt::format("timed: %s %.4f ms, unfused %.4f ms (%s): %.2fx%s: %s", label.c_str(), t["ms"].get<double>(),
                      t["unfused_ms"].get<double>(), parts.c_str(), t["speedup"].get<double>(), check.c_str(),
                      t["ok"].get<bool>() ? "ok" : "CHECK FAILED");
}

// One graph's lines of the report: its engines and plans (or why cuDNN refused it), and its timing.
std::string graph_lines(const nlohmann::json& g) {
    if (g.contains("kernel"))  // the project's own kernel in the same role (FusionTimer::time_custom)
        return rt::format("    %-46s project kernel %s\n      %s\n", g["graph"].get<std::string>().c_str(),
                          g["kernel"].get<std::string>().c_str(), fusion_time_text(g["time"]).c_str());
    if (!g["accepted"].get<bool>())
        return rt::format("    %-46s graph refused: %s\n", g["graph"].get<std::string>().c_str(),
                          g["reason"].get<std::string>().substr(0, 120).c_str());
    std::string out =
        rt::format("    %-46s engines %2d, %2d finalize, %2d plan; heuristics %2d, %2d plan%s%s\n",
                   g["graph"].get<std::string>().c_str(), g["engines"].get<int>(), g["engines_finalized"].get<int>(),
                   g["engines_planned"].get<int>(), g["heuristic_configs"].get<int>(), g["heuristic_plans"].get<int>(),
                   g["first_heuristic_plan"].is_null() ? "" : ": ",
                   g["first_heuristic_plan"].is_null() ? "" : g["first_heuristic_plan"].get<std::string>().c_str());
    if (g.contains("time")) out += "      " + fusion_time_text(g["time"]) + "\n";
    return out;
}

// exec: time and check the graphs on this GPU (`--time`; tools/plan_fusion_time.h), only those the
// step would use (fp32 scale and bias, identity or SiLU); null: probe every graph, execute nothing.
// Each graph's lines also go to stderr as it is done (runtime compilation makes a graph take
// seconds on a GPU): a command cut at its time limit still shows the graphs it finished.
nlohmann::json fusion_for(const PlanArgs& a, const rt::CudnnTarget& t, const std::string& device,
                          const std::string& source, const rt::Exec* exec = nullptr) {
    const int64_t n = a.batch, h4 = a.height / 4, w4 = a.width / 4;
    const FusionShape shapes[] = {
        {"1x1 32->64 at 1/4 (LiteBlock expand)", n, 32, h4, w4, 64, 1},
        {"1x1 64->32 at 1/4 (LiteBlock project)", n, 64, h4, w4, 32, 1},
        {"3x3 32->32 at 1/4 (fusion smooth)", n, 32, h4, w4, 32, 3},
        {"3x3 128->128 at 1/16 (FPN smooth)", n, 128, h4 / 4, w4 / 4, 128, 3},
    };
    nlohmann::json graphs = nlohmann::json::array();
    int control = 0, fused = 0, timed = 0, checked_ok = 0, custom_timed = 0, custom_ok = 0;
    uint64_t seed = 7000;
    const size_t nshapes = a.fusion_smoke ? 1 : sizeof(shapes) / sizeof(shapes[0]);
    const auto t0 = std::chrono::steady_clock::now();
    size_t done = 0;
    for (size_t si = 0; si < nshapes; ++si) {
        const FusionShape& s = shapes[si];
        SF_CHECK(s.h > 0 && s.w > 0, "plan --fusion-graphs: the input %dx%d is too small for the 1/16 shapes",
                 a.height, a.width);
        rt::CudnnConvSpec cs;
        const int64_t pad = (s.k - 1) / 2;
        cs.pre_pad = {pad, pad};
        cs.post_pad = {pad, pad};
        cs.stride = {1, 1};
        cs.dilation = {1, 1};
        struct V {
            Variant v;
            cudnnPointwiseMode_t act;
            cudnnDataType_t affine;
        };
        std::vector<V> variants = {{Variant::Control, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT},
                                   {Variant::GenStats, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT}};
        for (cudnnDataType_t affine : {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16})
            for (cudnnPointwiseMode_t act : {CUDNN_POINTWISE_IDENTITY, CUDNN_POINTWISE_RELU_FWD,
                                             CUDNN_POINTWISE_SWISH_FWD})
                if (!exec || (affine == CUDNN_DATA_FLOAT && act != CUDNN_POINTWISE_RELU_FWD))
                    variants.push_back({Variant::Prologue, act, affine});
        for (cudnnDataType_t affine : {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16})
            if (!exec || affine == CUDNN_DATA_FLOAT)
                variants.push_back({Variant::PrologueGenStats, CUDNN_POINTWISE_SWISH_FWD, affine});
        if (a.fusion_smoke) variants = {variants.front(), variants.back()};
        std::unique_ptr<FusionTimer> timer;
        if (exec) timer = std::make_unique<FusionTimer>(*exec, FusionDims{s.n, s.c_in, s.h, s.w, s.c_out, s.k}, seed += 10);
        for (const V& v : variants) {
            const bool prologue = v.v == Variant::Prologue || v.v == Variant::PrologueGenStats;
            const bool genstats = v.v == Variant::GenStats || v.v == Variant::PrologueGenStats;
            std::string name = v.v == Variant::Control ? "conv alone (control)" : "conv";
            if (prologue)
                name = rt::format("scale+bias (%s) + %s + conv", v.affine == CUDNN_DATA_FLOAT ? "fp32" : "bf16",
                                  act_name(v.act));
            if (genstats) name += " + genstats";
            GraphBuilder b;
            nlohmann::json r;
            rt::CudnnDesc plan;
            int64_t ws = 0;
            try {  // a cuDNN that lacks a descriptor type (an old runtime) refuses the graph, not the run
                const rt::CudnnDesc cd = rt::cudnn_conv_desc(cs);
                const rt::CudnnDesc& x = b.tensor(CUDNN_DATA_BFLOAT16, {s.n, s.c_in, s.h, s.w}, FusionRole::X);
                const rt::CudnnDesc& w = b.tensor(CUDNN_DATA_BFLOAT16, {s.c_out, s.c_in, s.k, s.k}, FusionRole::W);
                const rt::CudnnDesc& y = b.tensor(CUDNN_DATA_BFLOAT16, {s.n, s.c_out, s.h, s.w}, FusionRole::Y);
                const rt::CudnnDesc* in = &x;
                if (prologue) {
                    const rt::CudnnDesc& scale = b.tensor(v.affine, {1, s.c_in, 1, 1}, FusionRole::Scale);
                    const rt::CudnnDesc& bias = b.tensor(v.affine, {1, s.c_in, 1, 1}, FusionRole::Bias);
                    const rt::CudnnDesc& t1 = b.virtual_tensor(CUDNN_DATA_FLOAT, {s.n, s.c_in, s.h, s.w});
                    const rt::CudnnDesc& t2 = b.virtual_tensor(CUDNN_DATA_FLOAT, {s.n, s.c_in, s.h, s.w});
                    const rt::CudnnDesc& t3 = b.virtual_tensor(CUDNN_DATA_BFLOAT16, {s.n, s.c_in, s.h, s.w});
                    b.pointwise(CUDNN_POINTWISE_MUL, x, &scale, t1);
                    b.pointwise(CUDNN_POINTWISE_ADD, t1, &bias, t2);
                    b.pointwise(v.act, t2, nullptr, t3);
                    in = &t3;
                }
                std::string why;
                if (!b.conv(*in, w, y, cd, &why)) {
                    r = graph_record(false, "convolution operation refused: " + why);
                } else {
                    if (genstats) b.genstats(y, s.c_out);
                    r = probe_graph(t, b, &plan, &ws);
                }
            } catch (const rt::Error& e) {
                r = graph_record(false, std::string("descriptor refused: ") + e.what());
            }
            r["shape"] = s.name;
            r["graph"] = name;
            const bool ok = r["engines_planned"].get<int>() > 0 || r["heuristic_plans"].get<int>() > 0;
            (v.v == Variant::Control ? control : fused) += ok ? 1 : 0;
            if (timer && plan.valid()) {
                r["time"] = v.v == Variant::Control
                                ? timer->set_control(std::move(plan), ws, b.bindings())
                                : timer->time_fused(plan, ws, b.bindings(), prologue, act_of(v.act),
                                                    v.affine == CUDNN_DATA_BFLOAT16, genstats);
                if (v.v != Variant::Control && !r["time"].contains("error")) {
                    ++timed;
                    checked_ok += r["time"]["ok"].get<bool>() ? 1 : 0;
                }
            }
            graphs.push_back(r);
            std::fprintf(stderr, "fusion graph %zu of %zu (%.1f s): %s\n%s", ++done, nshapes * variants.size(),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), s.name,
                         graph_lines(r).c_str());
            std::fflush(stderr);
        }
        // The project's own 1x1 conv in the roles of the graphs above (docs/KERNELS_PWCONV.md): plain, with
        // the statistics epilogue, with the SiLU prologue, with both (the smoke run: plain and both).
        if (timer && s.k == 1) {
            struct C {
                bool prologue, stats;
            };
            std::vector<C> customs = {{false, false}, {false, true}, {true, false}, {true, true}};
            if (a.fusion_smoke) customs = {customs.front(), customs.back()};
            for (const C& c : customs) {
                std::string name = c.prologue ? "scale+bias + silu + pwconv" : "pwconv";
                if (c.stats) name += " + statistics";
                nlohmann::json r = {{"shape", s.name}, {"graph", name}, {"kernel", "kernels/pwconv.cu"}};
                r["time"] = timer->time_custom(c.prologue, kern::Act::Silu, c.stats);
                if (!r["time"].contains("error")) {
                    ++custom_timed;
                    custom_ok += r["time"]["ok"].get<bool>() ? 1 : 0;
                }
                graphs.push_back(r);
                std::fprintf(stderr, "project kernel (%.1f s): %s\n%s",
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), s.name,
                             graph_lines(r).c_str());
                std::fflush(stderr);
            }
        }
    }
    nlohmann::json d = {{"device", device},
                        {"source", source},
                        {"cudnn_version", rt::cudnn_version_string(cudnnGetVersion())},
                        {"shapes", nshapes},
                        {"graphs", graphs},
                        {"control_planned", control},
                        {"fused_planned", fused}};
    if (exec) {
        d["fused_timed"] = timed;
        d["fused_checks_ok"] = checked_ok;
        d["custom_timed"] = custom_timed;
        d["custom_checks_ok"] = custom_ok;
    }
    return d;
}

}  // namespace

nlohmann::json cudnn_fusion_json(const PlanArgs& a, const std::string& device_json, const std::string& device_path) {
    std::string name;
    const rt::CudnnDesc device = device_prop_descriptor(device_json, device_path, &name);
    return fusion_for(a, rt::CudnnTarget::of(device), name, device_path);
}

nlohmann::json cudnn_fusion_json_gpu(const PlanArgs& a) {
    const rt::DeviceInfo d = rt::query_device_info(0);
    SF_CHECK(d.available, "plan: --cudnn-device gpu needs a usable CUDA device here: %s", d.reason.c_str());
    const rt::CudaContext ctx(0);
    return fusion_for(a, rt::CudnnTarget::of(ctx.exec().cudnn), d.name, "gpu 0 (cuDNN handle)",
                      a.fusion_time ? &ctx.exec() : nullptr);
}


std::string cudnn_fusion_text(const nlohmann::json& d) {
    std::string out = rt::format("cuDNN %s BatchNorm fusion graphs for %s (%s), %s:\n",
                                 d["cudnn_version"].get<std::string>().c_str(), d["device"].get<std::string>().c_str(),
                                 d["source"].get<std::string>().c_str(),
                                 d.contains("fused_timed") ? "built, executed and timed" : "built and not executed");
    std::string shape;
    for (const nlohmann::json& g : d["graphs"]) {
        if (g["shape"].get<std::string>() != shape) {
            shape = g["shape"].get<std::string>();
            out += "  " + shape + "\n";
        }
        out += graph_lines(g);
    }
    out += rt::format("control graphs with a plan: %d of %zu shapes; fused graphs with a plan: %d\n",
                      d["control_planned"].get<int>(), d["shapes"].get<size_t>(), d["fused_planned"].get<int>());
    if (d.contains("fused_timed"))
        out += rt::format("fused graphs timed: %d, their checks passed: %d; project kernel rows timed: %d, their "
                          "checks passed: %d\n",
                          d["fused_timed"].get<int>(), d["fused_checks_ok"].get<int>(),
                          d.value("custom_timed", 0), d.value("custom_checks_ok", 0));
    return out;
}

}  // namespace tools
