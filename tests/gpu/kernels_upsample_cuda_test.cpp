// CUDA bilinear upsampling (kernels/upsample.cu) vs upsample_bilinear_*_ref (kernels/upsample_ref.cpp)
// on the same bf16-rounded inputs, for factors 2, 4, 8 on the model's shapes and on odd ones (C not
// a multiple of 8, 1-pixel inputs, misaligned pointers: the one-channel path):
//   - forward: bit-exact vs the fp32 reference rounded to bf16 (every product is exact, the sums are
//     the reference's in the same order), y between untouched guards.
//   - backward on small-integer dy and dx0: exact (weights are multiples of 1/(2f) per axis, so
//     every fp32 sum is exact; the bf16 rounding of dx0 + sum is the same on both sides).
//   - backward on random data: within one bf16 ulp of the rounded reference (+ a small absolute
//     term for the fp32 summation) and rel. L2 <= 4e-3; two runs bitwise identical; and bitwise equal to
//     a host model of the kernel's documented fp32 order (window rows, then columns, in increasing order,
//     one fmaf per nonzero weight, then one bf16 rounding of dx0 + sum), with and without row_loads (each
//     window row's loads issued together change nothing in the arithmetic).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/upsample.h"
#include "kernels/upsample_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::bf16;
using sftest::close_elementwise, sftest::close_rel_l2, sftest::to_double;

constexpr size_t kGuard = 64;      // bf16 sentinels on each side of every tensor
const float kSentinel = -1232.0f;  // exact in bf16 (-1234 is not: it reads back as -1232)

struct DevMem {
    void* p = nullptr;
    explicit DevMem(size_t bytes) { SF_CUDA_CHECK(cudaMalloc(&p, bytes)); }
    ~DevMem() { cudaFree(p); }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
};

