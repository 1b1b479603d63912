// The LibTorch baseline's state_dict walk and initialisation (lt_model.h).
#include <cmath>
#include <cstdint>

#include "lt_model.h"

namespace ltb {

void state_entries(const torch::nn::Module& m, const std::string& prefix, std::vector<Entry>& out) {
    for (const auto& p : m.named_parameters(false)) out.push_back({prefix + p.key(), p.value(), true});
    for (const auto& b : m.named_buffers(false)) out.push_back({prefix + b.key(), b.value(), false});
    for (const auto& c : m.named_children()) state_entries(*c.value(), prefix + c.key() + ".", out);
}


// ------------------------------------------------------------------------------------------------
// Initialisation (docs/MODEL.md; sider_ref.init_weights; model/init.cpp): kaiming fan_out normal
// from a counter-based generator, one stream per parameter index t (named_parameters order).
// ------------------------------------------------------------------------------------------------
uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void init_weights(SiderModel& model, uint64_t seed) {
    torch::NoGradGuard ng;
    std::vector<const void*> conv_w, zero, one;
    for (const auto& m : model->modules(true)) {
        if (auto c = std::dynamic_pointer_cast<torch::nn::Conv2dImpl>(m)) {
            conv_w.push_back(c->weight.unsafeGetTensorImpl());
            if (c->bias.defined()) zero.push_back(c->bias.unsafeGetTensorImpl());
        } else if (auto b = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(m)) {
            one.push_back(b->weight.unsafeGetTensorImpl());
            zero.push_back(b->bias.unsafeGetTensorImpl());
            b->reset_running_stats();
        }
    }
    auto has = [](const std::vector<const void*>& v, const Tensor& p) {
        return std::find(v.begin(), v.end(), p.unsafeGetTensorImpl()) != v.end();
    };
    uint64_t t = 0;
    for (const auto& kv : model->named_parameters(true)) {
        const Tensor& p = kv.value();
        const std::string& name = kv.key();
        if (has(conv_w, p)) {
            const int64_t numel = p.numel();
            const double sd = std::sqrt(2.0 / static_cast<double>(p.size(0) * p.size(2) * p.size(3)));
            const uint64_t base = mix64(mix64(seed) ^ t);
            std::vector<float> v(static_cast<size_t>(numel));
            for (int64_t i = 0; i < numel; ++i) {
                const uint64_t b1 = mix64(base ^ static_cast<uint64_t>(2 * i)) >> 11;
                const uint64_t b2 = mix64(base ^ static_cast<uint64_t>(2 * i + 1)) >> 11;
                const double u1 = static_cast<double>(b1 + 1) * std::ldexp(1.0, -53);
                const double u2 = static_cast<double>(b2) * std::ldexp(1.0, -53);
                const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
                v[static_cast<size_t>(i)] = static_cast<float>(z * sd);
            }
            p.copy_(torch::from_blob(v.data(), p.sizes(), torch::kFloat32));
        } else if (has(zero, p)) {
            p.zero_();
        } else if (has(one, p) || (name.size() > 9 && (name.substr(name.size() - 9) == ".weight_a" ||
                                                       name.substr(name.size() - 9) == ".weight_b"))) {
            p.fill_(1.0);
        } else {
            fail("init_weights: unhandled parameter " + name);
        }
        ++t;
    }
}


}  // namespace ltb
