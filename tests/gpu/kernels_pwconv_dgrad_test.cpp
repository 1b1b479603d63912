// The tensor-core pointwise conv's backward-data (kernels/pwconv_cuda.h): dx = dy * w, overwrite and
// accumulate, exact on small integers, within rounding of the fp64 reference otherwise, no write past dx;
// with the BN-backward prologue bitwise the plain dgrad of the dx bn_act_backward stored (SiLU, ReLU, none;
// both modes); with the BN-backward epilogue (the preceding BN's reductions from the dx it stores) dx
// bitwise the plain dgrad's and the reductions against fp64 and bn_act_backward_stats; the refusals. The
// forward: tests/gpu/kernels_pwconv_test.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/gpu/pwconv_test_util.h"
#include "tests/support/bn_grad_ref.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using namespace pwtest;

// dx[r][i] = sum_o dy[r][o] * w[o][i] in fp64 (+ dx0 when accumulating).
std::vector<double> dgrad_reference(const Case& k, const std::vector<float>& dy, const std::vector<float>& w,
                                    const std::vector<float>* dx0) {
    const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
    std::vector<double> dx(rows * ci);
    for (size_t r = 0; r < rows; ++r)
        for (size_t i = 0; i < ci; ++i) {
            double s = dx0 ? (*dx0)[r * ci + i] : 0.0;
            for (size_t o = 0; o < co; ++o) s += static_cast<double>(dy[r * co + o]) * w[o * ci + i];
            dx[r * ci + i] = s;
        }
    return dx;
}

// Buffers of one dgrad case: dy and the BN input x_bn (rows, cout), w, two dx (rows + a guard row, cin), the
// BN vectors and a workspace.
struct DgradRig {
    Case k;
    rt::Arena arena{"pwconv_dgrad_test", rt::MemKind::Device};
    size_t o_dy, o_xbn, o_dyx, o_w, o_dx, o_dx2, o_v, o_ws;
    size_t wsn;
    explicit DgradRig(const Case& kc) : k(kc) {
        const size_t rows = rows_of(k);
        wsn = kern::bn_act_workspace_floats(std::max<size_t>(rows, 2), k.cout);
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        o_dy = bf(rows * k.cout, "dy");
        o_xbn = bf(rows * k.cout, "x_bn");
        o_dyx = bf(rows * k.cout, "dy of the conv output");
        o_w = bf(static_cast<size_t>(k.cout) * k.cin, "w");
        o_dx = bf((rows + 1) * k.cin, "dx");
        o_dx2 = bf((rows + 1) * k.cin, "dx2");
        o_v = arena.reserve(8 * static_cast<size_t>(k.cout) * 4, 256, "BN vectors");
        o_ws = arena.reserve(wsn * 4, 256, "workspace");
        arena.allocate();
        arena.seal();
    }
    kern::bf16* B(size_t o) { return arena.ptr<kern::bf16>(o); }
    float* V(int i) { return arena.ptr<float>(o_v) + static_cast<size_t>(i) * k.cout; }  // 8 C-vectors
    size_t nx() const { return rows_of(k) * k.cin; }
    // dx := v followed by a guard row of the sentinel.
    void set_dx(size_t o, const std::vector<float>& v) { set_guarded(B(o), v, nx(), k.cin); }
    std::vector<float> dx(size_t o, const std::string& what) { return read_guarded(B(o), nx(), k.cin, what); }
};

float* arena_ws(DgradRig& rig) { return rig.arena.ptr<float>(rig.o_ws); }

