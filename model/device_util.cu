#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/adamw_cuda.h"
#include "model/device_util.h"
#include "model/train_step_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/launch.cuh"
#include "runtime/launch_check.h"

namespace model {

namespace {
__global__ void increment_kernel(int64_t* __restrict__ c, size_t n) {
    rt::pdl_entry();
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
        c[i] += 1;
}
struct CopySegments {
    CopySegment seg[kMaxCopySegments];
};
// Block row y copies segment y, grid-stride over its words.
__global__ void copy_segments_kernel(CopySegments s) {
    rt::pdl_entry();
    const CopySegment& g = s.seg[blockIdx.y];
    const auto* __restrict__ src = static_cast<const uint32_t*>(g.src);
    auto* __restrict__ dst = static_cast<uint32_t*>(g.dst);
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < g.words;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = src[i];
}
// model::warmup_cosine_lr on the device (same double expression).
__global__ void warmup_cosine_kernel(double base, double eta_min, int64_t warmup, int64_t total,
                                     kern::DeviceStepState* __restrict__ st) {
    rt::pdl_entry();
    const int64_t step = st->step + st->skipped;
    double lr;
    if (step < warmup) {
        lr = base * static_cast<double>(step + 1) / static_cast<double>(warmup);
    } else if (total <= warmup) {
        lr = base;
    } else {
        const double t = fmin(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
        lr = eta_min + (base - eta_min) * (1.0 + cos(3.14159265358979323846 * t)) / 2.0;
    }
    st->lr = static_cast<float>(lr);
}

// epoch (0-based) of the coming step for the per-epoch SGDR schedule.
__global__ void epoch_kernel(int64_t steps_per_epoch, const kern::DeviceStepState* __restrict__ st,
                             int32_t* __restrict__ epoch) {
    rt::pdl_entry();
    *epoch = static_cast<int32_t>((st->step + st->skipped) / steps_per_epoch);
}

__global__ void record_kernel(kern::DeviceStepState* __restrict__ st, double* __restrict__ step_loss, double inv_accum,
                              StepRecord* __restrict__ ring, int ring_size) {
    rt::pdl_entry();
    // A non-finite micro-batch total (the loss adds every total, so the sum is then non-finite too)
    // skips the update, as TrainStep::optimizer_step does; grad_norm_cuda only sees the gradients.
    if (!isfinite(*step_loss)) st->nonfinite = 1;
    StepRecord r;
    r.mean_loss = *step_loss * inv_accum;
    r.grad_norm = st->grad_norm;
    r.lr = st->lr;
    r.clip_scale = st->clip_scale;
    r.nonfinite = st->nonfinite;
    ring[(st->step + st->skipped) % ring_size] = r;
    *step_loss = 0;
}

}  // namespace

void record_step_cuda(const rt::Exec& ex, kern::DeviceStepState* state, double* step_loss, int accum,
                      StepRecord* ring, int ring_size) {
    SF_CHECK(ex.is_cuda(), "record_step_cuda needs a CUDA Exec");
    SF_CHECK(state && step_loss && ring && ring_size > 0 && accum >= 1,
             "record_step_cuda: bad arguments");
    rt::launch(ex, "record_kernel", record_kernel, 1, 1, 0, state, step_loss, 1.0 / accum, ring, ring_size);
}

void schedule_lr_cuda(const rt::Exec& ex, const LrSchedule& s, kern::DeviceStepState* state, int32_t* epoch_scratch) {
    SF_CHECK(ex.is_cuda(), "schedule_lr_cuda needs a CUDA Exec");
    SF_CHECK(state && epoch_scratch && s.steps_per_epoch >= 1, "schedule_lr_cuda: bad arguments");
    if (s.sgdr) {
        rt::launch(ex, "epoch_kernel", epoch_kernel, 1, 1, 0, s.steps_per_epoch, state, epoch_scratch);
        kern::schedule_sgdr_cuda(ex, state, s.base_lr, s.eta_min, s.t0, s.t_mult, epoch_scratch);
    } else {
        rt::launch(ex, "warmup_cosine_kernel", warmup_cosine_kernel, 1, 1, 0, s.base_lr, s.eta_min, s.warmup_steps,
                   s.total_steps, state);
    }
}

void zero_device_async(const rt::Exec& ex, void* p, size_t bytes) {
    SF_CHECK(ex.is_cuda(), "zero_device_async needs a CUDA Exec");
    if (bytes == 0) return;
    SF_CHECK(p != nullptr, "zero_device_async: null pointer for %zu bytes", bytes);
    SF_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ex.stream));
}

void increment_counters_cuda(const rt::Exec& ex, int64_t* counters, size_t n) {
    SF_CHECK(ex.is_cuda(), "increment_counters_cuda needs a CUDA Exec");
    if (n == 0) return;
    SF_CHECK(counters != nullptr, "increment_counters_cuda: null counters");
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    rt::launch(ex, "increment_kernel", increment_kernel, blocks, 256, 0, counters, n);
}

void copy_segments_cuda(const rt::Exec& ex, const CopySegment* segs, int n) {
    const char* op = "copy_segments_cuda";
    SF_CHECK(ex.is_cuda(), "%s needs a CUDA Exec", op);
    SF_CHECK(n >= 0 && n <= kMaxCopySegments, "%s: %d segments, at most %d per launch", op, n, kMaxCopySegments);
    CopySegments s;
    int used = 0;
    size_t most = 0;
    for (int i = 0; i < n; ++i) {
        const CopySegment& g = segs[i];
        if (g.words == 0) continue;
        SF_CHECK(rt::aligned(g.src, 4) && rt::aligned(g.dst, 4),
                 "%s: segment %d needs non-null, 4-byte aligned src and dst (got %p -> %p)", op, i, g.src, g.dst);
        for (int j = 0; j < n; ++j) {
            if (segs[j].words == 0) continue;
            for (const void* q : {segs[j].src, static_cast<const void*>(segs[j].dst)}) {
                if (j == i && q == g.dst) continue;
                SF_CHECK(!rt::overlap(g.dst, 4 * g.words, q, 4 * segs[j].words),
                         "%s: segment %d's destination overlaps segment %d's %s", op, i, j,
                         q == segs[j].src ? "source" : "destination");
            }
        }
        s.seg[used++] = g;
        most = std::max(most, g.words);
    }
    if (used == 0) return;
    const unsigned bx = static_cast<unsigned>(std::min<size_t>((most + 255) / 256, 64));
    rt::launch(ex, "copy_segments_kernel", copy_segments_kernel, dim3(bx, static_cast<unsigned>(used)), 256, 0, s);
}

}  // namespace model
