// Layers of the network: plain structs with their shapes, parameter views and activations.
// declare() is called twice by the network (sizing pass, then binding pass; see planner.h).
// forward() reads its input, writes its outputs; backward() reads out.g, writes the input's g (its
// first contribution overwrites, later ones accumulate: model/grad_tape.h) and accumulates into the
// parameter grads. No allocation. model/layer_ops.h picks the CPU reference
// or the CUDA kernel by element type.
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/conv.h"
#include "model/planner.h"
#include "model/up_order.h"
#include "runtime/exec.h"

namespace model {

constexpr double kBnMomentum = 0.1;
constexpr double kBnEps = 1e-5;

// Every layer is a template over the activation element type T: float on the CPU reference
// backend, kern::bf16 on CUDA (model/layers.cpp instantiates both). Parameters are fp32 master
// weights on both; the CUDA path reads their bf16 working copy for convolutions.
template <class T>
constexpr bool kIsCpu = std::is_same_v<T, float>;

// ConvBNAct: conv (optional bias) -> BatchNorm2d -> SiLU / ReLU / none.
// x (N,H,W,Cin) -> out (N,P,Q,Cout). Names: <name>.conv.{weight,bias}, <name>.bn.*
// With upsample = f > 1 (a fusion up path in UpOrder::ConvFirst): conv -> bilinear xf -> BN -> act,
// x (N,H,W,Cin) -> out (N,fP,fQ,Cout); the conv writes conv_lo, the upsample writes conv.
// CUDA: BN and the activation are one fused pass (kernels/bn_act_cuda.h), so `bn` is not stored
// (bn == out); the backward recomputes the activation's input from `conv`.
template <class T>
struct ConvBN {
    kern::ConvShape cs;
    kern::Act act = kern::Act::None;
    bool input_grad = true;  // set false before declare() for the network's first conv
    int upsample = 1;        // set before declare(): > 1 upsamples the conv output (no bias allowed)
    std::string fwd_scope, bwd_scope;  // "<name> fwd" / "<name> bwd" (rt::Scope)
    Param weight, bias, gamma, beta;
    float* running_mean = nullptr;
    float* running_var = nullptr;
    int64_t* num_batches_tracked = nullptr;
    float* save_mean = nullptr;  // (Cout) batch statistics saved for backward
    float* save_invstd = nullptr;
    float* ws = nullptr;  // shared reduction workspace (CUDA)
    size_t ws_floats = 0;
    GpuOps* ops = nullptr;  // CUDA conv dispatch
    ActT<T> conv_lo;        // upsample > 1: the conv output at the input's resolution
    ActT<T> conv;           // conv output (BN input), upsampled when upsample > 1; its g lives only inside backward()
    ActT<T> bn;             // BN output (activation input); CPU only
    ActT<T> out;            // activation output; the same tensor as bn when act == None

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int k, int stride, int groups,
                 kern::Act act, bool with_bias = false);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    // x.g may be null: no input gradient. dy: the output's gradient, out.g unless given (a layer
    // whose output only feeds a sum passes the sum's gradient, which equals it: no copy).
    void backward(const rt::Exec& ex, const ActT<T>& x, const T* dy = nullptr) const;
    const ActT<T>& conv_out() const { return upsample > 1 ? conv_lo : conv; }  // what the convolution writes
};

// Plain 1x1 conv with bias (the heads' final conv); its output (the logits) is fp32 on both
// backends. Names: <name>.weight, <name>.bias
template <class T>
struct Conv {
    kern::ConvShape cs;
    std::string fwd_scope, bwd_scope;
    Param weight, bias;
    float* ws = nullptr;
    size_t ws_floats = 0;
    ActT<float> out;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout);
    void forward(const rt::Exec& ex, const ActT<T>& x) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;
};

// Inverted residual: 1x1 expand (SiLU) -> 3x3 depthwise (SiLU) -> 1x1 project (linear) -> + x.
template <class T>
struct LiteBlock {
    ConvBN<T> expand, dw, project;
    ActT<T> out;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;
};

// Depthwise-separable conv: 3x3 depthwise stride s (SiLU) -> 1x1 pointwise (SiLU).
template <class T>
struct DSConv {
    ConvBN<T> dw, pw;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int stride);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    void backward(const rt::Exec& ex, const ActT<T>& x, const T* dy = nullptr) const;  // dy: ConvBN::backward
    const ActT<T>& out() const { return pw.out; }
};

// Fusion path between HRNet branches: up = bilinear x f then 1x1 ConvBN (linear), or with
// UpOrder::ConvFirst the 1x1 conv at the source resolution then the upsample inside the ConvBN
// (cb.upsample = f; no `upsampled` tensor); down = a chain of stride-2 DSConvs (all but the last keep
// the source channels).
template <class T>
struct FusePath {
    bool up = false;
    int factor = 1;
    ActT<T> upsampled;            // up, UpsampleFirst: (N, f*H, f*W, Csrc)
    ConvBN<T> cb;                 // up: 1x1 Csrc -> Cdst, no activation
    std::vector<DSConv<T>> down;  // down: 1..3 DSConvs

    void declare(Planner& p, const std::string& name, const kern::Shape4& src, int src_level, int dst_level,
                 int dst_channels, UpOrder order);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    // dy: the gradient of out(); the fusion passes its sum's gradient (ConvBN::backward), so out().g
    // is never written.
    void backward(const rt::Exec& ex, const ActT<T>& x, const T* dy) const;
    const ActT<T>& out() const { return up ? cb.out : down.back().out(); }
    bool upsample_first() const { return up && cb.upsample == 1; }
};

// Cross-resolution fusion of an HRNet stage: out_i = smooth_i( x_i + sum_{j != i} path_ji(x_j) ),
// smooth_i = 3x3 ConvBN SiLU. Names: <name>.up_<src>_to_<dst>.1, <name>.down_<src>_to_<dst>[.k],
// <name>.smooth_<dst>, declared per destination in source order (the state_dict order).
template <class T>
struct Fusion {
    std::vector<std::vector<FusePath<T>>> paths;  // [dst][src]; paths[i][i] unused
    std::vector<ActT<T>> sum;
    std::vector<ConvBN<T>> smooth;

    void declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in, UpOrder up_order);
    void forward(const rt::Exec& ex, const std::vector<const ActT<T>*>& x, bool train) const;
    void backward(const rt::Exec& ex, const std::vector<const ActT<T>*>& x) const;
    const ActT<T>& out(int i) const { return smooth[static_cast<size_t>(i)].out; }
};

// "1_4", "1_8", ... for branch level 0, 1, ...
std::string scale_name(int level);

}  // namespace model
