// Launch arithmetic of the small CUDA ops (kernels/eltwise_cuda.h, upsample_cuda.h, head_conv_cuda.h),
// on the CPU: the flat head/vector/tail split over many alignments, grids and workspace sizes, the
// upsample tap and gather-window functions the kernels call (emulated here on the host against
// upsample_ref exactly), and every launcher's documented errors and no-op cases (raised or returned
// before anything is launched, so no GPU is needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/eltwise_cuda.h"
#include "kernels/head_conv_cuda.h"
#include "kernels/upsample.h"
#include "kernels/upsample_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::bf16;

rt::Exec cuda_exec() {
    rt::Exec ex;
    ex.backend = rt::Backend::Cuda;  // no stream: every call below throws or returns before a launch
    return ex;
}

template <class T>
T* fake(uintptr_t a) {
    return reinterpret_cast<T*>(a);
}

// ---- flat split ----

TEST(KernelsEltwiseLaunch, SplitExamples) {
    // Aligned bf16 operands: no head; vectors of 8; the rest is tail.
    kern::EltSplit s = kern::elt_split(1000003, {{0x1000, 2}, {0x2000, 2}, {0x3000, 2}});
    EXPECT_EQ(s.head, 0u);
    EXPECT_EQ(s.vecs, 125000u);
    EXPECT_EQ(s.tail, 3u);
    // Same misalignment (6 bytes past a boundary): head of 5 elements, then vectors.
    s = kern::elt_split(100, {{0x1006, 2}, {0x2006, 2}});
    EXPECT_EQ(s.head, 5u);
    EXPECT_EQ(s.vecs, 11u);
    EXPECT_EQ(s.tail, 7u);
    // Different misalignments: all scalar.
    s = kern::elt_split(100, {{0x1006, 2}, {0x2002, 2}});
    EXPECT_EQ(s.head, 0u);
    EXPECT_EQ(s.vecs, 0u);
    EXPECT_EQ(s.tail, 100u);
    // n smaller than the head: scalar.
    s = kern::elt_split(3, {{0x1002, 2}});
    EXPECT_EQ(s.vecs, 0u);
    EXPECT_EQ(s.head + s.tail, 3u);
    // bf16 x realigning an fp32 y: x 10 bytes past (head 3), y 4 bytes past -> y + 12 bytes aligned.
    s = kern::elt_split(64, {{0x100a, 2}, {0x2004, 4}});
    EXPECT_EQ(s.head, 3u);
    EXPECT_EQ(s.vecs, 7u);
    EXPECT_EQ(s.tail, 5u);
    // The fp32 operand cannot follow: y 8 bytes past needs head 2 mod 4, x's head is 3.
    s = kern::elt_split(64, {{0x100a, 2}, {0x2008, 4}});
    EXPECT_EQ(s.vecs, 0u);
    EXPECT_EQ(s.tail, 64u);
    s = kern::elt_split(0, {{0x1000, 2}});
    EXPECT_EQ(s.head + s.vecs + s.tail, 0u);
}

// For every n near the vector size and every pair of (bf16, bf16) and (bf16, fp32) misalignments:
// the pieces partition [0, n) and every vector access is 16-byte aligned for every operand.
TEST(KernelsEltwiseLaunch, SplitInvariants) {
    for (size_t n = 0; n < 40; ++n) {
        for (uintptr_t ma = 0; ma < 16; ma += 2) {
            for (uintptr_t mb = 0; mb < 16; mb += 2) {
                for (size_t eb : {size_t(2), size_t(4)}) {
                    if (mb % eb) continue;
                    const uintptr_t a = 0x10000 + ma, b = 0x20000 + mb;
                    const kern::EltSplit s = kern::elt_split(n, {{a, 2}, {b, eb}});
                    const std::string what = "n=" + std::to_string(n) + " ma=" + std::to_string(ma) +
                                             " mb=" + std::to_string(mb) + " eb=" + std::to_string(eb);
                    ASSERT_EQ(s.head + 8 * s.vecs + s.tail, n) << what;
                    EXPECT_LT(s.head, 8u) << what;
                    if (s.vecs > 0) {
                        EXPECT_EQ((a + 2 * s.head) % 16, 0u) << what;
                        EXPECT_EQ((b + eb * s.head) % 16, 0u) << what;
                        EXPECT_LT(s.tail, 8u) << what;
                    }
                    // Whenever both can be aligned at a common index < n - 8, vectors must be used.
                    bool possible = false;
                    for (size_t h = 0; h + 8 <= n && h < 8; ++h)
                        possible |= (a + 2 * h) % 16 == 0 && (b + eb * h) % 16 == 0;
                    EXPECT_EQ(possible, s.vecs > 0) << what;
                    const size_t blocks = kern::elt_blocks(s);
                    EXPECT_GE(blocks, 1u) << what;
                    EXPECT_LE(blocks, kern::kEltMaxBlocks) << what;
                }
            }
        }
    }
}

