// Shared by the BatchNorm + activation kernel tests (kernels_bn_act_test.cpp, kernels_bn_act_row_batch_test.cpp):
// their inputs, one train forward + backward on the GPU (run_gpu) and with the fp32 CPU references (run_ref),
// a residual forward, and the bitwise comparison of two runs' outputs.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace bnact {

using sftest::bf16_exact;
using sftest::download;
using sftest::download_bf16;
using sftest::upload;
using sftest::upload_bf16;

constexpr double kMomentum = 0.1, kEps = 1e-5;
constexpr size_t kGuard = 64;            // bf16 elements after y and dx that must stay untouched
inline const float kSentinel = 1232.0f;  // exactly representable in bf16 (the guards are stored as bf16)

struct Inputs {
    size_t rows = 0;
    int c = 0;
    std::vector<float> x, dy;                                 // (rows, C), bf16-exact
    std::vector<float> gamma, beta, rm, rv, dgamma0, dbeta0;  // (C)
};

struct Outputs {
    std::vector<float> y, dx;  // (rows, C), from bf16
    std::vector<float> mean, invstd, rm, rv, dgamma, dbeta;
    bool guards_intact = true;
};

inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// Channel j: offset[j] + scale[j] * uniform(-1, 1), rounded to bf16.
inline Inputs random_inputs(size_t rows, int c, uint64_t seed) {
    Inputs in;
    in.rows = rows;
    in.c = c;
    const size_t n = rows * c;
    const std::vector<double> u = sftest::random_uniform(n, seed, -1, 1);
    const std::vector<double> off = sftest::random_uniform(c, seed + 1, -3, 3);
    const std::vector<double> sc = sftest::random_uniform(c, seed + 2, 0.25, 2);
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = off[i % c] + sc[i % c] * u[i];
    in.x = bf16_exact(x);
    in.dy = bf16_exact(sftest::random_uniform(n, seed + 3, -1, 1));
    in.gamma = to_float(sftest::random_uniform(c, seed + 4, 0.5, 1.5));
    in.beta = to_float(sftest::random_uniform(c, seed + 5, -0.5, 0.5));
    in.rm = to_float(sftest::random_uniform(c, seed + 6, -0.5, 0.5));
    in.rv = to_float(sftest::random_uniform(c, seed + 7, 0.5, 2));
    in.dgamma0 = to_float(sftest::random_uniform(c, seed + 8, -0.1, 0.1));
    in.dbeta0 = to_float(sftest::random_uniform(c, seed + 9, -0.1, 0.1));
    return in;
}

