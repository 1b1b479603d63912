// Test support for the GPU suites: host <-> device copies of fp32 test vectors (as bf16 or fp32)
// and the sentinel guards placed after output buffers to catch writes past their end.
// Every copy is synchronous (cudaMemcpy) and checked.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/bf16.h"

namespace sftest {

// The values rounded to bf16 (round to nearest even), held as floats: inputs both sides see exactly.
std::vector<float> bf16_exact(const std::vector<double>& v);

// v rounded to bf16 -> dst (v.size() elements).
void upload_bf16(kern::bf16* dst, const std::vector<float>& v);
// n bf16 elements at src, widened to float.
std::vector<float> download_bf16(const kern::bf16* src, size_t n);

void upload(float* dst, const std::vector<float>& v);
std::vector<float> download(const float* src, size_t n);

// A device allocation of `bytes` (at least 1), freed on scope exit; h() and f() view it as bf16 / fp32.
struct DeviceBuffer {
    void* p = nullptr;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    kern::bf16* h() const { return static_cast<kern::bf16*>(p); }
    float* f() const { return static_cast<float*>(p); }
};

// Splits v (n values followed by a guard) into the first n; clears `intact` unless every guard value
// still equals `sentinel`.
std::vector<float> strip_guard(std::vector<float> v, size_t n, float sentinel, bool& intact);

}  // namespace sftest
