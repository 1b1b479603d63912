// LibTorch C++ baseline of the slidefuse training step (baseline (d) of the benchmark): the
// Sider_CAPTCHA_Solver 1.1 model written with torch::nn modules (module names = the PyTorch
// state_dict keys of tools/reference/sider_ref.py, checked against tests/data/sider_state_dict.tsv
// by tests/baselines/test_baselines.py), the counter-based initialisation of docs/MODEL.md, the
// loss of tools/baselines/loss_vec.py (same tensor ops, `sider` and `corrected`), AdamW + global
// grad-norm clipping, timed with CUDA events like `slidefuse bench step`, JSON "slidefuse.bench/1".
//
// Modes: bf16_cl (default) = autocast to bf16 + channels_last + cudnn.benchmark, the original's
// setup; fp32 = float32, NCHW. Autocast in C++: at::autocast::set_autocast_enabled(kCUDA, true)
// + set_autocast_dtype(kCUDA, kBFloat16) (set_enabled / set_autocast_gpu_dtype before LibTorch
// 2.4) around the forward only, then at::autocast::clear_cache() — exactly what Python's
// torch.autocast context does on entry and exit: the same dispatcher-level casts (convs in bf16,
// fp32 master weights, cached bf16 weight copies dropped after every forward), no GradScaler.
// Differences from the Python eager baseline: torch::optim::AdamW updates parameter by parameter
// (Python's default on CUDA is the multi-tensor foreach path); the head activations (sigmoid,
// tanh, normalise) that sider_ref's forward also returns are not computed (the loss applies its own).
//
// usage: libtorch_baseline [--mode bf16_cl|fp32] [--device cuda|cpu] [--batch-sizes 64,128,256]
//          [--height 256] [--width 512] [--steps 50] [--warmup 10] [--data DIR | --synthetic]
//          [--pool 4] [--loss-variant sider|corrected] [--seed 42] [--json OUT] [--commit SHA]
//        libtorch_baseline --check-dir DIR [...]   self-check for the tests (see check_dir())
#include <torch/torch.h>
#include <torch/version.h>

#include <ATen/autocast_mode.h>

#ifdef SF_BASELINE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace F = torch::nn::functional;
using torch::Tensor;
using torch::indexing::Slice;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define SF_AUTOCAST_PER_DEVICE 1
#endif

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

// ------------------------------------------------------------------------------------------------
// Model (MODEL_SPEC §1; tools/reference/sider_ref.py). Registration order = state_dict order.
// ------------------------------------------------------------------------------------------------
enum class Act { SiLU, ReLU, None };

struct ConvBNActImpl : torch::nn::Module {
    torch::nn::Conv2d conv{nullptr};
    torch::nn::BatchNorm2d bn{nullptr};
    Act act;
    ConvBNActImpl(int64_t cin, int64_t cout, int64_t k = 1, int64_t s = 1, int64_t groups = 1, Act a = Act::SiLU,
                  bool bias = false)
        : act(a) {
        conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(cin, cout, k)
                                                             .stride(s)
                                                             .padding((k - 1) / 2)
                                                             .groups(groups)
                                                             .bias(bias)));
        bn = register_module("bn", torch::nn::BatchNorm2d(torch::nn::BatchNormOptions(cout).eps(1e-5).momentum(0.1)));
    }
    Tensor forward(Tensor x) {
        x = bn(conv(x));
        if (act == Act::SiLU) return torch::silu(x);
        if (act == Act::ReLU) return torch::relu(x);
        return x;
    }
};
TORCH_MODULE(ConvBNAct);

struct DSConvImpl : torch::nn::Module {
    ConvBNAct dw_conv{nullptr}, pw_conv{nullptr};
    DSConvImpl(int64_t cin, int64_t cout, int64_t s) {
        dw_conv = register_module("dw_conv", ConvBNAct(cin, cin, 3, s, cin, Act::SiLU));
        pw_conv = register_module("pw_conv", ConvBNAct(cin, cout, 1, 1, 1, Act::SiLU));
    }
    Tensor forward(Tensor x) { return pw_conv(dw_conv(x)); }
};
TORCH_MODULE(DSConv);

struct LiteBlockImpl : torch::nn::Module {
    ConvBNAct pw_expand{nullptr}, dw_conv{nullptr}, pw_project{nullptr};
    explicit LiteBlockImpl(int64_t c) {
        const int64_t h = 2 * c;
        pw_expand = register_module("pw_expand", ConvBNAct(c, h, 1, 1, 1, Act::SiLU));
        dw_conv = register_module("dw_conv", ConvBNAct(h, h, 3, 1, h, Act::SiLU));
        pw_project = register_module("pw_project", ConvBNAct(h, c, 1, 1, 1, Act::None));
    }
    Tensor forward(Tensor x) { return x + pw_project(dw_conv(pw_expand(x))); }
};
TORCH_MODULE(LiteBlock);

torch::nn::Sequential blocks(int64_t c, int n) {
    torch::nn::Sequential s;
    for (int i = 0; i < n; ++i) s->push_back(LiteBlock(c));
    return s;
}

// Upsample (bilinear, align_corners=False) first, then a linear 1x1 ConvBN: the Python
// nn.Sequential(Upsample, ConvBNAct), keys "<name>.1.conv...".
struct UpImpl : torch::nn::Module {
    torch::nn::Upsample upsample{nullptr};
    ConvBNAct conv{nullptr};
    UpImpl(int64_t cin, int64_t cout, double factor) {
        upsample = register_module("0", torch::nn::Upsample(torch::nn::UpsampleOptions()
                                                                .scale_factor(std::vector<double>{factor, factor})
                                                                .mode(torch::kBilinear)
                                                                .align_corners(false)));
        conv = register_module("1", ConvBNAct(cin, cout, 1, 1, 1, Act::None));
    }
    Tensor forward(const Tensor& x) { return conv(upsample(x)); }
};
TORCH_MODULE(Up);

// n > 1 stride-2 DSConvs, all but the last keeping cin channels: keys "<name>.<i>.dw_conv...".
struct DownChainImpl : torch::nn::Module {
    std::vector<DSConv> convs;
    DownChainImpl(int64_t cin, int64_t cout, int n) {
        for (int i = 0; i < n; ++i) convs.push_back(register_module(std::to_string(i), DSConv(cin, i < n - 1 ? cin : cout, 2)));
    }
    Tensor forward(Tensor x) {
        for (auto& c : convs) x = c(x);
        return x;
    }
};
TORCH_MODULE(DownChain);

// A child registered under `name` and called through a closure (Up, DSConv or DownChain).
using Fn = std::function<Tensor(const Tensor&)>;
Fn reg_up(torch::nn::Module& parent, const std::string& name, int64_t cin, int64_t cout, double factor) {
    Up m = parent.register_module(name, Up(cin, cout, factor));
    return [m](const Tensor& x) mutable { return m(x); };
}
// n == 1 is a bare DSConv (keys "<name>.dw_conv..."), as the Python _down_chain.
Fn reg_down(torch::nn::Module& parent, const std::string& name, int64_t cin, int64_t cout, int n) {
    if (n == 1) {
        DSConv m = parent.register_module(name, DSConv(cin, cout, 2));
        return [m](const Tensor& x) mutable { return m(x); };
    }
    DownChain m = parent.register_module(name, DownChain(cin, cout, n));
    return [m](const Tensor& x) mutable { return m(x); };
}

Tensor up2(const Tensor& x) {
    return F::interpolate(
        x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kBilinear).align_corners(
               false));
}

struct StemImpl : torch::nn::Module {
    ConvBNAct conv1{nullptr}, conv2{nullptr};
    torch::nn::Sequential lite_blocks{nullptr};
    explicit StemImpl(int64_t cin) {
        conv1 = register_module("conv1", ConvBNAct(cin, 32, 3, 2));
        conv2 = register_module("conv2", ConvBNAct(32, 32, 3, 2));
        lite_blocks = register_module("lite_blocks", blocks(32, 2));
    }
    Tensor forward(Tensor x) { return lite_blocks->forward(conv2(conv1(x))); }
};
TORCH_MODULE(Stem);

