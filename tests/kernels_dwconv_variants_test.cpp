// The variants of the custom depthwise 3x3 CUDA convolution's plans (kernels/dwconv_cuda.h), on the
// CPU: the gather variants (direct, staged, lean: kDwVariants) and the wgrad variants
// (kDwWgradVariants): names, validity per stride and pass, the grids each gives for the model's and
// odd shapes, and the refusals. Split from kernels_dwconv_launch_test.cpp (the default plan's
// geometry, shapes and launchers).
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <tuple>

#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tests/support/dw_shape.h"

namespace {

using sftest::dw_shape;

using kern::DwConvPlan;

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
    ASSERT_EQ(kern::kDwWgradVariantCount, 9);
    EXPECT_EQ(kern::kDwWgradVariants[0].vec, 8);
    EXPECT_EQ(kern::kDwWgradVariants[0].widen, 1);
    EXPECT_EQ(kern::kDwWgradVariants[0].loads, kern::DwWgradLoads::per_pixel);  // the measured default
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(0), "8ch 1x4 w1");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(2), "2ch 1x4 w4");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(5), "8ch 1x4 w1 hoist");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(8), "2ch 1x4 w1 prefetch");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(9), "variant ?");
    EXPECT_STREQ(kern::dwconv3x3_wgrad_variant_name(-1), "variant ?");
    int hoisted = 0, prefetch = 0;
    for (int v = 0; v < kern::kDwWgradVariantCount; ++v) {
        const kern::DwWgradVariant& var = kern::kDwWgradVariants[v];
        const char* loads = var.loads == kern::DwWgradLoads::hoisted    ? " hoist"
                            : var.loads == kern::DwWgradLoads::prefetch ? " prefetch"
                                                                        : "";
        hoisted += var.loads == kern::DwWgradLoads::hoisted;
        prefetch += var.loads == kern::DwWgradLoads::prefetch;
        EXPECT_EQ(kern::dwconv3x3_wgrad_variant_name(v),
                  std::to_string(var.vec) + "ch 1x4 w" + std::to_string(var.widen) + loads);
        EXPECT_TRUE(var.vec == 8 || var.vec == 4 || var.vec == 2) << v;
        EXPECT_TRUE(var.widen >= 1 && var.widen <= 8 / var.vec) << v;  // never more threads than channels need
        // Two register sets of 8 channels' windows would not fit beside 72 accumulators.
        EXPECT_FALSE(var.vec == 8 && var.loads == kern::DwWgradLoads::prefetch) << v;
    }
    EXPECT_EQ(hoisted, 2);
    EXPECT_EQ(prefetch, 2);
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
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, 0, 0, 9), "dwconv3x3", "wgrad variant 9", "valid: 0..8");
    SF_EXPECT_ERROR(kern::dwconv3x3_plan(s1, 0, 0, -1), "wgrad variant -1");
    EXPECT_FALSE(kern::dwconv3x3_wgrad_variant_supported(s1, 9));
    EXPECT_FALSE(kern::dwconv3x3_wgrad_variant_supported(s1, -1));
    EXPECT_FALSE(kern::dwconv3x3_wgrad_variant_supported(dw_shape(2, 16, 16, 12, 1), 0));
}

}  // namespace

// The staged forward's statistics epilogue (BnStatsOut): its workspace is 3 floats per channel per staged
// spatial block (8 x 32 outputs at stride 1, 4 x 16 at stride 2, partial blocks counted), only the staged
// variants have it, and the launcher refuses what it cannot run before any launch (no device needed).
TEST(KernelsDwconvLaunch, StatsEpilogueWorkspaceAndRefusals) {
    // The network's 1/4 LiteBlock shape at batch 128: 8 x 4 blocks per image.
    const kern::ConvShape s1 = dw_shape(128, 64, 128, 64, 1);
    // Its stride-2 down path: 32 x 64 outputs, 8 x 4 blocks of 4 x 16 per image.
    const kern::ConvShape s2 = dw_shape(128, 64, 128, 32, 2);
    // Partial blocks: 19 x 45 outputs -> 3 x 2 blocks; at stride 2, 10 x 23 outputs -> 3 x 2.
    const kern::ConvShape p1 = dw_shape(2, 19, 45, 40, 1), p2 = dw_shape(2, 19, 45, 40, 2);
    for (int v = 0; v < kern::kDwVariantCount; ++v) {
        if (!kern::dw_variant_staged(v)) {
            SF_EXPECT_ERROR((void)kern::dwconv3x3_stats_workspace_floats(s1, v), "has no statistics epilogue");
            continue;
        }
        EXPECT_EQ(kern::dwconv3x3_stats_workspace_floats(s1, v), 3u * 128 * 32 * 64) << v;
        EXPECT_EQ(kern::dwconv3x3_stats_workspace_floats(s2, v), 3u * 128 * 32 * 32) << v;
        EXPECT_EQ(kern::dwconv3x3_stats_workspace_floats(p1, v), 3u * 2 * 6 * 40) << v;
        EXPECT_EQ(kern::dwconv3x3_stats_workspace_floats(p2, v), 3u * 2 * 6 * 40) << v;
    }
    EXPECT_EQ(kern::dwconv3x3_stats_workspace_floats(s1), 3u * 128 * 32 * 64);
    static_assert(kern::dw_stats_reduction_fits(), "the reduction's shared memory");

    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;  // every call below throws before a launch
    auto bptr = [](uintptr_t a) { return reinterpret_cast<kern::bf16*>(a); };
    auto fptr = [](uintptr_t a) { return reinterpret_cast<float*>(a); };
    kern::bf16 *x = bptr(0x1000000), *w = bptr(0x2000000), *y = bptr(0x3000000);
    float* ws = fptr(0x4000000);
    kern::BnStatsOut st;
    st.save_mean = fptr(0x5000000);
    st.save_invstd = fptr(0x5001000);
    st.running_mean = fptr(0x5002000);
    st.running_var = fptr(0x5003000);
    const kern::ConvShape s = dw_shape(2, 16, 32, 32, 1);
    const size_t need = kern::dwconv3x3_stats_workspace_floats(s, 6);
    EXPECT_EQ(need, 3u * 2 * 2 * 32);
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 0, &st, ws, need),
                    "variant 0 (8ch 2x4) has no statistics epilogue");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 6, &st, ws, need - 1), "workspace of",
                    "need 384");
    kern::BnStatsOut bad = st;
    bad.save_invstd = fptr(0x3000000);  // y
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 6, &bad, ws, need),
                    "save_invstd must not alias y");
    bad = st;
    bad.running_mean = fptr(0x5000010);  // inside save_mean
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 6, &bad, ws, need),
                    "running_mean must not alias save_mean");
    SF_EXPECT_ERROR(kern::dwconv3x3_forward_cuda(cuda, s, x, w, y, nullptr, 6, &st, fptr(0x2000000), need),
                    "the workspace must not alias w");
}
