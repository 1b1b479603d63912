// The tensor-core pointwise conv's backward-filter (kernels/pwconv_cuda.h, kernels/pwconv_wgrad.cu):
// dw += dy^T x exact on small integers (one chunk per step, and chunks of several steps), within fp32
// accumulation of the fp64 reference otherwise and deterministic; with the producer's prologue on x and/or
// the BN-backward prologue on dy bitwise the plain wgrad of the stored tensors; its refusals. The forward
// and the dgrad: tests/gpu/kernels_pwconv_test.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"
#include "tests/gpu/pwconv_test_util.h"

namespace {

using namespace pwtest;

// dw[o][i] = dw0 + sum_r dy[r][o] x[r][i] in fp64.
std::vector<double> wgrad_reference(const Case& k, const std::vector<float>& x, const std::vector<float>& dy, double dw0) {
    const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
    std::vector<double> dw(co * ci, dw0);
    for (size_t r = 0; r < rows; ++r)
        for (size_t o = 0; o < co; ++o) {
            const double d = dy[r * co + o];
            if (d == 0) continue;
            for (size_t i = 0; i < ci; ++i) dw[o * ci + i] += d * x[r * ci + i];
        }
    return dw;
}

// Buffers of one wgrad case: x, its stored activation (rows, cin); dy, the BN input and the stored conv-output
// gradient (rows, cout); two dw; the BN vectors of both sides; a workspace for the wgrad and bn_act.
struct WgradRig {
    Case k;
    rt::Arena arena{"pwconv_wgrad_test", rt::MemKind::Device};
    size_t o_x, o_xact, o_dy, o_xbn, o_dyx, o_dw, o_dw2, o_vx, o_vd, o_ws;
    size_t wsn;
    explicit WgradRig(const Case& kc) : k(kc) {
        const size_t rows = rows_of(k);
        const kern::ConvShape s = shape_of(k);
        wsn = std::max({kern::pwconv_wgrad_workspace_floats(s), kern::bn_act_workspace_floats(std::max<size_t>(rows, 2), k.cin),
                        kern::bn_act_workspace_floats(std::max<size_t>(rows, 2), k.cout)});
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        o_x = bf(rows * k.cin, "x");
        o_xact = bf(rows * k.cin, "x act");
        o_dy = bf(rows * k.cout, "dy");
        o_xbn = bf(rows * k.cout, "x_bn");
        o_dyx = bf(rows * k.cout, "dy of the conv output");
        o_dw = arena.reserve(static_cast<size_t>(k.cout) * k.cin * 4, 256, "dw");
        o_dw2 = arena.reserve(static_cast<size_t>(k.cout) * k.cin * 4, 256, "dw2");
        o_vx = arena.reserve(8 * static_cast<size_t>(k.cin) * 4, 256, "x-side vectors");
        o_vd = arena.reserve(8 * static_cast<size_t>(k.cout) * 4, 256, "dy-side vectors");
        o_ws = arena.reserve(wsn * 4, 256, "workspace");
        arena.allocate();
        arena.seal();
    }
    kern::bf16* B(size_t o) { return arena.ptr<kern::bf16>(o); }
    float* F(size_t o) { return arena.ptr<float>(o); }
    float* VX(int i) { return F(o_vx) + static_cast<size_t>(i) * k.cin; }
    float* VD(int i) { return F(o_vd) + static_cast<size_t>(i) * k.cout; }
    size_t nw() const { return static_cast<size_t>(k.cout) * k.cin; }
};

// Wgrad shapes: kCases, and rows > 32 * kPwMaxChunks at 32 x 32 (chunks of two steps).
std::vector<Case> wgrad_cases() {
    std::vector<Case> c(std::begin(kCases), std::end(kCases));
    c.push_back({2, 130, 130, 32, 32});  // 33,800 rows: 1,057 steps in 1,024 chunks
    return c;
}

TEST(KernelsPwconvGpu, WgradSmallIntegersAreExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9800;
    for (const Case& k : wgrad_cases()) {
        const std::string what = name_of(k);
        const kern::PwWgradPlan p = kern::pwconv_wgrad_plan(shape_of(k));
        const size_t rows = rows_of(k);
        // |dy|, |x| <= 2: every partial sum an integer below 4 * rows < 2^24, exact in fp32 and fp64.
        const std::vector<float> x = bf16_exact(sftest::random_ints(rows * k.cin, seed++, -2, 2));
        const std::vector<float> dy = bf16_exact(sftest::random_ints(rows * k.cout, seed++, -2, 2));
        WgradRig rig(k);
        upload_bf16(rig.B(rig.o_x), x);
        upload_bf16(rig.B(rig.o_dy), dy);
        upload(rig.F(rig.o_dw), std::vector<float>(rig.nw(), 0.25f));  // accumulated into
        kern::pwconv_backward_filter_cuda(ctx.exec(), shape_of(k), rig.B(rig.o_x), rig.B(rig.o_dy), rig.F(rig.o_dw),
                                          rig.F(rig.o_ws), rig.wsn);
        ctx.synchronize();
        const std::vector<double> ref = wgrad_reference(k, x, dy, 0.25);
        EXPECT_TRUE(bitwise(download(rig.F(rig.o_dw), rig.nw()), std::vector<float>(ref.begin(), ref.end()),
                            what + " (" + std::to_string(p.chunks) + " chunks of " + std::to_string(p.steps) + " steps)"));
    }
}

TEST(KernelsPwconvGpu, WgradMatchesTheFp64ReferenceAndIsDeterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9900;
    for (const Case& k : wgrad_cases()) {
        const std::string what = name_of(k);
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
        const std::vector<float> x = bf16_exact(sftest::random_uniform(rows * ci, seed++, -1, 1));
        const std::vector<float> dy = bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1));
        WgradRig rig(k);
        upload_bf16(rig.B(rig.o_x), x);
        upload_bf16(rig.B(rig.o_dy), dy);
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {
            upload(rig.F(rig.o_dw), std::vector<float>(rig.nw(), 0.0f));
            kern::pwconv_backward_filter_cuda(ctx.exec(), shape_of(k), rig.B(rig.o_x), rig.B(rig.o_dy),
                                              rig.F(rig.o_dw), rig.F(rig.o_ws), rig.wsn);
            ctx.synchronize();
            const std::vector<float> dw = download(rig.F(rig.o_dw), rig.nw());
            if (run == 1) {
                EXPECT_TRUE(bitwise(dw, first, what + " second run"));
                break;
            }
            first = dw;
            const std::vector<double> ref = wgrad_reference(k, x, dy, 0.0);
            // fp32 sums of up to 32 products per mma step and per chunk (a few hundred rows), fp64 beyond: a
            // few fp32 ulps of the sum of |products|.
            std::vector<double> mag(co * ci, 0.0);
            for (size_t r = 0; r < rows; ++r)
                for (size_t o = 0; o < co; ++o)
                    for (size_t i = 0; i < ci; ++i) mag[o * ci + i] += std::fabs(dy[r * co + o] * x[r * ci + i]);
            size_t bad = 0, at = 0;
            for (size_t e = 0; e < dw.size(); ++e)
                if (!(std::fabs(dw[e] - ref[e]) <= 2e-6 * mag[e] + 1e-30) && bad++ == 0) at = e;
            EXPECT_EQ(bad, 0u) << what << ": first at " << at << ": " << dw[at] << " vs " << ref[at];
        }
    }
}