struct Fusion2Impl : torch::nn::Module {
    Fn up_1_8_to_1_4, down_1_4_to_1_8;
    ConvBNAct smooth_1_4{nullptr}, smooth_1_8{nullptr};
    Fusion2Impl() {
        up_1_8_to_1_4 = reg_up(*this, "up_1_8_to_1_4", 64, 32, 2);
        smooth_1_4 = register_module("smooth_1_4", ConvBNAct(32, 32, 3));
        down_1_4_to_1_8 = reg_down(*this, "down_1_4_to_1_8", 32, 64, 1);
        smooth_1_8 = register_module("smooth_1_8", ConvBNAct(64, 64, 3));
    }
    std::vector<Tensor> forward(const Tensor& x1, const Tensor& x2) {
        return {smooth_1_4(x1 + up_1_8_to_1_4(x2)), smooth_1_8(x2 + down_1_4_to_1_8(x1))};
    }
};
TORCH_MODULE(Fusion2);

struct Fusion3Impl : torch::nn::Module {
    Fn up_1_8_to_1_4, up_1_16_to_1_4, down_1_4_to_1_8, up_1_16_to_1_8, down_1_4_to_1_16, down_1_8_to_1_16;
    ConvBNAct smooth_1_4{nullptr}, smooth_1_8{nullptr}, smooth_1_16{nullptr};
    Fusion3Impl() {
        up_1_8_to_1_4 = reg_up(*this, "up_1_8_to_1_4", 64, 32, 2);
        up_1_16_to_1_4 = reg_up(*this, "up_1_16_to_1_4", 128, 32, 4);
        smooth_1_4 = register_module("smooth_1_4", ConvBNAct(32, 32, 3));
        down_1_4_to_1_8 = reg_down(*this, "down_1_4_to_1_8", 32, 64, 1);
        up_1_16_to_1_8 = reg_up(*this, "up_1_16_to_1_8", 128, 64, 2);
        smooth_1_8 = register_module("smooth_1_8", ConvBNAct(64, 64, 3));
        down_1_4_to_1_16 = reg_down(*this, "down_1_4_to_1_16", 32, 128, 2);
        down_1_8_to_1_16 = reg_down(*this, "down_1_8_to_1_16", 64, 128, 1);
        smooth_1_16 = register_module("smooth_1_16", ConvBNAct(128, 128, 3));
    }
    std::vector<Tensor> forward(const Tensor& z1, const Tensor& z2, const Tensor& z3) {
        Tensor t1 = smooth_1_4(z1 + up_1_8_to_1_4(z2) + up_1_16_to_1_4(z3));
        Tensor t2 = smooth_1_8(z2 + down_1_4_to_1_8(z1) + up_1_16_to_1_8(z3));
        Tensor t3 = smooth_1_16(z3 + down_1_4_to_1_16(z1) + down_1_8_to_1_16(z2));
        return {t1, t2, t3};
    }
};
TORCH_MODULE(Fusion3);

struct Fusion4Impl : torch::nn::Module {
    Fn up_1_8_to_1_4, up_1_16_to_1_4, up_1_32_to_1_4, down_1_4_to_1_8, up_1_16_to_1_8, up_1_32_to_1_8,
        down_1_4_to_1_16, down_1_8_to_1_16, up_1_32_to_1_16, down_1_4_to_1_32, down_1_8_to_1_32, down_1_16_to_1_32;
    ConvBNAct smooth_1_4{nullptr}, smooth_1_8{nullptr}, smooth_1_16{nullptr}, smooth_1_32{nullptr};
    Fusion4Impl() {
        up_1_8_to_1_4 = reg_up(*this, "up_1_8_to_1_4", 64, 32, 2);
        up_1_16_to_1_4 = reg_up(*this, "up_1_16_to_1_4", 128, 32, 4);
        up_1_32_to_1_4 = reg_up(*this, "up_1_32_to_1_4", 256, 32, 8);
        smooth_1_4 = register_module("smooth_1_4", ConvBNAct(32, 32, 3));
        down_1_4_to_1_8 = reg_down(*this, "down_1_4_to_1_8", 32, 64, 1);
        up_1_16_to_1_8 = reg_up(*this, "up_1_16_to_1_8", 128, 64, 2);
        up_1_32_to_1_8 = reg_up(*this, "up_1_32_to_1_8", 256, 64, 4);
        smooth_1_8 = register_module("smooth_1_8", ConvBNAct(64, 64, 3));
        down_1_4_to_1_16 = reg_down(*this, "down_1_4_to_1_16", 32, 128, 2);
        down_1_8_to_1_16 = reg_down(*this, "down_1_8_to_1_16", 64, 128, 1);
        up_1_32_to_1_16 = reg_up(*this, "up_1_32_to_1_16", 256, 128, 2);
        smooth_1_16 = register_module("smooth_1_16", ConvBNAct(128, 128, 3));
        down_1_4_to_1_32 = reg_down(*this, "down_1_4_to_1_32", 32, 256, 3);
        down_1_8_to_1_32 = reg_down(*this, "down_1_8_to_1_32", 64, 256, 2);
        down_1_16_to_1_32 = reg_down(*this, "down_1_16_to_1_32", 128, 256, 1);
        smooth_1_32 = register_module("smooth_1_32", ConvBNAct(256, 256, 3));
    }
    std::vector<Tensor> forward(const Tensor& u1, const Tensor& u2, const Tensor& u3, const Tensor& u4) {
        Tensor b1 = smooth_1_4(u1 + up_1_8_to_1_4(u2) + up_1_16_to_1_4(u3) + up_1_32_to_1_4(u4));
        Tensor b2 = smooth_1_8(u2 + down_1_4_to_1_8(u1) + up_1_16_to_1_8(u3) + up_1_32_to_1_8(u4));
        Tensor b3 = smooth_1_16(u3 + down_1_4_to_1_16(u1) + down_1_8_to_1_16(u2) + up_1_32_to_1_16(u4));
        Tensor b4 = smooth_1_32(u4 + down_1_4_to_1_32(u1) + down_1_8_to_1_32(u2) + down_1_16_to_1_32(u3));
        return {b1, b2, b3, b4};
    }
};
TORCH_MODULE(Fusion4);

struct Stage2Impl : torch::nn::Module {
    ConvBNAct t2_b1_keep{nullptr};
    DSConv t2_b2_down{nullptr};
    torch::nn::Sequential branch_1_4{nullptr}, branch_1_8{nullptr};
    Fusion2 fusion{nullptr};
    Stage2Impl() {
        t2_b1_keep = register_module("t2_b1_keep", ConvBNAct(32, 32, 1));
        t2_b2_down = register_module("t2_b2_down", DSConv(32, 64, 2));
        branch_1_4 = register_module("branch_1_4", blocks(32, 2));
        branch_1_8 = register_module("branch_1_8", blocks(64, 2));
        fusion = register_module("fusion", Fusion2());
    }
    std::vector<Tensor> forward(const Tensor& x) {
        return fusion->forward(branch_1_4->forward(t2_b1_keep(x)), branch_1_8->forward(t2_b2_down(x)));
    }
};
TORCH_MODULE(Stage2);

struct Stage3Impl : torch::nn::Module {
    DSConv t3_b3_from_1_8{nullptr};
    torch::nn::Sequential branch_1_4{nullptr}, branch_1_8{nullptr}, branch_1_16{nullptr};
    Fusion3 fusion{nullptr};
    Stage3Impl() {
        t3_b3_from_1_8 = register_module("t3_b3_from_1_8", DSConv(64, 128, 2));
        branch_1_4 = register_module("branch_1_4", blocks(32, 3));
        branch_1_8 = register_module("branch_1_8", blocks(64, 3));
        branch_1_16 = register_module("branch_1_16", blocks(128, 3));
        fusion = register_module("fusion", Fusion3());
    }
    std::vector<Tensor> forward(const Tensor& y1, const Tensor& y2) {
        Tensor z3 = t3_b3_from_1_8(y2);
        return fusion->forward(branch_1_4->forward(y1), branch_1_8->forward(y2), branch_1_16->forward(z3));
    }
};
TORCH_MODULE(Stage3);

