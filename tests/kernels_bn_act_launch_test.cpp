// Launch arithmetic of the fused BatchNorm + activation CUDA op (kernels/bn_act_cuda.h), on the CPU:
// geometry and workspace size for the model's shapes, invariants of the plan over many shapes, and
// the launchers' documented errors (raised before anything is launched, so no GPU is needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/bn_act_cuda.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

using kern::BnActPlan;

TEST(KernelsBnActLaunch, ModelShapes) {
    // Stem-sized layer: N=2, 64x128, C=64.
    BnActPlan p = kern::bn_act_plan(2 * 64 * 128, 64, true);
    EXPECT_EQ(p.groups, 8);
    EXPECT_EQ(p.block_x, 8);
    EXPECT_EQ(p.block_y, 32);
    EXPECT_EQ(p.grid_x, 1);
    EXPECT_EQ(p.chunks, 512);
    EXPECT_EQ(p.apply_grid_y, 512);  // 16384 rows / 32 lanes
    EXPECT_EQ(p.finalize_blocks, 2);
    EXPECT_EQ(p.workspace_floats, size_t(2 * 512 * 64 + 2 * 64));

    // Deepest branch: N=128, 8x16, C=512.
    p = kern::bn_act_plan(128 * 8 * 16, 512, true);
    EXPECT_EQ(p.groups, 64);
    EXPECT_EQ(p.block_x, 32);
    EXPECT_EQ(p.block_y, 8);
    EXPECT_EQ(p.grid_x, 2);
    EXPECT_EQ(p.chunks, 512);
    EXPECT_EQ(p.apply_grid_y, 2048);
    EXPECT_EQ(p.finalize_blocks, 16);
    EXPECT_EQ(p.workspace_floats, size_t(2 * 512 * 512 + 2 * 512));
    EXPECT_EQ(kern::bn_act_workspace_floats(128 * 8 * 16, 512), p.workspace_floats);

    // Largest activation: N=128, 128x256, C=32: the element-wise passes grid-stride past the cap.
    p = kern::bn_act_plan(size_t(128) * 128 * 256, 32, true);
    EXPECT_EQ(p.block_x, 4);
    EXPECT_EQ(p.block_y, 64);
    EXPECT_EQ(p.grid_x, 1);
    EXPECT_EQ(p.chunks, 512);
    EXPECT_EQ(p.apply_grid_y, kern::kBnActMaxApplyY);
    EXPECT_EQ(p.finalize_blocks, 1);
}

TEST(KernelsBnActLaunch, SmallAndOddShapes) {
    BnActPlan p = kern::bn_act_plan(3, 8, true);  // fewer rows than chunks: one chunk per row
    EXPECT_EQ(p.chunks, 3);
    EXPECT_EQ(p.block_x, 1);
    EXPECT_EQ(p.block_y, 256);
    EXPECT_EQ(p.apply_grid_y, 1);
    EXPECT_EQ(p.workspace_floats, size_t(2 * 3 * 8 + 2 * 8));

    p = kern::bn_act_plan(1000, 40, true);  // 5 groups: block_y is the power of two below 256 / 5
    EXPECT_EQ(p.block_x, 5);
    EXPECT_EQ(p.block_y, 32);
    EXPECT_EQ(p.chunks, 512);

    p = kern::bn_act_plan(1, 64, false);  // eval needs no statistics: one row is fine
    EXPECT_EQ(p.chunks, 1);
    EXPECT_EQ(p.apply_grid_y, 1);
}

