// Whether the current device can load this binary's kernels: the support decision
// (runtime/device_report.h) reasons from CMAKE_CUDA_ARCHITECTURES; this asks the driver, which
// also covers builds for "native"/"all" and a PTX JIT that fails.
#include <cuda_runtime.h>

#include <string>

#include "runtime/device_report.h"
#include "runtime/error.h"

namespace rt {

namespace {
__global__ void probe_kernel() {}
}  // namespace

bool device_loads_kernels(std::string* why) {
    cudaFuncAttributes a{};
    const cudaError_t e = cudaFuncGetAttributes(&a, probe_kernel);  // loads the module: SASS or PTX JIT
    if (e == cudaSuccess) return true;
    if (why) *why = format("%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();  // leave no error behind for the next call
    return false;
}

}  // namespace rt
