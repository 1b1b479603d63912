// The CUDA runtime API of the CPU emulation, part 1: errors, the one emulated device, memory and
// copies (streams, events, graphs: streams.cpp). Definitions of the functions the real
// cuda_runtime_api.h declares, so the project's host code compiles unchanged and links here
// instead of libcudart. Copies check their pointers against the allocation registry: a host
// pointer where a device one belongs (or a range past an allocation's end) is cudaErrorInvalidValue.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/emu/emu_internal.h"
#include "tests/emu/streams.h"

using sfemu::set_error;

namespace {

constexpr size_t kDeviceMemory = 80ull << 30;  // what cudaMemGetInfo reports as the total

struct ErrorName {
    cudaError_t e;
    const char* name;
    const char* text;
};
constexpr ErrorName kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorAssert, "cudaErrorAssert", "device-side assert triggered"},
};

const ErrorName* find_error(cudaError_t e) {
    for (const ErrorName& n : kErrors)
        if (n.e == e) return &n;
    return nullptr;
}

bool is_device(const void* p, size_t n) {
    const sfemu::Allocation* a = sfemu::find_allocation(p, n);
    return a && a->device;
}

// The direction of a copy from its pointers (cudaMemcpyDefault) or checked against them.
cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind& kind) {
    const bool dd = is_device(dst, n), sd = is_device(src, n);
    if (kind == cudaMemcpyDefault) {
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
        return cudaSuccess;
    }
    const bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyHostToHost) return cudaSuccess;
    if (want_dd != dd || want_sd != sd) {
        std::fprintf(stderr,
                     "sfemu: cudaMemcpy kind %d does not match its pointers (dst %p %s, src %p %s, %zu bytes)\n",
                     static_cast<int>(kind), dst, dd ? "device" : "not device", src, sd ? "device" : "not device", n);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

bool device_to_device(const void* dst, const void* src, size_t n) { return is_device(dst, n) && is_device(src, n); }

bool is_pinned(const void* p, size_t n) {
    const sfemu::Allocation* a = sfemu::find_allocation(p, n);
    return a && !a->device;
}

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t e) {
    const ErrorName* n = find_error(e);
    return n ? n->name : "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
    const ErrorName* n = find_error(e);
    return n ? n->text : "unknown error";
}

// ---- the device: one, described like an H100 where a caller asks ----

