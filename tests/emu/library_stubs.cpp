// cuBLASLt under the CPU emulation: only the handle lifetime that rt::CudaContext needs, plus the
// status strings of runtime/cuda_check.cpp. No cuBLASLt operation is emulated: the matmul entry
// points `slidefuse bench ceilings` calls (its GEMM ceiling, the project's only cuBLASLt operation)
// answer CUBLAS_STATUS_NOT_SUPPORTED, so its error path runs here. cuDNN's graph API is emulated in
// cudnn_backend.cpp.
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

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*,
                                              size_t) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t, int64_t) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t*) { return CUBLAS_STATUS_NOT_SUPPORTED; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t*,
                                              int*) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t*, cublasLtMatmulAlgoConfigAttributes_t,
                                                    void*, size_t, size_t*) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
                              const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t,
                              void*, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t,
                              cudaStream_t) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // extern "C"
