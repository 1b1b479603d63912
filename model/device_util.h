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