struct Stage4Impl : torch::nn::Module {
    DSConv t4_b4_from_1_16{nullptr};
    torch::nn::Sequential branch_1_4{nullptr}, branch_1_8{nullptr}, branch_1_16{nullptr}, branch_1_32{nullptr};
    Fusion4 fusion{nullptr};
    Stage4Impl() {
        t4_b4_from_1_16 = register_module("t4_b4_from_1_16", DSConv(128, 256, 2));
        branch_1_4 = register_module("branch_1_4", blocks(32, 2));
        branch_1_8 = register_module("branch_1_8", blocks(64, 2));
        branch_1_16 = register_module("branch_1_16", blocks(128, 2));
        branch_1_32 = register_module("branch_1_32", blocks(256, 2));
        fusion = register_module("fusion", Fusion4());
    }
    std::vector<Tensor> forward(const Tensor& t1, const Tensor& t2, const Tensor& t3) {
        Tensor u4 = t4_b4_from_1_16(t3);
        return fusion->forward(branch_1_4->forward(t1), branch_1_8->forward(t2), branch_1_16->forward(t3),
                               branch_1_32->forward(u4));
    }
};
TORCH_MODULE(Stage4);

// (softplus(wa) a + softplus(wb) b) / (softplus(wa) + softplus(wb) + 1e-4) -> 3x3 ConvBN SiLU.
struct WeightedFusionImpl : torch::nn::Module {
    Tensor weight_a, weight_b;
    ConvBNAct smooth{nullptr};
    explicit WeightedFusionImpl(int64_t c) {
        weight_a = register_parameter("weight_a", torch::ones({1}));
        weight_b = register_parameter("weight_b", torch::ones({1}));
        smooth = register_module("smooth", ConvBNAct(c, c, 3));
    }
    Tensor forward(const Tensor& a, const Tensor& b) {
        Tensor wa = torch::softplus(weight_a), wb = torch::softplus(weight_b);
        return smooth((wa * a + wb * b) / (wa + wb + 1e-4));
    }
};
TORCH_MODULE(WeightedFusion);

struct LiteFPNImpl : torch::nn::Module {
    ConvBNAct lateral_1_32{nullptr}, lateral_1_16{nullptr}, lateral_1_8{nullptr}, lateral_1_4{nullptr},
        smooth_p5{nullptr};
    WeightedFusion fuse_1_16{nullptr}, fuse_1_8{nullptr}, fuse_1_4{nullptr};
    explicit LiteFPNImpl(int64_t c) {
        lateral_1_32 = register_module("lateral_1_32", ConvBNAct(256, c, 1, 1, 1, Act::None));
        lateral_1_16 = register_module("lateral_1_16", ConvBNAct(128, c, 1, 1, 1, Act::None));
        lateral_1_8 = register_module("lateral_1_8", ConvBNAct(64, c, 1, 1, 1, Act::None));
        lateral_1_4 = register_module("lateral_1_4", ConvBNAct(32, c, 1, 1, 1, Act::None));
        smooth_p5 = register_module("smooth_p5", ConvBNAct(c, c, 3));
        fuse_1_16 = register_module("fuse_1_16", WeightedFusion(c));
        fuse_1_8 = register_module("fuse_1_8", WeightedFusion(c));
        fuse_1_4 = register_module("fuse_1_4", WeightedFusion(c));
    }
    Tensor forward(const std::vector<Tensor>& b) {
        Tensor p5 = lateral_1_32(b[3]), p4 = lateral_1_16(b[2]), p3 = lateral_1_8(b[1]), hr = lateral_1_4(b[0]);
        Tensor p4td = fuse_1_16(up2(smooth_p5(p5)), p4);
        Tensor p3td = fuse_1_8(up2(p4td), p3);
        return fuse_1_4(hr, up2(p3td));
    }
};
TORCH_MODULE(LiteFPN);

struct HeadImpl : torch::nn::Module {
    ConvBNAct conv1{nullptr};
    torch::nn::Conv2d conv2{nullptr};
    HeadImpl(int64_t cin, int64_t cmid, int64_t cout) {
        conv1 = register_module("conv1", ConvBNAct(cin, cmid, 3, 1, 1, Act::ReLU, true));
        conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(cmid, cout, 1).bias(true)));
    }
    Tensor forward(const Tensor& x) { return conv2(conv1(x)); }
};
TORCH_MODULE(Head);

struct Logits {
    Tensor gap, piece, offset, angle;  // the heads' last-conv outputs
};

struct SiderModelImpl : torch::nn::Module {
    Stem stem{nullptr};
    Stage2 stage2{nullptr};
    Stage3 stage3{nullptr};
    Stage4 stage4{nullptr};
    LiteFPN lite_fpn{nullptr};
    std::shared_ptr<torch::nn::Module> dual_head;
    Head heatmap_gap{nullptr}, heatmap_piece{nullptr}, offset{nullptr}, angle{nullptr};
    explicit SiderModelImpl(int64_t cin) {
        stem = register_module("stem", Stem(cin));
        stage2 = register_module("stage2", Stage2());
        stage3 = register_module("stage3", Stage3());
        stage4 = register_module("stage4", Stage4());
        lite_fpn = register_module("lite_fpn", LiteFPN(128));
        dual_head = register_module("dual_head", std::make_shared<torch::nn::Module>("DualHead"));
        heatmap_gap = dual_head->register_module("heatmap_gap", Head(128, 64, 1));
        heatmap_piece = dual_head->register_module("heatmap_piece", Head(128, 64, 1));
        offset = dual_head->register_module("offset", Head(128, 64, 4));
        angle = dual_head->register_module("angle", Head(128, 64, 2));
    }
    Logits forward(const Tensor& x) {
        TORCH_CHECK(x.dim() == 4 && x.size(2) % 32 == 0 && x.size(3) % 32 == 0, "input must be N,C,H,W with H, W % 32 == 0");
        std::vector<Tensor> y = stage2->forward(stem->forward(x));
        std::vector<Tensor> t = stage3->forward(y[0], y[1]);
        std::vector<Tensor> b = stage4->forward(t[0], t[1], t[2]);
        Tensor hf = lite_fpn->forward(b);
        return Logits{heatmap_gap(hf), heatmap_piece(hf), offset(hf), angle(hf)};
    }
};
TORCH_MODULE(SiderModel);

// state_dict order: each module's own parameters, then its own buffers, then its children.
struct Entry {
    std::string name;
    Tensor t;
    bool param;
};
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

// ------------------------------------------------------------------------------------------------
// Data: compact shards (docs/FORMAT.md, version 1; read only, the record CRCs are not checked
// here — tools/baselines/shards.py checks them) or synthetic samples.
// ------------------------------------------------------------------------------------------------
struct Label {  // data::Label, 72 bytes
    float gap_x, gap_y, slider_x, slider_y, angle_rad;
    int32_t num_fakes;
    float fake_x[4], fake_y[4];
    float rect_x0, rect_y0, rect_x1, rect_y1;
};
static_assert(sizeof(Label) == 72, "Label must be the 72-byte record");

struct HostData {
    int64_t h = 0, w = 0, c = 0;
    std::vector<uint8_t> pixels;  // n * h * w * c
    std::vector<Label> labels;
};

template <typename T>
T rd(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

std::vector<std::string> list_shards(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = opendir(dir.c_str());
    if (!d) fail(dir + ": no such directory (expected a folder of *.sfshard files)");
    while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n.size() > 8 && n.substr(n.size() - 8) == ".sfshard") out.push_back(dir + "/" + n);
    }
    closedir(d);
    if (out.empty()) fail(dir + ": holds no *.sfshard files (empty dataset)");
    std::sort(out.begin(), out.end());
    return out;
}

