// The heads' 1x1 conv with its producer's BatchNorm prologue (kernels/head_conv_cuda.h, DwPrologue;
// NetShape::fuse_head_bn): the forward and the backward reading the pre-BN tensor through the prologue
// equal, bit for bit, the same kernels reading the activation the apply pass stored
// (bn_act_apply_train with batch statistics, bn_act_forward_eval with running ones): y, dx (accumulating
// and overwriting), dw and db, for ReLU (the model's), SiLU and none, Cout 1, 2, 3 and 4, Cin 64 and 24,
// a contiguous tensor and a head's 64-channel slice of four heads' rows (the prologue's vectors from the
// slice's first channel on, the other channels untouched), rows not a multiple of a block; the forward
// also against an fp64 host computation of act(bn(x)) rounded to bf16 and the fp64 dot products; bad
// prologues refused with their documented errors. With kern::HeadBnGrad the backward also gathers the prologue
// BN's backward reductions from the dx it stores: dx, dw and db unchanged bit for bit, the sums against an fp64
// reference and the statistics pass (BnGradSumsMatchTheReferenceAndTheStatisticsPass).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/head_conv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/bn_grad_ref.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using kern::Act;
using sftest::bitwise;
using sftest::DeviceBuffer;
using sftest::download;
using sftest::download_bf16;
using sftest::upload;
using sftest::upload_bf16;

constexpr double kEps = 1e-5;

struct Case {
    size_t rows;
    int cin, cout, pitch, at;  // x's rows pitch apart, the conv reading channels [at, at + cin)
    Act act;
    bool eval;
};

std::string name_of(const Case& k) {
    return "rows " + std::to_string(k.rows) + " cin " + std::to_string(k.cin) + " cout " + std::to_string(k.cout) +
           " pitch " + std::to_string(k.pitch) + " at " + std::to_string(k.at) + " " + kern::act_name(k.act) +
           (k.eval ? " eval" : " train");
}

struct Inputs {
    std::vector<float> x;                  // (rows, pitch) the producer's pre-BN output, bf16-exact
    std::vector<float> gamma, beta, m, v;  // (pitch): m, v = batch mean / invstd (train) or running mean / var
    std::vector<float> w, b, dy, dx0, dw0, db0;
};

Inputs make_inputs(const Case& k, uint64_t seed) {
    Inputs in;
    const size_t c = static_cast<size_t>(k.pitch), nx = k.rows * c, nw = static_cast<size_t>(k.cout) * k.cin;
    const std::vector<double> u = sftest::random_uniform(nx, seed, -1, 1);
    const std::vector<double> off = sftest::random_uniform(c, seed + 1, -2, 2);
    std::vector<double> x(nx);
    for (size_t i = 0; i < nx; ++i) x[i] = off[i % c] + 1.5 * u[i];
    in.x = sftest::bf16_exact(x);
    using sftest::to_floats;
    in.gamma = to_floats(sftest::random_uniform(c, seed + 2, 0.5, 1.5));
    in.beta = to_floats(sftest::random_uniform(c, seed + 3, -0.8, 0.8));
    in.m = to_floats(sftest::random_uniform(c, seed + 4, -2, 2));
    in.v = to_floats(sftest::random_uniform(c, seed + 5, 0.4, 2.5));
    in.w = to_floats(sftest::random_uniform(nw, seed + 6, -0.2, 0.2));
    in.b = to_floats(sftest::random_uniform(k.cout, seed + 7, -1, 1));
    in.dy = to_floats(sftest::random_uniform(k.rows * k.cout, seed + 8, -1e-2, 1e-2));
    in.dx0 = sftest::bf16_exact(sftest::random_uniform(nx, seed + 9, -1e-2, 1e-2));
    in.dw0 = to_floats(sftest::random_uniform(nw, seed + 10, -1, 1));
    in.db0 = to_floats(sftest::random_uniform(k.cout, seed + 11, -1, 1));
    return in;
}

struct Outputs {
    std::vector<float> y, dx, dw, db, dx_over;  // dx_over: the backward with accumulate = false
};