TEST(KernelsEltwiseLaunch, Grids) {
    EXPECT_EQ(kern::elt_blocks({0, 0, 0}), 1u);
    EXPECT_EQ(kern::elt_blocks({0, 256, 7}), 1u);
    EXPECT_EQ(kern::elt_blocks({3, 257, 0}), 2u);
    EXPECT_EQ(kern::elt_blocks({0, 0, 1000}), 4u);  // scalar path: one element per thread
    EXPECT_EQ(kern::elt_blocks({0, size_t(1) << 30, 0}), kern::kEltMaxBlocks);
    // bias_add: vectors only with C % 8 == 0 and an aligned y.
    kern::EltSplit s = kern::bias_add_split(100, 64, 0x1000);
    EXPECT_EQ(s.vecs, 800u);
    EXPECT_EQ(s.head + s.tail, 0u);
    s = kern::bias_add_split(100, 60, 0x1000);
    EXPECT_EQ(s.vecs, 0u);
    EXPECT_EQ(s.tail, 6000u);
    s = kern::bias_add_split(100, 64, 0x1002);
    EXPECT_EQ(s.vecs, 0u);
    EXPECT_EQ(s.tail, 6400u);
    // Fusion backward: one block per 2048 elements, capped; workspace 2 floats per block.
    EXPECT_EQ(kern::fusion_backward_blocks(0), 0u);
    EXPECT_EQ(kern::fusion_backward_blocks(1), 1u);
    EXPECT_EQ(kern::fusion_backward_blocks(2048), 1u);
    EXPECT_EQ(kern::fusion_backward_blocks(2049), 2u);
    EXPECT_EQ(kern::fusion_backward_blocks(size_t(2) * 128 * 64 * 128), kern::kFusionMaxBlocks);
    EXPECT_EQ(kern::fusion_backward_workspace_floats(2049), 4u);
    EXPECT_EQ(kern::fusion_backward_workspace_floats(size_t(1) << 30), 2 * kern::kFusionMaxBlocks);
    EXPECT_EQ(kern::fusion_backward_workspace_floats(0), 0u);
}

