// The BatchNorm backward split around a conv's BN-backward epilogue (kern::BnGradSums):
//   - the fused depthwise backward with the forward prologue and the epilogue (the fused LiteBlock's
//     depthwise kernel gathering the expand BN's backward reductions from the da1 it stores): dx and dw
//     bitwise those of the same call without the epilogue; dgamma, dbeta (+=, from non-zero values) and
//     the two coefficients against an fp64 reference of the sums over the stored dx and against
//     bn_act_backward_stats on it (another order: within 1e-5 of the magnitudes' sum); a second run
//     bitwise equal; every activation, both dgrad modes, with and without the consumer BN's backward
//     prologue (bnb), one and several spatial blocks per chunk, 8-, 24-, 64- and 128-channel shapes with
//     partial spatial blocks; the refusals;
//   - bn_act_backward_dx (the dx pass alone, given coefficients): bitwise bn_act_backward's dx from the
//     coefficients bn_act_backward_stats leaves, and its refusals;
//   - bn_act_backward_finalize (the pass that adds an epilogue's chunk partials): bitwise
//     bn_act_backward_stats's own second pass on the same partials (those the statistics pass leaves in
//     its workspace).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/bn_grad_ref.h"
#include "tests/support/compare.h"
#include "tests/support/dw_shape.h"
#include "tests/support/gpu_buffers.h"