// n bf16 values at element offset kGuard + shift of a sentinel-filled device buffer.
class GuardedBf16 {
public:
    GuardedBf16(size_t n, size_t shift) : n_(n), shift_(shift), total_(n + 2 * kGuard + 8), mem_(total_ * 2) {}
    bf16* ptr() const { return static_cast<bf16*>(mem_.p) + kGuard + shift_; }
    void set(const std::vector<float>& v) {
        std::vector<bf16> h(total_, kern::float_to_bf16(kSentinel));
        for (size_t i = 0; i < n_; ++i) h[kGuard + shift_ + i] = kern::float_to_bf16(v[i]);
        SF_CUDA_CHECK(cudaMemcpy(mem_.p, h.data(), total_ * 2, cudaMemcpyHostToDevice));
        SF_CUDA_CHECK(cudaDeviceSynchronize());  // the context's stream is non-blocking
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
    std::vector<float> download() const {
        std::vector<bf16> h(total_);
        SF_CUDA_CHECK(cudaMemcpy(h.data(), mem_.p, total_ * 2, cudaMemcpyDeviceToHost));
        std::vector<float> out(total_);
        for (size_t i = 0; i < total_; ++i) out[i] = kern::bf16_to_float(h[i]);
        return out;
    }
    size_t n_, shift_, total_;
    DevMem mem_;
};

std::vector<float> bf16_values(const std::vector<double>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = kern::round_bf16(static_cast<float>(v[i]));
    return out;
}

std::vector<float> round_all(std::vector<float> v) {
    for (float& x : v) x = kern::round_bf16(x);
    return v;
}

struct Case {
    kern::Shape4 in;
    int factor;
    size_t shift_in, shift_out;  // element shifts of x / dx and y / dy
};

std::string label(const Case& k) {
    return "f=" + std::to_string(k.factor) + " in=(" + std::to_string(k.in.n) + "," + std::to_string(k.in.h) + "," +
           std::to_string(k.in.w) + "," + std::to_string(k.in.c) + ") shifts=" + std::to_string(k.shift_in) + "," +
           std::to_string(k.shift_out);
}

std::vector<Case> cases() {
    std::vector<Case> v = {
        {{2, 32, 64, 64}, 2, 0, 0},   // stage fusions: Up2 of [N,64,32,64]
        {{2, 16, 32, 128}, 4, 0, 0},  // Up4 of [N,128,16,32]
        {{2, 8, 16, 256}, 8, 0, 0},   // Up8 of [N,256,8,16]
        {{2, 8, 16, 128}, 2, 0, 0},   // FPN
        {{2, 8, 16, 64}, 2, 8, 16},   // shifted by whole vectors: still the vector path
        {{1, 3, 5, 16}, 4, 1, 0},     // misaligned input: one channel per thread
        {{1, 3, 5, 16}, 2, 0, 3},     // misaligned output
    };
    for (int f : {2, 4, 8}) {
        v.push_back({{1, 5, 7, 3}, f, 0, 0});  // C not a multiple of 8
        v.push_back({{3, 1, 1, 8}, f, 0, 0});  // 1x1 input: every output reads the same pixel
        v.push_back({{2, 2, 9, 24}, f, 0, 0});
    }
    return v;
}

// Forward on the GPU: y (sentinel-guarded) = up(x).
std::vector<float> run_forward(const rt::CudaContext& ctx, const Case& k, const std::vector<float>& x, bool* guards) {
    const size_t in_n = k.in.numel(), out_n = in_n * k.factor * k.factor;
    GuardedBf16 dx(in_n, k.shift_in), dy(out_n, k.shift_out);
    dx.set(x);
    dy.set(std::vector<float>(out_n, 5.0f));
    kern::upsample_bilinear_forward_bf16_cuda(ctx.exec(), k.in, k.factor, dx.ptr(), dy.ptr());
    ctx.synchronize();
    *guards = dy.guards_intact();
    return dy.get();
}

// Backward on the GPU: dx0 + up^T(dy).
std::vector<float> run_backward(const rt::CudaContext& ctx, const Case& k, const std::vector<float>& dy,
                                const std::vector<float>& dx0, bool* guards, bool row_loads = false) {
    const size_t in_n = k.in.numel(), out_n = in_n * k.factor * k.factor;
    GuardedBf16 gdx(in_n, k.shift_in), gdy(out_n, k.shift_out);
    gdy.set(dy);
    gdx.set(dx0);
    kern::upsample_bilinear_backward_bf16_cuda(ctx.exec(), k.in, k.factor, gdy.ptr(), gdx.ptr(), true, row_loads);
    ctx.synchronize();
    *guards = gdx.guards_intact();
    return gdx.get();
}

TEST(KernelsUpsampleGpu, ForwardBitExact) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 10;
    for (const Case& k : cases()) {
        const size_t in_n = k.in.numel(), out_n = in_n * k.factor * k.factor;
        const std::vector<float> x = bf16_values(sftest::random_uniform(in_n, ++seed, -4, 4));
        std::vector<float> want(out_n);
        kern::upsample_bilinear_forward_ref<float>(k.in, k.factor, x.data(), want.data());
        bool guards = false;
        const std::vector<float> got = run_forward(ctx, k, x, &guards);
        EXPECT_TRUE(close_elementwise(to_double(got), to_double(round_all(want)), 0, 0, label(k) + " forward"));
        EXPECT_TRUE(guards) << label(k) << ": wrote outside y";
    }
}

TEST(KernelsUpsampleGpu, BackwardExactOnSmallIntegers) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 2000;
    for (const Case& k : cases()) {
        const size_t in_n = k.in.numel(), out_n = in_n * k.factor * k.factor;
        const std::vector<double> dyi = sftest::random_ints(out_n, ++seed, -8, 8);
        const std::vector<double> dxi = sftest::random_ints(in_n, ++seed, -4, 4);
        const std::vector<float> dy(dyi.begin(), dyi.end()), dx0(dxi.begin(), dxi.end());
        std::vector<float> want = dx0;
        kern::upsample_bilinear_backward_ref<float>(k.in, k.factor, dy.data(), want.data());
        bool guards = false;
        const std::vector<float> got = run_backward(ctx, k, dy, dx0, &guards);
        EXPECT_TRUE(close_elementwise(to_double(got), to_double(round_all(want)), 0, 0, label(k) + " backward int"));
        EXPECT_TRUE(guards) << label(k) << ": wrote outside dx";
    }
}

