// Backend dispatch for bilinear upsampling (upsample.h): CPU runs the fp32 reference; the CUDA
// kernels are not written yet.
#include "kernels/upsample.h"

#include "runtime/error.h"

namespace kern {

void upsample_bilinear_forward(const rt::Exec& ex, const Shape4& in, int factor, const float* x, float* y) {
    if (ex.is_cuda()) SF_FAIL("upsample_bilinear_forward: CUDA backend not implemented yet");
    upsample_bilinear_forward_ref(in, factor, x, y);
}

void upsample_bilinear_backward(const rt::Exec& ex, const Shape4& in, int factor, const float* dy, float* dx,
                                bool accumulate) {
    if (ex.is_cuda()) SF_FAIL("upsample_bilinear_backward: CUDA backend not implemented yet");
    upsample_bilinear_backward_ref(in, factor, dy, dx, accumulate);
}

}  // namespace kern
