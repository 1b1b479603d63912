// Error macros carry file:line, the failed expression and a formatted message; logging sinks.
#include <gtest/gtest.h>

#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tests/support/compare.h"

namespace {

TEST(Error, CheckFormatsFileLineExpressionAndMessage) {
    const int got = 3;
    try {
        SF_CHECK(got == 4, "expected %d channels, got %d", 4, got);
        FAIL() << "SF_CHECK did not throw";
    } catch (const rt::Error& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("runtime_error_test.cpp:"), std::string::npos) << w;
        EXPECT_NE(w.find("got == 4"), std::string::npos) << w;
        EXPECT_NE(w.find("expected 4 channels, got 3"), std::string::npos) << w;
    }
}

TEST(Error, PassingCheckDoesNotThrow) { EXPECT_NO_THROW(SF_CHECK(1 + 1 == 2, "never")); }

TEST(Error, CudaCheckNamesTheError) {
    try {
        SF_CUDA_CHECK(cudaErrorInvalidValue);
        FAIL() << "SF_CUDA_CHECK did not throw";
    } catch (const rt::Error& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("cudaErrorInvalidValue"), std::string::npos) << w;
        EXPECT_NE(w.find("CUDA error"), std::string::npos) << w;
    }
}

TEST(Error, CudnnAndCublasChecksNameTheStatus) {
    try {
        SF_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM);
        FAIL();
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << e.what();
    }
    try {
        SF_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE);
        FAIL();
    } catch (const rt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << e.what();
    }
}

TEST(Log, SinkReceivesMessagesAtOrAboveLevel) {
    std::vector<std::pair<rt::LogLevel, std::string>> got;
    rt::LogSink old = rt::set_log_sink([&](rt::LogLevel l, const std::string& m) { got.emplace_back(l, m); });
    const rt::LogLevel old_level = rt::log_level();
    rt::set_log_level(rt::LogLevel::Info);
    SF_LOG_DEBUG("hidden %d", 1);
    SF_LOG_INFO("shown %d", 2);
    SF_LOG_WARN("warned %s", "x");
    rt::set_log_level(old_level);
    rt::set_log_sink(old);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].second, "shown 2");
    EXPECT_EQ(got[1].first, rt::LogLevel::Warn);
}

}  // namespace
