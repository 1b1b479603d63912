// `slidefuse check` on a GPU (tools/check.h): one eager CUDA micro-step against the CPU reference
// at 64x128, batch 4, every layer captured on both sides, compared isolated (the reference fed the
// CUDA step's layer inputs and output gradients, docs/CHECK.md) and within the default tolerances
// (DESIGN §2: cosine 0.999, relative L2 5e-2, or within 3x of the bf16-weights floor where that
// floor is beyond them). The per-layer twin of
// CudaStep.OneMicroStepMatchesTheCpuReference: its table (printed) names the first layer beyond.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/net.h"
#include "tests/support/compare.h"
#include "tools/check.h"
#include "tools/layer_check.h"

namespace {

TEST(CudaCheck, EveryLayerWithinToleranceAtSmallSize) {
    SF_REQUIRE_GPU();
    // Deterministic engines, no autotuning: the plans build in seconds.
    const tools::CheckOptions o =
        tools::parse_check_args({"--batch", "4", "--height", "64", "--width", "128", "--deterministic"});
    const tools::CheckSetup s = tools::make_setup(o);
    model::SiderNet ref(s.shape, rt::MemKind::Host);
    const tools::NetState init = tools::init_state(ref.table(), s.seed);
    tools::load_state(ref, init);
    const tools::StepCapture got = tools::cuda_step(s, ref.table(), init);
    const tools::StepCapture want = tools::reference_step(s, ref, &got);

    const size_t n = ref.plan().layers().size();
    EXPECT_EQ(got.forward_order.size(), n);  // every layer's scopes seen once on CUDA too
    EXPECT_EQ(got.backward_order.size(), n);
    EXPECT_EQ(got.forward_order, want.forward_order);
    EXPECT_EQ(got.backward_order, want.backward_order);
    // Where rounding the weights alone already passes the fixed tolerance (a gradient summed from
    // several consumers with cancellation), the CUDA value may be within 3x that floor instead.
    const tools::StepCapture floor = tools::bf16_floor_step(s, init, &got);
    const tools::CheckReport r = tools::build_report(want, got, ref.table(), o.tol, &floor, o.floor_factor);
    std::printf("%s", tools::format_report(r).c_str());
    EXPECT_TRUE(r.passed()) << tools::verdict(r);
}

}  // namespace
