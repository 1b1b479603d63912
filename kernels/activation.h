// Pointwise activations and the heads' output transforms.
//   act:        y = x (None), x*sigmoid(x) (SiLU), max(x,0) (ReLU); backward from the input x.
//   sigmoid:    y = 1/(1+exp(-x)); backward from y: dx += dy*y*(1-y).
//   tanh_half:  y = 0.5*tanh(x);   backward from y: dx += dy*(0.5 - 2*y*y).
//   l2norm:     over the channel dim of (rows, C): y = x / max(||x||_2, eps)  (F.normalize, eps 1e-12).
// Backward functions accumulate into dx; act_backward with accumulate = false overwrites dx
// (computed as 0 + value: bitwise what accumulating into a zeroed dx gives, sign of zero included).
// y may alias x in forward.
#pragma once
#include <cstddef>

#include "kernels/tensor.h"
#include "runtime/exec.h"

namespace kern {

template <class T>
void act_forward_ref(Act a, size_t n, const T* x, T* y);
template <class T>
void act_backward_ref(Act a, size_t n, const T* x, const T* dy, T* dx, bool accumulate = true);

template <class T>
void sigmoid_forward_ref(size_t n, const T* x, T* y);
template <class T>
void sigmoid_backward_ref(size_t n, const T* y, const T* dy, T* dx);

template <class T>
void tanh_half_forward_ref(size_t n, const T* x, T* y);
template <class T>
void tanh_half_backward_ref(size_t n, const T* y, const T* dy, T* dx);

template <class T>
void l2norm_forward_ref(size_t rows, int c, const T* x, T* y, double eps);
template <class T>
void l2norm_backward_ref(size_t rows, int c, const T* x, const T* dy, T* dx, double eps);

void act_forward(const rt::Exec& ex, Act a, size_t n, const float* x, float* y);
void act_backward(const rt::Exec& ex, Act a, size_t n, const float* x, const float* dy, float* dx,
                  bool accumulate = true);
void sigmoid_forward(const rt::Exec& ex, size_t n, const float* x, float* y);
void tanh_half_forward(const rt::Exec& ex, size_t n, const float* x, float* y);
void l2norm_forward(const rt::Exec& ex, size_t rows, int c, const float* x, float* y, double eps);

}  // namespace kern
