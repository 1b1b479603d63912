// Launch arithmetic of the custom stem convolution (kernels/stemconv_cuda.h), on the CPU: plan geometry
// and workspace sizes for the model's shapes (batch 128, 256x512 input, Cin 2 or 4 -> 32), the
// 160x320 input and odd sizes, invariants over many shapes, unsupported shapes rejected with the
// reason, and the launchers' documented errors (raised before anything is launched, so no GPU is
// needed).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kernels/conv.h"
#include "kernels/stemconv_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::StemConvPlan;

kern::ConvShape stem_shape(int n, int h, int w, int cin, int cout) {
    kern::ConvShape s;
    s.n = n;
    s.h = h;
    s.w = w;
    s.cin = cin;
    s.cout = cout;
    s.k = 3;
    s.stride = 2;
    s.pad = 1;
    return s;
}

// The geometry is a constant expression: the planner may fold it.
static_assert(kern::stemconv_geometry(128, 256, 512, 2, 32).tiles == 128 * 32 * 8, "constexpr geometry");
static_assert(kern::stemconv_geometry(128, 256, 512, 2, 32).workspace_floats == 1024 * 576, "constexpr workspace");

TEST(KernelsStemconvLaunch, ModelShape) {
    // stem.conv1 at batch 128: [128, 256, 512, 2] -> [128, 128, 256, 32].
    const StemConvPlan p = kern::stemconv_plan(stem_shape(128, 256, 512, 2, 32));
    EXPECT_EQ(p.p, 128);
    EXPECT_EQ(p.q, 256);
    EXPECT_EQ(p.groups, 4);
    EXPECT_EQ(p.tiles_h, 32);  // 4 output rows per tile
    EXPECT_EQ(p.tiles_w, 8);   // 32 output columns per tile
    EXPECT_EQ(p.tiles, 128LL * 32 * 8);
    EXPECT_EQ(p.fwd_threads, 128);  // 32 columns x 4 channel groups
    EXPECT_EQ(p.wgrad_cblocks, 1);
    EXPECT_EQ(p.wgrad_gb, 4);
    EXPECT_EQ(p.wgrad_threads, 384);  // 4 groups x 3 filter rows x 32 lanes
    EXPECT_EQ(p.chunks, 1024);        // capped; 32768 tiles / 8 = 4096 would be allowed
    EXPECT_EQ(p.entries, 32 * 9 * 2);
    EXPECT_EQ(p.finalize_blocks, 18);  // 576 / 32
    EXPECT_EQ(p.workspace_floats, size_t(1024 * 576));
    EXPECT_EQ(kern::stemconv_workspace_floats(stem_shape(128, 256, 512, 2, 32)), p.workspace_floats);
}

TEST(KernelsStemconvLaunch, RgbMaskAndLargeBatch) {
    // 4-channel stem (RGB + mask): only the filter and the workspace grow.
    StemConvPlan p = kern::stemconv_plan(stem_shape(128, 256, 512, 4, 32));
    EXPECT_EQ(p.tiles, 128LL * 32 * 8);
    EXPECT_EQ(p.fwd_threads, 128);
    EXPECT_EQ(p.wgrad_threads, 384);
    EXPECT_EQ(p.chunks, 1024);
    EXPECT_EQ(p.entries, 32 * 9 * 4);
    EXPECT_EQ(p.finalize_blocks, 36);
    EXPECT_EQ(p.workspace_floats, size_t(1024 * 1152));

    // Batch 512: four times the tiles, the same chunk count (more tiles per wgrad block).
    p = kern::stemconv_plan(stem_shape(512, 256, 512, 2, 32));
    EXPECT_EQ(p.n, 512);
    EXPECT_EQ(p.tiles, 512LL * 32 * 8);
    EXPECT_EQ(p.chunks, 1024);
    EXPECT_EQ(p.workspace_floats, size_t(1024 * 576));
}

