// Lite-HRNet-18+LiteFPN (MODEL_SPEC §1.3, no TAMH), written out stage by stage.
// Input (N,H,W,C) NHWC, C = 2 (gray/255, valid mask) or 4 (RGB/255, mask); H, W multiples of 32.
// Outputs: the four heads' logits at (H/4, W/4). The loss applies the heads' activations.
#pragma once
#include <memory>
#include <vector>

#include "model/layers.h"
#include "model/loss.h"

namespace model {

struct NetShape {
    int batch = 2;
    int channels = 2;
    int height = 256;
    int width = 512;
    void validate() const;  // throws naming the offending value
};

constexpr int kBranchChannels[4] = {32, 64, 128, 256};
constexpr int kFpnChannels = 128;
constexpr int kHeadMid = 64;

struct Stem {
    ConvBN conv1, conv2;
    LiteBlock blocks[2];
    const Act& out() const { return blocks[1].out; }
};

// One HRNet stage: LiteBlocks per branch, then the cross-resolution fusion.
struct Stage {
    std::vector<std::vector<LiteBlock>> branches;
    Fusion fusion;
    void declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in, int blocks);
    void forward(const rt::Exec& ex, const std::vector<const Act*>& in, bool train) const;
    void backward(const rt::Exec& ex, const std::vector<const Act*>& in) const;
    const Act& branch_out(size_t i) const { return branches[i].back().out; }
};

// Softplus-weighted fusion of two maps followed by a 3x3 ConvBN SiLU smooth.
struct WeightedFuse {
    Param weight_a, weight_b;
    Act fused;
    ConvBN smooth;
    void declare(Planner& p, const std::string& name, const kern::Shape4& s);
    void forward(const rt::Exec& ex, const Act& a, const Act& b, bool train) const;
    void backward(const rt::Exec& ex, const Act& a, const Act& b) const;
};

struct LiteFpn {
    ConvBN lateral[4];  // index by level: lateral_1_4 .. lateral_1_32
    ConvBN smooth_p5;
    Act up_p5, up_p4, up_p3;  // Up2 of P5s, P4td, P3td
    WeightedFuse fuse16, fuse8, fuse4;
    const Act& out() const { return fuse4.smooth.out; }
};

struct Head {
    ConvBN conv1;  // 3x3 128 -> 64, bias, BN, ReLU
    Conv conv2;    // 1x1 64 -> c, bias
};

class SiderNet {
public:
    SiderNet(const NetShape& shape, rt::MemKind memory);
    SiderNet(const SiderNet&) = delete;
    SiderNet& operator=(const SiderNet&) = delete;

    const NetShape& shape() const { return shape_; }
    const Planner& plan() const { return plan_; }
    const ParamTable& table() const { return plan_.table(); }
    Planner& plan() { return plan_; }

    float* input() const { return input_.v; }  // (N,H,W,C)
    void forward(const rt::Exec& ex, bool train);
    // Backward from the logits' gradients (head conv2 out.g) to every parameter gradient.
    // Activation gradients must have been zeroed (zero_activation_grads) before the logits'
    // gradients were written.
    void backward(const rt::Exec& ex);
    void zero_activation_grads(const rt::Exec& ex);

    HeadLogits<float> logits() const;
    HeadGrads<float> logit_grads() const;
    int grid_h() const { return shape_.height / 4; }
    int grid_w() const { return shape_.width / 4; }

    // Intermediate activations for diagnosis/tests: "stem", "stage2.<i>", "stage3.<i>",
    // "stage4.<i>", "fpn" (Hf). Throws on unknown names.
    const Act& activation(const std::string& name) const;

private:
    void declare(Planner& p);

    NetShape shape_;
    Planner plan_;
    Act input_;
    Stem stem_;
    ConvBN t2_keep_;
    DSConv t2_down_, t3_new_, t4_new_;
    Stage stage2_, stage3_, stage4_;
    LiteFpn fpn_;
    Head heads_[4];  // heatmap_gap, heatmap_piece, offset, angle
};

}  // namespace model
