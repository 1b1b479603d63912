// The fused stride-1 depthwise backward (kern::dwconv3x3_backward_fused_cuda, kernels/dwconv_bwd_fused.cu)
// against the separate passes and an fp64 reference, on the same bf16 inputs:
//   - dx bitwise equal to dwconv3x3_backward_data_cuda's (variant 0: every variant gives the same bits),
//     accumulating into non-zero dx and overwriting (dx starting as NaNs, never read);
//   - dw (accumulated into non-zero dw) within relative L2 1e-5 of the fp64 sum and of the two-pass
//     wgrad's (only the summation order differs), nothing written past dx or dw;
//   - small-integer inputs: dx and dw exact;
//   - two runs bitwise equal (a fixed partition and fixed-order sums);
//   - with the BN prologue (kern::DwBnBackward: the consumer BN + activation's dx formed on load, after
//     kern::bn_act_backward_stats), dx, dw, dgamma and dbeta bitwise those of kern::bn_act_backward
//     followed by the fused kernel on its dx, for every activation and both dgrad modes;
//   - with the forward's BN prologue (kern::DwPrologue, the fused LiteBlock: x is the producer's pre-BN
//     output), dx and dw bitwise those of the fused kernel on the activation the apply pass stores, in
//     train and eval mode; its refusals; with both prologues (the fused LiteBlock's depthwise ConvBN with
//     its BN's dx inside), dx, dw, dgamma and dbeta bitwise bn_act_backward + the fused kernel on the
//     stored activation.
// Shapes: partial spatial blocks in both directions (8 x 16 blocks), one-pixel images, 8-, 32- and
// 64-channel blocks and several channel blocks; each with the network's grid bound (one spatial block
// per chunk at these sizes) and with a bound of 2-5 blocks, so that a block walks several spatial blocks
// (uneven chunks), as it does at the model's shapes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/dw_shape.h"
#include "tests/support/gpu_buffers.h"

