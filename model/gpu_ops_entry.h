// GpuOps::Entry: what GpuOps decided for one convolution shape, and what it measured to decide.
// Internal to model/gpu_ops.cpp (the choices) and model/gpu_ops_describe.cpp (their description).
#pragma once
#include <vector>

#include "kernels/conv.h"
#include "model/gpu_ops.h"
#include "model/planner.h"

namespace model {

struct GpuOps::Entry {
    kern::ConvShape shape;
    ConvUse use;  // the dgrad modes prepared
    bool dgrad = false;
    ConvImpl impl = ConvImpl::Cudnn;
    double ms[2] = {-1, -1};  // fwd+dgrad+wgrad per candidate (cudnn, custom), -1 = not measured
    // The custom 1x1 conv timed with its epilogues (GpuOps::time_pointwise): the time of the passes they
    // remove, included in ms[0] (0: none).
    double credit_ms = 0;
    // kern::ConvPolicy::pw_fused_bwd on a 1x1 shape some layer of which takes the fused backward
    // (ConvUse::pw_fused_bwd) and the kernel takes with the prologue and epilogue timed: the custom time's backward
    // is the fused pass (GpuOps::time_pointwise), with the BN-backward epilogue in the overwrite mode where the
    // shape's dgrad gathers a producer's reductions.
    bool pw_fused_timed = false;
    // CustomDepthwise: the variants run (gather: kern::kDwVariants, wgrad: kern::kDwWgradVariants) and,
    // when autotuned, each valid variant's time (ms; -1 = not valid for the pass or not timed). The
    // dgrad has a choice per mode the step runs (use.needs_accumulate / needs_overwrite): dgrad_* for
    // accumulate (dx read, added to, written), dgrad_ow_* for overwrite (dx only written); empty times
    // for a mode the step does not run.
    int fwd_variant = 0, dgrad_variant = 0, dgrad_ow_variant = 0, wgrad_variant = 0;
    std::vector<double> fwd_variant_ms, dgrad_variant_ms, dgrad_ow_variant_ms, wgrad_variant_ms;
    // use.bn_prologue: the forward with the BN prologue (always the custom kernel), its variant and,
    // when autotuned, each prologue-capable variant's time (kern::dw_variant_prologue; -1 otherwise).
    int pro_fwd_variant = 0;
    std::vector<double> pro_fwd_variant_ms;
    // kern::ConvPolicy::dw_stats on a depthwise shape planned with ConvUse::stats_epilogue (GpuOps::stats_forward):
    // both forward variants are staged ones, timed with the statistics epilogue.
    bool stats_fwd = false;
    // kern::ConvPolicy::dw_fused_bwd on a stride-1 depthwise shape with a dgrad: the backward runs fused
    // (when the custom kernels run the shape), and, when autotuned, its time per dgrad mode (ms; -1 =
    // the step does not run that mode, or not timed).
    bool fused = false;
    double fused_ms = -1, fused_ow_ms = -1;
    // Whether the backward runs fused: where the custom kernels run the shape, or where it was planned
    // with the BN prologue (its forward and wgrad are the custom kernels' whatever cuDNN's time, and the
    // fused kernel replaces the prologue wgrad and the dgrad together: the fused LiteBlock).
    bool runs_fused() const { return fused && (impl == ConvImpl::CustomDepthwise || use.bn_prologue); }
};

// The first staged gather variant that can run s's forward (the depthwise statistics epilogue's variant
// without autotuning; model/gpu_ops_timing.cpp). Throws when none can.
int first_staged_forward(const kern::ConvShape& s);

}  // namespace model