namespace {

using kern::Act;
using sftest::bf16_exact;
using sftest::bitwise;
using sftest::bn_input;
using sftest::download;
using sftest::download_bf16;
using sftest::to_floats;
using sftest::upload;
using sftest::upload_bf16;
using Dev = sftest::DeviceBuffer;

constexpr double kMomentum = 0.1, kEps = 1e-5;

struct Shape {
    int n, h, w, c;
};

TEST(KernelsDwconvFusedGpu, BnGradEpilogueMatchesTheStatisticsPass) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 12100;
    int combo = 0;
    for (const Shape& k : {Shape{2, 15, 33, 64}, Shape{3, 8, 16, 24}, Shape{1, 9, 17, 128}, Shape{1, 5, 7, 8}})
        for (Act act : {Act::Silu, Act::Relu, Act::None})
            for (bool accumulate : {false, true}) {
                const bool with_bnb = (combo % 2) == 1;      // the consumer BN's backward prologue too
                const int mb = (combo / 2) % 2 == 0 ? 3 : kern::kDwFusedMaxBlocks;  // several blocks per chunk
                ++combo;
                const kern::ConvShape s = sftest::dw_shape(k.n, k.h, k.w, k.c, 1);
                const std::string what = std::to_string(k.n) + "x" + std::to_string(k.h) + "x" + std::to_string(k.w) +
                                         "x" + std::to_string(k.c) + " " + kern::act_name(act) +
                                         (accumulate ? " accumulate" : " overwrite") + (with_bnb ? " bnb" : "") +
                                         " max_blocks " + std::to_string(mb);
                const size_t nx = s.in().numel(), nw = s.weight_numel(), rows = s.in().pixels(), c = k.c;
                const size_t fws = kern::dwconv3x3_fused_workspace_floats(s, mb, true);
                const size_t bws = kern::bn_act_workspace_floats(rows, k.c);
                Dev xp(nx * 2), w(nw * 2), dy(nx * 2), dxa(nx * 2), dxb(nx * 2), dwa(nw * 4), dwb(nw * 4);
                Dev v(12 * c * 4), pa(fws * 4), pb(fws * 4), bw(bws * 4), xb(nx * 2);
                auto V = [&](int i) { return v.f() + static_cast<size_t>(i) * c; };
                // x: the producer BN's pre-BN input; its gamma V(0), beta V(1), batch statistics V(2), V(3)
                // (running ones V(4), V(5)); the epilogue's dgamma V(6), dbeta V(7), coef V(8..9); the
                // statistics pass's dgamma V(10), dbeta V(11).
                const std::vector<float> xpf = bn_input(rows, c, seed += 10);
                upload_bf16(xp.h(), xpf);
                upload_bf16(w.h(), bf16_exact(sftest::random_uniform(nw, seed + 2, -1, 1)));
                upload_bf16(dy.h(), bf16_exact(sftest::random_uniform(nx, seed + 3, -1, 1)));
                const std::vector<float> dx0 =
                    accumulate ? bf16_exact(sftest::random_uniform(nx, seed + 4, -1, 1)) : std::vector<float>(nx, 0.5f);
                upload_bf16(dxa.h(), dx0);
                upload_bf16(dxb.h(), dx0);
                const std::vector<float> dw0 = to_floats(sftest::random_uniform(nw, seed + 5, -1, 1));
                upload(dwa.f(), dw0);
                upload(dwb.f(), dw0);
                const std::vector<float> gamma = to_floats(sftest::random_uniform(c, seed + 6, 0.5, 1.5));
                const std::vector<float> beta = to_floats(sftest::random_uniform(c, seed + 7, -0.8, 0.8));
                upload(V(0), gamma);
                upload(V(1), beta);
                upload(V(4), std::vector<float>(c, 0.0f));
                upload(V(5), std::vector<float>(c, 1.0f));
                const std::vector<float> d0 = to_floats(sftest::random_uniform(c, seed + 8, -3, 3));
                for (int i : {6, 7, 10, 11}) upload(V(i), d0);
                SF_CUDA_CHECK(cudaDeviceSynchronize());
                kern::bn_stats_train(ex, rows, k.c, xp.h(), V(2), V(3), V(4), V(5), kMomentum, kEps, bw.f(), bws);
                const kern::DwPrologue pro = sftest::dw_prologue(act, V(0), V(1), V(2), V(3));
                // The consumer BN's backward prologue (bnb): its input xb, vectors V(0..3) reused (only its
                // arithmetic matters here), its coefficients from the statistics pass in bw.
                const kern::DwBnBackward bnb{Act::Silu, xb.h(), V(0), V(1), V(2), V(3),
                                             bw.f() + kern::bn_act_backward_coef_offset(rows, k.c)};
                if (with_bnb) {
                    upload_bf16(xb.h(), bn_input(rows, c, seed + 9));
                    kern::bn_act_backward_stats(ex, Act::Silu, rows, k.c, xb.h(), dy.h(), V(0), V(1), V(2), V(3),
                                                V(10), V(11), bw.f(), bws);
                    ctx.synchronize();
                    for (int i : {10, 11}) upload(V(i), d0);
                    SF_CUDA_CHECK(cudaDeviceSynchronize());
                }
                const kern::BnGradSums bng{act, xp.h(), V(0), V(1), V(2), V(3), V(6), V(7), V(8)};
                const kern::DwBnBackward* pbnb = with_bnb ? &bnb : nullptr;
                kern::dwconv3x3_backward_fused_cuda(ex, s, xp.h(), dy.h(), w.h(), dxa.h(), dwa.f(), pa.f(), fws,
                                                    accumulate, pbnb, mb, &pro);
                std::vector<float> first;
                for (int run = 0; run < 2; ++run) {
                    if (run == 1) {
                        upload_bf16(dxb.h(), dx0);
                        upload(dwb.f(), dw0);
                        for (int i : {6, 7}) upload(V(i), d0);
                        SF_CUDA_CHECK(cudaDeviceSynchronize());
                    }
                    kern::dwconv3x3_backward_fused_cuda(ex, s, xp.h(), dy.h(), w.h(), dxb.h(), dwb.f(), pb.f(), fws,
                                                        accumulate, pbnb, mb, &pro, &bng);
                    ctx.synchronize();
                    std::vector<float> got = download(V(6), 4 * c);  // dgamma, dbeta, coef
                    if (run == 0) first = got;
                    else EXPECT_TRUE(bitwise(got, first, what + ": a second run"));
                }
                const std::vector<float> dx = download_bf16(dxa.h(), nx);
                EXPECT_TRUE(bitwise(download_bf16(dxb.h(), nx), dx, what + ": dx against the call without it"));
                EXPECT_TRUE(bitwise(download(dwb.f(), nw), download(dwa.f(), nw), what + ": dw"));
                // The statistics pass on the stored dx: dgamma, dbeta into V(10), V(11), its coefficients in bw.
                kern::bn_act_backward_stats(ex, act, rows, k.c, xp.h(), dxa.h(), V(0), V(1), V(2), V(3), V(10), V(11),
                                            bw.f(), bws);
                ctx.synchronize();
                std::vector<float> pass = download(V(10), 2 * c);
                const std::vector<float> pcoef = download(bw.f() + kern::bn_act_backward_coef_offset(rows, k.c), 2 * c);
                pass.insert(pass.end(), pcoef.begin(), pcoef.end());
                const sftest::BnGradRef r =
                    sftest::bn_grad_ref(act, rows, c, xpf, dx, gamma, beta, download(V(2), c), download(V(3), c));
                sftest::expect_bn_grad_near(first, pass, r, d0, rows, c, what);
                // Not vacuous: the sums are not those of a zero gradient.
                double mag = 0.0;
                for (double m : r.mg) mag += m;
                EXPECT_GT(mag, 0.0) << what;
            }
}