// One path: the kernels reading `src` (prologue: the pre-BN x through it; else the stored activation).
Outputs run_path(const rt::Exec& ex, const Case& k, const Inputs& in, const kern::bf16* src,
                 const kern::DwPrologue* pro) {
    const size_t nx = k.rows * k.pitch, nw = static_cast<size_t>(k.cout) * k.cin, ny = k.rows * k.cout;
    const size_t wsn = kern::head_conv_workspace_floats(k.rows, k.cin, k.cout);
    DeviceBuffer y(ny * 4), dy(ny * 4), w(nw * 4), b(k.cout * 4), dx(nx * 2), dx2(nx * 2), dw(nw * 4), db(k.cout * 4),
        dw2(nw * 4), db2(k.cout * 4), ws(wsn * 4);
    upload(dy.f(), in.dy);
    upload(w.f(), in.w);
    upload(b.f(), in.b);
    upload_bf16(dx.h(), in.dx0);
    upload_bf16(dx2.h(), in.dx0);
    upload(dw.f(), in.dw0);
    upload(db.f(), in.db0);
    upload(dw2.f(), in.dw0);
    upload(db2.f(), in.db0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const kern::bf16* x = src + k.at;
    kern::head_conv_forward_cuda(ex, k.rows, k.cin, k.cout, x, w.f(), b.f(), y.f(), k.pitch, pro);
    kern::head_conv_backward_cuda(ex, k.rows, k.cin, k.cout, x, dy.f(), w.f(), dx.h() + k.at, dw.f(), db.f(), ws.f(),
                                  wsn, true, k.pitch, pro);
    kern::head_conv_backward_cuda(ex, k.rows, k.cin, k.cout, x, dy.f(), w.f(), dx2.h() + k.at, dw2.f(), db2.f(), ws.f(),
                                  wsn, false, k.pitch, pro);
    SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
    Outputs o;
    o.y = download(y.f(), ny);
    o.dx = download_bf16(dx.h(), nx);
    o.dx_over = download_bf16(dx2.h(), nx);
    o.dw = download(dw.f(), nw);
    o.db = download(db.f(), k.cout);
    EXPECT_TRUE(bitwise(o.dw, download(dw2.f(), nw), "dw, accumulating dx or not")) << name_of(k);
    EXPECT_TRUE(bitwise(o.db, download(db2.f(), k.cout), "db, accumulating dx or not")) << name_of(k);
    return o;
}

// fp64 host reference of the forward: z = bf16(act((x - m) * gamma * inv + beta)), y = b + z . w.
std::vector<double> host_forward(const Case& k, const Inputs& in) {
    std::vector<double> y(k.rows * k.cout);
    for (size_t r = 0; r < k.rows; ++r) {
        for (int o = 0; o < k.cout; ++o) {
            double s = in.b[o];
            for (int j = 0; j < k.cin; ++j) {
                const size_t ch = static_cast<size_t>(k.at + j);
                const double inv = k.eval ? 1.0 / std::sqrt(static_cast<double>(in.v[ch]) + kEps) : in.v[ch];
                double z = (in.x[r * k.pitch + ch] - in.m[ch]) * in.gamma[ch] * inv + in.beta[ch];
                if (k.act == Act::Relu) z = z > 0 ? z : 0;
                if (k.act == Act::Silu) z = z / (1 + std::exp(-z));
                s += kern::round_bf16(static_cast<float>(z)) * static_cast<double>(in.w[o * k.cin + j]);
            }
            y[r * k.cout + o] = s;
        }
    }
    return y;
}

void check_case(const rt::CudaContext& ctx, const Case& k, uint64_t seed) {
    SCOPED_TRACE(name_of(k));
    const Inputs in = make_inputs(k, seed);
    const size_t nx = k.rows * k.pitch, c = static_cast<size_t>(k.pitch);
    DeviceBuffer x(nx * 2), z(nx * 2), vec(4 * c * 4);
    upload_bf16(x.h(), in.x);
    upload(vec.f(), in.gamma);
    upload(vec.f() + c, in.beta);
    upload(vec.f() + 2 * c, in.m);
    upload(vec.f() + 3 * c, in.v);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const rt::Exec& ex = ctx.exec();
    const float *gamma = vec.f(), *beta = vec.f() + c, *m = vec.f() + 2 * c, *v = vec.f() + 3 * c;
    // A: the apply pass over the whole rows, then the plain kernels on its output.
    if (k.eval)
        kern::bn_act_forward_eval(ex, k.act, k.rows, k.pitch, x.h(), gamma, beta, m, v, kEps, z.h());
    else
        kern::bn_act_apply_train(ex, k.act, k.rows, k.pitch, x.h(), gamma, beta, m, v, z.h());
    const Outputs a = run_path(ex, k, in, z.h(), nullptr);
    // B: the prologue, its vectors from the slice's first channel on.
    kern::DwPrologue pro;
    pro.act = k.act;
    pro.gamma = gamma + k.at;
    pro.beta = beta + k.at;
    pro.mean = m + k.at;
    pro.invstd = v + k.at;
    pro.eval = k.eval;
    pro.eps = kEps;
    const Outputs b = run_path(ex, k, in, x.h(), &pro);
    EXPECT_TRUE(bitwise(a.y, b.y, "y"));
    EXPECT_TRUE(bitwise(a.dx, b.dx, "dx (accumulated)"));
    EXPECT_TRUE(bitwise(a.dx_over, b.dx_over, "dx (overwritten)"));
    EXPECT_TRUE(bitwise(a.dw, b.dw, "dw"));
    EXPECT_TRUE(bitwise(a.db, b.db, "db"));
    // The channels outside the slice untouched by the backward (B's dx still holds dx0 there).
    bool foreign = true;
    for (size_t r = 0; r < k.rows; ++r)
        for (int j = 0; j < k.pitch; ++j)
            if (j < k.at || j >= k.at + k.cin) foreign = foreign && b.dx_over[r * c + j] == in.dx0[r * c + j];
    EXPECT_TRUE(foreign) << "dx outside the slice changed";
    // Independent: the fp64 forward of bf16(act(bn(x))).
    const std::vector<double> ref = host_forward(k, in);
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(b.y), ref, 1e-5, "y against the fp64 host forward"));
}

