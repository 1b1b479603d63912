// Launch arithmetic of the tensor-core pointwise conv (kernels/pwconv_cuda.h), on the CPU: the plan for
// the model's 1x1 shapes at batch 128, 256x512 worked out by hand, invariants over many shapes (the
// chunks partition the row tiles with none empty, the column blocks cover cout, the workspace holds
// three values per chunk and channel), unsupported shapes refused with the reason, and the launcher's
// documented CPU-side error. Its results: tests/gpu/kernels_pwconv_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "kernels/conv.h"
#include "kernels/pwconv_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

kern::ConvShape pw(int n, int h, int w, int cin, int cout) { return {n, h, w, cin, cout, 1, 1, 0, 1, false}; }

static_assert(kern::pwconv_geometry(128LL * 64 * 128, 32, 64).chunks == kern::kPwMaxChunks, "constexpr geometry");

TEST(KernelsPwconvLaunch, ModelShapes) {
    struct Want {
        int h, w, cin, cout;
        long long tiles;
        int chunks, bn, n_blocks;
    };
    // rows = 128 * h * w; tiles of 128 rows; chunks = min(tiles, 1024); 64-column blocks when cout % 64 == 0.
    const Want want[] = {
        {64, 128, 32, 64, 8192, 1024, 64, 1},   // LiteBlock(32) expand at 1/4
        {64, 128, 64, 32, 8192, 1024, 32, 1},   // its project
        {32, 64, 64, 128, 2048, 1024, 64, 2},   // LiteBlock(64) expand at 1/8
        {16, 32, 128, 256, 512, 512, 64, 4},    // LiteBlock(128) expand at 1/16
        {8, 16, 512, 256, 128, 128, 64, 4},     // LiteBlock(256) project at 1/32
        {64, 128, 256, 32, 8192, 1024, 32, 1},  // an FPN-sized 256 -> 32 at 1/4
    };
    for (const Want& x : want) {
        SCOPED_TRACE(::testing::Message() << x.h << "x" << x.w << " c" << x.cin << "->" << x.cout);
        const kern::ConvShape s = pw(128, x.h, x.w, x.cin, x.cout);
        ASSERT_TRUE(kern::pwconv_supported(s));
        const kern::PwConvPlan p = kern::pwconv_plan(s);
        EXPECT_EQ(p.rows, 128LL * x.h * x.w);
        EXPECT_EQ(p.k, x.cin);
        EXPECT_EQ(p.n, x.cout);
        EXPECT_EQ(p.tiles, x.tiles);
        EXPECT_EQ(p.chunks, x.chunks);
        EXPECT_EQ(p.bn, x.bn);
        EXPECT_EQ(p.n_blocks, x.n_blocks);
        EXPECT_EQ(p.finalize_blocks, (x.cout + 31) / 32);
        EXPECT_EQ(kern::pwconv_workspace_floats(s), 3u * x.chunks * x.cout);
        // The dgrad's BN-backward epilogue: two sums per (chunk, input channel), the same row tiles.
        EXPECT_EQ(kern::pwconv_dgrad_workspace_floats(s), 2u * x.chunks * x.cin);
    }
}

TEST(KernelsPwconvLaunch, ChunksPartitionTheTiles) {
    for (int n : {1, 2, 3, 128})
        for (int h : {1, 3, 8, 64, 130})
            for (int w : {1, 5, 33, 128})
                for (int cin : {32, 96, 512})
                    for (int cout : {32, 64, 160, 512}) {
                        const kern::ConvShape s = pw(n, h, w, cin, cout);
                        ASSERT_TRUE(kern::pwconv_supported(s)) << s.describe();
                        const kern::PwConvPlan p = kern::pwconv_plan(s);
                        const long long rows = static_cast<long long>(n) * h * w;
                        ASSERT_EQ(p.tiles, (rows + kern::kPwTileM - 1) / kern::kPwTileM);
                        ASSERT_GE(p.chunks, 1);
                        ASSERT_LE(p.chunks, kern::kPwMaxChunks);
                        ASSERT_LE(p.chunks, p.tiles);
                        ASSERT_EQ(kern::pwconv_tile_begin(p.tiles, p.chunks, 0), 0);
                        ASSERT_EQ(kern::pwconv_tile_begin(p.tiles, p.chunks, p.chunks), p.tiles);
                        long long most = 0, least = p.tiles;
                        for (int c = 0; c < p.chunks; ++c) {
                            const long long len = kern::pwconv_tile_begin(p.tiles, p.chunks, c + 1) -
                                                  kern::pwconv_tile_begin(p.tiles, p.chunks, c);
                            most = std::max(most, len);
                            least = std::min(least, len);
                        }
                        ASSERT_GE(least, 1) << s.describe() << ": an empty chunk";
                        ASSERT_LE(most - least, 1) << s.describe() << ": an uneven split";
                        ASSERT_EQ(p.bn * p.n_blocks, cout);
                        ASSERT_TRUE(p.bn == 64 || (p.bn == 32 && cout % 64 != 0));
                    }
}

