// runtime/nccl.h on a machine without a GPU: the version arithmetic and the 2.18 floor, the errors of
// a missing library and of a library without NCCL's entry points, the rank -> GPU check, and the
// refusals of a communicator that cannot be made here. NcclComm's collectives run on a GPU host
// (tests/gpu/model_step_nccl_test.cpp).
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/nccl.h"
#include "tests/support/compare.h"

namespace {

TEST(Nccl, VersionCodesOfBothSchemes) {
    EXPECT_EQ(rt::nccl_version_string(21803), "2.18.3");
    EXPECT_EQ(rt::nccl_version_string(22809), "2.28.9");
    EXPECT_EQ(rt::nccl_version_string(21000), "2.10.0");
    EXPECT_EQ(rt::nccl_version_string(2804), "2.8.4");  // X*1000 + Y*100 + Z up to 2.8
    EXPECT_EQ(rt::nccl_version_string(rt::kNcclMinVersion), "2.18.0");
}

TEST(Nccl, OlderThan218IsRefused) {
    rt::check_nccl_version(21800, "libnccl.so.2");
    rt::check_nccl_version(22809, "libnccl.so.2");
    SF_EXPECT_ERROR(rt::check_nccl_version(21703, "/opt/nccl/libnccl.so.2"), "/opt/nccl/libnccl.so.2", "NCCL 2.17.3",
                    "needs NCCL >= 2.18.0", "LD_LIBRARY_PATH");
    SF_EXPECT_ERROR(rt::check_nccl_version(2804, "libnccl.so.2"), "NCCL 2.8.4");
}

TEST(Nccl, MissingLibraryNamesItAndTheFix) {
    SF_EXPECT_ERROR(rt::load_nccl("libnccl_absent_for_test.so.2"), "NCCL unavailable",
                    "dlopen(\"libnccl_absent_for_test.so.2\")", "LD_LIBRARY_PATH", "site-packages/nvidia/nccl/lib");
}

TEST(Nccl, ALibraryWithoutNcclEntryPointsIsRefused) {
    SF_EXPECT_ERROR(rt::load_nccl("libm.so.6"), "not found in libm.so.6");
}

TEST(Nccl, TheToolkitLibraryLoadsWhenPresent) {
    int code = 0;
    try {
        code = rt::load_nccl();
    } catch (const rt::Error& e) {
        GTEST_SKIP() << "no loadable " << rt::kNcclLibrary << " here: " << e.what();
    }
    EXPECT_GE(code, rt::kNcclMinVersion) << rt::nccl_version_string(code);
    EXPECT_EQ(rt::load_nccl(), code);  // loaded once, kept
}

TEST(Nccl, RankNeedsAVisibleGpu) {
    rt::check_rank_device(0, 0, 1);
    rt::check_rank_device(3, 1, 2);
    SF_EXPECT_ERROR(rt::check_rank_device(2, 2, 2), "rank 2 takes GPU 2", "sees 2 GPU(s)", "CUDA_VISIBLE_DEVICES");
    SF_EXPECT_ERROR(rt::check_rank_device(0, 0, 0), "rank 0 takes GPU 0", "sees 0 GPU(s)");
}

TEST(Nccl, CommunicatorMustMatchTheJob) {
    // rt::comm() is a world of 1 in the tests.
    SF_EXPECT_ERROR(rt::NcclComm(0, 2, 0), "rank 0 of 2", "rank 0 of 1");
    SF_EXPECT_ERROR(rt::NcclComm(1, 1, 0), "rank 1 of a world of 1");
    SF_EXPECT_ERROR(rt::NcclComm(0, 0, 0), "world of 0");
}

TEST(Nccl, CommunicatorWithoutAGpuIsRefused) {
    std::string why;
    if (sftest::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the refusal path does not apply";
    try {
        rt::load_nccl();
    } catch (const rt::Error& e) {
        GTEST_SKIP() << "no loadable NCCL: " << e.what();
    }
    SF_EXPECT_ERROR(rt::NcclComm(0, 1, 0), "rank 0 takes GPU 0", "sees 0 GPU(s)");
}

}  // namespace