// Samples 0 .. n-1 in file order across the folder's shards, wrapping around a smaller dataset.
HostData read_shards(const std::string& dir, int64_t n) {
    struct Shard {
        std::string path;
        uint64_t count, labels_offset, stored;
        bool quant4;
    };
    std::vector<Shard> shards;
    HostData out;
    uint64_t total = 0;
    for (const std::string& p : list_shards(dir)) {
        std::ifstream f(p, std::ios::binary);
        uint8_t hdr[128];
        if (!f.read(reinterpret_cast<char*>(hdr), 128)) fail(p + ": truncated header");
        if (std::memcmp(hdr, "SFSHARD\0", 8) != 0) fail(p + ": not a slidefuse shard (bad magic)");
        if (rd<uint32_t>(hdr + 8) != 1) fail(p + ": unsupported shard version");
        const int64_t h = rd<uint32_t>(hdr + 24), w = rd<uint32_t>(hdr + 28), c = rd<uint32_t>(hdr + 32);
        const uint32_t flags = rd<uint32_t>(hdr + 36);
        if (out.h == 0) out.h = h, out.w = w, out.c = c;
        if (h != out.h || w != out.w || c != out.c) fail(p + ": shard dims differ from the first shard's");
        Shard s{p, rd<uint64_t>(hdr + 16), rd<uint64_t>(hdr + 56), rd<uint32_t>(hdr + 44), (flags & 1u) != 0};
        total += s.count;
        shards.push_back(s);
    }
    if (total == 0) fail(dir + ": the shards hold no samples");
    const size_t per = static_cast<size_t>(out.h * out.w * out.c);
    out.pixels.resize(static_cast<size_t>(n) * per);
    out.labels.resize(static_cast<size_t>(n));
    std::vector<uint8_t> buf;
    for (int64_t k = 0; k < n; ++k) {
        uint64_t g = static_cast<uint64_t>(k) % total;
        size_t si = 0;
        while (g >= shards[si].count) g -= shards[si++].count;
        const Shard& s = shards[si];
        std::ifstream f(s.path, std::ios::binary);
        buf.resize(s.stored);
        f.seekg(static_cast<std::streamoff>(4096 + g * s.stored));
        if (!f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(s.stored)))
            fail(s.path + ": truncated pixel record");
        uint8_t* dst = out.pixels.data() + static_cast<size_t>(k) * per;
        if (s.quant4) {
            for (size_t j = 0; j < s.stored; ++j) {
                dst[2 * j] = buf[j] & 0xF0;
                dst[2 * j + 1] = static_cast<uint8_t>((buf[j] & 0x0F) << 4);
            }
        } else {
            std::memcpy(dst, buf.data(), per);
        }
        f.seekg(static_cast<std::streamoff>(s.labels_offset + g * 72));
        if (!f.read(reinterpret_cast<char*>(&out.labels[static_cast<size_t>(k)]), 72))
            fail(s.path + ": truncated label record");
    }
    return out;
}

// Random but valid samples (noise pixels, 255 in the padding; letterbox rectangle; gap, slider,
// 0-4 fakes inside it; a rotation on about half of them). Not the same numbers as the Python
// --synthetic (different generator); compare.py gives every runner the same shards instead.
HostData synthetic(int64_t n, int64_t h, int64_t w, int64_t c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
    auto irange = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
    HostData d{h, w, c, std::vector<uint8_t>(static_cast<size_t>(n * h * w * c)), std::vector<Label>(static_cast<size_t>(n))};
    for (int64_t i = 0; i < n; ++i) {
        int64_t x0 = 0, y0 = 0, x1 = w, y1 = h;
        if (uni(0, 1) < 0.5) {
            const int64_t vh = irange(h / 2, h);
            y0 = irange(0, h - vh), y1 = y0 + vh;
        } else {
            const int64_t vw = irange(w / 2, w);
            x0 = irange(0, w - vw), x1 = x0 + vw;
        }
        uint8_t* px = d.pixels.data() + static_cast<size_t>(i * h * w * c);
        uint64_t bits = 0;
        int left = 0;
        for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x)
                for (int64_t k = 0; k < c; ++k) {
                    if (left == 0) bits = rng(), left = 8;  // 8 random bytes per draw
                    const uint8_t v = static_cast<uint8_t>(bits & 0xFF);
                    bits >>= 8, --left;
                    px[(y * w + x) * c + k] = (x < x0 || x >= x1 || y < y0 || y >= y1) ? 255 : v;
                }
        Label& l = d.labels[static_cast<size_t>(i)];
        std::memset(&l, 0, sizeof(l));
        auto pt = [&](float& px_, float& py_) {
            px_ = static_cast<float>(uni(static_cast<double>(x0), static_cast<double>(x1) - 1e-3));
            py_ = static_cast<float>(uni(static_cast<double>(y0), static_cast<double>(y1) - 1e-3));
        };
        pt(l.gap_x, l.gap_y);
        pt(l.slider_x, l.slider_y);
        l.angle_rad = uni(0, 1) < 0.5 ? static_cast<float>(uni(-0.3, 0.3)) : 0.0f;
        l.num_fakes = static_cast<int32_t>(irange(0, 4));
        for (int k = 0; k < l.num_fakes; ++k) pt(l.fake_x[k], l.fake_y[k]);
        l.rect_x0 = static_cast<float>(x0), l.rect_y0 = static_cast<float>(y0);
        l.rect_x1 = static_cast<float>(x1), l.rect_y1 = static_cast<float>(y1);
    }
    return d;
}

struct Batch {
    Tensor pixels;  // (N, H, W, C) uint8
    Tensor gap, slider, angle, fakes, num_fakes, rect;
};

Batch device_batch(const HostData& d, int64_t first, int64_t n, const torch::Device& dev) {
    const int64_t per = d.h * d.w * d.c;
    std::vector<float> gap, slider, angle, fakes, rect;
    std::vector<int64_t> nf;
    for (int64_t i = first; i < first + n; ++i) {
        const Label& l = d.labels[static_cast<size_t>(i)];
        gap.insert(gap.end(), {l.gap_x, l.gap_y});
        slider.insert(slider.end(), {l.slider_x, l.slider_y});
        angle.push_back(l.angle_rad);
        for (int k = 0; k < 4; ++k) fakes.insert(fakes.end(), {l.fake_x[k], l.fake_y[k]});
        nf.push_back(l.num_fakes);
        rect.insert(rect.end(), {l.rect_x0, l.rect_y0, l.rect_x1, l.rect_y1});
    }
    auto f32 = [&](std::vector<float>& v, std::vector<int64_t> shape) {
        return torch::from_blob(v.data(), shape, torch::kFloat32).clone().to(dev);
    };
    Batch b;
    b.pixels = torch::from_blob(const_cast<uint8_t*>(d.pixels.data()) + first * per, {n, d.h, d.w, d.c}, torch::kUInt8)
                   .clone()
                   .to(dev);
    b.gap = f32(gap, {n, 2});
    b.slider = f32(slider, {n, 2});
    b.angle = f32(angle, {n});
    b.fakes = f32(fakes, {n, 4, 2});
    b.rect = f32(rect, {n, 4});
    b.num_fakes = torch::from_blob(nf.data(), {n}, torch::kInt64).clone().to(dev);
    return b;
}

// v/255 for v = 0..255 by IEEE float division on the host, on `dev` (made once per trainer: a
// host->device copy inside the step would synchronise).
Tensor make_lut(const torch::Device& dev) {
    std::vector<float> v(256);
    for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i) / 255.0f;
    return torch::from_blob(v.data(), {256}, torch::kFloat32).clone().to(dev);  // clone: v dies here
}