TEST(KernelsStemconvLaunch, OtherInputSizes) {
    // 160x320 input -> 80x160: 20 x 5 tiles per image.
    StemConvPlan p = kern::stemconv_plan(stem_shape(128, 160, 320, 2, 32));
    EXPECT_EQ(p.p, 80);
    EXPECT_EQ(p.q, 160);
    EXPECT_EQ(p.tiles_h, 20);
    EXPECT_EQ(p.tiles_w, 5);
    EXPECT_EQ(p.tiles, 128LL * 100);
    EXPECT_EQ(p.chunks, 1024);

    // Odd 33x65 -> 17x33: the last tile row has 1 valid row, the last tile column 1 valid column.
    p = kern::stemconv_plan(stem_shape(2, 33, 65, 2, 32));
    EXPECT_EQ(p.p, 17);
    EXPECT_EQ(p.q, 33);
    EXPECT_EQ(p.tiles_h, 5);
    EXPECT_EQ(p.tiles_w, 2);
    EXPECT_EQ(p.tiles, 20);
    EXPECT_EQ(p.chunks, 2);  // 20 tiles / 8 per chunk
    EXPECT_EQ(p.workspace_floats, size_t(2 * 576));

    // A single pixel: one tile, one chunk.
    p = kern::stemconv_plan(stem_shape(1, 1, 1, 4, 8));
    EXPECT_EQ(p.p, 1);
    EXPECT_EQ(p.q, 1);
    EXPECT_EQ(p.tiles, 1);
    EXPECT_EQ(p.chunks, 1);
    EXPECT_EQ(p.fwd_threads, 32);
    EXPECT_EQ(p.wgrad_threads, 96);
    EXPECT_EQ(p.entries, 8 * 36);
    EXPECT_EQ(p.finalize_blocks, 9);
    EXPECT_EQ(p.workspace_floats, size_t(288));
}

TEST(KernelsStemconvLaunch, WideOutputsSplitChannelBlocks) {
    // Cout 64: 8 groups -> two wgrad channel blocks of 4, sharing the chunk budget.
    StemConvPlan p = kern::stemconv_plan(stem_shape(128, 256, 512, 2, 64));
    EXPECT_EQ(p.fwd_threads, 256);
    EXPECT_EQ(p.wgrad_cblocks, 2);
    EXPECT_EQ(p.wgrad_gb, 4);
    EXPECT_EQ(p.wgrad_threads, 384);
    EXPECT_EQ(p.chunks, 512);
    EXPECT_EQ(p.workspace_floats, size_t(512 * 64 * 18));
    // Cout 40: 5 groups -> blocks of 3 (the second has one idle warp triple).
    p = kern::stemconv_plan(stem_shape(2, 64, 64, 4, 40));
    EXPECT_EQ(p.wgrad_cblocks, 2);
    EXPECT_EQ(p.wgrad_gb, 3);
    EXPECT_EQ(p.wgrad_threads, 288);
    EXPECT_EQ(p.tiles, 2 * 8 * 1);
    EXPECT_EQ(p.chunks, 2);
    // Cout 24: 3 groups in one block.
    p = kern::stemconv_plan(stem_shape(2, 64, 64, 2, 24));
    EXPECT_EQ(p.wgrad_cblocks, 1);
    EXPECT_EQ(p.wgrad_gb, 3);
    EXPECT_EQ(p.fwd_threads, 96);
}

