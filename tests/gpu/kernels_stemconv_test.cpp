// CUDA stem convolution (kernels/stemconv.cu) vs the fp32 CPU references on the same bf16-rounded
// inputs (conv_forward_ref, conv_backward_filter_ref with k 3, stride 2, pad 1, groups 1):
//   - Cin 2 and 4, Cout 8 .. 64 (1 to 8 channel groups, split wgrad channel blocks), odd H/W (1x1,
//     2x3, 9x17, 33x65, 37x70, ...) up to the model's 256x512: y within relative L2 1e-2, dw within
//     1e-3 (fp32 output; only the summation order differs); dw accumulates into non-zero initial
//     values; nothing written past y, dw or the workspace; a workspace full of NaN is harmless.
//   - small-integer inputs: y and dw bit-exact (every partial result is an integer that fp32 and, for
//     y, bf16 hold exactly).
//   - two identical runs give bitwise-identical y and dw (fixed-order wgrad).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/stemconv_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using sftest::bf16_exact;
using sftest::download;
using sftest::download_bf16;
using sftest::strip_guard;
using sftest::upload;
using sftest::upload_bf16;

constexpr size_t kGuard = 64;  // elements after y, dw and the workspace that must stay untouched
// 2^-7: exact in bf16, compared bit for bit, and small, so an accumulating write past the end of dw
// (dw += ...) changes it.
const float kSentinel = 0.0078125f;

struct Case {
    int n, h, w, cin, cout;
};

kern::ConvShape shape_of(const Case& k) {
    kern::ConvShape s;
    s.n = k.n;
    s.h = k.h;
    s.w = k.w;
    s.cin = k.cin;
    s.cout = k.cout;
    s.k = 3;
    s.stride = 2;
    s.pad = 1;
    return s;
}

std::string name_of(const Case& k) {
    return "n=" + std::to_string(k.n) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + " " +
           std::to_string(k.cin) + "->" + std::to_string(k.cout);
}

struct Inputs {
    std::vector<float> x, w, dy;  // (N,H,W,Cin), (Cout,3,3,Cin), (N,P,Q,Cout): bf16-exact
    std::vector<float> dw0;       // (Cout*9*Cin) initial dw
};

struct Outputs {
    std::vector<float> y, dw;
    bool guards_intact = true;
};

// dw0 of the order of the gradient (sqrt(pixels) for random +-1 products): a kernel that overwrote
// instead of accumulating (or dropped the sum) would be far off.
Inputs random_inputs(const kern::ConvShape& s, uint64_t seed) {
    Inputs in;
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    in.x = bf16_exact(sftest::random_uniform(nx, seed, -1, 1));
    in.w = bf16_exact(sftest::random_uniform(nw, seed + 1, -0.5, 0.5));
    in.dy = bf16_exact(sftest::random_uniform(ny, seed + 2, -1, 1));
    const double pixels = static_cast<double>(s.out().pixels());
    const std::vector<double> dw0 = sftest::random_uniform(nw, seed + 3, -1, 1);
    in.dw0.resize(nw);
    for (size_t i = 0; i < nw; ++i) in.dw0[i] = static_cast<float>(dw0[i] * 0.3 * std::sqrt(pixels));
    return in;
}

Inputs integer_inputs(const kern::ConvShape& s, uint64_t seed) {
    Inputs in;
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    auto ints = [](size_t n, uint64_t sd, int lo, int hi) {
        const std::vector<double> v = sftest::random_ints(n, sd, lo, hi);
        return std::vector<float>(v.begin(), v.end());
    };
    in.x = ints(nx, seed, -2, 2);  // |y| <= 9 * Cin * 4 = 144: integers bf16 holds
    in.w = ints(nw, seed + 1, -2, 2);
    in.dy = ints(ny, seed + 2, -2, 2);  // |dw - dw0| <= 4 * N*P*Q, far below 2^24 here
    in.dw0 = ints(nw, seed + 3, -16, 16);
    return in;
}

