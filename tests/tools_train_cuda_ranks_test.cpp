// The data-parallel choices of the CUDA backend, on the CPU: the NCCL world (a job's world, or 1
// forced by SF_NCCL_WORLD1, or none), the GPU of a rank, and the loss gradient scale 1/(accum*world)
// of model::CudaTrainStep (world 1: exactly the single-process 1/accum).
#include <gtest/gtest.h>

#include "model/train_step_cuda.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tools/train_cuda.h"

namespace {

TEST(CudaRanks, NcclWorld) {
    EXPECT_EQ(tools::cuda_nccl_world(1, nullptr), 0);  // a single process: NCCL never loaded
    EXPECT_EQ(tools::cuda_nccl_world(1, ""), 0);
    EXPECT_EQ(tools::cuda_nccl_world(1, "0"), 0);
    EXPECT_EQ(tools::cuda_nccl_world(1, "1"), 1);  // the NCCL path on one GPU
    EXPECT_EQ(tools::cuda_nccl_world(4, nullptr), 4);
    EXPECT_EQ(tools::cuda_nccl_world(4, "1"), 4);  // a real job keeps its world
    SF_EXPECT_ERROR(tools::cuda_nccl_world(1, "yes"), "SF_NCCL_WORLD1=yes");
}

TEST(CudaRanks, RankTakesTheGpuOfItsLocalRank) {
    EXPECT_EQ(tools::cuda_rank_device(1, 0, 0, 0), 0);  // a single process: GPU 0, checked later
    EXPECT_EQ(tools::cuda_rank_device(4, 3, 1, 2), 1);  // two nodes of two GPUs
    EXPECT_EQ(tools::cuda_rank_device(2, 0, 0, 1), 0);
    SF_EXPECT_ERROR(tools::cuda_rank_device(4, 3, 2, 2), "rank 3 takes GPU 2", "sees 2 GPU(s)");
    EXPECT_EQ(tools::cuda_rank_device(2, 1, 1, 1), 0);  // confined to its own GPU (srun --gpus-per-task=1)
    EXPECT_EQ(tools::cuda_rank_device(8, 7, 3, 1), 0);
    SF_EXPECT_ERROR(tools::cuda_rank_device(4, 3, 3, 3), "rank 3 takes GPU 3", "sees 3 GPU(s)");
}

TEST(CudaRanks, LossGradientScale) {
    for (int accum = 1; accum <= 64; ++accum) {
        const double scale = model::loss_grad_scale(accum, 1);
        EXPECT_EQ(scale, 1.0 / accum) << accum;  // bitwise what the single-process step uses
    }
    EXPECT_EQ(model::loss_grad_scale(1, 1), 1.0);
    EXPECT_EQ(model::loss_grad_scale(2, 3), 1.0 / 6);
    EXPECT_EQ(model::loss_grad_scale(4, 8), 1.0 / 32);
    // world ranks x accum micro-batches: the sum of every micro-batch's scale is 1 (the mean).
    double sum = 0;
    for (int k = 0; k < 3 * 4; ++k) sum += model::loss_grad_scale(3, 4);
    EXPECT_NEAR(sum, 1.0, 1e-15);
    SF_EXPECT_ERROR(model::loss_grad_scale(0, 1), "0 accumulation steps");
    SF_EXPECT_ERROR(model::loss_grad_scale(1, 0), "over 0 ranks");
}

}  // namespace
