// Launch arithmetic of the custom depthwise 3x3 CUDA convolution (kernels/dwconv_cuda.h), on the CPU:
// plan geometry and workspace sizes for the model's shapes (batch 128, 256x512 input), invariants
// over many shapes, unsupported shapes rejected with the reason, and the launchers' documented
// errors (raised before anything is launched, so no GPU is needed). The variants' plans:
// kernels_dwconv_variants_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/dw_shape.h"

namespace {

using sftest::dw_shape;

using kern::DwConvPlan;

// The geometry is a constant expression: the planner may fold it.
static_assert(kern::dwconv3x3_geometry(128, 64, 128, 64, 1).fwd.grid == 8192, "constexpr geometry");
static_assert(kern::dwconv3x3_geometry(128, 64, 128, 32, 2).workspace_floats == 256 * 32 * 9, "constexpr workspace");

TEST(KernelsDwconvLaunch, StrideOneModelShapes) {
    // LiteBlock(32) hidden tensor at 1/4: N=128, 64x128, C=64. Thread tiles 2x4 (fwd, dgrad), 1x4 (wgrad).
    DwConvPlan p = kern::dwconv3x3_plan(dw_shape(128, 64, 128, 64, 1));
    EXPECT_EQ(p.p, 64);
    EXPECT_EQ(p.q, 128);
    EXPECT_EQ(p.wgrad.groups, 8);
    EXPECT_EQ(p.fwd.tile_h, 2);
    EXPECT_EQ(p.fwd.tile_w, 4);
    EXPECT_EQ(p.fwd.tiles_h, 32);
    EXPECT_EQ(p.fwd.tiles_w, 32);
    EXPECT_EQ(p.fwd.items, 128LL * 32 * 32 * 8);  // 1,048,576 threads
    EXPECT_EQ(p.fwd.block, 128);
    EXPECT_EQ(p.fwd.grid, 8192);
    EXPECT_EQ(p.dgrad.tiles_h, 32);  // dx has the same size at stride 1
    EXPECT_EQ(p.dgrad.tiles_w, 32);
    EXPECT_EQ(p.dgrad.grid, 8192);
    EXPECT_EQ(p.wgrad.tile_h, 1);
    EXPECT_EQ(p.wgrad.tile_w, 4);
    EXPECT_EQ(p.wgrad.tiles_h, 64);
    EXPECT_EQ(p.wgrad.tiles_w, 32);
    EXPECT_EQ(p.wgrad.items, 128LL * 64 * 32);  // 262,144 tiles per channel group
    EXPECT_EQ(p.wgrad.block_x, 8);
    EXPECT_EQ(p.wgrad.block_y, 16);
    EXPECT_EQ(p.wgrad.grid_x, 1);
    EXPECT_EQ(p.wgrad.chunks, 256);          // capped: 262144 / (16 lanes * 4) = 4096 would be allowed
    EXPECT_EQ(p.wgrad.finalize_blocks, 18);  // 64 * 9 = 576 entries / 32
    EXPECT_EQ(p.workspace_floats, size_t(256 * 64 * 9));

    // LiteBlock(64) hidden: 32x64, C=128.
    p = kern::dwconv3x3_plan(dw_shape(128, 32, 64, 128, 1));
    EXPECT_EQ(p.fwd.items, 128LL * 16 * 16 * 16);
    EXPECT_EQ(p.fwd.grid, 4096);
    EXPECT_EQ(p.wgrad.block_x, 16);
    EXPECT_EQ(p.wgrad.block_y, 8);
    EXPECT_EQ(p.wgrad.chunks, 256);
    EXPECT_EQ(p.workspace_floats, size_t(256 * 128 * 9));

    // LiteBlock(128) hidden: 16x32, C=256.
    p = kern::dwconv3x3_plan(dw_shape(128, 16, 32, 256, 1));
    EXPECT_EQ(p.fwd.items, 128LL * 8 * 8 * 32);
    EXPECT_EQ(p.fwd.grid, 2048);
    EXPECT_EQ(p.wgrad.block_x, 32);
    EXPECT_EQ(p.wgrad.block_y, 4);
    EXPECT_EQ(p.wgrad.grid_x, 1);
    EXPECT_EQ(p.wgrad.chunks, 256);

    // LiteBlock(256) hidden: 8x16, C=512: two channel blocks share the 256 chunk budget.
    p = kern::dwconv3x3_plan(dw_shape(128, 8, 16, 512, 1));
    EXPECT_EQ(p.wgrad.groups, 64);
    EXPECT_EQ(p.fwd.tiles_h, 4);
    EXPECT_EQ(p.fwd.tiles_w, 4);
    EXPECT_EQ(p.fwd.items, 128LL * 4 * 4 * 64);
    EXPECT_EQ(p.fwd.grid, 1024);
    EXPECT_EQ(p.dgrad.grid, 1024);
    EXPECT_EQ(p.wgrad.items, 128LL * 8 * 4);
    EXPECT_EQ(p.wgrad.block_x, 32);
    EXPECT_EQ(p.wgrad.block_y, 4);
    EXPECT_EQ(p.wgrad.grid_x, 2);
    EXPECT_EQ(p.wgrad.chunks, 128);           // min(256 / 2, 4096 / (4 * 4))
    EXPECT_EQ(p.wgrad.finalize_blocks, 144);  // 4608 / 32
    EXPECT_EQ(p.workspace_floats, size_t(128 * 512 * 9));
    EXPECT_EQ(kern::dwconv3x3_workspace_floats(dw_shape(128, 8, 16, 512, 1)), p.workspace_floats);
}

TEST(KernelsDwconvLaunch, StrideTwoModelShapes) {
    // t2_b2_down: DSConv(32 -> 64, s2) on X1 = N x 64x128 x 32 -> 32x64.
    DwConvPlan p = kern::dwconv3x3_plan(dw_shape(128, 64, 128, 32, 2));
    EXPECT_EQ(p.p, 32);
    EXPECT_EQ(p.q, 64);
    EXPECT_EQ(p.wgrad.groups, 4);
    EXPECT_EQ(p.fwd.tiles_h, 16);
    EXPECT_EQ(p.fwd.tiles_w, 16);
    EXPECT_EQ(p.fwd.items, 128LL * 16 * 16 * 4);
    EXPECT_EQ(p.fwd.grid, 1024);
    EXPECT_EQ(p.dgrad.tiles_h, 32);  // dgrad tiles cover dx (64x128)
    EXPECT_EQ(p.dgrad.tiles_w, 32);
    EXPECT_EQ(p.dgrad.items, 128LL * 32 * 32 * 4);
    EXPECT_EQ(p.dgrad.grid, 4096);
    EXPECT_EQ(p.wgrad.tiles_h, 32);
    EXPECT_EQ(p.wgrad.tiles_w, 16);
    EXPECT_EQ(p.wgrad.items, 128LL * 32 * 16);
    EXPECT_EQ(p.wgrad.block_x, 4);
    EXPECT_EQ(p.wgrad.block_y, 32);
    EXPECT_EQ(p.wgrad.chunks, 256);
    EXPECT_EQ(p.wgrad.finalize_blocks, 9);  // 288 entries
    EXPECT_EQ(p.workspace_floats, size_t(256 * 32 * 9));

    // U4 = DSConv(128 -> 256, s2) on T3 = N x 16x32 x 128 -> 8x16.
    p = kern::dwconv3x3_plan(dw_shape(128, 16, 32, 128, 2));
    EXPECT_EQ(p.p, 8);
    EXPECT_EQ(p.q, 16);
    EXPECT_EQ(p.fwd.items, 128LL * 4 * 4 * 16);
    EXPECT_EQ(p.fwd.grid, 256);
    EXPECT_EQ(p.dgrad.items, 128LL * 8 * 8 * 16);
    EXPECT_EQ(p.dgrad.grid, 1024);
    EXPECT_EQ(p.wgrad.items, 128LL * 8 * 4);
    EXPECT_EQ(p.wgrad.block_x, 16);
    EXPECT_EQ(p.wgrad.block_y, 8);
    EXPECT_EQ(p.wgrad.chunks, 128);  // 4096 / (8 * 4)
    EXPECT_EQ(p.workspace_floats, size_t(128 * 128 * 9));

    // Odd sizes: 7x9 -> 4x5 (the last output row and column read one padded input).
    p = kern::dwconv3x3_plan(dw_shape(1, 7, 9, 8, 2));
    EXPECT_EQ(p.p, 4);
    EXPECT_EQ(p.q, 5);
    EXPECT_EQ(p.fwd.tiles_h, 2);
    EXPECT_EQ(p.fwd.tiles_w, 2);
    EXPECT_EQ(p.fwd.grid, 1);
    EXPECT_EQ(p.dgrad.tiles_h, 4);
    EXPECT_EQ(p.dgrad.tiles_w, 3);
    EXPECT_EQ(p.dgrad.items, 12);
    EXPECT_EQ(p.wgrad.items, 4 * 2);
    EXPECT_EQ(p.wgrad.block_x, 1);
    EXPECT_EQ(p.wgrad.block_y, 128);
    EXPECT_EQ(p.wgrad.chunks, 1);
    EXPECT_EQ(p.wgrad.finalize_blocks, 3);  // 72 entries
    EXPECT_EQ(p.workspace_floats, size_t(72));
}

// Invariants the kernels rely on, over a sweep of shapes.
TEST(KernelsDwconvLaunch, PlanInvariants) {
    for (int c : {8, 16, 24, 32, 40, 64, 96, 128, 256, 264, 512, 1024}) {
        for (int stride : {1, 2}) {
            for (int n : {1, 3, 128}) {
                for (int hw : {1, 2, 7, 15, 33, 64}) {
                    const int h = hw, w = 2 * hw + 1;
                    const DwConvPlan p = kern::dwconv3x3_plan(dw_shape(n, h, w, c, stride));
                    const std::string what = "n=" + std::to_string(n) + " " + std::to_string(h) + "x" +
                                             std::to_string(w) + "x" + std::to_string(c) + " s" +
                                             std::to_string(stride);
                    EXPECT_EQ(p.p, (h + 2 - 3) / stride + 1) << what;
                    EXPECT_EQ(p.q, (w + 2 - 3) / stride + 1) << what;
                    EXPECT_EQ(p.wgrad.groups * 8, c) << what;
                    // Gather passes: tiles cover the destination with no empty tile row/column.
                    for (const auto& [g, dh, dw] : {std::tuple(p.fwd, p.p, p.q), std::tuple(p.dgrad, h, w)}) {
                        EXPECT_GE(g.tiles_h * g.tile_h, dh) << what;
                        EXPECT_LT((g.tiles_h - 1) * g.tile_h, dh) << what;
                        EXPECT_GE(g.tiles_w * g.tile_w, dw) << what;
                        EXPECT_LT((g.tiles_w - 1) * g.tile_w, dw) << what;
                        EXPECT_EQ(g.items, static_cast<long long>(n) * g.tiles_h * g.tiles_w * g.groups) << what;
                        EXPECT_EQ(g.variant, 0) << what;
                        EXPECT_EQ(g.groups, p.wgrad.groups) << what;  // variant 0: 8 channels per thread
                        EXPECT_GE(g.grid * g.block, g.items) << what;
                        EXPECT_LT((g.grid - 1) * g.block, g.items) << what;
                    }
                    EXPECT_EQ(p.dgrad.tile_h % 2, 0) << what;  // stride-2 dgrad tiles start on even pixels
                    EXPECT_EQ(p.dgrad.tile_w % 2, 0) << what;
                    // wgrad: the block, the channel blocks, the chunk split.
                    const kern::DwWgradGrid& wg = p.wgrad;
                    EXPECT_LE(wg.block_x * wg.block_y, kern::kDwWgradThreads) << what;
                    EXPECT_GT(2 * wg.block_x * wg.block_y, kern::kDwWgradThreads) << what;
                    EXPECT_EQ(wg.block_y & (wg.block_y - 1), 0) << what;  // tree reduction
                    EXPECT_GE(wg.grid_x * wg.block_x, p.wgrad.groups) << what;
                    EXPECT_LT((wg.grid_x - 1) * wg.block_x, p.wgrad.groups) << what;
                    EXPECT_GE(wg.tiles_h * wg.tile_h, p.p) << what;
                    EXPECT_GE(wg.tiles_w * wg.tile_w, p.q) << what;
                    EXPECT_EQ(wg.items, static_cast<long long>(n) * wg.tiles_h * wg.tiles_w) << what;
                    EXPECT_GE(wg.chunks, 1) << what;
                    EXPECT_LE(static_cast<long long>(wg.chunks), wg.items) << what;
                    EXPECT_LE(wg.chunks * wg.grid_x, kern::kDwMaxChunks + wg.grid_x) << what;
                    EXPECT_LE(wg.chunks, 65535) << what;  // gridDim.y
                    EXPECT_GE(wg.finalize_blocks * kern::kDwFinalizeX, 9 * c) << what;
                    EXPECT_LT((wg.finalize_blocks - 1) * kern::kDwFinalizeX, 9 * c) << what;
                    EXPECT_EQ(p.workspace_floats, static_cast<size_t>(wg.chunks) * c * 9) << what;
                    EXPECT_EQ((static_cast<size_t>(c) * 9) % 4, 0u) << what;  // float4 stores of the partials
                    // Even split items*k/chunks: chunks partition the tiles and none is empty.
                    long long prev = 0;
                    for (int k = 1; k <= wg.chunks; ++k) {
                        const long long b = wg.items * k / wg.chunks;
                        ASSERT_GT(b, prev) << what << " chunk " << k - 1;
                        prev = b;
                    }
                    EXPECT_EQ(prev, wg.items) << what;
                }
            }
        }
    }
}

TEST(KernelsDwconvLaunch, UnsupportedShapesRejected) {
    kern::ConvShape s = dw_shape(2, 16, 16, 32, 1);
    EXPECT_TRUE(kern::dwconv3x3_supported(s));
    EXPECT_TRUE(kern::dwconv3x3_supported(dw_shape(2, 16, 16, 32, 2)));
    EXPECT_TRUE(kern::dwconv3x3_supported(dw_shape(1, 1, 1, 8, 2)));

    auto expect_rejected = [](const kern::ConvShape& bad, const char* part) {
        EXPECT_FALSE(kern::dwconv3x3_supported(bad)) << part;
        SF_EXPECT_ERROR(kern::dwconv3x3_plan(bad), "dwconv3x3", "unsupported", part);
        SF_EXPECT_ERROR(kern::dwconv3x3_workspace_floats(bad), part);
    };
    kern::ConvShape b = s;
    b.k = 5;
    b.pad = 2;
    expect_rejected(b, "k=5");
    b = s;
    b.pad = 0;
    expect_rejected(b, "pad=0");
    b = s;
    b.stride = 3;
    expect_rejected(b, "stride=3");
    b = s;
    b.groups = 1;  // a dense 3x3 conv
    expect_rejected(b, "groups=1");
    b = s;
    b.cout = 64;  // depthwise with a channel multiplier
    expect_rejected(b, "cout=64");
    b = dw_shape(2, 16, 16, 12, 1);
    expect_rejected(b, "C=12");
    b = s;
    b.bias = true;
    expect_rejected(b, "bias");
    b = s;
    b.n = 0;
    expect_rejected(b, "n=0");
    b = dw_shape(1 << 20, 1 << 12, 1 << 12, 8, 1);  // 2^47 elements
    expect_rejected(b, "too large");
    b = dw_shape(1 << 16, 128, 256, 64, 1);  // 2^37 elements, but 2^31 forward/dgrad thread tiles
    expect_rejected(b, "2147483648 thread tiles");
    EXPECT_TRUE(kern::dwconv3x3_supported(dw_shape((1 << 16) - 1, 128, 256, 64, 1)));
}

// The launchers validate everything before launching; these calls never reach the GPU.
TEST(KernelsDwconvLaunch, LaunchersRejectBadArguments) {
    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;  // no stream needed: every call below throws before a launch
    auto bptr = [](uintptr_t a) { return reinterpret_cast<kern::bf16*>(a); };
    auto fptr = [](uintptr_t a) { return reinterpret_cast<float*>(a); };
    // 1 MiB apart: no two of these ranges overlap for the shape below (2*16*16*32*2 = 32 KiB).
    kern::bf16* x = bptr(0x100000);
    kern::bf16* w = bptr(0x200000);
    kern::bf16* y = bptr(0x300000);
    float* dw = fptr(0x400000);
    float* ws = fptr(0x500000);
    const kern::ConvShape s = dw_shape(2, 16, 16, 32, 1);
    const size_t wsn = kern::dwconv3x3_workspace_floats(s);
    kern::ConvShape bad = s;
    bad.k = 5;

    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(rt::Exec::cpu(), s, x, w, y), "dwconv3x3_forward_cuda", "cpu");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, bad, x, w, y), "k=5");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, bptr(0x100008), w, y), "x must be", "16-byte aligned");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, nullptr, y), "w must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, bptr(0x200002), y), "w must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, x), "alias");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, bptr(0x100000 + 16384)), "alias");  // overlaps x
    // Variants: out of range, and the prologue in a direct variant with fewer than 8 channels per
    // thread (checked before the pointers). The staged ones have a prologue (dw_variant_prologue).
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 10), "forward variant 10");
    kern::DwPrologue pro;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, &pro, 2), "variant 2 (4ch 2x4) has no BN prologue");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, &pro, 5), "variant 5 (2ch 4x4) has no BN prologue");
    for (int v : {0, 1, 6, 7, 8, 9}) EXPECT_TRUE(kern::dw_variant_prologue(v)) << v;
    for (int v : {-1, 2, 3, 4, 5, 10}) EXPECT_FALSE(kern::dw_variant_prologue(v)) << v;

    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(rt::Exec::cpu(), s, y, w, x), "backward_data", "cpu");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, bad, y, w, x), "k=5");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, bptr(0x300010 + 2), w, x), "dy must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, y, w, nullptr), "dx must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, y, w, y), "alias");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, y, w, w), "alias");
    // Overwrite mode (the first contribution to dx): the same checks.
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, y, w, y, false), "alias");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, y, w, nullptr, false), "dx must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, s, y, w, x, true, -1), "dgrad variant -1");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_data_cuda(cuda, dw_shape(2, 16, 16, 32, 2), y, w, x, true, 3),
                    "dgrad variant 3 (4ch 1x4) at stride 2");

    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(rt::Exec::cpu(), s, x, y, dw, ws, wsn), "backward_filter",
                    "cpu");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, bad, x, y, dw, ws, wsn), "k=5");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn, nullptr, 9), "wgrad variant 9");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn, &pro, 1),
                    "prologue runs in variant 0 only", "variant 1, 4ch 1x4 w2");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn, &pro, 5),
                    "prologue runs in variant 0 only", "variant 5, 8ch 1x4 w1 hoist");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, bptr(0x100004), y, dw, ws, wsn), "x must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, nullptr, dw, ws, wsn), "dy must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, nullptr, ws, wsn), "dw must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, fptr(0x400002), ws, wsn), "dw must be");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, fptr(0x500004), wsn), "workspace must be",
                    "16-byte");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn - 1), "workspace", "too small",
                    "C=32");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, ws, ws, wsn), "dw must not alias");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, reinterpret_cast<float*>(x), wsn),
                    "workspace must not alias");
}

}  // namespace