// Invariants the kernels rely on, over a sweep of shapes.
TEST(KernelsStemconvLaunch, PlanInvariants) {
    for (int cin : {2, 4}) {
        for (int cout = 8; cout <= 64; cout += 8) {
            for (int n : {1, 3, 128}) {
                for (int hw : {1, 2, 7, 9, 33, 64, 255}) {
                    const int h = hw, w = 2 * hw + 1;
                    const StemConvPlan p = kern::stemconv_plan(stem_shape(n, h, w, cin, cout));
                    const std::string what = "n=" + std::to_string(n) + " " + std::to_string(h) + "x" +
                                             std::to_string(w) + " " + std::to_string(cin) + "->" +
                                             std::to_string(cout);
                    EXPECT_EQ(p.p, (h + 2 - 3) / 2 + 1) << what;
                    EXPECT_EQ(p.q, (w + 2 - 3) / 2 + 1) << what;
                    EXPECT_EQ(p.groups * 8, cout) << what;
                    // Tiles cover the output with no empty tile row or column.
                    EXPECT_GE(p.tiles_h * kern::kStemTileP, p.p) << what;
                    EXPECT_LT((p.tiles_h - 1) * kern::kStemTileP, p.p) << what;
                    EXPECT_GE(p.tiles_w * kern::kStemTileQ, p.q) << what;
                    EXPECT_LT((p.tiles_w - 1) * kern::kStemTileQ, p.q) << what;
                    EXPECT_EQ(p.tiles, static_cast<long long>(n) * p.tiles_h * p.tiles_w) << what;
                    EXPECT_EQ(p.fwd_threads, 32 * p.groups) << what;
                    EXPECT_LE(p.fwd_threads, 256) << what;
                    // wgrad channel blocks cover the groups, none empty, at most 4 groups (384 threads).
                    EXPECT_GE(p.wgrad_cblocks * p.wgrad_gb, p.groups) << what;
                    EXPECT_LT((p.wgrad_cblocks - 1) * p.wgrad_gb, p.groups) << what;
                    EXPECT_LE(p.wgrad_gb, kern::kStemWgradGroups) << what;
                    EXPECT_EQ(p.wgrad_threads, 96 * p.wgrad_gb) << what;
                    EXPECT_GE(p.chunks, 1) << what;
                    EXPECT_LE(static_cast<long long>(p.chunks), p.tiles) << what;
                    EXPECT_LE(p.chunks * p.wgrad_cblocks, kern::kStemMaxChunks + p.wgrad_cblocks) << what;
                    EXPECT_EQ(p.entries, cout * 9 * cin) << what;
                    EXPECT_GE(p.finalize_blocks * kern::kStemFinalizeX, p.entries) << what;
                    EXPECT_LT((p.finalize_blocks - 1) * kern::kStemFinalizeX, p.entries) << what;
                    EXPECT_EQ(p.workspace_floats, static_cast<size_t>(p.chunks) * p.entries) << what;
                    // Even split tiles*k/chunks: chunks partition the tiles and none is empty.
                    long long prev = 0;
                    for (int k = 1; k <= p.chunks; ++k) {
                        const long long b = p.tiles * k / p.chunks;
                        ASSERT_GT(b, prev) << what << " chunk " << k - 1;
                        prev = b;
                    }
                    EXPECT_EQ(prev, p.tiles) << what;
                }
            }
        }
    }
}

