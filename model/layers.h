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

#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/head_conv_cuda.h"
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
// With sum_into (a layer whose output only feeds a sum: a LiteBlock's project conv, a fusion
// path's last layer) the forward adds its output to a residual and writes the sum (sum = residual +
// out; the residual may be the sum itself), and the backward reads the sum's gradient, which is its
// output's. CUDA: one pass, BN + activation + add (the layer's own output is never stored: out is
// the sum). CPU: out is stored, then added, inside the layer's profiling scope.
template <class T>
struct ConvBN {
    kern::ConvShape cs;
    kern::Act act = kern::Act::None;
    bool input_grad = true;             // set false before declare() for the network's first conv
    int upsample = 1;                   // set before declare(): > 1 upsamples the conv output (no bias allowed)
    const ActT<T>* sum_into = nullptr;  // set before each declare(): the sum the output is added into
    bool sums = false;                  // declare() bound sum_into (read this, not the pointer, afterwards)
    std::string fwd_scope, bwd_scope;   // "<name> fwd" / "<name> bwd" (rt::Scope)
    // The fused LiteBlock (CUDA only, NetShape::fuse_expand_dw; set before declare()):
    // apply_in_consumer: the BN + activation is applied by the consumer as it loads the conv output,
    //   so the train forward computes the batch statistics only and `out` has no values (v null; its
    //   gradient is planned as usual: the consumer's backward-data writes it).
    // prologue: this (depthwise) conv applies that layer's BN + activation to its input on load: it
    //   reads prologue->conv, never x.v (kernels/dwconv_cuda.h, DwPrologue); custom kernel only.
    // A layer with a conv bias may leave its BN to its consumer (the heads' conv1, NetShape::fuse_head_bn): the
    // bias then folds into the BN (forward), and eval_mean, running_mean - bias, is the eval prologue's mean.
    bool apply_in_consumer = false;
    const ConvBN* prologue = nullptr;
    float* eval_mean = nullptr;
    // A BN's backward reductions gathered by its consumer's backward-data epilogue (CUDA; both set before
    // declare(), by link_grad_sums): grad_sums_by, on the producer, is the consumer whose kernel gathers
    // them from the gradient it stores (kern::BnGradSums: dgamma, dbeta += and the dx coefficients into
    // the producer's bn_coef, 2 * cout floats); grad_sums_of, on the consumer, is that producer. The
    // producer's backward then runs only the BN's dx pass. Two links: the fused LiteBlock's expand ->
    // depthwise (GpuOps::dw_bn_grad: the fused depthwise backward's epilogue) and a depthwise ConvBN -> its
    // 1x1 consumer (GpuOps::pw_bn_grad: the project's 1x1 dgrad's epilogue). Where GpuOps runs the
    // consumer's pass on another kernel (grad_sums_ran false), both run as before.
    const ConvBN* grad_sums_by = nullptr;
    const ConvBN* grad_sums_of = nullptr;
    float* bn_coef = nullptr;
    // CUDA, set before declare() (kern::ConvPolicy::head_bn_grad, NetShape::fuse_head_bn): a heads' conv1 whose BN
    // the heads' conv2 applies on load (apply_in_consumer) and whose backward reductions those convs gather from
    // the dx they store (kern::HeadBnGrad) into bn_part, per chunk over all cout channels (the merged heads' four
    // slices make up one table); finalize_head_sums then adds them into dgamma, dbeta and writes bn_coef, and the
    // backward runs the BN's dx pass alone (grad_sums_ran on a CUDA Exec).
    bool sums_by_head = false;
    float* bn_part = nullptr;
    // CUDA, set by the network after the heads' declare() (kern::ConvPolicy::head_bn_dx, with sums_by_head): the
    // heads' conv2 over this BN's channels, in channel order (n_dx_heads: 4 for the merged heads' conv1, else 1),
    // which store no dx (Conv::dx_not_stored); the backward's dx pass forms its dy from their logits' gradients and
    // weights (kern::head_bn_dx_cuda). Traced as the dx pass, reading those gradients as well.
    struct HeadDxRef {
        const ActT<float>* logits = nullptr;  // the conv2's output: its g, the logits' gradient
        const Param* weight = nullptr;        // the conv2's weights (fp32 master)
        int channel = 0, cin = 0, cout = 0;
    };
    HeadDxRef dx_heads[4];
    int n_dx_heads = 0;
    // Set before declare(): the caller binds weight, bias, gamma, beta and the running statistics after each
    // declare() (CUDA: the merged heads' conv1, whose parameters are copies of four layers'; MergedHeads) and
    // declare() asks the planner for none of them (nor a counter: the CUDA network counts every BN at once).
    bool external_params = false;
    Param weight, bias, gamma, beta;
    float* running_mean = nullptr;
    float* running_var = nullptr;
    int64_t* num_batches_tracked = nullptr;
    float* save_mean = nullptr;  // (Cout) batch statistics saved for backward
    float* save_invstd = nullptr;
    float* ws = nullptr;  // shared reduction workspace (CUDA)
    size_t ws_floats = 0;
    GpuOps* ops = nullptr;  // CUDA conv dispatch
    // CUDA, GpuOps::dw_fused_bn: a stride-1 depthwise ConvBN whose BN backward may run inside the fused
    // conv backward (its ws holds both; its traced backward reports that op's reads).
    bool fused_bn = false;
    // CUDA, GpuOps::pw_stats: a 1x1 ConvBN (no bias, upsample or prologue) whose BN statistics may come
    // from the project's 1x1 conv's epilogue (its ws holds that kernel's partials too).
    bool pw_stats = false;
    // CUDA, GpuOps::dw_stats: a depthwise ConvBN whose BN statistics may come from the staged depthwise
    // forward's epilogue (its ws holds that kernel's partials too).
    bool dw_stats = false;
    // CUDA, GpuOps::pw_bn_bwd: a 1x1 ConvBN whose BN backward dx may be formed in its conv's dgrad and wgrad
    // loads (its ws holds the BN's coefficients and the wgrad's partials; its traced backward reports that
    // op's reads).
    bool pw_fused_bn = false;
    // CUDA, GpuOps::pw_fused_bwd: a 1x1 ConvBN (no upsample or bias) whose shape, input prologue, BN-backward
    // prologue (pw_fused_bn) and producer's BN reductions (grad_sums_of) the fused dgrad + wgrad kernel takes: its
    // backward runs that kernel where the project's kernel runs the shape (the trace is the same either way).
    bool pw_fused_bwd = false;
    // CUDA, NetShape::fuse_up_bn (upsample > 1): the BN passes form the upsampled conv output from conv_lo on
    // load (kern::BnUpsampled); `conv` then holds only its gradient.
    bool up_in_bn = false;
    ActT<T> conv_lo;  // upsample > 1: the conv output at the input's resolution
    ActT<T> conv;     // conv output (BN input), upsampled when upsample > 1; its g lives only inside backward()
    ActT<T> bn;       // BN output (activation input); CPU only
    ActT<T> out;      // activation output; the same tensor as bn when act == None (CUDA with sum_into: sum)
    ActT<T> sum;      // with sum_into: that tensor (bound at declare)

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int k, int stride, int groups,
                 kern::Act act, bool with_bias = false);
    // residual: with sum_into, what the output is added to (required then, else ignored).
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train, const T* residual = nullptr) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;                 // x.g may be null: no input gradient
    const ActT<T>& conv_out() const { return upsample > 1 ? conv_lo : conv; }  // what the convolution writes
    // The DwPrologue a consumer applies (apply_in_consumer; CUDA): batch statistics when train, else
    // the running ones. Declared for both element types; the CPU backend never fuses.
    kern::DwPrologue dw_prologue(bool train) const;
    // The BN input's upsampled source when up_in_bn (conv_lo, its shape, the factor); empty otherwise.
    kern::BnUpsampled upsampled() const;
    // The epilogue a depthwise consumer runs for this layer's BN (grad_sums_by): its input, vectors and
    // outputs (dgamma, dbeta into the parameter gradients, the coefficients into bn_coef).
    kern::BnGradSums bn_grad_sums() const;
    // Whether this layer's backward-data gathers grad_sums_of's BN reductions in this run (its fused
    // depthwise backward, or its 1x1 dgrad on the project's kernel, runs): the one query both sides ask.
    bool gathers_grad_sums(const rt::Exec& ex) const;
    // Whether grad_sums_by's backward gathers this BN's reductions in this run.
    bool grad_sums_ran(const rt::Exec& ex) const {
        return (grad_sums_by && grad_sums_by->gathers_grad_sums(ex)) || (sums_by_head && ex.is_cuda());
    }
    // sums_by_head: the consumers' HeadBnGrad over this BN's channels [channel, channel + channels) of cout, and,
    // once every consumer has written its columns, their finalize (dgamma, dbeta +=, bn_coef; CUDA Exec only).
    kern::HeadBnGrad head_bn_grad(int channel) const;
    void finalize_head_sums(const rt::Exec& ex) const;
    // What the layer leaves for its consumers: the sum with sum_into, else out.
    const ActT<T>& result() const { return sums ? sum : out; }
};

