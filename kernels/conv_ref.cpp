// CPU reference convolution: NHWC activations, KRSC filters (Cout, k, k, Cin/groups), groups,
// stride, symmetric zero padding, optional bias; float (the model's CPU backend) and double (finite
// differences). Clear first, but the fp32 CPU backend runs the whole network through it, so the loops
// are ordered for contiguous, vectorisable inner loops:
//  - forward and dgrad are gathers. One thread owns a destination row (output row for forward, input
//    row for dgrad) and, per pixel and tap by tap, adds a small matrix-vector product over channels
//    (fp32 accumulation in fp32, like cuDNN). Nothing races, and every pixel's sum has the same order
//    whatever the thread count. Blocks of 4 neighbouring pixels share each weight load.
//  - wgrad is a long sum over N*P*Q. Output rows are split into chunks whose count depends only on
//    the shape (never on the thread count); each chunk keeps double partial sums, added in chunk order
//    at the end. Within a chunk, products are summed in T over runs of at most kRunMax pixels held in
//    registers (a 4x8 tile, as in a GEMM micro-kernel) and each run is then added in double.
#include <algorithm>
#include <vector>

#include "kernels/conv.h"
#include "runtime/error.h"

namespace kern {

std::string ConvShape::describe() const {
    return rt::format("n%d %dx%d c%d->%d k%d s%d g%d", n, h, w, cin, cout, k, stride, groups);
}

void ConvShape::validate() const {
    SF_CHECK(n > 0 && h > 0 && w > 0, "conv: input dims must be positive, got n=%d h=%d w=%d", n, h, w);
    SF_CHECK(cin > 0 && cout > 0, "conv: channel counts must be positive, got cin=%d cout=%d", cin, cout);
    SF_CHECK(k > 0, "conv: kernel size must be positive, got k=%d", k);
    SF_CHECK(stride > 0, "conv: stride must be positive, got stride=%d", stride);
    SF_CHECK(pad >= 0, "conv: padding must be non-negative, got pad=%d", pad);
    SF_CHECK(groups > 0, "conv: groups must be positive, got groups=%d", groups);
    SF_CHECK(cin % groups == 0, "conv: groups=%d does not divide cin=%d", groups, cin);
    SF_CHECK(cout % groups == 0, "conv: groups=%d does not divide cout=%d", groups, cout);
    SF_CHECK(h + 2 * pad >= k && w + 2 * pad >= k, "conv: kernel k=%d larger than padded input %dx%d (pad=%d)", k,
             h + 2 * pad, w + 2 * pad, pad);
}

namespace {

constexpr int kMinAxpy = 8;       // below this many destination channels per group, use dot products
constexpr int kWgradChunks = 16;  // most chunks of wgrad's N*P rows (never the thread count) ...
constexpr int kChunkPixels = 64;  // ... and at least this many output pixels per chunk
constexpr int kRunMax = 32;       // pixels summed in T before adding into double (wgrad)
constexpr int kTileA = 4, kTileB = 8;
constexpr int kPixBlock = 4;  // pixels per weight load in forward / dgrad

// Filter element (ko, tap, ci) of group g in a tap-major layout [tap][g][outer][inner], where inner
// is ci ("KC", per tap a (K x C) matrix) or ko ("CK"). M = Cout/groups, J = Cin/groups.
inline size_t tap_major(int tap, int g, int ko, int ci, int G, int M, int J, bool inner_ci) {
    return (static_cast<size_t>(tap) * G + g) * M * J +
           (inner_ci ? static_cast<size_t>(ko) * J + ci : static_cast<size_t>(ci) * M + ko);
}

// Per-tap weight matrices for a pixel gather acc(G*U) += W_tap * src(G*V) (per group):
//  Axpy: stored [tap][g][v][u]; loops over v, inner loop over the U destination channels.
//  Dot:  stored [tap][g][u][v]; one dot product over V per destination channel (small U).
//  Depthwise (U == V == 1): stored [tap][c]; one elementwise product over all channels.
// Forward: U = Cout/groups, V = Cin/groups. Dgrad: U = Cin/groups, V = Cout/groups.
template <class T>
struct TapMix {
    enum Form { Depthwise, Axpy, Dot };
    Form form;
    int G, U, V;
    std::vector<T> mats;

