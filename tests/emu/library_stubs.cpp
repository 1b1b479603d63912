// cuBLASLt under the CPU emulation: the handle lifetime that rt::CudaContext needs and the status
// strings of runtime/cuda_check.cpp; the matmul (the GEMM ceiling of `slidefuse bench ceilings`) is
// emulated in cublaslt.cpp. cuDNN's graph API is emulated in cudnn_backend.cpp.
#include <cublasLt.h>
#include <cublas_v2.h>

namespace {
int g_cublaslt_handle;  // a non-null address to hand out
}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = reinterpret_cast<cublasLtHandle_t>(&g_cublaslt_handle);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        default: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
}
const char* cublasGetStatusString(cublasStatus_t) {
    return "refused by the cuBLASLt emulation (tests/emu/cublaslt.cpp: see its stderr line)";
}

}  // extern "C"