// Links producer -> consumer for the BN-backward epilogue (ConvBN::grad_sums_by / grad_sums_of).
template <class T>
void link_grad_sums(ConvBN<T>& producer, ConvBN<T>& consumer) {
    producer.grad_sums_by = &consumer;
    consumer.grad_sums_of = &producer;
}

// Inverted residual: 1x1 expand (SiLU) -> 3x3 depthwise (SiLU) -> 1x1 project (linear) -> + x.
// fuse_expand_dw (CUDA only; the CPU reference ignores it): the expand's BN + SiLU runs inside the
// depthwise conv's loads (forward and backward-filter) instead of as its own pass, so the expanded
// activation is never written (ConvBN::apply_in_consumer / prologue; docs/GPU_STEP.md).
template <class T>
struct LiteBlock {
    ConvBN<T> expand, dw, project;
    ActT<T> out;
    std::string sum_bwd_scope;  // "<name>.residual bwd": x.g (+)= out.g (OpUse::Kind::GradSum)

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, bool fuse_expand_dw = false);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;
};

// Depthwise-separable conv: 3x3 depthwise stride s (SiLU) -> 1x1 pointwise (SiLU).
template <class T>
struct DSConv {
    ConvBN<T> dw, pw;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int stride);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train, const T* residual = nullptr) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;
    const ActT<T>& out() const { return pw.result(); }
};

