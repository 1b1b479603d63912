// Bilinear upsampling by an integer factor (2, 4, 8), align_corners=False, NHWC.
// Matches F.interpolate(x, scale_factor=f, mode='bilinear', align_corners=False):
// src = max((dst + 0.5)/f - 0.5, 0); i0 = floor(src); i1 = min(i0 + 1, in - 1); lambda = src - i0.
// x (N,H,W,C) -> y (N,f*H,f*W,C). Backward accumulates into dx (accumulate = false: dx = 0 + ..., overwritten).
#pragma once
#include "kernels/tensor.h"
#include "runtime/exec.h"

namespace kern {

template <class T>
void upsample_bilinear_forward_ref(const Shape4& in, int factor, const T* x, T* y);
template <class T>
void upsample_bilinear_backward_ref(const Shape4& in, int factor, const T* dy, T* dx, bool accumulate = true);

void upsample_bilinear_forward(const rt::Exec& ex, const Shape4& in, int factor, const float* x, float* y);
void upsample_bilinear_backward(const rt::Exec& ex, const Shape4& in, int factor, const float* dy, float* dx,
                                bool accumulate = true);

}  // namespace kern