TEST(KernelsEltwiseLaunch, ColumnSumPlan) {
    // Head conv1 bias gradient: N=2, 64x128, C=64, vector path.
    kern::ColumnSumPlan p = kern::column_sum_plan(2 * 64 * 128, 64, true);
    EXPECT_EQ(p.width, 8);
    EXPECT_EQ(p.groups, 8);
    EXPECT_EQ(p.block_x, 8);
    EXPECT_EQ(p.block_y, 32);
    EXPECT_EQ(p.grid_x, 1);
    EXPECT_EQ(p.chunks, kern::kColumnSumChunks);
    EXPECT_EQ(p.finalize_blocks, 2);
    EXPECT_EQ(p.workspace_floats, size_t(512 * 64));
    // Scalar path, odd C: 33 columns -> block_x 32, 2 blocks along columns; same workspace rule.
    p = kern::column_sum_plan(10, 33, false);
    EXPECT_EQ(p.width, 1);
    EXPECT_EQ(p.block_x, 32);
    EXPECT_EQ(p.block_y, 8);
    EXPECT_EQ(p.grid_x, 2);
    EXPECT_EQ(p.chunks, 10);
    EXPECT_EQ(p.workspace_floats, size_t(10 * 33));
    EXPECT_EQ(kern::column_sum_workspace_floats(10, 33), p.workspace_floats);
    EXPECT_EQ(kern::column_sum_workspace_floats(100000, 64), kern::column_sum_plan(100000, 64, true).workspace_floats);
    p = kern::column_sum_plan(0, 64, true);
    EXPECT_EQ(p.chunks, 0);
    EXPECT_EQ(p.workspace_floats, 0u);
    for (int c = 1; c <= 300; c += 7) {
        for (bool vec : {false, true}) {
            if (vec && c % 8) continue;
            for (size_t rows : {size_t(1), size_t(511), size_t(512), size_t(513), size_t(99999)}) {
                p = kern::column_sum_plan(rows, c, vec);
                const std::string what = "rows=" + std::to_string(rows) + " C=" + std::to_string(c);
                EXPECT_EQ(p.groups * p.width, c) << what;
                EXPECT_LE(p.block_x * p.block_y, kern::kEltThreads) << what;
                EXPECT_GT(2 * p.block_x * p.block_y, kern::kEltThreads) << what;
                EXPECT_EQ(p.block_y & (p.block_y - 1), 0) << what;
                EXPECT_GE(p.grid_x * p.block_x, p.groups) << what;
                EXPECT_LT((p.grid_x - 1) * p.block_x, p.groups) << what;
                EXPECT_GE(p.chunks, 1) << what;
                EXPECT_LE(static_cast<size_t>(p.chunks), rows) << what;
                EXPECT_GE(p.finalize_blocks * 32, c) << what;
                EXPECT_EQ(p.workspace_floats, kern::column_sum_workspace_floats(rows, c)) << what;
            }
        }
    }
    SF_EXPECT_ERROR(kern::column_sum_plan(10, 0, false), "C=0");
    SF_EXPECT_ERROR(kern::column_sum_plan(10, 12, true), "C=12", "% 8");
    SF_EXPECT_ERROR(kern::column_sum_workspace_floats(10, -3), "C=-3");
}