TEST(KernelsPwconvGpu, DgradSmallIntegersAreExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9500;
    for (const Case& k : kCases) {
        // Every partial sum an integer within [-256, 256] (at most 128 nonzero dy per row, |dy| <= 2, |w| <= 1).
        const size_t rows = rows_of(k), co = static_cast<size_t>(k.cout);
        std::vector<float> dy = bf16_exact(sftest::random_ints(rows * co, seed++, -2, 2));
        for (size_t r = 0; r < rows; ++r)
            for (size_t o = 64; o < co; ++o) dy[r * co + o] = 0.0f;
        const std::vector<float> w = bf16_exact(sftest::random_ints(co * k.cin, seed++, -1, 1));
        const std::vector<float> dx0 = bf16_exact(sftest::random_ints(rows * k.cin, seed++, -100, 100));
        DgradRig rig(k);
        upload_bf16(rig.B(rig.o_dy), dy);
        upload_bf16(rig.B(rig.o_w), w);
        for (const bool acc : {false, true}) {
            const std::string what = name_of(k) + (acc ? " accumulate" : " overwrite");
            rig.set_dx(rig.o_dx, acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
            kern::pwconv_backward_data_cuda(ctx.exec(), shape_of(k), rig.B(rig.o_dy), rig.B(rig.o_w), rig.B(rig.o_dx), acc);
            ctx.synchronize();
            const std::vector<double> ref = dgrad_reference(k, dy, w, acc ? &dx0 : nullptr);
            EXPECT_TRUE(bitwise(rig.dx(rig.o_dx, what), std::vector<float>(ref.begin(), ref.end()), what));
        }
    }
}

TEST(KernelsPwconvGpu, DgradMatchesTheFp64Reference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9600;
    for (const Case& k : kCases) {
        const size_t rows = rows_of(k), co = static_cast<size_t>(k.cout);
        const std::vector<float> dy = bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1));
        const std::vector<float> w = bf16_exact(sftest::random_uniform(co * k.cin, seed++, -1, 1));
        const std::vector<float> dx0 = bf16_exact(sftest::random_uniform(rows * k.cin, seed++, -4, 4));
        DgradRig rig(k);
        upload_bf16(rig.B(rig.o_dy), dy);
        upload_bf16(rig.B(rig.o_w), w);
        for (const bool acc : {false, true}) {
            const std::string what = name_of(k) + (acc ? " accumulate" : " overwrite");
            rig.set_dx(rig.o_dx, acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
            kern::pwconv_backward_data_cuda(ctx.exec(), shape_of(k), rig.B(rig.o_dy), rig.B(rig.o_w), rig.B(rig.o_dx), acc);
            ctx.synchronize();
            const std::vector<double> ref = dgrad_reference(k, dy, w, acc ? &dx0 : nullptr);
            const std::vector<float> dx = rig.dx(rig.o_dx, what);
            EXPECT_TRUE(within_rounding(dx, ref, 1e-6 * k.cout + (acc ? 1e-6 * 4 : 0.0), what));
        }
    }
}

