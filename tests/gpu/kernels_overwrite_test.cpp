// The overwrite mode (accumulate = false) of every CUDA op that writes an activation gradient
// (docs/GPU_STEP.md, Memory plan): its output, written over a NaN-filled buffer, equals the same op
// accumulating into a zeroed buffer, element for element (and is finite: the op never read it).
// Ops: accumulate (copy), upsample backward, fusion backward (da, db in every combination), head
// conv backward, custom depthwise dgrad, cuDNN dgrad (the accumulate mode's plan, whichever variant
// autotuning picks, against the overwrite mode's beta = 0 plan, which zeroes nothing; equal to
// rounding, since the two plans may run different engines), and the
// refusal of a dgrad mode that was not prepared.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/eltwise_cuda.h"
#include "kernels/head_conv_cuda.h"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using kern::bf16;

using Dev = sftest::DeviceBuffer;

std::vector<float> ramp(size_t n, double scale) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37 * static_cast<double>(i) + 0.1);
    return sftest::bf16_exact(v);
}

// Runs `op(dst, accumulate)` into a zeroed and into a NaN-filled n-element bf16 buffer and
// compares: overwrite over NaN == accumulate into zero.
// exact = false (cuDNN dgrad): the two modes run different plans, which autotuning may give to
// different engines (another summation order, split-K), so the results agree to rounding, not bit
// for bit: relative L2 <= 1e-2. Finite either way: the overwrite mode never reads its NaN buffer.
void expect_overwrite(const rt::CudaContext& ctx, size_t n, const std::function<void(bf16*, bool)>& op,
                      const std::string& what, bool exact = true) {
    Dev zero(n * sizeof(bf16)), poison(n * sizeof(bf16));
    SF_CUDA_CHECK(cudaMemset(zero.p, 0, n * sizeof(bf16)));
    SF_CUDA_CHECK(cudaMemset(poison.p, 0xFF, n * sizeof(bf16)));  // 0xFFFF: a bf16 NaN
    // cudaMemset and the pageable uploads before it run on the legacy stream, which the context's
    // non-blocking stream does not wait for: without this the ops could see neither zeros nor NaN
    // nor their inputs (the emulation, which runs them as late as CUDA allows, showed it).
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    op(zero.h(), true);
    op(poison.h(), false);
    ctx.synchronize();
    const std::vector<float> a = sftest::download_bf16(zero.h(), n), b = sftest::download_bf16(poison.h(), n);
    double energy = 0;
    for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(b[i])) << what << ": element " << i << " was read before it was written";
        if (exact) {
            ASSERT_EQ(a[i], b[i]) << what << ": element " << i;
        }
        energy += std::fabs(a[i]);
    }
    EXPECT_GT(energy, 0.0) << what;
    if (!exact) {
        EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(a), sftest::to_double(b), 1e-2, what));
    }
}

