// CPU-side checks of the CUDA optimizer launchers (kernels/adamw_cuda.h): grid and workspace
// arithmetic, the fp32 coefficients the kernel receives, the layout of the device step state, and the
// launchers' precondition errors (raised before anything is enqueued, so no device is needed).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/adamw_cuda.h"
#include "tests/support/compare.h"

namespace {

// What a CUDA Exec looks like to the precondition checks; every call below must throw before it
// would reach a launch.
rt::Exec fake_cuda_exec() {
    rt::Exec ex;
    ex.backend = rt::Backend::Cuda;
    ex.device = 0;
    return ex;
}

TEST(KernelsAdamWLaunch, GridArithmetic) {
    const size_t T = kern::kOptimThreads;
    // n, expected blocks of the grad-norm launch
    struct Case {
        size_t n, grid;
    };
    const std::vector<Case> cases = {
        {0, 1},
        {1, 1},
        {3, 1},
        {4, 1},
        {5, 1},
        {1000, 1},
        {4 * T, 1},
        {4 * T + 3, 1},
        {4 * T + 4, 2},
        {3284270, 1024},  // 821067 float4 groups -> 3208 blocks, capped
        {4 * T * 1024, 1024},
        {4 * T * 1023 + 1, 1023},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE("n=" + std::to_string(c.n));
        EXPECT_EQ(kern::grad_norm_grid(c.n), c.grid);
        EXPECT_EQ(kern::grad_norm_partials(c.n), c.grid + 1);  // one partial per block + the counter slot
        // Coverage: the float4 groups are reachable by the grid-stride loop and the tail (< 4 elements)
        // by global threads 0..2, which always exist.
        EXPECT_GE(kern::grad_norm_grid(c.n) * T, size_t(1));
        EXPECT_LT(c.n % 4, kern::grad_norm_grid(c.n) * T);
    }
    EXPECT_EQ(kern::adamw_grid(0), 1u);  // the step is counted even for an empty range
    EXPECT_EQ(kern::adamw_grid(3), 1u);
    EXPECT_EQ(kern::adamw_grid(1000), 1u);
    EXPECT_EQ(kern::adamw_grid(3284270), 3208u);  // ceil(821067 / 256): one float4 per thread
    EXPECT_EQ(kern::adamw_grid(size_t(1) << 40), kern::kAdamWMaxBlocks);
    // The grad-norm grid depends on n only and stays within the cap for any n.
    EXPECT_EQ(kern::grad_norm_grid(size_t(1) << 40), kern::kGradNormMaxBlocks);
    // The workspace is a handful of KiB at most.
    EXPECT_LE(kern::grad_norm_partials(size_t(1) << 40) * sizeof(double), size_t(8200));
}

TEST(KernelsAdamWLaunch, CoefficientsRoundedFromDouble) {
    kern::AdamWHyper h;
    h.beta1 = 0.9;
    h.beta2 = 0.999;
    h.eps = 1e-8;
    h.weight_decay = 0.05;
    const kern::AdamWCoeffs k = kern::adamw_coeffs(kern::adamw_consts(h));
    EXPECT_EQ(k.one_minus_beta1, static_cast<float>(0.1));
    EXPECT_EQ(k.one_minus_beta2, static_cast<float>(0.001));
    EXPECT_NE(k.one_minus_beta2, 1.0f - 0.999f);  // the fp32 subtraction would be 1.3e-5 off
    EXPECT_EQ(k.beta2, 0.999f);
    EXPECT_EQ(k.eps, 1e-8f);
    EXPECT_EQ(k.weight_decay, 0.05f);
}

TEST(KernelsAdamWLaunch, StateLayout) {
    // Copied to and from the device with cudaMemcpy and read field by field by the kernels.
    static_assert(std::is_standard_layout<kern::DeviceStepState>::value, "DeviceStepState: standard layout");
    static_assert(std::is_trivially_copyable<kern::DeviceStepState>::value, "DeviceStepState: memcpy-able");
    static_assert(std::is_trivially_copyable<kern::AdamWCoeffs>::value, "AdamWCoeffs: a kernel argument");
    static_assert(std::is_same<decltype(kern::DeviceStepState::step), int64_t>::value, "step is int64");
    static_assert(std::is_same<decltype(kern::DeviceStepState::nonfinite), int32_t>::value, "flag is int32");
    static_assert(alignof(kern::DeviceStepState) == 8, "DeviceStepState: 8-byte aligned (int64 step)");
    static_assert(sizeof(kern::AdamWCoeffs) == 5 * sizeof(float), "AdamWCoeffs: five floats, no padding");
    // The layout documented in docs/OPTIMIZER.md; a change here must be reflected there.
    EXPECT_EQ(offsetof(kern::DeviceStepState, step), 0u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, lr), 8u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, max_grad_norm), 12u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, grad_norm), 16u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, clip_scale), 20u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, step_size), 24u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, bc2_sqrt), 28u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, nonfinite), 32u);
    EXPECT_EQ(offsetof(kern::DeviceStepState, skipped), 36u);
    EXPECT_EQ(sizeof(kern::DeviceStepState), 40u);
    const kern::DeviceStepState s;
    EXPECT_EQ(s.step, 0);
    EXPECT_EQ(s.nonfinite, 0);
    EXPECT_EQ(s.skipped, 0);
    EXPECT_EQ(s.clip_scale, 1.0f);
}

