// CUDA launcher for kern::fill (fill.cu), declared without CUDA types so eltwise.cpp (g++) can
// dispatch to it.
#pragma once
#include <cstddef>

#include "runtime/exec.h"

namespace kern {

// y: (n) fp32 device memory, any 4-byte alignment. Enqueued on ex.stream; never synchronises.
void fill_cuda(const rt::Exec& ex, size_t n, float value, float* y);

}  // namespace kern
