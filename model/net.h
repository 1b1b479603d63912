// Lite-HRNet-18+LiteFPN (MODEL_SPEC §1.3, no TAMH), written out stage by stage.
// Input (N,H,W,C) NHWC, C = 2 (gray/255, valid mask) or 4 (RGB/255, mask); H, W multiples of 32.
// Outputs: the four heads' logits at (H/4, W/4). The loss applies the heads' activations.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "model/heads.h"
#include "model/layers.h"
#include "model/loss.h"
#include "model/up_order.h"

namespace kern {
struct ConvPolicy;  // kernels/conv_cudnn.h
}
namespace rt {
class StreamLanes;  // runtime/lanes.h
}

namespace model {

struct NetShape {
    int batch = 2;
    int channels = 2;
    int height = 256;
    int width = 512;
    // The fusion up paths' order (model/up_order.h); the parameters and their names are the same in
    // both, so weights and checkpoints move freely between them.
    UpOrder up_order = UpOrder::UpsampleFirst;
    // CUDA only: every LiteBlock's expand BN + SiLU applied inside its depthwise conv's loads, the
    // expanded activation never stored (model.fuse_expand_dw; LiteBlock). Same parameters, same
    // checkpoints, bitwise the same step; the CPU reference ignores it.
    bool fuse_expand_dw = false;
    // CUDA only: every depthwise ConvBN followed by a 1x1 ConvBN (a LiteBlock's depthwise -> project, a
    // DSConv's depthwise -> pointwise) leaves its BN + SiLU to that 1x1 conv, which applies it as it loads
    // the depthwise conv's output (forward and backward-filter, kernels/pwconv_cuda.h): the depthwise
    // activation is never stored (model.fuse_dw_pw). Same parameters and checkpoints; the 1x1 conv's
    // forward and wgrad always run the project's kernel. The CPU reference ignores it.
    bool fuse_dw_pw = false;
    // CUDA only: the four heads' conv1 (3x3 128 -> 64 on Hf, bias, BN, ReLU) as one 128 -> 256 ConvBN
    // (model.merge_heads; model/heads.h, MergedHeads). Same parameters and checkpoints; the CPU reference
    // ignores it.
    bool merge_heads = false;
    // CUDA only: each head's conv2 applies its conv1's BN + ReLU as it loads conv1's pre-BN output (forward and
    // backward), and conv1's bias folds into that BN (its own pass gone): the heads' activation z and the bias
    // pass never run (model.fuse_head_bn; model/heads.h). Same parameters and checkpoints; with merge_heads too,
    // on the merged layer. The CPU reference ignores it.
    bool fuse_head_bn = false;
    // CUDA only: each fusion up path in UpOrder::ConvFirst forms its bilinear upsample inside its BN's loads
    // (forward statistics and apply, backward reduce and dx: kern::BnUpsampled) instead of storing the
    // upsampled conv output; bitwise the same step (model.fuse_up_bn). The CPU reference ignores it.
    bool fuse_up_bn = false;
    void validate() const;  // throws naming the offending value
    // validate() and: train-mode BatchNorm has >= 2 values per channel at the coarsest level.
    void validate_for_training() const;
};

constexpr int kBranchChannels[4] = {32, 64, 128, 256};
constexpr int kFpnChannels = 128;
constexpr int kHeadMid = 64;

template <class T>
struct Stem {
    ConvBN<T> conv1, conv2;
    LiteBlock<T> blocks[2];
    const ActT<T>& out() const { return blocks[1].out; }
};

// One HRNet stage: LiteBlocks per branch, then the cross-resolution fusion.
// Branch lanes (Planner::lanes() > 1: kern::ConvPolicy::branch_lanes, docs/GPU_STEP.md "Branch lanes"): the
// branches are independent until the fusion, so branch i is declared on lane i (its workspace) and, given
// the network's StreamLanes, runs on lane i's stream, forked from and joined back into ex's; its backward is
// a parallel section of the gradient plan (GradTape::Section) either way.
template <class T>
struct Stage {
    std::vector<std::vector<LiteBlock<T>>> branches;
    Fusion<T> fusion;
    int lanes = 1;  // the plan's branch lanes when declared
    void declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in, int blocks,
                 UpOrder up_order, bool fuse_expand_dw);
    // streams: the network's lanes (null: every branch on ex, one after another). Without an observer
    // only: per-layer timing (rt::ScopeObserver) runs the branches on ex.
    void forward(const rt::Exec& ex, const std::vector<const ActT<T>*>& in, bool train,
                 const rt::StreamLanes* streams = nullptr) const;
    void backward(const rt::Exec& ex, const std::vector<const ActT<T>*>& in,
                  const rt::StreamLanes* streams = nullptr) const;
    int lane_of(size_t branch) const { return static_cast<int>(branch % static_cast<size_t>(lanes)); }
    int lanes_used() const { return static_cast<int>(std::min(branches.size(), static_cast<size_t>(lanes))); }
    const ActT<T>& branch_out(size_t i) const { return branches[i].back().out; }
};

// Softplus-weighted fusion of two maps followed by a 3x3 ConvBN SiLU smooth.
template <class T>
struct WeightedFuse {
    Param weight_a, weight_b;
    ActT<T> fused;
    ConvBN<T> smooth;
    float* ws = nullptr;  // CUDA reduction workspace of the fusion backward
    size_t ws_floats = 0;
    std::string fwd_scope, bwd_scope;  // "<name> fwd|bwd" around the weighted sum alone (OpUse)
    void declare(Planner& p, const std::string& name, const kern::Shape4& s);
    void forward(const rt::Exec& ex, const ActT<T>& a, const ActT<T>& b, bool train) const;
    void backward(const rt::Exec& ex, const ActT<T>& a, const ActT<T>& b) const;
};

