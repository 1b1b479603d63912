#include "model/init.h"

#include <cmath>
#include <string>

#include "runtime/error.h"
#include "runtime/hash.h"

namespace model {

namespace {
uint64_t mix(uint64_t z) { return rt::splitmix64(z); }
bool ends_with(const std::string& s, const char* suffix) {
    const std::string t(suffix);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}
constexpr double kPi = 3.14159265358979323846;  // == Python's math.pi
}  // namespace

uint64_t init_hash(uint64_t seed, uint64_t t, uint64_t j) { return mix(mix(mix(seed) ^ t) ^ j); }

double init_normal(uint64_t seed, uint64_t t, uint64_t i) {
    const double u1 = static_cast<double>((init_hash(seed, t, 2 * i) >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>(init_hash(seed, t, 2 * i + 1) >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

void init_parameters(const ParamTable& table, uint64_t seed, float* master, float* buffers, int64_t* counters) {
    for (size_t t = 0; t < table.params.size(); ++t) {
        const ParamInfo& p = table.params[t];
        float* dst = master + p.offset;
        if (p.conv_weight) {
            // kaiming_normal_(mode='fan_out', nonlinearity='relu'): std = sqrt(2 / (Cout*kh*kw)).
            const double fan_out = static_cast<double>(p.torch_shape[0] * p.torch_shape[2] * p.torch_shape[3]);
            const double std = std::sqrt(2.0 / fan_out);
            for (size_t i = 0; i < p.numel; ++i)
                dst[storage_index(p, i)] = static_cast<float>(std * init_normal(seed, t, i));
        } else if (ends_with(p.name, ".bn.weight") || ends_with(p.name, ".weight_a") ||
                   ends_with(p.name, ".weight_b")) {
            for (size_t i = 0; i < p.numel; ++i) dst[i] = 1.0f;  // BN gamma; FPN fusion scalars
        } else if (ends_with(p.name, ".bias")) {
            for (size_t i = 0; i < p.numel; ++i) dst[i] = 0.0f;  // BN beta, conv biases
        } else {
            SF_FAIL("no initialisation rule for parameter '%s'", p.name.c_str());
        }
    }
    for (const BufferInfo& b : table.buffers) {
        if (b.counter) {
            counters[b.offset] = 0;
            continue;
        }
        const float v = ends_with(b.name, ".running_var") ? 1.0f : 0.0f;
        for (size_t i = 0; i < b.numel; ++i) buffers[b.offset + i] = v;
    }
}

}  // namespace model
