// Per-layer comparison of one training micro-step against a reference (`slidefuse check`,
// docs/CHECK.md): what a step left behind per layer (StepCapture: each ConvBN/Conv's forward output
// and its output gradient, the flat parameter gradients, the loss terms), the fp64 metrics of one
// tensor against its reference (relative L2, cosine), and the report: entries in network order,
// the first one beyond tolerance in evaluation order (forward outputs in forward order, then the
// loss terms, then gradients in the order backward produced them), a text table and JSON
// (schema "slidefuse.check/1"). CUDA-free: the captures are host fp32 copies (bf16 widens exactly).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/loss.h"
#include "model/params.h"

namespace tools {

constexpr const char* kCheckSchema = "slidefuse.check/1";

// One tensor against its reference, in fp64.
struct TensorMetrics {
    size_t numel = 0;
    double ref_norm = 0, got_norm = 0;  // L2 norms
    double rel_l2 = 0;                  // ||got - ref|| / ||ref||; absolute L2 when ref is all zero
    double cosine = 1;                  // <got, ref> / (||got|| ||ref||); 1 when both are zero, 0 when one is
    double max_abs = 0;                 // max |got - ref|
    size_t nonfinite = 0;               // non-finite elements in got or ref: rel_l2 and cosine are then NaN
};
TensorMetrics compare_tensors(const float* got, const float* ref, size_t n);
// A scalar (a loss term): rel_l2 = |got - ref| / |ref| (absolute when ref is 0), no cosine.
TensorMetrics compare_scalars(double got, double ref);

// Defaults: DESIGN §2 for bf16 CUDA against the fp32 CPU reference (whole-step gradients cosine
// >= 0.999; 5e-2 relative L2 is the error that cosine allows).
struct CheckTolerance {
    double rel_l2 = 5e-2;
    double cosine = 0.999;
    double loss_abs = 1e-6;  // loss terms: |got - ref| <= rel_l2 * |ref| + loss_abs
};
// rel_l2 <= tol and (when it has one) cosine >= tol; NaN never passes.
bool within(const TensorMetrics& m, const CheckTolerance& tol, bool has_cosine = true);

// What one micro-step left behind (host fp32 copies; tools/layer_capture.h fills it).
struct LayerCapture {
    std::string name;             // the layer's parameter prefix, e.g. "stage2.fusion.smooth_1_4"
    std::vector<float> out;       // its forward output (empty: never ran)
    std::vector<float> grad_out;  // its output's gradient when its backward began (empty: never ran)
};
struct StepCapture {
    std::vector<LayerCapture> layers;    // network (forward) order
    std::vector<size_t> forward_order;   // layer indices in the order their forward ended
    std::vector<size_t> backward_order;  // layer indices in the order their backward began
    std::vector<float> param_grads;      // the flat gradient range (ParamTable offsets)
    model::LossTerms loss;
};

enum class Phase { Forward, Loss, Backward };
const char* phase_name(Phase p);  // "forward" | "loss" | "backward"

struct CheckEntry {
    std::string layer;   // layer name, or "loss"
    std::string tensor;  // "out", "grad out", "grad <param>" (suffix after the layer), or a loss term
    Phase phase = Phase::Forward;
    TensorMetrics m;
    bool has_cosine = true;  // false for scalars (loss terms)
    // "" (rel L2 and cosine), or "~0": a conv bias before train-mode BatchNorm, whose true
    // gradient is exactly 0 (both sides hold rounding noise): passes while ||got|| <= 0.25 ||ref
    // gradient of the layer's bn.bias|| (what the whole-step GPU test checks).
    // "floor": beyond the fixed tolerance, passed because it is within floor_factor of how far the
    // same reference with only its conv weights rounded to bf16 is off (build_report, below).
    std::string rule;
    double zero_scale = 0;                // "~0": ||ref gradient of bn.bias||
    long param = -1;                      // parameter gradients: the ParamTable index
    bool has_floor = false;               // a floor capture was given
    TensorMetrics floor;                  // the bf16-weights floor against the reference
    double got_value = 0, ref_value = 0;  // scalars (loss terms)
    bool pass = true;
};

struct CheckReport {
    std::vector<CheckEntry> entries;  // network order: per layer its out, grad out, parameter grads; loss last
    std::vector<size_t> eval_order;   // entry indices: forward outputs, loss terms, gradients (backward order)
    long first_failure = -1;          // entry index of the first beyond tolerance in eval_order, or -1
    CheckTolerance tol;
    double floor_factor = 0;  // > 0 when a floor capture judged the tensors
    bool passed() const { return first_failure < 0; }
    size_t failures() const;
};

// Compares `got` with `ref` (same network: same layer names and order, same table). Throws naming
// the first mismatch of structure (layer names, sizes).
//
// floor (optional): the reference step again with only its conv weights rounded to bf16 (computed
// the same way as `ref`: isolated or end to end). A tensor beyond the fixed tolerance still passes,
// with rule "floor", when `got` is no further off than floor_factor times the floor's relative L2
// and floor_factor^2 times its cosine deficit (which grows as the square of an error): no bf16
// implementation can be held closer than rounding the weights alone puts it.
CheckReport build_report(const StepCapture& ref, const StepCapture& got, const model::ParamTable& table,
                         const CheckTolerance& tol, const StepCapture* floor = nullptr, double floor_factor = 3.0);

// One line per layer (out, grad out, worst parameter gradient; "x" beyond tolerance, the first
// marked), the loss terms, then the verdict naming the first tensor beyond tolerance.
std::string format_report(const CheckReport& r);
// The verdict line alone ("all N tensors within tolerance ..." or "first beyond tolerance: ...").
std::string verdict(const CheckReport& r);

// {"schema", "passed", "failures", "tolerance", "first_failure" (null when none), "loss",
//  "logits", "entries"}; `meta` (mode, shape, seed, device, ...) is merged at the top level.
// NaN metrics are written as null.
nlohmann::json report_json(const CheckReport& r, const nlohmann::json& meta);

}  // namespace tools
