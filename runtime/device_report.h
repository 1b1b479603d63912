// The device report printed when a CUDA backend starts (train, eval, predict, bench): which GPU,
// compute capability, driver and CUDA runtime, and whether this build can run on it. The
// support decision is a pure function of its inputs (tested on the CPU with injected values);
// check_cuda_device() feeds it the live values and refuses an unsupported device with a message
// that says what to rebuild.
#pragma once
#include <string>
#include <vector>

#include "runtime/device_info.h"

namespace rt {

// The kernels' floor: BF16 tensor-core convolutions and __nv_bfloat16 arithmetic need sm_80.
constexpr int kMinComputeCapability = 80;

// One entry of CMAKE_CUDA_ARCHITECTURES: "89-real" (SASS for sm_89), "120-virtual" (PTX for
// compute_120), "90" (both). cc = major*10 + minor; arch_specific: "90a" code runs only on 9.0.
struct ArchTarget {
    int cc = 0;
    bool sass = false;
    bool ptx = false;
    bool arch_specific = false;
};

// Parses a CMAKE_CUDA_ARCHITECTURES value ("89-real;90-real;120-real;120-virtual"; ',' separates
// too). "native",
// "all", "all-major" and an empty string give an empty list (what they hold is only known to
// nvcc; the decision then trusts the build). Throws rt::Error on a malformed entry.
std::vector<ArchTarget> parse_cuda_architectures(const std::string& list);

// The architectures this binary was built with (CMAKE_CUDA_ARCHITECTURES at configure time).
const std::string& built_cuda_architectures();

struct DeviceSupport {
    bool ok = false;
    std::string how;      // ok: "sm_89 code" / "PTX compute_120 JIT-compiled by the driver"
    std::string message;  // !ok: why, and what to do
};

// Can a binary built for `archs` run on a device of compute capability cc (major*10+minor) under
// a driver supporting CUDA `driver_version` with the CUDA runtime `runtime_version` linked in
// (both as cudaDriverGetVersion encodes them: 13000 = 13.0)?
//   - cc below kMinComputeCapability: no;
//   - a driver older than the runtime's major version cannot load the runtime: no;
//   - SASS for sm_XY runs on X.Z with Z >= Y (same major; an arch-specific "a" build only on X.Y);
//   - else PTX for compute_XY (XY <= cc) is JIT-compiled, which needs a driver at least as new
//     as the toolkit that wrote it (runtime_version stands for it).
DeviceSupport decide_device_support(int cc, int driver_version, int runtime_version,
                                    const std::vector<ArchTarget>& archs);

// "NVIDIA GeForce RTX 4090, compute capability 8.9, 128 SMs, 24.0 GiB; driver CUDA 13.0, runtime
// 13.0; built for 89-real;90-real;120-real;120-virtual (sm_89 code)".
std::string device_report_line(const DeviceInfo& d, const DeviceSupport& s);

// Whether the current device loads this binary's kernels (a trivial kernel's attributes:
// cudaErrorNoKernelImageForDevice when it has neither code nor usable PTX). runtime/device_probe.cu.
bool device_loads_kernels(std::string* why);

// Queries device `ordinal`, logs the report line (info, once per process) and returns the info;
// throws rt::Error "<who> needs a CUDA device: <reason>" when none is usable, or says why the
// build does not support it (the decision above, then device_loads_kernels on that device).
DeviceInfo check_cuda_device(int ordinal, const char* who);

}  // namespace rt
