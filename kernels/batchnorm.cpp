// BatchNorm backend dispatch (float): CPU runs the reference (kernels/batchnorm_ref.cpp); CUDA is not
// implemented yet and fails loudly.
#include "kernels/batchnorm.h"

#include "runtime/error.h"

namespace kern {

void batchnorm_forward_train(const rt::Exec& ex, size_t rows, int c, const float* x, const float* gamma,
                             const float* beta, float* y, float* save_mean, float* save_invstd, float* running_mean,
                             float* running_var, double momentum, double eps) {
    if (ex.is_cuda()) SF_FAIL("batchnorm_forward_train: CUDA backend not implemented yet");
    batchnorm_forward_train_ref(rows, c, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, momentum,
                                eps);
}

void batchnorm_forward_eval(const rt::Exec& ex, size_t rows, int c, const float* x, const float* gamma,
                            const float* beta, const float* running_mean, const float* running_var, double eps,
                            float* y) {
    if (ex.is_cuda()) SF_FAIL("batchnorm_forward_eval: CUDA backend not implemented yet");
    batchnorm_forward_eval_ref(rows, c, x, gamma, beta, running_mean, running_var, eps, y);
}

void batchnorm_backward(const rt::Exec& ex, size_t rows, int c, const float* x, const float* dy, const float* gamma,
                        const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta,
                        bool accumulate_dx) {
    if (ex.is_cuda()) SF_FAIL("batchnorm_backward: CUDA backend not implemented yet");
    batchnorm_backward_ref(rows, c, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate_dx);
}

}  // namespace kern
