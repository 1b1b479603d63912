// Layers of the network: plain structs with their shapes, parameter views and activations.
// declare() is called twice by the network (sizing pass, then binding pass; see planner.h).
// forward() reads its input, writes its outputs; backward() reads out.g and ACCUMULATES into
// the input's g and the parameter grads. No allocation, no backend branch: kern:: dispatches.
#pragma once
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "model/planner.h"
#include "runtime/exec.h"

namespace model {

constexpr double kBnMomentum = 0.1;
constexpr double kBnEps = 1e-5;

// ConvBNAct: conv (optional bias) -> BatchNorm2d -> SiLU / ReLU / none.
// x (N,H,W,Cin) -> out (N,P,Q,Cout). Names: <name>.conv.{weight,bias}, <name>.bn.*
struct ConvBN {
    kern::ConvShape cs;
    kern::Act act = kern::Act::None;
    Param weight, bias, gamma, beta;
    float* running_mean = nullptr;
    float* running_var = nullptr;
    int64_t* num_batches_tracked = nullptr;
    float* save_mean = nullptr;  // (Cout) batch statistics saved for backward
    float* save_invstd = nullptr;
    Act conv;  // conv output (BN input)
    Act bn;    // BN output (activation input)
    Act out;   // activation output; the same tensor as bn when act == None

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int k, int stride, int groups,
                 kern::Act act, bool with_bias = false);
    void forward(const rt::Exec& ex, const Act& x, bool train) const;
    void backward(const rt::Exec& ex, const Act& x) const;  // x.g may be null: no input gradient
};

// Plain conv with bias (the heads' final 1x1). Names: <name>.weight, <name>.bias
struct Conv {
    kern::ConvShape cs;
    Param weight, bias;
    Act out;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout);
    void forward(const rt::Exec& ex, const Act& x) const;
    void backward(const rt::Exec& ex, const Act& x) const;
};

// Inverted residual: 1x1 expand (SiLU) -> 3x3 depthwise (SiLU) -> 1x1 project (linear) -> + x.
struct LiteBlock {
    ConvBN expand, dw, project;
    Act out;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in);
    void forward(const rt::Exec& ex, const Act& x, bool train) const;
    void backward(const rt::Exec& ex, const Act& x) const;
};

// Depthwise-separable conv: 3x3 depthwise stride s (SiLU) -> 1x1 pointwise (SiLU).
struct DSConv {
    ConvBN dw, pw;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int stride);
    void forward(const rt::Exec& ex, const Act& x, bool train) const;
    void backward(const rt::Exec& ex, const Act& x) const;
    const Act& out() const { return pw.out; }
};

// Fusion path between HRNet branches: up = bilinear x f then 1x1 ConvBN (linear);
// down = a chain of stride-2 DSConvs (all but the last keep the source channels).
struct FusePath {
    bool up = false;
    int factor = 1;
    Act upsampled;             // up: (N, f*H, f*W, Csrc)
    ConvBN cb;                 // up: 1x1 Csrc -> Cdst, no activation
    std::vector<DSConv> down;  // down: 1..3 DSConvs

    void declare(Planner& p, const std::string& name, const kern::Shape4& src, int src_level, int dst_level,
                 int dst_channels);
    void forward(const rt::Exec& ex, const Act& x, bool train) const;
    void backward(const rt::Exec& ex, const Act& x) const;
    const Act& out() const { return up ? cb.out : down.back().out(); }
};

// Cross-resolution fusion of an HRNet stage: out_i = smooth_i( x_i + sum_{j != i} path_ji(x_j) ),
// smooth_i = 3x3 ConvBN SiLU. Names: <name>.up_<src>_to_<dst>.1, <name>.down_<src>_to_<dst>[.k],
// <name>.smooth_<dst>, declared per destination in source order (the state_dict order).
struct Fusion {
    std::vector<std::vector<FusePath>> paths;  // [dst][src]; paths[i][i] unused
    std::vector<Act> sum;
    std::vector<ConvBN> smooth;

    void declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in);
    void forward(const rt::Exec& ex, const std::vector<const Act*>& x, bool train) const;
    void backward(const rt::Exec& ex, const std::vector<const Act*>& x) const;
    const Act& out(int i) const { return smooth[static_cast<size_t>(i)].out; }
};

// "1_4", "1_8", ... for branch level 0, 1, ...
std::string scale_name(int level);

}  // namespace model
