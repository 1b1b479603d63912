// The training step's modelled work, op by op, from a dry-run plan (no GPU): every convolution layer
// (model::LayerUse) and every other op of the forward and backward (model::OpUse), the loss, the
// optimizer and the input's preprocessing, each split into the passes its kernels make, with the
// roofline model's bytes and FLOPs (tools/roofline.h). The gradient writes are charged as the traced
// backward runs them (a first contribution overwrites, a later one reads and writes).
//
// `slidefuse plan --roofline` sums it into the step's floor at a GPU's peaks (step_floor below);
// `bench step --layers` puts each row beside its measured time (tools/layer_table.h).
#pragma once
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "model/net.h"
#include "tools/roofline.h"

namespace tools {

// The passes of a row (each a kernel or a group of kernels of its own). Step: the loss, the optimizer
// and the input's preprocessing (once per step, neither forward nor backward of a layer).
enum class StepPart { ConvFwd, ConvDgrad, ConvWgrad, NormFwd, NormBwd, OtherFwd, OtherBwd, Step, kCount };
const char* step_part_name(StepPart p);  // "conv fwd", "conv dgrad", ... "loss/optimizer/input"

struct StepModelRow {
    std::string name;      // the layer or op ("stage2.fusion.smooth_1_4", "loss", ...)
    std::string kind;      // its class (step_kinds() below)
    std::string fwd_scope;  // the profiling scopes its time is measured in ("" = none)
    std::string bwd_scope;
    OpCost part[static_cast<int>(StepPart::kCount)];
    OpCost& at(StepPart p) { return part[static_cast<int>(p)]; }
    const OpCost& at(StepPart p) const { return part[static_cast<int>(p)]; }
    OpCost fwd() const;  // conv fwd + norm fwd + other fwd + step (the loss row's time is one scope)
    OpCost bwd() const;  // conv dgrad + conv wgrad + norm bwd + other bwd
};

// The classes rows fall into, in report order: "conv 3x3 dense", "conv 3x3 depthwise",
// "conv 1x1", "conv 1x1 up path", "head 1x1 (fp32 logits)", "upsample", "weighted fuse",
// "gradient sum", "loss", "optimizer", "data".
const std::vector<std::string>& step_kinds();

// The rows of one training micro-step (forward + backward) and its optimizer step, in execution
// order of the forward. p: element sizes (bf16 activations on the CUDA backend).
std::vector<StepModelRow> step_model(const model::Planner& plan, const model::NetShape& shape, const Precision& p = {});
// The same for a network built here in a dry run (no memory) at `shape`, planned for `kernels`' switches (the
// kernel fusions its layers take, model::LayerUse; nullptr: none).
std::vector<StepModelRow> step_model(const model::NetShape& shape, const Precision& p = {},
                                     const kern::ConvPolicy* kernels = nullptr);

// The step's floor at `peaks`: every pass of every row bound on its own (its max(compute, memory)
// time), summed; per class and per part too. NaN when the peaks are unknown.
struct StepFloor {
    OpCost cost;                  // the whole step
    double floor_ms = 0;          // sum of the passes' floors
    double memory_ms = 0;         // the bytes alone at the bandwidth
    double compute_ms = 0;        // the FLOPs alone at the compute peaks
    struct Group {
        std::string name;
        int rows = 0;
        OpCost cost;
        double floor_ms = 0;
    };
    std::vector<Group> by_kind;   // step_kinds() order, classes with no row left out
    std::vector<Group> by_part;   // StepPart order (rows: the passes in the group)
};
StepFloor step_floor(const std::vector<StepModelRow>& rows, const DevicePeaks& peaks);

}  // namespace tools
