// `slidefuse bench ceilings` on a GPU (tools/bench_ceilings.h): the copy and GEMM figures are
// positive and below their datasheet peaks (a figure above the peak means the timing is wrong), and
// the GEMM that sets the tensor-core ceiling computes D = A * B (against a double reference of the
// same bf16 inputs, rel L2 1e-2). Under the CPU emulation (tests/emu/cublaslt.cpp) at a small n.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "runtime/cuda_check.h"
#include "runtime/device_info.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"
#include "tools/bench_ceilings.h"

namespace {

TEST(BenchCeilingsGpu, FiguresArePositiveAndBelowTheDatasheet) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::DeviceInfo d = rt::query_device_info(0);
    tools::CeilingOptions o;
    o.copy_bytes = size_t(64) << 20;
#ifdef SF_EMU
    o.gemm_n = 128;  // the emulated GEMM is a triple loop
#else
    o.gemm_n = 1024;
#endif
    o.warmup = 1;
    o.iters = 3;
    const tools::Ceilings c = tools::measure_ceilings(ctx.exec(), d.name, o);
    const tools::DevicePeaks p = tools::peaks_for_device(d.name);
    std::printf("%s", tools::ceilings_text(tools::ceilings_json(c, p)).c_str());
    EXPECT_GT(c.copy_gbps, 0.0);
    if (p.known()) {
        EXPECT_LT(c.copy_gbps, 1.1 * p.hbm_gbps) << "copy above the datasheet bandwidth";
    }
    ASSERT_TRUE(c.gemm_error.empty()) << c.gemm_error;
    EXPECT_GT(c.gemm_tflops, 0.0);
    if (p.known()) {
        EXPECT_LT(c.gemm_tflops, 1.1 * p.tensor_tflops) << "GEMM above the datasheet tensor peak";
    }
}

TEST(BenchCeilingsGpu, GemmComputesTheProduct) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const int n = 64;
    std::vector<float> a(n * n), b(n * n);
    for (int i = 0; i < n * n; ++i) {
        a[i] = kern::round_bf16(std::sin(0.37f * i));
        b[i] = kern::round_bf16(std::cos(0.11f * i));
    }
    kern::bf16 *da = nullptr, *db = nullptr, *dd = nullptr;
    const size_t bytes = sizeof(kern::bf16) * n * n;
    SF_CUDA_CHECK(cudaMalloc(&da, bytes));
    SF_CUDA_CHECK(cudaMalloc(&db, bytes));
    SF_CUDA_CHECK(cudaMalloc(&dd, bytes));
    sftest::upload_bf16(da, a);
    sftest::upload_bf16(db, b);
    std::string algo;
    const double ms = tools::gemm_bf16_ms(ctx.exec(), n, da, db, dd, 0, 1, &algo);
    ctx.synchronize();
    const std::vector<float> got = sftest::download_bf16(dd, static_cast<size_t>(n) * n);
    SF_CUDA_CHECK(cudaFree(da));
    SF_CUDA_CHECK(cudaFree(db));
    SF_CUDA_CHECK(cudaFree(dd));
    EXPECT_GT(ms, 0.0);
    EXPECT_NE(algo.find("cuBLASLt"), std::string::npos);
    std::vector<double> ref(n * n, 0.0);
    for (int j = 0; j < n; ++j)  // column-major: D(i, j) = sum_k A(i, k) B(k, j)
        for (int k = 0; k < n; ++k)
            for (int i = 0; i < n; ++i) ref[i + j * n] += static_cast<double>(a[i + k * n]) * b[k + j * n];
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(got), ref, 1e-2, "GEMM D"));
}

}  // namespace
