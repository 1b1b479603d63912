// Device-side runtime: context creation, device and pinned arenas (zero-filled, aligned,
// sealed), and error reporting of a failing CUDA call. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

TEST(DeviceRuntime, ContextCreatesStreamAndHandles) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx(0);
    EXPECT_TRUE(ctx.exec().is_cuda());
    EXPECT_NE(ctx.exec().stream, nullptr);
    EXPECT_NE(ctx.exec().cudnn, nullptr);
    EXPECT_NE(ctx.exec().cublaslt, nullptr);
    ctx.synchronize();
}

TEST(DeviceRuntime, DeviceArenaIsZeroedAlignedAndSealed) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx(0);
    rt::Arena a("device test", rt::MemKind::Device);
    const size_t off = a.reserve(1000 * sizeof(float), 256, "values");
    a.allocate();
    a.seal();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.base()) % 256, 0u);
    std::vector<float> host(1000, -1.0f);
    SF_CUDA_CHECK(cudaMemcpy(host.data(), a.ptr<float>(off), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (float v : host) ASSERT_EQ(v, 0.0f);
    EXPECT_THROW(a.reserve(4, 4, "late"), rt::Error);
}

TEST(DeviceRuntime, PinnedArenaRoundTrip) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx(0);
    rt::Arena pinned("pinned test", rt::MemKind::Pinned), dev("dev test", rt::MemKind::Device);
    const size_t n = 4096;
    pinned.reserve(n, 256, "bytes");
    dev.reserve(n, 256, "bytes");
    pinned.allocate();
    dev.allocate();
    uint8_t* h = pinned.ptr<uint8_t>(0);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint8_t>(i * 7);
    SF_CUDA_CHECK(cudaMemcpyAsync(dev.base(), h, n, cudaMemcpyHostToDevice, ctx.exec().stream));
    std::vector<uint8_t> back(n);
    SF_CUDA_CHECK(cudaMemcpyAsync(back.data(), dev.base(), n, cudaMemcpyDeviceToHost, ctx.exec().stream));
    ctx.synchronize();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<uint8_t>(i * 7));
}

TEST(DeviceRuntime, FailingCallThrowsWithItsName) {
    SF_REQUIRE_GPU();
    void* p = nullptr;
    try {
        SF_CUDA_CHECK(cudaMalloc(&p, ~size_t(0)));  // impossible size
        FAIL() << "expected an error";
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
    }
    cudaGetLastError();
}

}  // namespace