TEST(KernelsHeadConvPrologueGpu, EqualsTheKernelsOnTheStoredActivation) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 100;
    for (bool eval : {false, true}) {
        // The model's heads: rows of 64 channels, and a head's slice of the merged heads' 256.
        check_case(ctx, {2 * 16 * 32, 64, 1, 64, 0, Act::Relu, eval}, seed++);
        check_case(ctx, {2 * 16 * 32, 64, 4, 256, 128, Act::Relu, eval}, seed++);
        check_case(ctx, {2 * 16 * 32, 64, 2, 256, 192, Act::Relu, eval}, seed++);
        // Other activations, Cin and Cout; rows not a multiple of 32.
        check_case(ctx, {77, 24, 3, 24, 0, Act::Silu, eval}, seed++);
        check_case(ctx, {77, 24, 2, 40, 16, Act::None, eval}, seed++);
    }
}

// A ReLU prologue whose four vectors (cin floats each) lie one after another in vec: for the refusal tests.
kern::DwPrologue relu_prologue(const DeviceBuffer& vec, int cin) {
    kern::DwPrologue pro;
    pro.act = Act::Relu;
    pro.gamma = vec.f();
    pro.beta = vec.f() + cin;
    pro.mean = vec.f() + 2 * cin;
    pro.invstd = vec.f() + 3 * cin;
    return pro;
}

