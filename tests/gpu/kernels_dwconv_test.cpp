// CUDA depthwise 3x3 convolution (kernels/dwconv.cu) vs the fp32 CPU references on the same
// bf16-rounded inputs (conv_forward_ref, conv_backward_data_ref, conv_backward_filter_ref with
// groups = C):
//   - stride 1 and 2, odd H/W (7x9, 15x33, 1x1, ...), C from 8 to 512 (odd group counts too):
//     y and dx within relative L2 1e-2, dw within 1e-3 (fp32 output; only the summation order
//     differs); dx and dw accumulate into non-zero initial values; nothing written past y, dx, dw.
//   - small-integer inputs: y, dx, dw bit-exact (every partial result is an integer that fp32 and,
//     for y and dx, bf16 hold exactly).
//   - two identical runs give bitwise-identical y, dx and dw (gather dgrad, fixed-order wgrad).
//   - every gather variant (kDwVariants: 8/4/2 channels per thread, 2x4 .. 4x4 tiles) gives y and dx
//     bitwise equal to variant 0's, in both dgrad modes (accumulate, overwrite); overwrite vs the
//     reference with dx0 = 0; every wgrad variant (kDwWgradVariants: 8/4/2 channels per thread, loads
//     per pixel, hoisted or prefetched) gives dw bitwise equal to variant 0's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
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

constexpr size_t kGuard = 64;  // elements after y, dx and dw that must stay untouched
// 2^-7: exact in bf16, compared bit for bit, and small, so an accumulating write past the end
// (dx += ..., dw += ...) changes it even after rounding to bf16.
const float kSentinel = 0.0078125f;

struct Case {
    int n, h, w, c, stride;
};

kern::ConvShape shape_of(const Case& k) {
    kern::ConvShape s;
    s.n = k.n;
    s.h = k.h;
    s.w = k.w;
    s.cin = s.cout = s.groups = k.c;
    s.k = 3;
    s.stride = k.stride;
    s.pad = 1;
    return s;
}

std::string name_of(const Case& k) {
    return "n=" + std::to_string(k.n) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + "x" +
           std::to_string(k.c) + " stride " + std::to_string(k.stride);
}

struct Inputs {
    std::vector<float> x, w, dy;  // (N,H,W,C), (C*9), (N,P,Q,C): bf16-exact
    std::vector<float> dx0;       // (N,H,W,C) initial dx, bf16-exact
    std::vector<float> dw0;       // (C*9) initial dw
};

struct Outputs {
    std::vector<float> y, dx, dw;
    bool guards_intact = true;
};

// Magnitudes chosen so that y, dx - dx0 and dw - dw0 are of the order of the initial values: a
// kernel that overwrote instead of accumulating (or dropped the sum) would be far off.
Inputs random_inputs(const kern::ConvShape& s, uint64_t seed) {
    Inputs in;
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    in.x = bf16_exact(sftest::random_uniform(nx, seed, -1, 1));
    in.w = bf16_exact(sftest::random_uniform(nw, seed + 1, -0.5, 0.5));
    in.dy = bf16_exact(sftest::random_uniform(ny, seed + 2, -1, 1));
    in.dx0 = bf16_exact(sftest::random_uniform(nx, seed + 3, -0.5, 0.5));
    const double pixels = static_cast<double>(s.out().pixels());
    const std::vector<double> dw0 = sftest::random_uniform(nw, seed + 4, -1, 1);
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
    in.x = ints(nx, seed, -2, 2);
    in.w = ints(nw, seed + 1, -2, 2);
    in.dy = ints(ny, seed + 2, -2, 2);
    in.dx0 = ints(nx, seed + 3, -8, 8);  // |dx| <= 8 + 9*4 = 44, |y| <= 36: integers bf16 holds
    in.dw0 = ints(nw, seed + 4, -16, 16);
    return in;
}

