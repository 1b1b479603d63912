// The LibTorch baseline's training step: autocast scope, settings and the recipe's step
// (forward, loss, backward, clipping, AdamW), header-only; check_dir is lt_check.cpp.
#pragma once
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "lt_common.h"
#include "lt_data.h"
#include "lt_loss.h"
#include "lt_model.h"

namespace ltb {

// ------------------------------------------------------------------------------------------------
// Training step
// ------------------------------------------------------------------------------------------------
// Autocast for the forward only, as `with torch.autocast(device_type, dtype=torch.bfloat16)`.
struct AutocastScope {
    bool on;
    torch::DeviceType dev;
    AutocastScope(bool enabled, torch::DeviceType d) : on(enabled), dev(d) {
        if (!on) return;
#ifdef SF_AUTOCAST_PER_DEVICE
        at::autocast::set_autocast_dtype(dev, at::kBFloat16);
        at::autocast::set_autocast_enabled(dev, true);
#else
        if (dev == torch::kCUDA) {
            at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
            at::autocast::set_enabled(true);
        } else {
            at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
            at::autocast::set_cpu_enabled(true);
        }
#endif
    }
    ~AutocastScope() {
        if (!on) return;
#ifdef SF_AUTOCAST_PER_DEVICE
        at::autocast::set_autocast_enabled(dev, false);
#else
        if (dev == torch::kCUDA)
            at::autocast::set_enabled(false);
        else
            at::autocast::set_cpu_enabled(false);
#endif
        at::autocast::clear_cache();  // the bf16 weight copies must not outlive this forward
    }
};

struct Settings {
    std::string mode = "bf16_cl";
    std::string device;
    std::vector<int64_t> batch_sizes{64, 128, 256};
    int64_t height = 256, width = 512;
    int steps = 50, warmup = 10, pool = 4;
    std::string data;
    bool variant_sider = true;
    uint64_t seed = 42;
    std::string json, commit = "unknown", check_dir;
    bool amp() const { return mode == "bf16_cl"; }
    bool channels_last() const { return mode == "bf16_cl"; }
};

struct Trainer {
    SiderModel model;
    Tensor lut;
    std::vector<Tensor> params;
    std::unique_ptr<torch::optim::AdamW> opt;
    bool amp, cl, sider;
    torch::DeviceType dev;
    double clip = 1.0;

    Trainer(SiderModel m, bool amp_, bool cl_, bool sider_, torch::DeviceType d)
        : model(std::move(m)), amp(amp_), cl(cl_), sider(sider_), dev(d) {
        model->train();
        lut = make_lut(model->parameters().front().device());
        if (cl) {
            torch::NoGradGuard ng;
            for (auto& p : model->parameters())
                if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
        }
        params = model->parameters();
        opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(3e-4)
                                                                .betas(std::make_tuple(0.9, 0.999))
                                                                .eps(1e-8)
                                                                .weight_decay(0.05)
                                                                .amsgrad(false));
    }

    // clip_grad_norm_ as PyTorch's Python version computes it (norm of the per-tensor norms,
    // coefficient clamped at 1), without the .item() sync of the C++ torch::nn::utils version.
    void clip_grads() {
        std::vector<Tensor> norms;
        for (auto& p : params)
            if (p.grad().defined()) norms.push_back(p.grad().norm(2));
        if (norms.empty()) return;
        Tensor total = torch::stack(norms).norm(2);
        Tensor coef = torch::clamp_max(clip / (total + 1e-6), 1.0);
        for (auto& p : params)
            if (p.grad().defined()) p.grad().mul_(coef);
    }

    LossOut step(const Batch& b) {
        Tensor x = preprocess(b, lut, cl);
        Logits lg;
        {
            AutocastScope ac(amp, dev);
            lg = model->forward(x);
        }
        LossOut l = sider_loss(lg, x, b, sider);
        opt->zero_grad();
        l.total.backward();
        if (clip > 0) clip_grads();
        opt->step();
        return l;
    }
};

// --check-dir: the self-check the tests run (lt_check.cpp). Returns the exit status.
int check_dir(const Settings& s);

}  // namespace ltb