// [pixels/255 ..., mask] as kernels/preprocess.cu: v/255 from the table, mask 1 where
// x0 <= x < x1 and y0 <= y < y1 for integer x, y. (N, Cp+1, H, W), NHWC in memory when channels_last.
Tensor preprocess(const Batch& b, const Tensor& lut, bool channels_last) {
    const auto dev = b.pixels.device();
    const int64_t h = b.pixels.size(1), w = b.pixels.size(2);
    Tensor img = lut.index({b.pixels.to(torch::kLong)});
    Tensor xs = torch::arange(w, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    Tensor ys = torch::arange(h, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    Tensor col = (b.rect.index({Slice(), Slice(0, 1)}) <= xs).logical_and(xs < b.rect.index({Slice(), Slice(2, 3)}));
    Tensor row = (b.rect.index({Slice(), Slice(1, 2)}) <= ys).logical_and(ys < b.rect.index({Slice(), Slice(3, 4)}));
    Tensor mask = row.unsqueeze(2).logical_and(col.unsqueeze(1)).to(torch::kFloat32);
    Tensor x = torch::cat({img, mask.unsqueeze(3)}, 3).permute({0, 3, 1, 2});
    return x.contiguous(channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
}

// ------------------------------------------------------------------------------------------------
// Loss: tools/baselines/loss_vec.py op for op (see its docstring for the semantics).
// ------------------------------------------------------------------------------------------------
constexpr double kStride = 4.0;
constexpr int64_t kRadius = 4;
const double kW[] = {1.0, 1.0, 1.0, 1.5, 0.5, 0.3, 0.8};  // focal x2, offset, hn, angle, pad, y
const char* kTerms[] = {"focal_gap", "focal_slider", "offset", "hard_negative", "angle", "padding_bce", "y_axis"};

struct Targets {
    Tensor Y, peak, du, dv, u, v;
};

Tensor cst(double v, const Tensor& like) { return torch::scalar_tensor(v, like.options()); }
Tensor safe(const Tensor& den, const Tensor& ok) { return torch::where(ok, den, torch::ones_like(den)); }

Targets build_targets(const Tensor& xy, int64_t gh, int64_t gw, torch::ScalarType dt) {
    const auto dev = xy.device();
    Tensor u = torch::clamp(torch::trunc(xy.select(1, 0) / kStride), 0, gw - 1).to(torch::kLong);
    Tensor v = torch::clamp(torch::trunc(xy.select(1, 1) / kStride), 0, gh - 1).to(torch::kLong);
    auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev);
    Tensor dr = torch::arange(gh, lopt).unsqueeze(0) - v.unsqueeze(1);
    Tensor dc = torch::arange(gw, lopt).unsqueeze(0) - u.unsqueeze(1);
    Tensor inwin = (dr.abs() <= kRadius).unsqueeze(2).logical_and((dc.abs() <= kRadius).unsqueeze(1));
    Tensor d2 = (dr * dr).unsqueeze(2) + (dc * dc).unsqueeze(1);
    // exp(-d2 / (2 sigma^2)) for d2 = 0..32 in float64, rounded to dt; made on the device (no copy).
    Tensor lut = torch::exp(-torch::arange(2 * kRadius * kRadius + 1, torch::TensorOptions().dtype(torch::kFloat64).device(dev)) /
                            (2 * 1.5 * 1.5))
                     .to(dt);
    Tensor Y = torch::where(inwin, lut.index({torch::clamp_max(d2, lut.numel() - 1)}),
                            torch::zeros({}, torch::TensorOptions().dtype(dt).device(dev)));
    Tensor peak = (dr == 0).unsqueeze(2).logical_and((dc == 0).unsqueeze(1)).to(dt);
    Tensor xyd = xy.to(dt);
    Tensor du = xyd.select(1, 0) / kStride - u.to(dt) - 0.5;
    Tensor dv = xyd.select(1, 1) / kStride - v.to(dt) - 0.5;
    return {Y.unsqueeze(1), peak.unsqueeze(1), du, dv, u, v};
}

Tensor focal(const Tensor& P, const Tensor& Y, const Tensor& M, bool sider) {
    Tensor Pc = torch::clamp(P, 1e-8, 1 - 1e-8);
    Tensor pos = (Y >= 0.8).to(P.scalar_type());
    Tensor ell = pos * (1 - Pc).pow(1.5) * (-torch::log(Pc)) +
                 (1 - pos) * (1 - Y).pow(4) * Pc.pow(1.5) * (-torch::log(torch::clamp_min(1 - Pc, 1e-8)));
    Tensor out;
    if (sider) {
        Tensor den = (pos * M).sum();
        Tensor ok = den != 0;
        out = torch::where(ok, (ell * M).sum() / safe(den, ok), cst(0.01, P));
    } else {
        Tensor num = (ell * M).sum({1, 2, 3}), den = (pos * M).sum({1, 2, 3});
        Tensor keep = den > 0;
        Tensor cnt = keep.sum().to(P.scalar_type());
        Tensor per = torch::where(keep, num / safe(den, keep), torch::zeros_like(num));
        out = torch::where(cnt > 0, per.sum() / torch::clamp_min(cnt, 1), cst(0.01, P));
    }
    return torch::where(torch::isnan(out), cst(1.0, P), out);
}

Tensor sl1(const Tensor& d) {
    Tensor a = d.abs();
    return torch::where(a < 1.0, 0.5 * d * d, a - 0.5);
}

Tensor offset_term(const Tensor& off, const Targets& tg, const Targets& ts, const Tensor& M, bool sider) {
    if (sider) {
        std::vector<Tensor> vals, oks;
        int ch = 0;
        for (const Targets* t : {&tg, &ts}) {
            Tensor w = t->Y * M;
            Tensor tx = t->peak * t->du.view({-1, 1, 1, 1});
            Tensor ty = t->peak * t->dv.view({-1, 1, 1, 1});
            Tensor ell = sl1(off.index({Slice(), Slice(ch, ch + 1)}) - tx) +
                         sl1(off.index({Slice(), Slice(ch + 1, ch + 2)}) - ty);
            Tensor ws = w.sum();
            Tensor ok = ws >= 1e-6;
            vals.push_back((w * ell).sum() / safe(ws, ok));
            oks.push_back(ok);
            ch += 2;
        }
        return torch::where(oks[0], torch::where(oks[1], vals[0] + vals[1], vals[0] + 0.01), cst(0.01, off));
    }
    const int64_t n = off.size(0);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(off.device()));
    Tensor total;
    int64_t ch = 0;
    for (const Targets* t : {&tg, &ts}) {
        Tensor Mp = M.index({ar, 0, t->v, t->u});
        Tensor keep = Mp >= 1e-6;
        Tensor d0 = off.index({ar, ch, t->v, t->u}) - t->du;
        Tensor d1 = off.index({ar, ch + 1, t->v, t->u}) - t->dv;
        Tensor val = (Mp * (sl1(d0) + sl1(d1))) / safe(Mp, keep);
        Tensor cnt = keep.sum().to(off.scalar_type());
        Tensor lk = torch::where(cnt > 0, torch::where(keep, val, torch::zeros_like(val)).sum() / torch::clamp_min(cnt, 1),
                                 cst(0.01, off));
        total = total.defined() ? total + lk : lk;
        ch += 2;
    }
    return total;
}

Tensor bilinear_zero(const Tensor& P, const Tensor& u, const Tensor& v) {
    const int64_t n = P.size(0), gh = P.size(1), gw = P.size(2);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(P.device()));
    Tensor x0 = torch::floor(u), y0 = torch::floor(v);
    Tensor fx = u - x0, fy = v - y0;
    Tensor x0l = x0.to(torch::kLong), y0l = y0.to(torch::kLong);
    Tensor out = torch::zeros({n}, P.options());
    for (int dy = 0; dy < 2; ++dy) {
        Tensor wy = dy ? fy : 1.0 - fy;
        for (int dx = 0; dx < 2; ++dx) {
            Tensor wx = dx ? fx : 1.0 - fx;
            Tensor yy = y0l + dy, xx = x0l + dx;
            Tensor ok = (yy >= 0).logical_and(yy < gh).logical_and(xx >= 0).logical_and(xx < gw);
            Tensor val = P.index({ar, yy.clamp(0, gh - 1), xx.clamp(0, gw - 1)});
            out = out + torch::where(ok, val * (wy * wx), torch::zeros_like(val));
        }
    }
    return out;
}

Tensor hard_negative(const Tensor& Pg, const Batch& b, bool sider, double margin = 0.5) {
    Tensor P = Pg.select(1, 0);
    const auto dt = P.scalar_type();
    Tensor nf = b.num_fakes.to(torch::kLong);
    Tensor K = nf.max();
    Tensor gap = b.gap.to(dt), fakes = b.fakes.to(dt);
    const int64_t n = P.size(0);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(P.device()));
    Tensor sp = bilinear_zero(P, gap.select(1, 0) / kStride, gap.select(1, 1) / kStride);
    Tensor acc = torch::zeros({n}, P.options());
    for (int64_t k = 0; k < fakes.size(1); ++k) {
        Tensor fu, fv, active;
        if (sider) {
            Tensor idx = torch::clamp_min(torch::minimum(torch::full_like(nf, k), nf - 1), 0);
            Tensor f = fakes.index({ar, idx});
            fu = torch::where(nf > 0, torch::trunc(f.select(1, 0) / kStride) / kStride, torch::zeros_like(f.select(1, 0)));
            fv = torch::where(nf > 0, torch::trunc(f.select(1, 1) / kStride) / kStride, torch::zeros_like(f.select(1, 1)));
            active = K > k;
        } else {
            fu = fakes.index({Slice(), k, 0}) / kStride;
            fv = fakes.index({Slice(), k, 1}) / kStride;
            active = nf > k;
        }
        Tensor t = torch::clamp_min(margin - sp + bilinear_zero(P, fu, fv), 0.0);
        acc = acc + torch::where(active, t, torch::zeros_like(t));
    }
    Tensor val;
    if (sider) {
        val = (acc / torch::clamp_min(K, 1).to(dt)).mean();
    } else {
        Tensor has = nf > 0;
        Tensor per = torch::where(has, acc / torch::clamp_min(nf, 1).to(dt), torch::zeros_like(acc));
        val = per.sum() / torch::clamp_min(has.sum(), 1).to(dt);
    }
    return torch::where(K > 0, val, cst(0.0, P));
}

