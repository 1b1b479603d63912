// CUDA head 1x1 conv (kernels/head_conv.cu) vs conv_forward_ref / conv_backward_data_ref /
// conv_backward_filter_ref (kernels/conv_ref.cpp, k = 1, bias) on the same bf16-rounded x:
//   - forward y (fp32): rel. L2 <= 1e-5 on random data (only the fp32 summation order differs),
//     exact on small integers; nothing written past y.
//   - backward dx (bf16 +=, values ~1e-3): within one bf16 ulp of the rounded reference (+1e-9
//     absolute: the fp32 sums may differ by an ulp and cross a rounding boundary) and rel.
//     L2 <= 4e-3; dw, db (fp32 +=): rel. L2 <= 1e-5; all exact on small integers; dx, dw, db start
//     non-zero; two runs bitwise identical.
// Shapes: the model's heads (rows = N*64*128, Cin 64, Cout 1/2/4), a large batch (the backward's
// chunk cap), and small ones (Cin 8, 24; Cout 3, 5, 8; rows fewer than a block).
// A slice of wider rows (pitch > Cin, NetShape::merge_heads): the same bits as the contiguous run, the
// other channels of x's and dx's rows untouched (bad pitches: tests/kernels_eltwise_cuda_launch_test.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/head_conv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::bf16;
using sftest::close_elementwise, sftest::close_rel_l2, sftest::to_double;

constexpr size_t kGuard = 64;  // sentinels after y and dx
const float kSentinel = -1232.0f;  // exact in bf16 (-1234 is not: it reads back as -1232)

struct DevMem {
    void* p = nullptr;
    explicit DevMem(size_t bytes) { SF_CUDA_CHECK(cudaMalloc(&p, bytes)); }
    ~DevMem() { cudaFree(p); }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
};

