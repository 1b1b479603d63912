// Launch arithmetic of the custom depthwise 3x3 CUDA convolution (kernels/dwconv_cuda.h), on the CPU:
// plan geometry and workspace sizes for the model's shapes (batch 128, 256x512 input), invariants
// over many shapes, unsupported shapes rejected with the reason, and the launchers' documented
// errors (raised before anything is launched, so no GPU is needed).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
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

// The gather variants (kDwVariants): variant 0 is the documented default, every variant's grid covers
// the destination with whole channel groups, and a variant that cannot run its pass is refused by the
// plan with the reason.
TEST(KernelsDwconvLaunch, GatherVariants) {
    ASSERT_EQ(kern::kDwVariantCount, 10);
    EXPECT_EQ(kern::kDwVariants[0].vec, 8);
    EXPECT_EQ(kern::kDwVariants[0].tile_h, kern::kDwTileH);
    EXPECT_EQ(kern::kDwVariants[0].tile_w, kern::kDwTileW);
    EXPECT_STREQ(kern::dwconv3x3_variant_name(0), "8ch 2x4");
    EXPECT_STREQ(kern::dwconv3x3_variant_name(5), "2ch 4x4");
    EXPECT_STREQ(kern::dwconv3x3_variant_name(8), "2ch 4x4 s8x32");
    EXPECT_STREQ(kern::dwconv3x3_variant_name(9), "8ch 2x4 lean");
    EXPECT_STREQ(kern::dwconv3x3_variant_name(10), "variant ?");
    // The lean twin is variant 0's kernel and geometry (only the code generation differs).
    EXPECT_TRUE(kern::kDwVariants[9].lean);
    EXPECT_EQ(kern::kDwVariants[9].vec * 100 + kern::kDwVariants[9].tile_h * 10 + kern::kDwVariants[9].tile_w,
              kern::kDwVariants[0].vec * 100 + kern::kDwVariants[0].tile_h * 10 + kern::kDwVariants[0].tile_w);
    EXPECT_STREQ(kern::dwconv3x3_variant_name(-1), "variant ?");
    for (int v = 0; v < kern::kDwVariantCount; ++v) {
        const kern::DwVariant& var = kern::kDwVariants[v];
        const std::string name = kern::dwconv3x3_variant_name(v);
        const std::string staged =
            var.block_h > 0 ? " s" + std::to_string(var.block_h) + "x" + std::to_string(var.block_w) : "";
        EXPECT_EQ(name, std::to_string(var.vec) + "ch " + std::to_string(var.tile_h) + "x" +
                            std::to_string(var.tile_w) + staged + (var.lean ? " lean" : ""));
        EXPECT_FALSE(var.lean && var.block_h > 0) << name;  // lean is a twin of a direct variant
        EXPECT_EQ(kern::dw_variant_staged(v), var.block_h > 0) << name;
        EXPECT_TRUE(var.vec == 8 || var.vec == 4 || var.vec == 2) << name;  // 128-, 64-, 32-bit accesses
        EXPECT_TRUE(kern::dw_variant_valid(v, 1, false) && kern::dw_variant_valid(v, 1, true)) << name;
        EXPECT_TRUE(kern::dw_variant_valid(v, 2, false)) << name;
        const bool even = var.tile_h % 2 == 0 && var.tile_w % 2 == 0;
        EXPECT_EQ(kern::dw_variant_valid(v, 2, true), even) << name;
        for (int stride : {1, 2}) {
            for (const auto& [n, h, w, c] : {std::tuple(128, 64, 128, 64), std::tuple(3, 7, 9, 24),
                                             std::tuple(1, 1, 1, 8), std::tuple(2, 15, 33, 40),
                                             std::tuple(2, 19, 70, 96), std::tuple(128, 8, 16, 512)}) {
                const std::string what = name + " " + std::to_string(h) + "x" + std::to_string(w) + "x" +
                                         std::to_string(c) + " s" + std::to_string(stride);
                const int dv = kern::dw_variant_valid(v, stride, true) ? v : 0;
                const DwConvPlan p = kern::dwconv3x3_plan(dw_shape(n, h, w, c, stride), v, dv);
                const DwConvPlan base = kern::dwconv3x3_plan(dw_shape(n, h, w, c, stride));
                EXPECT_EQ(p.wgrad.chunks, base.wgrad.chunks) << what;  // the gather variants leave the wgrad alone
                EXPECT_EQ(p.workspace_floats, base.workspace_floats) << what;
                for (const auto& [g, gv, dh, dw, dgrad] :
                     {std::tuple(p.fwd, v, p.p, p.q, false), std::tuple(p.dgrad, dv, h, w, true)}) {
                    EXPECT_EQ(g.variant, gv) << what;
                    EXPECT_EQ(g.vec, kern::kDwVariants[gv].vec) << what;
                    EXPECT_EQ(g.groups * g.vec, c) << what;
                    EXPECT_EQ(g.tile_h, kern::kDwVariants[gv].tile_h) << what;
                    EXPECT_EQ(g.tile_w, kern::kDwVariants[gv].tile_w) << what;
                    EXPECT_GE(g.tiles_h * g.tile_h, dh) << what;
                    EXPECT_LT((g.tiles_h - 1) * g.tile_h, dh) << what;
                    EXPECT_GE(g.tiles_w * g.tile_w, dw) << what;
                    EXPECT_LT((g.tiles_w - 1) * g.tile_w, dw) << what;
                    EXPECT_EQ(g.items, static_cast<long long>(n) * g.tiles_h * g.tiles_w * g.groups) << what;
                    EXPECT_EQ(g.block, kern::kDwThreads) << what;
                    if (!kern::dw_variant_staged(gv)) {
                        EXPECT_GE(g.grid * g.block, g.items) << what;
                        EXPECT_LT((g.grid - 1) * g.block, g.items) << what;
                        EXPECT_EQ(g.block_h, 0) << what;
                        continue;
                    }
                    // Staged: blocks of whole thread tiles cover the destination, channel blocks cover C,
                    // and the source block (at the widest pitch) fits the kernel's shared memory.
                    const int sh = dgrad ? kern::kDwVariants[gv].block_h : kern::kDwVariants[gv].block_h / stride;
                    const int sw = dgrad ? kern::kDwVariants[gv].block_w : kern::kDwVariants[gv].block_w / stride;
                    EXPECT_EQ(g.block_h, sh) << what;
                    EXPECT_EQ(g.block_w, sw) << what;
                    EXPECT_EQ(g.block_h % g.tile_h, 0) << what;
                    EXPECT_EQ(g.block_w % g.tile_w, 0) << what;
                    EXPECT_GE(g.blocks_h * g.block_h, dh) << what;
                    EXPECT_LT((g.blocks_h - 1) * g.block_h, dh) << what;
                    EXPECT_GE(g.blocks_w * g.block_w, dw) << what;
                    EXPECT_LT((g.blocks_w - 1) * g.block_w, dw) << what;
                    EXPECT_EQ(g.cb * g.cblocks, c) << what;
                    EXPECT_TRUE(g.cb == 64 || g.cb == 32 || g.cb == 16 || g.cb == 8) << what;
                    EXPECT_EQ(g.cb % g.vec, 0) << what;
                    EXPECT_GE(g.pitch, g.cb) << what;
                    EXPECT_EQ(g.pitch % 8, 0) << what;  // 16-byte aligned pixels
                    EXPECT_LE(g.src_h * g.src_w * g.pitch, kern::dw_stage_elems(gv)) << what;
                    // The source block holds every pixel the block's thread tiles read.
                    const int reach_h = dgrad ? (stride == 1 ? g.block_h + 2 : g.block_h / 2 + 1)
                                              : stride * (g.block_h - 1) + 3;
                    const int reach_w = dgrad ? (stride == 1 ? g.block_w + 2 : g.block_w / 2 + 1)
                                              : stride * (g.block_w - 1) + 3;
                    EXPECT_EQ(g.src_h, reach_h) << what;
                    EXPECT_EQ(g.src_w, reach_w) << what;
                    EXPECT_EQ(g.grid, static_cast<long long>(n) * g.blocks_h * g.blocks_w * g.cblocks) << what;
                }
            }
        }
    }
    // LiteBlock(32) at 1/4 in "2ch 4x4": 32 groups of 2 channels, 16 x 32 tiles of 4x4 per image.
    const DwConvPlan p5 = kern::dwconv3x3_plan(dw_shape(128, 64, 128, 64, 1), 5, 5);
    EXPECT_EQ(p5.fwd.groups, 32);
    EXPECT_EQ(p5.fwd.tiles_h, 16);
    EXPECT_EQ(p5.fwd.tiles_w, 32);
    EXPECT_EQ(p5.fwd.items, 128LL * 16 * 32 * 32);
    EXPECT_EQ(p5.fwd.grid, 128LL * 16 * 32 * 32 / 128);
    // The same shape in "8ch 2x4 s8x32": 8 x 32 output blocks of all 64 channels, 10 x 34 source pixels
    // each (43,520 bytes); the stride-2 forward's blocks are 4 x 16 (9 x 33 source pixels).
    const DwConvPlan p6 = kern::dwconv3x3_plan(dw_shape(128, 64, 128, 64, 1), 6, 6);
    EXPECT_EQ(p6.fwd.blocks_h, 8);
    EXPECT_EQ(p6.fwd.blocks_w, 4);
    EXPECT_EQ(p6.fwd.cb, 64);
    EXPECT_EQ(p6.fwd.cblocks, 1);
    EXPECT_EQ(p6.fwd.pitch, 64);
    EXPECT_EQ(p6.fwd.src_h * p6.fwd.src_w, 10 * 34);
    EXPECT_EQ(p6.fwd.grid, 128LL * 8 * 4);
    EXPECT_EQ(kern::dw_stage_elems(6) * 2, 43520);
    const DwConvPlan p6s = kern::dwconv3x3_plan(dw_shape(128, 64, 128, 32, 2), 6, 6);
    EXPECT_EQ(p6s.fwd.block_h * 100 + p6s.fwd.block_w, 4 * 100 + 16);
    EXPECT_EQ(p6s.fwd.src_h * 100 + p6s.fwd.src_w, 9 * 100 + 33);
    EXPECT_EQ(p6s.fwd.cb, 32);
    EXPECT_EQ(p6s.fwd.pitch, 40);  // 64-byte pixels padded to 80 bytes: neighbouring tiles in other banks
    EXPECT_EQ(p6s.dgrad.src_h * 100 + p6s.dgrad.src_w, 5 * 100 + 17);

    const kern::ConvShape s1 = dw_shape(2, 16, 16, 32, 1), s2 = dw_shape(2, 16, 16, 32, 2);
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, 10, 0), "dwconv3x3", "forward variant 10", "valid: 0..9");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, -1, 0), "forward variant -1");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, 0, 10), "dgrad variant 10", "valid: 0..9");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s2, 0, 1), "dgrad variant 1 (8ch 1x4) at stride 2", "even tile sides");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s2, 0, 3), "dgrad variant 3 (4ch 1x4)");
    EXPECT_NO_THROW(kern::dwconv3x3_plan(s1, 3, 1));  // stride 1: every tile starts on any pixel
    EXPECT_NO_THROW(kern::dwconv3x3_plan(s2, 1, 4));  // the stride-2 forward takes odd tiles
    // A shape within 32-bit tile counts in the default variants but not in every variant: supported,
    // and the variants that do not fit are refused (2ch variants have 4x the threads of 8ch).
    const kern::ConvShape big = dw_shape(1, 1 << 14, 1 << 14, 256, 1);  // 2^36 elements
    EXPECT_LE(kern::dwconv3x3_geometry(1, 1 << 14, 1 << 14, 256, 1).fwd.items, INT_MAX);      // 2^30 in 8ch 2x4
    EXPECT_GT(kern::dwconv3x3_geometry(1, 1 << 14, 1 << 14, 256, 1, 4, 4).fwd.items, INT_MAX);  // 2^32 in 2ch 2x4
    EXPECT_TRUE(kern::dwconv3x3_supported(big));
    EXPECT_NO_THROW(kern::dwconv3x3_plan(big));
    EXPECT_TRUE(kern::dwconv3x3_variant_supported(big, 0, false));
    EXPECT_FALSE(kern::dwconv3x3_variant_supported(big, 1, false));  // 8ch 1x4: 2^31 tiles, one too many
    EXPECT_FALSE(kern::dwconv3x3_variant_supported(big, 4, false));
    EXPECT_FALSE(kern::dwconv3x3_variant_supported(big, 4, true));
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(big, 4, 0), "forward variant 4 (2ch 2x4)", "4294967296 thread tiles",
                    "too large for 32-bit indexing");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(big, 0, 4), "dgrad variant 4 (2ch 2x4)", "too large");
    // The predicate never throws, and refuses what the plan refuses.
    EXPECT_FALSE(kern::dwconv3x3_variant_supported(s2, 1, true));
    EXPECT_TRUE(kern::dwconv3x3_variant_supported(s2, 1, false));
    EXPECT_FALSE(kern::dwconv3x3_variant_supported(s1, 10, false));
    EXPECT_FALSE(kern::dwconv3x3_variant_supported(dw_shape(2, 16, 16, 12, 1), 0, false));
}

