// Device and library versions for benchmark records (runtime/device_info.h). Every CUDA call's
// status is checked, and a failure becomes the reason string instead of an exception: the bench
// prints what it could learn even on a half-working machine.
#include "runtime/device_info.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include "runtime/error.h"
#include "runtime/exec.h"

namespace rt {

namespace {

// Records the first failing call in *reason; returns true on success.
bool ok(cudaError_t e, const char* call, std::string* reason) {
    if (e == cudaSuccess) return true;
    if (reason->empty()) *reason = format("%s: %s: %s", call, cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();  // a failed query must not leave a sticky-free error behind for the next call
    return false;
}

}  // namespace

double DeviceInfo::theoretical_mem_gbps() const {
    if (mem_clock_mhz <= 0 || memory_bus_bits <= 0) return 0;
    return 2.0 * mem_clock_mhz * 1e6 * (memory_bus_bits / 8.0) / 1e9;
}

DeviceInfo query_device_info(int ordinal) {
    DeviceInfo d;
    d.ordinal = ordinal;
    d.cudnn_version = cudnnGetVersion();
    d.cudnn_compiled = CUDNN_VERSION;
    std::string why;
    ok(cudaRuntimeGetVersion(&d.cuda_runtime_version), "cudaRuntimeGetVersion", &why);
    ok(cudaDriverGetVersion(&d.cuda_driver_version), "cudaDriverGetVersion", &why);
    why.clear();  // version queries are informative only; availability is decided below

    if (!cuda_device_available(&why)) {
        d.reason = why.empty() ? "no usable CUDA device" : why;
        return d;
    }
    int count = 0;
    if (!ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount", &d.reason)) return d;
    if (ordinal < 0 || ordinal >= count) {
        d.reason = format("CUDA device %d does not exist (%d device%s)", ordinal, count, count == 1 ? "" : "s");
        return d;
    }
    cudaDeviceProp prop{};
    if (!ok(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties", &d.reason)) return d;
    d.available = true;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.sm_count = prop.multiProcessorCount;
    d.memory_bytes = prop.totalGlobalMem;
    d.l2_bytes = prop.l2CacheSize > 0 ? static_cast<size_t>(prop.l2CacheSize) : 0;
    d.memory_bus_bits = prop.memoryBusWidth;

    // The optional queries below leave their field at 0 and note the first failure in reason.
    int khz = 0;
    if (ok(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, ordinal), "cudaDevAttrClockRate", &d.reason))
        d.sm_clock_mhz = khz / 1000.0;
    if (ok(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, ordinal), "cudaDevAttrMemoryClockRate", &d.reason))
        d.mem_clock_mhz = khz / 1000.0;
    char bus[32] = {0};
    if (ok(cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal), "cudaDeviceGetPCIBusId", &d.reason)) d.pci_bus_id = bus;
    return d;
}

bool query_device_memory(size_t* free_bytes, size_t* total_bytes, std::string* why) {
    std::string reason;
    *free_bytes = *total_bytes = 0;
    if (ok(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo", &reason)) return true;
    if (why) *why = reason;
    return false;
}

std::string cuda_version_string(int v) {
    if (v <= 0) return "";
    return format("%d.%d", v / 1000, (v % 1000) / 10);
}

std::string cudnn_version_string(size_t v) {
    if (v == 0) return "";
    return format("%zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
}

}  // namespace rt
