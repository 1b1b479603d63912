#include "runtime/cuda_check.h"

namespace rt {

void throw_cuda(const char* file, int line, const char* expr, cudaError_t e) {
    throw_error(file, line, expr, format("CUDA error %s: %s", cudaGetErrorName(e), cudaGetErrorString(e)));
}

void throw_cudnn(const char* file, int line, const char* expr, cudnnStatus_t s) {
    char detail[512] = {0};
    cudnnGetLastErrorString(detail, sizeof(detail));
    throw_error(file, line, expr, format("cuDNN error %s%s%s", cudnnGetErrorString(s), detail[0] ? ": " : "", detail));
}

void throw_cublas(const char* file, int line, const char* expr, cublasStatus_t s) {
    throw_error(file, line, expr, format("cuBLAS error %s: %s", cublasGetStatusName(s), cublasGetStatusString(s)));
}

}  // namespace rt