    TapMix(const ConvShape& s, const T* w, bool forward) : G(s.groups) {
        const int M = s.cout / G, J = s.cin / G, kk = s.k * s.k;
        U = forward ? M : J;
        V = forward ? J : M;
        form = (U == 1 && V == 1) ? Depthwise : (U >= kMinAxpy ? Axpy : Dot);
        // Inner index of the stored matrices: u for Axpy, v for Dot; ci when that is the input side.
        const bool inner_ci = (form == Axpy) != forward;
        mats.resize(s.weight_numel());
        for (int g = 0; g < G; ++g)
            for (int ko = 0; ko < M; ++ko)
                for (int tap = 0; tap < kk; ++tap)
                    for (int ci = 0; ci < J; ++ci)
                        mats[tap_major(tap, g, ko, ci, G, M, J, inner_ci)] =
                            w[((static_cast<size_t>(g) * M + ko) * kk + tap) * J + ci];
    }

    // acc[i] += W_tap * src[i] for the nb <= kPixBlock pixels of a block. Axpy shares each weight load
    // across the block (the per-tap matrices do not fit in L1); the other forms go pixel by pixel.
    // Every pixel sees the same arithmetic whatever block it is in.
    void apply(T* const* acc, const T* const* src, int nb, int tap) const {
        const T* mt = mats.data() + static_cast<size_t>(tap) * G * U * V;
        if (form == Depthwise) {
            for (int i = 0; i < nb; ++i) {
                T* __restrict a = acc[i];
                const T* __restrict x = src[i];
#pragma omp simd
                for (int c = 0; c < G; ++c) a[c] += x[c] * mt[c];
            }
            return;
        }
        for (int g = 0; g < G; ++g) {
            const size_t au = static_cast<size_t>(g) * U, sv = static_cast<size_t>(g) * V;
            const T* m = mt + au * V;
            if (form == Dot) {
                for (int i = 0; i < nb; ++i) dot_group(acc[i] + au, src[i] + sv, m);
                continue;
            }
            T* a[kPixBlock];
            const T* x[kPixBlock];
            for (int i = 0; i < nb; ++i) a[i] = acc[i] + au, x[i] = src[i] + sv;
            switch (nb) {
                case 4: axpy_pixels<4>(a, x, m); break;
                case 3: axpy_pixels<3>(a, x, m); break;
                case 2: axpy_pixels<2>(a, x, m); break;
                default: axpy_pixels<1>(a, x, m); break;
            }
        }
    }

    // a[i][u] += sum_v x[i][v] * m[v][u] for i < NB: four v per pass (acc loaded and stored a quarter
    // as often), NB pixels per weight load.
    template <int NB>
    void axpy_pixels(T* const* a, const T* const* x, const T* __restrict m) const {
        int v = 0;
        for (; v + 4 <= V; v += 4) {
            T sc[NB][4];
            for (int i = 0; i < NB; ++i)
                for (int j = 0; j < 4; ++j) sc[i][j] = x[i][v + j];
            const T *m0 = m + static_cast<size_t>(v) * U, *m1 = m0 + U, *m2 = m1 + U, *m3 = m2 + U;
#pragma omp simd
            for (int u = 0; u < U; ++u) {
                const T w0 = m0[u], w1 = m1[u], w2 = m2[u], w3 = m3[u];
                for (int i = 0; i < NB; ++i)
                    a[i][u] += (sc[i][0] * w0 + sc[i][1] * w1) + (sc[i][2] * w2 + sc[i][3] * w3);
            }
        }
        for (; v < V; ++v) {
            T sc[NB];
            for (int i = 0; i < NB; ++i) sc[i] = x[i][v];
            const T* m0 = m + static_cast<size_t>(v) * U;
#pragma omp simd
            for (int u = 0; u < U; ++u) {
                const T w0 = m0[u];
                for (int i = 0; i < NB; ++i) a[i][u] += sc[i] * w0;
            }
        }
    }