namespace {

using sftest::download;
using sftest::download_bf16;
using sftest::strip_guard;
using sftest::upload;
using sftest::upload_bf16;

constexpr size_t kGuard = 64;
const float kSentinel = 0.0078125f;  // 2^-7: bf16-exact; an accumulating write past the end changes it

struct Case {
    int n, h, w, c;
};

std::string name_of(const Case& k) {
    return "n=" + std::to_string(k.n) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + "x" +
           std::to_string(k.c);
}

struct Inputs {
    std::vector<float> x, w, dy, dx0, dw0;  // bf16-exact but dw0 (fp32)
};

Inputs make_inputs(const kern::ConvShape& s, uint64_t seed, bool integers) {
    const size_t nx = s.in().numel(), nw = s.weight_numel();
    auto vals = [&](size_t n, uint64_t sd, double lo, double hi) {
        const std::vector<double> v = integers ? sftest::random_ints(n, sd, static_cast<int>(lo), static_cast<int>(hi))
                                               : sftest::random_uniform(n, sd, lo, hi);
        return sftest::bf16_exact(v);
    };
    Inputs in;
    in.x = vals(nx, seed, -2, 2);
    in.w = vals(nw, seed + 1, -2, 2);
    in.dy = vals(nx, seed + 2, -2, 2);
    in.dx0 = vals(nx, seed + 3, -8, 8);  // integers: |dx| <= 8 + 9*4, exact in bf16
    const std::vector<double> dw0 = integers ? sftest::random_ints(nw, seed + 4, -16, 16)
                                             : sftest::random_uniform(nw, seed + 4, -1, 1);
    const double scale = integers ? 1.0 : std::sqrt(static_cast<double>(s.in().pixels()));
    for (double v : dw0) in.dw0.push_back(static_cast<float>(v * scale));
    return in;
}

struct Outputs {
    std::vector<float> dx, dw;
    bool guards_intact = true;
};

// The backward on the GPU: fused, or the separate dgrad (variant 0) and wgrad (variant 0). dx starts
// as dx0 (accumulate) or as NaNs (overwrite: never read), dw as dw0; each is followed by kGuard sentinels.
// max_blocks: the fused plan's grid bound (small values: several spatial blocks per chunk, as at the
// model's shapes).
Outputs run_gpu(const rt::CudaContext& ctx, const kern::ConvShape& s, const Inputs& in, bool fused, bool accumulate,
                int max_blocks = kern::kDwFusedMaxBlocks) {
    const size_t nx = s.in().numel(), nw = s.weight_numel();
    const size_t wsn =
        fused ? kern::dwconv3x3_fused_workspace_floats(s, max_blocks) : kern::dwconv3x3_workspace_floats(s);
    rt::Arena arena("dwconv_fused_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(nx * 2, 256, "x"), o_w = arena.reserve(nw * 2, 256, "w");
    const size_t o_dy = arena.reserve(nx * 2, 256, "dy"), o_dx = arena.reserve((nx + kGuard) * 2, 256, "dx");
    const size_t o_dw = arena.reserve((nw + kGuard) * 4, 256, "dw"), o_ws = arena.reserve(wsn * 4, 256, "ws");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* w = arena.ptr<kern::bf16>(o_w);
    kern::bf16* dy = arena.ptr<kern::bf16>(o_dy);
    kern::bf16* dx = arena.ptr<kern::bf16>(o_dx);
    float* dw = arena.ptr<float>(o_dw);
    float* ws = arena.ptr<float>(o_ws);
    upload_bf16(x, in.x);
    upload_bf16(w, in.w);
    upload_bf16(dy, in.dy);
    std::vector<float> dx0 = accumulate ? in.dx0 : std::vector<float>(nx, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> dw0 = in.dw0;
    dx0.resize(nx + kGuard, kSentinel);
    dw0.resize(nw + kGuard, kSentinel);
    upload_bf16(dx, dx0);
    upload(dw, dw0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight; ctx's stream is separate
    const rt::Exec& ex = ctx.exec();
    if (fused) {
        kern::dwconv3x3_backward_fused_cuda(ex, s, x, dy, w, dx, dw, ws, wsn, accumulate, nullptr, max_blocks);
    } else {
        kern::dwconv3x3_backward_data_cuda(ex, s, dy, w, dx, accumulate, 0);
        kern::dwconv3x3_backward_filter_cuda(ex, s, x, dy, dw, ws, wsn, nullptr, 0);
    }
    ctx.synchronize();
    Outputs out;
    out.dx = strip_guard(download_bf16(dx, nx + kGuard), nx, kSentinel, out.guards_intact);
    out.dw = strip_guard(download(dw, nw + kGuard), nw, kSentinel, out.guards_intact);
    return out;
}

// dw0 + the fp64 filter gradient: dw[c*9 + r*3 + s] += sum over (n, p, q) of dy[n,p,q,c] * x[n,p-1+r,q-1+s,c].
std::vector<double> dw_fp64(const kern::ConvShape& s, const Inputs& in) {
    std::vector<double> dw(in.dw0.begin(), in.dw0.end()), sum(dw.size(), 0.0);
    const int h = s.h, w = s.w, c = s.cin;
    for (int n = 0; n < s.n; ++n)
        for (int p = 0; p < h; ++p)
            for (int q = 0; q < w; ++q)
                for (int r = 0; r < 3; ++r)
                    for (int t = 0; t < 3; ++t) {
                        const int hi = p - 1 + r, wi = q - 1 + t;
                        if (hi < 0 || hi >= h || wi < 0 || wi >= w) continue;
                        const size_t o = ((static_cast<size_t>(n) * h + p) * w + q) * c;
                        const size_t i = ((static_cast<size_t>(n) * h + hi) * w + wi) * c;
                        for (int ch = 0; ch < c; ++ch)
                            sum[static_cast<size_t>(ch) * 9 + r * 3 + t] += static_cast<double>(in.dy[o + ch]) * in.x[i + ch];
                    }
    for (size_t e = 0; e < dw.size(); ++e) dw[e] += static_cast<float>(sum[e]);  // the kernels add one fp32 value
    return dw;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const Case kCases[] = {
    {2, 7, 9, 8},     {1, 1, 1, 8},     {2, 5, 1, 8},     {1, 16, 32, 24},  {2, 15, 33, 64},  {3, 8, 16, 512},
    {2, 19, 70, 32},  {2, 17, 40, 96},  {2, 9, 17, 128},  {4, 32, 64, 64},
};

TEST(KernelsDwconvFusedGpu, MatchesSeparatePasses) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 5100;
    for (const Case& k : kCases) {
        const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
        const Inputs in = make_inputs(s, seed += 10, false);
        const std::vector<double> ref = dw_fp64(s, in);
        for (bool accumulate : {true, false})
            for (int mb : {kern::kDwFusedMaxBlocks, 3}) {
                const std::string what =
                    name_of(k) + (accumulate ? "" : " overwrite") + " max_blocks " + std::to_string(mb);
                const Outputs sep = run_gpu(ctx, s, in, false, accumulate);
                const Outputs got = run_gpu(ctx, s, in, true, accumulate, mb);
                EXPECT_TRUE(got.guards_intact && sep.guards_intact) << what << ": wrote past dx or dw";
                EXPECT_TRUE(bitwise_equal(got.dx, sep.dx)) << what << " dx";
                using sftest::close_rel_l2, sftest::to_double;
                EXPECT_TRUE(close_rel_l2(to_double(got.dw), ref, 1e-5, what + " dw vs fp64"));
                EXPECT_TRUE(
                    close_rel_l2(to_double(got.dw), to_double(sep.dw), 1e-5, what + " dw vs the two-pass wgrad"));
            }
    }
}

// The four stride-1 depthwise shapes of the model at the network's grid bound, with batches that give
// every block two spatial blocks (1/4 n 32, 1/8 n 64, 1/16 n 128, 1/32 n 256: 16.8M elements per
// tensor each): the partition the step runs (1024 blocks at 1/4), at full occupancy on a GPU (about a
// minute under the CPU emulation).
TEST(KernelsDwconvFusedGpu, ModelShapesMatchSeparatePasses) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 5400;
    const Case model_shapes[] = {{32, 64, 128, 64}, {64, 32, 64, 128}, {128, 16, 32, 256}, {256, 8, 16, 512}};
    for (const Case& k : model_shapes) {
        const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
        const kern::DwFusedPlan fp = kern::dwconv3x3_fused_plan(s);
        EXPECT_EQ(fp.spatial, 2LL * fp.chunks) << name_of(k);  // two spatial blocks per block
        const Inputs in = make_inputs(s, seed += 10, false);
        const Outputs sep = run_gpu(ctx, s, in, false, false), got = run_gpu(ctx, s, in, true, false);
        EXPECT_TRUE(got.guards_intact) << name_of(k);
        EXPECT_TRUE(bitwise_equal(got.dx, sep.dx)) << name_of(k) << " dx";
        EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(got.dw), sftest::to_double(sep.dw), 1e-5,
                                         name_of(k) + " dw vs the two-pass wgrad"));
    }
}

TEST(KernelsDwconvFusedGpu, ExactOnSmallIntegers) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 5700;
    for (const Case& k : {Case{2, 15, 33, 64}, Case{2, 8, 16, 512}, Case{3, 7, 9, 24}}) {
        const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
        const Inputs in = make_inputs(s, seed += 10, true);
        const std::string what = name_of(k) + " (integers)";
        const Outputs sep = run_gpu(ctx, s, in, false, true), got = run_gpu(ctx, s, in, true, true, 2);
        using sftest::close_elementwise, sftest::to_double;
        EXPECT_TRUE(got.guards_intact) << what;
        EXPECT_TRUE(bitwise_equal(got.dx, sep.dx)) << what << " dx";
        EXPECT_TRUE(close_elementwise(to_double(got.dw), dw_fp64(s, in), 0, 0, what + " dw"));
    }
}

