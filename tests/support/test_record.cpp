#include "tests/support/test_record.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sftest {

namespace {

std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (const unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\r': o += "\\r"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    o += buf;
                } else {
                    o += static_cast<char>(c);
                }
        }
    }
    return o + "\"";
}

std::string error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Errors a test can leave behind without breaking the context: a capture it did not end, which makes a
// device-wide synchronisation fail for as long as that capture lasts.
bool capture_error(cudaError_t e) {
    return e == cudaErrorStreamCaptureUnsupported || e == cudaErrorStreamCaptureInvalidated ||
           e == cudaErrorStreamCaptureImplicit || e == cudaErrorCapturedEvent || e == cudaErrorStreamCaptureUnjoined ||
           e == cudaErrorStreamCaptureIsolation;
}

class TestRecord : public ::testing::EmptyTestEventListener {
public:
    explicit TestRecord(std::FILE* f) : f_(f) {}

    void OnTestStart(const ::testing::TestInfo& info) override {
        start_ = std::chrono::steady_clock::now();
        std::fprintf(f_, "{\"event\": \"start\", \"test\": %s}\n", json_string(full_name(info)).c_str());
        std::fflush(f_);
    }

    void OnTestEnd(const ::testing::TestInfo& info) override {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
        std::string left;
        const std::string lost = cuda_context_lost(&left);
        const ::testing::TestResult& r = *info.result();
        std::string failures;
        for (int i = 0; i < r.total_part_count(); ++i) {
            const ::testing::TestPartResult& p = r.GetTestPartResult(i);
            if (!p.failed()) continue;
            std::string where = p.file_name() ? std::string(p.file_name()) + ":" + std::to_string(p.line_number())
                                              : std::string("unknown file");
            failures += (failures.empty() ? "" : ", ") + json_string(where + "\n" + p.message());
        }
        if (!lost.empty()) {
            failures += (failures.empty() ? "" : ", ") +
                        json_string("the CUDA context is lost after this test (" + lost +
                                    "): every later CUDA call of this process would fail with it");
        }
        const char* result = !lost.empty() || r.Failed() ? "failed" : r.Skipped() ? "skipped" : "passed";
        std::fprintf(f_, "{\"event\": \"end\", \"test\": %s, \"result\": \"%s\", \"ms\": %.3f, \"failures\": [%s]",
                     json_string(full_name(info)).c_str(), result, ms, failures.c_str());
        if (!lost.empty()) std::fprintf(f_, ", \"context_lost\": %s", json_string(lost).c_str());
        if (!left.empty()) std::fprintf(f_, ", \"cuda_error_left\": %s", json_string(left).c_str());
        std::fprintf(f_, "}\n");
        std::fflush(f_);
        if (!lost.empty()) {
            std::fprintf(stderr,
                         "[ CONTEXT  ] %s lost the CUDA context (%s); this process stops here with exit status 3, "
                         "the suite runner runs the remaining tests in a new one\n",
                         full_name(info).c_str(), lost.c_str());
            std::fflush(stderr);
            std::fflush(stdout);
            std::_Exit(3);
        }
    }

    void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
        std::fprintf(f_, "{\"event\": \"program_end\", \"failed\": %d}\n", unit.failed_test_count());
        std::fflush(f_);
    }

private:
    static std::string full_name(const ::testing::TestInfo& info) {
        return std::string(info.test_suite_name()) + "." + info.name();
    }

    std::FILE* f_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::string cuda_context_lost(std::string* left) {
    static const bool device = [] {
        int n = 0;
        const cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) cudaGetLastError();
        return e == cudaSuccess && n > 0;
    }();
    if (!device) return {};
    const cudaError_t first = cudaDeviceSynchronize();
    const cudaError_t pending = cudaGetLastError();  // clears a non-sticky error; a sticky one stays
    if (first == cudaSuccess && pending == cudaSuccess) return {};
    const cudaError_t again = cudaDeviceSynchronize();
    if (again != cudaSuccess && !capture_error(again)) return error_text(again);
    cudaGetLastError();
    if (left) *left = error_text(first != cudaSuccess ? first : pending);
    return {};
}

void install_test_record() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    const char* path = std::getenv("SF_TEST_RECORD");
    if (!path || !*path) return;
    std::FILE* f = std::fopen(path, "a");
    if (!f) {
        std::fprintf(stderr, "SF_TEST_RECORD: cannot open '%s' for appending; no per-test record\n", path);
        return;
    }
    // Processes the tests start (a death test's re-executed child, the CLI) must not write into it.
    unsetenv("SF_TEST_RECORD");
    ::testing::UnitTest::GetInstance()->listeners().Append(new TestRecord(f));
}

}  // namespace sftest
