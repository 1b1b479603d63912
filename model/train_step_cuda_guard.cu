// The predicated commit / roll-back of the BN running statistics (model/train_step_cuda_guard.h).
#include <cuda_runtime.h>

#include "model/train_step_cuda_guard.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/launch.cuh"

namespace model {

namespace {

// One launch for both arrays: the running statistics (floats) then the counters (int64). The flag
// is read once per thread; every element is copied in one direction or the other.
__global__ void bn_state_commit_kernel(const kern::DeviceStepState* __restrict__ st, float* __restrict__ live,
                                       float* __restrict__ shadow, size_t n, int64_t* __restrict__ live_c,
                                       int64_t* __restrict__ shadow_c, size_t nc) {
    rt::pdl_entry();
    const bool skip = st->nonfinite != 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n + nc; i += stride) {
        if (i < n) {
            if (skip)
                live[i] = shadow[i];
            else
                shadow[i] = live[i];
        } else if (skip) {
            live_c[i - n] = shadow_c[i - n];
        } else {
            shadow_c[i - n] = live_c[i - n];
        }
    }
}

}  // namespace

void bn_state_commit_cuda(const rt::Exec& ex, const kern::DeviceStepState* state, float* live, float* shadow, size_t n,
                          int64_t* live_counters, int64_t* shadow_counters, size_t nc) {
    SF_CHECK(ex.is_cuda(), "bn_state_commit_cuda needs a CUDA Exec");
    SF_CHECK(state && (n == 0 || (live && shadow)) && (nc == 0 || (live_counters && shadow_counters)),
             "bn_state_commit_cuda: null pointers (%zu floats, %zu counters)", n, nc);
    if (n + nc == 0) return;
    rt::launch(ex, "bn_state_commit_kernel", bn_state_commit_kernel, bn_guard_blocks(n + nc), kBnGuardThreads, 0, state,
               live, shadow, n, live_counters, shadow_counters, nc);
}

}  // namespace model