    // acc[u] += sum_v src[v] * m[u][v]
    void dot_group(T* __restrict acc, const T* __restrict src, const T* __restrict m) const {
        for (int u = 0; u < U; ++u) {
            const T* mu = m + static_cast<size_t>(u) * V;
            T sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int v = 0; v < V; ++v) sum += src[v] * mu[v];
            acc[u] += sum;
        }
    }
};

// Output columns q whose tap column kc lands inside the input: [lo, hi).
inline void valid_q(const ConvShape& s, int kc, int* lo, int* hi) {
    const int first = s.pad - kc;  // q*stride >= pad - kc
    *lo = first <= 0 ? 0 : (first + s.stride - 1) / s.stride;
    const int last = s.w - 1 + s.pad - kc;  // q*stride <= w - 1 + pad - kc
    *hi = last < 0 ? 0 : std::min(s.q(), last / s.stride + 1);
    *hi = std::max(*hi, *lo);
}

// part[u][v] (row stride ldp) += sum_i a_i[u] * b_i[v] over count pixels, a_i = a + i*as, b_i = b + i*bs.
// A full kTileA x kTileB tile stays in registers across the run; edge tiles take the generic loop.
template <class T>
void outer_run_full(double* part, size_t ldp, const T* a, size_t as, const T* b, size_t bs, int count) {
    T t[kTileA][kTileB] = {};
    for (int i = 0; i < count; ++i) {
        const T* ai = a + i * as;
        const T* bi = b + i * bs;
        for (int u = 0; u < kTileA; ++u)
            for (int v = 0; v < kTileB; ++v) t[u][v] += ai[u] * bi[v];
    }
    for (int u = 0; u < kTileA; ++u)
        for (int v = 0; v < kTileB; ++v) part[u * ldp + v] += static_cast<double>(t[u][v]);
}

template <class T>
void outer_run(double* part, size_t ldp, const T* a, size_t as, int na, const T* b, size_t bs, int nb, int count) {
    if (na == kTileA && nb == kTileB) return outer_run_full(part, ldp, a, as, b, bs, count);
    T t[kTileA][kTileB] = {};
    for (int i = 0; i < count; ++i) {
        const T* ai = a + i * as;
        const T* bi = b + i * bs;
        for (int u = 0; u < na; ++u)
            for (int v = 0; v < nb; ++v) t[u][v] += ai[u] * bi[v];
    }
    for (int u = 0; u < na; ++u)
        for (int v = 0; v < nb; ++v) part[u * ldp + v] += static_cast<double>(t[u][v]);
}

// part[c] += sum_i dy_i[c] * x_i[c] over count pixels (depthwise wgrad, one tap).
template <class T>
void depthwise_run(double* part, const T* dy, size_t dys, const T* x, size_t xs, int C, int count) {
    for (int c0 = 0; c0 < C; c0 += 2 * kTileB) {
        const int nc = std::min(2 * kTileB, C - c0);
        T t[2 * kTileB] = {};
        for (int i = 0; i < count; ++i) {
            const T* di = dy + i * dys + c0;
            const T* xi = x + i * xs + c0;
            for (int c = 0; c < nc; ++c) t[c] += di[c] * xi[c];
        }
        for (int c = 0; c < nc; ++c) part[c0 + c] += static_cast<double>(t[c]);
    }
}

}  // namespace

template <class T>
void conv_forward_ref(const ConvShape& s, const T* x, const T* w, const T* b, T* y) {
    s.validate();
    SF_CHECK(x && w && y, "conv_forward_ref: null tensor");
    SF_CHECK(!s.bias || b, "conv_forward_ref: shape has a bias but b is null");
    const TapMix<T> mix(s, w, /*forward=*/true);
    const int P = s.p(), Q = s.q();
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s.n; ++n)
        for (int p = 0; p < P; ++p) {
            T* yrow = y + (static_cast<size_t>(n) * P + p) * Q * s.cout;
            for (size_t i = 0; i < static_cast<size_t>(Q) * s.cout; ++i) yrow[i] = b ? b[i % s.cout] : T(0);
            // Blocks of kPixBlock output pixels along the row; per tap, the pixels whose input is inside.
            for (int q0 = 0; q0 < Q; q0 += kPixBlock) {
                for (int kr = 0; kr < s.k; ++kr) {
                    const int h = p * s.stride - s.pad + kr;
                    if (h < 0 || h >= s.h) continue;
                    const T* xrow = x + (static_cast<size_t>(n) * s.h + h) * s.w * s.cin;
                    for (int kc = 0; kc < s.k; ++kc) {
                        T* acc[kPixBlock];
                        const T* src[kPixBlock];
                        int nb = 0;
                        for (int q = q0; q < std::min(Q, q0 + kPixBlock); ++q) {
                            const int wi = q * s.stride - s.pad + kc;
                            if (wi < 0 || wi >= s.w) continue;
                            acc[nb] = yrow + static_cast<size_t>(q) * s.cout;
                            src[nb++] = xrow + static_cast<size_t>(wi) * s.cin;
                        }
                        if (nb) mix.apply(acc, src, nb, kr * s.k + kc);
                    }
                }
            }
        }
}

