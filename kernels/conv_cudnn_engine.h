// Internal to the cuDNN convolution plans (kernels/conv_cudnn*.cpp): one finalized engine of one
// accumulation variant, its launch, and autotuning over candidates. Includes cuDNN (through
// runtime/cudnn_graph.h): not for g++-only code.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "runtime/cudnn_graph.h"

namespace kern::conv_detail {

// Every descriptor of one (op, variant) graph; plans built from it keep it alive.
struct ConvGraph {
    rt::CudnnDesc x, w, y, conv, op, graph;
};

// One finalized execution plan of one variant.
struct Engine {
    ConvAccum accum = ConvAccum::Overwrite;
    std::shared_ptr<ConvGraph> graph;
    rt::CudnnEngineConfig cfg;
    rt::CudnnDesc plan;
    size_t cudnn_ws = 0;
    bool demoted = false;  // REDUCED_PRECISION_REDUCTION / DOWN_CONVERT_INPUTS: used only without alternatives
    double ms = -1;
};

inline bool is_scratch(ConvAccum a) { return a == ConvAccum::ScratchBf16 || a == ConvAccum::ScratchF32; }

// Enqueues e for op: `in0`, `in1` are the op's inputs (fprop: x, w; dgrad: dy, w; wgrad: x, dy),
// `dst` its destination (y, dx, dw). Scratch variants write into the workspace's scratch region and
// add it into dst. With `why` set, a failing cudnnBackendExecute is reported instead of thrown.
// accumulate = false (dgrad only: the first contribution to dx): an Overwrite plan (the overwrite
// mode's beta = 0 graph) and a ScratchBf16 plan write dx directly, without the add; an InPlace plan
// (beta = 1 is part of the finalized plan: the overwrite mode's fallback) gets dx zeroed first.
// An Overwrite dgrad plan refuses accumulate = true.
cudnnStatus_t launch(const rt::Exec& ex, const ConvShape& s, ConvOp op, const Engine& e, const void* in0,
                     const void* in1, void* dst, void* workspace, std::string* why, bool accumulate = true);

// Times every candidate on temporary device buffers (plan time: allocates, synchronises) and returns
// the index of the fastest (each candidate's ms set, -1 for one that failed to launch); -1 when none ran.
// accumulate: the mode the candidates are launched in (false: dgrad's overwrite mode).
int autotune(const rt::Exec& ex, const ConvShape& s, ConvOp op, std::vector<Engine>& cands, int iters,
             bool accumulate = true);

}  // namespace kern::conv_detail