// Forward, dgrad and wgrad on the GPU, the gather passes in variants fv and dv (kern::kDwVariants), the
// wgrad in variant wv (kern::kDwWgradVariants).
// y starts as sentinels (overwritten), dx as dx0 (accumulated; accumulate = false: overwritten) and dw
// as dw0 (accumulated); each is followed by kGuard sentinels.
Outputs run_gpu(const rt::CudaContext& ctx, const kern::ConvShape& s, const Inputs& in, int fv = 0, int dv = 0,
                bool accumulate = true, int wv = 0) {
    const size_t nx = s.in().numel(), ny = s.out().numel(), nw = s.weight_numel();
    const size_t wsn = kern::dwconv3x3_workspace_floats(s);
    rt::Arena arena("dwconv_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(nx * 2, 256, "x"), o_w = arena.reserve(nw * 2, 256, "w");
    const size_t o_dy = arena.reserve(ny * 2, 256, "dy"), o_y = arena.reserve((ny + kGuard) * 2, 256, "y");
    const size_t o_dx = arena.reserve((nx + kGuard) * 2, 256, "dx"), o_dw = arena.reserve((nw + kGuard) * 4, 256, "dw");
    const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* w = arena.ptr<kern::bf16>(o_w);
    kern::bf16* dy = arena.ptr<kern::bf16>(o_dy);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    kern::bf16* dx = arena.ptr<kern::bf16>(o_dx);
    float* dw = arena.ptr<float>(o_dw);
    upload_bf16(x, in.x);
    upload_bf16(w, in.w);
    upload_bf16(dy, in.dy);
    upload_bf16(y, std::vector<float>(ny + kGuard, kSentinel));
    std::vector<float> dx0 = in.dx0, dw0 = in.dw0;
    dx0.resize(nx + kGuard, kSentinel);
    dw0.resize(nw + kGuard, kSentinel);
    upload_bf16(dx, dx0);
    upload(dw, dw0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight; ctx's stream is separate

    const rt::Exec& ex = ctx.exec();
    kern::dwconv3x3_forward_cuda(ex, s, x, w, y, nullptr, fv);
    kern::dwconv3x3_backward_data_cuda(ex, s, dy, w, dx, accumulate, dv);
    kern::dwconv3x3_backward_filter_cuda(ex, s, x, dy, dw, arena.ptr<float>(o_ws), wsn, nullptr, wv);
    ctx.synchronize();

    Outputs out;
    out.y = strip_guard(download_bf16(y, ny + kGuard), ny, kSentinel, out.guards_intact);
    out.dx = strip_guard(download_bf16(dx, nx + kGuard), nx, kSentinel, out.guards_intact);
    out.dw = strip_guard(download(dw, nw + kGuard), nw, kSentinel, out.guards_intact);
    return out;
}

// The same computation with the fp32 CPU references.
Outputs run_ref(const kern::ConvShape& s, const Inputs& in) {
    Outputs r;
    r.y.resize(s.out().numel());
    kern::conv_forward_ref<float>(s, in.x.data(), in.w.data(), nullptr, r.y.data());
    r.dx = in.dx0;
    kern::conv_backward_data_ref<float>(s, in.dy.data(), in.w.data(), r.dx.data());
    r.dw = in.dw0;
    kern::conv_backward_filter_ref<float>(s, in.x.data(), in.dy.data(), r.dw.data(), nullptr);
    return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(KernelsDwconvGpu, MatchesReferences) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {
        {2, 7, 9, 8, 1},   {2, 7, 9, 16, 2},   {2, 15, 33, 64, 1},  {2, 15, 33, 32, 2},  {1, 16, 32, 24, 1},
        {3, 9, 17, 40, 2}, {3, 8, 16, 512, 1}, {2, 16, 32, 256, 2}, {1, 1, 1, 8, 1},     {1, 1, 1, 8, 2},
        {2, 2, 3, 16, 2},  {4, 32, 64, 64, 1}, {2, 64, 128, 32, 2}, {4, 32, 64, 128, 1}, {2, 5, 1, 8, 1},
    };
    uint64_t seed = 300;
    for (const Case& k : cases) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k);
        const Inputs in = random_inputs(s, seed += 10);
        const Outputs got = run_gpu(ctx, s, in);
        const Outputs ref = run_ref(s, in);
        using sftest::close_rel_l2, sftest::to_double;
        EXPECT_TRUE(got.guards_intact) << what << ": wrote past y, dx or dw";
        EXPECT_TRUE(close_rel_l2(to_double(got.y), to_double(ref.y), 1e-2, what + " y"));
        EXPECT_TRUE(close_rel_l2(to_double(got.dx), to_double(ref.dx), 1e-2, what + " dx"));
        EXPECT_TRUE(close_rel_l2(to_double(got.dw), to_double(ref.dw), 1e-3, what + " dw"));
    }
}

