#include "runtime/arena.h"

#include <cstdlib>
#include <cstring>

#include "runtime/cuda_check.h"
#include "runtime/log.h"

namespace rt {

namespace {
constexpr size_t kBaseAlign = 256;  // covers 128-bit vector access and cuDNN's alignment wishes
}

const char* mem_kind_name(MemKind k) {
    switch (k) {
        case MemKind::Host: return "host";
        case MemKind::Pinned: return "pinned";
        case MemKind::Device: return "device";
    }
    return "?";
}

Arena::Arena(std::string name, MemKind kind) : name_(std::move(name)), kind_(kind) {}

Arena::~Arena() {
    if (!base_) return;
    switch (kind_) {
        case MemKind::Host: std::free(base_); break;
        case MemKind::Pinned: {
            const cudaError_t e = cudaFreeHost(base_);
            if (e != cudaSuccess) SF_LOG_ERROR("arena '%s': cudaFreeHost: %s", name_.c_str(), cudaGetErrorString(e));
            break;
        }
        case MemKind::Device: {
            const cudaError_t e = cudaFree(base_);
            if (e != cudaSuccess) SF_LOG_ERROR("arena '%s': cudaFree: %s", name_.c_str(), cudaGetErrorString(e));
            break;
        }
    }
}

size_t Arena::reserve(size_t bytes, size_t align, const char* what) {
    SF_CHECK(state_ == State::Planning, "arena '%s': cannot reserve %zu bytes for '%s' after allocate/seal",
             name_.c_str(), bytes, what);
    SF_CHECK(align != 0 && (align & (align - 1)) == 0 && align <= kBaseAlign,
             "arena '%s': alignment %zu for '%s' must be a power of two <= %zu", name_.c_str(), align, what,
             kBaseAlign);
    const size_t off = (size_ + align - 1) & ~(align - 1);
    size_ = off + bytes;
    return off;
}

void Arena::allocate() {
    SF_CHECK(state_ == State::Planning, "arena '%s': allocate() called twice or after seal", name_.c_str());
    const size_t bytes = (size_ + kBaseAlign - 1) & ~(kBaseAlign - 1);
    if (bytes > 0) {
        switch (kind_) {
            case MemKind::Host:
                base_ = std::aligned_alloc(kBaseAlign, bytes);
                SF_CHECK(base_ != nullptr, "arena '%s': out of host memory allocating %zu bytes", name_.c_str(), bytes);
                std::memset(base_, 0, bytes);
                break;
            case MemKind::Pinned:
                SF_CUDA_CHECK(cudaMallocHost(&base_, bytes));
                std::memset(base_, 0, bytes);
                break;
            case MemKind::Device: {
                const cudaError_t e = cudaMalloc(&base_, bytes);
                if (e == cudaErrorMemoryAllocation) {
                    cudaGetLastError();
                    SF_FAIL("arena '%s': out of device memory: needed %.1f MiB", name_.c_str(), bytes / 1048576.0);
                }
                SF_CUDA_CHECK(e);
                SF_CUDA_CHECK(cudaMemset(base_, 0, bytes));
                // cudaMemset may run asynchronously on the legacy stream, which the project's
                // non-blocking streams do not wait for: the zeros must land before anything else
                // writes the arena (plan time, so a device-wide wait is fine).
                SF_CUDA_CHECK(cudaDeviceSynchronize());
                break;
            }
        }
    }
    state_ = State::Allocated;
}

void Arena::seal() {
    SF_CHECK(state_ == State::Allocated, "arena '%s': seal() needs allocate() first", name_.c_str());
    state_ = State::Sealed;
}

void* Arena::at(size_t offset) const {
    SF_CHECK(state_ != State::Planning, "arena '%s': pointer requested before allocate()", name_.c_str());
    SF_CHECK(offset <= size_, "arena '%s': offset %zu outside %zu bytes", name_.c_str(), offset, size_);
    return static_cast<char*>(base_) + offset;
}

}  // namespace rt
