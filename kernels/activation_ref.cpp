// CPU reference for the pointwise activations and the heads' output transforms (activation.h).
// Element-wise loops run under OpenMP; every element (or l2norm row) is computed by one thread with
// a fixed operation order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/activation.h"
#include "runtime/error.h"

namespace kern {

namespace {

// Below this many elements the OpenMP fork costs more than the loop.
constexpr int64_t kParallelMin = 1 << 15;

// Never evaluates exp of a positive argument, so it cannot overflow for large |x|.
template <class T>
inline T sigmoid_stable(T x) {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
}

}  // namespace

template <class T>
void act_forward_ref(Act a, size_t n, const T* x, T* y) {
    const int64_t m = static_cast<int64_t>(n);
    switch (a) {
        case Act::None:
#pragma omp parallel for schedule(static) if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) y[i] = x[i];
            break;
        case Act::Silu:
#pragma omp parallel for schedule(static) if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) y[i] = x[i] * sigmoid_stable(x[i]);
            break;
        case Act::Relu:
            // torch.relu is clamp_min(x, 0): NaN propagates (the run's nonfinite check relies on it).
#pragma omp parallel for schedule(static) if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) y[i] = (x[i] > T(0) || std::isnan(x[i])) ? x[i] : T(0);
            break;
    }
}

template <class T>
void act_backward_ref(Act a, size_t n, const T* x, const T* dy, T* dx, bool accumulate) {
    const int64_t m = static_cast<int64_t>(n);
    // Overwrite: dx = 0 + value, bitwise what accumulating into a zeroed dx gives.
    auto base = [&](int64_t i) { return accumulate ? dx[i] : T(0); };
    switch (a) {
        case Act::None:
#pragma omp parallel for schedule(static) if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) dx[i] = base(i) + dy[i];
            break;
        case Act::Silu:
            // d/dx x*s(x) = s*(1 + x*(1 - s)), the form torch's silu_backward uses.
#pragma omp parallel for schedule(static) if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) {
                const T s = sigmoid_stable(x[i]);
                dx[i] = base(i) + dy[i] * s * (T(1) + x[i] * (T(1) - s));
            }
            break;
        case Act::Relu:
            // torch's threshold_backward: x <= 0 ? 0 : dy (0 at x == 0).
#pragma omp parallel for schedule(static) if (m > kParallelMin)
            for (int64_t i = 0; i < m; ++i) dx[i] = base(i) + (x[i] <= T(0) ? T(0) : dy[i]);
            break;
    }
}

template <class T>
void sigmoid_forward_ref(size_t n, const T* x, T* y) {
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) y[i] = sigmoid_stable(x[i]);
}

template <class T>
void sigmoid_backward_ref(size_t n, const T* y, const T* dy, T* dx) {
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) dx[i] += dy[i] * (T(1) - y[i]) * y[i];
}

template <class T>
void tanh_half_forward_ref(size_t n, const T* x, T* y) {
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) y[i] = T(0.5) * std::tanh(x[i]);
}

template <class T>
void tanh_half_backward_ref(size_t n, const T* y, const T* dy, T* dx) {
    // y = tanh(x)/2  =>  dy/dx = (1 - tanh^2)/2 = 0.5 - 2*y^2.
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) dx[i] += dy[i] * (T(0.5) - T(2) * y[i] * y[i]);
}

// x, y: (rows, c). F.normalize: y = x / max(||x||, eps); the norm is accumulated in double, the
// division is done in T as torch does (x / clamp_min(norm, eps)).
template <class T>
void l2norm_forward_ref(size_t rows, int c, const T* x, T* y, double eps) {
    SF_CHECK(c > 0 && eps > 0, "l2norm_forward_ref: need c > 0 and eps > 0 (got c=%d, eps=%g)", c, eps);
    const int64_t m = static_cast<int64_t>(rows);
#pragma omp parallel for schedule(static) if (m * c > kParallelMin)
    for (int64_t r = 0; r < m; ++r) {
        const T* xr = x + r * c;
        T* yr = y + r * c;
        double ss = 0;
        for (int j = 0; j < c; ++j) ss += static_cast<double>(xr[j]) * xr[j];
        const T d = static_cast<T>(std::max(std::sqrt(ss), eps));
        for (int j = 0; j < c; ++j) yr[j] = xr[j] / d;  // after the norm: y may alias x
    }
}

// With n = ||x||, d = max(n, eps):  dx_i = dy_i/d - (dy.x)/d^2 * dd/dx_i,  dd/dx_i = x_i/n when
// n >= eps (torch's clamp_min passes the gradient where norm >= min), else 0 (d is the constant eps).
template <class T>
void l2norm_backward_ref(size_t rows, int c, const T* x, const T* dy, T* dx, double eps) {
    SF_CHECK(c > 0 && eps > 0, "l2norm_backward_ref: need c > 0 and eps > 0 (got c=%d, eps=%g)", c, eps);
    const int64_t m = static_cast<int64_t>(rows);
#pragma omp parallel for schedule(static) if (m * c > kParallelMin)
    for (int64_t r = 0; r < m; ++r) {
        const T* xr = x + r * c;
        const T* gr = dy + r * c;
        T* dr = dx + r * c;
        double ss = 0, dot = 0;
        for (int j = 0; j < c; ++j) {
            ss += static_cast<double>(xr[j]) * xr[j];
            dot += static_cast<double>(gr[j]) * xr[j];
        }
        const double n = std::sqrt(ss);
        const double d = std::max(n, eps);
        const double coef = n >= eps ? dot / (d * d * n) : 0.0;
        for (int j = 0; j < c; ++j) dr[j] += static_cast<T>(gr[j] / d - coef * xr[j]);
    }
}

#define SF_INSTANTIATE(T)                                                         \
    template void act_forward_ref<T>(Act, size_t, const T*, T*);                  \
    template void act_backward_ref<T>(Act, size_t, const T*, const T*, T*, bool); \
    template void sigmoid_forward_ref<T>(size_t, const T*, T*);                   \
    template void sigmoid_backward_ref<T>(size_t, const T*, const T*, T*);        \
    template void tanh_half_forward_ref<T>(size_t, const T*, T*);                 \
    template void tanh_half_backward_ref<T>(size_t, const T*, const T*, T*);      \
    template void l2norm_forward_ref<T>(size_t, int, const T*, T*, double);       \
    template void l2norm_backward_ref<T>(size_t, int, const T*, const T*, T*, double);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace kern