TEST(KernelsDwconvFusedGpu, Deterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const Case& k : {Case{8, 32, 64, 64}, Case{16, 8, 16, 512}, Case{3, 19, 70, 32}}) {
        const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
        const Inputs in = make_inputs(s, 6000 + k.c, false);
        const Outputs a = run_gpu(ctx, s, in, true, true, 5), b = run_gpu(ctx, s, in, true, true, 5);
        EXPECT_TRUE(a.guards_intact && b.guards_intact) << name_of(k);
        EXPECT_TRUE(bitwise_equal(a.dx, b.dx)) << name_of(k) << " dx";
        EXPECT_TRUE(bitwise_equal(a.dw, b.dw)) << name_of(k) << " dw";
    }
}

using Dev = sftest::DeviceBuffer;

// Four random C-vectors appended to vec (a BN's gamma, beta, mean or running mean, invstd or running
// variance), vector k drawn with seed + vec.size().
void append_bn_vectors(std::vector<float>& vec, size_t c, uint64_t seed) {
    for (const auto& r : {std::pair<double, double>{0.5, 1.5}, {-0.5, 0.5}, {-0.3, 0.3}, {0.5, 2.0}}) {
        const std::vector<double> v = sftest::random_uniform(c, seed + vec.size(), r.first, r.second);
        vec.insert(vec.end(), v.begin(), v.end());
    }
}

