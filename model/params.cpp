#include "model/params.h"

#include "runtime/error.h"

namespace model {

size_t ParamTable::num_parameters() const {
    size_t n = 0;
    for (const auto& p : params) n += p.numel;
    return n;
}

const ParamInfo* ParamTable::find(const std::string& name) const {
    for (const auto& p : params)
        if (p.name == name) return &p;
    return nullptr;
}

size_t storage_index(const ParamInfo& p, size_t i) {
    SF_CHECK(i < p.numel, "index %zu outside parameter '%s' (%zu elements)", i, p.name.c_str(), p.numel);
    if (!p.conv_weight) return i;
    // torch (o, c, r, s) -> ours (o, r, s, c)
    const size_t C = static_cast<size_t>(p.torch_shape[1]), R = static_cast<size_t>(p.torch_shape[2]),
                 S = static_cast<size_t>(p.torch_shape[3]);
    const size_t s = i % S, r = (i / S) % R, c = (i / (S * R)) % C, o = i / (S * R * C);
    return ((o * R + r) * S + s) * C + c;
}

void to_torch_layout(const ParamInfo& p, const float* ours, float* torch) {
    for (size_t i = 0; i < p.numel; ++i) torch[i] = ours[storage_index(p, i)];
}

void from_torch_layout(const ParamInfo& p, const float* torch, float* ours) {
    for (size_t i = 0; i < p.numel; ++i) ours[storage_index(p, i)] = torch[i];
}

}  // namespace model