// Train forward then backward on the GPU; y and dx start as sentinels (dx must be overwritten).
// min_blocks: the backward's row kernels' resident blocks (kern::kBnActMinBlocks).
inline Outputs run_gpu(const rt::CudaContext& ctx, kern::Act act, const Inputs& in, int row_batch = 1,
                       int min_blocks = 1) {
    const size_t n = in.rows * in.c, c = static_cast<size_t>(in.c);
    const size_t wsn = kern::bn_act_workspace_floats(in.rows, in.c);
    rt::Arena arena("bn_act_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(n * 2, 256, "x"), o_dy = arena.reserve(n * 2, 256, "dy");
    const size_t o_y = arena.reserve((n + kGuard) * 2, 256, "y"), o_dx = arena.reserve((n + kGuard) * 2, 256, "dx");
    size_t o_vec[8];
    for (size_t& o : o_vec) o = arena.reserve(c * 4, 256, "vector");
    const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* dy = arena.ptr<kern::bf16>(o_dy);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    kern::bf16* dx = arena.ptr<kern::bf16>(o_dx);
    float* v[8];
    for (int i = 0; i < 8; ++i) v[i] = arena.ptr<float>(o_vec[i]);
    float *gamma = v[0], *beta = v[1], *mean = v[2], *invstd = v[3], *rm = v[4], *rv = v[5], *dg = v[6], *db = v[7];
    upload_bf16(x, in.x);
    upload_bf16(dy, in.dy);
    upload_bf16(y, std::vector<float>(n + kGuard, kSentinel));
    upload_bf16(dx, std::vector<float>(n + kGuard, kSentinel));
    upload(gamma, in.gamma);
    upload(beta, in.beta);
    upload(rm, in.rm);
    upload(rv, in.rv);
    upload(dg, in.dgamma0);
    upload(db, in.dbeta0);
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight; ctx's stream is separate

    const rt::Exec& ex = ctx.exec();
    kern::bn_act_forward_train(ex, act, in.rows, in.c, x, gamma, beta, y, mean, invstd, rm, rv, kMomentum, kEps,
                               arena.ptr<float>(o_ws), wsn, nullptr, row_batch);
    kern::bn_act_backward(ex, act, in.rows, in.c, x, dy, gamma, beta, mean, invstd, dx, dg, db, arena.ptr<float>(o_ws),
                          wsn, kern::BnBackwardRows(row_batch, min_blocks));
    ctx.synchronize();

    Outputs out;
    std::vector<float> yg = download_bf16(y, n + kGuard), dxg = download_bf16(dx, n + kGuard);
    for (size_t i = n; i < n + kGuard; ++i) out.guards_intact &= yg[i] == kSentinel && dxg[i] == kSentinel;
    yg.resize(n);
    dxg.resize(n);
    out.y = yg;
    out.dx = dxg;
    out.mean = download(mean, c);
    out.invstd = download(invstd, c);
    out.rm = download(rm, c);
    out.rv = download(rv, c);
    out.dgamma = download(dg, c);
    out.dbeta = download(db, c);
    return out;
}

// The same computation with the fp32 CPU references.
inline Outputs run_ref(kern::Act act, const Inputs& in) {
    const size_t n = in.rows * in.c;
    Outputs r;
    std::vector<float> z(n);
    r.mean.resize(in.c);
    r.invstd.resize(in.c);
    r.rm = in.rm;
    r.rv = in.rv;
    kern::batchnorm_forward_train_ref<float>(in.rows, in.c, in.x.data(), in.gamma.data(), in.beta.data(), z.data(),
                                             r.mean.data(), r.invstd.data(), r.rm.data(), r.rv.data(), kMomentum, kEps);
    r.y.resize(n);
    kern::act_forward_ref<float>(act, n, z.data(), r.y.data());
    std::vector<float> g(n, 0.0f);
    kern::act_backward_ref<float>(act, n, z.data(), in.dy.data(), g.data());
    r.dx.assign(n, 0.0f);
    r.dgamma = in.dgamma0;
    r.dbeta = in.dbeta0;
    kern::batchnorm_backward_ref<float>(in.rows, in.c, in.x.data(), g.data(), in.gamma.data(), r.mean.data(),
                                        r.invstd.data(), r.dx.data(), r.dgamma.data(), r.dbeta.data());
    return r;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
    size_t rows;
    int c;
};

// Every output of a forward + backward (run_gpu) the same bits in a and b.
inline void expect_bitwise_equal(const Outputs& a, const Outputs& b, const std::string& what) {
    EXPECT_TRUE(bitwise_equal(a.y, b.y)) << what << " y";
    EXPECT_TRUE(bitwise_equal(a.mean, b.mean)) << what << " mean";
    EXPECT_TRUE(bitwise_equal(a.invstd, b.invstd)) << what << " invstd";
    EXPECT_TRUE(bitwise_equal(a.rm, b.rm)) << what << " running_mean";
    EXPECT_TRUE(bitwise_equal(a.rv, b.rv)) << what << " running_var";
    EXPECT_TRUE(bitwise_equal(a.dx, b.dx)) << what << " dx";
    EXPECT_TRUE(bitwise_equal(a.dgamma, b.dgamma)) << what << " dgamma";
    EXPECT_TRUE(bitwise_equal(a.dbeta, b.dbeta)) << what << " dbeta";
}

// One forward with a residual r: in place (y holds r first) or from a separate buffer; returns y.
// Train mode uses batch statistics, eval the running ones.
inline std::vector<float> run_forward_residual(const rt::CudaContext& ctx, kern::Act act, const Inputs& in,
                                               const std::vector<float>* r, bool in_place, bool train, bool* guards,
                                               int row_batch = 1) {
    const size_t n = in.rows * in.c, c = static_cast<size_t>(in.c);
    const size_t wsn = kern::bn_act_workspace_floats(in.rows, in.c);
    rt::Arena arena("bn_act_residual_test", rt::MemKind::Device);
    const size_t o_x = arena.reserve(n * 2, 256, "x"), o_r = arena.reserve(n * 2, 256, "r");
    const size_t o_y = arena.reserve((n + kGuard) * 2, 256, "y");
    size_t o_vec[6];
    for (size_t& o : o_vec) o = arena.reserve(c * 4, 256, "vector");
    const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
    arena.allocate();
    arena.seal();
    kern::bf16* x = arena.ptr<kern::bf16>(o_x);
    kern::bf16* rb = arena.ptr<kern::bf16>(o_r);
    kern::bf16* y = arena.ptr<kern::bf16>(o_y);
    float* v[6];
    for (int i = 0; i < 6; ++i) v[i] = arena.ptr<float>(o_vec[i]);
    upload_bf16(x, in.x);
    std::vector<float> y0(n + kGuard, kSentinel);
    if (r && in_place) std::copy(r->begin(), r->end(), y0.begin());
    upload_bf16(y, y0);
    if (r && !in_place) upload_bf16(rb, *r);
    upload(v[0], in.gamma);
    upload(v[1], in.beta);
    upload(v[2], in.rm);
    upload(v[3], in.rv);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const kern::bf16* res = r ? (in_place ? y : rb) : nullptr;
    const rt::Exec& ex = ctx.exec();
    if (train)
        kern::bn_act_forward_train(ex, act, in.rows, in.c, x, v[0], v[1], y, v[4], v[5], v[2], v[3], kMomentum, kEps,
                                   arena.ptr<float>(o_ws), wsn, res, row_batch);
    else
        kern::bn_act_forward_eval(ex, act, in.rows, in.c, x, v[0], v[1], v[2], v[3], kEps, y, res, row_batch);
    ctx.synchronize();
    std::vector<float> got = download_bf16(y, n + kGuard);
    for (size_t i = n; i < n + kGuard; ++i) *guards &= got[i] == kSentinel;
    got.resize(n);
    return got;
}

}  // namespace bnact
