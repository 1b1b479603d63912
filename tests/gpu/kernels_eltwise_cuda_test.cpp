// CUDA element-wise ops (kernels/eltwise.cu) vs the CPU references (kernels/eltwise_ref.cpp) on the
// same bf16-rounded inputs. Every case runs at lengths around the 8-element vector (tails) and with
// pointers shifted by whole elements (same shift: head + vectors; different shifts: scalar path),
// outputs sit between sentinel guards that must stay untouched, accumulating outputs start non-zero.
//   - add, accumulate (also y aliasing an input), accumulate into fp32, convert, fill, bias_add:
//     bit-exact (each output is one fp32 op on exact inputs, rounded once, as on the host).
//   - column_sum: rel. L2 <= 1e-5 vs fp64 sums on random data, exact on small integers.
//   - fusion forward / backward: da, db, y within one bf16 ulp of the reference rounded to bf16 and
//     rel. L2 <= 4e-3 (bf16 rounding only); dwa, dwb within 1e-5 of their scale; two runs of the
//     reductions bitwise identical.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/eltwise.h"
#include "kernels/eltwise_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::bf16;
using sftest::close_elementwise, sftest::close_rel_l2, sftest::to_double;

constexpr size_t kGuard = 64;  // sentinel elements on each side of every window (keeps base + kGuard 16-byte aligned)
const float kSentinel = -1232.0f;  // exact in bf16 (-1234 is not: it reads back as -1232)

struct DevMem {
    void* p = nullptr;
    explicit DevMem(size_t bytes) { SF_CUDA_CHECK(cudaMalloc(&p, bytes)); }
    ~DevMem() { cudaFree(p); }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
};

