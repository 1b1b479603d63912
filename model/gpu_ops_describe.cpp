// GpuOps::describe() and describe_fused(): what GpuOps chose per convolution shape and the times it
// chose by, as the lines `slidefuse bench step --layers` prints and records (model/gpu_ops.h).
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/dwconv_cuda.h"
#include "kernels/tensor.h"
#include "model/gpu_ops.h"
#include "model/gpu_ops_entry.h"
#include "runtime/error.h"

namespace model {

// "dwconv variants: fwd 2 (4ch 2x4) of [0.300 0.280 ...], dgrad 0 (8ch 2x4) of [...], dgrad overwrite 7
// (4ch 2x4 s8x32) of [...], wgrad 1 (4ch 1x4) of [...]" (ms per variant, "-" = not valid for the pass
// or not timed; "dgrad" is the accumulating mode, each dgrad part present when the step runs that mode).
std::string GpuOps::depthwise_variants_line(const Entry& e) {
    auto list = [](const std::vector<double>& ms) {
        std::string l = "[";
        for (size_t v = 0; v < ms.size(); ++v) {
            char b[32];
            if (ms[v] >= 0)
                std::snprintf(b, sizeof(b), "%s%.4f", v ? " " : "", ms[v]);
            else
                std::snprintf(b, sizeof(b), "%s-", v ? " " : "");
            l += b;
        }
        return l + "]";
    };
    std::string line = rt::format("dwconv variants: fwd %d (%s)%s", e.fwd_variant,
                                  kern::dwconv3x3_variant_name(e.fwd_variant),
                                  e.stats_fwd ? " with the BN statistics epilogue" : "");
    if (!e.fwd_variant_ms.empty()) line += " of " + list(e.fwd_variant_ms) + " ms";
    if (e.dgrad && e.use.needs_accumulate()) {
        line += rt::format(", dgrad %d (%s)", e.dgrad_variant, kern::dwconv3x3_variant_name(e.dgrad_variant));
        if (!e.dgrad_variant_ms.empty()) line += " of " + list(e.dgrad_variant_ms) + " ms";
    }
    if (e.dgrad && e.use.needs_overwrite()) {
        line += rt::format(", dgrad overwrite %d (%s)", e.dgrad_ow_variant,
                           kern::dwconv3x3_variant_name(e.dgrad_ow_variant));
        if (!e.dgrad_ow_variant_ms.empty()) line += " of " + list(e.dgrad_ow_variant_ms) + " ms";
    }
    line += rt::format(", wgrad %d (%s)", e.wgrad_variant, kern::dwconv3x3_wgrad_variant_name(e.wgrad_variant));
    if (!e.wgrad_variant_ms.empty()) line += " of " + list(e.wgrad_variant_ms) + " ms";
    if (e.fused) {  // dw_fused_bwd: in place of the dgrad and wgrad above, when the custom kernels run the shape
        line += e.runs_fused() ? ", fused backward runs" : ", fused backward timed (cuDNN runs)";
        if (e.fused_ms >= 0) line += rt::format(", fused %.4f ms", e.fused_ms);
        if (e.fused_ow_ms >= 0) line += rt::format(", fused overwrite %.4f ms", e.fused_ow_ms);
    }
    if (e.use.bn_prologue) {
        line += rt::format(", fwd with BN prologue %d (%s)", e.pro_fwd_variant,
                           kern::dwconv3x3_variant_name(e.pro_fwd_variant));
        if (!e.pro_fwd_variant_ms.empty()) line += " of " + list(e.pro_fwd_variant_ms) + " ms";
    }
    return line;
}

std::vector<std::string> GpuOps::describe_fused() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_)
        if (e.runs_fused())
            out.push_back(e.shape.describe() + ": " + depthwise_variants_line(e));
    return out;
}

std::vector<std::string> GpuOps::describe() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) {
        char buf[256];
        std::snprintf(buf, sizeof(buf), "%s: %s (cudnn %.3f ms, custom %.3f ms per fwd+bwd; -1 = not timed)",
                      e.shape.describe().c_str(), conv_impl_name(e.impl), e.ms[0], e.ms[1]);
        out.push_back(buf);
        if (e.credit_ms > 0)  // ConvPolicy::pw_stats / pw_bn_grad / dw_stats: cuDNN's time includes the passes they remove
            out.back() += rt::format("; cudnn's includes %.3f ms of BN passes the custom kernel's epilogues remove",
                                     e.credit_ms);
        if (e.pw_fused_timed)  // ConvPolicy::pw_fused_bwd: the custom backward timed as the step runs it
            out.back() += "; custom's backward timed as the fused dgrad + wgrad";
        // NetShape::fuse_dw_pw: a 1x1 shape whose prologue forward and wgrad run the project's kernel.
        if (e.use.bn_prologue && e.shape.k == 1)
            out.back() += rt::format("; with its input's BN + %s prologue: forward and wgrad custom-pointwise",
                                     kern::act_name(e.use.prologue_act));
        // The custom kernels' variants: the ones that run, or (cuDNN won) the ones that were timed.
        if (e.impl == ConvImpl::CustomDepthwise || !e.fwd_variant_ms.empty())
            out.push_back("  " + depthwise_variants_line(e));
    }
    // The variants' names once, so that the "of [...]" lists above can be read by index.
    bool timed = false;
    for (const Entry& e : entries_) timed = timed || !e.fwd_variant_ms.empty();
    if (timed) {
        std::string names = "dwconv variant names: gather [";
        for (int v = 0; v < kern::kDwVariantCount; ++v)
            names += rt::format("%s%d %s", v ? " | " : "", v, kern::dwconv3x3_variant_name(v));
        names += "], wgrad [";
        for (int v = 0; v < kern::kDwWgradVariantCount; ++v)
            names += rt::format("%s%d %s", v ? " | " : "", v, kern::dwconv3x3_wgrad_variant_name(v));
        out.push_back(names + "]");
    }
    for (const std::string& line : cudnn_->describe()) out.push_back("  cudnn plan " + line);
    return out;
}

}  // namespace model