TEST(KernelsUpsampleGpu, BackwardRandomAndDeterministic) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 5000;
    for (const Case& k : cases()) {
        const size_t in_n = k.in.numel(), out_n = in_n * k.factor * k.factor;
        const std::vector<float> dy = bf16_values(sftest::random_uniform(out_n, ++seed, -1, 1));
        const std::vector<float> dx0 = bf16_values(sftest::random_uniform(in_n, ++seed, -1, 1));
        std::vector<float> want = dx0;
        kern::upsample_bilinear_backward_ref<float>(k.in, k.factor, dy.data(), want.data());
        bool guards = false;
        const std::vector<float> got = run_backward(ctx, k, dy, dx0, &guards);
        // One bf16 ulp of the rounded reference, plus the fp32 (GPU) vs fp64 (reference) summation
        // of up to (2f)^2 terms of total weight f^2, which can cross a rounding boundary.
        const double atol = 1e-5 * k.factor * k.factor;
        EXPECT_TRUE(
            close_elementwise(to_double(got), to_double(round_all(want)), atol, 1.0 / 128, label(k) + " 1 ulp"));
        EXPECT_TRUE(close_rel_l2(to_double(got), to_double(want), 4e-3, label(k) + " backward"));
        EXPECT_TRUE(guards) << label(k) << ": wrote outside dx";
        const std::vector<float> again = run_backward(ctx, k, dy, dx0, &guards);
        EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << label(k) << " determinism";
    }
}

// dx0 + the backward in the kernel's own order (kernels/upsample.cu): per dx pixel and channel, fp32
// fmaf over the window's rows oh and, per row, columns ow, both increasing, weights wh * ww (exact),
// zero weights skipped; then one bf16 rounding of dx0 + sum.
std::vector<float> backward_in_kernel_order(const Case& k, const std::vector<float>& dy, const std::vector<float>& dx0) {
    const int f = k.factor, h = k.in.h, w = k.in.w, c = k.in.c, oh_n = f * h, ow_n = f * w;
    std::vector<float> dx = dx0;
    for (int b = 0; b < k.in.n; ++b)
        for (int ih = 0; ih < h; ++ih)
            for (int iw = 0; iw < w; ++iw) {
                int lo_h, hi_h, lo_w, hi_w;
                kern::upsample_gather_range(ih, h, f, &lo_h, &hi_h);
                kern::upsample_gather_range(iw, w, f, &lo_w, &hi_w);
                for (int ch = 0; ch < c; ++ch) {
                    float acc = 0.0f;
                    for (int oh = lo_h; oh <= hi_h; ++oh) {
                        const float wh = kern::upsample_gather_weight(oh, ih, h, f);
                        if (wh == 0.0f) continue;
                        for (int ow = lo_w; ow <= hi_w; ++ow) {
                            const float ww = kern::upsample_gather_weight(ow, iw, w, f);
                            if (ww == 0.0f) continue;
                            const size_t o = ((static_cast<size_t>(b) * oh_n + oh) * ow_n + ow) * c + ch;
                            acc = std::fmaf(wh * ww, dy[o], acc);
                        }
                    }
                    const size_t i = ((static_cast<size_t>(b) * h + ih) * w + iw) * c + ch;
                    dx[i] = kern::bf16_to_float(kern::float_to_bf16(dx[i] + acc));
                }
            }
    return dx;
}

TEST(KernelsUpsampleGpu, BackwardBitwiseTheKernelsOwnOrder) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    uint64_t seed = 7000;
    for (const Case& k : cases()) {
        const size_t in_n = k.in.numel(), out_n = in_n * k.factor * k.factor;
        const std::vector<float> dy = bf16_values(sftest::random_uniform(out_n, ++seed, -1, 1));
        const std::vector<float> dx0 = bf16_values(sftest::random_uniform(in_n, ++seed, -1, 1));
        const std::vector<float> want = backward_in_kernel_order(k, dy, dx0);
        for (bool row_loads : {false, true}) {  // each load used before the next, and each row's together
            bool guards = false;
            const std::vector<float> got = run_backward(ctx, k, dy, dx0, &guards, row_loads);
            ASSERT_EQ(got.size(), want.size());
            size_t differ = 0;
            for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
            EXPECT_EQ(differ, 0u) << label(k) << (row_loads ? " row loads" : "")
                                  << ": elements differing from the kernel's documented order";
            EXPECT_TRUE(guards) << label(k) << ": wrote outside dx";
        }
    }
}

}  // namespace
