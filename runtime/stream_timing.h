// Timing work on a CUDA stream with events: the one helper of the plan-time autotuners and the
// benchmarks that time a callable (model::GpuOps, bench ceilings, plan --fusion-graphs --time).
// Creates events and synchronises: never inside a captured or timed step.
#pragma once
#include <algorithm>

#include "runtime/cuda_check.h"

namespace rt {

// Mean ms of max(iters, 1) runs of body() enqueued on `stream`, between two events, after `warmup`
// untimed runs.
template <class F>
double stream_mean_ms(cudaStream_t stream, int warmup, int iters, F&& body) {
    for (int i = 0; i < warmup; ++i) body();
    iters = std::max(1, iters);
    struct Events {  // destroyed on scope exit, also when body() throws
        cudaEvent_t start = nullptr, stop = nullptr;
        ~Events() {
            if (start) cudaEventDestroy(start);
            if (stop) cudaEventDestroy(stop);
        }
    } ev;
    SF_CUDA_CHECK(cudaEventCreate(&ev.start));
    SF_CUDA_CHECK(cudaEventCreate(&ev.stop));
    SF_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    for (int i = 0; i < iters; ++i) body();
    SF_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    SF_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    return static_cast<double>(ms) / iters;
}

}  // namespace rt
