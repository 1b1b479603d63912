// cuDNN and cuBLASLt under the CPU emulation: only the handle lifetime that rt::CudaContext needs,
// plus the status strings of runtime/cuda_check.cpp. No cuDNN or cuBLASLt operation is emulated;
// code that calls one does not link into the emulation build, and its tests are not part of it
// (tests/emu/CMakeLists.txt lists them with the reason).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

namespace {
int g_cudnn_handle, g_cublaslt_handle;  // distinct non-null addresses to hand out
}  // namespace

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
    *h = reinterpret_cast<cudnnHandle_t>(&g_cudnn_handle);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; }
size_t cudnnGetVersion() { return CUDNN_VERSION; }
const char* cudnnGetErrorString(cudnnStatus_t) { return "cuDNN is not emulated"; }
void cudnnGetLastErrorString(char* message, size_t max_size) {
    if (message && max_size) message[0] = '\0';
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = reinterpret_cast<cublasLtHandle_t>(&g_cublaslt_handle);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_NOT_SUPPORTED"; }
const char* cublasGetStatusString(cublasStatus_t) { return "cuBLAS is not emulated"; }

}  // extern "C"
