#include "tools/plan_cudnn.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernels/conv_cudnn_probe.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/stemconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/net.h"
#include "runtime/cudnn_graph.h"
#include "runtime/device_info.h"
#include "runtime/error.h"
#include "runtime/exec.h"

namespace tools {

std::string read_device_json(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    SF_CHECK(f.good(), "plan: cannot read the device property file '%s'", path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    SF_CHECK(!text.empty(), "plan: the device property file '%s' is empty", path.c_str());
    return text;
}

namespace {

struct Job {
    kern::ConvOp op;
    bool overwrite;
    const char* mode;
};

}  // namespace

namespace {

// One key's record: the conv, the job, and the probe's plan (or error).
nlohmann::json plan_entry(const kern::ConvPlanProbe& p, const kern::ConvShape& s, const Job& j, const char* custom,
                          bool prepared_by_run) {
    nlohmann::json e = {{"conv", s.describe()},
                        {"key", p.key.to_string()},
                        {"op", kern::conv_op_name(j.op)},
                        {"mode", j.mode},
                        {"custom", custom ? nlohmann::json(custom) : nlohmann::json()},
                        {"required", custom == nullptr},
                        {"prepared_by_run", prepared_by_run},
                        {"ok", p.ok},
                        {"seconds", p.seconds},
                        {"reports", p.reports}};
    if (!p.ok) {
        e["error"] = p.error;
        return e;
    }
    e.update({{"variant", kern::conv_accum_name(p.accum)},
              {"engine", p.engine},
              {"cudnn_ws", p.cudnn_ws},
              {"scratch", p.scratch},
              {"workspace", p.workspace},
              {"candidates", p.candidates},
              {"max_workspace", p.max_workspace}});
    return e;
}

// Every key of the dry-run network of `a`, planned for the target (named `device`, from `source`).
nlohmann::json plans_for(const PlanArgs& a, const rt::CudnnTarget& target, const std::string& device,
                         const std::string& source, const kern::ConvPolicy& policy) {
    const model::SiderNetT<kern::bf16> net(plan_shape(a), model::DryRun{});

    nlohmann::json plans = nlohmann::json::array();
    nlohmann::json variants = nlohmann::json::object();
    size_t planned = 0, failed = 0, covered = 0, ws = 0, zeroed = 0, custom_ws = 0;
    double seconds = 0;
    for (const model::ConvUse& u : net.plan().convs()) {
        const std::vector<model::ConvImpl> cand = model::conv_candidates(u.shape, policy.pw_custom);
        const bool has_custom = cand.size() > 1;
        if (has_custom)
            custom_ws = std::max(custom_ws, sizeof(float) * model::custom_workspace_floats(cand[1], u.shape));
        // Without autotuning a shape with a custom kernel runs it and cuDNN is never asked; with
        // autotuning cuDNN's plans are built and timed against it (a refusal lets the custom one run).
        const bool asked = !has_custom || policy.autotune;
        std::vector<Job> jobs{{kern::ConvOp::Fprop, false, "-"}, {kern::ConvOp::Wgrad, false, "-"}};
        if (u.needs_accumulate()) jobs.push_back({kern::ConvOp::Dgrad, false, "accumulate"});
        if (u.needs_overwrite()) jobs.push_back({kern::ConvOp::Dgrad, true, "overwrite"});
        for (const Job& j : jobs) {
            const kern::ConvPlanProbe p = kern::conv_plan_probe(target, u.shape, j.op, j.overwrite, policy);
            seconds += p.seconds;
            nlohmann::json e = plan_entry(p, u.shape, j, has_custom ? model::conv_impl_name(cand[1]) : nullptr, asked);
            if (p.ok) {
                ++planned;
                const std::string v = e["variant"];
                variants[v] = variants.value(v, 0) + 1;
                if (asked) ws = std::max(ws, policy.autotune ? p.max_workspace : p.workspace);
                if (asked && j.overwrite && p.accum != kern::ConvAccum::Overwrite)
                    zeroed += u.shape.in().numel() * sizeof(kern::bf16);
            } else {
                (has_custom ? covered : failed) += 1;
            }
            plans.push_back(std::move(e));
        }
    }
    return {{"device", device},
            {"source", source},
            {"cudnn_version", rt::cudnn_version_string(cudnnGetVersion())},
            {"policy", policy.autotune ? "autotune" : "deterministic"},
            {"keys", plans.size()},
            {"planned", planned},
            {"failed", failed},
            {"failed_custom_covered", covered},
            {"seconds", seconds},
            {"workspace_bytes", std::max(ws, custom_ws)},
            {"dgrad_zeroed_bytes", zeroed},
            {"variants", variants},
            {"plans", plans}};
}

}  // namespace

rt::CudnnDesc device_prop_descriptor(const std::string& device_json, const std::string& device_path,
                                     std::string* device_name) {
    nlohmann::json parsed;
    try {
        parsed = nlohmann::json::parse(device_json);
    } catch (const nlohmann::json::exception& e) {
        SF_FAIL("plan: '%s' is not JSON (%s)", device_path.c_str(), e.what());
    }
    SF_CHECK(parsed.is_object(), "plan: '%s' is not a JSON object", device_path.c_str());
    rt::CudnnDesc device;
    try {
        device = rt::cudnn_device_prop_from_json(device_json);
    } catch (const rt::Error& e) {
        SF_FAIL("plan: %s: %s", device_path.c_str(), e.what());
    }
    *device_name = parsed.value("deviceName", std::string("?"));
    return device;
}

nlohmann::json cudnn_plans_json(const PlanArgs& a, const std::string& device_json, const std::string& device_path,
                                const kern::ConvPolicy& policy) {
    std::string name;
    const rt::CudnnDesc device = device_prop_descriptor(device_json, device_path, &name);
    return plans_for(a, rt::CudnnTarget::of(device), name, device_path, policy);
}

nlohmann::json cudnn_plans_json_gpu(const PlanArgs& a, const kern::ConvPolicy& policy) {
    const rt::DeviceInfo d = rt::query_device_info(0);
    SF_CHECK(d.available, "plan: --cudnn-device gpu needs a usable CUDA device here: %s", d.reason.c_str());
    const rt::CudaContext ctx(0);
    return plans_for(a, rt::CudnnTarget::of(ctx.exec().cudnn), d.name, "gpu 0 (cuDNN handle)", policy);
}

std::string cudnn_plans_text(const nlohmann::json& c, bool verbose) {
    std::string out = rt::format("cuDNN %s plans for %s (%s, policy %s), built and not executed:\n",
                                 c["cudnn_version"].get<std::string>().c_str(), c["device"].get<std::string>().c_str(),
                                 c["source"].get<std::string>().c_str(), c["policy"].get<std::string>().c_str());
    for (const nlohmann::json& p : c["plans"]) {
        const std::string custom = p["custom"].is_null() ? "" : " [" + p["custom"].get<std::string>() + " alternative]";
        if (p["ok"].get<bool>())
            out += rt::format("  %-30s %-5s %-10s %-18s ws %9.2f MB  %s%s\n", p["conv"].get<std::string>().c_str(),
                              p["op"].get<std::string>().c_str(), p["mode"].get<std::string>().c_str(),
                              p["variant"].get<std::string>().c_str(), p["workspace"].get<double>() / 1e6,
                              p["engine"].get<std::string>().c_str(), custom.c_str());
        else
            out += rt::format("  %-30s %-5s %-10s NO PLAN%s: %s\n", p["conv"].get<std::string>().c_str(),
                              p["op"].get<std::string>().c_str(), p["mode"].get<std::string>().c_str(), custom.c_str(),
                              p["error"].get<std::string>().c_str());
        if (verbose)
            for (const nlohmann::json& r : p["reports"]) out += "      " + r.get<std::string>() + "\n";
    }
    std::string vs;
    for (auto it = c["variants"].begin(); it != c["variants"].end(); ++it)
        vs += rt::format("%s%s %d", vs.empty() ? "" : ", ", it.key().c_str(), it.value().get<int>());
    out += rt::format(
        "%zu keys: %zu planned, %zu without a plan (%zu of them covered by a custom kernel); variants: %s; "
        "conv workspace %.2f MB; dgrad zeroed %.2f MB; %.2f s in cuDNN\n",
        c["keys"].get<size_t>(), c["planned"].get<size_t>(),
        c["failed"].get<size_t>() + c["failed_custom_covered"].get<size_t>(), c["failed_custom_covered"].get<size_t>(),
        vs.c_str(), c["workspace_bytes"].get<double>() / 1e6, c["dgrad_zeroed_bytes"].get<double>() / 1e6,
        c["seconds"].get<double>());
    return out;
}

}  // namespace tools
