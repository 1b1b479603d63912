// Test support: numeric comparisons that explain themselves, finite differences, deterministic
// random inputs, the GPU guard, and a log sink that turns warnings into failures.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace sftest {

// Relative L2 error ||got - ref|| / ||ref|| (absolute L2 when ref is all zero). NaN in either
// side yields +inf, so NaN never passes.
double rel_l2(const double* got, const double* ref, size_t n);
double rel_l2(const std::vector<double>& got, const std::vector<double>& ref);

// gtest assertion: relative L2 <= tol; on failure prints max abs/rel error and the first
// mismatches with their indices.
::testing::AssertionResult close_rel_l2(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                                        const std::string& what = "");
// Element-wise |got - ref| <= atol + rtol*|ref| (exact when both are 0).
::testing::AssertionResult close_elementwise(const std::vector<double>& got, const std::vector<double>& ref,
                                             double atol, double rtol, const std::string& what = "");

template <class T>
std::vector<double> to_double(const T* p, size_t n) {
    return std::vector<double>(p, p + n);
}
template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
    return std::vector<double>(v.begin(), v.end());
}

// Deterministic uniform values in [lo, hi) from a seed (splitmix64 stream).
std::vector<double> random_uniform(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Small integers in [lo, hi] (exactly representable), for exact-comparison tests.
std::vector<double> random_ints(size_t n, uint64_t seed, int lo, int hi);

// Central finite differences in double: d f / d x_i = (f(x+h e_i) - f(x-h e_i)) / 2h for every i.
// f must be a pure function of x (it may read x through the reference passed in).
std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
                                     double h = 1e-6);

// Scalar probe used with finite differences: L = sum_i y_i * r_i for fixed random weights r,
// so dL/dy = r.
double dot(const std::vector<double>& a, const std::vector<double>& b);

// True when a CUDA device is usable; otherwise false and the reason.
bool gpu_available(std::string* why);

// CRC-32 (IEEE) one bit at a time: an independent reference for the table-driven one.
uint32_t crc32_bitwise(const uint8_t* p, size_t n);

// The repository root: $SF_SOURCE_DIR when set (a build folder carried to another machine, whose
// copy of the repository lives elsewhere: scripts/gpu_test.sh and gpu_verify.sh set it), else the
// source folder the tests were configured from.
std::string source_dir();

// a and b the same bits, element by element; the first difference named.
inline ::testing::AssertionResult bitwise(const std::vector<float>& a, const std::vector<float>& b,
                                          const std::string& what) {
    if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return ::testing::AssertionFailure() << what << ": element " << i << " differs: " << a[i] << " vs " << b[i];
    return ::testing::AssertionSuccess();
}

inline std::vector<float> to_floats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace sftest

// Runs `stmt`, expects rt::Error whose message contains every one of the given strings.
#define SF_EXPECT_ERROR(stmt, ...)                                                     \
    do {                                                                               \
        try {                                                                          \
            stmt;                                                                      \
            ADD_FAILURE() << "no error from: " #stmt;                                  \
        } catch (const rt::Error& sf_e_) {                                             \
            for (const char* sf_part_ : {__VA_ARGS__})                                 \
                EXPECT_NE(std::string(sf_e_.what()).find(sf_part_), std::string::npos) \
                    << "message lacks '" << sf_part_ << "': " << sf_e_.what();         \
        }                                                                              \
    } while (0)

// Skips the current test (reported as skipped by ctest) when no usable CUDA device exists.
#define SF_REQUIRE_GPU()                                                                      \
    do {                                                                                      \
        std::string sf_why_;                                                                  \
        if (!::sftest::gpu_available(&sf_why_)) GTEST_SKIP() << "no usable GPU: " << sf_why_; \
    } while (0)