TEST(KernelsHeadConvPrologueGpu, BadProloguesAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const size_t rows = 64;
    const int cin = 16, cout = 2;
    const size_t wsn = kern::head_conv_workspace_floats(rows, cin, cout);
    DeviceBuffer x(rows * cin * 2), dx(rows * cin * 2), w(cout * cin * 4), b(cout * 4), y(rows * cout * 4),
        dy(rows * cout * 4), dw(cout * cin * 4), db(cout * 4), ws(wsn * 4), vec(4 * cin * 4);
    const kern::DwPrologue pro = relu_prologue(vec, cin);
    kern::DwPrologue bad = pro;
    bad.gamma = nullptr;
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(ex, rows, cin, cout, x.h(), w.f(), b.f(), y.f(), 0, &bad),
                    "head_conv_forward_cuda", "prologue gamma");
    bad = pro;
    bad.act = static_cast<Act>(7);
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(ex, rows, cin, cout, x.h(), dy.f(), w.f(), dx.h(), dw.f(), db.f(),
                                                  ws.f(), wsn, true, 0, &bad),
                    "head_conv_backward_cuda", "prologue activation");
    bad = pro;
    bad.eval = true;
    bad.eps = 0;
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(ex, rows, cin, cout, x.h(), w.f(), b.f(), y.f(), 0, &bad),
                    "head_conv_forward_cuda", "eps > 0");
    // An output over a prologue vector: y over gamma (forward), db over mean (backward).
    bad = pro;
    bad.gamma = y.f();
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(ex, rows, cin, cout, x.h(), w.f(), b.f(), y.f(), 0, &bad),
                    "head_conv_forward_cuda", "must not alias the prologue gamma");
    bad = pro;
    bad.mean = db.f();
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(ex, rows, cin, cout, x.h(), dy.f(), w.f(), dx.h(), dw.f(), db.f(),
                                                  ws.f(), wsn, true, 0, &bad),
                    "head_conv_backward_cuda", "must not alias the prologue mean");
}

