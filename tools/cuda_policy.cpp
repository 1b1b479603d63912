// tools/cuda_policy.h: the cuda section's switches as the network's policy and Exec.
#include "tools/cuda_policy.h"

#include <string>

#include "runtime/device_info.h"
#include "runtime/error.h"

namespace tools {

namespace {

// The section's switches that are the policy's, field for field (pdl is the Exec's; bn_row_batch and
// bn_min_blocks are ints).
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
    {&CudaSection::pw_fused_bwd, &kern::ConvPolicy::pw_fused_bwd},
    {&CudaSection::dw_stats, &kern::ConvPolicy::dw_stats},
    {&CudaSection::head_bn_grad, &kern::ConvPolicy::head_bn_grad},
    {&CudaSection::head_bn_dx, &kern::ConvPolicy::head_bn_dx},
    {&CudaSection::branch_lanes, &kern::ConvPolicy::branch_lanes},
};

}  // namespace

kern::ConvPolicy cuda_conv_policy(const CudaSection& s, bool deterministic) {
    kern::ConvPolicy p = kern::run_conv_policy(deterministic);
    for (const PolicySwitch& f : kPolicySwitches) p.*f.policy = s.*f.section;
    p.bn_row_batch = s.bn_row_batch;
    p.bn_min_blocks = s.bn_min_blocks;
    return p;
}

rt::Exec cuda_exec(const rt::CudaContext& ctx, const CudaSection& s) {
    rt::Exec ex = ctx.exec();
    if (s.pdl) {
        const rt::DeviceInfo d = rt::query_device_info(ex.device);
        SF_CHECK(d.cc_major >= 9,
                 "pdl (bench step --pdl, the config's cuda.pdl) needs programmatic dependent launch, compute "
                 "capability 9.0 or newer; %s is %d.%d",
                 d.name.c_str(), d.cc_major, d.cc_minor);
    }
    ex.pdl = s.pdl;
    return ex;
}

CudaSection cuda_section_of(const kern::ConvPolicy& p, bool pdl) {
    CudaSection s;
    for (const PolicySwitch& f : kPolicySwitches) s.*f.section = p.*f.policy;
    s.bn_row_batch = p.bn_row_batch;
    s.bn_min_blocks = p.bn_min_blocks;
    s.pdl = pdl;
    return s;
}

nlohmann::json cuda_section_json(const CudaSection& s) {
    nlohmann::json j = nlohmann::json::object();
    for (const CudaKey& k : cuda_keys()) {
        if (k.flag)
            j[k.key] = s.*k.flag;
        else
            j[k.key] = s.*k.number;
    }
    return j;
}

std::string cuda_section_summary(const CudaSection& s) {
    const CudaSection d;
    std::string out;
    for (const CudaKey& k : cuda_keys()) {
        std::string what;
        if (k.flag && s.*k.flag != d.*k.flag)
            what = std::string(k.key) + (s.*k.flag ? "" : " false");
        else if (k.number && s.*k.number != d.*k.number)
            what = std::string(k.key) + " " + std::to_string(s.*k.number);
        if (!what.empty()) out += (out.empty() ? "" : ", ") + what;
    }
    return out.empty() ? "defaults" : out;
}

}  // namespace tools
