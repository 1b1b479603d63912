// `slidefuse plan --cudnn-device gpu --fusion-graphs --time` (tools/plan_fusion.h): cuDNN's BatchNorm
// fusion graphs executed on the GPU, each timed against what the step runs today for the same work,
// and checked against it:
//   conv + genstats                  against  the conv + kern::bn_stats_train (the statistics pass)
//   scale + bias + act + conv        against  kern::bn_act_forward_eval (the apply pass) + the conv
//   scale + bias + SiLU + conv + genstats  against  apply + conv + statistics
// "the conv" is the shape's control graph (a plain convolution, what the step's cuDNN convs are),
// executed through the same handle. Checks (a wrong binding or a graph that computes something else
// shows here, not in a speed figure): a prologue graph's y against the conv of the apply pass's output
// (relative L2 <= 1e-2: bf16 roundings in different places), genstats' sum and sum of squares against
// fp64 sums of the y the graph wrote (relative <= 1e-3). Inputs: x ~ U(-1, 1), w ~ U(-0.2, 0.2),
// scale ~ U(0.5, 1.5), bias ~ U(-0.5, 0.5), rounded to bf16 (the affine vectors also when they are fp32,
// so both affine types and the apply pass see the same values). Timing: one warm-up, then
// kFusionTimedRuns runs between two CUDA events on the handle's stream. Plan time only: allocates
// and synchronises.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernels/activation.h"
#include "runtime/cudnn_graph.h"
#include "runtime/exec.h"

namespace tools {

constexpr int kFusionTimedRuns = 10;

// A convolution shape of the probe: x (n, c_in, h, w), w (c_out, c_in, k, k), stride 1, pad (k-1)/2.
struct FusionDims {
    int64_t n = 0, c_in = 0, h = 0, w = 0, c_out = 0, k = 1;
};

// What a graph's non-virtual tensor is, for binding it to this shape's buffers.
enum class FusionRole { X, W, Y, Scale, Bias, Sum, SqSum };
struct FusionBinding {
    int64_t uid = 0;
    FusionRole role = FusionRole::X;
};

// One shape's buffers, inputs and reference passes. Every graph of the shape binds the same x, w,
// scale and bias; y, sum and sqsum are outputs.
class FusionTimer {
public:
    FusionTimer(const rt::Exec& ex, const FusionDims& d, uint64_t seed);
    ~FusionTimer();
    FusionTimer(const FusionTimer&) = delete;
    FusionTimer& operator=(const FusionTimer&) = delete;

    // The control graph (plan + workspace + bindings): timed, kept to run the reference chain.
    // {"ms"} or {"error"}.
    nlohmann::json set_control(rt::CudnnDesc plan, int64_t workspace_bytes, std::vector<FusionBinding> b);
    // A fused graph: timed, its unfused counterpart timed, outputs checked (see the header comment).
    // {"ms", "unfused_ms", "unfused": {"conv_ms", "apply_ms", "stats_ms"}, "speedup", "check": {...}, "ok"}
    // or {"error"} (no control, an execution cuDNN refuses, ...).
    nlohmann::json time_fused(const rt::CudnnDesc& plan, int64_t workspace_bytes, const std::vector<FusionBinding>& b,
                              bool prologue, kern::Act act, bool bf16_affine, bool genstats);

    // The project's own 1x1 conv (kern::pwconv_forward_cuda, docs/KERNELS_PWCONV.md) in the same roles,
    // against the same unfused passes: plain (against the control conv alone), with the prologue (eval
    // mode with zero mean and unit variance, the apply pass's z exactly) and/or the statistics epilogue
    // (against the statistics pass). Checks: y against the control conv of x (or of the apply pass's
    // output; relative L2 <= 1e-2), the statistics against fp64 ones of the y it wrote (mean within 1e-3
    // of the std, invstd within 1e-3 relative). The same JSON as time_fused with "label": "pwconv".
    // {"error"} when the shape is not a 1x1 the kernel runs, or no control ran.
    nlohmann::json time_custom(bool prologue, kern::Act act, bool stats);

private:
    struct Buffers;
    double run_ms(const rt::CudnnDesc& plan, int64_t ws, const std::vector<FusionBinding>& b, bool reference,
                  bool bf16_affine);
    double apply_ms(kern::Act act);  // the apply pass into x_act, timed
    double stats_ms();               // the statistics pass over y, timed
    bool pwconv_ok() const;          // the shape is a 1x1 kern::pwconv_forward_cuda runs
    // Relative L2 distance of y (as written to the y buffer) from the control conv of x_act (run here
    // into y_ref, after the stream's work so far).
    double y_rel_l2_from_control(const std::vector<double>& y);

    const rt::Exec& ex_;
    FusionDims d_;
    std::unique_ptr<Buffers> buf_;
    rt::CudnnDesc control_;
    int64_t control_ws_ = 0;
    std::vector<FusionBinding> control_b_;
    double conv_ms_ = -1;
};

}  // namespace tools
