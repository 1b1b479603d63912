// Small device helpers of the CUDA network and step (model/device_util.cu), declared without CUDA
// types. Enqueued on ex.stream; never allocate or synchronise.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"
#include "runtime/exec.h"

namespace model {

struct LrSchedule;  // model/train_step_cuda.h
struct StepRecord;  // model/train_step_cuda.h

// bytes of device memory set to zero (cudaMemsetAsync; bit pattern 0 = +0.0 in fp32 and bf16).
void zero_device_async(const rt::Exec& ex, void* p, size_t bytes);
// counters[i] += 1 for i < n (every BatchNorm's num_batches_tracked after a train forward).
void increment_counters_cuda(const rt::Exec& ex, int64_t* counters, size_t n);

// One range of copy_segments_cuda: `words` 32-bit words from src to dst.
struct CopySegment {
    const void* src = nullptr;
    void* dst = nullptr;
    size_t words = 0;
};
constexpr int kMaxCopySegments = 32;
// Copies n <= kMaxCopySegments ranges in one launch (the merged heads' gathers of the four heads' parameters
// and scatters of their gradients and running statistics, NetShape::merge_heads). Every src and dst a
// non-null, 4-byte aligned device pointer; no destination may overlap another segment's source or
// destination (rt::Error naming the segment). Segments of 0 words are skipped; n == 0 launches nothing.
void copy_segments_cuda(const rt::Exec& ex, const CopySegment* segs, int n);

// state->lr for the coming optimizer step from the steps attempted so far (state->step +
// state->skipped), exactly model::sgdr_lr (epoch = attempted / steps_per_epoch, written to
// *epoch_scratch) or model::warmup_cosine_lr (step = attempted). One tiny launch.
void schedule_lr_cuda(const rt::Exec& ex, const LrSchedule& s, kern::DeviceStepState* state, int32_t* epoch_scratch);

// After grad_norm_cuda, before adamw_cuda: state->nonfinite |= !isfinite(*step_loss) (a non-finite
// micro-batch loss skips the update, as on the CPU); ring[(state->step + state->skipped) % ring_size]
// = {*step_loss / accum, norm, lr, clip, nonfinite}; *step_loss = 0. accum: the micro-batches the
// sum covers (accumulation steps x ranks when the sum was allreduced).
void record_step_cuda(const rt::Exec& ex, kern::DeviceStepState* state, double* step_loss, int accum,
                      StepRecord* ring, int ring_size);

}  // namespace model