// Invariants the kernels rely on, over a sweep of shapes.
TEST(KernelsBnActLaunch, PlanInvariants) {
    for (int c = 8; c <= 1024; c += 8) {
        for (size_t rows : {size_t(2), size_t(7), size_t(511), size_t(512), size_t(513), size_t(100000)}) {
            const BnActPlan p = kern::bn_act_plan(rows, c, true);
            const std::string what = "rows=" + std::to_string(rows) + " C=" + std::to_string(c);
            EXPECT_EQ(p.groups * 8, c) << what;
            EXPECT_LE(p.block_x * p.block_y, kern::kBnActThreads) << what;      // static shared memory size
            EXPECT_GT(2 * p.block_x * p.block_y, kern::kBnActThreads) << what;  // and no smaller than needed
            EXPECT_EQ(p.block_y & (p.block_y - 1), 0) << what;                  // tree reduction
            EXPECT_GE(p.grid_x * p.block_x, p.groups) << what;
            EXPECT_LT((p.grid_x - 1) * p.block_x, p.groups) << what;  // no empty block
            EXPECT_GE(p.chunks, 1) << what;
            EXPECT_LE(static_cast<size_t>(p.chunks), rows) << what;  // every chunk holds a row
            EXPECT_LE(p.chunks, kern::kBnActChunks) << what;
            EXPECT_GE(p.apply_grid_y, 1) << what;
            EXPECT_LE(p.apply_grid_y, kern::kBnActMaxApplyY) << what;
            EXPECT_GE(p.finalize_blocks * 32, c) << what;
            EXPECT_EQ(p.workspace_floats, 2 * static_cast<size_t>(p.chunks) * c + 2 * static_cast<size_t>(c)) << what;
            // Even split rows*k/chunks: chunks partition the rows and none is empty.
            size_t prev = 0;
            for (int k = 1; k <= p.chunks; ++k) {
                const size_t b = rows * static_cast<size_t>(k) / static_cast<size_t>(p.chunks);
                ASSERT_GT(b, prev) << what << " chunk " << k - 1;
                prev = b;
            }
            EXPECT_EQ(prev, rows) << what;
        }
    }
}

TEST(KernelsBnActLaunch, BadShapesRejected) {
    SF_EXPECT_ERROR(kern::bn_act_plan(1, 64, true), "rows=1", "more than 1 value");
    SF_EXPECT_ERROR(kern::bn_act_plan(0, 64, false), "rows=0");
    SF_EXPECT_ERROR(kern::bn_act_plan(100, 12, true), "C=12", "multiple of 8");
    SF_EXPECT_ERROR(kern::bn_act_plan(100, 0, true), "C=0");
    SF_EXPECT_ERROR(kern::bn_act_plan(100, -8, false), "C=-8");
    SF_EXPECT_ERROR(kern::bn_act_workspace_floats(100, 20), "C=20");
    SF_EXPECT_ERROR(kern::bn_act_plan(100, 64, true, 3), "row_batch must be 1 or 4, got 3");
    SF_EXPECT_ERROR(kern::bn_act_plan(100, 64, false, 0), "row_batch must be 1 or 4, got 0");
}

// Rows per loop turn: the reductions' geometry, chunks and workspace (so the order of every sum) are
// those of row_batch 1; the element-wise passes take row_batch times fewer blocks where the cap leaves
// room, so that each thread has row_batch rows.
TEST(KernelsBnActLaunch, RowBatchLeavesTheGeometry) {
    EXPECT_EQ(kern::bn_act_plan(1000, 64, true).row_batch, 1);
    for (int rb : kern::kBnActRowBatches) {
        EXPECT_TRUE(kern::bn_act_row_batch_valid(rb));
        for (size_t rows : {size_t(2), size_t(37), size_t(1000), size_t(128) * 64 * 128})
            for (int c : {8, 40, 64, 512}) {
                const BnActPlan a = kern::bn_act_plan(rows, c, true), b = kern::bn_act_plan(rows, c, true, rb);
                EXPECT_EQ(b.row_batch, rb);
                EXPECT_EQ(b.block_x, a.block_x);
                EXPECT_EQ(b.block_y, a.block_y);
                EXPECT_EQ(b.grid_x, a.grid_x);
                EXPECT_EQ(b.chunks, a.chunks);
                const size_t row_blocks = (rows + a.block_y - 1) / a.block_y;
                EXPECT_EQ(static_cast<size_t>(b.apply_grid_y),
                          std::min<size_t>((row_blocks + rb - 1) / rb, kern::kBnActMaxApplyY));
                EXPECT_EQ(b.workspace_floats, a.workspace_floats);
            }
    }
    EXPECT_FALSE(kern::bn_act_row_batch_valid(2));
}