TEST(KernelsDwconvFusedGpu, BnGradEpilogueRefusals) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const int c = 32;
    const kern::ConvShape s = sftest::dw_shape(1, 8, 16, c, 1);
    const size_t nx = s.in().numel(), nw = s.weight_numel();
    const size_t fws = kern::dwconv3x3_fused_workspace_floats(s, kern::kDwFusedMaxBlocks, true);
    EXPECT_EQ(fws, kern::dwconv3x3_fused_workspace_floats(s) + 2 * static_cast<size_t>(
                                                                       kern::dwconv3x3_fused_plan(s).chunks) * c);
    Dev x(nx * 2), x2(nx * 2), dy(nx * 2), w(nw * 2), dx(nx * 2), dw(nw * 4), ws(fws * 4), v(12 * c * 4);
    auto V = [&](int i) { return v.f() + static_cast<size_t>(i) * c; };
    const kern::DwPrologue pro = sftest::dw_prologue(Act::Silu, V(0), V(1), V(2), V(3));
    const kern::BnGradSums bng{Act::Silu, x.h(), V(0), V(1), V(2), V(3), V(6), V(7), V(8)};
    auto run = [&](const kern::DwPrologue* p, const kern::BnGradSums& b, size_t wsf) {
        kern::dwconv3x3_backward_fused_cuda(ex, s, x.h(), dy.h(), w.h(), dx.h(), dw.f(), ws.f(), wsf, false, nullptr,
                                            kern::kDwFusedMaxBlocks, p, &b);
    };
    SF_EXPECT_ERROR(run(nullptr, bng, fws), "needs a train-mode prologue");
    kern::DwPrologue eval = pro;
    eval.eval = true;
    eval.eps = 1e-5;
    SF_EXPECT_ERROR(run(&eval, bng, fws), "needs a train-mode prologue");
    SF_EXPECT_ERROR(run(&pro, bng, fws - 1), "with the BN-backward epilogue", "need");
    kern::BnGradSums bad = bng;
    bad.x = x2.h();
    SF_EXPECT_ERROR(run(&pro, bad, fws), "bng->x must be x");
    bad = bng;
    bad.act = Act::Relu;
    SF_EXPECT_ERROR(run(&pro, bad, fws), "must be the prologue's activation");
    bad = bng;
    bad.mean = V(4);
    SF_EXPECT_ERROR(run(&pro, bad, fws), "must be the prologue's");
    bad = bng;
    bad.coef = V(7);  // overlaps dbeta
    SF_EXPECT_ERROR(run(&pro, bad, fws), "bng->coef must not alias bng->dbeta");
    bad = bng;
    bad.dgamma = dw.f();
    SF_EXPECT_ERROR(run(&pro, bad, fws), "bng->dgamma must not alias dw");
    bad = bng;
    bad.dbeta = nullptr;
    SF_EXPECT_ERROR(run(&pro, bad, fws), "bng->dbeta");
}

