// The BatchNorm + activation kernels' rows per loop turn (kern::ConvPolicy::bn_row_batch, --bn-row-batch 4):
// every output bitwise the one-row loop's, and the finalize adding the chunks in the same order
// (tests/gpu/bn_act_rig.h: the shared inputs and runs).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "tests/gpu/bn_act_rig.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace {

using namespace bnact;

// Rows per loop turn (kern::kBnActRowBatches): four rows' loads issued together, the rows then taken in
// the order of row_batch 1, so every output is the same bits: y, the statistics and running statistics,
// dx, dgamma, dbeta, the residual forms (in place and separate, train and eval) and bn_stats_train.
// 81,957 rows at C = 64 give the reductions' threads 5 rows per chunk (4 in a batched turn, then the
// tail) and the element-wise passes 4 or 5 rows per thread; the small shapes run the tails only.
// x and dy span 2^-8 .. 2^8 in magnitude, so that fp32 sums of a few rows round: a change in the order
// in which a thread adds its rows changes bits (with random_inputs' values those sums are often exact).
Inputs wide_inputs(size_t rows, int c, uint64_t seed) {
    Inputs in = random_inputs(rows, c, seed);
    const size_t n = rows * static_cast<size_t>(c);
    const std::vector<double> ex = sftest::random_uniform(2 * n, seed + 20, -8, 8);
    std::vector<double> x(n), dy(n);
    for (size_t i = 0; i < n; ++i) {
        x[i] = in.x[i] * std::exp2(std::floor(ex[i]));
        dy[i] = in.dy[i] * std::exp2(std::floor(ex[n + i]));
    }
    in.x = bf16_exact(x);
    in.dy = bf16_exact(dy);
    return in;
}

TEST(KernelsBnActGpu, RowBatchBitwiseEqualToOneRow) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Shape shapes[] = {{512 * 32 * 5 + 37, 64}, {1000, 40}, {37, 8}};
    for (const Shape& s : shapes) {
        const Inputs in = wide_inputs(s.rows, s.c, 1700 + s.c);
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu}) {
            for (int rb : kern::kBnActRowBatches) {
                if (rb == 1) continue;
                const std::string what = std::string(kern::act_name(act)) + " rows=" + std::to_string(s.rows) +
                                         " C=" + std::to_string(s.c) + " row_batch " + std::to_string(rb);
                const Outputs b = run_gpu(ctx, act, in, rb);
                EXPECT_TRUE(b.guards_intact) << what;
                expect_bitwise_equal(run_gpu(ctx, act, in), b, what);
                const std::vector<float> r = bf16_exact(sftest::random_uniform(s.rows * s.c, 1800 + s.c, -2, 2));
                for (bool train : {true, false})
                    for (bool in_place : {true, false}) {
                        bool ga = true, gb = true;
                        const std::vector<float> ya = run_forward_residual(ctx, act, in, &r, in_place, train, &ga);
                        const std::vector<float> yb = run_forward_residual(ctx, act, in, &r, in_place, train, &gb, rb);
                        EXPECT_TRUE(gb) << what;
                        EXPECT_TRUE(bitwise_equal(ya, yb))
                            << what << (train ? " train" : " eval") << (in_place ? " in place" : " separate");
                    }
            }
        }
        // The statistics alone (the fused LiteBlock's expand): the bits of the forward's.
        const size_t wsn = kern::bn_act_workspace_floats(s.rows, s.c), c = static_cast<size_t>(s.c);
        rt::Arena arena("bn_stats_row_batch_test", rt::MemKind::Device);
        const size_t o_x = arena.reserve(s.rows * c * 2, 256, "x"), o_st = arena.reserve(4 * c * 4, 256, "stats");
        const size_t o_ws = arena.reserve(wsn * 4, 256, "workspace");
        arena.allocate();
        arena.seal();
        kern::bf16* x = arena.ptr<kern::bf16>(o_x);
        float* st = arena.ptr<float>(o_st);
        upload_bf16(x, in.x);
        std::vector<std::vector<float>> got;
        for (int rb : kern::kBnActRowBatches) {
            upload(st + 2 * c, in.rm);
            upload(st + 3 * c, in.rv);
            SF_CUDA_CHECK(cudaDeviceSynchronize());
            kern::bn_stats_train(ctx.exec(), s.rows, s.c, x, st, st + c, st + 2 * c, st + 3 * c, kMomentum, kEps,
                                 arena.ptr<float>(o_ws), wsn, rb);
            ctx.synchronize();
            got.push_back(download(st, 4 * c));
        }
        for (size_t i = 1; i < got.size(); ++i)
            EXPECT_TRUE(bitwise_equal(got[0], got[i])) << "bn_stats_train rows=" << s.rows << " C=" << s.c;
    }
}