// Resident blocks of the backward's row kernels: a choice of compiled code only. The plan keeps it and
// nothing else moves (the geometry, chunks, workspace: so the order of every sum); other values are
// refused naming the valid ones.
TEST(KernelsBnActLaunch, MinBlocksLeavesTheGeometry) {
    EXPECT_EQ(kern::bn_act_plan(1000, 64, true).min_blocks, 1);
    for (int mb : kern::kBnActMinBlocks) {
        EXPECT_TRUE(kern::bn_act_min_blocks_valid(mb));
        for (int rb : kern::kBnActRowBatches)
            for (size_t rows : {size_t(2), size_t(1000), size_t(128) * 64 * 128})
                for (int c : {8, 40, 512}) {
                    const BnActPlan a = kern::bn_act_plan(rows, c, true, rb),
                                    b = kern::bn_act_plan(rows, c, true, rb, mb);
                    EXPECT_EQ(b.min_blocks, mb);
                    EXPECT_EQ(b.row_batch, rb);
                    EXPECT_EQ(b.block_x, a.block_x);
                    EXPECT_EQ(b.block_y, a.block_y);
                    EXPECT_EQ(b.grid_x, a.grid_x);
                    EXPECT_EQ(b.chunks, a.chunks);
                    EXPECT_EQ(b.apply_grid_y, a.apply_grid_y);
                    EXPECT_EQ(b.workspace_floats, a.workspace_floats);
                }
    }
    for (int bad : {0, 2, 4}) {
        const std::string want = "min_blocks must be 1 or 3, got " + std::to_string(bad);
        SF_EXPECT_ERROR(kern::bn_act_plan(100, 64, true, 1, bad), want.c_str());
    }
}

