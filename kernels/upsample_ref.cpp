// CPU reference for bilinear upsampling by 2, 4 or 8 (upsample.h), align_corners=False, NHWC.
// The interpolation is separable, so each axis gets a table of taps computed once per call, exactly
// as PyTorch's CPU kernel computes them (in T, with scale = 1/f). Backward is the transpose done as
// a gather: every dx element sums its own contributions in a fixed order, so results do not depend
// on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/upsample.h"
#include "runtime/error.h"

namespace kern {

namespace {

// Output index o reads inputs i0 and i1 with weights l0 and l1.
template <class T>
struct Tap {
    int i0, i1;
    T l0, l1;
};

void check_args(const char* fn, const Shape4& in, int factor) {
    SF_CHECK(factor == 2 || factor == 4 || factor == 8, "%s: upsample factor %d not supported (allowed: 2, 4, 8)", fn,
             factor);
    SF_CHECK(in.n >= 0 && in.h > 0 && in.w > 0 && in.c > 0, "%s: bad input shape (%d, %d, %d, %d)", fn, in.n, in.h,
             in.w, in.c);
}

// area_pixel_compute_source_index + guard_index_and_lambda from ATen's UpSample.h.
template <class T>
std::vector<Tap<T>> make_taps(int in, int factor) {
    const int out = in * factor;
    const T scale = static_cast<T>(1.0 / factor);  // compute_scales_value: 1/scale_factor
    std::vector<Tap<T>> taps(static_cast<size_t>(out));
    for (int o = 0; o < out; ++o) {
        T src = scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
        if (src < T(0)) src = T(0);
        const int i0 = std::min(static_cast<int>(std::floor(src)), in - 1);
        const T l1 = std::min(std::max(src - static_cast<T>(i0), T(0)), T(1));
        const int i1 = i0 + (i0 < in - 1 ? 1 : 0);
        taps[o] = {i0, i1, T(1) - l1, l1};
    }
    return taps;
}

// Transposed taps in CSR form: for input index i, the (output index, weight) pairs that read it,
// in increasing output order. Zero weights are dropped.
template <class T>
struct Adjacency {
    std::vector<int> start;  // in + 1
    std::vector<int> out;
    std::vector<T> weight;
};

template <class T>
Adjacency<T> transpose_taps(const std::vector<Tap<T>>& taps, int in) {
    Adjacency<T> adj;
    std::vector<std::vector<std::pair<int, T>>> lists(static_cast<size_t>(in));
    for (int o = 0; o < static_cast<int>(taps.size()); ++o) {
        if (taps[o].l0 != T(0)) lists[taps[o].i0].push_back({o, taps[o].l0});
        if (taps[o].l1 != T(0)) lists[taps[o].i1].push_back({o, taps[o].l1});
    }
    adj.start.push_back(0);
    for (const auto& l : lists) {
        for (const auto& e : l) {
            adj.out.push_back(e.first);
            adj.weight.push_back(e.second);
        }
        adj.start.push_back(static_cast<int>(adj.out.size()));
    }
    return adj;
}

}  // namespace

// x: (N, H, W, C) -> y: (N, f*H, f*W, C).
template <class T>
void upsample_bilinear_forward_ref(const Shape4& in, int factor, const T* x, T* y) {
    check_args("upsample_bilinear_forward_ref", in, factor);
    const int H = in.h, W = in.w, C = in.c, OH = H * factor, OW = W * factor;
    const std::vector<Tap<T>> th = make_taps<T>(H, factor), tw = make_taps<T>(W, factor);
    const int64_t rows = static_cast<int64_t>(in.n) * OH;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / OH;
        const Tap<T>& h = th[r % OH];
        const T* x0 = x + ((b * H + h.i0) * W) * static_cast<int64_t>(C);
        const T* x1 = x + ((b * H + h.i1) * W) * static_cast<int64_t>(C);
        T* yr = y + r * OW * static_cast<int64_t>(C);
        for (int ow = 0; ow < OW; ++ow) {
            const Tap<T>& w = tw[ow];
            const T* a0 = x0 + static_cast<int64_t>(w.i0) * C;
            const T* a1 = x0 + static_cast<int64_t>(w.i1) * C;
            const T* b0 = x1 + static_cast<int64_t>(w.i0) * C;
            const T* b1 = x1 + static_cast<int64_t>(w.i1) * C;
            // Weights and summation order of ATen's channels-last kernel (its vectorised path).
            const T w00 = h.l0 * w.l0, w01 = h.l0 * w.l1, w10 = h.l1 * w.l0, w11 = h.l1 * w.l1;
            T* yp = yr + static_cast<int64_t>(ow) * C;
            for (int c = 0; c < C; ++c) yp[c] = a0[c] * w00 + (a1[c] * w01 + (b0[c] * w10 + b1[c] * w11));
        }
    }
}

// dy: (N, f*H, f*W, C) -> dx: (N, H, W, C), accumulated. Each dx element gathers the at most
// (2f)^2 output gradients that read it, summed in double.
template <class T>
void upsample_bilinear_backward_ref(const Shape4& in, int factor, const T* dy, T* dx, bool accumulate) {
    check_args("upsample_bilinear_backward_ref", in, factor);
    const int H = in.h, W = in.w, C = in.c, OH = H * factor, OW = W * factor;
    const Adjacency<T> ah = transpose_taps(make_taps<T>(H, factor), H);
    const Adjacency<T> aw = transpose_taps(make_taps<T>(W, factor), W);
    const int64_t rows = static_cast<int64_t>(in.n) * H;
#pragma omp parallel
    {
        std::vector<double> acc(static_cast<size_t>(C));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t b = r / H;
            const int ih = static_cast<int>(r % H);
            for (int iw = 0; iw < W; ++iw) {
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int p = ah.start[ih]; p < ah.start[ih + 1]; ++p) {
                    const T* gr = dy + ((b * OH + ah.out[p]) * OW) * static_cast<int64_t>(C);
                    for (int q = aw.start[iw]; q < aw.start[iw + 1]; ++q) {
                        const double wgt = static_cast<double>(ah.weight[p]) * aw.weight[q];
                        const T* g = gr + static_cast<int64_t>(aw.out[q]) * C;
                        for (int c = 0; c < C; ++c) acc[c] += wgt * g[c];
                    }
                }
                T* d = dx + ((b * H + ih) * W + iw) * static_cast<int64_t>(C);
                for (int c = 0; c < C; ++c) d[c] = (accumulate ? d[c] : T(0)) + static_cast<T>(acc[c]);
            }
        }
    }
}

#define SF_INSTANTIATE(T)                                                             \
    template void upsample_bilinear_forward_ref<T>(const Shape4&, int, const T*, T*); \
    template void upsample_bilinear_backward_ref<T>(const Shape4&, int, const T*, T*, bool);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace kern
