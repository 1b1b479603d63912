// CUDA fill: y[i] = value for i < n, fp32. Bandwidth-bound, so the body is written with 128-bit
// stores; the up to 3 elements before the first 16-byte boundary and the up to 3 after the last
// whole float4 are written by the first threads of the grid, so any 4-byte aligned y works.
#include <algorithm>
#include <cstdint>

#include "kernels/fill_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/launch.cuh"

namespace kern {

namespace {

constexpr int kFillThreads = 256;
constexpr size_t kFillMaxBlocks = 4096;  // the grid-stride loop covers the rest

// ---- kernels ----

// Grid-stride loop over the float4 body; head and tail elements by threads 0..2.
__global__ void fill_kernel(size_t n, float value, float* __restrict__ y) {
    rt::pdl_entry();
    const size_t misalign = (16u - (reinterpret_cast<uintptr_t>(y) & 15u)) & 15u;  // bytes to the boundary
    const size_t head = misalign / sizeof(float) < n ? misalign / sizeof(float) : n;
    const size_t body = (n - head) / 4;
    const size_t tail = head + 4 * body;
    float4* __restrict__ y4 = reinterpret_cast<float4*>(y + head);
    const float4 v = make_float4(value, value, value, value);
    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = tid; i < body; i += stride) y4[i] = v;
    if (tid < head) y[tid] = value;
    if (tid < n - tail) y[tail + tid] = value;
}

}  // namespace

// ---- launchers ----

void fill_cuda(const rt::Exec& ex, size_t n, float value, float* y) {
    SF_CHECK(ex.is_cuda(), "fill_cuda: called with a %s Exec", rt::backend_name(ex.backend));
    if (n == 0) return;
    SF_CHECK(y != nullptr && reinterpret_cast<uintptr_t>(y) % alignof(float) == 0,
             "fill_cuda: y must be a non-null, 4-byte aligned device pointer (got %p)", static_cast<void*>(y));
    const size_t work = n / 4 + 1;  // float4 stores, plus at least one thread for head/tail
    const int blocks = static_cast<int>(std::min((work + kFillThreads - 1) / kFillThreads, kFillMaxBlocks));
    rt::launch(ex, "fill_kernel", fill_kernel, blocks, kFillThreads, 0, n, value, y);
}

}  // namespace kern