TEST(KernelsEltwiseLaunch, LaunchersRejectBadArguments) {
    const rt::Exec cuda = cuda_exec(), cpu = rt::Exec::cpu();
    bf16* a = fake<bf16>(0x10000);
    bf16* b = fake<bf16>(0x20000);
    bf16* y = fake<bf16>(0x30000);
    bf16* odd = fake<bf16>(0x30001);
    float* f = fake<float>(0x40000);
    float* g = fake<float>(0x48000);
    float* ws = fake<float>(0x50000);
    const size_t n = 5000;

    SF_EXPECT_ERROR(kern::add_bf16_cuda(cpu, n, a, b, y), "add_bf16_cuda", "cpu");
    SF_EXPECT_ERROR(kern::add_bf16_cuda(cuda, n, nullptr, b, y), "add_bf16_cuda", "a must be");
    SF_EXPECT_ERROR(kern::add_bf16_cuda(cuda, n, a, b, odd), "y must be", "2-byte aligned");
    SF_EXPECT_ERROR(kern::accumulate_bf16_cuda(cuda, n, odd, y), "accumulate_bf16_cuda", "x must be");
    // Overwrite mode (the first contribution to y): the same pointer checks, and a copy onto itself
    // is refused.
    SF_EXPECT_ERROR(kern::accumulate_bf16_cuda(cuda, n, odd, y, false), "accumulate_bf16_cuda", "x must be");
    SF_EXPECT_ERROR(kern::accumulate_bf16_cuda(cuda, n, y, y, false), "accumulate_bf16_cuda", "overwrite with x == y");
    SF_EXPECT_ERROR(kern::accumulate_bf16_to_f32_cuda(cuda, n, a, fake<float>(0x40002)), "y must be", "4-byte aligned");
    SF_EXPECT_ERROR(kern::convert_f32_to_bf16_cuda(cpu, n, f, y), "convert_f32_to_bf16_cuda", "cpu");
    SF_EXPECT_ERROR(kern::convert_f32_to_bf16_cuda(cuda, n, nullptr, y), "x must be");
    SF_EXPECT_ERROR(kern::fill_bf16_cuda(cuda, n, 1.0f, nullptr), "fill_bf16_cuda", "y must be");
    SF_EXPECT_ERROR(kern::bias_add_bf16_cuda(cuda, 10, 0, f, y), "bias_add_bf16_cuda", "C=0");
    SF_EXPECT_ERROR(kern::bias_add_bf16_cuda(cuda, 10, 64, nullptr, y), "bias must be");
    SF_EXPECT_ERROR(kern::column_sum_bf16_cuda(cuda, 100, 64, a, f, ws, kern::column_sum_workspace_floats(100, 64) - 1),
                    "column_sum_bf16_cuda", "too small", "column_sum_workspace_floats");
    SF_EXPECT_ERROR(kern::column_sum_bf16_cuda(cuda, 100, 64, a, nullptr, ws, 1 << 20), "out must be");
    SF_EXPECT_ERROR(kern::column_sum_bf16_cuda(cuda, 100, -1, a, f, ws, 1 << 20), "C=-1");
    SF_EXPECT_ERROR(kern::fusion_forward_bf16_cuda(cuda, n, a, b, nullptr, g, y), "fusion_forward_bf16_cuda",
                    "wa must be");
    SF_EXPECT_ERROR(kern::fusion_forward_bf16_cuda(cpu, n, a, b, f, g, y), "cpu");

    const size_t wsn = kern::fusion_backward_workspace_floats(n);
    const char* fb = "fusion_backward_bf16_cuda";
    SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, y, odd, f, g, ws, wsn), fb, "db must be");
    SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, y, y, f, g, ws, wsn), fb,
                    "must be different");
    for (bool acc_a : {false, true})  // every overwrite/accumulate combination keeps the checks
        SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, fake<bf16>(0x60000), a, f, g, ws, wsn,
                                                        acc_a, !acc_a),
                        fb, "must not alias");
    SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, fake<bf16>(0x60000), a, f, g, ws, wsn), fb,
                    "must not alias");
    SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, fake<bf16>(0x60000), fake<bf16>(0x70000), f,
                                                    f, ws, wsn),
                    fb, "dwa and dwb");
    SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, fake<bf16>(0x60000), fake<bf16>(0x70000), f,
                                                    g, ws, wsn - 1),
                    fb, "too small", "fusion_backward_workspace_floats");
    SF_EXPECT_ERROR(kern::fusion_backward_bf16_cuda(cuda, n, a, b, f, g, y, fake<bf16>(0x60000), fake<bf16>(0x70000),
                                                    nullptr, g, ws, wsn),
                    fb, "dwa must be");
}

// n == 0 (rows == 0) returns before any pointer check or launch: null pointers are fine, and no
// CUDA call is made (this machine may have no GPU).
TEST(KernelsEltwiseLaunch, EmptyIsNoOp) {
    const rt::Exec cuda = cuda_exec();
    kern::add_bf16_cuda(cuda, 0, nullptr, nullptr, nullptr);
    kern::accumulate_bf16_cuda(cuda, 0, nullptr, nullptr);
    kern::accumulate_bf16_to_f32_cuda(cuda, 0, nullptr, nullptr);
    kern::convert_f32_to_bf16_cuda(cuda, 0, nullptr, nullptr);
    kern::fill_bf16_cuda(cuda, 0, 0.0f, nullptr);
    kern::bias_add_bf16_cuda(cuda, 0, 64, nullptr, nullptr);
    kern::column_sum_bf16_cuda(cuda, 0, 64, nullptr, nullptr, nullptr, 0);
    kern::fusion_forward_bf16_cuda(cuda, 0, nullptr, nullptr, nullptr, nullptr, nullptr);
    kern::fusion_backward_bf16_cuda(cuda, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, nullptr, 0);
    kern::upsample_bilinear_forward_bf16_cuda(cuda, {0, 4, 4, 8}, 2, nullptr, nullptr);
    kern::upsample_bilinear_backward_bf16_cuda(cuda, {0, 4, 4, 8}, 8, nullptr, nullptr);
    // The overwrite modes too.
    kern::accumulate_bf16_cuda(cuda, 0, nullptr, nullptr, false);
    kern::fusion_backward_bf16_cuda(cuda, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, nullptr, 0, false, false);
    kern::upsample_bilinear_backward_bf16_cuda(cuda, {0, 4, 4, 8}, 8, nullptr, nullptr, false);
    kern::head_conv_backward_cuda(cuda, 0, 64, 4, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                  false);
    kern::head_conv_forward_cuda(cuda, 0, 64, 4, nullptr, nullptr, nullptr, nullptr);
    kern::head_conv_backward_cuda(cuda, 0, 64, 4, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0);
    EXPECT_EQ(kern::head_conv_workspace_floats(0, 64, 4), 0u);
    // The CPU Exec and shape checks still apply to empty calls.
    SF_EXPECT_ERROR(kern::add_bf16_cuda(rt::Exec::cpu(), 0, nullptr, nullptr, nullptr), "cpu");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, {0, 4, 4, 8}, 3, nullptr, nullptr), "factor 3");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, 0, 64, 9, nullptr, nullptr, nullptr, nullptr), "cout=9");
}