TEST(KernelsDwconvGpu, ExactOnSmallIntegers) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {{2, 15, 33, 64, 1}, {2, 15, 33, 32, 2}, {2, 8, 16, 512, 1}, {3, 7, 9, 24, 2}};
    uint64_t seed = 800;
    for (const Case& k : cases) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k) + " (integers)";
        const Inputs in = integer_inputs(s, seed += 10);
        const Outputs got = run_gpu(ctx, s, in);
        const Outputs ref = run_ref(s, in);
        using sftest::close_elementwise, sftest::to_double;
        EXPECT_TRUE(got.guards_intact) << what << ": wrote past y, dx or dw";
        EXPECT_TRUE(close_elementwise(to_double(got.y), to_double(ref.y), 0, 0, what + " y"));
        EXPECT_TRUE(close_elementwise(to_double(got.dx), to_double(ref.dx), 0, 0, what + " dx"));
        EXPECT_TRUE(close_elementwise(to_double(got.dw), to_double(ref.dw), 0, 0, what + " dw"));
    }
}

TEST(KernelsDwconvGpu, Deterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const Case& k : {Case{8, 32, 64, 64, 1}, Case{8, 64, 128, 32, 2}, Case{16, 8, 16, 512, 1}}) {
        const kern::ConvShape s = shape_of(k);
        const std::string what = name_of(k);
        const Inputs in = random_inputs(s, 1000 + k.c);
        const Outputs a = run_gpu(ctx, s, in), b = run_gpu(ctx, s, in);
        EXPECT_TRUE(a.guards_intact && b.guards_intact) << what;
        EXPECT_TRUE(bitwise_equal(a.y, b.y)) << what << " y";
        EXPECT_TRUE(bitwise_equal(a.dx, b.dx)) << what << " dx";
        EXPECT_TRUE(bitwise_equal(a.dw, b.dw)) << what << " dw";
    }
}

// The gather variants add each output's taps in the same order as variant 0, so y and dx are the same
// bits, and the wgrad variants each (c, tap) sum in the same order, so dw is; shapes with odd sizes
// (partial tiles of every tile size), C with odd group counts for 2, 4 and 8 channels per thread and
// more than 32 groups (several channel blocks), both strides, and both dgrad modes. The staged variants
// (8 x 32 destination blocks; 4 x 16 for the stride-2 forward) get partial blocks in both directions,
// several blocks per image, and 64-, 32- and 8-channel blocks (C = 64 and 256; 32 and 96; 8, 24, 40).
TEST(KernelsDwconvGpu, VariantsBitwiseEqualToVariantZero) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Case cases[] = {{2, 7, 9, 8, 1},   {2, 7, 9, 24, 2},  {2, 15, 33, 40, 1}, {3, 9, 17, 40, 2},
                          {1, 1, 1, 8, 1},   {1, 1, 1, 8, 2},   {2, 5, 1, 8, 2},    {2, 16, 32, 64, 1},
                          {2, 13, 10, 256, 2}, {1, 8, 16, 512, 1}, {2, 19, 70, 32, 1}, {1, 18, 66, 96, 2}};
    uint64_t seed = 2000;
    for (const Case& k : cases) {
        const kern::ConvShape s = shape_of(k);
        const Inputs in = random_inputs(s, seed += 10);
        Inputs zero_dx = in;
        std::fill(zero_dx.dx0.begin(), zero_dx.dx0.end(), 0.0f);
        const Outputs ref_overwrite = run_ref(s, zero_dx);
        for (bool accumulate : {true, false}) {
            const Outputs base = run_gpu(ctx, s, in, 0, 0, accumulate);
            // Every gather and every wgrad variant at least once, paired in turn.
            for (int i = 0; i < std::max(kern::kDwVariantCount, kern::kDwWgradVariantCount); ++i) {
                const int v = i % kern::kDwVariantCount;
                const int dv = kern::dw_variant_valid(v, k.stride, true) ? v : 0;
                const int wv = i % kern::kDwWgradVariantCount;
                const std::string what = name_of(k) + " variant " + std::to_string(v) + " (" +
                                         kern::dwconv3x3_variant_name(v) + "), wgrad " + std::to_string(wv) + " (" +
                                         kern::dwconv3x3_wgrad_variant_name(wv) + ")" +
                                         (accumulate ? "" : " overwrite");
                const Outputs got = run_gpu(ctx, s, in, v, dv, accumulate, wv);
                EXPECT_TRUE(got.guards_intact) << what << ": wrote past y, dx or dw";
                EXPECT_TRUE(bitwise_equal(got.y, base.y)) << what << " y";
                EXPECT_TRUE(bitwise_equal(got.dx, base.dx)) << what << " dx";
                EXPECT_TRUE(bitwise_equal(got.dw, base.dw)) << what << " dw";
                if (!accumulate) {
                    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(got.dx), sftest::to_double(ref_overwrite.dx),
                                                     1e-2, what + " dx"));
                }
            }
        }
    }
}

}  // namespace
