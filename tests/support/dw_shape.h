// Test support: the ConvShape of a depthwise 3x3 convolution with pad 1 (the custom kernels' shape,
// kernels/dwconv_cuda.h): C channels in and out, C groups, no bias; and the BN prologue of such a
// convolution from its four C-vectors.
#pragma once
#include "kernels/conv.h"
#include "kernels/dwconv_cuda.h"

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

// A train-mode BN prologue (kern::DwPrologue): activation act, the producer's gamma, beta and saved
// mean and invstd (device C-vectors). Eval mode: set eval and eps on the result, mean and invstd then
// being the running mean and variance.
inline kern::DwPrologue dw_prologue(kern::Act act, const float* gamma, const float* beta, const float* mean,
                                    const float* invstd) {
    kern::DwPrologue pro;
    pro.act = act;
    pro.gamma = gamma;
    pro.beta = beta;
    pro.mean = mean;
    pro.invstd = invstd;
    return pro;
}

}  // namespace sftest
