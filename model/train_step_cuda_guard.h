// BN running statistics of the CUDA step are protected against skipped steps (model/train_step_cuda.h):
// the train forwards of a step's micro-batches update running_mean / running_var and
// num_batches_tracked in place, before the optimizer step knows whether the step is finite. A
// shadow copy holds their values as of the last applied step; the optimizer sequence ends the step
// with one predicated launch that reads state->nonfinite on the device (no host sync, captured in
// the optimizer graph):
//   finite step:   shadow = live   (commit)
//   skipped step:  live = shadow   (roll back: the skipped step changed nothing)
// Declared without CUDA types; enqueued on ex.stream; never allocates or synchronises.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"
#include "runtime/exec.h"

namespace model {

// Launch geometry: a grid-stride loop over n floats + nc counters, at most kBnGuardMaxBlocks blocks.
constexpr int kBnGuardThreads = 256;
constexpr int kBnGuardMaxBlocks = 128;
constexpr int bn_guard_blocks(size_t n) {
    const size_t b = (n + kBnGuardThreads - 1) / kBnGuardThreads;
    return static_cast<int>(b < 1 ? 1 : (b > kBnGuardMaxBlocks ? kBnGuardMaxBlocks : b));
}

// After record_step_cuda (which settles state->nonfinite for the step): commit or roll back
// `n` running-statistic floats and `nc` counters.
void bn_state_commit_cuda(const rt::Exec& ex, const kern::DeviceStepState* state, float* live, float* shadow, size_t n,
                          int64_t* live_counters, int64_t* shadow_counters, size_t nc);

}  // namespace model
