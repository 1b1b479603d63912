#include "tools/plan_report.h"

#include <cstdio>

#include "model/net.h"
#include "runtime/error.h"
#include "tools/roofline.h"

namespace tools {

const char* const kPlanSchema = "slidefuse.plan/1";

namespace {

// Conv shapes (model::ConvUse) by the dgrad modes the traced backward needs: {overwrite only,
// accumulate only, both}.
struct DgradModes {
    size_t overwrite = 0, accumulate = 0, both = 0;
};

template <class T>
model::MemoryPlan dry_plan(const PlanArgs& a, size_t* flat_params, size_t* params, DgradModes* modes) {
    const model::SiderNetT<T> net(plan_shape(a), model::DryRun{&a.kernels});
    *flat_params = net.table().flat_size;
    *params = net.table().num_parameters();
    for (const model::ConvUse& u : net.plan().convs()) {
        if (!u.dgrad) continue;
        const bool o = u.needs_overwrite(), acc = u.needs_accumulate();
        (o && acc ? modes->both : (o ? modes->overwrite : modes->accumulate)) += 1;
    }
    return net.plan().memory();
}

// The fusion up paths' modelled work in both orders (tools/roofline.h up_path_cost), per sample: their
// geometry from the ConvFirst plan, whose up layers record the 1x1 conv at the source resolution.
nlohmann::json up_paths_json(const PlanArgs& a) {
    model::NetShape s = plan_shape(a);
    s.up_order = model::UpOrder::ConvFirst;
    const model::SiderNetT<kern::bf16> net(s, model::DryRun{});
    Precision p;
    if (!a.cuda) p.act = p.weight = 4;
    OpCost up, cf;
    int count = 0;
    for (const model::LayerUse& l : net.plan().layers()) {
        if (l.upsample == 1) continue;
        ++count;
        const FwdBwd u = up_path_cost(l.shape, l.upsample, model::UpOrder::UpsampleFirst, p);
        const FwdBwd c = up_path_cost(l.shape, l.upsample, model::UpOrder::ConvFirst, p);
        up += u.fwd + u.bwd;
        cf += c.fwd + c.bwd;
    }
    auto per_sample = [&](const OpCost& c) {
        return nlohmann::json{{"bytes", c.bytes / a.batch}, {"flops", c.flops() / a.batch}};
    };
    return {{"count", count}, {"upsample_first", per_sample(up)}, {"conv_first", per_sample(cf)}};
}

nlohmann::json region(size_t bytes, int batch, bool per_sample) {
    return {{"bytes", bytes},
            {"per_sample", per_sample ? nlohmann::json(static_cast<double>(bytes) / batch) : nlohmann::json()}};
}

}  // namespace

std::vector<std::string> kernel_switch_flags(const kern::ConvPolicy& p) {
    std::vector<std::string> f;
    if (p.dw_fused_bwd) f.push_back("--dw-fused-bwd");
    if (p.dw_fused_bwd && p.dw_fused_bn_bwd) f.push_back("--dw-fused-bwd-bn");
    if (p.dw_fused_bwd && p.dw_fused_bn_grad) f.push_back("--dw-fused-bn-grad");
    if (p.dw_stats) f.push_back("--dw-stats");
    if (p.pw_custom && p.pw_stats) f.push_back("--pw-stats");
    if (p.pw_custom && p.pw_bn_grad) f.push_back("--pw-bn-grad");
    if (p.pw_custom && p.pw_bn_bwd) f.push_back("--pw-bn-bwd");
    if (p.pw_custom && p.pw_fused_bwd) f.push_back("--pw-fused-bwd");
    if (p.head_bn_grad) f.push_back("--head-bn-grad");
    if (p.head_bn_grad && p.head_bn_dx) f.push_back("--head-bn-dx");
    return f;
}

bool PlanArgs::any_kernel_switch() const { return !kernel_switch_flags(kernels).empty(); }

model::NetShape plan_shape(const PlanArgs& a) {
    return {a.batch,          a.channels,   a.height,      a.width,        a.up_order,
            a.fuse_expand_dw, a.fuse_dw_pw, a.merge_heads, a.fuse_head_bn, a.fuse_up_bn};
}

nlohmann::json plan_json(const PlanArgs& a, size_t conv_workspace_bytes) {
    size_t flat = 0, count = 0;
    DgradModes dm;
    const model::MemoryPlan m =
        a.cuda ? dry_plan<kern::bf16>(a, &flat, &count, &dm) : dry_plan<float>(a, &flat, &count, &dm);
    // The flat parameter region (model/planner.h): master, gradient, AdamW m and v (fp32 each) and
    // the bf16 working copy; the master and the working copy are "parameters".
    const size_t grads = flat * sizeof(float), optim = 2 * flat * sizeof(float);
    const size_t params = m.params - grads - optim;
    // Hook: the cuDNN workspace bound (plans not built in a dry run) is added here when known.
    const size_t workspace = m.workspace + conv_workspace_bytes;
    const size_t total = m.params + m.buffers + m.activations + m.activation_grads + workspace;
    nlohmann::json doc = {
        {"schema", kPlanSchema},
        {"backend", a.cuda ? "cuda" : "cpu"},
        {"activation_element_bytes", a.cuda ? 2 : 4},
        {"shape",
         {{"batch", a.batch},
          {"channels", a.channels},
          {"height", a.height},
          {"width", a.width},
          {"fusion_up_order", model::up_order_name(a.up_order)},
          {"fuse_expand_dw", a.fuse_expand_dw && a.cuda},
          {"fuse_dw_pw", a.fuse_dw_pw && a.cuda},
          {"merge_heads", a.merge_heads && a.cuda},
          {"fuse_head_bn", a.fuse_head_bn && a.cuda},
          {"fuse_up_bn", a.fuse_up_bn && a.cuda},
          {"kernel_switches", a.cuda ? kernel_switch_flags(a.kernels) : std::vector<std::string>{}}}},
        {"parameters_count", count},
        {"regions",
         {{"parameters", region(params, a.batch, false)},
          {"parameter_grads", region(grads, a.batch, false)},
          {"optimizer_state", region(optim, a.batch, false)},
          {"buffers", region(m.buffers, a.batch, false)},
          {"activations", region(m.activations, a.batch, true)},
          {"activation_grads", region(m.activation_grads, a.batch, true)},
          {"workspace", region(workspace, a.batch, true)}}},
        {"total", {{"bytes", total}, {"per_sample", static_cast<double>(total) / a.batch}}},
        {"activation_grads",
         {{"tensors", m.grad_tensors},
          {"unshared_bytes", m.grad_unshared},
          {"shared_bytes", m.activation_grads},
          {"zeroed_per_micro_step_bytes", m.grad_zeroed},
          {"zeroed_per_sample_bytes", static_cast<double>(m.grad_zeroed) / a.batch},
          {"dgrad_first_write_bytes", m.grad_dgrad_first},
          {"copies_per_micro_step", m.grad_copies},
          {"copied_per_micro_step_bytes", m.grad_copied},
          // Overwrite-mode dgrad runs beta = 0 plans: nothing zeroed. Only a shape without a beta = 0
          // cuDNN engine falls back to zeroing dx, which a dry run cannot know (no plans): the bound.
          {"dgrad_first_write_zeroed_bytes", 0},
          {"dgrad_first_write_zeroed_bound_bytes", m.grad_dgrad_first},
          {"conv_dgrad_modes",
           {{"overwrite_only", dm.overwrite}, {"accumulate_only", dm.accumulate}, {"both", dm.both}}}}},
        {"workspace", {{"bytes", workspace}, {"includes_conv_workspace", conv_workspace_bytes > 0}}},
        {"fusion_up_paths", up_paths_json(a)}};
    return doc;
}

std::string plan_text(const nlohmann::json& d) {
    std::string out;
    char line[512];
    const nlohmann::json& s = d["shape"];
    std::snprintf(
        line, sizeof(line),
        "memory plan: %s backend (%d-byte activations), batch %d, input %dx%dx%d, fusion up paths %s%s%s%s%s%s\n",
        d["backend"].get<std::string>().c_str(), d["activation_element_bytes"].get<int>(), s["batch"].get<int>(),
        s["channels"].get<int>(), s["height"].get<int>(), s["width"].get<int>(),
        s.value("fusion_up_order", "upsample_first").c_str(),
        s.value("fuse_expand_dw", false) ? ", fused LiteBlock expand+depthwise" : "",
        s.value("fuse_dw_pw", false) ? ", depthwise BN inside the 1x1 conv" : "",
        s.value("merge_heads", false) ? ", the heads' conv1 merged" : "",
        s.value("fuse_head_bn", false) ? ", the heads' conv1 BN inside conv2" : "",
        s.value("fuse_up_bn", false) ? ", the up paths' upsample inside their BN" : "");
    out += line;
    if (s.contains("kernel_switches") && !s["kernel_switches"].empty()) {
        std::string k;
        for (const nlohmann::json& f : s["kernel_switches"]) k += " " + f.get<std::string>();
        out += "  kernel switches:" + k + "\n";
    }
    std::snprintf(line, sizeof(line), "  %-20s %14s %14s\n", "region", "total MB", "per sample MB");
    out += line;
    auto row = [&](const char* name, const nlohmann::json& r) {
        const double mb = r["bytes"].get<double>() / 1e6;
        if (r["per_sample"].is_null())
            std::snprintf(line, sizeof(line), "  %-20s %14.2f %14s\n", name, mb, "-");
        else
            std::snprintf(line, sizeof(line), "  %-20s %14.2f %14.3f\n", name, mb, r["per_sample"].get<double>() / 1e6);
        out += line;
    };
    for (const char* k : {"parameters", "parameter_grads", "optimizer_state", "buffers", "activations",
                          "activation_grads", "workspace"})
        row(k, d["regions"][k]);
    row("total", d["total"]);
    const nlohmann::json& g = d["activation_grads"];
    std::snprintf(line, sizeof(line),
                  "activation gradients: %zu tensors, %.2f MB with a region each, %.2f MB shared by lifetime\n"
                  "zeroed per micro-step: %.2f MB (%.3f MB per sample)\n"
                  "first written by a conv backward-data: %.2f MB, by beta=0 plans: %.2f MB zeroed (a dry run "
                  "builds no plans: only a shape without a beta=0 cuDNN engine would zero its dx first, at most "
                  "%.2f MB)\n",
                  g["tensors"].get<size_t>(), g["unshared_bytes"].get<double>() / 1e6,
                  g["shared_bytes"].get<double>() / 1e6, g["zeroed_per_micro_step_bytes"].get<double>() / 1e6,
                  g["zeroed_per_sample_bytes"].get<double>() / 1e6, g["dgrad_first_write_bytes"].get<double>() / 1e6,
                  g["dgrad_first_write_zeroed_bytes"].get<double>() / 1e6,
                  g["dgrad_first_write_zeroed_bound_bytes"].get<double>() / 1e6);
    out += line;
    if (g.contains("copies_per_micro_step")) {
        std::snprintf(line, sizeof(line), "gradient copies per micro-step (y = x, read and written once): %zu, %.2f MB\n",
                      g["copies_per_micro_step"].get<size_t>(),
                      g["copied_per_micro_step_bytes"].get<double>() / 1e6);
        out += line;
    }
    if (d.contains("cudnn")) {
        std::snprintf(
            line, sizeof(line),
            "  (with the cuDNN plans built above for %s: %.2f MB of dx zeroed per micro-step, by overwrite-mode "
            "backward-data without a beta=0 plan)\n",
            d["cudnn"]["device"].get<std::string>().c_str(), d["cudnn"]["dgrad_zeroed_bytes"].get<double>() / 1e6);
        out += line;
    }
    const nlohmann::json& cm = g["conv_dgrad_modes"];
    if (d["backend"] == "cuda") {
        std::snprintf(line, sizeof(line),
                      "conv backward-data plans per shape: %zu overwrite only, %zu accumulate only, %zu both modes\n",
                      cm["overwrite_only"].get<size_t>(), cm["accumulate_only"].get<size_t>(),
                      cm["both"].get<size_t>());
        out += line;
    }
    if (d.contains("fusion_up_paths")) {
        const nlohmann::json& u = d["fusion_up_paths"];
        std::snprintf(line, sizeof(line),
                      "fusion up paths (%d; modelled traffic and FLOPs of a step, forward + backward, per sample): "
                      "upsample_first %.1f MB %.3f GFLOP, conv_first %.1f MB %.3f GFLOP\n",
                      u["count"].get<int>(), u["upsample_first"]["bytes"].get<double>() / 1e6,
                      u["upsample_first"]["flops"].get<double>() / 1e9, u["conv_first"]["bytes"].get<double>() / 1e6,
                      u["conv_first"]["flops"].get<double>() / 1e9);
        out += line;
    }
    if (!d["workspace"]["includes_conv_workspace"].get<bool>())
        out +=
            "workspace: the planner's reductions only; the cuDNN convolution workspace is chosen when plans are "
            "built (not in a dry run)\n";
    return out;
}

}  // namespace tools
