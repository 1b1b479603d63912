// The project's tensor-core 1x1 conv in the whole CUDA network and step (kern::ConvPolicy::pw_custom, what
// `bench step --pw-custom` runs): under the deterministic policy (no timing: a custom candidate runs)
// exactly the 1x1 shapes kern::pwconv_supported accepts run it (GpuOps::impl_of), the others are
// unchanged; one micro-step's loss and gradients agree with cuDNN's convolutions to the rounding of another
// summation order; two such networks give the same bits (the kernels' partitions are fixed). The kernels
// themselves: tests/gpu/kernels_pwconv_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "kernels/pwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/train_step_cuda.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

TEST(CudaStep, PwCustomRunsThePointwiseConvsOnTheProjectKernels) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig base(cpu, true, 1, order), pw(cpu, true, 1, order, false, 1, false, 0, true),
        again(cpu, true, 1, order, false, 1, false, 0, true);

    int custom = 0;
    for (const model::ConvUse& u : pw.net.plan().convs()) {
        const bool want = kern::pwconv_supported(u.shape);
        EXPECT_EQ(pw.net.gpu_ops()->impl_of(u.shape) == model::ConvImpl::CustomPointwise, want) << u.shape.describe();
        EXPECT_NE(base.net.gpu_ops()->impl_of(u.shape), model::ConvImpl::CustomPointwise) << u.shape.describe();
        if (!want) {
            EXPECT_EQ(pw.net.gpu_ops()->impl_of(u.shape), base.net.gpu_ops()->impl_of(u.shape));
        }
        custom += want;
    }
    EXPECT_GT(custom, 0);
    std::printf("1x1 shapes on the project's kernels: %d of %zu planned convolutions\n", custom,
                pw.net.plan().convs().size());

    for (GpuRig* r : {&base, &pw, &again}) {
        r->load(b.pixels[0], b.labels[0]);
        r->step.micro_step(0);
        r->ctx.synchronize();
    }
    const model::ParamTable& t = cpu.table();
    const std::vector<float> g0 = base.fetch(base.net.plan().grad(), t.flat_size);
    const std::vector<float> g1 = pw.fetch(pw.net.plan().grad(), t.flat_size);
    const std::vector<float> g2 = again.fetch(again.net.plan().grad(), t.flat_size);
    EXPECT_EQ(0, std::memcmp(g1.data(), g2.data(), t.flat_size * sizeof(float))) << "two networks differ";
    const double l0 = base.step.read_stats().loss.total, l1 = pw.step.read_stats().loss.total;
    EXPECT_NEAR(l1, l0, 1e-3 * std::fabs(l0)) << "loss";
    // Gradients over the whole network: bf16 activations rounded in other places, the same math.
    double d = 0, r = 0, worst = 0;
    std::string worst_name;
    for (const model::ParamInfo& p : t.params) {
        double pd = 0, pr = 0;
        for (size_t i = 0; i < p.numel; ++i) {
            const double a = g1[p.offset + i], c = g0[p.offset + i];
            pd += (a - c) * (a - c);
            pr += c * c;
        }
        d += pd;
        r += pr;
        const double rel = pr > 0 ? std::sqrt(pd / pr) : std::sqrt(pd);
        if (rel > worst) worst = rel, worst_name = p.name;
    }
    const double total = std::sqrt(d / r);
    std::printf("gradient rel L2 against cuDNN's convolutions: %.3g over the network, worst %.3g (%s)\n", total,
                worst, worst_name.c_str());
    EXPECT_LE(total, 1e-2);
    EXPECT_LE(worst, 5e-2) << worst_name;
}

}  // namespace