TEST(KernelsAdamWLaunch, PreconditionsRejected) {
    // 16-byte aligned host storage; offsets of one float make it misaligned. Never dereferenced.
    alignas(64) static float buf[4][64];
    alignas(64) static double ws[8];
    alignas(64) static kern::bf16 wk[64];
    alignas(8) static kern::DeviceStepState st;
    alignas(4) static int32_t epoch[2];
    const rt::Exec cpu = rt::Exec::cpu(), ex = fake_cuda_exec();
    const kern::AdamWConsts c;
    float *p = buf[0], *g = buf[1], *m = buf[2], *v = buf[3];

    SF_EXPECT_ERROR(kern::grad_norm_cuda(cpu, 8, g, ws, c, &st), "grad_norm_cuda", "cpu Exec");
    SF_EXPECT_ERROR(kern::adamw_cuda(cpu, 8, p, wk, g, m, v, c, &st), "adamw_cuda", "cpu Exec");
    SF_EXPECT_ERROR(kern::schedule_sgdr_cuda(cpu, &st, 1e-3, 0, 1, 1, epoch), "schedule_sgdr_cuda", "cpu Exec");

    SF_EXPECT_ERROR(kern::grad_norm_cuda(ex, 8, g + 1, ws, c, &st), "grad", "16-byte aligned");
    SF_EXPECT_ERROR(kern::grad_norm_cuda(ex, 8, nullptr, ws, c, &st), "grad", "non-null");
    SF_EXPECT_ERROR(kern::grad_norm_cuda(ex, 8, g, nullptr, c, &st), "partials");
    SF_EXPECT_ERROR(kern::grad_norm_cuda(ex, 8, g, ws, c, nullptr), "state");
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p + 1, wk, g, m, v, c, &st), "master", "16-byte aligned");
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk, g + 2, m, v, c, &st), "grad", "16-byte aligned");
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk, g, m + 3, v, c, &st), "m must");
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk, g, m, v + 1, c, &st), "v must");
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk + 1, g, m, v, c, &st), "working", "8-byte aligned");
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk, g, m, v, c, nullptr), "state");

    kern::AdamWConsts bad = c;
    bad.beta2 = 1.0;
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk, g, m, v, bad, &st), "betas");
    SF_EXPECT_ERROR(kern::grad_norm_cuda(ex, 8, g, ws, bad, &st), "betas");
    bad = c;
    bad.eps = 0;
    SF_EXPECT_ERROR(kern::adamw_cuda(ex, 8, p, wk, g, m, v, bad, &st), "eps > 0");

    SF_EXPECT_ERROR(kern::schedule_sgdr_cuda(ex, &st, 1e-3, 0, 0, 1, epoch), "T_0 >= 1");
    SF_EXPECT_ERROR(kern::schedule_sgdr_cuda(ex, &st, 1e-3, 0, 1, 0, epoch), "T_mult >= 1");
    SF_EXPECT_ERROR(kern::schedule_sgdr_cuda(ex, &st, 1e-3, 0, 1, 1, nullptr), "epoch_device");
}

}  // namespace
