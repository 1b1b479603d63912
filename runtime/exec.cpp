#include "runtime/exec.h"

#include "runtime/cuda_check.h"
#include "runtime/log.h"

namespace rt {

const char* backend_name(Backend b) { return b == Backend::Cpu ? "cpu" : "cuda"; }

Backend parse_backend(const std::string& s) {
    if (s == "cpu") return Backend::Cpu;
    if (s == "cuda") return Backend::Cuda;
    SF_FAIL("unknown backend '%s' (allowed: cpu, cuda)", s.c_str());
}

bool cuda_device_available(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) *why = format("%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError();  // clear the sticky-free error state
        return false;
    }
    if (n == 0) {
        if (why) *why = "no CUDA device";
        return false;
    }
    return true;
}

CudaContext::CudaContext(int device) {
    std::string why;
    SF_CHECK(cuda_device_available(&why), "CUDA backend requested but unusable: %s", why.c_str());
    exec_.backend = Backend::Cuda;
    exec_.device = device;
    SF_CUDA_CHECK(cudaSetDevice(device));
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&exec_.stream, cudaStreamNonBlocking));
    SF_CUDNN_CHECK(cudnnCreate(&exec_.cudnn));
    SF_CUDNN_CHECK(cudnnSetStream(exec_.cudnn, exec_.stream));
    SF_CUBLAS_CHECK(cublasLtCreate(&exec_.cublaslt));
}

CudaContext::~CudaContext() {
    // Destructors log and continue.
    if (exec_.cublaslt && cublasLtDestroy(exec_.cublaslt) != CUBLAS_STATUS_SUCCESS)
        SF_LOG_ERROR("cublasLtDestroy failed");
    if (exec_.cudnn && cudnnDestroy(exec_.cudnn) != CUDNN_STATUS_SUCCESS) SF_LOG_ERROR("cudnnDestroy failed");
    if (exec_.stream) {
        const cudaError_t e = cudaStreamDestroy(exec_.stream);
        if (e != cudaSuccess) SF_LOG_ERROR("cudaStreamDestroy: %s", cudaGetErrorString(e));
    }
}

void CudaContext::synchronize() const { SF_CUDA_CHECK(cudaStreamSynchronize(exec_.stream)); }

}  // namespace rt