Tensor angle_term(const Tensor& za, const Tensor& Yg, const Tensor& M, const Tensor& angle, bool sider) {
    auto opt = F::NormalizeFuncOptions().p(2).dim(1).eps(1e-12);
    Tensor a = F::normalize(F::normalize(za, opt), opt);
    Tensor th = angle.to(za.scalar_type());
    Tensor s = torch::sin(th).view({-1, 1, 1, 1}), c = torch::cos(th).view({-1, 1, 1, 1});
    Tensor dot = a.index({Slice(), Slice(0, 1)}) * s + a.index({Slice(), Slice(1, 2)}) * c;
    Tensor w = (Yg > 0.7).to(za.scalar_type()) * M;
    if (sider) return ((1 - dot) * w).sum() / (w.sum() + 1e-8);
    Tensor num = ((1 - dot) * w).sum({1, 2, 3}), den = w.sum({1, 2, 3});
    Tensor keep = den > 0;
    Tensor cnt = keep.sum().to(za.scalar_type());
    Tensor per = torch::where(keep, num / (den + 1e-8), torch::zeros_like(num));
    return torch::where(cnt > 0, per.sum() / torch::clamp_min(cnt, 1), cst(0.0, za));
}

Tensor padding_bce(Tensor Pg, Tensor Ps, const Tensor& M, bool sider) {
    if (sider) Pg = torch::sigmoid(Pg), Ps = torch::sigmoid(Ps);  // quirk: second sigmoid
    Tensor lg = torch::clamp_max(-torch::log1p(-torch::clamp(Pg, 1e-4, 1 - 1e-4)), 10.0);
    Tensor ls = torch::clamp_max(-torch::log1p(-torch::clamp(Ps, 1e-4, 1 - 1e-4)), 10.0);
    Tensor pad = 1 - M;
    if (sider) {
        Tensor den = pad.sum();
        Tensor ok = den >= 1e-8;
        return torch::where(ok, ((lg + ls) * pad).sum() / safe(den, ok), cst(0.0, Pg));
    }
    Tensor num = ((lg + ls) * pad).sum({1, 2, 3}), den = pad.sum({1, 2, 3});
    Tensor keep = den >= 1e-8;
    Tensor cnt = keep.sum().to(Pg.scalar_type());
    Tensor per = torch::where(keep, num / safe(den, keep), torch::zeros_like(num));
    return torch::where(cnt > 0, per.sum() / torch::clamp_min(cnt, 1), cst(0.0, Pg));
}

Tensor y_axis(const Tensor& Pg, const Tensor& Ps, const Batch& b, bool sider, double tau = 1.0) {
    const int64_t n = Pg.size(0), gh = Pg.size(2);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(Pg.device()));
    auto dist = [&](const Tensor& P) { return torch::softmax(torch::log(P.select(1, 0).mean(2) + 1e-8) / tau, 1); };
    Tensor dg = dist(Pg), ds = dist(Ps);
    auto row = [&](const Tensor& y0) {
        Tensor y = y0.to(Pg.scalar_type());
        Tensor t = sider ? torch::floor(y / kStride / 4) : torch::floor(y / kStride);
        return torch::clamp(t, 0, gh - 1).to(torch::kLong);
    };
    Tensor tg = row(b.gap.select(1, 1)), ts = row(b.slider.select(1, 1));
    Tensor ce = (-torch::log(dg.index({ar, tg}) + 1e-8) - torch::log(ds.index({ar, ts}) + 1e-8)).mean();
    Tensor emd = (torch::cumsum(dg, 1) - torch::cumsum(ds, 1)).abs().mean();
    return 1.0 * ce + 0.3 * emd;
}

struct LossOut {
    Tensor terms[7];
    Tensor total;
};

LossOut sider_loss(const Logits& lg, const Tensor& inp, const Batch& b, bool sider,
                   torch::ScalarType dt = torch::kFloat32) {
    Tensor zg = lg.gap.to(dt), zs = lg.piece.to(dt), zo = lg.offset.to(dt), za = lg.angle.to(dt);
    const int64_t gh = zg.size(2), gw = zg.size(3);
    Tensor Pg = torch::sigmoid(zg), Ps = torch::sigmoid(zs);
    Tensor off = 0.5 * torch::tanh(zo);
    Tensor M = torch::avg_pool2d(inp.index({Slice(), Slice(inp.size(1) - 1, inp.size(1))}).to(dt), {4, 4}, {4, 4});
    Targets tg = build_targets(b.gap, gh, gw, dt), ts = build_targets(b.slider, gh, gw, dt);
    LossOut o;
    o.terms[0] = focal(Pg, tg.Y, M, sider);
    o.terms[1] = focal(Ps, ts.Y, M, sider);
    o.terms[2] = offset_term(off, tg, ts, M, sider);
    o.terms[3] = hard_negative(Pg, b, sider);
    Tensor use_angle = (b.angle != 0).any();
    Tensor ang = angle_term(za, tg.Y, M, b.angle, sider);
    o.terms[4] = torch::where(use_angle, ang, cst(0.0, ang));
    o.terms[5] = padding_bce(Pg, Ps, M, sider);
    o.terms[6] = y_axis(Pg, Ps, b, sider);
    Tensor zero = cst(0.0, zg), total = zero;
    Tensor valid = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(zg.device()));
    for (int i = 0; i < 7; ++i) {
        Tensor v = i == 4 ? ang : o.terms[i];
        Tensor use = torch::isfinite(v);
        if (i == 4) use = use.logical_and(use_angle).logical_and(ang > 0);
        total = total + torch::where(use, kW[i] * v, zero);
        valid = valid + use.to(torch::kLong);
    }
    o.total = torch::where(valid > 0, total, cst(1.0, zg));
    return o;
}

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

// ------------------------------------------------------------------------------------------------
// Timing and JSON
// ------------------------------------------------------------------------------------------------
double percentile_linear(std::vector<double> v, double q) {  // bench_schema.percentile
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

std::string jstr(const std::string& s) {
    std::string o = "\"";
    for (char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            o += '\\';
            o += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            o += buf;
        } else {
            o += ch;
        }
    }
    return o + "\"";
}
std::string jnum(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return buf;
}

struct Run {
    int64_t batch = 0;
    std::vector<double> timings;
    int64_t peak = -1;  // -1: unknown
    std::string status = "ok", error;
};