// The backward's row kernels compiled for 3 resident blocks (every value of kern::kBnActMinBlocks other than 1;
// --bn-min-blocks 3): the same code under a register cap of 80, so every output is the same bits as with 1, for both row batches
// and every activation (the shapes above: batched turns, tails, partial blocks); a value with no kernels
// is refused naming it.
TEST(KernelsBnActGpu, MinBlocksThreeBitwiseEqualToOne) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const Shape shapes[] = {{512 * 32 * 5 + 37, 64}, {1000, 40}, {37, 8}};
    for (const Shape& s : shapes) {
        const Inputs in = wide_inputs(s.rows, s.c, 2100 + s.c);
        for (kern::Act act : {kern::Act::None, kern::Act::Silu, kern::Act::Relu})
            for (int rb : kern::kBnActRowBatches) {
                const std::string what = std::string(kern::act_name(act)) + " rows=" + std::to_string(s.rows) +
                                         " C=" + std::to_string(s.c) + " row_batch " + std::to_string(rb);
                const Outputs one = run_gpu(ctx, act, in, rb, 1);
                for (int mb : kern::kBnActMinBlocks) {
                    if (mb == 1) continue;
                    const Outputs b = run_gpu(ctx, act, in, rb, mb);
                    EXPECT_TRUE(b.guards_intact) << what << " min_blocks " << mb;
                    expect_bitwise_equal(one, b, what + " min_blocks " + std::to_string(mb));
                }
            }
    }
    SF_EXPECT_ERROR(kern::bn_act_plan(100, 8, true, 1, 2), "min_blocks must be 1 or 3, got 2");
}

// The finalize's fp64 sums of fp32 chunk partials are exact for ordinary data, so the test above
// cannot see the order in which a lane adds its chunks (a reversed batch passed it under the
// emulation). Here dy is +2^70 in chunks 128m + y and -2^70 in chunks 128m + 8 + y (y < 8; 4 rows per
// chunk) and small elsewhere: in the order of row_batch 1 each lane's pair cancels exactly before its
// small partials are added, so dbeta keeps them; any other order loses them to rounding.
TEST(KernelsBnActGpu, RowBatchFinalizeAddsChunksInOrder) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t rows = 512 * 4;
    const int c = 8;
    Inputs in = random_inputs(rows, c, 1900);
    const double big = std::exp2(70.0);
    for (size_t r = 0; r < rows; ++r) {
        const size_t j = (r / 4) % 128;
        for (int ch = 0; ch < c; ++ch)
            if (j < 16) in.dy[r * c + ch] = static_cast<float>(j < 8 ? big : -big);
    }
    const Outputs one = run_gpu(ctx, kern::Act::None, in, 1);
    for (int ch = 0; ch < c; ++ch)  // the small partials survived: the construction shows the order
        EXPECT_GT(std::fabs(one.dbeta[ch] - in.dbeta0[ch]), 1e-3f) << "channel " << ch;
    for (int rb : kern::kBnActRowBatches)
        if (rb != 1)
            expect_bitwise_equal(one, run_gpu(ctx, kern::Act::None, in, rb), "row_batch " + std::to_string(rb));
}

}  // namespace
