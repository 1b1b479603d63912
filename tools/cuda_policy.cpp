// tools/cuda_policy.h: the cuda section's switches as the network's policy and Exec.
#include "tools/cuda_policy.h"

#include <string>

#include "runtime/device_info.h"
#include "runtime/error.h"

namespace tools {

namespace {

// The section's switches that are the policy's, field for field (pdl is the Exec's; bn_row_batch an int).
struct PolicySwitch {
    bool CudaSection::*section;
    bool kern::ConvPolicy::*policy;
};
constexpr PolicySwitch kPolicySwitches[] = {
    {&CudaSection::dw_variants, &kern::ConvPolicy::dw_variants},
    {&CudaSection::upsample_row_loads, &kern::ConvPolicy::upsample_row_loads},
    {&CudaSection::dw_fused_bwd, &kern::ConvPolicy::dw_fused_bwd},
    {&CudaSection::dw_fused_bn_bwd, &kern::ConvPolicy::dw_fused_bn_bwd},
    {&CudaSection::dw_fused_bn_grad, &kern::ConvPolicy::dw_fused_bn_grad},
    {&CudaSection::pw_custom, &kern::ConvPolicy::pw_custom},
    {&CudaSection::pw_stats, &kern::ConvPolicy::pw_stats},
    {&CudaSection::pw_bn_grad, &kern::ConvPolicy::pw_bn_grad},
    {&CudaSection::pw_bn_bwd, &kern::ConvPolicy::pw_bn_bwd},
    {&CudaSection::dw_stats, &kern::ConvPolicy::dw_stats},
};

}  // namespace

kern::ConvPolicy cuda_conv_policy(const CudaSection& s, bool deterministic) {
    kern::ConvPolicy p = kern::run_conv_policy(deterministic);
    for (const PolicySwitch& f : kPolicySwitches) p.*f.policy = s.*f.section;
    p.bn_row_batch = s.bn_row_batch;
    return p;
}

rt::Exec cuda_exec(const rt::CudaContext& ctx, const CudaSection& s) {
    rt::Exec ex = ctx.exec();
    if (s.pdl) {
        const rt::DeviceInfo d = rt::query_device_info(ex.device);
        SF_CHECK(d.cc_major >= 9,
                 "cuda.pdl needs programmatic dependent launch, compute capability 9.0 or newer; %s is %d.%d",
                 d.name.c_str(), d.cc_major, d.cc_minor);
    }
    ex.pdl = s.pdl;
    return ex;
}

CudaSection cuda_section_of(const kern::ConvPolicy& p, bool pdl) {
    CudaSection s;
    for (const PolicySwitch& f : kPolicySwitches) s.*f.section = p.*f.policy;
    s.bn_row_batch = p.bn_row_batch;
    s.pdl = pdl;
    return s;
}

nlohmann::json cuda_section_json(const CudaSection& s) {
    return {{"pdl", s.pdl},
            {"dw_variants", s.dw_variants},
            {"bn_row_batch", s.bn_row_batch},
            {"upsample_row_loads", s.upsample_row_loads},
            {"dw_fused_bwd", s.dw_fused_bwd},
            {"dw_fused_bn_bwd", s.dw_fused_bn_bwd},
            {"dw_fused_bn_grad", s.dw_fused_bn_grad},
            {"pw_custom", s.pw_custom},
            {"pw_stats", s.pw_stats},
            {"pw_bn_grad", s.pw_bn_grad},
            {"pw_bn_bwd", s.pw_bn_bwd},
            {"dw_stats", s.dw_stats}};
}

std::string cuda_section_summary(const CudaSection& s) {
    const CudaSection d;
    std::string out;
    const auto add = [&](bool differs, const std::string& what) {
        if (differs) out += (out.empty() ? "" : ", ") + what;
    };
    add(s.pdl != d.pdl, "pdl");
    add(s.dw_variants != d.dw_variants, "dw_variants false");
    add(s.bn_row_batch != d.bn_row_batch, "bn_row_batch " + std::to_string(s.bn_row_batch));
    add(s.upsample_row_loads != d.upsample_row_loads, "upsample_row_loads");
    add(s.dw_fused_bwd != d.dw_fused_bwd, "dw_fused_bwd");
    add(s.dw_fused_bn_bwd != d.dw_fused_bn_bwd, "dw_fused_bn_bwd");
    add(s.dw_fused_bn_grad != d.dw_fused_bn_grad, "dw_fused_bn_grad");
    add(s.pw_custom != d.pw_custom, "pw_custom");
    add(s.pw_stats != d.pw_stats, "pw_stats");
    add(s.pw_bn_grad != d.pw_bn_grad, "pw_bn_grad");
    add(s.pw_bn_bwd != d.pw_bn_bwd, "pw_bn_bwd");
    add(s.dw_stats != d.dw_stats, "dw_stats");
    return out.empty() ? "defaults" : out;
}

}  // namespace tools