// The prologue BN's backward reductions in the backward (kern::HeadBnGrad; NetShape::fuse_head_bn): the merged
// heads' case, four convs (Cout 1, 1, 4, 2) over 64-channel slices of one 256-channel BN, their partials finalized
// once over the 256 channels; a single head over its own 64-channel BN, accumulating into dx; SiLU and none on a
// 24-channel BN over rows that span the 1,024 chunks unevenly. dx, dw and db bitwise those of the backward without
// the sums; dgamma, dbeta (+=, from non-zero values) and the coefficients against the fp64 reference over the stored
// dx and against bn_act_backward_stats on it (sftest::expect_bn_grad_near: within 1e-5 of the magnitudes' sum); a
// second run bitwise equal.
TEST(KernelsHeadConvPrologueGpu, BnGradSumsMatchTheReferenceAndTheStatisticsPass) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    struct BnCase {
        size_t rows;
        int cin;
        std::vector<int> couts;  // one conv per entry, over channels [h * cin, (h + 1) * cin)
        Act act;
        bool acc;
    };
    const BnCase cases[] = {{2 * 16 * 32, 64, {1, 1, 4, 2}, Act::Relu, false},
                            {1000, 64, {2}, Act::Relu, true},
                            {40000 + 7, 24, {3}, Act::Silu, false},
                            {333, 24, {1, 2}, Act::None, true}};
    uint64_t seed = 900;
    for (const BnCase& k : cases) {
        const int heads = static_cast<int>(k.couts.size()), c = heads * k.cin;
        const size_t rows = k.rows, cc = static_cast<size_t>(c), nx = rows * cc;
        const std::string what = "rows " + std::to_string(rows) + " cin " + std::to_string(k.cin) + " heads " +
                                 std::to_string(heads) + " " + kern::act_name(k.act) +
                                 (k.acc ? " accumulate" : " overwrite");
        SCOPED_TRACE(what);
        const size_t partn = kern::head_conv_bn_grad_floats(rows, c);
        const int chunks = kern::head_conv_chunks(rows);
        EXPECT_EQ(partn, 2 * static_cast<size_t>(chunks) * cc);
        EXPECT_EQ(chunks, std::min<int>(static_cast<int>((rows + 31) / 32), kern::kHeadConvChunks));
        size_t wsn = kern::bn_act_workspace_floats(rows, c);
        for (int co : k.couts) wsn = std::max(wsn, kern::head_conv_workspace_floats(rows, k.cin, co));
        DeviceBuffer x(nx * 2), dxa(nx * 2), dxb(nx * 2), part(partn * 4), ws(wsn * 4), v(12 * cc * 4);
        auto V = [&](int i) { return v.f() + static_cast<size_t>(i) * cc; };
        // gamma V(0), beta V(1), batch statistics V(2), V(3), running ones V(4), V(5); the kernel's dgamma, dbeta,
        // coef V(6..9); the statistics pass's dgamma, dbeta V(10), V(11).
        const std::vector<float> xf = sftest::bn_input(rows, cc, seed += 20);
        upload_bf16(x.h(), xf);
        const std::vector<float> gamma = sftest::to_floats(sftest::random_uniform(cc, seed + 1, 0.5, 1.5));
        const std::vector<float> beta = sftest::to_floats(sftest::random_uniform(cc, seed + 2, -0.8, 0.8));
        upload(V(0), gamma);
        upload(V(1), beta);
        upload(V(4), std::vector<float>(cc, 0.0f));
        upload(V(5), std::vector<float>(cc, 1.0f));
        const std::vector<float> d0 = sftest::to_floats(sftest::random_uniform(cc, seed + 3, -3, 3));
        const std::vector<float> dx0 = sftest::bf16_exact(sftest::random_uniform(nx, seed + 4, -1, 1));
        struct Conv {
            int cout;
            std::vector<float> w, dy, dw0, db0;
            DeviceBuffer wd, dyd, dwa, dba, dwb, dbb;
            Conv(int co, size_t nw, size_t rows)
                : cout(co), wd(nw * 4), dyd(rows * co * 4), dwa(nw * 4), dba(co * 4), dwb(nw * 4), dbb(co * 4) {}
        };
        std::vector<std::unique_ptr<Conv>> convs;
        for (int h = 0; h < heads; ++h) {
            const int co = k.couts[static_cast<size_t>(h)];
            const size_t nw = static_cast<size_t>(co) * k.cin;
            convs.push_back(std::make_unique<Conv>(co, nw, rows));
            Conv& cv = *convs.back();
            cv.w = sftest::to_floats(sftest::random_uniform(nw, seed + 10 + h, -0.3, 0.3));
            cv.dy = sftest::to_floats(sftest::random_uniform(rows * co, seed + 20 + h, -1, 1));
            cv.dw0 = sftest::to_floats(sftest::random_uniform(nw, seed + 30 + h, -1, 1));
            cv.db0 = sftest::to_floats(sftest::random_uniform(co, seed + 40 + h, -1, 1));
            upload(cv.wd.f(), cv.w);
            upload(cv.dyd.f(), cv.dy);
        }
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        kern::bn_stats_train(ex, rows, c, x.h(), V(2), V(3), V(4), V(5), 0.1, kEps, ws.f(), wsn);
        // Each conv's prologue: the BN's vectors from its first channel on.
        auto prologue = [&](int h) {
            kern::DwPrologue pro;
            pro.act = k.act;
            pro.gamma = V(0) + h * k.cin;
            pro.beta = V(1) + h * k.cin;
            pro.mean = V(2) + h * k.cin;
            pro.invstd = V(3) + h * k.cin;
            return pro;
        };
        // Runs the convs into dx (with the sums into part when `sums`), fresh dx, dw, db each time.
        auto run = [&](DeviceBuffer& dx, bool sums) {
            upload_bf16(dx.h(), k.acc ? dx0 : std::vector<float>(nx, 7.0f));
            for (const std::unique_ptr<Conv>& cv : convs) {
                upload(sums ? cv->dwa.f() : cv->dwb.f(), cv->dw0);
                upload(sums ? cv->dba.f() : cv->dbb.f(), cv->db0);
            }
            for (int i : {6, 7}) upload(V(i), d0);
            SF_CUDA_CHECK(cudaDeviceSynchronize());
            for (int h = 0; h < heads; ++h) {
                Conv& cv = *convs[static_cast<size_t>(h)];
                const kern::DwPrologue pro = prologue(h);
                const kern::HeadBnGrad g{part.f(), c, h * k.cin};
                kern::head_conv_backward_cuda(ex, rows, k.cin, cv.cout, x.h() + h * k.cin, cv.dyd.f(), cv.wd.f(),
                                              dx.h() + h * k.cin, sums ? cv.dwa.f() : cv.dwb.f(),
                                              sums ? cv.dba.f() : cv.dbb.f(), ws.f(), wsn, k.acc, c, &pro,
                                              sums ? &g : nullptr);
            }
            if (sums) kern::bn_act_backward_finalize(ex, rows, c, chunks, part.f(), V(6), V(7), V(8));
            ctx.synchronize();
        };
        run(dxa, true);
        const std::vector<float> got = download(V(6), 4 * cc);  // dgamma, dbeta, coef
        run(dxa, true);
        EXPECT_TRUE(bitwise(download(V(6), 4 * cc), got, "a second run"));
        run(dxb, false);
        const std::vector<float> dx = download_bf16(dxa.h(), nx);
        EXPECT_TRUE(bitwise(dx, download_bf16(dxb.h(), nx), "dx with and without the sums"));
        for (const std::unique_ptr<Conv>& cv : convs) {
            const size_t nw = static_cast<size_t>(cv->cout) * k.cin;
            EXPECT_TRUE(bitwise(download(cv->dwa.f(), nw), download(cv->dwb.f(), nw), "dw with and without the sums"));
            EXPECT_TRUE(bitwise(download(cv->dba.f(), cv->cout), download(cv->dbb.f(), cv->cout), "db"));
        }
        // The statistics pass over the same stored dx.
        for (int i : {10, 11}) upload(V(i), d0);
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        kern::bn_act_backward_stats(ex, k.act, rows, c, x.h(), dxa.h(), V(0), V(1), V(2), V(3), V(10), V(11), ws.f(),
                                    wsn);
        ctx.synchronize();
        std::vector<float> pass = download(V(10), 2 * cc);
        const std::vector<float> coef = download(ws.f() + kern::bn_act_backward_coef_offset(rows, c), 2 * cc);
        pass.insert(pass.end(), coef.begin(), coef.end());
        const sftest::BnGradRef r =
            sftest::bn_grad_ref(k.act, rows, cc, xf, dx, gamma, beta, download(V(2), cc), download(V(3), cc));
        sftest::expect_bn_grad_near(got, pass, r, d0, rows, cc, what);
        double mag = 0.0;
        for (double mg : r.mg) mag += mg;
        EXPECT_GT(mag, 0.0);  // not the sums of a zero gradient
        if (k.acc) continue;  // kern::ConvPolicy::head_bn_dx: the conv2s overwrite (their dx is the BN's dy)
        // The backward storing nothing (dx null): the same sums, dw and db, bit for bit.
        for (const std::unique_ptr<Conv>& cv : convs) {
            upload(cv->dwb.f(), cv->dw0);
            upload(cv->dbb.f(), cv->db0);
        }
        for (int i : {6, 7}) upload(V(i), d0);
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<kern::HeadDxSource> src;
        for (int h = 0; h < heads; ++h) {
            Conv& cv = *convs[static_cast<size_t>(h)];
            const kern::DwPrologue pro = prologue(h);
            const kern::HeadBnGrad g{part.f(), c, h * k.cin};
            kern::head_conv_backward_cuda(ex, rows, k.cin, cv.cout, x.h() + h * k.cin, cv.dyd.f(), cv.wd.f(), nullptr,
                                          cv.dwb.f(), cv.dbb.f(), ws.f(), wsn, false, c, &pro, &g);
            src.push_back({h * k.cin, k.cin, cv.cout, cv.dyd.f(), cv.wd.f()});
        }
        kern::bn_act_backward_finalize(ex, rows, c, chunks, part.f(), V(6), V(7), V(8));
        ctx.synchronize();
        EXPECT_TRUE(bitwise(download(V(6), 4 * cc), got, "the sums with dx not stored"));
        for (const std::unique_ptr<Conv>& cv : convs) {
            const size_t nw = static_cast<size_t>(cv->cout) * k.cin;
            EXPECT_TRUE(bitwise(download(cv->dwb.f(), nw), download(cv->dwa.f(), nw), "dw with dx not stored"));
            EXPECT_TRUE(bitwise(download(cv->dbb.f(), cv->cout), download(cv->dba.f(), cv->cout), "db, dx not stored"));
        }
        // The BN's dx from the logits' gradient: bitwise the dx pass on the dx the conv2s stored (dxa).
        upload_bf16(dxb.h(), std::vector<float>(nx, 7.0f));
        DeviceBuffer dxc(nx * 2);
        upload_bf16(dxc.h(), std::vector<float>(nx, -7.0f));
        SF_CUDA_CHECK(cudaDeviceSynchronize());
        kern::bn_act_backward_dx(ex, k.act, rows, c, x.h(), dxa.h(), V(0), V(1), V(2), V(3), V(8), dxb.h());
        kern::head_bn_dx_cuda(ex, k.act, rows, c, src.data(), heads, x.h(), V(0), V(1), V(2), V(3), V(8), dxc.h());
        ctx.synchronize();
        const std::vector<float> want = download_bf16(dxb.h(), nx), from_logits = download_bf16(dxc.h(), nx);
        EXPECT_TRUE(bitwise(from_logits, want, "the BN's dx from the logits' gradient against the dx pass"));
        size_t nonzero = 0;
        for (float e : want) nonzero += e != 0.0f;
        EXPECT_GT(nonzero, nx / 4);  // a gradient, not zeros compared with zeros
    }
}

