// Test support: the ConvShape of a depthwise 3x3 convolution with pad 1 (the custom kernels' shape,
// kernels/dwconv_cuda.h): C channels in and out, C groups, no bias.
#pragma once
#include "kernels/conv.h"

namespace sftest {

inline kern::ConvShape dw_shape(int n, int h, int w, int c, int stride) {
    kern::ConvShape s;
    s.n = n;
    s.h = h;
    s.w = w;
    s.cin = s.cout = s.groups = c;
    s.k = 3;
    s.stride = stride;
    s.pad = 1;
    return s;
}

}  // namespace sftest
