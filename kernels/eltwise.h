// Element-wise helpers: y = a + b (y may alias a or b); y += x; fill.
// The backward outputs (accumulate's y, fusion's da/db) take an accumulate flag: false overwrites
// them with 0 + value, bitwise what accumulating into a zeroed tensor gives (sign of zero included).
// Weighted FPN fusion (LiteFPN FusionModule): with sa = softplus(wa), sb = softplus(wb),
//   y = (sa*a + sb*b) / (sa + sb + 1e-4)
// wa, wb are single-element parameters. Backward accumulates into da, db, dwa, dwb
// (dwa, dwb sums accumulate in double).
#pragma once
#include <cstddef>

#include "runtime/exec.h"

namespace kern {

constexpr double kFusionEps = 1e-4;

template <class T>
void add_ref(size_t n, const T* a, const T* b, T* y);
template <class T>
void accumulate_ref(size_t n, const T* x, T* y, bool accumulate = true);
template <class T>
void fill_ref(size_t n, T value, T* y);

template <class T>
void fusion_forward_ref(size_t n, const T* a, const T* b, const T* wa, const T* wb, T* y);
template <class T>
void fusion_backward_ref(size_t n, const T* a, const T* b, const T* wa, const T* wb, const T* dy, T* da, T* db, T* dwa,
                         T* dwb, bool accumulate_da = true, bool accumulate_db = true);

void add(const rt::Exec& ex, size_t n, const float* a, const float* b, float* y);
void accumulate(const rt::Exec& ex, size_t n, const float* x, float* y, bool accumulate = true);
void fill(const rt::Exec& ex, size_t n, float value, float* y);
void fusion_forward(const rt::Exec& ex, size_t n, const float* a, const float* b, const float* wa, const float* wb,
                    float* y);
void fusion_backward(const rt::Exec& ex, size_t n, const float* a, const float* b, const float* wa, const float* wb,
                     const float* dy, float* da, float* db, float* dwa, float* dwb, bool accumulate_da = true,
                     bool accumulate_db = true);

}  // namespace kern