// Forward and wgrad on the GPU. y starts as sentinels (overwritten), dw as dw0 (accumulated), the
// workspace as NaN (scratch); each is followed by kGuard sentinels.
Outputs run_gpu(const rt::CudaContext& ctx, const kern::ConvShape& s, const Inputs& in) {
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    const size_t wsn = kern::stemconv_workspace_floats(s);
    rt::Arena arena("stemconv_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(nx * 2, 256, "x"), o_w = arena.reserve(nw * 2, 256, "w");
    const size_t o_dy = arena.reserve(ny * 2, 256, "dy"), o_y = arena.reserve((ny + kGuard) * 2, 256, "y");
    const size_t o_dw = arena.reserve((nw + kGuard) * 4, 256, "dw");
    const size_t o_ws = arena.reserve((wsn + kGuard) * 4, 256, "workspace");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* w = arena.ptr<kern::bf16>(o_w);
    kern::bf16* dy = arena.ptr<kern::bf16>(o_dy);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    float* dw = arena.ptr<float>(o_dw);
    float* ws = arena.ptr<float>(o_ws);
    upload_bf16(x, in.x);
    upload_bf16(w, in.w);
    upload_bf16(dy, in.dy);
    upload_bf16(y, std::vector<float>(ny + kGuard, kSentinel));
    std::vector<float> dw0 = in.dw0;
    dw0.resize(nw + kGuard, kSentinel);
    upload(dw, dw0);
    std::vector<float> ws0(wsn, std::nanf(""));
    ws0.resize(wsn + kGuard, kSentinel);
    upload(ws, ws0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight; ctx's stream is separate

    const rt::Exec& ex = ctx.exec();
    kern::stemconv_forward_cuda(ex, s, x, w, y);
    kern::stemconv_backward_filter_cuda(ex, s, x, dy, dw, ws, wsn);
    ctx.synchronize();

    Outputs out;
    out.y = strip_guard(download_bf16(y, ny + kGuard), ny, kSentinel, out.guards_intact);
    out.dw = strip_guard(download(dw, nw + kGuard), nw, kSentinel, out.guards_intact);
    strip_guard(download(ws, wsn + kGuard), wsn, kSentinel, out.guards_intact);
    return out;
}

// The same computation with the fp32 CPU references.
Outputs run_ref(const kern::ConvShape& s, const Inputs& in) {
    Outputs r;
    r.y.resize(s.out().numel());
    kern::conv_forward_ref<float>(s, in.x.data(), in.w.data(), nullptr, r.y.data());
    r.dw = in.dw0;
    kern::conv_backward_filter_ref<float>(s, in.x.data(), in.dy.data(), r.dw.data(), nullptr);
    return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(KernelsStemconvGpu, MatchesReferences) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {
        {2, 33, 65, 2, 32}, {2, 33, 65, 4, 32},  {1, 1, 1, 2, 8},      {1, 1, 1, 4, 64},     {2, 2, 3, 2, 16},
        {3, 9, 17, 4, 24},  {2, 64, 128, 2, 32}, {1, 37, 70, 4, 64},   {2, 16, 130, 2, 40},  {1, 20, 9, 4, 56},
        {3, 8, 64, 2, 48},  {2, 5, 200, 4, 8},   {2, 160, 320, 2, 32}, {1, 256, 512, 2, 32}, {1, 256, 512, 4, 32},
    };
    uint64_t seed = 500;
    for (const Case& k : cases) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k);
        const Inputs in = random_inputs(s, seed += 10);
        const Outputs got = run_gpu(ctx, s, in);
        const Outputs ref = run_ref(s, in);
        using sftest::close_rel_l2, sftest::to_double;
        EXPECT_TRUE(got.guards_intact) << what << ": wrote past y, dw or the workspace";
        EXPECT_TRUE(close_rel_l2(to_double(got.y), to_double(ref.y), 1e-2, what + " y"));
        EXPECT_TRUE(close_rel_l2(to_double(got.dw), to_double(ref.dw), 1e-3, what + " dw"));
    }
}

TEST(KernelsStemconvGpu, ExactOnSmallIntegers) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {
        {2, 33, 65, 2, 32}, {2, 33, 65, 4, 64}, {3, 18, 40, 2, 40}, {1, 64, 128, 4, 32}, {1, 3, 5, 2, 8}};
    uint64_t seed = 900;
    for (const Case& k : cases) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k) + " (integers)";
        const Inputs in = integer_inputs(s, seed += 10);
        const Outputs got = run_gpu(ctx, s, in);
        const Outputs ref = run_ref(s, in);
        using sftest::close_elementwise, sftest::to_double;
        EXPECT_TRUE(got.guards_intact) << what << ": wrote past y, dw or the workspace";
        EXPECT_TRUE(close_elementwise(to_double(got.y), to_double(ref.y), 0, 0, what + " y"));
        EXPECT_TRUE(close_elementwise(to_double(got.dw), to_double(ref.dw), 0, 0, what + " dw"));
    }
}

TEST(KernelsStemconvGpu, Deterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const Case& k : {Case{8, 256, 512, 2, 32}, Case{4, 64, 128, 4, 64}, Case{3, 33, 65, 2, 40}}) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k);
        const Inputs in = random_inputs(s, 1000 + k.cout);
        const Outputs a = run_gpu(ctx, s, in), b = run_gpu(ctx, s, in);
        EXPECT_TRUE(a.guards_intact && b.guards_intact) << what;
        EXPECT_TRUE(bitwise_equal(a.y, b.y)) << what << " y";
        EXPECT_TRUE(bitwise_equal(a.dw, b.dw)) << what << " dw";
    }
}

}  // namespace