// A = the stored activation (bn_act_forward_train) and the stored conv-output gradient (bn_act_backward), the
// plain wgrad; B = the prologues (x through the producer's BN, dy through the consumer's BN backward).
TEST(KernelsPwconvGpu, WgradProloguesEqualTheStoredTensorsBitForBit) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 10000;
    for (const Case& k : kCases) {
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
        if (rows < 2) continue;
        for (Act act : {Act::Silu, Act::Relu, Act::None}) {
            WgradRig rig(k);
            float* ws = rig.F(rig.o_ws);
            std::vector<double> x = sftest::random_uniform(rows * ci, seed++, -1, 1);
            for (size_t i = 0; i < x.size(); ++i) x[i] += (i % ci) % 5 - 2.0;  // channel offsets
            upload_bf16(rig.B(rig.o_x), bf16_exact(x));
            upload_bf16(rig.B(rig.o_xbn), bf16_exact(sftest::random_uniform(rows * co, seed++, -2, 2)));
            upload_bf16(rig.B(rig.o_dy), bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1)));
            for (float* v : {rig.VX(0), rig.VD(0)})  // gamma
                upload(v, to_floats(sftest::random_uniform(v == rig.VX(0) ? ci : co, seed++, 0.5, 1.5)));
            for (float* v : {rig.VX(1), rig.VD(1)})  // beta
                upload(v, to_floats(sftest::random_uniform(v == rig.VX(1) ? ci : co, seed++, -0.8, 0.8)));
            upload(rig.VX(4), std::vector<float>(ci, 0.0f));
            upload(rig.VX(5), std::vector<float>(ci, 1.0f));
            upload(rig.VD(4), std::vector<float>(co, 0.0f));
            upload(rig.VD(5), std::vector<float>(co, 1.0f));
            upload(rig.VD(6), std::vector<float>(co, 0.0f));
            upload(rig.VD(7), std::vector<float>(co, 0.0f));
            // x side: train statistics and the stored activation.
            kern::bn_act_forward_train(ex, act, rows, k.cin, rig.B(rig.o_x), rig.VX(0), rig.VX(1), rig.B(rig.o_xact),
                                       rig.VX(2), rig.VX(3), rig.VX(4), rig.VX(5), 0.1, 1e-5, ws, rig.wsn);
            // dy side: statistics of x_bn, the stored gradient, then the coefficients alone (left in ws).
            kern::bn_stats_train(ex, rows, k.cout, rig.B(rig.o_xbn), rig.VD(2), rig.VD(3), rig.VD(4), rig.VD(5), 0.1,
                                 1e-5, ws, rig.wsn);
            kern::bn_act_backward(ex, act, rows, k.cout, rig.B(rig.o_xbn), rig.B(rig.o_dy), rig.VD(0), rig.VD(1),
                                  rig.VD(2), rig.VD(3), rig.B(rig.o_dyx), rig.VD(6), rig.VD(7), ws, rig.wsn);
            // The wgrad's workspace is the same buffer: keep the coefficients apart in a vector of their own.
            kern::bn_act_backward_stats(ex, act, rows, k.cout, rig.B(rig.o_xbn), rig.B(rig.o_dy), rig.VD(0), rig.VD(1),
                                        rig.VD(2), rig.VD(3), rig.VD(6), rig.VD(7), ws, rig.wsn);
            ctx.synchronize();  // the copy below runs outside the context's stream
            SF_CUDA_CHECK(cudaMemcpy(rig.VD(6), ws + kern::bn_act_backward_coef_offset(rows, k.cout),
                                     2 * co * sizeof(float), cudaMemcpyDeviceToDevice));  // VD(6), VD(7): coef
            kern::DwPrologue pro;
            pro.act = act;
            pro.gamma = rig.VX(0);
            pro.beta = rig.VX(1);
            pro.mean = rig.VX(2);
            pro.invstd = rig.VX(3);
            kern::DwBnBackward bnb;
            bnb.act = act;
            bnb.x = rig.B(rig.o_xbn);
            bnb.gamma = rig.VD(0);
            bnb.beta = rig.VD(1);
            bnb.mean = rig.VD(2);
            bnb.invstd = rig.VD(3);
            bnb.coef = rig.VD(6);
            for (int mode = 1; mode < 4; ++mode) {  // 1: prologue on x, 2: on dy, 3: both
                const bool px = mode & 1, pd = mode & 2;
                const std::string what = name_of(k) + " " + kern::act_name(act) + (px ? " x-prologue" : "") +
                                         (pd ? " dy-prologue" : "");
                upload(rig.F(rig.o_dw), std::vector<float>(rig.nw(), 0.5f));
                upload(rig.F(rig.o_dw2), std::vector<float>(rig.nw(), 0.5f));
                kern::pwconv_backward_filter_cuda(ex, shape_of(k), rig.B(px ? rig.o_xact : rig.o_x),
                                                  rig.B(pd ? rig.o_dyx : rig.o_dy), rig.F(rig.o_dw), ws, rig.wsn);
                kern::pwconv_backward_filter_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_dy), rig.F(rig.o_dw2), ws,
                                                  rig.wsn, px ? &pro : nullptr, pd ? &bnb : nullptr);
                ctx.synchronize();
                EXPECT_TRUE(bitwise(download(rig.F(rig.o_dw2), rig.nw()), download(rig.F(rig.o_dw), rig.nw()), what));
            }
        }
    }
}

