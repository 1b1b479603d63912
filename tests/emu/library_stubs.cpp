// cuBLASLt under the CPU emulation: only the handle lifetime that rt::CudaContext needs, plus the
// status strings of runtime/cuda_check.cpp. No cuBLASLt operation is emulated (the project runs
// none yet). cuDNN's graph API is emulated in cudnn_backend.cpp.
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
const char* cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_NOT_SUPPORTED"; }
const char* cublasGetStatusString(cublasStatus_t) { return "cuBLAS is not emulated"; }

}  // extern "C"
