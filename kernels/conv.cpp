// Convolution backend dispatch (float): CPU runs the reference (kernels/conv_ref.cpp); CUDA is not
// implemented yet and fails loudly.
#include "kernels/conv.h"

#include "runtime/error.h"

namespace kern {

void conv_forward(const rt::Exec& ex, const ConvShape& s, const float* x, const float* w, const float* b, float* y) {
    if (ex.is_cuda()) SF_FAIL("conv_forward: CUDA backend not implemented yet");
    conv_forward_ref(s, x, w, b, y);
}

void conv_backward_data(const rt::Exec& ex, const ConvShape& s, const float* dy, const float* w, float* dx,
                        bool accumulate) {
    if (ex.is_cuda()) SF_FAIL("conv_backward_data: CUDA backend not implemented yet");
    conv_backward_data_ref(s, dy, w, dx, accumulate);
}

void conv_backward_filter(const rt::Exec& ex, const ConvShape& s, const float* x, const float* dy, float* dw,
                          float* db) {
    if (ex.is_cuda()) SF_FAIL("conv_backward_filter: CUDA backend not implemented yet");
    conv_backward_filter_ref(s, x, dy, dw, db);
}

}  // namespace kern