// The wgrad variants (kDwWgradVariants): 8, 4 or 2 channels per thread, blocks 1, 2 or 4 times as wide
// as the 8-channel variant's, on the same tiles, lanes, chunks and workspace as variant 0 (so the same
// summation order: bitwise-equal dw, KernelsDwconvGpu), blocks of at most kDwWgradThreads * widen
// threads whose channel blocks cover C; out of range refused.
TEST(KernelsDwconvLaunch, WgradVariants) {
    ASSERT_EQ(kern::kDwWgradVariantCount, 5);
    EXPECT_EQ(kern::kDwWgradVariants[0].vec, 8);
    EXPECT_EQ(kern::kDwWgradVariants[0].widen, 1);
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(0), "8ch 1x4 w1");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(2), "2ch 1x4 w4");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(5), "variant ?");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(-1), "variant ?");
    for (int v = 0; v < kern::kDwWgradVariantCount; ++v) {
        const kern::DwWgradVariant& var = kern::kDwWgradVariants[v];
        EXPECT_EQ(kern::dwconv3x3_wgrad_variant_name(v),
                  std::to_string(var.vec) + "ch 1x4 w" + std::to_string(var.widen));
        EXPECT_TRUE(var.vec == 8 || var.vec == 4 || var.vec == 2) << v;
        EXPECT_TRUE(var.widen >= 1 && var.widen <= 8 / var.vec) << v;  // never more threads than channels need
    }
    for (int c : {8, 16, 24, 40, 64, 128, 256, 264, 512, 1024}) {
        for (int stride : {1, 2}) {
            for (const auto& [n, h, w] : {std::tuple(128, 64, 128), std::tuple(3, 7, 9), std::tuple(1, 1, 1)}) {
                const kern::ConvShape s = dw_shape(n, h, w, c, stride);
                const DwConvPlan base = kern::dwconv3x3_plan(s);
                for (int v = 0; v < kern::kDwWgradVariantCount; ++v) {
                    const std::string what = std::string(kern::dwconv3x3_wgrad_variant_name(v)) + " " +
                                             std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) +
                                             " s" + std::to_string(stride);
                    ASSERT_TRUE(kern::dwconv3x3_wgrad_variant_supported(s, v)) << what;
                    const DwConvPlan p = kern::dwconv3x3_plan(s, 0, 0, v);
                    const kern::DwWgradGrid& g = p.wgrad;
                    EXPECT_EQ(g.variant, v) << what;
                    EXPECT_EQ(g.vec, kern::kDwWgradVariants[v].vec) << what;
                    EXPECT_EQ(g.groups * g.vec, c) << what;
                    // The summation order: tiles, lanes and chunks of variant 0.
                    EXPECT_EQ(g.tile_h, base.wgrad.tile_h) << what;
                    EXPECT_EQ(g.tile_w, base.wgrad.tile_w) << what;
                    EXPECT_EQ(g.items, base.wgrad.items) << what;
                    EXPECT_EQ(g.block_y, base.wgrad.block_y) << what;
                    EXPECT_EQ(g.chunks, base.wgrad.chunks) << what;
                    EXPECT_EQ(p.workspace_floats, base.workspace_floats) << what;
                    EXPECT_EQ(g.finalize_blocks, base.wgrad.finalize_blocks) << what;
                    // The channel blocks: every group in exactly one, blocks within the kernel's bound.
                    EXPECT_EQ(g.block_x, std::min(g.groups, base.wgrad.block_x * kern::kDwWgradVariants[v].widen))
                        << what;
                    EXPECT_GE(g.grid_x * g.block_x, g.groups) << what;
                    EXPECT_LT((g.grid_x - 1) * g.block_x, g.groups) << what;
                    EXPECT_LE(g.block_x * g.block_y, kern::kDwWgradThreads * kern::kDwWgradVariants[v].widen) << what;
                    EXPECT_EQ((9 * g.vec) % 2, 0) << what;  // partials stored as float2 or float4
                    // The gather passes are untouched by the wgrad variant.
                    EXPECT_EQ(p.fwd.variant, 0) << what;
                    EXPECT_EQ(p.dgrad.variant, 0) << what;
                    EXPECT_EQ(p.fwd.items, base.fwd.items) << what;
                }
            }
        }
    }
    // LiteBlock(32) at 1/4 (C = 64): "2ch 1x4 w4" puts the 32 groups of 2 channels and 16 lanes in one
    // block of 512 threads; "2ch 1x4 w1" keeps 8 groups (16 channels) per block of 128: 4 channel blocks.
    const kern::ConvShape lb = dw_shape(128, 64, 128, 64, 1);
    const DwConvPlan w4 = kern::dwconv3x3_plan(lb, 0, 0, 2), w1 = kern::dwconv3x3_plan(lb, 0, 0, 4);
    EXPECT_EQ(w4.wgrad.groups, 32);
    EXPECT_EQ(w4.wgrad.block_x, 32);
    EXPECT_EQ(w4.wgrad.block_y, 16);
    EXPECT_EQ(w4.wgrad.grid_x, 1);
    EXPECT_EQ(w4.wgrad.chunks, 256);
    EXPECT_EQ(w1.wgrad.block_x, 8);
    EXPECT_EQ(w1.wgrad.block_y, 16);
    EXPECT_EQ(w1.wgrad.grid_x, 4);
    EXPECT_EQ(w1.wgrad.chunks, 256);
    // LiteBlock(256) at 1/32 (C = 512) in "4ch 1x4 w2": 128 groups in 2 channel blocks of 64 (8ch: 2 of 32).
    const DwConvPlan p1 = kern::dwconv3x3_plan(dw_shape(128, 8, 16, 512, 1), 0, 0, 1);
    EXPECT_EQ(p1.wgrad.block_x, 64);
    EXPECT_EQ(p1.wgrad.block_y, 4);
    EXPECT_EQ(p1.wgrad.grid_x, 2);
    EXPECT_EQ(p1.wgrad.chunks, 128);

    const kern::ConvShape s1 = dw_shape(2, 16, 16, 32, 1);
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, 0, 0, 5), "dwconv3x3", "wgrad variant 5", "valid: 0..4");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, 0, 0, -1), "wgrad variant -1");
    EXPECT_FALSE(kern::dwconv3x3_wgrad_variant_supported(s1, 5));
    EXPECT_FALSE(kern::dwconv3x3_wgrad_variant_supported(s1, -1));
    EXPECT_FALSE(kern::dwconv3x3_wgrad_variant_supported(dw_shape(2, 16, 16, 12, 1), 0));
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
    // Variants: out of range, and the prologue outside variant 0 (checked before the pointers).
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 10), "forward variant 10");
    kern::DwPrologue pro;
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, &pro, 2), "prologue runs in variant 0 only",
                    "variant 2, 4ch 2x4");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, &pro, 6), "prologue runs in variant 0 only",
                    "variant 6, 8ch 2x4 s8x32");

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
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn, nullptr, 5), "wgrad variant 5");
    SF_EXPECT_ERROR(kern::dwconv3x3_backward_filter_cuda(cuda, s, x, y, dw, ws, wsn, &pro, 1),
                    "prologue runs in variant 0 only", "variant 1, 4ch 1x4 w2");
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
