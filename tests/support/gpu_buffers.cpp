// Test support for the GPU suites (tests/support/gpu_buffers.h).
#include "tests/support/gpu_buffers.h"

#include <cuda_runtime.h>

#include "runtime/cuda_check.h"

namespace sftest {

std::vector<float> bf16_exact(const std::vector<double>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = kern::round_bf16(static_cast<float>(v[i]));
    return out;
}

void upload_bf16(kern::bf16* dst, const std::vector<float>& v) {
    std::vector<kern::bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = kern::float_to_bf16(v[i]);
    SF_CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * sizeof(kern::bf16), cudaMemcpyHostToDevice));
}

std::vector<float> download_bf16(const kern::bf16* src, size_t n) {
    std::vector<kern::bf16> h(n);
    SF_CUDA_CHECK(cudaMemcpy(h.data(), src, n * sizeof(kern::bf16), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = kern::bf16_to_float(h[i]);
    return out;
}

void upload(float* dst, const std::vector<float>& v) {
    SF_CUDA_CHECK(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<float> download(const float* src, size_t n) {
    std::vector<float> out(n);
    SF_CUDA_CHECK(cudaMemcpy(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

std::vector<float> strip_guard(std::vector<float> v, size_t n, float sentinel, bool& intact) {
    for (size_t i = n; i < v.size(); ++i) intact &= v[i] == sentinel;
    v.resize(n);
    return v;
}

DeviceBuffer::DeviceBuffer(size_t bytes) { SF_CUDA_CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 1)); }
DeviceBuffer::~DeviceBuffer() { cudaFree(p); }

}  // namespace sftest