void upload(void* dst, const std::vector<float>& v, bool as_bf16) {
    if (as_bf16) {
        std::vector<bf16> h(v.size());
        for (size_t i = 0; i < v.size(); ++i) h[i] = kern::float_to_bf16(v[i]);
        SF_CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    } else {
        SF_CUDA_CHECK(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
}

std::vector<float> download(const void* src, size_t n, bool as_bf16) {
    std::vector<float> out(n);
    if (as_bf16) {
        std::vector<bf16> h(n);
        SF_CUDA_CHECK(cudaMemcpy(h.data(), src, n * sizeof(bf16), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; ++i) out[i] = kern::bf16_to_float(h[i]);
    } else {
        SF_CUDA_CHECK(cudaMemcpy(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    return out;
}

std::vector<float> with_guard(std::vector<float> v) {
    v.resize(v.size() + kGuard, kSentinel);
    return v;
}

// Splits v into its first n values and reports whether the rest are all sentinels.
std::vector<float> strip_guard(std::vector<float> v, size_t n, bool* intact) {
    for (size_t i = n; i < v.size(); ++i) *intact &= v[i] == kSentinel;
    v.resize(n);
    return v;
}

struct Inputs {
    size_t rows = 0;
    int cin = 0, cout = 0;
    std::vector<float> x, w, b, dy, dx0, dw0, db0;
};

struct Outputs {
    std::vector<float> y, dx, dw, db;
    bool guards_intact = true;
};

std::vector<float> values(const std::vector<double>& v, bool bf16_round) {
    std::vector<float> out(v.begin(), v.end());
    if (bf16_round)
        for (float& x : out) x = kern::round_bf16(x);
    return out;
}

Inputs random_inputs(size_t rows, int cin, int cout, uint64_t seed) {
    Inputs in;
    in.rows = rows;
    in.cin = cin;
    in.cout = cout;
    const size_t nx = rows * cin, ny = rows * cout, nw = static_cast<size_t>(cout) * cin;
    in.x = values(sftest::random_uniform(nx, seed, 0, 3), true);  // ReLU outputs: non-negative
    in.w = values(sftest::random_uniform(nw, seed + 1, -0.2, 0.2), false);
    in.b = values(sftest::random_uniform(cout, seed + 2, -1, 1), false);
    in.dy = values(sftest::random_uniform(ny, seed + 3, -1e-3, 1e-3), false);
    in.dx0 = values(sftest::random_uniform(nx, seed + 4, -1e-3, 1e-3), true);
    in.dw0 = values(sftest::random_uniform(nw, seed + 5, -1, 1), false);
    in.db0 = values(sftest::random_uniform(cout, seed + 6, -1, 1), false);
    return in;
}

Inputs integer_inputs(size_t rows, int cin, int cout, uint64_t seed) {
    Inputs in;
    in.rows = rows;
    in.cin = cin;
    in.cout = cout;
    const size_t nx = rows * cin, ny = rows * cout, nw = static_cast<size_t>(cout) * cin;
    in.x = values(sftest::random_ints(nx, seed, 0, 4), false);
    in.w = values(sftest::random_ints(nw, seed + 1, -3, 3), false);
    in.b = values(sftest::random_ints(cout, seed + 2, -5, 5), false);
    in.dy = values(sftest::random_ints(ny, seed + 3, -2, 2), false);
    in.dx0 = values(sftest::random_ints(nx, seed + 4, -8, 8), false);
    in.dw0 = values(sftest::random_ints(nw, seed + 5, -8, 8), false);
    in.db0 = values(sftest::random_ints(cout, seed + 6, -8, 8), false);
    return in;
}

Outputs run_gpu(const rt::CudaContext& ctx, const Inputs& in) {
    const size_t nx = in.rows * in.cin, ny = in.rows * in.cout, nw = static_cast<size_t>(in.cout) * in.cin;
    const size_t wsn = kern::head_conv_workspace_floats(in.rows, in.cin, in.cout);
    DevMem x(nx * 2), dx((nx + kGuard) * 2), y((ny + kGuard) * 4), dy(ny * 4), w(nw * 4), b(in.cout * 4);
    DevMem dw((nw + kGuard) * 4), db((in.cout + kGuard) * 4), ws(wsn * 4);
    upload(x.p, in.x, true);
    upload(dx.p, with_guard(in.dx0), true);
    upload(y.p, with_guard(std::vector<float>(ny, 0.5f)), false);
    upload(dy.p, in.dy, false);
    upload(w.p, in.w, false);
    upload(b.p, in.b, false);
    upload(dw.p, with_guard(in.dw0), false);
    upload(db.p, with_guard(in.db0), false);
    SF_CUDA_CHECK(cudaDeviceSynchronize());  // the context's stream is non-blocking

    const rt::Exec& ex = ctx.exec();
    auto* xb = static_cast<const bf16*>(x.p);
    kern::head_conv_forward_cuda(ex, in.rows, in.cin, in.cout, xb, static_cast<float*>(w.p), static_cast<float*>(b.p),
                                 static_cast<float*>(y.p));
    kern::head_conv_backward_cuda(ex, in.rows, in.cin, in.cout, xb, static_cast<float*>(dy.p), static_cast<float*>(w.p),
                                  static_cast<bf16*>(dx.p), static_cast<float*>(dw.p), static_cast<float*>(db.p),
                                  static_cast<float*>(ws.p), wsn);
    ctx.synchronize();
    Outputs o;
    o.y = strip_guard(download(y.p, ny + kGuard, false), ny, &o.guards_intact);
    o.dx = strip_guard(download(dx.p, nx + kGuard, true), nx, &o.guards_intact);
    o.dw = strip_guard(download(dw.p, nw + kGuard, false), nw, &o.guards_intact);
    o.db = strip_guard(download(db.p, in.cout + kGuard, false), in.cout, &o.guards_intact);
    return o;
}

// run_gpu on a Cin-channel slice at channel `at` of rows `pitch` wide: x's and dx's other channels hold
// values of their own (dx's: sentinels), which must come back unchanged (foreign_intact).
Outputs run_gpu_pitched(const rt::CudaContext& ctx, const Inputs& in, int pitch, int at, bool accumulate,
                        bool* foreign_intact) {
    const size_t nx = in.rows * in.cin, ny = in.rows * in.cout, nw = static_cast<size_t>(in.cout) * in.cin;
    const size_t nxw = in.rows * static_cast<size_t>(pitch);
    const size_t wsn = kern::head_conv_workspace_floats(in.rows, in.cin, in.cout);
    std::vector<float> xw = values(sftest::random_uniform(nxw, 4242, 0, 3), true), dxw(nxw, kSentinel);
    for (size_t r = 0; r < in.rows; ++r)
        for (int j = 0; j < in.cin; ++j) {
            xw[r * pitch + at + j] = in.x[r * in.cin + j];
            dxw[r * pitch + at + j] = in.dx0[r * in.cin + j];
        }
    DevMem x(nxw * 2), dx(nxw * 2), y(ny * 4), dy(ny * 4), w(nw * 4), b(in.cout * 4), dw(nw * 4), db(in.cout * 4),
        ws(wsn * 4);
    upload(x.p, xw, true);
    upload(dx.p, dxw, true);
    upload(dy.p, in.dy, false);
    upload(w.p, in.w, false);
    upload(b.p, in.b, false);
    upload(dw.p, in.dw0, false);
    upload(db.p, in.db0, false);
    SF_CUDA_CHECK(cudaDeviceSynchronize());
    const rt::Exec& ex = ctx.exec();
    auto* xb = static_cast<const bf16*>(x.p) + at;
    kern::head_conv_forward_cuda(ex, in.rows, in.cin, in.cout, xb, static_cast<float*>(w.p), static_cast<float*>(b.p),
                                 static_cast<float*>(y.p), pitch);
    kern::head_conv_backward_cuda(ex, in.rows, in.cin, in.cout, xb, static_cast<float*>(dy.p), static_cast<float*>(w.p),
                                  static_cast<bf16*>(dx.p) + at, static_cast<float*>(dw.p), static_cast<float*>(db.p),
                                  static_cast<float*>(ws.p), wsn, accumulate, pitch);
    ctx.synchronize();
    Outputs o;
    o.y = download(y.p, ny, false);
    o.dw = download(dw.p, nw, false);
    o.db = download(db.p, in.cout, false);
    const std::vector<float> xb_back = download(x.p, nxw, true), dx_back = download(dx.p, nxw, true);
    o.dx.resize(nx);
    *foreign_intact = true;
    for (size_t r = 0; r < in.rows; ++r)
        for (int j = 0; j < pitch; ++j) {
            const size_t i = r * pitch + j;
            if (j >= at && j < at + in.cin)
                o.dx[r * in.cin + (j - at)] = dx_back[i];
            else
                *foreign_intact &= dx_back[i] == kSentinel;
            *foreign_intact &= xb_back[i] == xw[i];
        }
    return o;
}

// fp32 references: dx and dw, db accumulate into copies of the initial values.
Outputs run_ref(const Inputs& in) {
    kern::ConvShape s;
    s.n = static_cast<int>(in.rows);
    s.h = s.w = 1;
    s.cin = in.cin;
    s.cout = in.cout;
    s.bias = true;
    Outputs r;
    r.y.resize(in.rows * in.cout);
    kern::conv_forward_ref<float>(s, in.x.data(), in.w.data(), in.b.data(), r.y.data());
    r.dx = in.dx0;
    kern::conv_backward_data_ref<float>(s, in.dy.data(), in.w.data(), r.dx.data());
    r.dw = in.dw0;
    r.db = in.db0;
    kern::conv_backward_filter_ref<float>(s, in.x.data(), in.dy.data(), r.dw.data(), r.db.data());
    return r;
}

std::vector<float> round_all(std::vector<float> v) {
    for (float& x : v) x = kern::round_bf16(x);
    return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
    size_t rows;
    int cin, cout;
};
const Shape kShapes[] = {{2 * 64 * 128, 64, 1},
                         {2 * 64 * 128, 64, 2},
                         {2 * 64 * 128, 64, 4},
                         {size_t(64) * 64 * 128, 64, 4},
                         {1000, 64, 8},
                         {37, 8, 3},
                         {3, 24, 5},
                         {33, 16, 8}};

std::string label(const Shape& s) {
    return "rows=" + std::to_string(s.rows) + " cin=" + std::to_string(s.cin) + " cout=" + std::to_string(s.cout);
}

TEST(KernelsHeadConvGpu, MatchesReferences) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 77;
    for (const Shape& s : kShapes) {
        const std::string what = label(s);
        const Inputs in = random_inputs(s.rows, s.cin, s.cout, seed += 10);
        const Outputs got = run_gpu(ctx, in), ref = run_ref(in);
        EXPECT_TRUE(got.guards_intact) << what << ": wrote past an output";
        EXPECT_TRUE(close_rel_l2(to_double(got.y), to_double(ref.y), 1e-5, what + " y"));
        EXPECT_TRUE(
            close_elementwise(to_double(got.dx), to_double(round_all(ref.dx)), 1e-9, 1.0 / 128, what + " dx (1 ulp)"));
        EXPECT_TRUE(close_rel_l2(to_double(got.dx), to_double(ref.dx), 4e-3, what + " dx"));
        EXPECT_TRUE(close_rel_l2(to_double(got.dw), to_double(ref.dw), 1e-5, what + " dw"));
        EXPECT_TRUE(close_rel_l2(to_double(got.db), to_double(ref.db), 1e-5, what + " db"));

        const Outputs again = run_gpu(ctx, in);
        EXPECT_TRUE(bitwise_equal(got.y, again.y)) << what << " y determinism";
        EXPECT_TRUE(bitwise_equal(got.dx, again.dx)) << what << " dx determinism";
        EXPECT_TRUE(bitwise_equal(got.dw, again.dw)) << what << " dw determinism";
        EXPECT_TRUE(bitwise_equal(got.db, again.db)) << what << " db determinism";
    }
}

// Small integers: every product and sum is an exact integer in fp32 (|sums| << 2^24), so all
// outputs equal the references exactly.
TEST(KernelsHeadConvGpu, ExactOnSmallIntegers) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 9000;
    for (const Shape& s : kShapes) {
        const std::string what = label(s) + " integers";
        const Inputs in = integer_inputs(s.rows, s.cin, s.cout, seed += 10);
        const Outputs got = run_gpu(ctx, in), ref = run_ref(in);
        EXPECT_TRUE(got.guards_intact) << what;
        EXPECT_TRUE(close_elementwise(to_double(got.y), to_double(ref.y), 0, 0, what + " y"));
        EXPECT_TRUE(close_elementwise(to_double(got.dx), to_double(ref.dx), 0, 0, what + " dx"));
        EXPECT_TRUE(close_elementwise(to_double(got.dw), to_double(ref.dw), 0, 0, what + " dw"));
        EXPECT_TRUE(close_elementwise(to_double(got.db), to_double(ref.db), 0, 0, what + " db"));
    }
}

// A head's slice of the merged conv1 output (rows 256 wide, the slice at 64 * head) and odd ones: bitwise
// the contiguous run (each row's arithmetic is the same), in both dx modes, and nothing else touched.
TEST(KernelsHeadConvGpu, SliceOfWiderRowsIsTheContiguousRun) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    struct Case {
        Shape s;
        int pitch, at;
    };
    // The model's shape once (2 x 64 x 128 rows; the emulation runs it in seconds), the other slices on
    // fewer rows.
    const Case cases[] = {{{2 * 64 * 128, 64, 4}, 256, 128},
                          {{1000, 64, 1}, 256, 0},
                          {{1000, 64, 2}, 256, 192},
                          {{1000, 64, 8}, 72, 8},
                          {{37, 8, 3}, 40, 24},
                          {{33, 16, 8}, 16, 0}};
    uint64_t seed = 500;
    for (const Case& c : cases) {
        const std::string what = label(c.s) + " pitch=" + std::to_string(c.pitch) + " at=" + std::to_string(c.at);
        const Inputs in = random_inputs(c.s.rows, c.s.cin, c.s.cout, seed += 10);
        const Outputs flat = run_gpu(ctx, in);
        for (bool accumulate : {true, false}) {
            bool intact = false;
            const Outputs got = run_gpu_pitched(ctx, in, c.pitch, c.at, accumulate, &intact);
            const std::string w = what + (accumulate ? " accumulate" : " overwrite");
            EXPECT_TRUE(intact) << w << ": touched a channel outside its slice";
            EXPECT_TRUE(bitwise_equal(got.y, flat.y)) << w << " y";
            EXPECT_TRUE(bitwise_equal(got.dw, flat.dw)) << w << " dw";
            EXPECT_TRUE(bitwise_equal(got.db, flat.db)) << w << " db";
            if (accumulate) {
                EXPECT_TRUE(bitwise_equal(got.dx, flat.dx)) << w << " dx";
            } else {  // overwritten: the reference's dx from zero
                Inputs zero = in;
                std::fill(zero.dx0.begin(), zero.dx0.end(), 0.0f);
                EXPECT_TRUE(bitwise_equal(got.dx, run_gpu(ctx, zero).dx)) << w << " dx";
            }
        }
    }
}

}  // namespace