// A = bn_act_backward stored the conv output's gradient and the plain dgrad read it; B = bn_act_backward_stats
// then the dgrad forming it on load.
TEST(KernelsPwconvGpu, DgradBnPrologueEqualsTheStoredGradientBitForBit) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 9700;
    for (const Case& k : kCases) {
        const size_t rows = rows_of(k), co = static_cast<size_t>(k.cout);
        if (rows < 2) continue;
        for (Act act : {Act::Silu, Act::Relu, Act::None}) {
            const std::string base = name_of(k) + " " + kern::act_name(act);
            // x_bn with per-channel offsets (statistics far from 0), dy, the BN's parameters.
            const std::vector<double> u = sftest::random_uniform(rows * co, seed++, -1, 1);
            const std::vector<double> off = sftest::random_uniform(co, seed++, -2, 2);
            std::vector<double> xbn(rows * co);
            for (size_t i = 0; i < xbn.size(); ++i) xbn[i] = off[i % co] + u[i];
            DgradRig rig(k);
            upload_bf16(rig.B(rig.o_xbn), bf16_exact(xbn));
            upload_bf16(rig.B(rig.o_dy), bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1)));
            upload_bf16(rig.B(rig.o_w), bf16_exact(sftest::random_uniform(co * k.cin, seed++, -0.5, 0.5)));
            upload(rig.V(0), to_floats(sftest::random_uniform(co, seed++, 0.5, 1.5)));   // gamma
            upload(rig.V(1), to_floats(sftest::random_uniform(co, seed++, -0.8, 0.8)));  // beta
            upload(rig.V(4), std::vector<float>(co, 0.0f));                            // running mean
            upload(rig.V(5), std::vector<float>(co, 1.0f));                            // running var
            upload(rig.V(6), std::vector<float>(co, 0.0f));                            // dgamma
            upload(rig.V(7), std::vector<float>(co, 0.0f));                            // dbeta
            float* ws = arena_ws(rig);
            kern::bn_stats_train(ex, rows, k.cout, rig.B(rig.o_xbn), rig.V(2), rig.V(3), rig.V(4), rig.V(5), 0.1,
                                 1e-5, ws, rig.wsn);
            // A: the whole BN backward, its dx stored.
            kern::bn_act_backward(ex, act, rows, k.cout, rig.B(rig.o_xbn), rig.B(rig.o_dy), rig.V(0), rig.V(1),
                                  rig.V(2), rig.V(3), rig.B(rig.o_dyx), rig.V(6), rig.V(7), ws, rig.wsn);
            const std::vector<float> dx0 = bf16_exact(sftest::random_uniform(rig.nx(), seed++, -2, 2));
            for (const bool acc : {false, true}) {
                const std::string what = base + (acc ? " accumulate" : " overwrite");
                rig.set_dx(rig.o_dx, acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
                rig.set_dx(rig.o_dx2, acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
                kern::pwconv_backward_data_cuda(ex, shape_of(k), rig.B(rig.o_dyx), rig.B(rig.o_w), rig.B(rig.o_dx), acc);
                // B: the statistics alone (their coefficients left in the workspace), then the prologue.
                kern::bn_act_backward_stats(ex, act, rows, k.cout, rig.B(rig.o_xbn), rig.B(rig.o_dy), rig.V(0),
                                            rig.V(1), rig.V(2), rig.V(3), rig.V(6), rig.V(7), ws, rig.wsn);
                kern::DwBnBackward bnb;
                bnb.act = act;
                bnb.x = rig.B(rig.o_xbn);
                bnb.gamma = rig.V(0);
                bnb.beta = rig.V(1);
                bnb.mean = rig.V(2);
                bnb.invstd = rig.V(3);
                bnb.coef = ws + kern::bn_act_backward_coef_offset(rows, k.cout);
                kern::pwconv_backward_data_cuda(ex, shape_of(k), rig.B(rig.o_dy), rig.B(rig.o_w), rig.B(rig.o_dx2), acc,
                                                &bnb);
                ctx.synchronize();
                EXPECT_TRUE(bitwise(rig.dx(rig.o_dx2, what), rig.dx(rig.o_dx, what), what));
            }
        }
    }
}

