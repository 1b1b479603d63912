// CUDA / cuDNN / cuBLAS status checks. Each throws rt::Error naming the call, the status name
// and its description. Include only from files that talk to those libraries.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "runtime/error.h"

namespace rt {
[[noreturn]] void throw_cuda(const char* file, int line, const char* expr, cudaError_t e);
[[noreturn]] void throw_cudnn(const char* file, int line, const char* expr, cudnnStatus_t s);
[[noreturn]] void throw_cublas(const char* file, int line, const char* expr, cublasStatus_t s);
}  // namespace rt

#define SF_CUDA_CHECK(call)                                                           \
    do {                                                                              \
        const cudaError_t sf_e_ = (call);                                             \
        if (sf_e_ != cudaSuccess) ::rt::throw_cuda(__FILE__, __LINE__, #call, sf_e_); \
    } while (0)

#define SF_CUDNN_CHECK(call)                                                                    \
    do {                                                                                        \
        const cudnnStatus_t sf_s_ = (call);                                                     \
        if (sf_s_ != CUDNN_STATUS_SUCCESS) ::rt::throw_cudnn(__FILE__, __LINE__, #call, sf_s_); \
    } while (0)

#define SF_CUBLAS_CHECK(call)                                                                     \
    do {                                                                                          \
        const cublasStatus_t sf_s_ = (call);                                                      \
        if (sf_s_ != CUBLAS_STATUS_SUCCESS) ::rt::throw_cublas(__FILE__, __LINE__, #call, sf_s_); \
    } while (0)