// ---- upsample ----

// Every output's taps are inside the gather windows of the inputs they name, the windows hold at
// most 2f outputs, and the gather weights of one output over all inputs sum to 1 (exactly).
TEST(KernelsUpsampleLaunch, GatherWindowsCoverTheTaps) {
    for (int f : {2, 4, 8}) {
        for (int in : {1, 2, 3, 5, 8, 16}) {
            const std::string what = "f=" + std::to_string(f) + " in=" + std::to_string(in);
            for (int o = 0; o < f * in; ++o) {
                const kern::UpsampleTap t = kern::upsample_tap(o, in, f);
                ASSERT_GE(t.i0, 0) << what;
                ASSERT_LE(t.i1, in - 1) << what;
                float total = 0.0f;
                for (int i = 0; i < in; ++i) {
                    int lo, hi;
                    kern::upsample_gather_range(i, in, f, &lo, &hi);
                    const float wgt = kern::upsample_gather_weight(o, i, in, f);
                    if (wgt != 0.0f) {
                        EXPECT_GE(o, lo) << what << " o=" << o << " i=" << i;
                        EXPECT_LE(o, hi) << what << " o=" << o << " i=" << i;
                    }
                    total += wgt;
                }
                EXPECT_EQ(total, 1.0f) << what << " o=" << o;
            }
            for (int i = 0; i < in; ++i) {
                int lo, hi;
                kern::upsample_gather_range(i, in, f, &lo, &hi);
                EXPECT_GE(lo, 0) << what;
                EXPECT_LE(hi, f * in - 1) << what;
                EXPECT_LE(hi - lo + 1, 2 * f) << what;
            }
        }
    }
}

// Host emulation of the kernels' arithmetic (same taps, same expression, same visiting order, fp32)
// against the reference: forward bit-exact on random bf16 data; backward exact on small integers.
std::vector<float> emulate_forward(const kern::Shape4& s, int f, const std::vector<float>& x) {
    const int oh_n = f * s.h, ow_n = f * s.w;
    std::vector<float> y(static_cast<size_t>(s.n) * oh_n * ow_n * s.c);
    for (int b = 0; b < s.n; ++b)
        for (int oh = 0; oh < oh_n; ++oh)
            for (int ow = 0; ow < ow_n; ++ow) {
                const kern::UpsampleTap th = kern::upsample_tap(oh, s.h, f), tw = kern::upsample_tap(ow, s.w, f);
                const float w00 = th.l0 * tw.l0, w01 = th.l0 * tw.l1, w10 = th.l1 * tw.l0, w11 = th.l1 * tw.l1;
                auto at = [&](int ih, int iw, int c) {
                    return x[((static_cast<size_t>(b) * s.h + ih) * s.w + iw) * s.c + c];
                };
                for (int c = 0; c < s.c; ++c)
                    y[((static_cast<size_t>(b) * oh_n + oh) * ow_n + ow) * s.c + c] =
                        at(th.i0, tw.i0, c) * w00 +
                        (at(th.i0, tw.i1, c) * w01 + (at(th.i1, tw.i0, c) * w10 + at(th.i1, tw.i1, c) * w11));
            }
    return y;
}