template <class T>
void conv_backward_data_ref(const ConvShape& s, const T* dy, const T* w, T* dx, bool accumulate) {
    s.validate();
    SF_CHECK(dy && w && dx, "conv_backward_data_ref: null tensor");
    const TapMix<T> mix(s, w, /*forward=*/false);
    const int P = s.p(), Q = s.q();
#pragma omp parallel
    {
        std::vector<T> buf(static_cast<size_t>(s.w) * s.cin);  // this input row's sums, added to dx at the end
#pragma omp for collapse(2) schedule(static)
        for (int n = 0; n < s.n; ++n)
            for (int h = 0; h < s.h; ++h) {
                std::fill(buf.begin(), buf.end(), T(0));
                // Output pixel (p, q) reads input (h, wi) through tap (kr, kc) when
                // p*stride - pad + kr == h and q*stride - pad + kc == wi.
                for (int w0 = 0; w0 < s.w; w0 += kPixBlock) {
                    for (int kr = 0; kr < s.k; ++kr) {
                        const int ph = h + s.pad - kr;
                        if (ph < 0 || ph % s.stride != 0 || ph / s.stride >= P) continue;
                        const T* dyrow = dy + (static_cast<size_t>(n) * P + ph / s.stride) * Q * s.cout;
                        for (int kc = 0; kc < s.k; ++kc) {
                            T* acc[kPixBlock];
                            const T* src[kPixBlock];
                            int nb = 0;
                            for (int wi = w0; wi < std::min(s.w, w0 + kPixBlock); ++wi) {
                                const int qw = wi + s.pad - kc;
                                if (qw < 0 || qw % s.stride != 0 || qw / s.stride >= Q) continue;
                                acc[nb] = buf.data() + static_cast<size_t>(wi) * s.cin;
                                src[nb++] = dyrow + static_cast<size_t>(qw / s.stride) * s.cout;
                            }
                            if (nb) mix.apply(acc, src, nb, kr * s.k + kc);
                        }
                    }
                }
                T* d = dx + (static_cast<size_t>(n) * s.h + h) * s.w * s.cin;
                for (size_t i = 0; i < buf.size(); ++i) d[i] = (accumulate ? d[i] : T(0)) + buf[i];
            }
    }
}

namespace {

// Adds one output row's contribution (n, p) to a chunk's double partials: part_w in the tap-major
// layout with inner index ci when inner_ci (else ko), part_b per output channel (or null).
template <class T>
void wgrad_row(const ConvShape& s, const T* x, const T* dy, int n, int p, bool inner_ci, double* part_w,
               double* part_b) {
    const int G = s.groups, M = s.cout / G, J = s.cin / G, Q = s.q();
    const bool depthwise = M == 1 && J == 1;
    const T* dyrow = dy + (static_cast<size_t>(n) * s.p() + p) * Q * s.cout;
    if (part_b)
        for (int q = 0; q < Q; ++q)
            for (int c = 0; c < s.cout; ++c)
                part_b[c] += static_cast<double>(dyrow[static_cast<size_t>(q) * s.cout + c]);
    for (int kr = 0; kr < s.k; ++kr) {
        const int h = p * s.stride - s.pad + kr;
        if (h < 0 || h >= s.h) continue;
        for (int kc = 0; kc < s.k; ++kc) {
            int qlo, qhi;
            valid_q(s, kc, &qlo, &qhi);
            if (qlo >= qhi) continue;
            const T* xq = x + ((static_cast<size_t>(n) * s.h + h) * s.w + (qlo * s.stride - s.pad + kc)) * s.cin;
            const T* dq = dyrow + static_cast<size_t>(qlo) * s.cout;
            const size_t xs = static_cast<size_t>(s.stride) * s.cin, ds = s.cout;
            double* pt = part_w + static_cast<size_t>(kr * s.k + kc) * G * M * J;
            for (int q0 = qlo; q0 < qhi; q0 += kRunMax) {
                const int cnt = std::min(kRunMax, qhi - q0);
                const T* xr = xq + static_cast<size_t>(q0 - qlo) * xs;
                const T* dr = dq + static_cast<size_t>(q0 - qlo) * ds;
                if (depthwise) {
                    depthwise_run(pt, dr, ds, xr, xs, G, cnt);
                    continue;
                }
                // Tile rows a: the outer index (ko when inner_ci), columns b: the inner index.
                const int A = inner_ci ? M : J, B = inner_ci ? J : M;
                for (int g = 0; g < G; ++g) {
                    const T* ag = inner_ci ? dr + static_cast<size_t>(g) * M : xr + static_cast<size_t>(g) * J;
                    const T* bg = inner_ci ? xr + static_cast<size_t>(g) * J : dr + static_cast<size_t>(g) * M;
                    const size_t as = inner_ci ? ds : xs, bs = inner_ci ? xs : ds;
                    double* pg = pt + static_cast<size_t>(g) * M * J;
                    for (int a0 = 0; a0 < A; a0 += kTileA)
                        for (int b0 = 0; b0 < B; b0 += kTileB)
                            outer_run(pg + static_cast<size_t>(a0) * B + b0, B, ag + a0, as, std::min(kTileA, A - a0),
                                      bg + b0, bs, std::min(kTileB, B - b0), cnt);
                }
            }
        }
    }
}

}  // namespace

