// Launch arithmetic of the fused stride-1 depthwise backward (kernels/dwconv_cuda.h, DwFusedPlan), on
// the CPU: the plan for the model's stride-1 shapes (batch 128, 256x512 input) worked out by hand,
// invariants over many shapes and grid bounds (spatial blocks cover dx, chunks partition them with none
// empty, the grid within the bound, the lanes a power of two, the staged blocks within the kernel's shared
// memory), stride 2 and unsupported shapes refused with the reason, and the launcher's documented
// errors (raised before anything is launched, so no GPU is needed). Its results: the gpu test
// tests/gpu/kernels_dwconv_fused_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"
#include "tests/support/dw_shape.h"

namespace {

using sftest::dw_shape;

// A constant expression, as the separate passes' geometry.
static_assert(kern::dwconv3x3_fused_geometry(128, 64, 128, 64).chunks == 1024, "constexpr fused geometry");

TEST(KernelsDwconvFusedLaunch, ModelShapes) {
    struct Want {
        int h, w, c;
        long long spatial;
        int cblocks, chunks, groups, lanes;
    };
    // 8 x 16 spatial blocks, 64-channel blocks (every model C is a multiple of 64), 4 channels per
    // thread: 16 groups of 8 lanes; chunks = min(spatial, 1024 / cblocks).
    const Want want[] = {
        {64, 128, 64, 128LL * 8 * 8, 1, 1024, 16, 8},  // LiteBlock(32) at 1/4
        {32, 64, 128, 128LL * 4 * 4, 2, 512, 16, 8},   // LiteBlock(64) at 1/8
        {16, 32, 256, 128LL * 2 * 2, 4, 256, 16, 8},   // LiteBlock(128) at 1/16
        {8, 16, 512, 128LL * 1 * 1, 8, 128, 16, 8},    // LiteBlock(256) at 1/32
    };
    for (const Want& x : want) {
        SCOPED_TRACE(::testing::Message() << x.h << "x" << x.w << "x" << x.c);
        const kern::ConvShape s = dw_shape(128, x.h, x.w, x.c, 1);
        ASSERT_TRUE(kern::dwconv3x3_fused_supported(s));
        const kern::DwFusedPlan f = kern::dwconv3x3_fused_plan(s);
        EXPECT_EQ(f.spatial, x.spatial);
        EXPECT_EQ(f.stage.cb, 64);
        EXPECT_EQ(f.stage.pitch, 64);
        EXPECT_EQ(f.stage.cblocks, x.cblocks);
        EXPECT_EQ(f.stage.src_h, 10);
        EXPECT_EQ(f.stage.src_w, 18);
        EXPECT_EQ(f.chunks, x.chunks);
        EXPECT_EQ(f.grid, static_cast<long long>(x.cblocks) * x.chunks);
        EXPECT_EQ(f.groups, x.groups);
        EXPECT_EQ(f.lanes, x.lanes);
        EXPECT_EQ(f.finalize_blocks, (9 * x.c + 31) / 32);
        EXPECT_EQ(f.workspace_floats, static_cast<size_t>(x.chunks) * x.c * 9);
        EXPECT_EQ(kern::dwconv3x3_fused_workspace_floats(s), f.workspace_floats);
        // Partials of at most 1024 blocks: 590k floats (2.4 MB) each way, against 3 x 16.8-134 MB of
        // activations per call.
        EXPECT_LE(f.workspace_floats, 1024u * 64 * 9);
    }
}

TEST(KernelsDwconvFusedLaunch, PlanInvariants) {
    for (int n : {1, 2, 3, 128})
        for (int h : {1, 2, 7, 8, 9, 17, 64})
            for (int w : {1, 3, 15, 16, 17, 33, 128})
                for (int c : {8, 16, 24, 32, 40, 64, 96, 128, 512, 1024})
                    for (int mb : {1, 3, kern::kDwFusedMaxBlocks}) {
                        SCOPED_TRACE(::testing::Message()
                                     << n << " " << h << "x" << w << "x" << c << " max_blocks " << mb);
                        const kern::DwFusedPlan f = kern::dwconv3x3_fused_plan(dw_shape(n, h, w, c, 1), mb);
                        const kern::DwTileGrid& g = f.stage;
                        // Spatial blocks cover dx, none empty.
                        ASSERT_GE(static_cast<long long>(g.blocks_h) * g.block_h, h);
                        ASSERT_LT(static_cast<long long>(g.blocks_h - 1) * g.block_h, h);
                        ASSERT_GE(static_cast<long long>(g.blocks_w) * g.block_w, w);
                        ASSERT_LT(static_cast<long long>(g.blocks_w - 1) * g.block_w, w);
                        ASSERT_EQ(f.spatial, static_cast<long long>(n) * g.blocks_h * g.blocks_w);
                        // Channel blocks partition C; the staged block within the kernel's shared memory.
                        ASSERT_EQ(g.cb * g.cblocks, c);
                        ASSERT_LE(g.src_h * g.src_w * g.pitch, kern::kDwFusedStageElems);
                        // Chunks: 1..spatial, each non-empty (an even split of spatial into chunks ranges).
                        ASSERT_GE(f.chunks, 1);
                        ASSERT_LE(f.chunks, f.spatial);
                        for (long long k = 0; k < f.chunks; ++k)
                            ASSERT_LT(f.spatial * k / f.chunks, f.spatial * (k + 1) / f.chunks) << "chunk " << k;
                        ASSERT_EQ(f.grid, static_cast<long long>(g.cblocks) * f.chunks);
                        ASSERT_LE(f.grid, std::max(mb, g.cblocks));
                        // A thread keeps one channel group: groups divides the block; lanes a power of two.
                        ASSERT_EQ(f.groups * kern::kDwFusedVec, g.cb);
                        ASSERT_EQ(kern::kDwThreads % f.groups, 0);
                        ASSERT_EQ(f.lanes * f.groups, kern::kDwThreads);
                        ASSERT_EQ(f.lanes & (f.lanes - 1), 0);
                        ASSERT_EQ(f.workspace_floats, static_cast<size_t>(f.chunks) * c * 9);
                    }
}

TEST(KernelsDwconvFusedLaunch, UnsupportedShapesRejected) {
    const kern::ConvShape s2 = dw_shape(2, 16, 16, 32, 2);
    EXPECT_TRUE(kern::dwconv3x3_supported(s2));
    EXPECT_FALSE(kern::dwconv3x3_fused_supported(s2));
    SF_EXPECT_ERROR(kern::dwconv3x3_fused_plan(s2), "fused backward runs stride 1 only", "stride=2");
    SF_EXPECT_ERROR(kern::dwconv3x3_fused_workspace_floats(s2), "stride 1 only");
    kern::ConvShape k5 = dw_shape(2, 16, 16, 32, 1);
    k5.k = 5;
    EXPECT_FALSE(kern::dwconv3x3_fused_supported(k5));
    SF_EXPECT_ERROR(kern::dwconv3x3_fused_plan(k5), "unsupported shape", "k=5");
    kern::ConvShape c12 = dw_shape(2, 16, 16, 12, 1);
    EXPECT_FALSE(kern::dwconv3x3_fused_supported(c12));
    SF_EXPECT_ERROR(kern::dwconv3x3_fused_plan(c12), "C=12");
    SF_EXPECT_ERROR(kern::dwconv3x3_fused_plan(dw_shape(2, 16, 16, 32, 1), 0), "max_blocks must be positive, got 0");
}

TEST(KernelsDwconvFusedLaunch, LauncherRejectsBadArguments) {
    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;  // no stream needed: every call below throws before a launch
    auto bptr = [](uintptr_t a) { return reinterpret_cast<kern::bf16*>(a); };
    auto fptr = [](uintptr_t a) { return reinterpret_cast<float*>(a); };
    // 1 MiB apart: no two of these ranges overlap for the shape below (2*16*16*32*2 = 32 KiB).
    kern::bf16* x = bptr(0x100000);
    kern::bf16* w = bptr(0x200000);
    kern::bf16* dy = bptr(0x300000);
    kern::bf16* dx = bptr(0x600000);
    float* dw = fptr(0x400000);
    float* ws = fptr(0x500000);
    const kern::ConvShape s = dw_shape(2, 16, 16, 32, 1);
    const size_t wsn = kern::dwconv3x3_fused_workspace_floats(s);
    auto run = [&](const rt::Exec& ex, const kern::ConvShape& sh, const kern::bf16* xx, const kern::bf16* dyy,
                   const kern::bf16* ww, kern::bf16* dxx, float* dww, float* wss, size_t n) {
        kern::dwconv3x3_backward_fused_cuda(ex, sh, xx, dyy, ww, dxx, dww, wss, n, false);
    };
    SF_EXPECT_ERROR(run(rt::Exec::cpu(), s, x, dy, w, dx, dw, ws, wsn), "dwconv3x3_backward_fused_cuda", "cpu");
    SF_EXPECT_ERROR(run(cuda, dw_shape(2, 16, 16, 32, 2), x, dy, w, dx, dw, ws, wsn), "stride 1 only");
    SF_EXPECT_ERROR(run(cuda, s, bptr(0x100008), dy, w, dx, dw, ws, wsn), "x must be", "16-byte aligned");
    SF_EXPECT_ERROR(run(cuda, s, x, nullptr, w, dx, dw, ws, wsn), "dy must be");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, bptr(0x200002), dx, dw, ws, wsn), "w must be");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, nullptr, dw, ws, wsn), "dx must be");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, nullptr, ws, wsn), "dw must be");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, fptr(0x400002), ws, wsn), "dw must be");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, dw, fptr(0x500004), wsn), "workspace must be", "16-byte aligned");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, dw, ws, wsn - 1), "workspace", "too small", "C=32",
                    "dwconv3x3_fused_workspace_floats");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dy, dw, ws, wsn), "dx must not alias");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, x, dw, ws, wsn), "dx must not alias");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, bptr(0x300000 + 4096), dw, ws, wsn), "dx must not alias");  // overlaps dy
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, ws, ws, wsn), "dw must not alias");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, reinterpret_cast<float*>(dx), ws, wsn), "dw must not alias");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, dw, reinterpret_cast<float*>(x), wsn), "workspace must not alias");
    SF_EXPECT_ERROR(run(cuda, s, x, dy, w, dx, dw, reinterpret_cast<float*>(dx), wsn), "workspace must not alias");

    // The BN prologue's inputs (kern::DwBnBackward).
    float* vec = fptr(0x700000);  // gamma, beta, mean, invstd at C floats apart, coef (2C) after
    kern::bf16* xbn = bptr(0x800000);
    kern::DwBnBackward b;
    b.act = kern::Act::Silu;
    b.x = xbn;
    b.gamma = vec;
    b.beta = vec + 32;
    b.mean = vec + 64;
    b.invstd = vec + 96;
    b.coef = vec + 128;
    auto run_bn = [&](const kern::DwBnBackward& bb, kern::bf16* dxx, float* dww, float* wss) {
        kern::dwconv3x3_backward_fused_cuda(cuda, s, x, dy, w, dxx, dww, wss, wsn, true, &bb);
    };
    kern::DwBnBackward bad = b;
    bad.act = static_cast<kern::Act>(9);
    SF_EXPECT_ERROR(run_bn(bad, dx, dw, ws), "BN backward activation 9");
    bad = b;
    bad.x = bptr(0x800002);
    SF_EXPECT_ERROR(run_bn(bad, dx, dw, ws), "BN input x must be");
    bad = b;
    bad.coef = nullptr;
    SF_EXPECT_ERROR(run_bn(bad, dx, dw, ws), "BN coef");
    bad = b;
    bad.mean = fptr(0x700002);
    SF_EXPECT_ERROR(run_bn(bad, dx, dw, ws), "BN mean");
    // The partials must not overwrite the coefficients they are formed from, nor dw the vectors.
    SF_EXPECT_ERROR(run_bn(b, dx, dw, vec + 128), "workspace must not overlap the BN coef");
    SF_EXPECT_ERROR(run_bn(b, dx, vec + 100, ws), "dw and the workspace must not overlap the BN invstd");
    SF_EXPECT_ERROR(run_bn(b, xbn, dw, ws), "must not alias the BN input x");
    // nor dx (read with __ldg while dx is written)
    SF_EXPECT_ERROR(run_bn(b, reinterpret_cast<kern::bf16*>(vec + 64), dw, ws), "dx, dw and the workspace",
                    "must not overlap the BN");
}

}  // namespace