// x, w, dy of `in` into their buffers; dx0 (accumulate) or NaNs (overwrite: never read) into both dx,
// dw0 into both dw (the two runs a test compares).
void upload_inputs(const Inputs& in, bool accumulate, Dev& x, Dev& w, Dev& dy, Dev& dxa, Dev& dxb, Dev& dwa,
                   Dev& dwb) {
    sftest::upload_bf16(x.h(), in.x);
    sftest::upload_bf16(w.h(), in.w);
    sftest::upload_bf16(dy.h(), in.dy);
    const std::vector<float> dx0 =
        accumulate ? in.dx0 : std::vector<float>(in.x.size(), std::numeric_limits<float>::quiet_NaN());
    sftest::upload_bf16(dxa.h(), dx0);
    sftest::upload_bf16(dxb.h(), dx0);
    sftest::upload(dwa.f(), in.dw0);
    sftest::upload(dwb.f(), in.dw0);
}

// The consumer BN's backward prologue: its input xbn, vectors and the coefficients bn_act_backward_stats
// left at coef.
kern::DwBnBackward bn_backward(kern::Act act, const kern::bf16* xbn, const float* gamma, const float* beta,
                               const float* mean, const float* invstd, const float* coef) {
    kern::DwBnBackward b;
    b.act = act;
    b.x = xbn;
    b.gamma = gamma;
    b.beta = beta;
    b.mean = mean;
    b.invstd = invstd;
    b.coef = coef;
    return b;
}

TEST(KernelsDwconvFusedGpu, BnPrologueBitwiseEqualToBnBackwardThenFused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 7100;
    for (const Case& k : {Case{2, 15, 33, 64}, Case{1, 9, 17, 128}, Case{3, 8, 16, 24}})
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu})
            for (bool accumulate : {true, false}) {
                const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
                const std::string what = name_of(k) + " act " + std::to_string(static_cast<int>(act)) +
                                         (accumulate ? "" : " overwrite");
                const size_t nx = s.in().numel(), nw = s.weight_numel(), rows = s.out().pixels(), c = k.c;
                const Inputs in = make_inputs(s, seed += 10, false);  // x, w, dy (the BN output's gradient), dx0
                const std::vector<float> xbn = sftest::bf16_exact(sftest::random_uniform(nx, seed + 5, -2, 2));
                std::vector<float> vec;  // gamma, beta, save_mean, save_invstd
                append_bn_vectors(vec, c, seed + 6);
                const size_t bn_ws = kern::bn_act_workspace_floats(rows, k.c);
                const int mb = act == kern::Act::Silu ? 3 : kern::kDwFusedMaxBlocks;  // several blocks per chunk too
                const size_t fws = kern::dwconv3x3_fused_workspace_floats(s, mb);
                Dev x(nx * 2), w(nw * 2), dy(nx * 2), xb(nx * 2), v(4 * c * 4), dc(nx * 2);
                Dev dxa(nx * 2), dxb(nx * 2), dwa(nw * 4), dwb(nw * 4), ga(2 * c * 4), gb(2 * c * 4);
                Dev wsa(bn_ws * 4), wsb(bn_ws * 4), pa(fws * 4), pb(fws * 4);
                upload_inputs(in, accumulate, x, w, dy, dxa, dxb, dwa, dwb);
                sftest::upload_bf16(xb.h(), xbn);
                sftest::upload(v.f(), vec);
                const std::vector<float> g0 = sftest::bf16_exact(sftest::random_uniform(2 * c, seed + 9, -1, 1));
                sftest::upload(ga.f(), g0);  // dgamma, dbeta: accumulated
                sftest::upload(gb.f(), g0);
                SF_CUDA_CHECK(cudaDeviceSynchronize());
                const float *gamma = v.f(), *beta = v.f() + c, *mean = v.f() + 2 * c, *invstd = v.f() + 3 * c;
                // The separate BN backward (dx pass included), then the fused kernel on its dx.
                kern::bn_act_backward(ex, act, rows, k.c, xb.h(), dy.h(), gamma, beta, mean, invstd, dc.h(), ga.f(),
                                      ga.f() + c, wsa.f(), bn_ws);
                kern::dwconv3x3_backward_fused_cuda(ex, s, x.h(), dc.h(), w.h(), dxa.h(), dwa.f(), pa.f(), fws,
                                                    accumulate, nullptr, mb);
                // The statistics pass, then the fused kernel forming the BN's dx on load.
                kern::bn_act_backward_stats(ex, act, rows, k.c, xb.h(), dy.h(), gamma, beta, mean, invstd, gb.f(),
                                            gb.f() + c, wsb.f(), bn_ws);
                const kern::DwBnBackward b = bn_backward(act, xb.h(), gamma, beta, mean, invstd,
                                                         wsb.f() + kern::bn_act_backward_coef_offset(rows, k.c));
                kern::dwconv3x3_backward_fused_cuda(ex, s, x.h(), dy.h(), w.h(), dxb.h(), dwb.f(), pb.f(), fws,
                                                    accumulate, &b, mb);
                ctx.synchronize();
                EXPECT_TRUE(bitwise_equal(download_bf16(dxa.h(), nx), download_bf16(dxb.h(), nx))) << what << " dx";
                EXPECT_TRUE(bitwise_equal(download(dwa.f(), nw), download(dwb.f(), nw))) << what << " dw";
                EXPECT_TRUE(bitwise_equal(download(ga.f(), 2 * c), download(gb.f(), 2 * c))) << what << " dgamma, dbeta";
                // Not vacuous: the BN's dx is not the dy it was formed from.
                EXPECT_FALSE(bitwise_equal(download_bf16(dc.h(), nx), in.dy)) << what;
            }
}


