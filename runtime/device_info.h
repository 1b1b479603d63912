// What a benchmark record says about the machine's GPU and its software stack: device name, PCI id,
// SM count, clocks, memory, CUDA driver / runtime and cuDNN versions, read from CUDA and cuDNN calls.
// CUDA-free header. Never throws: on a machine without a usable device the struct says so
// (available == false, reason), and the library versions, which need no device, are still filled.
#pragma once
#include <cstddef>
#include <string>

namespace rt {

struct DeviceInfo {
    bool available = false;
    std::string reason;  // why available is false (also set when one query failed; the rest is kept)

    int ordinal = -1;
    std::string name;        // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
    std::string pci_bus_id;  // "0000:65:00.0" (cudaDeviceGetPCIBusId): the key NVML selects by
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    size_t memory_bytes = 0;
    size_t l2_bytes = 0;
    int memory_bus_bits = 0;
    double sm_clock_mhz = 0;   // peak SM clock (cudaDevAttrClockRate)
    double mem_clock_mhz = 0;  // peak memory clock (cudaDevAttrMemoryClockRate)

    int cuda_driver_version = 0;   // cudaDriverGetVersion: newest CUDA the driver supports (12080); 0 = no driver
    int cuda_runtime_version = 0;  // cudaRuntimeGetVersion: the runtime linked in (13000)
    size_t cudnn_version = 0;      // cudnnGetVersion: the cuDNN library loaded (91900)
    size_t cudnn_compiled = 0;     // CUDNN_VERSION of the headers built against

    // 2 * memory clock * bus width / 8 (double data rate), GB/s; 0 when unknown. A cross-check of
    // the datasheet bandwidth tools/roofline.h uses, not a replacement (HBM3 and GDDR7 clocks are
    // not reported uniformly).
    double theoretical_mem_gbps() const;
};

// Queries device `ordinal`. Never throws.
DeviceInfo query_device_info(int ordinal = 0);

// Free and total device memory (cudaMemGetInfo) of the current device; false with *why on failure.
bool query_device_memory(size_t* free_bytes, size_t* total_bytes, std::string* why);

// 12080 -> "12.8", 13000 -> "13.0"; 0 -> "".
std::string cuda_version_string(int v);
// cuDNN 9 encoding major*10000 + minor*100 + patch: 91900 -> "9.19.0"; 0 -> "".
std::string cudnn_version_string(size_t v);

}  // namespace rt