cudaError_t cudaGetDeviceCount(int* n) {
    if (!n) return set_error(cudaErrorInvalidValue);
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* d) {
    if (!d) return set_error(cudaErrorInvalidValue);
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (!p || d != 0) return set_error(cudaErrorInvalidValue);
    *p = cudaDeviceProp{};
    std::snprintf(p->name, sizeof p->name, "slidefuse CPU emulation");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = kDeviceMemory;
    p->sharedMemPerBlock = 48 << 10;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->multiProcessorCount = 132;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d) {
    if (!v || d != 0) return set_error(cudaErrorInvalidValue);
    switch (attr) {
        case cudaDevAttrClockRate: *v = 1980000; break;        // kHz
        case cudaDevAttrMemoryClockRate: *v = 2619000; break;  // kHz
        case cudaDevAttrMultiProcessorCount: *v = 132; break;
        case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
        default: return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

// Every emulated kernel "loads" (runtime/device_probe.cu asks before the first launch); with the sm_90
// kernel table its registers, shared memory, stack and largest block are the sm_90 build's.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void* func) {
    if (!a || !func) return set_error(cudaErrorInvalidValue);
    *a = cudaFuncAttributes{};
    a->maxThreadsPerBlock = 1024;
    a->binaryVersion = a->ptxVersion = 90;
    if (const sfemu::KernelLimits* k = sfemu::kernel_limits(func)) {
        a->numRegs = k->regs;
        a->sharedSizeBytes = static_cast<size_t>(k->smem);
        a->localSizeBytes = static_cast<size_t>(k->stack);
        a->maxThreadsPerBlock = k->max_threads;
        a->maxDynamicSharedSizeBytes = (48 << 10) - k->smem;
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int d) {
    if (!bus || len <= 0 || d != 0) return set_error(cudaErrorInvalidValue);
    std::snprintf(bus, static_cast<size_t>(len), "0000:00:00.0");
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    const size_t used = sfemu::device_bytes_in_use();
    *total = kDeviceMemory;
    *free_bytes = used < kDeviceMemory ? kDeviceMemory - used : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return sfemu::sync_device(); }
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }

// ---- memory ----

cudaError_t cudaMalloc(void** p, size_t n) {
    if (!p) return set_error(cudaErrorInvalidValue);
    if (sfemu::context_lost() != cudaSuccess) return sfemu::context_lost();
    if (sfemu::capture_forbids_sync()) {
        sfemu::invalidate_captures();
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    if (n > kDeviceMemory - sfemu::device_bytes_in_use()) return set_error(cudaErrorMemoryAllocation);
    *p = sfemu::allocate(n, true);
    return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    // cudaFree waits for the device: work still queued may use the memory.
    const cudaError_t e = sfemu::sync_device();
    if (e != cudaSuccess) return e;
    return sfemu::release(p, true) ? cudaSuccess : set_error(cudaErrorInvalidDevicePointer);
}

cudaError_t cudaMallocHost(void** p, size_t n) {
    if (!p) return set_error(cudaErrorInvalidValue);
    *p = sfemu::allocate(n, false);
    return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMallocHost(p, n); }

cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    const cudaError_t e = sfemu::sync_device();
    if (e != cudaSuccess) return e;
    return sfemu::release(p, false) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}

// Synchronous copy on the legacy stream: earlier work there (and on blocking streams) first.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    if (sfemu::context_lost() != cudaSuccess) return sfemu::context_lost();
    if (sfemu::capture_forbids_sync()) {
        sfemu::invalidate_captures();
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    const cudaError_t e = check_copy(dst, src, n, kind);
    if (e != cudaSuccess) return set_error(e);
    sfemu::sync_stream(nullptr);
    if (!(sfemu::launch_only() && device_to_device(dst, src, n))) std::memmove(dst, src, n);
    return cudaSuccess;
}

// As in CUDA: a copy from pageable memory takes the source at the call (it is staged), a copy into
// pageable memory completes before the call returns; with pinned memory both stay asynchronous,
// so the host buffer is read or written when the stream gets there.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, kind);
    if (e != cudaSuccess) return set_error(e);
    const bool pageable_src = kind == cudaMemcpyHostToDevice && !is_pinned(src, n);
    const bool pageable_dst = kind == cudaMemcpyDeviceToHost && !is_pinned(dst, n);
    if ((pageable_src || pageable_dst) && sfemu::is_capturing(s)) {
        sfemu::invalidate_captures();
        return set_error(cudaErrorStreamCaptureUnsupported);  // pageable memory cannot be captured
    }
    if (pageable_src) {
        auto staged =
            std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
        return sfemu::enqueue(s, "cudaMemcpyAsync",
                              [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    }
    if (sfemu::launch_only() && device_to_device(dst, src, n))  // launch-only mode: no device results
        e = sfemu::enqueue(s, "cudaMemcpyAsync", [] {});
    else
        e = sfemu::enqueue(s, "cudaMemcpyAsync", [dst, src, n] { std::memmove(dst, src, n); });
    if (e == cudaSuccess && pageable_dst) e = sfemu::sync_stream(s);
    return e;
}

cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (!is_device(p, n)) return set_error(cudaErrorInvalidValue);
    if (sfemu::launch_only()) return sfemu::enqueue(s, "cudaMemsetAsync", [] {});
    return sfemu::enqueue(s, "cudaMemsetAsync", [p, v, n] { std::memset(p, v, n); });
}
cudaError_t cudaMemset(void* p, int v, size_t n) { return cudaMemsetAsync(p, v, n, nullptr); }

}  // extern "C"
