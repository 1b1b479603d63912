// The tensor-core pointwise conv's fused backward (kernels/pwconv_cuda.h, kernels/pwconv_bwd_fused.cu): dx and
// dw from one pass, exact on small integers against an fp64 reference (independent of every kernel), bit for
// bit the separate dgrad and wgrad (pwconv_backward_data_cuda, pwconv_backward_filter_cuda) in every mode the
// step can ask for (plain, the BN-backward prologue with each activation, the SiLU prologue on x, both;
// overwrite and accumulate), never writing past dx; its refusals.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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

// Every shape the kernel takes (cin, cout in {32, 64, 128}, cin * cout <= 8192) at row counts ending mid-step
// and on a step, one of them with chunks of several steps (1,057 steps in 1,024 chunks).
std::vector<Case> fused_cases() {
    return {{1, 5, 13, 32, 64}, {2, 3, 16, 64, 32},  {1, 7, 11, 64, 128}, {1, 4, 17, 128, 64},  {1, 9, 9, 32, 32},
            {1, 2, 16, 64, 64}, {1, 3, 21, 32, 128}, {1, 5, 7, 128, 32},  {2, 130, 130, 32, 32}};
}

// x (rows, cin), dy and the BN input (rows, cout), w, two dx (rows + a guard row), two dw, the BN vectors of
// both sides, two workspaces (the fused kernel's, and the separate wgrad's beside it).
struct FusedRig {
    Case k;
    rt::Arena arena{"pwconv_fused_bwd_test", rt::MemKind::Device};
    size_t o_x, o_dy, o_xbn, o_w, o_dx, o_dx2, o_dw, o_dw2, o_vx, o_vd, o_ws, o_ws2;
    size_t wsn;
    explicit FusedRig(const Case& kc) : k(kc) {
        const size_t rows = rows_of(k);
        wsn = kern::pwconv_backward_fused_workspace_floats(shape_of(k));
        auto bf = [&](size_t n, const char* what) { return arena.reserve(n * 2, 256, what); };
        o_x = bf(rows * k.cin, "x");
        o_dy = bf(rows * k.cout, "dy");
        o_xbn = bf(rows * k.cout, "x_bn");
        o_w = bf(static_cast<size_t>(k.cout) * k.cin, "w");
        o_dx = bf((rows + 1) * k.cin, "dx");
        o_dx2 = bf((rows + 1) * k.cin, "dx2");
        o_dw = arena.reserve(nw() * 4, 256, "dw");
        o_dw2 = arena.reserve(nw() * 4, 256, "dw2");
        o_vx = arena.reserve(4 * static_cast<size_t>(k.cin) * 4, 256, "x-side vectors");
        o_vd = arena.reserve(6 * static_cast<size_t>(k.cout) * 4, 256, "dy-side vectors");
        o_ws = arena.reserve(wsn * 4, 256, "workspace");
        o_ws2 = arena.reserve(wsn * 4, 256, "workspace 2");
        arena.allocate();
        arena.seal();
    }
    kern::bf16* B(size_t o) { return arena.ptr<kern::bf16>(o); }
    float* F(size_t o) { return arena.ptr<float>(o); }
    float* VX(int i) { return F(o_vx) + static_cast<size_t>(i) * k.cin; }   // gamma, beta, mean, invstd
    float* VD(int i) { return F(o_vd) + static_cast<size_t>(i) * k.cout; }  // gamma, beta, mean, invstd, coef (2)
    size_t nw() const { return static_cast<size_t>(k.cout) * k.cin; }
    size_t nx() const { return rows_of(k) * k.cin; }
    void set_dx(size_t o, const std::vector<float>& v) { set_guarded(B(o), v, nx(), k.cin); }
    std::vector<float> dx(size_t o, const std::string& what) { return read_guarded(B(o), nx(), k.cin, what); }
    // The x side's prologue (the producer's BN + act) and the dy side's BN backward (act, its input x_bn, coef), on
    // the rig's vectors.
    kern::DwPrologue prologue(Act act) {
        kern::DwPrologue p;
        p.act = act;
        p.gamma = VX(0);
        p.beta = VX(1);
        p.mean = VX(2);
        p.invstd = VX(3);
        return p;
    }
    kern::DwBnBackward bn_backward(Act act, const float* coef) {
        kern::DwBnBackward b;
        b.act = act;
        b.x = B(o_xbn);
        b.gamma = VD(0);
        b.beta = VD(1);
        b.mean = VD(2);
        b.invstd = VD(3);
        b.coef = coef;
        return b;
    }
};