void emulate_backward(const kern::Shape4& s, int f, const std::vector<float>& dy, std::vector<float>& dx) {
    const int oh_n = f * s.h, ow_n = f * s.w;
    for (int b = 0; b < s.n; ++b)
        for (int ih = 0; ih < s.h; ++ih)
            for (int iw = 0; iw < s.w; ++iw)
                for (int c = 0; c < s.c; ++c) {
                    int lo_h, hi_h, lo_w, hi_w;
                    kern::upsample_gather_range(ih, s.h, f, &lo_h, &hi_h);
                    kern::upsample_gather_range(iw, s.w, f, &lo_w, &hi_w);
                    float acc = 0.0f;
                    for (int oh = lo_h; oh <= hi_h; ++oh) {
                        const float wh = kern::upsample_gather_weight(oh, ih, s.h, f);
                        for (int ow = lo_w; ow <= hi_w; ++ow) {
                            const float ww = kern::upsample_gather_weight(ow, iw, s.w, f);
                            if (wh == 0.0f || ww == 0.0f) continue;
                            acc = std::fma(wh * ww, dy[((static_cast<size_t>(b) * oh_n + oh) * ow_n + ow) * s.c + c],
                                           acc);
                        }
                    }
                    dx[((static_cast<size_t>(b) * s.h + ih) * s.w + iw) * s.c + c] += acc;
                }
}

TEST(KernelsUpsampleLaunch, HostEmulationMatchesReference) {
    const kern::Shape4 shapes[] = {{2, 5, 7, 3}, {1, 1, 1, 2}, {1, 1, 6, 1}, {3, 4, 2, 8}};
    uint64_t seed = 31;
    for (const kern::Shape4& s : shapes) {
        for (int f : {2, 4, 8}) {
            const std::string what = "f=" + std::to_string(f) + " (" + std::to_string(s.n) + "," + std::to_string(s.h) +
                                     "," + std::to_string(s.w) + "," + std::to_string(s.c) + ")";
            const size_t in_n = s.numel(), out_n = in_n * f * f;
            const std::vector<double> xr = sftest::random_uniform(in_n, ++seed, -3, 3);
            std::vector<float> x(in_n);
            for (size_t i = 0; i < in_n; ++i) x[i] = kern::round_bf16(static_cast<float>(xr[i]));
            std::vector<float> want(out_n);
            kern::upsample_bilinear_forward_ref<float>(s, f, x.data(), want.data());
            EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(emulate_forward(s, f, x)), sftest::to_double(want),
                                                  0, 0, what + " forward"));

            const std::vector<double> dyi = sftest::random_ints(out_n, ++seed, -8, 8);
            const std::vector<double> dx0 = sftest::random_ints(in_n, ++seed, -4, 4);
            std::vector<float> dy(dyi.begin(), dyi.end()), got(dx0.begin(), dx0.end()), ref(dx0.begin(), dx0.end());
            emulate_backward(s, f, dy, got);
            kern::upsample_bilinear_backward_ref<float>(s, f, dy.data(), ref.data());
            EXPECT_TRUE(
                sftest::close_elementwise(sftest::to_double(got), sftest::to_double(ref), 0, 0, what + " backward"));
        }
    }
}

TEST(KernelsUpsampleLaunch, WidthAndGrid) {
    EXPECT_EQ(kern::upsample_width(128, 0x1000, 0x2000), 8);
    EXPECT_EQ(kern::upsample_width(12, 0x1000, 0x2000), 1);
    EXPECT_EQ(kern::upsample_width(128, 0x1008, 0x2000), 1);
    EXPECT_EQ(kern::upsample_width(128, 0x1000, 0x2002), 1);
    EXPECT_EQ(kern::upsample_blocks(0), 1u);
    EXPECT_EQ(kern::upsample_blocks(256), 1u);
    EXPECT_EQ(kern::upsample_blocks(257), 2u);
    EXPECT_EQ(kern::upsample_blocks(size_t(128) * 64 * 128 * 16), kern::kUpsampleMaxBlocks);
}