std::string run_json(const Settings& s, const Run& r) {
    std::ostringstream o;
    o << "{\"batch\": " << r.batch << ", \"height\": " << s.height << ", \"width\": " << s.width
      << ", \"channels\": 2, \"mode\": " << jstr(s.mode) << ", \"warmup_steps\": " << s.warmup
      << ", \"timed_steps\": " << r.timings.size() << ", \"timings_ms\": [";
    for (size_t i = 0; i < r.timings.size(); ++i) o << (i ? ", " : "") << jnum(r.timings[i]);
    o << "], ";
    if (r.timings.empty()) {
        o << "\"median_ms\": null, \"p10_ms\": null, \"p90_ms\": null, \"samples_per_s\": null, ";
    } else {
        const double med = percentile_linear(r.timings, 0.5);
        o << "\"median_ms\": " << jnum(med) << ", \"p10_ms\": " << jnum(percentile_linear(r.timings, 0.1))
          << ", \"p90_ms\": " << jnum(percentile_linear(r.timings, 0.9))
          << ", \"samples_per_s\": " << jnum(static_cast<double>(r.batch) * 1000.0 / med) << ", ";
    }
    o << "\"peak_mem_bytes\": " << (r.peak < 0 ? std::string("null") : std::to_string(r.peak))
      << ", \"status\": " << jstr(r.status);
    if (!r.error.empty()) o << ", \"error\": " << jstr(r.error);
    // The C++ API has no fused or multi-tensor AdamW: say which update ran (compare.py lists it).
    o << ", \"extra\": {\"optimizer\": \"AdamW per-parameter (torch::optim)\"}";
    return o.str() + "}";
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string shell_line(const char* cmd) {
    std::string out;
    if (FILE* p = popen(cmd, "r")) {
        char buf[256];
        if (std::fgets(buf, sizeof(buf), p)) out = buf;
        const int rc = pclose(p);
        if (rc != 0) out.clear();
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
    return out;
}

std::string device_json(const torch::Device& dev) {
    std::ostringstream o;
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda()) {
        auto opt = [](const std::string& s) { return s.empty() ? std::string("null") : jstr(s); };
        const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
        int rt = 0;
        cudaRuntimeGetVersion(&rt);
        const std::string cuda = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
        const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
        o << "{\"name\": " << jstr(p->name) << ", \"driver\": "
          << opt(shell_line("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null"))
          << ", \"cuda\": " << jstr(cuda) << ", \"cudnn\": " << jstr(std::to_string(cudnn))
          << ", \"torch\": " << jstr(TORCH_VERSION) << "}";
        return o.str();
    }
#endif
    (void)dev;
    std::string cpu = shell_line("grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'");
    o << "{\"name\": " << jstr("CPU: " + (cpu.empty() ? std::string("unknown") : cpu))
      << ", \"driver\": null, \"cuda\": null, \"cudnn\": null, \"torch\": " << jstr(TORCH_VERSION) << "}";
    return o.str();
}

void sync(const torch::Device& dev) {
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index() < 0 ? -1 : dev.index());
#else
    (void)dev;
#endif
}

HostData load_data(const Settings& s, int64_t n) {
    HostData d = s.data.empty() ? synthetic(n, s.height, s.width, 1, s.seed) : read_shards(s.data, n);
    if (d.h != s.height || d.w != s.width)
        fail(s.data + ": shards are " + std::to_string(d.h) + "x" + std::to_string(d.w) + ", the benchmark input is " +
             std::to_string(s.height) + "x" + std::to_string(s.width) + " (--height/--width)");
    if (d.c != 1) fail(s.data + ": the baseline trains the 2-channel (gray + mask) model; shards hold RGB");
    return d;
}

Run bench_one(const Settings& s, int64_t batch, const torch::Device& dev) {
    Run r;
    r.batch = batch;
    try {
#ifdef SF_BASELINE_CUDA
        if (dev.is_cuda()) {
            at::globalContext().setBenchmarkCuDNN(s.amp());  // bf16_cl: cudnn.benchmark on
            c10::cuda::CUDACachingAllocator::emptyCache();
        }
#endif
        const HostData d = load_data(s, batch * s.pool);
        std::vector<Batch> pool;
        for (int k = 0; k < s.pool; ++k) pool.push_back(device_batch(d, k * batch, batch, dev));
        SiderModel m(2);
        init_weights(m, s.seed);
        m->to(dev);
        Trainer tr(m, s.amp(), s.channels_last(), s.variant_sider, dev.type());
        for (int i = 0; i < s.warmup; ++i) tr.step(pool[static_cast<size_t>(i % s.pool)]);
        sync(dev);
#ifdef SF_BASELINE_CUDA
        // Peak over the timed steps (as torch_baseline.py): not the warm-up's autotuning scratch.
        if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
        LossOut last;
#ifdef SF_BASELINE_CUDA
        if (dev.is_cuda()) {
            std::vector<at::cuda::CUDAEvent> ev;
            for (int i = 0; i < 2 * s.steps; ++i) ev.emplace_back(cudaEventDefault);
            for (int i = 0; i < s.steps; ++i) {
                ev[static_cast<size_t>(2 * i)].record();
                last = tr.step(pool[static_cast<size_t>((s.warmup + i) % s.pool)]);
                ev[static_cast<size_t>(2 * i + 1)].record();
            }
            sync(dev);
            for (int i = 0; i < s.steps; ++i)
                r.timings.push_back(ev[static_cast<size_t>(2 * i)].elapsed_time(ev[static_cast<size_t>(2 * i + 1)]));
            r.peak = static_cast<int64_t>(
                c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).allocated_bytes[0].peak);
        } else
#endif
        {
            for (int i = 0; i < s.steps; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                last = tr.step(pool[static_cast<size_t>((s.warmup + i) % s.pool)]);
                r.timings.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
        }
        const double loss = last.total.item<double>();
        if (!std::isfinite(loss)) {
            r.status = "error";
            r.error = "non-finite loss after the timed steps";
        }
    } catch (const std::exception& e) {
        std::string msg = e.what();
        const size_t nl = msg.find('\n');
        if (nl != std::string::npos) msg = msg.substr(0, nl);
        r.status = msg.find("out of memory") != std::string::npos ? "oom" : "error";
        r.error = msg;
        r.timings.clear();
        r.peak = -1;
    }
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    return r;
}

// ------------------------------------------------------------------------------------------------
// Self-check for tests/baselines/test_baselines.py. DIR holds input.f32 ((N, 2, H, W) float32, NCHW)
// and labels.bin (N 72-byte records), optionally pixels.u8 ((N, H, W) uint8). Writes, with the
// model initialised by --seed (preprocessed.f32 only with pixels.u8):
//   preprocessed.f32     preprocess() of pixels.u8 + the labels' rectangles, (N, 2, H, W) NCHW
//   params.tsv   name, shape (AxB or scalar), param|buffer, sum, sum of squares (state_dict order)
//   logits_<head>.f32    forward in fp32 (train mode) on input.f32
//   loss.tsv     the 7 terms and total (fp32) on those logits
//   grads.tsv    name, sum, L2 norm of d total / d parameter
//   steps.tsv    mode, step, loss: 3 recipe steps on the batch from a fresh model, fp32 and bf16_cl
// ------------------------------------------------------------------------------------------------
std::vector<char> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot read " + path);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string shape_str(const Tensor& t) {
    if (t.dim() == 0) return "scalar";
    std::string s;
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "x" : "") + std::to_string(t.size(i));
    return s;
}

