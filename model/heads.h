// The dual head's four heads (MODEL_SPEC §1.3 stage 6) and, CUDA only, their conv1 merged into one layer.
#pragma once
#include <string>

#include "model/layers.h"

namespace model {

constexpr int kHeads = 4;  // heatmap_gap, heatmap_piece, offset, angle

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
    // CUDA: elements between the input's rows (0: Cin): a head's slice of the merged conv1 output
    // (NetShape::merge_heads, MergedHeads). Its backward then runs through MergedHeads, one op for the four.
    int in_pitch = 0;
    // CUDA, NetShape::fuse_head_bn (set before declare()): the conv1 whose BN + ReLU this conv applies as it loads
    // that layer's pre-BN output (ConvBN::apply_in_consumer; kernels/head_conv_cuda.h, DwPrologue), in the
    // forward and in the backward's weight sums; x.v is then never read. prologue_channel: the first of that
    // layer's channels this conv reads (a head's slice of the merged conv1, else 0).
    const ConvBN<T>* prologue = nullptr;
    int prologue_channel = 0;
    // CUDA, kern::ConvPolicy::head_bn_dx (set before declare(); needs a prologue whose reductions this conv gathers,
    // ConvBN::sums_by_head): the backward stores no dx; the prologue's BN forms it again from this conv's output
    // gradient (ConvBN::dx_heads). Traced as the write it replaces.
    bool dx_not_stored = false;

    void declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    void backward(const rt::Exec& ex, const ActT<T>& x) const;
    // CUDA with a prologue: its input (the producer's pre-BN output at prologue_channel) and its DwPrologue
    // (batch statistics when train, else the running ones, the vectors from prologue_channel on).
    const T* prologue_input() const;
    kern::DwPrologue input_prologue(bool train) const;
};

template <class T>
struct Head {
    ConvBN<T> conv1;  // 3x3 128 -> 64, bias, BN, ReLU
    Conv<T> conv2;    // 1x1 64 -> c, bias; fp32 logits
};

// NetShape::merge_heads (CUDA): the four heads' conv1, which all read Hf, as one ConvBN 3x3 Cin -> 4 x mid
// with bias, BN and ReLU over the concatenated output channels. A BatchNorm is per channel, so that is the
// four layers side by side; Hf is read once by the forward and by the wgrad instead of four times, its
// gradient written by one backward-data instead of written once and added into three times, and the GEMMs
// are four times wider (docs/perf/OPTIMIZATION_LOG.md 25).
// The parameters and buffers stay the heads' own (names, places in the flat table, checkpoints, AdamW):
// before each pass the layer gathers what the pass reads into its merged copies and afterwards scatters
// back what it wrote (model::copy_segments_cuda: 2.4 MB a step). Each head's conv2 reads its mid-channel
// slice of the merged output in place (Conv::in_pitch) and writes its slice of the merged gradient; the
// four conv2 backwards are one op for the gradient tape (the slices make up one gradient, written once).
template <class T>
struct MergedHeads {
    struct Own {  // one head's conv1 parameters and buffers, as the table holds them
        Param weight, bias, gamma, beta;
        float* running_mean = nullptr;
        float* running_var = nullptr;
    };
    Own own[kHeads];
    ConvBN<T> conv1;  // external_params: bound to the merged copies
    int mid = 0;      // output channels per head

    // The merged layer: its activations, merged copies and conv plan (no parameters of its own), where the
    // first head's conv1 would be declared (the forward order of the per-layer rows).
    void declare(Planner& p, const kern::Shape4& in, int mid_channels);
    // Head h's conv1 parameters, buffers and counter under `name` (".conv.weight", ...), in the order and
    // with the shapes ConvBN::declare gives them (the state_dict's): call where the head's conv1 would be
    // declared, after declare().
    void declare_head(Planner& p, int h, const std::string& name);
    void forward(const rt::Exec& ex, const ActT<T>& x, bool train) const;
    // The heads' conv2 backward (their logits' gradients -> the merged output's gradient), then conv1's.
    void backward(const rt::Exec& ex, const ActT<T>& x, const Head<T> (&heads)[kHeads]) const;
    // Head h's slice of the merged output: a view whose rows lie kHeads * mid apart (conv2's in_pitch).
    ActT<T> slice(int h) const;
};

}  // namespace model
