// `slidefuse check` (docs/CHECK.md): one training micro-step of the CUDA backend and of the CPU
// reference from the same initial weights on the same batch, compared layer by layer
// (tools/layer_check.h). --reference-only runs the CPU reference against itself instead, with
// --perturb LAYER changing that layer's weights in the second network: the CPU test of the whole
// command (the perturbed layer must be named first).
// Exit codes: 0 every tensor within tolerance, 3 one beyond, 2 no usable GPU, 1 other errors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/label.h"
#include "model/loss.h"
#include "model/net.h"
#include "model/train_step.h"
#include "tools/layer_check.h"

namespace tools {

constexpr int kCheckExitBeyond = 3;
constexpr int kCheckExitNoGpu = 2;

struct CheckOptions {
    std::string config;  // optional training config: model, loss, train.seed, train.deterministic
    int batch = 4;
    int height = 0, width = 0;  // 0: the config's model.input_height / input_width (256x512 by default)
    long long seed = -1;        // -1: the config's train.seed; weights and the batch
    CheckTolerance tol;         // --tol-rel-l2 / --tol-cos; reference-only has its own defaults
    bool tol_rel_set = false, tol_cos_set = false;
    bool deterministic = false;  // deterministic cuDNN engines, no autotuning
    std::string json;            // report file (optional)
    bool reference_only = false;
    std::string perturb;        // reference-only: layer whose weights the second network changes
    double perturb_rel = 1e-2;  // relative size of that change
    bool bf16_weights = false;  // reference-only: the second network's conv weights rounded to bf16
    bool end_to_end = false;    // compare two independent steps (default: isolated, docs/CHECK.md)
    double floor_factor = -1;   // --floor-factor; -1: 3 on CUDA, 0 (no floor) with --reference-only
};

std::string check_usage();
// Throws rt::Error naming the option on bad input.
CheckOptions parse_check_args(const std::vector<std::string>& args);

// CPU against CPU of the same code is bitwise equal; these catch anything beyond rounding order.
constexpr double kReferenceOnlyRelL2 = 1e-6;
// CUDA mode: how far beyond the bf16-weights floor a tensor may be where the floor itself is beyond
// the fixed tolerance (tools/layer_check.h build_report; docs/CHECK.md).
constexpr double kDefaultFloorFactor = 3.0;
constexpr double kReferenceOnlyCosine = 1.0 - 1e-9;

// Initial weights, BN buffers and counters (model/init.h from the seed), shared by both runs.
struct NetState {
    std::vector<float> master, buffers;
    std::vector<int64_t> counters;
};

// What both runs share.
struct CheckSetup {
    model::NetShape shape;
    model::LossConfig loss;
    model::OptimConfig optim;
    uint64_t seed = 42;
    bool deterministic = false;
    std::vector<uint8_t> pixels;  // (N,H,W,C-1) generator samples (seed, index 0..N-1)
    std::vector<data::Label> labels;
};
// Resolves the config and options into the shape, loss and batch. Throws on bad input.
CheckSetup make_setup(const CheckOptions& o);

NetState init_state(const model::ParamTable& t, uint64_t seed);
void load_state(model::SiderNet& net, const NetState& s);

// Multiplies every weight of `layer`'s convolution by (1 + rel * r_i), r_i = +-1 from the seed.
// Throws naming the layer when the network has no such layer.
void perturb_layer(model::SiderNet& net, const std::string& layer, double rel, uint64_t seed);
// Rounds every conv weight (the tensors the CUDA step keeps bf16 copies of) to bf16; returns how
// many values it rounded. The precision floor of bf16 weights alone, for --bf16-weights.
size_t round_conv_weights_bf16(model::SiderNet& net);

// One captured micro-step of the CPU reference on the setup's batch (bf16-rounded input, the CUDA
// input exactly); parameter gradients are zeroed first, so a network can be stepped repeatedly.
// The bf16-weights floor: reference_step on a fresh CPU network with `init`'s state and its conv
// weights rounded to bf16 (forced as for reference_step).
StepCapture bf16_floor_step(const CheckSetup& s, const NetState& init, const StepCapture* forced);
// forced (isolated comparison): every layer output and output gradient of the reference is
// replaced by forced's once captured (tools/layer_capture.h CaptureObserver::force_from).
StepCapture reference_step(const CheckSetup& s, model::SiderNet& net, const StepCapture* forced = nullptr);
// The same on the CUDA backend from `init` (tools/check_cuda.cpp): eager, graphs off.
StepCapture cuda_step(const CheckSetup& s, const model::ParamTable& table, const NetState& init);

}  // namespace tools
