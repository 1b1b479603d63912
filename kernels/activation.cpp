// Backend dispatch for the activations (activation.h): CPU runs the fp32 reference; the CUDA
// kernels are not written yet.
#include "kernels/activation.h"

#include "runtime/error.h"

namespace kern {

void act_forward(const rt::Exec& ex, Act a, size_t n, const float* x, float* y) {
    if (ex.is_cuda()) SF_FAIL("act_forward: CUDA backend not implemented yet");
    act_forward_ref(a, n, x, y);
}

void act_backward(const rt::Exec& ex, Act a, size_t n, const float* x, const float* dy, float* dx, bool accumulate) {
    if (ex.is_cuda()) SF_FAIL("act_backward: CUDA backend not implemented yet");
    act_backward_ref(a, n, x, dy, dx, accumulate);
}

void sigmoid_forward(const rt::Exec& ex, size_t n, const float* x, float* y) {
    if (ex.is_cuda()) SF_FAIL("sigmoid_forward: CUDA backend not implemented yet");
    sigmoid_forward_ref(n, x, y);
}

void tanh_half_forward(const rt::Exec& ex, size_t n, const float* x, float* y) {
    if (ex.is_cuda()) SF_FAIL("tanh_half_forward: CUDA backend not implemented yet");
    tanh_half_forward_ref(n, x, y);
}

void l2norm_forward(const rt::Exec& ex, size_t rows, int c, const float* x, float* y, double eps) {
    if (ex.is_cuda()) SF_FAIL("l2norm_forward: CUDA backend not implemented yet");
    l2norm_forward_ref(rows, c, x, y, eps);
}

}  // namespace kern