// The fused LiteBlock's backward (kern::DwPrologue: x is the expand's pre-BN output, staged through its
// BN + activation): dx and dw bitwise those of the plain fused kernel on the activation the apply pass
// stores (bn_act_forward_train with its batch statistics, or bn_act_forward_eval with running ones),
// for every activation, both statistics modes and both dgrad modes, with several blocks per chunk too.
TEST(KernelsDwconvFusedGpu, ForwardPrologueBitwiseEqualToFusedOnTheStoredActivation) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 8300;
    for (const Case& k : {Case{2, 15, 33, 64}, Case{1, 9, 17, 128}, Case{3, 8, 16, 24}})
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu})
            for (bool eval : {false, true})
                for (bool accumulate : {true, false}) {
                    const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
                    const std::string what = name_of(k) + " act " + std::to_string(static_cast<int>(act)) +
                                             (eval ? " eval" : " train") + (accumulate ? "" : " overwrite");
                    const size_t nx = s.in().numel(), nw = s.weight_numel(), rows = s.in().pixels(), c = k.c;
                    const Inputs in = make_inputs(s, seed += 10, false);  // x: the pre-BN output; w, dy, dx0, dw0
                    std::vector<float> vec;  // gamma, beta, running mean, running var (eval: read; train: updated)
                    append_bn_vectors(vec, c, seed + 6);
                    const size_t bn_ws = kern::bn_act_workspace_floats(rows, k.c);
                    const int mb = act == kern::Act::Silu ? 3 : kern::kDwFusedMaxBlocks;
                    const size_t fws = kern::dwconv3x3_fused_workspace_floats(s, mb);
                    Dev xp(nx * 2), y(nx * 2), w(nw * 2), dy(nx * 2), v(4 * c * 4), st(2 * c * 4), wsb(bn_ws * 4);
                    Dev dxa(nx * 2), dxb(nx * 2), dwa(nw * 4), dwb(nw * 4), pa(fws * 4), pb(fws * 4);
                    upload_inputs(in, accumulate, xp, w, dy, dxa, dxb, dwa, dwb);
                    sftest::upload(v.f(), vec);
                    SF_CUDA_CHECK(cudaDeviceSynchronize());
                    float *gamma = v.f(), *beta = v.f() + c, *rmean = v.f() + 2 * c, *rvar = v.f() + 3 * c;
                    kern::DwPrologue pro;
                    if (eval) {
                        kern::bn_act_forward_eval(ex, act, rows, k.c, xp.h(), gamma, beta, rmean, rvar, 1e-5, y.h());
                        pro = sftest::dw_prologue(act, gamma, beta, rmean, rvar);
                        pro.eval = true;
                        pro.eps = 1e-5;
                    } else {
                        kern::bn_act_forward_train(ex, act, rows, k.c, xp.h(), gamma, beta, y.h(), st.f(), st.f() + c,
                                                   rmean, rvar, 0.1, 1e-5, wsb.f(), bn_ws);
                        pro = sftest::dw_prologue(act, gamma, beta, st.f(), st.f() + c);
                    }
                    kern::dwconv3x3_backward_fused_cuda(ex, s, y.h(), dy.h(), w.h(), dxa.h(), dwa.f(), pa.f(), fws,
                                                        accumulate, nullptr, mb);
                    kern::dwconv3x3_backward_fused_cuda(ex, s, xp.h(), dy.h(), w.h(), dxb.h(), dwb.f(), pb.f(), fws,
                                                        accumulate, nullptr, mb, &pro);
                    ctx.synchronize();
                    EXPECT_TRUE(bitwise_equal(download_bf16(dxa.h(), nx), download_bf16(dxb.h(), nx))) << what << " dx";
                    EXPECT_TRUE(bitwise_equal(download(dwa.f(), nw), download(dwb.f(), nw))) << what << " dw";
                    // Not vacuous: the stored activation is not the pre-BN output the prologue was given.
                    EXPECT_FALSE(bitwise_equal(download_bf16(y.h(), nx), in.x)) << what;
                }
}