TEST(KernelsStemconvLaunch, UnsupportedShapesRejected) {
    const kern::ConvShape s = stem_shape(2, 16, 16, 2, 32);
    EXPECT_TRUE(kern::stemconv_supported(s));
    EXPECT_TRUE(kern::stemconv_supported(stem_shape(1, 1, 1, 4, 64)));
    EXPECT_TRUE(kern::stemconv_supported(stem_shape(512, 256, 512, 4, 8)));

    auto expect_rejected = [](const kern::ConvShape& bad, const char* part) {
        EXPECT_FALSE(kern::stemconv_supported(bad)) << part;
        SF_EXPECT_ERROR(kern::stemconv_plan(bad), "stemconv", "unsupported", part);
        SF_EXPECT_ERROR(kern::stemconv_workspace_floats(bad), part);
    };
    kern::ConvShape b = s;
    b.k = 5;
    b.pad = 2;
    expect_rejected(b, "k=5");
    b = s;
    b.stride = 1;
    expect_rejected(b, "stride=1");
    b = s;
    b.pad = 0;
    expect_rejected(b, "pad=0");
    b = s;
    b.groups = 2;
    expect_rejected(b, "groups=2");
    expect_rejected(stem_shape(2, 16, 16, 3, 32), "cin=3");
    expect_rejected(stem_shape(2, 16, 16, 8, 32), "cin=8");
    expect_rejected(stem_shape(2, 16, 16, 2, 12), "cout=12");
    expect_rejected(stem_shape(2, 16, 16, 2, 72), "cout=72");
    expect_rejected(stem_shape(2, 16, 16, 2, 0), "cout=0");
    b = s;
    b.bias = true;
    expect_rejected(b, "bias");
    expect_rejected(stem_shape(0, 16, 16, 2, 32), "n=0");
    expect_rejected(stem_shape(2, 16, -1, 2, 32), "w=-1");
    expect_rejected(stem_shape(65536, 16, 16, 2, 32), "n=65536");
    expect_rejected(stem_shape(1, 8 * 65536, 1, 2, 32), "65536 tile rows");
    expect_rejected(stem_shape(65535, 4096, 65536, 2, 32), "tiles");
    EXPECT_TRUE(kern::stemconv_supported(stem_shape(65535, 256, 512, 2, 32)));  // 1.7e7 tiles
}

// The launchers validate everything before launching; these calls never reach the GPU.
TEST(KernelsStemconvLaunch, LaunchersRejectBadArguments) {
    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;  // no stream needed: every call below throws before a launch
    auto bptr = [](uintptr_t a) { return reinterpret_cast<kern::bf16*>(a); };
    auto fptr = [](uintptr_t a) { return reinterpret_cast<float*>(a); };
    // 1 MiB apart: no two of these ranges overlap for the shape below (y: 2*8*8*32*2 = 8 KiB).
    kern::bf16* x = bptr(0x100000);
    kern::bf16* w = bptr(0x200000);
    kern::bf16* y = bptr(0x300000);
    float* dw = fptr(0x400000);
    float* ws = fptr(0x500000);
    const kern::ConvShape s = stem_shape(2, 16, 16, 2, 32);
    const size_t wsn = kern::stemconv_workspace_floats(s);
    kern::ConvShape bad = s;
    bad.cin = 3;

    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(rt::Exec::cpu(), s, x, w, y), "stemconv_forward_cuda", "cpu");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, bad, x, w, y), "cin=3");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, bptr(0x100008), w, y), "x must be", "16-byte aligned");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, x, nullptr, y), "w must be");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, x, bptr(0x200002), y), "w must be");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, x, w, nullptr), "y must be");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, x, w, x), "alias");
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, x, w, bptr(0x100000 + 1024)), "alias");  // overlaps x
    SF_EXPECT_ERROR(kern::stemconv_forward_cuda(cuda, s, x, w, bptr(0x200000 - 1024)), "alias");  // overlaps w

    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(rt::Exec::cpu(), s, x, y, dw, ws, wsn), "backward_filter",
                    "cpu");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, bad, x, y, dw, ws, wsn), "cin=3");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, bptr(0x100004), y, dw, ws, wsn), "x must be");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, nullptr, dw, ws, wsn), "dy must be");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, bptr(0x300008), dw, ws, wsn), "dy must be");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, nullptr, ws, wsn), "dw must be");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, fptr(0x400002), ws, wsn), "dw must be");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, dw, nullptr, wsn), "workspace must be");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, dw, fptr(0x500001), wsn), "workspace must be",
                    "4-byte");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn - 1), "workspace", "too small",
                    "cin=2 cout=32");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, ws, ws, wsn), "dw must not alias");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, reinterpret_cast<float*>(y), ws, wsn),
                    "dw must not alias");
    SF_EXPECT_ERROR(kern::stemconv_backward_filter_cuda(cuda, s, x, y, dw, reinterpret_cast<float*>(x), wsn),
                    "workspace must not alias");
}

}  // namespace
