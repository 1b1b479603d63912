// cuDNN convolution plans built and inspected, never executed (docs/CONV_CUDNN.md "Plans without a
// device"): the same graphs, heuristics, variant order and candidate selection as
// ConvPlanCache::prepare, for a target (rt::CudnnTarget): a device property descriptor (a GPU that
// is not here: the real cuDNN library plans for it on any machine) or a handle (the GPU here: what
// ConvPlanCache would build, to compare the two). Nothing is executed or timed: the result is what
// the heuristics propose and which plans finalize, with their workspace; a run without autotuning
// takes exactly `engine`.
// Includes cuDNN (runtime/cudnn_graph.h).
#pragma once
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "runtime/cudnn_graph.h"

namespace kern {

struct ConvPlanProbe {
    ConvPlanKey key;
    bool ok = false;                           // some variant has a plan
    ConvAccum accum = ConvAccum::Overwrite;    // the chosen plan's variant
    std::string engine;                        // its CudnnEngineConfig::describe()
    size_t cudnn_ws = 0, scratch = 0;          // its cuDNN workspace and scratch bytes
    size_t workspace = 0;                      // conv_workspace_layout(cudnn_ws, scratch).total
    int candidates = 0;                        // plans autotuning would time (policy.autotune), else 1
    size_t max_workspace = 0;                  // the largest layout among those candidates
    std::vector<std::string> reports;          // one line per variant tried (configurations, refusals)
    std::string error;                         // !ok: ConvUnsupported's message
    double seconds = 0;                        // wall time of the graph/heuristics/plan calls
};

// The one convolution operation of `op` (alpha 1, `beta`) over finalized tensor descriptors in the
// roles of fprop's x, w, y (dgrad: dx, w, dy; wgrad: x, dw, dy) and a convolution descriptor,
// finalized into *out. False (+ cuDNN's reason) when cuDNN refuses it. What ConvPlanCache builds
// its graphs from; tests use it to probe the library with other data types.
bool conv_cudnn_operation(ConvOp op, const rt::CudnnDesc& x, const rt::CudnnDesc& w, const rt::CudnnDesc& y,
                          const rt::CudnnDesc& conv, float beta, rt::CudnnDesc* out, std::string* why);

// One key (op, shape, dgrad mode, policy) planned for the target. Throws rt::Error for programming
// errors only; a shape cuDNN has no plan for is ok = false with the reason.
ConvPlanProbe conv_plan_probe(const rt::CudnnTarget& target, const ConvShape& s, ConvOp op, bool overwrite,
                              const ConvPolicy& policy);

}  // namespace kern