TEST(KernelsOverwrite, ElementwiseUpsampleFusionAndHeadConv) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const size_t n = 4096 + 3;  // a vector body and a scalar tail
    Dev x(n * 2), a(n * 2), b(n * 2), other(n * 2), w(8), dw(8), ws(kern::fusion_backward_workspace_floats(n) * 4);
    sftest::upload_bf16(x.h(), ramp(n, 1.0));
    sftest::upload_bf16(a.h(), ramp(n, 0.5));
    sftest::upload_bf16(b.h(), ramp(n, -0.7));
    sftest::upload(w.f(), {0.3f, -0.2f});
    expect_overwrite(
        ctx, n, [&](bf16* y, bool acc) { kern::accumulate_bf16_cuda(ex, n, x.h(), y, acc); }, "accumulate");
    const size_t wsn = kern::fusion_backward_workspace_floats(n);
    for (bool other_acc : {false, true}) {
        expect_overwrite(
            ctx, n,
            [&](bf16* da, bool acc) {
                SF_CUDA_CHECK(cudaMemset(other.p, 0, n * 2));
                kern::fusion_backward_bf16_cuda(ex, n, a.h(), b.h(), w.f(), w.f() + 1, x.h(), da, other.h(), dw.f(),
                                                dw.f() + 1, ws.f(), wsn, acc, other_acc);
            },
            "fusion da");
        expect_overwrite(
            ctx, n,
            [&](bf16* db, bool acc) {
                SF_CUDA_CHECK(cudaMemset(other.p, 0, n * 2));
                kern::fusion_backward_bf16_cuda(ex, n, a.h(), b.h(), w.f(), w.f() + 1, x.h(), other.h(), db, dw.f(),
                                                dw.f() + 1, ws.f(), wsn, other_acc, acc);
            },
            "fusion db");
    }
    for (int f : {2, 4}) {
        const kern::Shape4 in{2, 8, 16, 16};  // dx (2, 8, 16, 16); dy (2, 8f, 16f, 16)
        Dev dy(in.numel() * f * f * 2);
        sftest::upload_bf16(dy.h(), ramp(in.numel() * f * f, 1.0));
        expect_overwrite(
            ctx, in.numel(),
            [&](bf16* dx, bool acc) { kern::upsample_bilinear_backward_bf16_cuda(ex, in, f, dy.h(), dx, acc); },
            "upsample x" + std::to_string(f));
    }
    const size_t rows = 1000;
    const int cin = 64, cout = 4;
    Dev hx(rows * cin * 2), hdy(rows * cout * 4), hw(cout * cin * 4), hdw(cout * cin * 4), hdb(cout * 4),
        hws(kern::head_conv_workspace_floats(rows, cin, cout) * 4);
    sftest::upload_bf16(hx.h(), ramp(rows * cin, 1.0));
    sftest::upload(hdy.f(), ramp(rows * cout, 0.1));
    sftest::upload(hw.f(), ramp(cout * cin, 0.2));
    expect_overwrite(
        ctx, rows * cin,
        [&](bf16* dx, bool acc) {
            kern::head_conv_backward_cuda(ex, rows, cin, cout, hx.h(), hdy.f(), hw.f(), dx, hdw.f(), hdb.f(), hws.f(),
                                          kern::head_conv_workspace_floats(rows, cin, cout), acc);
        },
        "head conv dx");
}

TEST(KernelsOverwrite, DepthwiseAndCudnnDgrad) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (int stride : {1, 2}) {
        const kern::ConvShape s{2, 16, 32, 64, 64, 3, stride, 1, 64, false};
        Dev dy(s.out().numel() * 2), w(s.weight_numel() * 2);
        sftest::upload_bf16(dy.h(), ramp(s.out().numel(), 1.0));
        sftest::upload_bf16(w.h(), ramp(s.weight_numel(), 0.3));
        expect_overwrite(
            ctx, s.in().numel(),
            [&](bf16* dx, bool acc) { kern::dwconv3x3_backward_data_cuda(ex, s, dy.h(), w.h(), dx, acc); },
            "depthwise dgrad stride " + std::to_string(stride));
    }
    kern::ConvPlanCache cache(ex, kern::ConvPolicy{});
    const kern::ConvShape shapes[2] = {{2, 16, 32, 32, 64, 1, 1, 0, 1, false}, {2, 16, 32, 64, 64, 3, 1, 1, 1, false}};
    for (const kern::ConvShape& s : shapes) {
        cache.prepare(s, kern::ConvOp::Dgrad, false);
        cache.prepare(s, kern::ConvOp::Dgrad, true);
        EXPECT_EQ(cache.overwrite_zeroed_bytes(s), 0u) << "no beta=0 engine for k" << s.k;
    }
    const kern::ConvShape only_acc{2, 8, 16, 32, 32, 1, 1, 0, 1, false};  // the accumulate mode alone
    cache.prepare(only_acc, kern::ConvOp::Dgrad, false);
    Dev cws(std::max<size_t>(cache.workspace_bytes(), 256));
    cache.set_workspace(cws.p, std::max<size_t>(cache.workspace_bytes(), 256));
    for (const kern::ConvShape& s : shapes) {
        Dev dy(s.out().numel() * 2), w(s.weight_numel() * 2);
        sftest::upload_bf16(dy.h(), ramp(s.out().numel(), 1.0));
        sftest::upload_bf16(w.h(), ramp(s.weight_numel(), 0.3));
        expect_overwrite(
            ctx, s.in().numel(), [&](bf16* dx, bool acc) { cache.backward_data(ex, s, dy.h(), w.h(), dx, acc); },
            "cudnn dgrad k" + std::to_string(s.k), /*exact=*/false);
    }
    Dev ady(only_acc.out().numel() * 2), aw(only_acc.weight_numel() * 2), adx(only_acc.in().numel() * 2);
    SF_EXPECT_ERROR(cache.backward_data(ex, only_acc, ady.h(), aw.h(), adx.h(), false), "overwrite mode was asked",
                    "only the accumulate mode was prepared");
}

}  // namespace
