// 2-D convolution with groups, stride, symmetric zero padding and optional bias.
// x (N,H,W,Cin) NHWC; w (Cout,k,k,Cin/groups) KRSC; b (Cout) or null; y (N,P,Q,Cout).
// P = (H + 2*pad - k)/stride + 1, likewise Q. Matches torch.nn.Conv2d(padding=pad, groups=groups).
#pragma once
#include <string>

#include "kernels/tensor.h"
#include "runtime/exec.h"

namespace kern {

struct ConvShape {
    int n = 0, h = 0, w = 0, cin = 0, cout = 0;
    int k = 1, stride = 1, pad = 0, groups = 1;
    bool bias = false;

    int p() const { return (h + 2 * pad - k) / stride + 1; }
    int q() const { return (w + 2 * pad - k) / stride + 1; }
    Shape4 in() const { return {n, h, w, cin}; }
    Shape4 out() const { return {n, p(), q(), cout}; }
    size_t weight_numel() const { return static_cast<size_t>(cout) * k * k * (cin / groups); }
    // Throws rt::Error naming the problem (non-positive dims, groups not dividing channels, ...).
    void validate() const;
    // "n128 64x128 c32->64 k3 s2 g1": how messages and reports name a convolution.
    std::string describe() const;
};

// y = conv(x, w) + b                           (y overwritten)
template <class T>
void conv_forward_ref(const ConvShape& s, const T* x, const T* w, const T* b, T* y);
// dx += conv_transpose(dy, w)                  (accumulates; accumulate = false: dx = 0 + ..., overwritten)
template <class T>
void conv_backward_data_ref(const ConvShape& s, const T* dy, const T* w, T* dx, bool accumulate = true);
// dw += sum over N,P,Q of x-patch * dy; db += sum of dy (db may be null)   (accumulate)
template <class T>
void conv_backward_filter_ref(const ConvShape& s, const T* x, const T* dy, T* dw, T* db);

// Backend dispatch (float). Same contracts as the references.
void conv_forward(const rt::Exec& ex, const ConvShape& s, const float* x, const float* w, const float* b, float* y);
void conv_backward_data(const rt::Exec& ex, const ConvShape& s, const float* dy, const float* w, float* dx,
                        bool accumulate = true);
void conv_backward_filter(const rt::Exec& ex, const ConvShape& s, const float* x, const float* dy, float* dw,
                          float* db);

}  // namespace kern
