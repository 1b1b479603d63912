// CPU reference BatchNorm2d over NHWC data viewed as x (rows = N*H*W, C); per-channel parameters and
// statistics (C). float (the model's CPU backend) and double (finite differences).
// Per-channel sums over rows accumulate in double over a fixed number of row chunks (independent of
// the thread count), added in chunk order, so results are bitwise identical for any thread count.
// The variance is two-pass (sum of squared deviations from the mean), which stays accurate when
// |mean| >> std. Per-element arithmetic is done in double and rounded once to T.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/batchnorm.h"
#include "runtime/error.h"

namespace kern {
namespace {

constexpr size_t kRowChunks = 32;

// out[i] = sum over rows of the row terms that add_row(row, acc) adds into acc[0 .. width).
template <class AddRow>
std::vector<double> reduce_rows(size_t rows, size_t width, AddRow add_row) {
    const size_t chunks = std::min(rows, kRowChunks);
    std::vector<double> part(chunks * width, 0.0);
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < chunks; ++ch) {
        double* acc = part.data() + ch * width;
        for (size_t r = rows * ch / chunks; r < rows * (ch + 1) / chunks; ++r) add_row(r, acc);
    }
    std::vector<double> out(width, 0.0);
    for (size_t ch = 0; ch < chunks; ++ch)
        for (size_t i = 0; i < width; ++i) out[i] += part[ch * width + i];
    return out;
}

// y[r][j] = (x[r][j] - shift[j]) * scale[j] + beta[j] for every row.
template <class T>
void affine_rows(size_t rows, int c, const T* x, const std::vector<double>& shift, const std::vector<double>& scale,
                 const T* beta, T* y) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; ++r) {
        const T* xr = x + r * c;
        T* yr = y + r * c;
        for (int j = 0; j < c; ++j)
            yr[j] = static_cast<T>((static_cast<double>(xr[j]) - shift[j]) * scale[j] + static_cast<double>(beta[j]));
    }
}

}  // namespace

template <class T>
void batchnorm_forward_train_ref(size_t rows, int c, const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                                 T* save_invstd, T* running_mean, T* running_var, double momentum, double eps) {
    SF_CHECK(c > 0, "batchnorm: channel count must be positive, got c=%d", c);
    SF_CHECK(rows > 1, "batchnorm train: need more than 1 value per channel, got rows=%zu", rows);
    SF_CHECK(x && gamma && beta && y && save_mean && save_invstd && running_mean && running_var,
             "batchnorm_forward_train_ref: null tensor");
    const std::vector<double> sum = reduce_rows(rows, c, [&](size_t r, double* acc) {
        const T* xr = x + r * c;
        for (int j = 0; j < c; ++j) acc[j] += static_cast<double>(xr[j]);
    });
    std::vector<double> mean(c);
    for (int j = 0; j < c; ++j) mean[j] = sum[j] / static_cast<double>(rows);
    const std::vector<double> sq = reduce_rows(rows, c, [&](size_t r, double* acc) {
        const T* xr = x + r * c;
        for (int j = 0; j < c; ++j) {
            const double d = static_cast<double>(xr[j]) - mean[j];
            acc[j] += d * d;
        }
    });
    std::vector<double> scale(c);
    for (int j = 0; j < c; ++j) {
        const double var = sq[j] / static_cast<double>(rows);
        const double invstd = 1.0 / std::sqrt(var + eps);
        const double unbiased = var * static_cast<double>(rows) / static_cast<double>(rows - 1);
        save_mean[j] = static_cast<T>(mean[j]);
        save_invstd[j] = static_cast<T>(invstd);
        running_mean[j] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_mean[j]) + momentum * mean[j]);
        running_var[j] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_var[j]) + momentum * unbiased);
        scale[j] = invstd * static_cast<double>(gamma[j]);
    }
    affine_rows(rows, c, x, mean, scale, beta, y);
}

template <class T>
void batchnorm_forward_eval_ref(size_t rows, int c, const T* x, const T* gamma, const T* beta, const T* running_mean,
                                const T* running_var, double eps, T* y) {
    SF_CHECK(c > 0, "batchnorm: channel count must be positive, got c=%d", c);
    SF_CHECK(x && gamma && beta && running_mean && running_var && y, "batchnorm_forward_eval_ref: null tensor");
    std::vector<double> shift(c), scale(c);
    for (int j = 0; j < c; ++j) {
        shift[j] = static_cast<double>(running_mean[j]);
        scale[j] = static_cast<double>(gamma[j]) / std::sqrt(static_cast<double>(running_var[j]) + eps);
    }
    affine_rows(rows, c, x, shift, scale, beta, y);
}

// With xhat = (x - mean) * invstd over the batch:
//   dbeta = sum dy,  dgamma = sum dy * xhat,
//   dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)).
template <class T>
void batchnorm_backward_ref(size_t rows, int c, const T* x, const T* dy, const T* gamma, const T* save_mean,
                            const T* save_invstd, T* dx, T* dgamma, T* dbeta, bool accumulate_dx) {
    SF_CHECK(c > 0, "batchnorm: channel count must be positive, got c=%d", c);
    SF_CHECK(rows > 0, "batchnorm backward: rows must be positive");
    SF_CHECK(x && dy && gamma && save_mean && save_invstd && dx && dgamma && dbeta,
             "batchnorm_backward_ref: null tensor");
    // sums[0 .. c) = sum dy, sums[c .. 2c) = sum dy * xhat
    const std::vector<double> sums = reduce_rows(rows, 2 * static_cast<size_t>(c), [&](size_t r, double* acc) {
        const T* xr = x + r * c;
        const T* dyr = dy + r * c;
        for (int j = 0; j < c; ++j) {
            const double d = static_cast<double>(dyr[j]);
            const double xhat = (static_cast<double>(xr[j]) - save_mean[j]) * save_invstd[j];
            acc[j] += d;
            acc[c + j] += d * xhat;
        }
    });
    std::vector<double> k(c), mdy(c), mdyx(c);
    for (int j = 0; j < c; ++j) {
        k[j] = static_cast<double>(gamma[j]) * save_invstd[j];
        mdy[j] = sums[j] / static_cast<double>(rows);
        mdyx[j] = sums[c + j] / static_cast<double>(rows);
        dbeta[j] += static_cast<T>(sums[j]);
        dgamma[j] += static_cast<T>(sums[c + j]);
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; ++r) {
        const T* xr = x + r * c;
        const T* dyr = dy + r * c;
        T* dxr = dx + r * c;
        for (int j = 0; j < c; ++j) {
            const double xhat = (static_cast<double>(xr[j]) - save_mean[j]) * save_invstd[j];
            dxr[j] = (accumulate_dx ? dxr[j] : T(0)) +
                     static_cast<T>(k[j] * (static_cast<double>(dyr[j]) - mdy[j] - xhat * mdyx[j]));
        }
    }
}

#define SF_BN_INSTANTIATE(T)                                                                                           \
    template void batchnorm_forward_train_ref<T>(size_t, int, const T*, const T*, const T*, T*, T*, T*, T*, T*,        \
                                                 double, double);                                                      \
    template void batchnorm_forward_eval_ref<T>(size_t, int, const T*, const T*, const T*, const T*, const T*, double, \
                                                T*);                                                                   \
    template void batchnorm_backward_ref<T>(size_t, int, const T*, const T*, const T*, const T*, const T*, T*, T*, T*, \
                                            bool);
SF_BN_INSTANTIATE(float)
SF_BN_INSTANTIATE(double)
#undef SF_BN_INSTANTIATE

}  // namespace kern