template <class T>
void conv_backward_filter_ref(const ConvShape& s, const T* x, const T* dy, T* dw, T* db) {
    s.validate();
    SF_CHECK(x && dy && dw, "conv_backward_filter_ref: null tensor");
    const int G = s.groups, M = s.cout / G, J = s.cin / G, kk = s.k * s.k;
    const bool inner_ci = J >= M;
    const size_t wn = s.weight_numel();
    const int rows = s.n * s.p();
    // Small layers get fewer chunks: each chunk zeroes and reduces a full double copy of dw.
    const size_t pixels = static_cast<size_t>(rows) * s.q();
    const size_t by_pixels = std::max<size_t>(1, pixels / kChunkPixels);
    const int chunks = static_cast<int>(std::min<size_t>(std::min(kWgradChunks, rows), by_pixels));
    const size_t bn = db ? static_cast<size_t>(s.cout) : 0;
    std::vector<double> part(static_cast<size_t>(chunks) * (wn + bn), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int ch = 0; ch < chunks; ++ch) {
        double* pw = part.data() + static_cast<size_t>(ch) * (wn + bn);
        const int lo = static_cast<int>(static_cast<long long>(rows) * ch / chunks);
        const int hi = static_cast<int>(static_cast<long long>(rows) * (ch + 1) / chunks);
        for (int row = lo; row < hi; ++row)
            wgrad_row(s, x, dy, row / s.p(), row % s.p(), inner_ci, pw, db ? pw + wn : nullptr);
    }
    // Chunk partials are added in chunk order, so the result is independent of the thread count.
#pragma omp parallel for schedule(static)
    for (int co = 0; co < s.cout; ++co) {
        const int g = co / M, ko = co % M;
        for (int tap = 0; tap < kk; ++tap)
            for (int ci = 0; ci < J; ++ci) {
                const size_t src = tap_major(tap, g, ko, ci, G, M, J, inner_ci);
                double sum = 0;
                for (int ch = 0; ch < chunks; ++ch) sum += part[static_cast<size_t>(ch) * (wn + bn) + src];
                dw[(static_cast<size_t>(co) * kk + tap) * J + ci] += static_cast<T>(sum);
            }
        if (db) {
            double sum = 0;
            for (int ch = 0; ch < chunks; ++ch) sum += part[static_cast<size_t>(ch) * (wn + bn) + wn + co];
            db[co] += static_cast<T>(sum);
        }
    }
}

template void conv_forward_ref<float>(const ConvShape&, const float*, const float*, const float*, float*);
template void conv_forward_ref<double>(const ConvShape&, const double*, const double*, const double*, double*);
template void conv_backward_data_ref<float>(const ConvShape&, const float*, const float*, float*, bool);
template void conv_backward_data_ref<double>(const ConvShape&, const double*, const double*, double*, bool);
template void conv_backward_filter_ref<float>(const ConvShape&, const float*, const float*, float*, float*);
template void conv_backward_filter_ref<double>(const ConvShape&, const double*, const double*, double*, double*);

}  // namespace kern
