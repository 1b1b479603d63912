// CPU reference for the element-wise helpers and the weighted FPN fusion (eltwise.h).
// Element-wise loops are trivially thread-count independent. The fusion's scalar gradients are
// sums over n: each fixed-size chunk is summed in double by one thread and the chunk sums are added
// in chunk order, so the result is bitwise identical for any thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/eltwise.h"

namespace kern {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this the OpenMP fork costs more than the loop
constexpr int64_t kChunk = 1 << 14;        // fixed reduction chunk (elements)

template <class T>
inline T sigmoid_stable(T x) {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
}

// torch.nn.functional.softplus with beta 1, threshold 20: linear above the threshold, and
// log1p(exp(x)) below it, which cannot overflow there.
template <class T>
inline T softplus(T x) {
    return x > T(20) ? x : std::log1p(std::exp(x));
}

// d softplus / dx: 1 above the threshold, sigmoid(x) below (torch's softplus_backward).
template <class T>
inline T softplus_grad(T x) {
    return x > T(20) ? T(1) : sigmoid_stable(x);
}

}  // namespace

template <class T>
void add_ref(size_t n, const T* a, const T* b, T* y) {
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) y[i] = a[i] + b[i];
}

template <class T>
void accumulate_ref(size_t n, const T* x, T* y, bool accumulate) {
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) y[i] = (accumulate ? y[i] : T(0)) + x[i];
}

template <class T>
void fill_ref(size_t n, T value, T* y) {
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) y[i] = value;
}

// a, b, y: (n); wa, wb: one element each. Computed in T in torch's order:
// (sa*a + sb*b) / ((sa + sb) + 1e-4).
template <class T>
void fusion_forward_ref(size_t n, const T* a, const T* b, const T* wa, const T* wb, T* y) {
    const T sa = softplus(wa[0]), sb = softplus(wb[0]);
    const T den = sa + sb + static_cast<T>(kFusionEps);
    const int64_t m = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t i = 0; i < m; ++i) y[i] = (sa * a[i] + sb * b[i]) / den;
}

// With D = sa + sb + eps and y = (sa*a + sb*b)/D:
//   da += dy*sa/D,  db += dy*sb/D,
//   dL/dsa = sum(dy*(a - y))/D = (Sa - Sy)/D  with Sa = sum(dy*a), Sb = sum(dy*b), Sy = (sa*Sa + sb*Sb)/D,
//   dwa += dL/dsa * softplus'(wa); likewise for b.
template <class T>
void fusion_backward_ref(size_t n, const T* a, const T* b, const T* wa, const T* wb, const T* dy, T* da, T* db, T* dwa,
                         T* dwb, bool accumulate_da, bool accumulate_db) {
    const T sa = softplus(wa[0]), sb = softplus(wb[0]);
    const T den = sa + sb + static_cast<T>(kFusionEps);
    const int64_t m = static_cast<int64_t>(n);
    const int64_t chunks = (m + kChunk - 1) / kChunk;
    std::vector<double> part_a(static_cast<size_t>(chunks)), part_b(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (m > kParallelMin)
    for (int64_t k = 0; k < chunks; ++k) {
        const int64_t end = std::min(m, (k + 1) * kChunk);
        double s_a = 0, s_b = 0;
        for (int64_t i = k * kChunk; i < end; ++i) {
            const T g = dy[i] / den;  // torch: d(num/den)/dnum, then times sa or sb
            da[i] = (accumulate_da ? da[i] : T(0)) + g * sa;
            db[i] = (accumulate_db ? db[i] : T(0)) + g * sb;
            s_a += static_cast<double>(dy[i]) * a[i];
            s_b += static_cast<double>(dy[i]) * b[i];
        }
        part_a[k] = s_a;
        part_b[k] = s_b;
    }
    double sum_a = 0, sum_b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
        sum_a += part_a[k];
        sum_b += part_b[k];
    }
    const double d = den;
    const double sum_y = (sa * sum_a + sb * sum_b) / d;  // sum(dy*y)
    dwa[0] += static_cast<T>((sum_a - sum_y) / d * softplus_grad(wa[0]));
    dwb[0] += static_cast<T>((sum_b - sum_y) / d * softplus_grad(wb[0]));
}

#define SF_INSTANTIATE(T)                                                                                          \
    template void add_ref<T>(size_t, const T*, const T*, T*);                                                      \
    template void accumulate_ref<T>(size_t, const T*, T*, bool);                                                   \
    template void fill_ref<T>(size_t, T, T*);                                                                      \
    template void fusion_forward_ref<T>(size_t, const T*, const T*, const T*, const T*, T*);                       \
    template void fusion_backward_ref<T>(size_t, const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*, \
                                         bool, bool);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace kern