// The dgrad's BN-backward epilogue (BnGradSums): the reductions of the BN before the conv, gathered from the
// dx the dgrad stores. dx bitwise the plain dgrad's; dgamma, dbeta (+=, from nonzero values) and the two
// coefficients against an fp64 host reference of the same sums over that dx, and against
// bn_act_backward_stats run on the stored dx (another summation order), each within 1e-5 of the sum of
// the terms' magnitudes; a second run bitwise equal; both dgrad modes, SiLU / ReLU / none; the refusals.
TEST(KernelsPwconvGpu, DgradBnGradEpilogueMatchesTheStatisticsPass) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 9750;
    for (const Case& k : kCases) {
        const size_t rows = rows_of(k), co = static_cast<size_t>(k.cout), ci = static_cast<size_t>(k.cin);
        if (rows < 2) continue;
        const kern::ConvShape s = shape_of(k);
        rt::Arena arena{"pwconv_bn_grad_test", rt::MemKind::Device};
        const size_t wsn = std::max(kern::pwconv_dgrad_workspace_floats(s), kern::bn_act_workspace_floats(rows, k.cin));
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        const size_t o_dy = bf(rows * co, "dy"), o_w = bf(co * ci, "w"), o_xbn = bf(rows * ci, "x_bn");
        const size_t o_dx = bf((rows + 1) * ci, "dx"), o_dx2 = bf((rows + 1) * ci, "dx2");
        const size_t o_v = arena.reserve(12 * ci * 4, 256, "BN vectors"), o_ws = arena.reserve(wsn * 4, 256, "ws");
        arena.allocate();
        arena.seal();
        auto B = [&](size_t o) { return arena.ptr<kern::bf16>(o); };
        auto V = [&](int i) { return arena.ptr<float>(o_v) + static_cast<size_t>(i) * ci; };
        float* ws = arena.ptr<float>(o_ws);
        // The producer BN's input with per-channel offsets, its statistics, gamma and beta.
        const std::vector<float> xbnf = sftest::bn_input(rows, ci, seed);
        seed += 2;
        upload_bf16(B(o_xbn), xbnf);
        upload_bf16(B(o_dy), bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1)));
        upload_bf16(B(o_w), bf16_exact(sftest::random_uniform(co * ci, seed++, -0.5, 0.5)));
        const std::vector<float> gamma = to_floats(sftest::random_uniform(ci, seed++, 0.5, 1.5));
        const std::vector<float> beta = to_floats(sftest::random_uniform(ci, seed++, -0.8, 0.8));
        upload(V(0), gamma);
        upload(V(1), beta);
        upload(V(4), std::vector<float>(ci, 0.0f));  // running mean
        upload(V(5), std::vector<float>(ci, 1.0f));  // running var
        kern::bn_stats_train(ex, rows, k.cin, B(o_xbn), V(2), V(3), V(4), V(5), kMomentum, kEps, ws, wsn);
        ctx.synchronize();
        const std::vector<float> mean = download(V(2), ci), invstd = download(V(3), ci);
        const std::vector<float> d0 = to_floats(sftest::random_uniform(ci, seed++, -3, 3));  // dgamma, dbeta before
        const std::vector<float> dx0 = bf16_exact(sftest::random_uniform(rows * ci, seed++, -2, 2));
        auto make_bng = [&](Act act) {  // the BN of V(0..3); dgamma, dbeta into V(6), V(7), coef V(10..11)
            return kern::BnGradSums{act, B(o_xbn), V(0), V(1), V(2), V(3), V(6), V(7), V(10)};
        };
        for (Act act : {Act::Silu, Act::Relu, Act::None}) {
            for (const bool acc : {false, true}) {
                const std::string what = name_of(k) + " " + kern::act_name(act) + (acc ? " accumulate" : " overwrite");
                auto set_dx = [&](size_t o) {
                    std::vector<float> v = acc ? dx0 : std::vector<float>(rows * ci, kSentinel);
                    v.resize((rows + 1) * ci, kSentinel);
                    upload_bf16(B(o), v);
                };
                set_dx(o_dx);
                kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx), acc);
                for (int i : {6, 7, 8, 9}) upload(V(i), d0);  // dgamma, dbeta of the epilogue, then of the pass
                const kern::BnGradSums bng = make_bng(act);
                std::vector<float> first;
                for (int run = 0; run < 2; ++run) {
                    set_dx(o_dx2);
                    if (run == 1) for (int i : {6, 7}) upload(V(i), d0);
                    kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), acc, nullptr, &bng, ws, wsn);
                    ctx.synchronize();
                    std::vector<float> got = download(V(6), 2 * ci);
                    const std::vector<float> coef = download(V(10), 2 * ci);
                    got.insert(got.end(), coef.begin(), coef.end());
                    if (run == 0) first = got;
                    else EXPECT_TRUE(bitwise(got, first, what + ": a second run"));
                }
                bool intact = true, intact2 = true;
                const std::vector<float> dx =
                    sftest::strip_guard(download_bf16(B(o_dx), (rows + 1) * ci), rows * ci, kSentinel, intact);
                const std::vector<float> dx2 =
                    sftest::strip_guard(download_bf16(B(o_dx2), (rows + 1) * ci), rows * ci, kSentinel, intact2);
                EXPECT_TRUE(intact && intact2) << what << ": a dgrad wrote past the last row";
                EXPECT_TRUE(bitwise(dx2, dx, what + ": dx against the plain dgrad"));
                // The statistics pass on the stored dx: dgamma, dbeta into V(8), V(9), its coefficients in ws.
                kern::bn_act_backward_stats(ex, act, rows, k.cin, B(o_xbn), B(o_dx), V(0), V(1), V(2), V(3), V(8),
                                            V(9), ws, wsn);
                ctx.synchronize();
                std::vector<float> pass = download(V(8), 2 * ci);
                const std::vector<float> pcoef = download(ws + kern::bn_act_backward_coef_offset(rows, k.cin), 2 * ci);
                pass.insert(pass.end(), pcoef.begin(), pcoef.end());
                const sftest::BnGradRef r = sftest::bn_grad_ref(act, rows, ci, xbnf, dx, gamma, beta, mean, invstd);
                sftest::expect_bn_grad_near(first, pass, r, d0, rows, ci, what);
            }
        }
        // Refusals (before any launch).
        const kern::BnGradSums bng = make_bng(Act::None);
        SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), false, nullptr, &bng, ws,
                                                        kern::pwconv_dgrad_workspace_floats(s) - 1),
                        "workspace of", "need");
        SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), false, nullptr, &bng, nullptr, wsn),
                        "workspace");
        kern::BnGradSums alias = bng;
        alias.coef = V(7);  // overlaps dbeta
        SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), false, nullptr, &alias, ws, wsn),
                        "bng->coef must not alias bng->dbeta");
        kern::BnGradSums nox = bng;
        nox.x = nullptr;
        SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), false, nullptr, &nox, ws, wsn),
                        "bng->x");
    }
}

