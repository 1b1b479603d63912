// The emulated cuDNN's convolutions (docs/EMULATION.md "cuDNN"): fprop, dgrad and wgrad over any
// strides and the emulated data types, in each catalogue engine's arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>

#include "tests/emu/cudnn_emu.h"

namespace sfemu::cudnn {

namespace {

// ---- the arithmetic ----

float load(const void* base, cudnnDataType_t t, int64_t i) {
    switch (t) {
        case CUDNN_DATA_FLOAT: return static_cast<const float*>(base)[i];
        case CUDNN_DATA_HALF: return __half2float(static_cast<const __half*>(base)[i]);
        default: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    }
}

void store(void* base, cudnnDataType_t t, int64_t i, float v) {
    switch (t) {
        case CUDNN_DATA_FLOAT: static_cast<float*>(base)[i] = v; break;
        case CUDNN_DATA_HALF: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
        default: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    }
}

// A tensor read into dense fp32 in the dimension order `order` names (a permutation of n, c, h, w:
// {0, 1, 2, 3} is NCHW, {0, 2, 3, 1} NHWC), so that each direction's innermost loop reads
// consecutive floats. The layout changes where a value sits, never which values are multiplied or in
// what order they are added.
std::vector<float> dense(const Tensor& t, const void* p, const int (&order)[4] = {0, 1, 2, 3}) {
    std::vector<float> out(static_cast<size_t>(t.dims[0] * t.dims[1] * t.dims[2] * t.dims[3]));
    const int64_t D0 = t.dims[order[0]], D1 = t.dims[order[1]], D2 = t.dims[order[2]], D3 = t.dims[order[3]];
    const int64_t S0 = t.strides[order[0]], S1 = t.strides[order[1]], S2 = t.strides[order[2]],
                  S3 = t.strides[order[3]];
    size_t i = 0;
    for (int64_t a = 0; a < D0; ++a)
        for (int64_t b = 0; b < D1; ++b)
            for (int64_t c = 0; c < D2; ++c)
                for (int64_t d = 0; d < D3; ++d) out[i++] = load(p, t.dtype, a * S0 + b * S1 + c * S2 + d * S3);
    return out;
}
constexpr int kNHWC[4] = {0, 2, 3, 1};  // also (K, C, R, S) as (K, R, S, C)
constexpr int kCRSK[4] = {1, 2, 3, 0};  // a filter (K, C, R, S) as (C, R, S, K)

// Sums of products for one output element, in the engine's arithmetic: engines 0 and 1 add fp32
// products in a fixed order, engine 3 in double, engine 2 in `splits` fp32 partial sums added in an
// order that changes with `salt` (a different order every execution). The products (each one fp32
// multiplication, -ffp-contract=off) arrive in the direction's fixed order through add(); engines
// 0, 1 and 3 sum as they arrive, engine 2 keeps them (its partition needs their count), in storage
// reserved once per thread.
struct Accumulator {
    int64_t engine;
    uint64_t salt;
    std::vector<float> terms;
    float f = 0;
    double d = 0;
    void reset() {
        f = 0;
        d = 0;
        terms.clear();
    }
    void add(float t) {
        if (engine == 3)
            d += t;
        else if (engine == 2)
            terms.push_back(t);
        else
            f += t;
    }
    float finish() const {
        if (engine == 3) return static_cast<float>(d);
        if (engine != 2) return f;
        if (terms.size() < 8) {
            float s = 0;
            for (float t : terms) s += t;
            return s;
        }
        const size_t parts = 4, chunk = (terms.size() + parts - 1) / parts;
        float partial[parts] = {0, 0, 0, 0};
        for (size_t i = 0; i < terms.size(); ++i) partial[i / chunk] += terms[i];
        float s = 0;
        for (size_t k = 0; k < parts; ++k) s += partial[(k + salt) % parts];  // salt: a new order per run
        return s;
    }
};

// What the three directions share: the geometry and the epilogue.
struct Geometry {
    const Job& j;
    const ConvOp& op;
    int64_t N, C, H, W, K, CG, R, S, P, Q, G, KG;
    bool flip;
    explicit Geometry(const Job& job)
        : j(job),
          op(job.op),
          N(op.x.dims[0]),
          C(op.x.dims[1]),
          H(op.x.dims[2]),
          W(op.x.dims[3]),
          K(op.w.dims[0]),
          CG(op.w.dims[1]),
          R(op.w.dims[2]),
          S(op.w.dims[3]),
          P(op.y.dims[2]),
          Q(op.y.dims[3]),
          G(op.groups),
          KG(K / G),
          flip(op.conv.mode == CUDNN_CONVOLUTION) {}
    // Input (h, w) of output (p, q) under filter tap (r, s); false when it falls into the padding.
    bool tap(int64_t p, int64_t q, int64_t r, int64_t s, int64_t* h, int64_t* w) const {
        const Conv& cv = op.conv;
        const int64_t rr = flip ? R - 1 - r : r, ss = flip ? S - 1 - s : s;
        *h = p * cv.stride[0] - cv.pre[0] + rr * cv.dilation[0];
        *w = q * cv.stride[1] - cv.pre[1] + ss * cv.dilation[1];
        return *h >= 0 && *h < H && *w >= 0 && *w < W;
    }
    // An accumulator of this job's engine; engine 2's term storage reserved once per thread (the most
    // terms an output element sums): no allocation per output element.
    Accumulator accumulator(int64_t max_terms) const {
        Accumulator a{j.engine, j.salt, {}};
        if (a.engine == 2) a.terms.reserve(static_cast<size_t>(max_terms));
        return a;
    }
    static int64_t off(const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
        return a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
    }
    // dst = alpha * acc (+ beta * dst, which is not read when beta is 0), one rounding.
    void finish(const Tensor& t, void* base, int64_t o, float acc) const {
        float v = static_cast<float>(op.alpha) * acc;
        if (op.beta != 0) v += static_cast<float>(op.beta) * load(base, t.dtype, o);
        store(base, t.dtype, o, v);
    }
};

// y[n, k, p, q]: the products x[n, grp*CG + c, h, w] * w[k, c, r, s] over taps (r, s) inside the image,
// then c, in that order. x dense NHWC and w dense (K, R, S, C): c innermost reads consecutive floats.
void fprop(const Geometry& g) {
    const std::vector<float> xs = dense(g.op.x, g.j.x, kNHWC), ws = dense(g.op.w, g.j.w, kNHWC);
#pragma omp parallel
    {
        Accumulator a = g.accumulator(g.R * g.S * g.CG);
#pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < g.N; ++n)
            for (int64_t k = 0; k < g.K; ++k) {
                const int64_t grp = k / g.KG;
                for (int64_t p = 0; p < g.P; ++p)
                    for (int64_t q = 0; q < g.Q; ++q) {
                        a.reset();
                        for (int64_t r = 0; r < g.R; ++r)
                            for (int64_t s = 0; s < g.S; ++s) {
                                int64_t h, w;
                                if (!g.tap(p, q, r, s, &h, &w)) continue;
                                const float* xp = xs.data() + ((n * g.H + h) * g.W + w) * g.C + grp * g.CG;
                                const float* wp = ws.data() + ((k * g.R + r) * g.S + s) * g.CG;
                                for (int64_t c = 0; c < g.CG; ++c) a.add(xp[c] * wp[c]);
                            }
                        g.finish(g.op.y, g.j.y, Geometry::off(g.op.y, n, k, p, q), a.finish());
                    }
            }
    }
}

// dx[n, c, h, w]: the products dy[n, k, p, q] * w[k, c % CG, r, s] over taps (r, s) whose (p, q) is an
// output, then k of c's group, in that order. dy dense NHWC and w dense (C, R, S, K): k innermost reads
// consecutive floats.
void dgrad(const Geometry& g) {
    const Conv& cv = g.op.conv;
    const std::vector<float> dy = dense(g.op.y, g.j.y, kNHWC), ws = dense(g.op.w, g.j.w, kCRSK);
#pragma omp parallel
    {
        Accumulator a = g.accumulator(g.R * g.S * g.KG);
#pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < g.N; ++n)
            for (int64_t c = 0; c < g.C; ++c) {
                const int64_t grp = c / g.CG, cl = c % g.CG;
                for (int64_t h = 0; h < g.H; ++h)
                    for (int64_t w = 0; w < g.W; ++w) {
                        a.reset();
                        for (int64_t r = 0; r < g.R; ++r)
                            for (int64_t s = 0; s < g.S; ++s) {
                                const int64_t rr = g.flip ? g.R - 1 - r : r, ss = g.flip ? g.S - 1 - s : s;
                                const int64_t ph = h + cv.pre[0] - rr * cv.dilation[0];
                                const int64_t qw = w + cv.pre[1] - ss * cv.dilation[1];
                                if (ph < 0 || qw < 0 || ph % cv.stride[0] || qw % cv.stride[1]) continue;
                                const int64_t p = ph / cv.stride[0], q = qw / cv.stride[1];
                                if (p >= g.P || q >= g.Q) continue;
                                const float* dp = dy.data() + ((n * g.P + p) * g.Q + q) * g.K + grp * g.KG;
                                const float* wp = ws.data() + ((cl * g.R + r) * g.S + s) * g.K + grp * g.KG;
                                for (int64_t kk = 0; kk < g.KG; ++kk) a.add(dp[kk] * wp[kk]);
                            }
                        g.finish(g.op.x, g.j.x, Geometry::off(g.op.x, n, c, h, w), a.finish());
                    }
            }
    }
}

// dw[k, c, r, s]: the products x[n, grp*CG + c, h, w] * dy[n, k, p, q] over n, p, q (outputs whose tap
// falls inside the image), in that order. Both dense NCHW: q innermost reads consecutive dy (and x at
// the stride).
void wgrad(const Geometry& g) {
    const std::vector<float> xs = dense(g.op.x, g.j.x), dy = dense(g.op.y, g.j.y);
#pragma omp parallel
    {
        Accumulator a = g.accumulator(g.N * g.P * g.Q);
#pragma omp for collapse(2) schedule(static)
        for (int64_t k = 0; k < g.K; ++k)
            for (int64_t c = 0; c < g.CG; ++c) {
                const int64_t grp = k / g.KG;
                for (int64_t r = 0; r < g.R; ++r)
                    for (int64_t s = 0; s < g.S; ++s) {
                        a.reset();
                        // The outputs (p, q) whose tap (r, s) is inside the image: h depends on p only,
                        // w on q only, so the valid q form one range [q0, q1) and w = w0 + q * stride.
                        int64_t h0, w0;
                        g.tap(0, 0, r, s, &h0, &w0);
                        const int64_t sh = g.op.conv.stride[0], sw = g.op.conv.stride[1];
                        int64_t q0 = 0, q1 = g.Q;
                        while (q0 < q1 && w0 + q0 * sw < 0) ++q0;
                        while (q1 > q0 && w0 + (q1 - 1) * sw >= g.W) --q1;
                        for (int64_t n = 0; n < g.N; ++n)
                            for (int64_t p = 0; p < g.P; ++p) {
                                const int64_t h = h0 + p * sh;
                                if (h < 0 || h >= g.H) continue;
                                const int64_t xb = ((n * g.C + grp * g.CG + c) * g.H + h) * g.W + w0;  // + q * sw
                                const float* dp = dy.data() + ((n * g.K + k) * g.P + p) * g.Q;
                                for (int64_t q = q0; q < q1; ++q) a.add(xs[static_cast<size_t>(xb + q * sw)] * dp[q]);
                            }
                        g.finish(g.op.w, g.j.w, Geometry::off(g.op.w, k, c, r, s), a.finish());
                    }
            }
    }
}

}  // namespace

void run_conv(const Job& j) {
    // The engine's scratch: garbage over the whole workspace while it runs.
    if (j.ws && j.ws_bytes > 0) std::memset(j.ws, 0xA5, static_cast<size_t>(j.ws_bytes));
    const Geometry g(j);
    switch (j.op.kind) {
        case OpKind::Fprop: fprop(g); break;
        case OpKind::Dgrad: dgrad(g); break;
        case OpKind::Wgrad: wgrad(g); break;
    }
}

}  // namespace sfemu::cudnn