// Fusion path between HRNet branches: up = bilinear x f then 1x1 ConvBN (linear), or with
// UpOrder::ConvFirst the 1x1 conv at the source resolution then the upsample inside the ConvBN
// (cb.upsample = f; no `upsampled` tensor); down = a chain of stride-2 DSConvs (all but the last keep
// the source channels). The path's last ConvBN adds its output into the destination's sum
// (ConvBN::sum_into): forward takes the residual (x_dst for the first path, else the sum itself).
template <class T>
struct FusePath {
    bool up = false;
    int factor = 1;
    ActT<T> upsampled;                       // up, UpsampleFirst: (N, f*H, f*W, Csrc)
    ConvBN<T> cb;                            // up: 1x1 Csrc -> Cdst, no activation
    std::vector<DSConv<T>> down;             // down: 1..3 DSConvs
    std::string up_fwd_scope, up_bwd_scope;  // UpsampleFirst: "<path>.0 fwd|bwd", the Upsample (OpUse)

    void declare(Planner& p, const std::string& name, const kern::Shape4& src, int src_level, int dst_level,
                 int dst_channels, UpOrder order, const ActT<T>* sum);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train, const T* residual) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;
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
    std::vector<std::string> sum_bwd_scope;  // "<name>.sum_<dst> bwd": x_i.g (+)= sum_i.g (OpUse GradSum)

    void declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in, UpOrder up_order);
    void forward(const rt::Exec& ex, const std::vector<const ActT<T>*>& x, bool train) const;
    void backward(const rt::Exec& ex, const std::vector<const ActT<T>*>& x) const;
    const ActT<T>& out(int i) const { return smooth[static_cast<size_t>(i)].out; }
};

// "1_4", "1_8", ... for branch level 0, 1, ...
std::string scale_name(int level);

}  // namespace model