// bn_act_backward_dx with the coefficients bn_act_backward_stats leaves: bitwise bn_act_backward's dx, and
// dgamma, dbeta untouched; bn_act_backward_finalize on the statistics pass's own partials: bitwise its
// dgamma, dbeta and coefficients. Every activation, both row batches, a few shapes.
TEST(KernelsBnActGpu, DxPassAndFinalizeAloneAreBitwiseTheBackwards) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 12900;
    for (const auto& rc : {std::pair<size_t, int>{1000, 24}, {37, 64}, {5000, 8}})
        for (Act act : {Act::Silu, Act::Relu, Act::None})
            for (int rb : {1, 4}) {
                const size_t rows = rc.first, c = static_cast<size_t>(rc.second), n = rows * c;
                const std::string what = std::to_string(rows) + "x" + std::to_string(c) + " " + kern::act_name(act) +
                                         " row batch " + std::to_string(rb);
                const size_t bws = kern::bn_act_workspace_floats(rows, rc.second);
                const size_t coff = kern::bn_act_backward_coef_offset(rows, rc.second);
                Dev x(n * 2), dy(n * 2), dxa(n * 2), dxb(n * 2), v(12 * c * 4), wa(bws * 4), wb(bws * 4);
                auto V = [&](int i) { return v.f() + static_cast<size_t>(i) * c; };
                upload_bf16(x.h(), bn_input(rows, c, seed += 10));
                upload_bf16(dy.h(), bf16_exact(sftest::random_uniform(n, seed + 2, -1, 1)));
                upload(V(0), to_floats(sftest::random_uniform(c, seed + 3, 0.5, 1.5)));
                upload(V(1), to_floats(sftest::random_uniform(c, seed + 4, -0.8, 0.8)));
                upload(V(2), to_floats(sftest::random_uniform(c, seed + 5, -1, 1)));
                upload(V(3), to_floats(sftest::random_uniform(c, seed + 6, 0.5, 2)));
                const std::vector<float> d0 = to_floats(sftest::random_uniform(c, seed + 7, -3, 3));
                for (int i : {4, 5, 6, 7, 8, 9}) upload(V(i), d0);
                SF_CUDA_CHECK(cudaDeviceSynchronize());
                kern::bn_act_backward(ex, act, rows, rc.second, x.h(), dy.h(), V(0), V(1), V(2), V(3), dxa.h(), V(4),
                                      V(5), wa.f(), bws, rb);
                kern::bn_act_backward_stats(ex, act, rows, rc.second, x.h(), dy.h(), V(0), V(1), V(2), V(3), V(6),
                                            V(7), wb.f(), bws, rb);
                kern::bn_act_backward_dx(ex, act, rows, rc.second, x.h(), dy.h(), V(0), V(1), V(2), V(3),
                                         wb.f() + coff, dxb.h(), rb);
                // The finalize alone on the statistics pass's partials (2 * chunks * C at the workspace's start).
                const int chunks = kern::bn_act_plan(rows, rc.second, true).chunks;
                kern::bn_act_backward_finalize(ex, rows, rc.second, chunks, wb.f(), V(8), V(9), V(10));
                ctx.synchronize();
                EXPECT_TRUE(bitwise(download_bf16(dxb.h(), n), download_bf16(dxa.h(), n), what + ": dx"));
                EXPECT_TRUE(bitwise(download(V(6), 2 * c), download(V(4), 2 * c), what + ": dgamma, dbeta"));
                EXPECT_TRUE(bitwise(download(V(8), 2 * c), download(V(6), 2 * c), what + ": the finalize's sums"));
                EXPECT_TRUE(bitwise(download(V(10), 2 * c), download(wb.f() + coff, 2 * c), what + ": coef"));
                EXPECT_FALSE(bitwise(download(V(4), c), d0, what + ": dgamma changed"));
            }
    Dev x(64 * 8 * 2), dx(64 * 8 * 2), v(4 * 8 * 4);
    SF_EXPECT_ERROR(kern::bn_act_backward_dx(ex, Act::Silu, 64, 8, x.h(), x.h(), v.f(), v.f(), v.f(), v.f(), nullptr,
                                             dx.h()),
                    "coef");
    SF_EXPECT_ERROR(kern::bn_act_backward_finalize(ex, 64, 8, 4, v.f(), v.f(), v.f() + 8, v.f() + 16),
                    "must not alias the partials");
}

}  // namespace