TEST(KernelsPwconvLaunch, UnsupportedShapesAreRefusedWithTheReason) {
    struct Bad {
        kern::ConvShape s;
        const char* why;
    };
    kern::ConvShape k3 = pw(1, 8, 8, 32, 32);
    k3.k = 3;
    k3.pad = 1;
    kern::ConvShape s2 = pw(1, 8, 8, 32, 32);
    s2.stride = 2;
    kern::ConvShape p1 = pw(1, 8, 8, 32, 32);
    p1.pad = 1;
    kern::ConvShape g2 = pw(1, 8, 8, 32, 32);
    g2.groups = 2;
    kern::ConvShape b = pw(1, 8, 8, 32, 32);
    b.bias = true;
    const Bad bad[] = {
        {k3, "k=3 (only 1x1)"},
        {s2, "stride=2 (only 1)"},
        {p1, "pad=1 (only 0)"},
        {g2, "groups=2 (only 1)"},
        {b, "bias=true"},
        {pw(1, 8, 8, 16, 32), "cin=16 (must be a positive multiple of 32)"},
        {pw(1, 8, 8, 32, 48), "cout=48 (must be a positive multiple of 32)"},
        {pw(0, 8, 8, 32, 32), "input dims n=0"},
        {pw(1 << 16, 1 << 8, 1 << 8, 32, 32), "too many for 32-bit row indexing"},
    };
    for (const Bad& x : bad) {
        EXPECT_FALSE(kern::pwconv_supported(x.s)) << x.why;
        SF_EXPECT_ERROR(kern::pwconv_plan(x.s), "pwconv: unsupported shape", x.why);
        SF_EXPECT_ERROR(kern::pwconv_workspace_floats(x.s), "pwconv: unsupported shape", x.why);
        SF_EXPECT_ERROR(kern::pwconv_dgrad_workspace_floats(x.s), "pwconv: unsupported shape", x.why);
    }
}

TEST(KernelsPwconvLaunch, RefusesACpuExec) {
    SF_EXPECT_ERROR(kern::pwconv_forward_cuda(rt::Exec::cpu(), pw(1, 8, 8, 32, 32), nullptr, nullptr, nullptr),
                    "pwconv_forward_cuda: called with a cpu Exec");
}

TEST(KernelsPwconvLaunch, WgradPlan) {
    // 1/4 LiteBlock expand 32 -> 64 at batch 128: 1M rows, 32,768 steps; 2,048 entries: 1,024 chunks (the cap).
    const kern::PwWgradPlan a = kern::pwconv_wgrad_plan(pw(128, 64, 128, 32, 64));
    EXPECT_EQ(a.steps, 32768);
    EXPECT_EQ(a.entries, 2048);
    EXPECT_EQ(a.chunks, 1024);
    EXPECT_EQ(a.m_blocks, 2);
    EXPECT_EQ(a.n_blocks, 1);
    EXPECT_EQ(a.finalize_blocks, 64);
    // 1/32 LiteBlock(256) project 512 -> 256: 16,384 rows, 512 steps; 131,072 entries: 4M / 131,072 = 32 chunks.
    const kern::PwWgradPlan b = kern::pwconv_wgrad_plan(pw(128, 8, 16, 512, 256));
    EXPECT_EQ(b.steps, 512);
    EXPECT_EQ(b.chunks, 32);
    EXPECT_EQ(b.m_blocks, 8);
    EXPECT_EQ(b.n_blocks, 16);
    EXPECT_EQ(kern::pwconv_wgrad_workspace_floats(pw(128, 8, 16, 512, 256)), 32u * 131072u);
    // Invariants: chunks within [1, steps] and the caps, partials within the budget (or one chunk).
    for (int rows : {1, 3, 31, 33, 1000, 40000, 1 << 20})
        for (int cin : {32, 64, 512})
            for (int cout : {32, 256, 512}) {
                const kern::PwWgradPlan p = kern::pwconv_wgrad_plan(pw(1, 1, rows, cin, cout));
                ASSERT_GE(p.chunks, 1);
                ASSERT_LE(p.chunks, p.steps);
                ASSERT_LE(p.chunks, kern::kPwMaxChunks);
                ASSERT_TRUE(p.chunks == 1 || p.chunks * p.entries <= kern::kPwWgradPartials);
                ASSERT_EQ(p.steps, (rows + 31) / 32);
                ASSERT_EQ(kern::pwconv_wgrad_workspace_floats(pw(1, 1, rows, cin, cout)),
                          static_cast<size_t>(p.chunks) * p.entries);
            }
    SF_EXPECT_ERROR(kern::pwconv_wgrad_plan(pw(1, 8, 8, 48, 32)), "pwconv: unsupported shape", "cin=48");
    SF_EXPECT_ERROR(kern::pwconv_backward_filter_cuda(rt::Exec::cpu(), pw(1, 8, 8, 32, 32), nullptr, nullptr, nullptr,
                                                      nullptr, 0),
                    "pwconv_backward_filter_cuda: called with a cpu Exec");
    SF_EXPECT_ERROR(kern::pwconv_backward_data_cuda(rt::Exec::cpu(), pw(1, 8, 8, 32, 32), nullptr, nullptr, nullptr),
                    "pwconv_backward_data_cuda: called with a cpu Exec");
}

}  // namespace