TEST(KernelsPwconvFusedBwdGpu, SmallIntegersAreExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 12100;
    for (const Case& k : fused_cases()) {
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
        // dx: at most 64 nonzero dy per row, |dy| <= 2, |w| <= 1, |dx0| <= 100: every sum an integer of magnitude
        // <= 228, exact in bf16. dw: |dy|, |x| <= 2, every partial sum an integer below 2^24.
        std::vector<float> dy = bf16_exact(sftest::random_ints(rows * co, seed++, -2, 2));
        for (size_t r = 0; r < rows; ++r)
            for (size_t o = 64; o < co; ++o) dy[r * co + o] = 0.0f;
        const std::vector<float> x = bf16_exact(sftest::random_ints(rows * ci, seed++, -2, 2));
        const std::vector<float> w = bf16_exact(sftest::random_ints(co * ci, seed++, -1, 1));
        const std::vector<float> dx0 = bf16_exact(sftest::random_ints(rows * ci, seed++, -100, 100));
        FusedRig rig(k);
        upload_bf16(rig.B(rig.o_x), x);
        upload_bf16(rig.B(rig.o_dy), dy);
        upload_bf16(rig.B(rig.o_w), w);
        for (const bool acc : {false, true}) {
            const kern::PwWgradPlan p = kern::pwconv_wgrad_plan(shape_of(k));
            const std::string what = name_of(k) + (acc ? " accumulate" : " overwrite") + " (" +
                                     std::to_string(p.chunks) + " chunks of " + std::to_string(p.steps) + " steps)";
            rig.set_dx(rig.o_dx, acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
            upload(rig.F(rig.o_dw), std::vector<float>(rig.nw(), 0.25f));
            kern::pwconv_backward_fused_cuda(ctx.exec(), shape_of(k), rig.B(rig.o_x), rig.B(rig.o_dy), rig.B(rig.o_w),
                                             rig.B(rig.o_dx), rig.F(rig.o_dw), acc, rig.F(rig.o_ws), rig.wsn);
            ctx.synchronize();
            std::vector<float> dx_ref(rows * ci), dw_ref(co * ci, 0.25f);
            for (size_t r = 0; r < rows; ++r)
                for (size_t i = 0; i < ci; ++i) {
                    double s = acc ? dx0[r * ci + i] : 0.0;
                    for (size_t o = 0; o < co; ++o) s += static_cast<double>(dy[r * co + o]) * w[o * ci + i];
                    dx_ref[r * ci + i] = static_cast<float>(s);
                }
            for (size_t o = 0; o < co; ++o)
                for (size_t i = 0; i < ci; ++i) {
                    double s = 0.25;
                    for (size_t r = 0; r < rows; ++r) s += static_cast<double>(dy[r * co + o]) * x[r * ci + i];
                    dw_ref[o * ci + i] = static_cast<float>(s);
                }
            EXPECT_TRUE(bitwise(rig.dx(rig.o_dx, what), dx_ref, what + " dx"));
            EXPECT_TRUE(bitwise(download(rig.F(rig.o_dw), rig.nw()), dw_ref, what + " dw"));
        }
    }
}

// Random values through every mode: the fused pass against the dgrad and the wgrad run apart, bit for bit.
TEST(KernelsPwconvFusedBwdGpu, BitwiseTheSeparateDgradAndWgrad) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 12200;
    struct Mode {
        bool pro;
        bool bnb;
        Act act;  // the BN-backward prologue's
        bool acc;
    };
    const Mode modes[] = {{false, false, Act::None, false}, {false, true, Act::Silu, true},
                          {false, true, Act::None, false},  {false, true, Act::Relu, true},
                          {true, false, Act::None, true},   {true, true, Act::Silu, false}};
    std::vector<Case> cases = fused_cases();
    cases.pop_back();  // the long case: its chunks are the exact test's
    for (const Case& k : cases) {
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
        FusedRig rig(k);
        std::vector<double> xv = sftest::random_uniform(rows * ci, seed++, -1, 1);
        for (size_t i = 0; i < xv.size(); ++i) xv[i] += (i % ci) % 5 - 2.0;  // channel offsets
        upload_bf16(rig.B(rig.o_x), bf16_exact(xv));
        upload_bf16(rig.B(rig.o_dy), bf16_exact(sftest::random_uniform(rows * co, seed++, -1, 1)));
        upload_bf16(rig.B(rig.o_xbn), bf16_exact(sftest::random_uniform(rows * co, seed++, -2, 2)));
        upload_bf16(rig.B(rig.o_w), bf16_exact(sftest::random_uniform(co * ci, seed++, -1, 1)));
        upload(rig.VX(0), to_floats(sftest::random_uniform(ci, seed++, 0.5, 1.5)));   // gamma
        upload(rig.VX(1), to_floats(sftest::random_uniform(ci, seed++, -0.8, 0.8)));  // beta
        upload(rig.VX(2), to_floats(sftest::random_uniform(ci, seed++, -2.5, 2.5)));  // mean
        upload(rig.VX(3), to_floats(sftest::random_uniform(ci, seed++, 0.5, 2.0)));   // invstd
        upload(rig.VD(0), to_floats(sftest::random_uniform(co, seed++, 0.5, 1.5)));
        upload(rig.VD(1), to_floats(sftest::random_uniform(co, seed++, -0.8, 0.8)));
        upload(rig.VD(2), to_floats(sftest::random_uniform(co, seed++, -0.5, 0.5)));
        upload(rig.VD(3), to_floats(sftest::random_uniform(co, seed++, 0.5, 2.0)));
        upload(rig.VD(4), to_floats(sftest::random_uniform(2 * co, seed++, -0.3, 0.3)));  // coef: mean(g), mean(g xhat)
        const std::vector<float> dx0 = bf16_exact(sftest::random_uniform(rows * ci, seed++, -4, 4));
        const std::vector<float> dw0 = to_floats(sftest::random_uniform(rig.nw(), seed++, -1, 1));
        for (const Mode& m : modes) {
            const kern::DwPrologue pro = rig.prologue(Act::Silu);
            const kern::DwBnBackward bnb = rig.bn_backward(m.act, rig.VD(4));
            const kern::DwPrologue* pp = m.pro ? &pro : nullptr;
            const kern::DwBnBackward* pb = m.bnb ? &bnb : nullptr;
            const std::string what = name_of(k) + (m.pro ? " x-prologue" : "") +
                                     (m.bnb ? std::string(" dy-prologue ") + kern::act_name(m.act) : "") +
                                     (m.acc ? " accumulate" : " overwrite");
            for (size_t o : {rig.o_dx, rig.o_dx2}) rig.set_dx(o, m.acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
            upload(rig.F(rig.o_dw), dw0);
            upload(rig.F(rig.o_dw2), dw0);
            kern::pwconv_backward_fused_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_dy), rig.B(rig.o_w),
                                             rig.B(rig.o_dx), rig.F(rig.o_dw), m.acc, rig.F(rig.o_ws), rig.wsn, pp, pb);
            kern::pwconv_backward_data_cuda(ex, shape_of(k), rig.B(rig.o_dy), rig.B(rig.o_w), rig.B(rig.o_dx2), m.acc,
                                            pb);
            kern::pwconv_backward_filter_cuda(ex, shape_of(k), rig.B(rig.o_x), rig.B(rig.o_dy), rig.F(rig.o_dw2),
                                              rig.F(rig.o_ws2), rig.wsn, pp, pb);
            ctx.synchronize();
            EXPECT_TRUE(bitwise(rig.dx(rig.o_dx, what), rig.dx(rig.o_dx2, what + " (dgrad)"), what + " dx"));
            EXPECT_TRUE(
                bitwise(download(rig.F(rig.o_dw), rig.nw()), download(rig.F(rig.o_dw2), rig.nw()), what + " dw"));
        }
    }
}