TEST(KernelsPwconvGpu, DgradBadInputsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const Case k{1, 8, 8, 64, 64};
    const kern::ConvShape s = shape_of(k);
    DgradRig rig(k);
    const kern::bf16* dy = rig.B(rig.o_dy);
    const kern::bf16* w = rig.B(rig.o_w);
    kern::bf16* dx = rig.B(rig.o_dx);
    const char* op = "pwconv_backward_data_cuda";
    kern::ConvShape bad = s;
    bad.cout = 40;
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, bad, dy, w, dx), "pwconv: unsupported shape", "cout=40");
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, dy, nullptr, dx), op, "w must be a non-null");
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, dy, w, rig.B(rig.o_dy)), "dx must not alias dy");
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(rt::Exec::cpu(), s, dy, w, dx), op, "called with a");
    kern::DwBnBackward good;
    good.act = Act::Silu;
    good.x = rig.B(rig.o_xbn);
    good.gamma = rig.V(0);
    good.beta = rig.V(1);
    good.mean = rig.V(2);
    good.invstd = rig.V(3);
    good.coef = rig.V(4);
    kern::DwBnBackward b = good;
    b.act = static_cast<Act>(9);
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, false, &b), "BN backward activation 9");
    b = good;
    b.coef = nullptr;
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, false, &b), "BN coef must be a non-null");
    b = good;
    b.x = dx;
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, false, &b), "dx must not alias the BN input x");
    b = good;
    b.mean = reinterpret_cast<const float*>(dx);
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, dy, w, dx, false, &b), "dx must not overlap the BN mean");
    kern::ConvShape wide = s;
    wide.h = 1;
    wide.w = 4;
    wide.cin = 32;
    wide.cout = 1024;
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, wide, dy, w, dx, false, &good),
                    "a BN-backward prologue needs cout <= 512, got 1024");
}