TEST(KernelsHeadConvPrologueGpu, BadBnGradSumsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const size_t rows = 64;
    const int cin = 16, cout = 2;
    const size_t wsn = kern::head_conv_workspace_floats(rows, cin, cout),
                 partn = kern::head_conv_bn_grad_floats(rows, 32);
    DeviceBuffer x(rows * cin * 2), dx(rows * cin * 2), w(cout * cin * 4), dy(rows * cout * 4), dw(cout * cin * 4),
        db(cout * 4), ws(wsn * 4), vec(4 * cin * 4), part(partn * 4);
    const kern::DwPrologue pro = relu_prologue(vec, cin);
    const char* op = "head_conv_backward_cuda";
    auto backward = [&](const kern::DwPrologue* p, const kern::HeadBnGrad& g) {
        kern::head_conv_backward_cuda(ex, rows, cin, cout, x.h(), dy.f(), w.f(), dx.h(), dw.f(), db.f(), ws.f(), wsn,
                                      false, 0, p, &g);
    };
    const kern::HeadBnGrad good{part.f(), 32, 16};
    SF_EXPECT_ERROR(backward(nullptr, good), op, "the prologue BN's, in train mode");
    kern::DwPrologue eval = pro;
    eval.eval = true;
    eval.eps = kEps;
    SF_EXPECT_ERROR(backward(&eval, good), op, "the prologue BN's, in train mode");
    SF_EXPECT_ERROR(backward(&pro, kern::HeadBnGrad{part.f(), 32, 17}), op, "[17, 33) must lie within the BN's 32");
    SF_EXPECT_ERROR(backward(&pro, kern::HeadBnGrad{part.f(), 0, 0}), op, "must lie within the BN's 0");
    SF_EXPECT_ERROR(backward(&pro, kern::HeadBnGrad{nullptr, 32, 0}), op, "bng->part");
    SF_EXPECT_ERROR(backward(&pro, kern::HeadBnGrad{reinterpret_cast<float*>(dx.h()), 16, 0}), op,
                    "partials must not alias");
    SF_EXPECT_ERROR(backward(&pro, kern::HeadBnGrad{ws.f(), 16, 0}), op, "partials must not alias");
    kern::DwPrologue over = pro;
    over.mean = part.f();
    SF_EXPECT_ERROR(backward(&over, good), op, "must not alias the prologue mean");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(ex, rows, cin, cout, x.h(), dy.f(), w.f(), nullptr, dw.f(), db.f(),
                                                  ws.f(), wsn, false, 0, &pro, nullptr),
                    op, "dx may be null only with the BN-backward sums");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(ex, rows, cin, cout, x.h(), dy.f(), w.f(), nullptr, dw.f(), db.f(),
                                                  ws.f(), wsn, true, 0, &pro, &good),
                    op, "accumulate false");
    SF_EXPECT_ERROR(kern::head_conv_bn_grad_floats(rows, 0), "channels must be positive");
    EXPECT_EQ(kern::head_conv_chunks(0), 0);
    EXPECT_EQ(kern::head_conv_bn_grad_floats(0, 8), 0u);
}

