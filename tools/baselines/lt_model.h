// The LibTorch baseline's model: the Sider_CAPTCHA_Solver 1.1 network written with torch::nn modules
// whose names are the PyTorch state_dict keys (MODEL_SPEC §1; tools/reference/sider_ref.py), and its
// counter-based initialisation (lt_model.cpp).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lt_common.h"

namespace ltb {

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

inline torch::nn::Sequential blocks(int64_t c, int n) {
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
inline Fn reg_up(torch::nn::Module& parent, const std::string& name, int64_t cin, int64_t cout, double factor) {
    Up m = parent.register_module(name, Up(cin, cout, factor));
    return [m](const Tensor& x) mutable { return m(x); };
}
// n == 1 is a bare DSConv (keys "<name>.dw_conv..."), as the Python _down_chain.
inline Fn reg_down(torch::nn::Module& parent, const std::string& name, int64_t cin, int64_t cout, int n) {
    if (n == 1) {
        DSConv m = parent.register_module(name, DSConv(cin, cout, 2));
        return [m](const Tensor& x) mutable { return m(x); };
    }
    DownChain m = parent.register_module(name, DownChain(cin, cout, n));
    return [m](const Tensor& x) mutable { return m(x); };
}

inline Tensor up2(const Tensor& x) {
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

// state_dict order: each module's own parameters, then its own buffers, then its children.
struct Entry {
    std::string name;
    Tensor t;
    bool param;
};
void state_entries(const torch::nn::Module& m, const std::string& prefix, std::vector<Entry>& out);

// The counter-based initialisation of docs/MODEL.md (sider_ref.init_weights, model/init.cpp).
void init_weights(SiderModel& model, uint64_t seed);

}  // namespace ltb
