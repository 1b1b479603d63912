// What the pointwise conv's kernel tests share (tests/gpu/kernels_pwconv_test.cpp: forward;
// kernels_pwconv_dgrad_test.cpp: dgrad; kernels_pwconv_wgrad_test.cpp: wgrad): the cases, their shapes,
// the comparisons and the guard rows' value.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/tensor.h"
#include "tests/support/compare.h"
#include "tests/support/gpu_buffers.h"

namespace pwtest {

using kern::Act;
using sftest::bf16_exact;
using sftest::bitwise;
using sftest::download;
using sftest::download_bf16;
using sftest::to_floats;
using sftest::upload;
using sftest::upload_bf16;

constexpr double kMomentum = 0.1, kEps = 1e-5;
constexpr float kSentinel = -768.0f;  // the guard rows' value, bf16-exact (3 * 2^8)

struct Case {
    int n, h, w, cin, cout;
};

inline kern::ConvShape shape_of(const Case& k) { return {k.n, k.h, k.w, k.cin, k.cout, 1, 1, 0, 1, false}; }

inline std::string name_of(const Case& k) {
    return "n=" + std::to_string(k.n) + " " + std::to_string(k.h) + "x" + std::to_string(k.w) + " c" +
           std::to_string(k.cin) + "->" + std::to_string(k.cout);
}

inline size_t rows_of(const Case& k) { return static_cast<size_t>(k.n) * k.h * k.w; }

// Every got[i] within the bf16 rounding of the result (half an ulp, 2^-9 relative: bound 2^-8) plus
// `extra` (the fp32 accumulation) of ref[i]; the first offender named.
inline ::testing::AssertionResult within_rounding(const std::vector<float>& got, const std::vector<double>& ref,
                                                  double extra, const std::string& what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - ref[i]) <= std::ldexp(std::fabs(ref[i]), -8) + extra) && bad++ == 0) first = i;
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << bad << " off, first at " << first << ": " << got[first]
                                         << " vs " << ref[first];
}

// Row counts that end mid-tile and exactly on one; column blocks of 32 and 64; one or more k-steps.
inline const Case kCases[] = {
    {2, 9, 15, 64, 96},  // 270 rows: 3 tiles, the last partial; cout 96: three 32-column blocks
    {1, 5, 31, 32, 64},  // 155 rows; one k-step; a 64-column block
    {1, 16, 16, 128, 32},  // 256 rows: two whole tiles; four k-steps
    {3, 1, 1, 256, 128},   // 3 rows: one partial tile
    {1, 7, 9, 512, 64},    // cin 512: the largest prologue
};

// A dx buffer of n values followed by a guard row of `width` sentinels: set to v, and read back with the guard
// checked (the kernels must never write past the last row).
inline void set_guarded(kern::bf16* dst, const std::vector<float>& v, size_t n, int width) {
    std::vector<float> g(v);
    g.resize(n + static_cast<size_t>(width), kSentinel);
    upload_bf16(dst, g);
}
inline std::vector<float> read_guarded(const kern::bf16* src, size_t n, int width, const std::string& what) {
    bool intact = true;
    std::vector<float> v =
        sftest::strip_guard(download_bf16(src, n + static_cast<size_t>(width)), n, kSentinel, intact);
    EXPECT_TRUE(intact) << what << ": the kernel wrote past the last row";
    return v;
}

}  // namespace pwtest