int check_dir(const Settings& s) {
    const std::string dir = s.check_dir;
    const int64_t n = s.batch_sizes.at(0), h = s.height, w = s.width;
    std::vector<char> in = read_file(dir + "/input.f32"), lb = read_file(dir + "/labels.bin");
    if (in.size() != static_cast<size_t>(n * 2 * h * w * 4) || lb.size() != static_cast<size_t>(n * 72))
        fail("check-dir: input.f32 / labels.bin sizes do not match --batch-sizes N --height H --width W");
    HostData d{h, w, 1, std::vector<uint8_t>(static_cast<size_t>(n * h * w)), std::vector<Label>(static_cast<size_t>(n))};
    std::memcpy(d.labels.data(), lb.data(), lb.size());
    std::ifstream px(dir + "/pixels.u8", std::ios::binary);
    const bool have_pixels = static_cast<bool>(px);
    if (have_pixels && !px.read(reinterpret_cast<char*>(d.pixels.data()), static_cast<std::streamsize>(d.pixels.size())))
        fail("check-dir: pixels.u8 must hold N*H*W bytes");
    const torch::Device cpu(torch::kCPU);
    Batch b = device_batch(d, 0, n, cpu);
    Tensor x = torch::from_blob(in.data(), {n, 2, h, w}, torch::kFloat32).clone();
    if (have_pixels) {  // the benchmark's preprocessing of those pixels, NCHW float32
        Tensor p = preprocess(b, make_lut(cpu), true).contiguous();
        std::ofstream f(dir + "/preprocessed.f32", std::ios::binary);
        f.write(static_cast<const char*>(p.data_ptr()), static_cast<std::streamsize>(p.numel() * 4));
    }

    SiderModel m(2);
    init_weights(m, s.seed);
    std::vector<Entry> entries;
    state_entries(*m, "", entries);
    {
        std::ofstream f(dir + "/params.tsv");
        for (const Entry& e : entries) {
            Tensor t = e.t.to(torch::kFloat64);
            f << e.name << "\t" << shape_str(e.t) << "\t" << (e.param ? "param" : "buffer") << "\t"
              << jnum(t.sum().item<double>()) << "\t" << jnum(t.pow(2).sum().item<double>()) << "\n";
        }
    }
    m->train();
    Logits lg = m->forward(x);
    const std::pair<const char*, Tensor*> heads[] = {
        {"heatmap_gap", &lg.gap}, {"heatmap_piece", &lg.piece}, {"offset", &lg.offset}, {"angle", &lg.angle}};
    for (const auto& hd : heads) {
        Tensor t = hd.second->detach().contiguous();
        std::ofstream f(dir + "/logits_" + hd.first + ".f32", std::ios::binary);
        f.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 4));
    }
    LossOut l = sider_loss(lg, x, b, s.variant_sider);
    {
        std::ofstream f(dir + "/loss.tsv");
        for (int i = 0; i < 7; ++i) f << kTerms[i] << "\t" << jnum(l.terms[i].item<double>()) << "\n";
        f << "total\t" << jnum(l.total.item<double>()) << "\n";
    }
    l.total.backward();
    {
        std::ofstream f(dir + "/grads.tsv");
        for (const auto& kv : m->named_parameters(true)) {
            Tensor g = kv.value().grad().to(torch::kFloat64);
            f << kv.key() << "\t" << jnum(g.sum().item<double>()) << "\t" << jnum(g.norm().item<double>()) << "\n";
        }
    }
    std::ofstream f(dir + "/steps.tsv");
    for (const char* mode : {"fp32", "bf16_cl"}) {
        const bool bf = std::string(mode) == "bf16_cl";
        SiderModel fresh(2);
        init_weights(fresh, s.seed);
        Trainer tr(fresh, bf, bf, s.variant_sider, torch::kCPU);
        // Trainer::step preprocesses pixels; the check feeds the given input tensor instead.
        for (int i = 0; i < 3; ++i) {
            Tensor xi = bf ? x.contiguous(torch::MemoryFormat::ChannelsLast) : x;
            Logits li;
            {
                AutocastScope ac(bf, torch::kCPU);
                li = tr.model->forward(xi);
            }
            LossOut lo = sider_loss(li, xi, b, s.variant_sider);
            tr.opt->zero_grad();
            lo.total.backward();
            tr.clip_grads();
            tr.opt->step();
            f << mode << "\t" << i << "\t" << jnum(lo.total.item<double>()) << "\n";
        }
    }
    std::printf("check-dir: wrote params.tsv, logits_*.f32, loss.tsv, grads.tsv, steps.tsv to %s\n", dir.c_str());
    return 0;
}

// ------------------------------------------------------------------------------------------------
// Command line
// ------------------------------------------------------------------------------------------------
const char* kUsage =
    "usage: libtorch_baseline [--mode bf16_cl|fp32] [--device cuda|cpu] [--batch-sizes 64,128,256]\n"
    "         [--height 256] [--width 512] [--steps 50] [--warmup 10] [--data DIR | --synthetic] [--pool 4]\n"
    "         [--loss-variant sider|corrected] [--seed 42] [--json OUT] [--commit SHA]\n"
    "       libtorch_baseline --check-dir DIR --batch-sizes N --height H --width W [--seed S] [--loss-variant V]\n";

int64_t to_int(const std::string& opt, const std::string& v, int64_t lo) {
    size_t used = 0;
    long long x = 0;
    try {
        x = std::stoll(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || x < lo) fail(opt + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
    return x;
}

Settings parse(int argc, char** argv) {
    Settings s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        }
        if (a == "--synthetic") {
            s.data.clear();
            continue;
        }
        if (i + 1 >= argc) fail(a + " needs a value\n" + kUsage);
        const std::string v = argv[++i];
        if (a == "--mode") {
            if (v != "bf16_cl" && v != "fp32") fail("--mode: bf16_cl or fp32, got '" + v + "'");
            s.mode = v;
        } else if (a == "--device") {
            s.device = v;
        } else if (a == "--batch-sizes" || a == "--batch") {
            s.batch_sizes.clear();
            std::stringstream ss(v);
            for (std::string t; std::getline(ss, t, ',');)
                if (!t.empty()) s.batch_sizes.push_back(to_int(a, t, 1));
            if (s.batch_sizes.empty()) fail(a + ": no batch size given");
        } else if (a == "--height") {
            s.height = to_int(a, v, 32);
        } else if (a == "--width") {
            s.width = to_int(a, v, 32);
        } else if (a == "--steps") {
            s.steps = static_cast<int>(to_int(a, v, 1));
        } else if (a == "--warmup") {
            s.warmup = static_cast<int>(to_int(a, v, 0));
        } else if (a == "--pool") {
            s.pool = static_cast<int>(to_int(a, v, 1));
        } else if (a == "--data") {
            s.data = v;
        } else if (a == "--loss-variant") {
            if (v != "sider" && v != "corrected") fail("--loss-variant: sider or corrected, got '" + v + "'");
            s.variant_sider = v == "sider";
        } else if (a == "--seed") {
            s.seed = static_cast<uint64_t>(to_int(a, v, 0));
        } else if (a == "--json") {
            s.json = v;
        } else if (a == "--commit") {
            s.commit = v;
        } else if (a == "--check-dir") {
            s.check_dir = v;
        } else {
            fail("unknown option '" + a + "'\n" + kUsage);
        }
    }
    if (s.height % 32 || s.width % 32) fail("--height and --width must be multiples of 32");
    return s;
}

int run(int argc, char** argv) {
    const Settings s = parse(argc, argv);
    if (!s.check_dir.empty()) return check_dir(s);
    std::string devname = s.device;
    if (devname.empty()) devname = torch::cuda::is_available() ? "cuda" : "cpu";
    const torch::Device dev(devname);
#ifndef SF_BASELINE_CUDA
    if (dev.is_cuda()) fail("this build of libtorch_baseline has no CUDA support (LibTorch without CUDA found at configure time)");
#endif
    if (dev.is_cuda() && !torch::cuda::is_available()) fail("--device " + devname + ": no CUDA device available");
    if (dev.is_cuda() && s.steps < 50)
        std::fprintf(stderr, "warning: %d timed steps; the benchmark rule is a median of >= 50\n", s.steps);
#ifdef SF_BASELINE_CUDA
    if (dev.is_cuda() && dev.index() >= 0) c10::cuda::set_device(dev.index());
#endif
    const std::string tool = "libtorch-" + s.mode;
    std::vector<Run> runs;
    bool failed = false;
    for (int64_t b : s.batch_sizes) {
        Run r = bench_one(s, b, dev);
        if (r.status == "ok") {
            std::printf("%s batch %lld: %.3f ms/step median (p10 %.3f, p90 %.3f), %.1f samples/s", tool.c_str(),
                        static_cast<long long>(b), percentile_linear(r.timings, 0.5), percentile_linear(r.timings, 0.1),
                        percentile_linear(r.timings, 0.9), static_cast<double>(b) * 1000.0 / percentile_linear(r.timings, 0.5));
            if (r.peak >= 0) std::printf(", peak %.2f GiB", static_cast<double>(r.peak) / (1 << 30));
            std::printf("\n");
        } else {
            std::printf("%s batch %lld: %s (%s)\n", tool.c_str(), static_cast<long long>(b), r.status.c_str(),
                        r.error.c_str());
            failed = failed || r.status == "error";
        }
        std::fflush(stdout);
        runs.push_back(r);
    }
    std::ostringstream o;
    o << "{\"schema\": \"slidefuse.bench/1\", \"tool\": " << jstr(tool) << ", \"commit\": " << jstr(s.commit)
      << ", \"date\": " << jstr(utc_now()) << ", \"device\": " << device_json(dev) << ", \"runs\": [";
    for (size_t i = 0; i < runs.size(); ++i) o << (i ? ",\n  " : "\n  ") << run_json(s, runs[i]);
    o << "\n]}\n";
    if (!s.json.empty()) {
        std::ofstream f(s.json);
        if (!(f << o.str())) fail("cannot write " + s.json);
    }
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::string msg = e.what();
        std::fprintf(stderr, "libtorch_baseline: error: %s\n", msg.c_str());
        return 2;
    }
}