TEST(KernelsUpsampleLaunch, LaunchersRejectBadArguments) {
    const rt::Exec cuda = cuda_exec();
    bf16* x = fake<bf16>(0x10000);
    bf16* y = fake<bf16>(0x20000);
    const kern::Shape4 in{2, 8, 16, 64};
    const char* fwd = "upsample_bilinear_forward_bf16_cuda";
    const char* bwd = "upsample_bilinear_backward_bf16_cuda";
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, in, 3, x, y), fwd, "factor 3", "2, 4, 8");
    SF_EXPECT_ERROR(kern::upsample_bilinear_backward_bf16_cuda(cuda, in, 1, y, x), bwd, "factor 1");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, {2, 0, 16, 64}, 2, x, y), "bad input shape");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, {-1, 8, 16, 64}, 2, x, y), "bad input shape");
    SF_EXPECT_ERROR(kern::upsample_bilinear_backward_bf16_cuda(cuda, {2, 8, 16, 0}, 2, y, x), "bad input shape");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(rt::Exec::cpu(), in, 2, x, y), fwd, "cpu");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, in, 2, nullptr, y), "x must be");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, in, 2, x, fake<bf16>(0x20001)), "y must be");
    SF_EXPECT_ERROR(kern::upsample_bilinear_backward_bf16_cuda(cuda, in, 2, nullptr, x), "dy must be");
    SF_EXPECT_ERROR(kern::upsample_bilinear_backward_bf16_cuda(cuda, in, 2, y, y), bwd, "alias");
    SF_EXPECT_ERROR(kern::upsample_bilinear_backward_bf16_cuda(cuda, in, 2, y, y, false), bwd, "alias");
    SF_EXPECT_ERROR(kern::upsample_bilinear_backward_bf16_cuda(cuda, in, 3, y, x, false), bwd, "factor 3");
    SF_EXPECT_ERROR(kern::upsample_bilinear_forward_bf16_cuda(cuda, {1, 1 << 28, 1, 8}, 8, x, y), "too large");
}

// ---- head conv ----

TEST(KernelsHeadConvLaunch, Plans) {
    // The model: N=2 at 64x128, Cin 64, Cout 1 / 2 / 4.
    const size_t rows = 2 * 64 * 128;
    kern::HeadConvPlan p = kern::head_conv_plan(rows, 64, 4);
    EXPECT_EQ(p.groups, 8);
    EXPECT_EQ(p.forward_blocks, 512);  // 16384 rows / 32
    EXPECT_EQ(p.chunks, 512);
    EXPECT_EQ(p.finalize_blocks, 9);  // 4*64 + 4 = 260 entries
    EXPECT_EQ(p.workspace_floats, size_t(512 * 260));
    EXPECT_EQ(kern::head_conv_workspace_floats(rows, 64, 4), p.workspace_floats);
    // N=128: the backward caps at 1024 chunks, the forward at 8192 blocks.
    p = kern::head_conv_plan(size_t(128) * 64 * 128, 64, 1);
    EXPECT_EQ(p.forward_blocks, 8192);
    EXPECT_EQ(p.chunks, kern::kHeadConvChunks);
    EXPECT_EQ(p.finalize_blocks, 3);  // 65 entries
    EXPECT_EQ(p.workspace_floats, size_t(1024 * 65));
    // Small: 3 rows, Cin 8, Cout 8 -> one block, one chunk, 72 entries.
    p = kern::head_conv_plan(3, 8, 8);
    EXPECT_EQ(p.groups, 1);
    EXPECT_EQ(p.forward_blocks, 1);
    EXPECT_EQ(p.chunks, 1);
    EXPECT_EQ(p.finalize_blocks, 3);
    EXPECT_EQ(p.workspace_floats, 72u);
    for (size_t r :
         {size_t(1), size_t(31), size_t(32), size_t(33), size_t(32 * 1024), size_t(32 * 1024 + 1), size_t(1) << 24}) {
        p = kern::head_conv_plan(r, 64, 2);
        const std::string what = "rows=" + std::to_string(r);
        EXPECT_GE(static_cast<size_t>(p.forward_blocks) * kern::kHeadConvRowsPerBlock,
                  std::min(r, kern::kHeadConvMaxBlocks * kern::kHeadConvRowsPerBlock))
            << what;
        EXPECT_GE(p.chunks, 1) << what;
        EXPECT_LE(p.chunks, kern::kHeadConvChunks) << what;
        EXPECT_LE(static_cast<size_t>(p.chunks), r) << what;  // every chunk holds a row
    }
}

