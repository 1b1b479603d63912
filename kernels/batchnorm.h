// BatchNorm2d over NHWC data viewed as (rows = N*H*W, C). Matches torch.nn.BatchNorm2d:
// train: batch mean / biased variance normalise; running_mean/var updated with `momentum`
//        (running_var takes the unbiased variance, rows/(rows-1)); saves mean and invstd.
// eval:  normalise with the running statistics.
// Sums over rows accumulate in double.
#pragma once
#include <cstddef>

#include "runtime/exec.h"

namespace kern {

template <class T>
void batchnorm_forward_train_ref(size_t rows, int c, const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                                 T* save_invstd, T* running_mean, T* running_var, double momentum, double eps);
template <class T>
void batchnorm_forward_eval_ref(size_t rows, int c, const T* x, const T* gamma, const T* beta, const T* running_mean,
                                const T* running_var, double eps, T* y);
// Train-mode backward (batch statistics): dx += ..., dgamma += ..., dbeta += ...
// (accumulate_dx = false: dx = 0 + ..., overwritten; dgamma, dbeta always accumulate)
template <class T>
void batchnorm_backward_ref(size_t rows, int c, const T* x, const T* dy, const T* gamma, const T* save_mean,
                            const T* save_invstd, T* dx, T* dgamma, T* dbeta, bool accumulate_dx = true);

void batchnorm_forward_train(const rt::Exec& ex, size_t rows, int c, const float* x, const float* gamma,
                             const float* beta, float* y, float* save_mean, float* save_invstd, float* running_mean,
                             float* running_var, double momentum, double eps);
void batchnorm_forward_eval(const rt::Exec& ex, size_t rows, int c, const float* x, const float* gamma,
                            const float* beta, const float* running_mean, const float* running_var, double eps,
                            float* y);
void batchnorm_backward(const rt::Exec& ex, size_t rows, int c, const float* x, const float* dy, const float* gamma,
                        const float* save_mean, const float* save_invstd, float* dx, float* dgamma, float* dbeta,
                        bool accumulate_dx = true);

}  // namespace kern