// The launchers validate everything before launching; these calls never reach the GPU.
TEST(KernelsBnActLaunch, LaunchersRejectBadArguments) {
    rt::Exec cuda;
    cuda.backend = rt::Backend::Cuda;  // no stream needed: every call below throws before a launch
    auto bptr = [](uintptr_t a) { return reinterpret_cast<kern::bf16*>(a); };
    auto fptr = [](uintptr_t a) { return reinterpret_cast<float*>(a); };
    kern::bf16* x = bptr(0x10000);
    kern::bf16* y = bptr(0x20000);
    kern::bf16* dy = bptr(0x30000);
    float* v = fptr(0x40000);
    float* ws = fptr(0x50000);
    const size_t rows = 256;
    const int c = 64;
    const size_t wsn = kern::bn_act_workspace_floats(rows, c);
    const kern::Act silu = kern::Act::Silu;

    SF_EXPECT_ERROR(
        kern::bn_act_forward_train(rt::Exec::cpu(), silu, rows, c, x, v, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn),
        "bn_act_forward_train", "cpu");
    SF_EXPECT_ERROR(kern::bn_act_forward_train(cuda, silu, rows, 12, x, v, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn),
                    "C=12");
    SF_EXPECT_ERROR(kern::bn_act_forward_train(cuda, silu, 1, c, x, v, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn), "rows=1");
    SF_EXPECT_ERROR(
        kern::bn_act_forward_train(cuda, silu, rows, c, bptr(0x10008), v, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn),
        "16-byte aligned");
    SF_EXPECT_ERROR(kern::bn_act_forward_train(cuda, silu, rows, c, x, v, v, x, v, v, v, v, 0.1, 1e-5, ws, wsn),
                    "alias");
    SF_EXPECT_ERROR(kern::bn_act_forward_train(cuda, silu, rows, c, x, nullptr, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn),
                    "gamma");
    SF_EXPECT_ERROR(kern::bn_act_forward_train(cuda, silu, rows, c, x, v, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn - 1),
                    "workspace", "too small");
    SF_EXPECT_ERROR(kern::bn_act_forward_eval(cuda, silu, rows, 4, x, v, v, v, v, 1e-5, y), "C=4");
    SF_EXPECT_ERROR(kern::bn_act_forward_eval(cuda, silu, rows, c, x, v, v, v, fptr(0x40002), 1e-5, y), "running_var");

    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, 36, x, dy, v, v, v, v, y, v, v, ws, wsn), "C=36");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, 1, c, x, dy, v, v, v, v, y, v, v, ws, wsn), "rows=1");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, c, x, dy, v, v, v, v, dy, v, v, ws, wsn), "alias dy");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, c, x, dy, v, v, v, v, x, v, v, ws, wsn), "alias x");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, c, x, bptr(0x30002), v, v, v, v, y, v, v, ws, wsn),
                    "dy must be");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, c, x, dy, v, v, v, v, y, v, nullptr, ws, wsn), "dbeta");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, c, x, dy, v, v, v, v, y, v, v, ws, 0), "too small");
    SF_EXPECT_ERROR(kern::bn_act_backward(cuda, silu, rows, c, x, dy, v, v, v, v, y, v, v, ws, wsn, 2), "row_batch",
                    "got 2");
    SF_EXPECT_ERROR(
        kern::bn_act_forward_train(cuda, silu, rows, c, x, v, v, y, v, v, v, v, 0.1, 1e-5, ws, wsn, nullptr, 8),
        "row_batch", "got 8");
    SF_EXPECT_ERROR(kern::bn_act_forward_eval(cuda, silu, rows, c, x, v, v, v, v, 1e-5, y, nullptr, -1), "got -1");
    SF_EXPECT_ERROR(kern::bn_stats_train(cuda, rows, c, x, v, v, v, v, 0.1, 1e-5, ws, wsn, 5), "got 5");

    // The backward's statistics pass alone (the fused depthwise backward's BN prologue reads its coef).
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(rt::Exec::cpu(), silu, rows, c, x, dy, v, v, v, v, v, v, ws, wsn),
                    "bn_act_backward_stats", "cpu");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, rows, 36, x, dy, v, v, v, v, v, v, ws, wsn), "C=36");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, 1, c, x, dy, v, v, v, v, v, v, ws, wsn), "rows=1");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, rows, c, bptr(0x10008), dy, v, v, v, v, v, v, ws, wsn),
                    "16-byte aligned");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, rows, c, x, nullptr, v, v, v, v, v, v, ws, wsn),
                    "16-byte aligned");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, rows, c, x, dy, v, v, v, fptr(0x40002), v, v, ws, wsn),
                    "save_invstd");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, rows, c, x, dy, v, v, v, v, v, nullptr, ws, wsn), "dbeta");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, silu, rows, c, x, dy, v, v, v, v, v, v, ws, wsn - 1),
                    "too small");
    SF_EXPECT_ERROR(kern::bn_act_backward_stats(cuda, static_cast<kern::Act>(7), rows, c, x, dy, v, v, v, v, v, v, ws,
                                                wsn),
                    "activation 7");
    // The coefficients follow the 2 * chunks * C partials (chunks = min(rows, 512)).
    EXPECT_EQ(kern::bn_act_backward_coef_offset(rows, c), 2u * 256 * 64);
    EXPECT_EQ(kern::bn_act_backward_coef_offset(128 * 64 * 128, 64), 2u * 512 * 64);
    EXPECT_EQ(kern::bn_act_backward_coef_offset(128 * 64 * 128, 64) + 2 * 64,
              kern::bn_act_workspace_floats(128 * 64 * 128, 64));
}

}  // namespace