// head_bn_dx_cuda's documented refusals.
TEST(KernelsHeadConvPrologueGpu, BadHeadBnDxIsRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    const size_t rows = 64;
    const int c = 32, cout = 2;
    DeviceBuffer x(rows * c * 2), dx(rows * c * 2), w(2 * cout * 16 * 4), dy(2 * rows * cout * 4), vec(6 * c * 4);
    auto V = [&](int i) { return vec.f() + static_cast<size_t>(i) * c; };
    kern::HeadDxSource src[2] = {{0, 16, cout, dy.f(), w.f()}, {16, 16, cout, dy.f() + rows * cout, w.f() + 32}};
    const char* op = "head_bn_dx_cuda";
    auto dx_of = [&](size_t r, int ch, const kern::HeadDxSource* s, int n, const kern::bf16* xp, kern::bf16* out,
                     const float* coef) {
        kern::head_bn_dx_cuda(ex, Act::Relu, r, ch, s, n, xp, V(0), V(1), V(2), V(3), coef, out);
    };
    SF_EXPECT_ERROR(dx_of(rows, 12, src, 2, x.h(), dx.h(), V(4)), op, "channels must be a multiple of 8");
    SF_EXPECT_ERROR(dx_of(rows, 264, src, 2, x.h(), dx.h(), V(4)), op, "channels must be a multiple of 8");
    SF_EXPECT_ERROR(dx_of(1, c, src, 2, x.h(), dx.h(), V(4)), op, "rows must be at least 2");
    SF_EXPECT_ERROR(dx_of(rows, c, src, 0, x.h(), dx.h(), V(4)), op, "nheads must lie in [1, 4]");
    SF_EXPECT_ERROR(dx_of(rows, c, src, 5, x.h(), dx.h(), V(4)), op, "nheads must lie in [1, 4]");
    SF_EXPECT_ERROR(dx_of(rows, c, src, 1, x.h(), dx.h(), V(4)), op, "must tile them");
    SF_EXPECT_ERROR(dx_of(rows, c, src + 1, 1, x.h(), dx.h(), V(4)), op, "head 0's channels [16, 32)");
    kern::HeadDxSource bad[2] = {src[0], src[1]};
    bad[1].cout = 9;
    SF_EXPECT_ERROR(dx_of(rows, c, bad, 2, x.h(), dx.h(), V(4)), op, "head 1's cout must lie in [1, 8]");
    bad[1] = src[1];
    bad[1].dy = nullptr;
    SF_EXPECT_ERROR(dx_of(rows, c, bad, 2, x.h(), dx.h(), V(4)), op, "heads[].dy");
    bad[1] = src[1];
    bad[1].w = reinterpret_cast<const float*>(dx.h());
    SF_EXPECT_ERROR(dx_of(rows, c, bad, 2, x.h(), dx.h(), V(4)), op, "must not overlap dx");
    SF_EXPECT_ERROR(dx_of(rows, c, src, 2, x.h(), x.h(), V(4)), op, "dx must not overlap x");
    SF_EXPECT_ERROR(dx_of(rows, c, src, 2, x.h(), dx.h(), reinterpret_cast<const float*>(dx.h())), op,
                    "coef must not overlap dx");
    SF_EXPECT_ERROR(dx_of(rows, c, src, 2, x.h(), dx.h(), nullptr), op, "coef");
}

}  // namespace