template <class T>
struct LiteFpn {
    ConvBN<T> lateral[4];  // index by level: lateral_1_4 .. lateral_1_32
    ConvBN<T> smooth_p5;
    ActT<T> up_p5, up_p4, up_p3;  // Up2 of P5s, P4td, P3td
    WeightedFuse<T> fuse16, fuse8, fuse4;
    const ActT<T>& out() const { return fuse4.smooth.out; }
};

// A layer's output for per-layer diagnostics. name is the layer's parameter prefix (its profiling
// scopes are "<name> fwd" / "<name> bwd"); exactly one of out (a ConvBN: after BatchNorm and the
// activation; for a layer that adds into a sum, the sum after its addition: ConvBN::result()) and
// logits (a Conv, the heads' last 1x1: fp32 on both backends) is set.
template <class T>
struct LayerOutput {
    std::string name;
    const ActT<T>* out = nullptr;
    const ActT<float>* logits = nullptr;
};

// Constructor tag: plan only (model/planner.h). policy: the CUDA policy of the network the plan stands
// for, where it changes the memory plan (GpuOps::dw_fused_bn); null plans the default policy's.
struct DryRun {
    const kern::ConvPolicy* policy = nullptr;
};

// The network over activation element type T: float = the CPU reference backend (host memory),
// kern::bf16 = the CUDA backend (device memory, cuDNN/custom kernels). model/net.cpp instantiates
// both; SiderNet is the CPU one.
template <class T>
class SiderNetT {
public:
    // CPU reference network (T = float) in `memory` (Host or Pinned). GradLayout::Separate: the
    // reference layout of the activation gradients (model/planner.h), for tests.
    SiderNetT(const NetShape& shape, rt::MemKind memory, GradLayout layout = GradLayout::Shared);
    // CUDA network (T = bf16): device memory; every convolution's plans are built (autotuned
    // unless the policy says otherwise) before the arena is sealed.
    SiderNetT(const NetShape& shape, const rt::Exec& ex, const kern::ConvPolicy& policy);
    // Plan only, on any machine: plan().memory(), plan().convs(), table(). Nothing allocated.
    SiderNetT(const NetShape& shape, DryRun dry);
    ~SiderNetT();
    SiderNetT(const SiderNetT&) = delete;
    SiderNetT& operator=(const SiderNetT&) = delete;

    const NetShape& shape() const { return shape_; }
    const Planner& plan() const { return plan_; }
    const ParamTable& table() const { return plan_.table(); }
    // The side streams of the stages' branches (kern::ConvPolicy::branch_lanes); null without them.
    const rt::StreamLanes* stream_lanes() const { return lanes_.get(); }
    Planner& plan() { return plan_; }
    const GpuOps* gpu_ops() const { return ops_.get(); }

    T* input() const { return input_.v; }  // (N,H,W,C)
    void forward(const rt::Exec& ex, bool train);
    // Backward from the logits' gradients (head conv2 out.g, written by the loss) to every
    // parameter gradient. Each activation gradient's first contribution overwrites it
    // (model/grad_tape.h), so no activation gradient needs zeroing; the gradients share memory
    // by lifetime and are valid only while the backward uses them.
    void backward(const rt::Exec& ex);
    // Zeroes what the gradient plan still needs zeroed before a micro-step (plan().memory()
    // .grad_zeroed bytes: nothing in the shared layout, the whole region in the reference layout).
    void zero_activation_grads(const rt::Exec& ex);

    HeadLogits<float> logits() const;
    HeadGrads<float> logit_grads() const;
    int grid_h() const { return shape_.height / 4; }
    int grid_w() const { return shape_.width / 4; }

    // Intermediate activations for diagnosis/tests: "stem", "stage2.<i>", "stage3.<i>",
    // "stage4.<i>", "fpn" (Hf). Throws on unknown names.
    const ActT<T>& activation(const std::string& name) const;

    // Every ConvBN and Conv in forward order with its output (diagnostics: `slidefuse check`).
    std::vector<LayerOutput<T>> layer_outputs() const;

private:
    void declare(Planner& p);
    void plan_grads();  // after the sizing pass: trace the backward, then Planner::plan_grads

    NetShape shape_;
    Planner plan_;
    std::unique_ptr<GpuOps> ops_;
    std::unique_ptr<rt::StreamLanes> lanes_;
    ActT<T> input_;
    Stem<T> stem_;
    ConvBN<T> t2_keep_;
    DSConv<T> t2_down_, t3_new_, t4_new_;
    Stage<T> stage2_, stage3_, stage4_;
    LiteFpn<T> fpn_;
    Head<T> heads_[kHeads];  // heatmap_gap, heatmap_piece, offset, angle
    // NetShape::merge_heads on CUDA: the heads' conv1 merged (heads_[h].conv1 then unused).
    bool merged_heads() const { return shape_.merge_heads && !kIsCpu<T>; }
    // NetShape::fuse_head_bn on CUDA: the heads' conv1 BN + ReLU inside their conv2.
    bool fused_head_bn() const { return shape_.fuse_head_bn && !kIsCpu<T>; }
    MergedHeads<T> merged_;
};

using SiderNet = SiderNetT<float>;
using SiderNetCuda = SiderNetT<kern::bf16>;

}  // namespace model