TEST(KernelsDwconvFusedGpu, ForwardPrologueRefusals) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const kern::ConvShape s = sftest::dw_shape(1, 8, 16, 32, 1);
    const size_t nx = s.in().numel(), nw = s.weight_numel(), fws = kern::dwconv3x3_fused_workspace_floats(s);
    Dev x(nx * 2), dy(nx * 2), w(nw * 2), dx(nx * 2), dw(nw * 4), ws(fws * 4), v(4 * 32 * 4);
    const kern::DwPrologue pro = sftest::dw_prologue(kern::Act::Silu, v.f(), v.f() + 32, v.f() + 64, v.f() + 96);
    kern::DwPrologue bad = pro;
    bad.beta = nullptr;
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_fused_cuda(ctx.exec(), s, x.h(), dy.h(), w.h(), dx.h(), dw.f(), ws.f(),
                                                        fws, true, nullptr, kern::kDwFusedMaxBlocks, &bad),
                    "prologue beta");
    bad = pro;
    bad.eval = true;  // eps 0
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_fused_cuda(ctx.exec(), s, x.h(), dy.h(), w.h(), dx.h(), dw.f(), ws.f(),
                                                        fws, true, nullptr, kern::kDwFusedMaxBlocks, &bad),
                    "eps > 0");
    bad = pro;
    bad.gamma = dw.f();  // the output overlapping a prologue vector
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_fused_cuda(ctx.exec(), s, x.h(), dy.h(), w.h(), dx.h(), dw.f(), ws.f(),
                                                        fws, true, nullptr, kern::kDwFusedMaxBlocks, &bad),
                    "must not alias the prologue gamma");
}