// The dgrad with both: the following BN's dx formed on load (DwBnBackward, activation act_b) and the
// producer BN's reductions in the epilogue (BnGradSums, act_e): the project conv of a LiteBlock under
// `--pw-bn-bwd --pw-bn-grad` (BN3 after it, BN2 before it). dx, dgamma, dbeta and the coefficients are
// bitwise those of the two alone in turn: bn_act_backward storing the conv output's gradient, then the dgrad
// with the epilogue on it. Both dgrad modes, three activation pairs; the refusal of an epilogue output
// aliasing the prologue's BN input.
TEST(KernelsPwconvGpu, DgradBnPrologueAndEpilogueTogetherAreTheirBitsInTurn) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 9800;
    for (const Case& k : kCases) {
        const size_t rows = rows_of(k), co = static_cast<size_t>(k.cout), ci = static_cast<size_t>(k.cin);
        if (rows < 2) continue;
        const kern::ConvShape s = shape_of(k);
        rt::Arena arena{"pwconv_both_test", rt::MemKind::Device};
        const size_t wsa = kern::bn_act_workspace_floats(rows, k.cout);
        const size_t wse = std::max(kern::pwconv_dgrad_workspace_floats(s), kern::bn_act_workspace_floats(rows, k.cin));
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        // (x before ahead of x after: the refusal below aliases x after with a vector that may run past its end)
        const size_t o_dy = bf(rows * co, "dy"), o_w = bf(co * ci, "w"), o_xb = bf(rows * ci, "x before");
        const size_t o_xa = bf(rows * co, "x after"), o_dyx = bf(rows * co, "conv grad");
        const size_t o_dx = bf((rows + 1) * ci, "dx"), o_dx2 = bf((rows + 1) * ci, "dx2");
        const size_t c = std::max(ci, co);
        const size_t o_v = arena.reserve(20 * c * 4, 256, "BN vectors");
        const size_t o_wa = arena.reserve(wsa * 4, 256, "ws after"), o_we = arena.reserve(wse * 4, 256, "ws epilogue");
        arena.allocate();
        arena.seal();
        auto B = [&](size_t o) { return arena.ptr<kern::bf16>(o); };
        auto V = [&](int i) { return arena.ptr<float>(o_v) + static_cast<size_t>(i) * c; };
        float* ws_a = arena.ptr<float>(o_wa);
        float* ws_e = arena.ptr<float>(o_we);
        // The BN after the conv (its input x after, vectors V(0..3), dgamma/dbeta V(4), V(5)) and the BN
        // before it (x before, V(8..11); the epilogue's dgamma, dbeta V(12), V(13), coef V(14..15); the
        // reference run's V(16), V(17), coef V(18..19)).
        upload_bf16(B(o_xa), sftest::bn_input(rows, co, seed));
        upload_bf16(B(o_xb), sftest::bn_input(rows, ci, seed + 2));
        seed += 4;
        upload_bf16(B(o_dy), bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1)));
        upload_bf16(B(o_w), bf16_exact(sftest::random_uniform(co * ci, seed++, -0.5, 0.5)));
        for (int base : {0, 8}) {
            const size_t n = base ? ci : co;
            upload(V(base), to_floats(sftest::random_uniform(n, seed++, 0.5, 1.5)));
            upload(V(base + 1), to_floats(sftest::random_uniform(n, seed++, -0.8, 0.8)));
            upload(V(base + 6), std::vector<float>(n, 0.0f));  // running mean (scratch)
            upload(V(base + 7), std::vector<float>(n, 1.0f));  // running var (scratch)
            kern::bn_stats_train(ex, rows, static_cast<int>(n), B(base ? o_xb : o_xa), V(base + 2), V(base + 3),
                                 V(base + 6), V(base + 7), kMomentum, kEps, base ? ws_e : ws_a, base ? wse : wsa);
        }
        const std::vector<float> d0 = to_floats(sftest::random_uniform(ci, seed++, -3, 3));
        const std::vector<float> dx0 = bf16_exact(sftest::random_uniform(rows * ci, seed++, -2, 2));
        const std::pair<Act, Act> pairs[] = {{Act::None, Act::Silu}, {Act::Silu, Act::Silu}, {Act::Relu, Act::None}};
        for (const auto& [act_b, act_e] : pairs) {
            for (const bool acc : {false, true}) {
                const std::string what = name_of(k) + " bnb " + kern::act_name(act_b) + ", bng " +
                                         kern::act_name(act_e) + (acc ? " accumulate" : " overwrite");
                auto set_dx = [&](size_t o) {
                    std::vector<float> v = acc ? dx0 : std::vector<float>(rows * ci, kSentinel);
                    v.resize((rows + 1) * ci, kSentinel);
                    upload_bf16(B(o), v);
                };
                for (int i : {12, 13, 16, 17}) upload(V(i), d0);
                // A: the BN after stored (bn_act_backward), then the dgrad with the epilogue on it.
                kern::bn_act_backward(ex, act_b, rows, k.cout, B(o_xa), B(o_dy), V(0), V(1), V(2), V(3), B(o_dyx),
                                      V(4), V(5), ws_a, wsa);
                set_dx(o_dx);
                const kern::BnGradSums ref{act_e, B(o_xb), V(8), V(9), V(10), V(11), V(16), V(17), V(18)};
                kern::pwconv_backward_data_cuda(ex, s, B(o_dyx), B(o_w), B(o_dx), acc, nullptr, &ref, ws_e, wse);
                // B: the coefficients of the BN after (left in ws_a by its statistics pass), then both at once.
                kern::bn_act_backward_stats(ex, act_b, rows, k.cout, B(o_xa), B(o_dy), V(0), V(1), V(2), V(3), V(4),
                                            V(5), ws_a, wsa);
                const kern::DwBnBackward bnb{act_b, B(o_xa), V(0), V(1), V(2), V(3),
                                             ws_a + kern::bn_act_backward_coef_offset(rows, k.cout)};
                const kern::BnGradSums bng{act_e, B(o_xb), V(8), V(9), V(10), V(11), V(12), V(13), V(14)};
                set_dx(o_dx2);
                kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), acc, &bnb, &bng, ws_e, wse);
                ctx.synchronize();
                bool intact = true, intact2 = true;
                const std::vector<float> dx =
                    sftest::strip_guard(download_bf16(B(o_dx), (rows + 1) * ci), rows * ci, kSentinel, intact);
                const std::vector<float> dx2 =
                    sftest::strip_guard(download_bf16(B(o_dx2), (rows + 1) * ci), rows * ci, kSentinel, intact2);
                EXPECT_TRUE(intact && intact2) << what << ": a dgrad wrote past the last row";
                EXPECT_TRUE(bitwise(dx2, dx, what + ": dx"));
                std::vector<float> both = download(V(12), 2 * ci), alone = download(V(16), 2 * ci);
                const std::vector<float> cb = download(V(14), 2 * ci), ca = download(V(18), 2 * ci);
                both.insert(both.end(), cb.begin(), cb.end());
                alone.insert(alone.end(), ca.begin(), ca.end());
                EXPECT_TRUE(bitwise(both, alone, what + ": dgamma, dbeta, coefficients"));
            }
        }
        const kern::DwBnBackward bnb{Act::None, B(o_xa), V(0), V(1), V(2), V(3), ws_a};
        const kern::BnGradSums bad{Act::None, B(o_xb), V(8), V(9), V(10), V(11), V(12), V(13),
                                   reinterpret_cast<float*>(B(o_xa))};
        SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(ex, s, B(o_dy), B(o_w), B(o_dx2), false, &bnb, &bad, ws_e, wse),
                        "bng->coef must not alias bnb->x");
    }
}

}  // namespace