TEST(KernelsPwconvGpu, WgradBadInputsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const Case k{1, 8, 8, 64, 64};
    const kern::ConvShape s = shape_of(k);
    WgradRig rig(k);
    const kern::bf16* x = rig.B(rig.o_x);
    const kern::bf16* dy = rig.B(rig.o_dy);
    float* dw = rig.F(rig.o_dw);
    float* ws = rig.F(rig.o_ws);
    const size_t need = kern::pwconv_wgrad_workspace_floats(s);
    const char* op = "pwconv_backward_filter_cuda";
    const std::string need_text = "need " + std::to_string(need);
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, ws, need - 1), op, need_text.c_str());
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, nullptr, need), "workspace must be a non-null");
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, s, x, dy, ws, ws, need), "dw must not alias x, dy or the workspace");
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, reinterpret_cast<float*>(rig.B(rig.o_x)), need),
                    "the workspace must not alias x or dy");
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(rt::Exec::cpu(), s, x, dy, dw, ws, need), op, "called with a");
    kern::ConvShape bad = s;
    bad.cin = 16;
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, bad, x, dy, dw, ws, need), "pwconv: unsupported shape", "cin=16");
    kern::DwPrologue pro;
    pro.act = Act::Silu;
    pro.gamma = rig.VX(0);
    pro.beta = rig.VX(1);
    pro.mean = rig.VX(2);
    pro.invstd = dw;
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, ws, need, &pro), "must not alias the prologue invstd");
    kern::DwBnBackward bnb;
    bnb.act = Act::Relu;
    bnb.x = rig.B(rig.o_xbn);
    bnb.gamma = rig.VD(0);
    bnb.beta = rig.VD(1);
    bnb.mean = rig.VD(2);
    bnb.invstd = rig.VD(3);
    bnb.coef = ws;
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(ex, s, x, dy, dw, ws, need, nullptr, &bnb),
                    "dw and the workspace must not overlap the BN coef");
}

}  // namespace