// Both prologues at once (the fused LiteBlock's depthwise ConvBN under dw_fused_bn_bwd): dy staged through
// the consumer BN's backward, x through the producer's forward BN + activation. dx, dw, dgamma and dbeta
// bitwise those of bn_act_backward followed by the plain fused kernel on the activation the producer's
// apply pass stores; every pair of activations, both dgrad modes, several blocks per chunk too.
TEST(KernelsDwconvFusedGpu, BothProloguesBitwiseEqualToTheSeparatePasses) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 9100;
    const kern::Act acts[3] = {kern::Act::None, kern::Act::Silu, kern::Act::Relu};
    for (const Case& k : {Case{2, 15, 33, 64}, Case{3, 8, 16, 24}})
        for (kern::Act bn_act : acts)
            for (kern::Act pro_act : acts)
                for (bool accumulate : {true, false}) {
                    const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
                    const std::string what = name_of(k) + " bn act " + std::to_string(static_cast<int>(bn_act)) +
                                             " prologue act " + std::to_string(static_cast<int>(pro_act)) +
                                             (accumulate ? "" : " overwrite");
                    const size_t nx = s.in().numel(), nw = s.weight_numel(), rows = s.in().pixels(), c = k.c;
                    const Inputs in = make_inputs(s, seed += 10, false);  // x: the pre-BN input; dy: the BN's
                    const std::vector<float> xbn = sftest::bf16_exact(sftest::random_uniform(nx, seed + 5, -2, 2));
                    std::vector<float> vec;  // the consumer BN's gamma, beta, mean, invstd; then the producer's
                    append_bn_vectors(vec, c, seed + 6);
                    append_bn_vectors(vec, c, seed + 6);
                    const size_t bn_ws = kern::bn_act_workspace_floats(rows, k.c);
                    const int mb = bn_act == kern::Act::Silu ? 3 : kern::kDwFusedMaxBlocks;
                    const size_t fws = kern::dwconv3x3_fused_workspace_floats(s, mb);
                    Dev xp(nx * 2), y(nx * 2), w(nw * 2), dy(nx * 2), xb(nx * 2), v(8 * c * 4), st(2 * c * 4);
                    Dev dc(nx * 2), dxa(nx * 2), dxb(nx * 2), dwa(nw * 4), dwb(nw * 4), ga(2 * c * 4), gb(2 * c * 4);
                    Dev wsy(bn_ws * 4), wsa(bn_ws * 4), wsb(bn_ws * 4), pa(fws * 4), pb(fws * 4);
                    upload_inputs(in, accumulate, xp, w, dy, dxa, dxb, dwa, dwb);
                    sftest::upload_bf16(xb.h(), xbn);
                    sftest::upload(v.f(), vec);
                    const std::vector<float> g0 = sftest::bf16_exact(sftest::random_uniform(2 * c, seed + 9, -1, 1));
                    sftest::upload(ga.f(), g0);
                    sftest::upload(gb.f(), g0);
                    SF_CUDA_CHECK(cudaDeviceSynchronize());
                    const float *gamma = v.f(), *beta = v.f() + c, *mean = v.f() + 2 * c, *invstd = v.f() + 3 * c;
                    float *pgamma = v.f() + 4 * c, *pbeta = v.f() + 5 * c, *rmean = v.f() + 6 * c,
                          *rvar = v.f() + 7 * c;
                    // The producer's apply pass (train mode: its batch statistics into st).
                    kern::bn_act_forward_train(ex, pro_act, rows, k.c, xp.h(), pgamma, pbeta, y.h(), st.f(),
                                               st.f() + c, rmean, rvar, 0.1, 1e-5, wsy.f(), bn_ws);
                    const kern::DwPrologue pro = sftest::dw_prologue(pro_act, pgamma, pbeta, st.f(), st.f() + c);
                    // Separate: the consumer BN's backward, then the plain fused kernel on y and its dx.
                    kern::bn_act_backward(ex, bn_act, rows, k.c, xb.h(), dy.h(), gamma, beta, mean, invstd, dc.h(),
                                          ga.f(), ga.f() + c, wsa.f(), bn_ws);
                    kern::dwconv3x3_backward_fused_cuda(ex, s, y.h(), dc.h(), w.h(), dxa.h(), dwa.f(), pa.f(), fws,
                                                        accumulate, nullptr, mb);
                    // Both prologues: the statistics pass, then the fused kernel on the pre-BN input and dy.
                    kern::bn_act_backward_stats(ex, bn_act, rows, k.c, xb.h(), dy.h(), gamma, beta, mean, invstd,
                                                gb.f(), gb.f() + c, wsb.f(), bn_ws);
                    const kern::DwBnBackward b = bn_backward(bn_act, xb.h(), gamma, beta, mean, invstd,
                                                             wsb.f() + kern::bn_act_backward_coef_offset(rows, k.c));
                    kern::dwconv3x3_backward_fused_cuda(ex, s, xp.h(), dy.h(), w.h(), dxb.h(), dwb.f(), pb.f(), fws,
                                                        accumulate, &b, mb, &pro);
                    ctx.synchronize();
                    EXPECT_TRUE(bitwise_equal(download_bf16(dxa.h(), nx), download_bf16(dxb.h(), nx))) << what << " dx";
                    EXPECT_TRUE(bitwise_equal(download(dwa.f(), nw), download(dwb.f(), nw))) << what << " dw";
                    EXPECT_TRUE(bitwise_equal(download(ga.f(), 2 * c), download(gb.f(), 2 * c)))
                        << what << " dgamma, dbeta";
                }
}

}  // namespace
