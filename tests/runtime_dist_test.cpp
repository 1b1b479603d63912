// runtime/dist.h without MPI: a single process is a world of 1 whose collectives are identities,
// the launcher's world size is read from the environment of mpirun / srun, and bad values are errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/dist.h"
#include "tests/support/compare.h"

namespace {

// Clears the launcher variables for one test and restores them after.
class LauncherEnv : public ::testing::Test {
protected:
    const std::vector<std::string> vars_ = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "PMIX_RANK",
                                            "SLURM_STEP_NUM_TASKS"};
    std::vector<std::pair<std::string, std::string>> saved_;
    void SetUp() override {
        for (const std::string& v : vars_)
            if (const char* x = std::getenv(v.c_str())) saved_.emplace_back(v, x);
        for (const std::string& v : vars_) unsetenv(v.c_str());
    }
    void TearDown() override {
        for (const std::string& v : vars_) unsetenv(v.c_str());
        for (const auto& kv : saved_) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
};

TEST_F(LauncherEnv, WorldSizeFromTheLaunchersEnvironment) {
    EXPECT_EQ(rt::launcher_world_size(), 1);  // no launcher
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    EXPECT_EQ(rt::launcher_world_size(), 1);  // srun without an MPI plugin: not an MPI launch
    setenv("PMIX_RANK", "2", 1);
    EXPECT_EQ(rt::launcher_world_size(), 4);  // srun --mpi=pmix
    setenv("PMI_SIZE", "3", 1);
    EXPECT_EQ(rt::launcher_world_size(), 3);  // srun --mpi=pmi2 says the size itself
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    EXPECT_EQ(rt::launcher_world_size(), 2);  // mpirun first
    setenv("OMPI_COMM_WORLD_SIZE", "two", 1);
    SF_EXPECT_ERROR(rt::launcher_world_size(), "OMPI_COMM_WORLD_SIZE=two", "not a world size");
    setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
    SF_EXPECT_ERROR(rt::launcher_world_size(), "OMPI_COMM_WORLD_SIZE=0");
}

TEST(Dist, ASingleProcessIsAWorldOfOne) {
    rt::Comm& c = rt::comm();
    EXPECT_EQ(c.rank(), 0);
    EXPECT_EQ(c.world(), 1);
    EXPECT_EQ(c.local_rank(), 0);
    EXPECT_FALSE(rt::distributed());
    EXPECT_EQ(rt::rank_prefix(), "");
    float f[2] = {1.5f, -2.0f};
    c.allreduce(f, 2, rt::ReduceOp::Sum);
    EXPECT_EQ(f[1], -2.0f);
    std::string s = "kept";
    rt::broadcast_string(s);
    EXPECT_EQ(s, "kept");
    EXPECT_EQ(rt::allreduce_max(7), 7);
    SF_EXPECT_ERROR(c.broadcast(f, sizeof(f), 1), "broadcast from rank 1");
}

TEST(Dist, CollectiveTimeoutIsScopedAndChecked) {
    const double before = rt::collective_timeout_s();
    {
        const rt::ScopedCollectiveTimeout t(12.5);
        EXPECT_EQ(rt::collective_timeout_s(), 12.5);
    }
    EXPECT_EQ(rt::collective_timeout_s(), before);
    SF_EXPECT_ERROR(rt::set_collective_timeout_s(0), "must be > 0");
}

}  // namespace
