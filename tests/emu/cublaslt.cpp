// cuBLASLt's matmul under the CPU emulation (docs/EMULATION.md "cuBLASLt"), written from the
// cuBLASLt reference for what a plain GEMM needs: matmul descriptors (compute and scale type,
// TRANSA / TRANSB), matrix layouts (type, rows, cols, leading dimension; column-major, one batch),
// preferences (maximum workspace), the heuristic (one algorithm, no workspace) and cublasLtMatmul:
// D = alpha * op(A) op(B) + beta * C, with C never read when beta is 0, queued on the stream like
// any emulated operation (captured into graphs, replayed). Supported: A, B, C, D all bf16 or all
// fp32 with CUBLAS_COMPUTE_32F and a CUDA_R_32F scale; fp32 sums in k order, one rounding to D's
// type. Anything else answers CUBLAS_STATUS_NOT_SUPPORTED / INVALID_VALUE and prints why on stderr
// (cuBLAS has no last-error string).
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/emu/emu_internal.h"
#include "tests/emu/streams.h"


namespace {

struct Desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct Pref {
    uint64_t max_workspace = 0;
};

cublasStatus_t refuse(cublasStatus_t s, const std::string& why) {
    std::fprintf(stderr, "[cublasLt emulation] %s\n", why.c_str());
    return s;
}

size_t elem_size(cudaDataType t) { return t == CUDA_R_16BF ? 2 : t == CUDA_R_32F ? 4 : 0; }

float load(const void* base, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return static_cast<const float*>(base)[i];
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}

void store(void* base, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F)
        static_cast<float*>(base)[i] = v;
    else
        static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(v);
}

// "" when the four layouts make a GEMM of desc d (op(A) m x k, op(B) k x n, C and D m x n).
std::string check_gemm(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl) {
    if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F)
        return "only CUBLAS_COMPUTE_32F with a CUDA_R_32F scale is emulated";
    if (!(a.type == b.type && b.type == c.type && c.type == dl.type) || elem_size(a.type) == 0)
        return "A, B, C and D must all be CUDA_R_16BF or all CUDA_R_32F";
    const uint64_t m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols, k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
    const uint64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols, n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
    if (k != kb || c.rows != m || c.cols != n || dl.rows != m || dl.cols != n)
        return "layouts do not form a GEMM (op(A) " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
               std::to_string(kb) + "x" + std::to_string(n) + ", D " + std::to_string(dl.rows) + "x" +
               std::to_string(dl.cols) + ")";
    for (const Layout* l : {&a, &b, &c, &dl})
        if (l->ld < static_cast<int64_t>(l->rows)) return "a leading dimension is smaller than its rows";
    return "";
}

// The device allocation holds the whole column-major matrix.
bool in_device(const void* p, const Layout& l) {
    const size_t bytes = (static_cast<size_t>(l.ld) * (l.cols - 1) + l.rows) * elem_size(l.type);
    const sfemu::Allocation* a = p ? sfemu::find_allocation(p, bytes) : nullptr;
    return a && a->device;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc{compute, scale});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete reinterpret_cast<Desc*>(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    Desc* desc = reinterpret_cast<Desc*>(d);
    if (!desc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr != CUBLASLT_MATMUL_DESC_TRANSA && attr != CUBLASLT_MATMUL_DESC_TRANSB)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute " + std::to_string(attr));
    if (size != sizeof(int32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "TRANSA/TRANSB take an int32");
    int32_t v = 0;
    std::memcpy(&v, buf, sizeof v);
    if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only N and T are emulated");
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = v;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!l || rows == 0 || cols == 0) return CUBLAS_STATUS_INVALID_VALUE;
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete reinterpret_cast<Layout*>(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete reinterpret_cast<Pref*>(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
    Pref* pref = reinterpret_cast<Pref*>(p);
    if (!pref || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute " + std::to_string(attr));
    if (size != sizeof(uint64_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "MAX_WORKSPACE_BYTES takes a uint64");
    std::memcpy(&pref->max_workspace, buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
    if (!h || !d || !a || !b || !c || !dl || !p || requested < 1 || !results || !found)
        return CUBLAS_STATUS_INVALID_VALUE;
    const std::string why = check_gemm(*reinterpret_cast<Desc*>(d), *reinterpret_cast<Layout*>(a),
                                       *reinterpret_cast<Layout*>(b), *reinterpret_cast<Layout*>(c),
                                       *reinterpret_cast<Layout*>(dl));
    if (!why.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, why);
    std::memset(&results[0], 0, sizeof(results[0]));  // one algorithm: config id 0, no workspace
    results[0].wavesCount = 1.0f;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t size,
                                                    size_t* written) {
    if (!algo || !written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = sizeof(int32_t);
    if (attr != CUBLASLT_ALGO_CONFIG_ID && attr != CUBLASLT_ALGO_CONFIG_TILE_ID)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "algorithm attribute " + std::to_string(attr));
    if (!buf || size < sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    const int32_t zero = 0;
    std::memcpy(buf, &zero, sizeof zero);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    (void)workspace;
    (void)workspace_bytes;
    if (!h || !desc || !alpha || !beta || !la || !lb || !lc || !ld || !algo) return CUBLAS_STATUS_INVALID_VALUE;
    const Desc d = *reinterpret_cast<Desc*>(desc);
    const Layout a = *reinterpret_cast<Layout*>(la), b = *reinterpret_cast<Layout*>(lb);
    const Layout c = *reinterpret_cast<Layout*>(lc), dl = *reinterpret_cast<Layout*>(ld);
    const std::string why = check_gemm(d, a, b, c, dl);
    if (!why.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, why);
    float al = 0, be = 0;
    std::memcpy(&al, alpha, sizeof al);
    std::memcpy(&be, beta, sizeof be);
    if (!in_device(A, a) || !in_device(B, b) || !in_device(D, dl) || (be != 0 && !in_device(C, c)))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "a matrix is not inside one device allocation");
    const uint64_t m = dl.rows, n = dl.cols, k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
    if (sfemu::launch_only()) {  // validated above, nothing computed (tests/emu/streams.h)
        const cudaError_t q = sfemu::enqueue(stream, "cublasLtMatmul", [] {});
        return q == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const cudaError_t e = sfemu::enqueue(stream, "cublasLtMatmul", [=] {
        for (uint64_t j = 0; j < n; ++j)
            for (uint64_t i = 0; i < m; ++i) {
                float acc = 0;
                for (uint64_t p = 0; p < k; ++p) {
                    const size_t ia = d.trans_a == CUBLAS_OP_N ? i + p * a.ld : p + i * a.ld;
                    const size_t ib = d.trans_b == CUBLAS_OP_N ? p + j * b.ld : j + p * b.ld;
                    acc += load(A, a.type, ia) * load(B, b.type, ib);
                }
                float v = al * acc;
                if (be != 0) v += be * load(C, c.type, i + j * c.ld);
                store(D, dl.type, i + j * dl.ld, v);
            }
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : refuse(CUBLAS_STATUS_EXECUTION_FAILED, cudaGetErrorName(e));
}

}  // extern "C"