// The producer BN's backward reductions in the fused pass's epilogue (kern::BnGradSums, the LiteBlock project's and
// the DSConv pointwise conv's under --pw-bn-grad): dx and dw bitwise the separate dgrad's (with the same epilogue)
// and wgrad's; dgamma, dbeta (+=, from non-zero values) and the coefficients against an fp64 reference over the
// stored dx and against the separate dgrad's epilogue (another chunking: within 1e-5 of the magnitudes' sum); a
// second run bitwise equal. Modes: the x prologue being that BN (fuse_dw_pw: x is the BN's input) or not (x a stored
// activation, the BN's input apart), the dy side plain or through the BN-backward prologue (none, SiLU), overwrite
// and accumulate.
TEST(KernelsPwconvFusedBwdGpu, BnGradEpilogueMatchesTheDgradsAndTheReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    using Dev = sftest::DeviceBuffer;
    struct Mode {
        bool pro;
        bool bnb;
        Act act;  // the BN-backward prologue's
        bool acc;
    };
    const Mode modes[] = {{false, false, Act::None, false},
                          {true, true, Act::None, false},
                          {false, true, Act::Silu, true},
                          {true, false, Act::None, true}};
    std::vector<Case> cases = fused_cases();
    cases.pop_back();
    uint64_t seed = 12400;
    int combo = 0;
    for (const Case& k : cases) {
        const Mode& m = modes[combo++ % 4];
        const kern::ConvShape s = shape_of(k);
        const size_t rows = rows_of(k), ci = static_cast<size_t>(k.cin), co = static_cast<size_t>(k.cout);
        const std::string what = name_of(k) + (m.pro ? " x-prologue" : "") +
                                 (m.bnb ? std::string(" dy-prologue ") + kern::act_name(m.act) : "") +
                                 (m.acc ? " accumulate" : " overwrite");
        FusedRig rig(k);
        const size_t fws = kern::pwconv_backward_fused_workspace_floats(s, true);
        const size_t sws = std::max({kern::pwconv_dgrad_workspace_floats(s), kern::pwconv_wgrad_workspace_floats(s),
                                     kern::bn_act_workspace_floats(rows, k.cin)});
        EXPECT_EQ(fws, kern::pwconv_wgrad_workspace_floats(s) + 2 * kern::pwconv_wgrad_plan(s).chunks * ci) << what;
        Dev wf(fws * 4), wsep(sws * 4), xp(rows * ci * 2), v(10 * ci * 4);
        auto V = [&](int i) { return v.f() + static_cast<size_t>(i) * ci; };
        // The producer BN: its input xp, gamma VX(0), beta VX(1), batch statistics VX(2), VX(3) (running ones V(8),
        // V(9)); the fused pass's dgamma, dbeta, coef V(0..3); the separate dgrad's V(4..7).
        const std::vector<float> xpf = sftest::bn_input(rows, ci, seed += 10);
        upload_bf16(xp.h(), xpf);
        upload_bf16(rig.B(rig.o_x), bf16_exact(sftest::random_uniform(rows * ci, seed + 1, -1, 1)));
        upload_bf16(rig.B(rig.o_dy), bf16_exact(sftest::random_uniform(rows * co, seed + 2, -1, 1)));
        upload_bf16(rig.B(rig.o_xbn), bf16_exact(sftest::random_uniform(rows * co, seed + 3, -2, 2)));
        upload_bf16(rig.B(rig.o_w), bf16_exact(sftest::random_uniform(co * ci, seed + 4, -1, 1)));
        const std::vector<float> gamma = to_floats(sftest::random_uniform(ci, seed + 5, 0.5, 1.5));
        const std::vector<float> beta = to_floats(sftest::random_uniform(ci, seed + 6, -0.8, 0.8));
        upload(rig.VX(0), gamma);
        upload(rig.VX(1), beta);
        upload(V(8), std::vector<float>(ci, 0.0f));
        upload(V(9), std::vector<float>(ci, 1.0f));
        for (int i = 0; i < 4; ++i)
            upload(rig.VD(i), to_floats(sftest::random_uniform(co, seed + 7 + i, i == 3 ? 0.5 : -0.5, 1.5)));
        upload(rig.VD(4), to_floats(sftest::random_uniform(2 * co, seed + 11, -0.3, 0.3)));
        const std::vector<float> d0 = to_floats(sftest::random_uniform(ci, seed + 12, -3, 3));
        for (int i : {0, 1, 4, 5}) upload(V(i), d0);
        const std::vector<float> dx0 = bf16_exact(sftest::random_uniform(rows * ci, seed + 13, -1, 1));
        for (size_t o : {rig.o_dx, rig.o_dx2}) rig.set_dx(o, m.acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
        const std::vector<float> dw0 = to_floats(sftest::random_uniform(rig.nw(), seed + 14, -1, 1));
        upload(rig.F(rig.o_dw), dw0);
        upload(rig.F(rig.o_dw2), dw0);
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        kern::bn_stats_train(ex, rows, k.cin, xp.h(), rig.VX(2), rig.VX(3), V(8), V(9), kMomentum, kEps, wsep.f(), sws);
        const kern::DwPrologue pro = rig.prologue(Act::Silu);
        const kern::DwBnBackward bnb = rig.bn_backward(m.act, rig.VD(4));
        const kern::DwPrologue* pp = m.pro ? &pro : nullptr;
        const kern::DwBnBackward* pb = m.bnb ? &bnb : nullptr;
        // With the prologue, x is the BN's input itself (fuse_dw_pw); without, a stored activation.
        const kern::bf16* x = m.pro ? xp.h() : rig.B(rig.o_x);
        const kern::BnGradSums fused{Act::Silu, xp.h(), rig.VX(0), rig.VX(1), rig.VX(2), rig.VX(3), V(0), V(1), V(2)};
        const kern::BnGradSums apart{Act::Silu, xp.h(), rig.VX(0), rig.VX(1), rig.VX(2), rig.VX(3), V(4), V(5), V(6)};
        ASSERT_TRUE(kern::pwconv_backward_fused_supported(s, pp, pb, &fused)) << what;
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {
            if (run == 1) {
                rig.set_dx(rig.o_dx, m.acc ? dx0 : std::vector<float>(rig.nx(), kSentinel));
                upload(rig.F(rig.o_dw), dw0);
                for (int i : {0, 1}) upload(V(i), d0);
                SF_CUDA_CHECK(cudaDeviceSynchronize());
            }
            kern::pwconv_backward_fused_cuda(ex, s, x, rig.B(rig.o_dy), rig.B(rig.o_w), rig.B(rig.o_dx),
                                             rig.F(rig.o_dw), m.acc, wf.f(), fws, pp, pb, &fused);
            ctx.synchronize();
            const std::vector<float> got = download(V(0), 4 * ci);  // dgamma, dbeta, coef
            if (run == 0)
                first = got;
            else
                EXPECT_TRUE(bitwise(got, first, what + ": a second run"));
        }
        kern::pwconv_backward_data_cuda(ex, s, rig.B(rig.o_dy), rig.B(rig.o_w), rig.B(rig.o_dx2), m.acc, pb, &apart,
                                        wsep.f(), sws);
        kern::pwconv_backward_filter_cuda(ex, s, x, rig.B(rig.o_dy), rig.F(rig.o_dw2), wsep.f(), sws, pp, pb);
        ctx.synchronize();
        const std::vector<float> dx = rig.dx(rig.o_dx, what);
        EXPECT_TRUE(bitwise(dx, rig.dx(rig.o_dx2, what + " (dgrad)"), what + ": dx"));
        EXPECT_TRUE(bitwise(download(rig.F(rig.o_dw), rig.nw()), download(rig.F(rig.o_dw2), rig.nw()), what + ": dw"));
        const sftest::BnGradRef r = sftest::bn_grad_ref(Act::Silu, rows, ci, xpf, dx, gamma, beta,
                                                        download(rig.VX(2), ci), download(rig.VX(3), ci));
        sftest::expect_bn_grad_near(first, download(V(4), 4 * ci), r, d0, rows, ci, what);
        double mag = 0.0;
        for (double mg : r.mg) mag += mg;
        EXPECT_GT(mag, 0.0) << what;  // not the sums of a zero gradient
    }
}

TEST(KernelsPwconvFusedBwdGpu, BadInputsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const Case k{1, 8, 8, 64, 64};
    const kern::ConvShape s = shape_of(k);
    FusedRig rig(k);
    const kern::bf16* x = rig.B(rig.o_x);
    const kern::bf16* dy = rig.B(rig.o_dy);
    const kern::bf16* w = rig.B(rig.o_w);
    kern::bf16* dx = rig.B(rig.o_dx);
    float* dw = rig.F(rig.o_dw);
    float* ws = rig.F(rig.o_ws);
    const size_t need = rig.wsn;
    const char* op = "pwconv_backward_fused_cuda";
    EXPECT_EQ(need, kern::pwconv_wgrad_workspace_floats(s));
    const std::string need_text = "need " + std::to_string(need);
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, ws, need - 1), op,
                    need_text.c_str());
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, nullptr, need),
                    "workspace must be a non-null");
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, rig.B(rig.o_dy), dw, false, ws, need),
                    "dx must not alias x, dy or w");
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, ws, false, ws, need),
                    "dw must not alias x, dy, w, dx or the workspace");
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false,
                                                     reinterpret_cast<float*>(rig.B(rig.o_dx)), need),
                    "must not alias");
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(rt::Exec::cpu(), s, x, dy, w, dx, dw, false, ws, need), op,
                    "called with a");
    // Shapes and prologues it does not take, named; pwconv's own refusal passed on.
    kern::ConvShape wide = s;
    wide.cin = 256;
    EXPECT_FALSE(kern::pwconv_backward_fused_supported(wide));
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, wide, x, dy, w, dx, dw, false, ws, need), "cin * cout <= 8192",
                    "cin=256 cout=64");
    kern::ConvShape odd = s;
    odd.cin = 48;
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, odd, x, dy, w, dx, dw, false, ws, need),
                    "pwconv: unsupported shape", "cin=48");
    kern::ConvShape three = s;
    three.cin = 96;
    EXPECT_NE(kern::pwconv_backward_fused_refusal(three).find("32, 64 or 128"), std::string::npos);
    kern::DwPrologue pro = rig.prologue(Act::Relu);
    EXPECT_FALSE(kern::pwconv_backward_fused_supported(s, &pro));
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, ws, need, &pro), "SiLU only",
                    "relu");
    pro.act = Act::Silu;
    pro.invstd = dw;
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, ws, need, &pro),
                    "must not alias the prologue invstd");
    const kern::DwBnBackward bnb = rig.bn_backward(Act::None, ws);
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, ws, need, nullptr, &bnb),
                    "dx, dw and the workspace must not overlap the BN coef");
    // The BN-backward epilogue: SiLU only, not with a ReLU dy side, the prologue's BN if both, its workspace.
    sftest::DeviceBuffer eo(4 * 64 * sizeof(float));  // the epilogue's dgamma, dbeta (cin each) and coef (2 cin)
    float* outs = eo.f();
    kern::BnGradSums bng{Act::Silu, rig.B(rig.o_xbn), rig.VX(0), rig.VX(1), rig.VX(2), rig.VX(3),
                         outs,      outs + 64,        outs + 128};
    const size_t need_bn = kern::pwconv_backward_fused_workspace_floats(s, true);
    EXPECT_EQ(need_bn, need + 2 * static_cast<size_t>(kern::pwconv_wgrad_plan(s).chunks) * 64);
    const std::string need_bn_text = "need " + std::to_string(need_bn);
    SF_EXPECT_ERROR(kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, ws, need, nullptr, nullptr, &bng),
                    need_bn_text.c_str());
    bng.act = Act::Relu;
    EXPECT_FALSE(kern::pwconv_backward_fused_supported(s, nullptr, nullptr, &bng));
    SF_EXPECT_ERROR(
        kern::pwconv_backward_fused_cuda(ex, s, x, dy, w, dx, dw, false, ws, need_bn, nullptr, nullptr, &bng),
        "epilogue is built for SiLU only", "relu");
    bng.act = Act::Silu;
    const kern::DwBnBackward relu_dy = rig.bn_backward(Act::Relu, rig.VD(4));
    EXPECT_NE(kern::pwconv_backward_fused_refusal(s, nullptr, &relu_dy, &bng).find("ReLU BN-backward prologue"),
              std::string::npos);
    kern::DwPrologue other = rig.prologue(Act::Silu);
    other.mean = rig.VX(1);  // another BatchNorm's statistics
    EXPECT_NE(kern::pwconv_backward_fused_refusal(s, &other, nullptr, &bng).find("must be the same BatchNorm"),
              std::string::npos);
    const kern::DwPrologue same = rig.prologue(Act::Silu);
    EXPECT_TRUE(kern::pwconv_backward_fused_supported(s, &same, nullptr, &bng));
}

}  // namespace