TEST(KernelsHeadConvLaunch, BadArgumentsRejected) {
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 64, 9), "cout=9", "[1, 8]");
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 64, 0), "cout=0");
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 12, 1), "cin=12", "multiple of 8");
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 128, 1), "cin=128", "[8, 64]");
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 0, 1), "cin=0");
    SF_EXPECT_ERROR(kern::head_conv_workspace_floats(10, 64, 9), "cout=9");
    // A slice of wider rows: the pitch a multiple of 8, at least cin (0: cin).
    EXPECT_EQ(kern::head_conv_plan(10, 64, 1).pitch, 64);
    EXPECT_EQ(kern::head_conv_plan(10, 64, 1, 256).pitch, 256);
    EXPECT_EQ(kern::head_conv_plan(10, 64, 1, 256).workspace_floats, kern::head_conv_plan(10, 64, 1).workspace_floats);
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 64, 1, 32), "pitch=32", "at least cin=64");
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 64, 1, 68), "pitch=68", "multiple of 8");
    SF_EXPECT_ERROR(kern::head_conv_plan(10, 64, 1, -8), "pitch=-8");

    const rt::Exec cuda = cuda_exec();
    bf16* x = fake<bf16>(0x10000);
    bf16* dx = fake<bf16>(0x20000);
    float* w = fake<float>(0x30000);
    float* b = fake<float>(0x31000);
    float* y = fake<float>(0x40000);
    float* dy = fake<float>(0x50000);
    float* dw = fake<float>(0x60000);
    float* db = fake<float>(0x61000);
    float* ws = fake<float>(0x70000);
    const size_t rows = 1000;
    const size_t wsn = kern::head_conv_workspace_floats(rows, 64, 2);
    const char* fwd = "head_conv_forward_cuda";
    const char* bwd = "head_conv_backward_cuda";
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(rt::Exec::cpu(), rows, 64, 2, x, w, b, y), fwd, "cpu");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 64, 9, x, w, b, y), "cout=9");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 60, 2, x, w, b, y), "cin=60");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 64, 2, x, w, b, y, 60), "pitch=60");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, dx, dw, db, ws, wsn, false, 70),
                    "pitch=70");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 64, 2, fake<bf16>(0x10008), w, b, y), fwd, "x must be",
                    "16-byte");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 64, 2, x, nullptr, b, y), "w must be");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 64, 2, x, w, nullptr, y), "b must be");
    SF_EXPECT_ERROR(kern::head_conv_forward_cuda(cuda, rows, 64, 2, x, w, b, fake<float>(0x40002)), "y must be");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, x, dw, db, ws, wsn), bwd, "alias x");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, x, dw, db, ws, wsn, false), bwd,
                    "alias x");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, fake<bf16>(0x20002), dw, db, ws, wsn),
                    "dx must be");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, nullptr, w, dx, dw, db, ws, wsn), "dy must be");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, dx, dw, nullptr, ws, wsn), "db must be");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, dx, dw, db, ws, wsn - 1), "too small",
                    "head_conv_workspace_floats");
    SF_EXPECT_ERROR(kern::head_conv_backward_cuda(cuda, rows, 64, 2, x, dy, w, dx, dw, db, nullptr, wsn), "workspace");
}

}  // namespace
