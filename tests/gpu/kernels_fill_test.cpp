// CUDA fill (kernels/fill.cu) vs fill_ref: exact, for lengths around the float4 body and for every
// 4-byte misalignment of the destination; neighbours of the filled range stay untouched.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/eltwise.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

TEST(KernelsFillGpu, MatchesReferenceExactly) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const size_t cap = (1u << 20) + 64;
    rt::Arena arena("fill_test", rt::MemKind::Device);
    const size_t off = arena.reserve(cap * sizeof(float), 256, "buffer");
    arena.allocate();
    arena.seal();
    float* base = arena.ptr<float>(off);

    const float sentinel = -1.5f, value = 3.0625f;
    std::vector<float> got(cap), want(cap);
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(7), size_t(8),
                     size_t(1000), size_t(1) << 20}) {
        for (size_t shift : {0, 1, 2, 3}) {
            kern::fill(ex, cap, sentinel, base);
            kern::fill(ex, n, value, base + shift);
            ctx.synchronize();  // the context's stream does not synchronise with the legacy stream
            SF_CUDA_CHECK(cudaMemcpy(got.data(), base, cap * sizeof(float), cudaMemcpyDeviceToHost));
            kern::fill_ref(cap, sentinel, want.data());
            kern::fill_ref(n, value, want.data() + shift);
            EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(got), sftest::to_double(want), 0, 0,
                                                  "n=" + std::to_string(n) + " shift=" + std::to_string(shift)));
        }
    }
}

}  // namespace