// n elements of T (bf16 or float) at element offset kGuard + shift of a sentinel-filled device buffer.
template <class T>
class Guarded {
public:
    Guarded(size_t n, size_t shift) : n_(n), shift_(shift), total_(n + 2 * kGuard + 8), mem_(total_ * sizeof(T)) {}
    T* ptr() const { return static_cast<T*>(mem_.p) + kGuard + shift_; }
    void set(const std::vector<float>& v) {
        std::vector<float> all(total_, kSentinel);
        std::copy(v.begin(), v.end(), all.begin() + kGuard + shift_);
        upload(all);
    }
    std::vector<float> get() const {
        const std::vector<float> all = download();
        return std::vector<float>(all.begin() + kGuard + shift_, all.begin() + kGuard + shift_ + n_);
    }
    bool guards_intact() const {
        const std::vector<float> all = download();
        for (size_t i = 0; i < total_; ++i)
            if ((i < kGuard + shift_ || i >= kGuard + shift_ + n_) && all[i] != kSentinel) return false;
        return true;
    }

private:
    void upload(const std::vector<float>& v) {
        if constexpr (std::is_same_v<T, bf16>) {
            std::vector<bf16> h(v.size());
            for (size_t i = 0; i < v.size(); ++i) h[i] = kern::float_to_bf16(v[i]);
            SF_CUDA_CHECK(cudaMemcpy(mem_.p, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
        } else {
            SF_CUDA_CHECK(cudaMemcpy(mem_.p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
        }
        SF_CUDA_CHECK(cudaDeviceSynchronize());  // the context's stream is non-blocking
    }
    std::vector<float> download() const {
        std::vector<float> out(total_);
        if constexpr (std::is_same_v<T, bf16>) {
            std::vector<bf16> h(total_);
            SF_CUDA_CHECK(cudaMemcpy(h.data(), mem_.p, total_ * sizeof(bf16), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < total_; ++i) out[i] = kern::bf16_to_float(h[i]);
        } else {
            SF_CUDA_CHECK(cudaMemcpy(out.data(), mem_.p, total_ * sizeof(float), cudaMemcpyDeviceToHost));
        }
        return out;
    }
    size_t n_, shift_, total_;
    DevMem mem_;
};

std::vector<float> random_bf16(size_t n, uint64_t seed, double lo = -2, double hi = 2) {
    const std::vector<double> u = sftest::random_uniform(n, seed, lo, hi);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = kern::round_bf16(static_cast<float>(u[i]));
    return v;
}

std::vector<float> random_f32(size_t n, uint64_t seed, double lo = -2, double hi = 2) {
    const std::vector<double> u = sftest::random_uniform(n, seed, lo, hi);
    return std::vector<float>(u.begin(), u.end());
}

std::vector<float> round_all(std::vector<float> v) {
    for (float& x : v) x = kern::round_bf16(x);
    return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const size_t kSizes[] = {1, 7, 8, 9, 15, 1000, 4099, (size_t(1) << 20) + 5};
// Element shifts of (first input, second input, output): same -> head + vectors, mixed -> scalar.
const size_t kShifts[][3] = {{0, 0, 0}, {1, 1, 1}, {5, 5, 5}, {0, 1, 2}, {0, 0, 3}};

std::string label(const char* op, size_t n, const size_t* sh) {
    return std::string(op) + " n=" + std::to_string(n) + " shifts=" + std::to_string(sh[0]) + "," +
           std::to_string(sh[1]) + "," + std::to_string(sh[2]);
}

TEST(KernelsEltwiseGpu, AddAndAccumulateExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 1;
    for (size_t n : kSizes) {
        for (const auto& sh : kShifts) {
            const std::vector<float> a = random_bf16(n, ++seed), b = random_bf16(n, ++seed),
                                     y0 = random_bf16(n, ++seed);
            std::vector<float> sum(n), acc = y0;
            kern::add_ref(n, a.data(), b.data(), sum.data());
            kern::accumulate_ref(n, a.data(), acc.data());
            sum = round_all(sum);
            acc = round_all(acc);
            Guarded<bf16> da(n, sh[0]), db(n, sh[1]), dy(n, sh[2]);
            da.set(a);
            db.set(b);
            dy.set(y0);
            kern::add_bf16_cuda(ex, n, da.ptr(), db.ptr(), dy.ptr());
            ctx.synchronize();
            EXPECT_TRUE(close_elementwise(to_double(dy.get()), to_double(sum), 0, 0, label("add", n, sh)));
            EXPECT_TRUE(dy.guards_intact()) << label("add", n, sh);

            dy.set(y0);
            kern::accumulate_bf16_cuda(ex, n, da.ptr(), dy.ptr());
            ctx.synchronize();
            EXPECT_TRUE(close_elementwise(to_double(dy.get()), to_double(acc), 0, 0, label("accumulate", n, sh)));
            EXPECT_TRUE(dy.guards_intact()) << label("accumulate", n, sh);

            // y aliasing an input: a = a + b, then a += b again.
            kern::add_bf16_cuda(ex, n, da.ptr(), db.ptr(), da.ptr());
            ctx.synchronize();
            EXPECT_TRUE(close_elementwise(to_double(da.get()), to_double(sum), 0, 0, label("add y=a", n, sh)));
            kern::accumulate_bf16_cuda(ex, n, db.ptr(), da.ptr());
            ctx.synchronize();
            std::vector<float> twice = sum;
            kern::accumulate_ref(n, b.data(), twice.data());
            EXPECT_TRUE(close_elementwise(to_double(da.get()), to_double(round_all(twice)), 0, 0,
                                          label("accumulate twice", n, sh)));
            EXPECT_TRUE(da.guards_intact()) << label("add y=a", n, sh);
        }
    }
}

TEST(KernelsEltwiseGpu, ConvertFillAndF32AccumulateExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    uint64_t seed = 500;
    for (size_t n : kSizes) {
        for (const auto& sh : kShifts) {
            // bf16 x into fp32 y: y0 + x is one fp32 add on both sides.
            const std::vector<float> x = random_bf16(n, ++seed), y0 = random_f32(n, ++seed, -100, 100);
            std::vector<float> want = y0;
            for (size_t i = 0; i < n; ++i) want[i] += x[i];
            Guarded<bf16> dx(n, sh[0]);
            Guarded<float> dy(n, sh[1]);
            dx.set(x);
            dy.set(y0);
            kern::accumulate_bf16_to_f32_cuda(ex, n, dx.ptr(), dy.ptr());
            ctx.synchronize();
            EXPECT_TRUE(close_elementwise(to_double(dy.get()), to_double(want), 0, 0, label("acc_f32", n, sh)));
            EXPECT_TRUE(dy.guards_intact()) << label("acc_f32", n, sh);

            // fp32 -> bf16 (round to nearest even, as kern::float_to_bf16), with special values.
            std::vector<float> f = random_f32(n, ++seed, -1e3, 1e3);
            const float special[] = {0.0f,
                                     -0.0f,
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::max(),
                                     1e-40f,
                                     1.00390625f /* tie: 1 + 2^-8 -> 1 */,
                                     1.01171875f /* tie -> up */};
            for (size_t i = 0; i < n && i < 8; ++i) f[i] = special[i];
            Guarded<float> src(n, sh[0]);
            Guarded<bf16> dst(n, sh[2]);
            src.set(f);
            dst.set(std::vector<float>(n, 7.0f));
            kern::convert_f32_to_bf16_cuda(ex, n, src.ptr(), dst.ptr());
            ctx.synchronize();
            std::vector<float> conv = dst.get();
            bool same = true;
            for (size_t i = 0; i < n; ++i) same &= kern::float_to_bf16(conv[i]).bits == kern::float_to_bf16(f[i]).bits;
            EXPECT_TRUE(same) << label("convert", n, sh);
            EXPECT_TRUE(dst.guards_intact()) << label("convert", n, sh);

            kern::fill_bf16_cuda(ex, n, 3.14159f, dst.ptr());
            ctx.synchronize();
            std::vector<float> filled(n);
            kern::fill_ref(n, kern::round_bf16(3.14159f), filled.data());
            EXPECT_TRUE(close_elementwise(to_double(dst.get()), to_double(filled), 0, 0, label("fill", n, sh)));
            EXPECT_TRUE(dst.guards_intact()) << label("fill", n, sh);
        }
    }
}

TEST(KernelsEltwiseGpu, BiasAddExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    struct Case {
        size_t rows;
        int c;
        size_t shift;  // 0: vector path when C % 8 == 0
    };
    for (const Case& k :
         {Case{2 * 64 * 128, 64, 0}, Case{1000, 64, 3}, Case{37, 12, 0}, Case{5, 1, 0}, Case{333, 24, 0}}) {
        const std::string what =
            "rows=" + std::to_string(k.rows) + " C=" + std::to_string(k.c) + " shift=" + std::to_string(k.shift);
        const size_t n = k.rows * k.c;
        const std::vector<float> y0 = random_bf16(n, 70 + n), bias = random_f32(k.c, 71 + n, -1, 1);
        std::vector<float> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = kern::round_bf16(y0[i] + bias[i % k.c]);
        Guarded<bf16> y(n, k.shift);
        Guarded<float> b(k.c, 0);
        y.set(y0);
        b.set(bias);
        kern::bias_add_bf16_cuda(ex, k.rows, k.c, b.ptr(), y.ptr());
        ctx.synchronize();
        EXPECT_TRUE(close_elementwise(to_double(y.get()), to_double(want), 0, 0, what));
        EXPECT_TRUE(y.guards_intact()) << what;
    }
}

// axpy_f32_cuda (the folded conv bias's running-mean and eval-mean shifts, model::ConvBN): y = fmaf(alpha, b, a)
// exactly, into a third buffer and in place (y = a, y = b), aligned and not, nothing written past y; a y
// partly over an operand refused.
TEST(KernelsEltwiseGpu, AxpyF32IsOneFmaPerElement) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (size_t n : {size_t(1), size_t(64), size_t(256), size_t(1000)}) {
        for (size_t shift : {size_t(0), size_t(1), size_t(3)}) {
            const std::vector<float> a0 = random_f32(n, 90 + n, -1, 1), b0 = random_f32(n, 91 + n, -1, 1);
            for (float alpha : {0.1f, -1.0f}) {
                std::vector<float> want(n);
                for (size_t i = 0; i < n; ++i) want[i] = std::fma(alpha, b0[i], a0[i]);
                const std::string what =
                    "n=" + std::to_string(n) + " shift=" + std::to_string(shift) + " alpha=" + std::to_string(alpha);
                for (int into = 0; into < 3; ++into) {  // y apart, y = a, y = b
                    Guarded<float> a(n, shift), b(n, 0), y(n, shift);
                    a.set(a0);
                    b.set(b0);
                    y.set(std::vector<float>(n, 7.0f));
                    float* out = into == 0 ? y.ptr() : into == 1 ? a.ptr() : b.ptr();
                    kern::axpy_f32_cuda(ex, n, a.ptr(), alpha, b.ptr(), out);
                    ctx.synchronize();
                    const std::vector<float> got = into == 0 ? y.get() : into == 1 ? a.get() : b.get();
                    EXPECT_TRUE(close_elementwise(to_double(got), to_double(want), 0, 0, what)) << into;
                    EXPECT_TRUE(a.guards_intact() && b.guards_intact() && y.guards_intact()) << what << " " << into;
                }
            }
        }
    }
    Guarded<float> a(64, 0);
    SF_EXPECT_ERROR(kern::axpy_f32_cuda(ex, 32, a.ptr(), 1.0f, a.ptr() + 32, a.ptr() + 16), "axpy_f32_cuda",
                    "y must be a or b exactly");
    SF_EXPECT_ERROR(kern::axpy_f32_cuda(ex, 8, nullptr, 1.0f, a.ptr(), a.ptr()), "axpy_f32_cuda", "a");
    kern::axpy_f32_cuda(ex, 0, nullptr, 1.0f, nullptr, nullptr);  // n == 0: nothing to check or do
}

// column_sum on the GPU: out0 + column sums of x; returns out.
std::vector<float> run_column_sum(const rt::CudaContext& ctx, size_t rows, int c, size_t shift,
                                  const std::vector<float>& x, const std::vector<float>& out0) {
    const size_t wsn = kern::column_sum_workspace_floats(rows, c);
    Guarded<bf16> dx(rows * c, shift);
    Guarded<float> out(c, 0), ws(wsn, 0);
    dx.set(x);
    out.set(out0);
    ws.set(std::vector<float>(wsn, 0.0f));
    kern::column_sum_bf16_cuda(ctx.exec(), rows, c, dx.ptr(), out.ptr(), ws.ptr(), wsn);
    ctx.synchronize();
    EXPECT_TRUE(out.guards_intact()) << "column_sum wrote past out";
    EXPECT_TRUE(ws.guards_intact()) << "column_sum wrote past its workspace";
    return out.get();
}

TEST(KernelsEltwiseGpu, ColumnSum) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    struct Case {
        size_t rows;
        int c;
        size_t shift;
    };
    for (const Case& k : {Case{2 * 64 * 128, 64, 0}, Case{100000, 128, 0}, Case{1000, 33, 0}, Case{3, 8, 0},
                          Case{777, 64, 1}, Case{513, 1, 0}}) {
        const std::string what =
            "rows=" + std::to_string(k.rows) + " C=" + std::to_string(k.c) + " shift=" + std::to_string(k.shift);
        const std::vector<float> x = random_bf16(k.rows * k.c, 90 + k.rows), out0 = random_f32(k.c, 91 + k.rows, -1, 1);
        std::vector<double> want(out0.begin(), out0.end()), sums(k.c, 0.0);
        for (size_t i = 0; i < x.size(); ++i) sums[i % k.c] += x[i];
        for (int j = 0; j < k.c; ++j) want[j] += sums[j];
        const std::vector<float> got = run_column_sum(ctx, k.rows, k.c, k.shift, x, out0);
        EXPECT_TRUE(close_rel_l2(to_double(got), want, 1e-5, what));
        EXPECT_TRUE(bitwise_equal(got, run_column_sum(ctx, k.rows, k.c, k.shift, x, out0))) << what << " determinism";

        // Small integers: every partial sum is an exact integer, so the result is exact.
        const std::vector<double> xi = sftest::random_ints(k.rows * k.c, 92 + k.rows, -4, 4);
        const std::vector<double> oi = sftest::random_ints(k.c, 93 + k.rows, -10, 10);
        std::vector<double> exact = oi;
        for (size_t i = 0; i < xi.size(); ++i) exact[i % k.c] += xi[i];
        EXPECT_TRUE(close_elementwise(
            to_double(run_column_sum(ctx, k.rows, k.c, k.shift, std::vector<float>(xi.begin(), xi.end()),
                                     std::vector<float>(oi.begin(), oi.end()))),
            exact, 0, 0, what + " integers"));
    }
}

// ---- fusion ----

struct FusionCase {
    size_t n;
    float wa, wb;
    size_t shift;
};
const FusionCase kFusionCases[] = {{1, 1.0f, 1.0f, 0},
                                   {13, -0.7f, 2.3f, 0},
                                   {4096, 1.0f, 1.0f, 3},
                                   {100003, 0.25f, -1.5f, 0},
                                   {128 * 64 * 128, 25.0f, -3.0f, 0},
                                   {(size_t(1) << 21) + 3, 0.9f, 1.1f, 1}};

std::string fusion_label(const FusionCase& k) {
    return "n=" + std::to_string(k.n) + " wa=" + std::to_string(k.wa) + " wb=" + std::to_string(k.wb) +
           " shift=" + std::to_string(k.shift);
}

// Within one bf16 ulp of the reference rounded to bf16, plus 1e-5 absolute: the fp32 results may
// differ by about an fp32 ulp of the operands (FMA contraction; the device's expf/log1pf in the
// softplus), which can move a value across a bf16 rounding boundary, and after cancellation
// (sa*a ~ -sb*b, da0 ~ -dy*sa/D) that ulp is large relative to the result. And rel. L2 of bf16
// rounding (about 2^-9 / sqrt(3) rms) vs the unrounded reference.
void expect_bf16_close(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
    EXPECT_TRUE(close_elementwise(to_double(got), to_double(round_all(ref)), 1e-5, 1.0 / 128, what + " (1 ulp)"));
    EXPECT_TRUE(close_rel_l2(to_double(got), to_double(ref), 4e-3, what));
}

TEST(KernelsEltwiseGpu, FusionForward) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    for (const FusionCase& k : kFusionCases) {
        const std::string what = fusion_label(k);
        const std::vector<float> a = random_bf16(k.n, 300 + k.n), b = random_bf16(k.n, 301 + k.n);
        std::vector<float> want(k.n);
        kern::fusion_forward_ref(k.n, a.data(), b.data(), &k.wa, &k.wb, want.data());
        Guarded<bf16> da(k.n, k.shift), db(k.n, k.shift), dy(k.n, k.shift);
        Guarded<float> w(2, 0);
        da.set(a);
        db.set(b);
        dy.set(std::vector<float>(k.n));  // the guards around the output
        w.set({k.wa, k.wb});
        kern::fusion_forward_bf16_cuda(ex, k.n, da.ptr(), db.ptr(), w.ptr(), w.ptr() + 1, dy.ptr());
        ctx.synchronize();
        const std::vector<float> got = dy.get();
        expect_bf16_close(got, want, what + " y");
        EXPECT_TRUE(dy.guards_intact()) << what;
        // y aliasing b: the same values.
        kern::fusion_forward_bf16_cuda(ex, k.n, da.ptr(), db.ptr(), w.ptr(), w.ptr() + 1, db.ptr());
        ctx.synchronize();
        EXPECT_TRUE(bitwise_equal(db.get(), got)) << what << " y=b";
    }
}

struct FusionGrads {
    std::vector<float> da, db;
    float dwa = 0, dwb = 0;
    bool guards_intact = true;
};

FusionGrads run_fusion_backward(const rt::CudaContext& ctx, const FusionCase& k, const std::vector<float>& a,
                                const std::vector<float>& b, const std::vector<float>& dy,
                                const std::vector<float>& da0, const std::vector<float>& db0, float dwa0, float dwb0) {
    const size_t wsn = kern::fusion_backward_workspace_floats(k.n);
    Guarded<bf16> ga(k.n, k.shift), gb(k.n, k.shift), gdy(k.n, k.shift), gda(k.n, k.shift), gdb(k.n, k.shift);
    Guarded<float> w(2, 0), dw(2, 0), ws(wsn, 0);
    ga.set(a);
    gb.set(b);
    gdy.set(dy);
    gda.set(da0);
    gdb.set(db0);
    w.set({k.wa, k.wb});
    dw.set({dwa0, dwb0});
    ws.set(std::vector<float>(wsn, 0.0f));
    kern::fusion_backward_bf16_cuda(ctx.exec(), k.n, ga.ptr(), gb.ptr(), w.ptr(), w.ptr() + 1, gdy.ptr(), gda.ptr(),
                                    gdb.ptr(), dw.ptr(), dw.ptr() + 1, ws.ptr(), wsn);
    ctx.synchronize();
    FusionGrads g;
    g.da = gda.get();
    g.db = gdb.get();
    const std::vector<float> d = dw.get();
    g.dwa = d[0];
    g.dwb = d[1];
    g.guards_intact = gda.guards_intact() && gdb.guards_intact() && dw.guards_intact() && ws.guards_intact();
    return g;
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double softplus_grad(double x) { return x > 20 ? 1.0 : 1.0 / (1.0 + std::exp(-x)); }

TEST(KernelsEltwiseGpu, FusionBackward) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    for (const FusionCase& k : kFusionCases) {
        const std::string what = fusion_label(k);
        const std::vector<float> a = random_bf16(k.n, 400 + k.n), b = random_bf16(k.n, 401 + k.n);
        const std::vector<float> dy = random_bf16(k.n, 402 + k.n, -1, 1);
        const std::vector<float> da0 = random_bf16(k.n, 403 + k.n, -0.5, 0.5),
                                 db0 = random_bf16(k.n, 404 + k.n, -0.5, 0.5);
        const float dwa0 = 0.125f, dwb0 = -0.375f;
        std::vector<float> da = da0, db = db0;
        float dwa = dwa0, dwb = dwb0;
        kern::fusion_backward_ref(k.n, a.data(), b.data(), &k.wa, &k.wb, dy.data(), da.data(), db.data(), &dwa, &dwb);

        const FusionGrads got = run_fusion_backward(ctx, k, a, b, dy, da0, db0, dwa0, dwb0);
        EXPECT_TRUE(got.guards_intact) << what;
        expect_bf16_close(got.da, da, what + " da");
        expect_bf16_close(got.db, db, what + " db");
        // Scale of the weight gradients: softplus'(w) * (sum |dy*a| + sum |dy*b|) / D; the GPU's
        // fp32 partial sums are far inside 1e-5 of it.
        double abs_sum = 0;
        for (size_t i = 0; i < k.n; ++i) abs_sum += std::fabs(dy[i]) * (std::fabs(a[i]) + std::fabs(b[i]));
        const double den = softplus(k.wa) + softplus(k.wb) + kern::kFusionEps;
        EXPECT_NEAR(got.dwa, dwa, 1e-5 * softplus_grad(k.wa) * abs_sum / den + 1e-7) << what << " dwa";
        EXPECT_NEAR(got.dwb, dwb, 1e-5 * softplus_grad(k.wb) * abs_sum / den + 1e-7) << what << " dwb";

        const FusionGrads again = run_fusion_backward(ctx, k, a, b, dy, da0, db0, dwa0, dwb0);
        EXPECT_TRUE(bitwise_equal(got.da, again.da) && bitwise_equal(got.db, again.db)) << what << " determinism";
        EXPECT_EQ(std::memcmp(&got.dwa, &again.dwa, 4), 0) << what << " determinism dwa";
        EXPECT_EQ(std::memcmp(&got.dwb, &again.dwb, 4), 0) << what << " determinism dwb";
    }
}

}  // namespace
