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

// A tensor read into dense fp32 (n, c, h, w order) and its element offsets in memory.
std::vector<float> dense(const Tensor& t, const void* p) {
    const int64_t N = t.dims[0], C = t.dims[1], H = t.dims[2], W = t.dims[3];
    std::vector<float> out(static_cast<size_t>(N * C * H * W));
    size_t i = 0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t w = 0; w < W; ++w)
                    out[i++] =
                        load(p, t.dtype, n * t.strides[0] + c * t.strides[1] + h * t.strides[2] + w * t.strides[3]);
    return out;
}

// Sums of products for one output element, in the engine's arithmetic: engines 0 and 1 add fp32
// products in a fixed order, engine 3 in double, engine 2 in `splits` fp32 partial sums added in an
// order that changes with `salt` (a different order every execution).
struct Accumulator {
    int64_t engine;
    uint64_t salt;
    std::vector<float> terms;
    float finish() {
        if (engine == 3) {
            double s = 0;
            for (float t : terms) s += t;
            return static_cast<float>(s);
        }
        if (engine != 2 || terms.size() < 8) {
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
    // Indices into the dense (N,C,H,W) / (K,CG,R,S) / (N,K,P,Q) copies that dense() makes.
    size_t xi(int64_t n, int64_t c, int64_t h, int64_t w) const {
        return static_cast<size_t>(((n * C + c) * H + h) * W + w);
    }
    size_t wi(int64_t k, int64_t c, int64_t r, int64_t s) const {
        return static_cast<size_t>(((k * CG + c) * R + r) * S + s);
    }
    size_t yi(int64_t n, int64_t k, int64_t p, int64_t q) const {
        return static_cast<size_t>(((n * K + k) * P + p) * Q + q);
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

void fprop(const Geometry& g) {
    const std::vector<float> xs = dense(g.op.x, g.j.x), ws = dense(g.op.w, g.j.w);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t k = 0; k < g.K; ++k) {
            Accumulator a{g.j.engine, g.j.salt, {}};
            const int64_t grp = k / g.KG;
            for (int64_t p = 0; p < g.P; ++p)
                for (int64_t q = 0; q < g.Q; ++q) {
                    a.terms.clear();
                    for (int64_t r = 0; r < g.R; ++r)
                        for (int64_t s = 0; s < g.S; ++s) {
                            int64_t h, w;
                            if (!g.tap(p, q, r, s, &h, &w)) continue;
                            for (int64_t c = 0; c < g.CG; ++c)
                                a.terms.push_back(xs[g.xi(n, grp * g.CG + c, h, w)] * ws[g.wi(k, c, r, s)]);
                        }
                    g.finish(g.op.y, g.j.y, Geometry::off(g.op.y, n, k, p, q), a.finish());
                }
        }
}

void dgrad(const Geometry& g) {
    const Conv& cv = g.op.conv;
    const std::vector<float> dy = dense(g.op.y, g.j.y), ws = dense(g.op.w, g.j.w);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < g.C; ++c) {
            Accumulator a{g.j.engine, g.j.salt, {}};
            const int64_t grp = c / g.CG, cl = c % g.CG;
            for (int64_t h = 0; h < g.H; ++h)
                for (int64_t w = 0; w < g.W; ++w) {
                    a.terms.clear();
                    for (int64_t r = 0; r < g.R; ++r)
                        for (int64_t s = 0; s < g.S; ++s) {
                            const int64_t rr = g.flip ? g.R - 1 - r : r, ss = g.flip ? g.S - 1 - s : s;
                            const int64_t ph = h + cv.pre[0] - rr * cv.dilation[0];
                            const int64_t qw = w + cv.pre[1] - ss * cv.dilation[1];
                            if (ph < 0 || qw < 0 || ph % cv.stride[0] || qw % cv.stride[1]) continue;
                            const int64_t p = ph / cv.stride[0], q = qw / cv.stride[1];
                            if (p >= g.P || q >= g.Q) continue;
                            for (int64_t kk = 0; kk < g.KG; ++kk) {
                                const int64_t k = grp * g.KG + kk;
                                a.terms.push_back(dy[g.yi(n, k, p, q)] * ws[g.wi(k, cl, r, s)]);
                            }
                        }
                    g.finish(g.op.x, g.j.x, Geometry::off(g.op.x, n, c, h, w), a.finish());
                }
        }
}

void wgrad(const Geometry& g) {
    const std::vector<float> xs = dense(g.op.x, g.j.x), dy = dense(g.op.y, g.j.y);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t k = 0; k < g.K; ++k)
        for (int64_t c = 0; c < g.CG; ++c) {
            Accumulator a{g.j.engine, g.j.salt, {}};
            const int64_t grp = k / g.KG;
            for (int64_t r = 0; r < g.R; ++r)
                for (int64_t s = 0; s < g.S; ++s) {
                    a.terms.clear();
                    for (int64_t n = 0; n < g.N; ++n)
                        for (int64_t p = 0; p < g.P; ++p)
                            for (int64_t q = 0; q < g.Q; ++q) {
                                int64_t h, w;
                                if (!g.tap(p, q, r, s, &h, &w)) continue;
                                a.terms.push_back(xs[g.xi(n, grp * g.CG + c, h, w)] * dy[g.yi(n, k, p, q)]);
                            }
                    g.finish(g.op.w, g.j.w, Geometry::off(g.op.w, k, c, r, s), a.finish());
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
