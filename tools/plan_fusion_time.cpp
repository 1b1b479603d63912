// cuDNN's BatchNorm fusion graphs timed and checked against the step's unfused passes
// (tools/plan_fusion_time.h).
#include "tools/plan_fusion_time.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "kernels/bf16.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/hash.h"
#include "runtime/stream_timing.h"

namespace tools {

namespace {

constexpr double kEps = 1e-5;

// Device memory freed on scope exit (plan time: plain cudaMalloc).
struct DevMem {
    void* p = nullptr;
    explicit DevMem(size_t bytes) {
        if (bytes > 0) SF_CUDA_CHECK(cudaMalloc(&p, bytes));
    }
    ~DevMem() {
        if (p) cudaFree(p);
    }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
};

// n values of U(lo, hi) rounded to bf16 (as floats), from a counter-based stream.
std::vector<float> uniform_bf16(size_t n, uint64_t seed, float lo, float hi) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        const double u = static_cast<double>(rt::splitmix64(seed * 0x100000001b3ull + i) >> 11) * 0x1.0p-53;
        v[i] = kern::round_bf16(static_cast<float>(lo + (hi - lo) * u));
    }
    return v;
}

void upload_bf16(void* dst, const std::vector<float>& v) {
    std::vector<kern::bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = kern::float_to_bf16(v[i]);
    SF_CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * sizeof(kern::bf16), cudaMemcpyHostToDevice));
}
void upload_f32(void* dst, const std::vector<float>& v) {
    SF_CUDA_CHECK(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
}
std::vector<double> download_bf16(const void* src, size_t n) {
    std::vector<kern::bf16> h(n);
    SF_CUDA_CHECK(cudaMemcpy(h.data(), src, n * sizeof(kern::bf16), cudaMemcpyDeviceToHost));
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = kern::bf16_to_float(h[i]);
    return v;
}
std::vector<double> download_f32(const void* src, size_t n) {
    std::vector<float> h(n);
    SF_CUDA_CHECK(cudaMemcpy(h.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost));
    return std::vector<double>(h.begin(), h.end());
}

}  // namespace

struct FusionTimer::Buffers {
    size_t in_elems, out_elems, w_elems, rows;
    DevMem x, x_act, w, y, y_ref, scale32, bias32, scale16, bias16, sum, sqsum;
    // The reference passes' vectors: apply (zero mean, unit variance: z = x * scale + bias) and
    // statistics (outputs), and the statistics' workspace.
    DevMem zeros_in, ones_in, stat_mean, stat_invstd, stat_rm, stat_rv, bn_ws;
    size_t bn_ws_floats;
    kern::ConvShape pw;     // the shape as the project's 1x1 conv sees it (NHWC: the same memory)
    size_t pw_ws_floats;    // its statistics' workspace (0: not a shape it runs)
    DevMem pw_ws;
    Buffers(const FusionDims& d)
        : in_elems(static_cast<size_t>(d.n * d.c_in * d.h * d.w)),
          out_elems(static_cast<size_t>(d.n * d.c_out * d.h * d.w)),
          w_elems(static_cast<size_t>(d.c_out * d.c_in * d.k * d.k)),
          rows(static_cast<size_t>(d.n * d.h * d.w)),
          x(in_elems * 2), x_act(in_elems * 2), w(w_elems * 2), y(out_elems * 2), y_ref(out_elems * 2),
          scale32(d.c_in * 4), bias32(d.c_in * 4), scale16(d.c_in * 2), bias16(d.c_in * 2), sum(d.c_out * 4),
          sqsum(d.c_out * 4), zeros_in(d.c_in * 4), ones_in(d.c_in * 4), stat_mean(d.c_out * 4),
          stat_invstd(d.c_out * 4), stat_rm(d.c_out * 4), stat_rv(d.c_out * 4),
          bn_ws(kern::bn_act_workspace_floats(rows, static_cast<int>(d.c_out)) * 4),
          bn_ws_floats(kern::bn_act_workspace_floats(rows, static_cast<int>(d.c_out))),
          pw{static_cast<int>(d.n), static_cast<int>(d.h), static_cast<int>(d.w), static_cast<int>(d.c_in),
             static_cast<int>(d.c_out), static_cast<int>(d.k), 1, static_cast<int>((d.k - 1) / 2), 1, false},
          pw_ws_floats(kern::pwconv_supported(pw) ? kern::pwconv_workspace_floats(pw) : 0),
          pw_ws(pw_ws_floats * 4) {}
};

FusionTimer::FusionTimer(const rt::Exec& ex, const FusionDims& d, uint64_t seed) : ex_(ex), d_(d) {
    SF_CHECK(ex.backend == rt::Backend::Cuda && ex.cudnn, "plan --fusion-graphs --time: needs a GPU's cuDNN handle");
    buf_ = std::make_unique<Buffers>(d);
    const size_t ci = static_cast<size_t>(d.c_in), co = static_cast<size_t>(d.c_out);
    upload_bf16(buf_->x.p, uniform_bf16(buf_->in_elems, seed, -1, 1));
    upload_bf16(buf_->w.p, uniform_bf16(buf_->w_elems, seed + 1, -0.2f, 0.2f));
    const std::vector<float> scale = uniform_bf16(ci, seed + 2, 0.5f, 1.5f), bias = uniform_bf16(ci, seed + 3, -0.5f, 0.5f);
    upload_f32(buf_->scale32.p, scale);
    upload_f32(buf_->bias32.p, bias);
    upload_bf16(buf_->scale16.p, scale);
    upload_bf16(buf_->bias16.p, bias);
    upload_f32(buf_->zeros_in.p, std::vector<float>(ci, 0.0f));
    upload_f32(buf_->ones_in.p, std::vector<float>(ci, static_cast<float>(1.0 - kEps)));  // invstd 1
    upload_f32(buf_->stat_rm.p, std::vector<float>(co, 0.0f));
    upload_f32(buf_->stat_rv.p, std::vector<float>(co, 1.0f));
}

FusionTimer::~FusionTimer() = default;

// Executes plan with the shape's buffers and the affine vectors of the graph's type. reference: the
// reference chain (reads x_act, writes y_ref), once, untimed, returns 0; else reads x, writes y, and
// returns the mean ms of kFusionTimedRuns runs after one warm-up. Throws rt::Error with cuDNN's reason
// when the execution is refused.
double FusionTimer::run_ms(const rt::CudnnDesc& plan, int64_t ws, const std::vector<FusionBinding>& b, bool reference,
                           bool bf16_affine) {
    DevMem workspace(static_cast<size_t>(std::max<int64_t>(ws, 0)));
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    for (const FusionBinding& e : b) {
        void* p = nullptr;
        switch (e.role) {
            case FusionRole::X: p = reference ? buf_->x_act.p : buf_->x.p; break;
            case FusionRole::W: p = buf_->w.p; break;
            case FusionRole::Y: p = reference ? buf_->y_ref.p : buf_->y.p; break;
            case FusionRole::Scale: p = bf16_affine ? buf_->scale16.p : buf_->scale32.p; break;
            case FusionRole::Bias: p = bf16_affine ? buf_->bias16.p : buf_->bias32.p; break;
            case FusionRole::Sum: p = buf_->sum.p; break;
            case FusionRole::SqSum: p = buf_->sqsum.p; break;
        }
        uids.push_back(e.uid);
        ptrs.push_back(p);
    }
    const auto execute = [&] {
        std::string why;
        const cudnnStatus_t st = rt::cudnn_try_execute(ex_.cudnn, plan, uids.data(), ptrs.data(),
                                                       static_cast<int>(uids.size()), workspace.p, &why);
        SF_CHECK(st == CUDNN_STATUS_SUCCESS, "cudnnBackendExecute refused the plan: %s", why.c_str());
    };
    if (reference) {
        execute();
        SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
        return 0;
    }
    return rt::stream_mean_ms(ex_.stream, 1, kFusionTimedRuns, execute);
}

double FusionTimer::apply_ms(kern::Act act) {
    Buffers& b = *buf_;
    return rt::stream_mean_ms(ex_.stream, 1, kFusionTimedRuns, [&] {
        kern::bn_act_forward_eval(ex_, act, b.rows, static_cast<int>(d_.c_in), static_cast<kern::bf16*>(b.x.p),
                                  static_cast<float*>(b.scale32.p), static_cast<float*>(b.bias32.p),
                                  static_cast<float*>(b.zeros_in.p), static_cast<float*>(b.ones_in.p), kEps,
                                  static_cast<kern::bf16*>(b.x_act.p));
    });
}

double FusionTimer::stats_ms() {
    Buffers& b = *buf_;
    return rt::stream_mean_ms(ex_.stream, 1, kFusionTimedRuns, [&] {
        kern::bn_stats_train(ex_, b.rows, static_cast<int>(d_.c_out), static_cast<kern::bf16*>(b.y.p),
                             static_cast<float*>(b.stat_mean.p), static_cast<float*>(b.stat_invstd.p),
                             static_cast<float*>(b.stat_rm.p), static_cast<float*>(b.stat_rv.p), 0.1, kEps,
                             static_cast<float*>(b.bn_ws.p), b.bn_ws_floats);
    });
}

nlohmann::json FusionTimer::set_control(rt::CudnnDesc plan, int64_t workspace_bytes, std::vector<FusionBinding> b) {
    try {
        conv_ms_ = run_ms(plan, workspace_bytes, b, false, false);
    } catch (const rt::Error& e) {
        return {{"error", e.what()}};
    }
    control_ = std::move(plan);
    control_ws_ = workspace_bytes;
    control_b_ = std::move(b);
    return {{"ms", conv_ms_}};
}

nlohmann::json FusionTimer::time_fused(const rt::CudnnDesc& plan, int64_t workspace_bytes,
                                       const std::vector<FusionBinding>& bindings, bool prologue, kern::Act act,
                                       bool bf16_affine, bool genstats) {
    if (conv_ms_ < 0) return {{"error", "the shape's control convolution did not run: nothing to compare with"}};
    try {
        Buffers& buf = *buf_;
        // The outputs start as NaN (0xff bytes): a graph that does not write them fails its check.
        SF_CUDA_CHECK(cudaMemsetAsync(buf.y.p, 0xff, buf.out_elems * 2, ex_.stream));
        SF_CUDA_CHECK(cudaMemsetAsync(buf.sum.p, 0xff, static_cast<size_t>(d_.c_out) * 4, ex_.stream));
        SF_CUDA_CHECK(cudaMemsetAsync(buf.sqsum.p, 0xff, static_cast<size_t>(d_.c_out) * 4, ex_.stream));
        const double ms = run_ms(plan, workspace_bytes, bindings, false, bf16_affine);
        nlohmann::json r = {{"ms", ms}};
        nlohmann::json parts = {{"conv_ms", conv_ms_}};
        double unfused = conv_ms_;
        nlohmann::json check = nlohmann::json::object();
        bool ok = true;
        const size_t co = static_cast<size_t>(d_.c_out);
        if (genstats) {
            // The sums the graph wrote against fp64 sums of the y it wrote (before anything else runs).
            const std::vector<double> y = download_bf16(buf.y.p, buf.out_elems);
            const std::vector<double> s = download_f32(buf.sum.p, co), q = download_f32(buf.sqsum.p, co);
            std::vector<double> hs(co, 0.0), hq(co, 0.0), ha(co, 0.0);
            for (size_t i = 0; i < y.size(); ++i) {
                hs[i % co] += y[i];
                hq[i % co] += y[i] * y[i];
                ha[i % co] += std::fabs(y[i]);
            }
            // Largest relative error over the channels; a NaN (an unwritten or non-finite sum) is kept
            // as NaN (JSON null), and fails.
            double es = 0, eq = 0;
            for (size_t c = 0; c < co; ++c) {
                const double e1 = std::fabs(s[c] - hs[c]) / std::max(ha[c], 1e-30);
                const double e2 = std::fabs(q[c] - hq[c]) / std::max(hq[c], 1e-30);
                es = std::isnan(es) || std::isnan(e1) ? NAN : std::max(es, e1);
                eq = std::isnan(eq) || std::isnan(e2) ? NAN : std::max(eq, e2);
            }
            check["sum_rel_err"] = es;
            check["sqsum_rel_err"] = eq;
            ok = ok && es <= 1e-3 && eq <= 1e-3;
            parts["stats_ms"] = stats_ms();
            unfused += parts["stats_ms"].get<double>();
        }
        if (prologue) {
            // y of the fused graph against the conv of the apply pass's output.
            parts["apply_ms"] = apply_ms(act);
            unfused += parts["apply_ms"].get<double>();
            const double rel = y_rel_l2_from_control(download_bf16(buf.y.p, buf.out_elems));
            check["y_rel_l2"] = rel;
            ok = ok && rel <= 1e-2;
        }
        r["unfused_ms"] = unfused;
        r["unfused"] = parts;
        r["speedup"] = ms > 0 ? unfused / ms : 0.0;
        r["check"] = check;
        r["ok"] = ok;
        return r;
    } catch (const rt::Error& e) {
        return {{"error", e.what()}};
    }
}

double FusionTimer::y_rel_l2_from_control(const std::vector<double>& y) {
    SF_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
    run_ms(control_, control_ws_, control_b_, true, false);
    const std::vector<double> ref = download_bf16(buf_->y_ref.p, buf_->out_elems);
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool FusionTimer::pwconv_ok() const { return buf_->pw_ws_floats > 0; }

nlohmann::json FusionTimer::time_custom(bool prologue, kern::Act act, bool stats) {
    if (conv_ms_ < 0) return {{"error", "the shape's control convolution did not run: nothing to compare with"}};
    if (!pwconv_ok()) return {{"error", "pwconv: not a shape the project's 1x1 conv runs: " + buf_->pw.describe()}};
    try {
        Buffers& b = *buf_;
        kern::DwPrologue pro;  // eval mode, mean 0, running variance 1 - eps: the apply pass's z exactly
        pro.act = act;
        pro.gamma = static_cast<const float*>(b.scale32.p);
        pro.beta = static_cast<const float*>(b.bias32.p);
        pro.mean = static_cast<const float*>(b.zeros_in.p);
        pro.invstd = static_cast<const float*>(b.ones_in.p);
        pro.eval = true;
        pro.eps = kEps;
        kern::BnStatsOut st;
        st.save_mean = static_cast<float*>(b.stat_mean.p);
        st.save_invstd = static_cast<float*>(b.stat_invstd.p);
        st.running_mean = static_cast<float*>(b.stat_rm.p);
        st.running_var = static_cast<float*>(b.stat_rv.p);
        st.eps = kEps;
        SF_CUDA_CHECK(cudaMemsetAsync(b.y.p, 0xff, b.out_elems * 2, ex_.stream));
        SF_CUDA_CHECK(cudaMemsetAsync(b.stat_mean.p, 0xff, static_cast<size_t>(d_.c_out) * 4, ex_.stream));
        SF_CUDA_CHECK(cudaMemsetAsync(b.stat_invstd.p, 0xff, static_cast<size_t>(d_.c_out) * 4, ex_.stream));
        const double ms = rt::stream_mean_ms(ex_.stream, 1, kFusionTimedRuns, [&] {
            kern::pwconv_forward_cuda(ex_, b.pw, static_cast<const kern::bf16*>(b.x.p),
                                      static_cast<const kern::bf16*>(b.w.p), static_cast<kern::bf16*>(b.y.p),
                                      prologue ? &pro : nullptr, stats ? &st : nullptr,
                                      static_cast<float*>(b.pw_ws.p), b.pw_ws_floats);
        });
        nlohmann::json r = {{"ms", ms}, {"label", "pwconv"}};
        nlohmann::json parts = {{"conv_ms", conv_ms_}};
        double unfused = conv_ms_;
        nlohmann::json check = nlohmann::json::object();
        bool ok = true;
        const size_t co = static_cast<size_t>(d_.c_out);
        const std::vector<double> y = download_bf16(b.y.p, b.out_elems);
        if (stats) {
            // The statistics it wrote against fp64 two-pass statistics of the y it wrote.
            const std::vector<double> m = download_f32(b.stat_mean.p, co), inv = download_f32(b.stat_invstd.p, co);
            std::vector<double> hm(co, 0.0), hv(co, 0.0);
            for (size_t i = 0; i < y.size(); ++i) hm[i % co] += y[i];
            for (double& v : hm) v /= static_cast<double>(b.rows);
            for (size_t i = 0; i < y.size(); ++i) hv[i % co] += (y[i] - hm[i % co]) * (y[i] - hm[i % co]);
            double em = 0, ei = 0;
            for (size_t c = 0; c < co; ++c) {
                const double var = hv[c] / static_cast<double>(b.rows), hinv = 1.0 / std::sqrt(var + kEps);
                const double e1 = std::fabs(m[c] - hm[c]) / std::sqrt(var + kEps);
                const double e2 = std::fabs(inv[c] - hinv) / hinv;
                em = std::isnan(em) || std::isnan(e1) ? NAN : std::max(em, e1);
                ei = std::isnan(ei) || std::isnan(e2) ? NAN : std::max(ei, e2);
            }
            check["mean_err_in_std"] = em;
            check["invstd_rel_err"] = ei;
            ok = ok && em <= 1e-3 && ei <= 1e-3;
            parts["stats_ms"] = stats_ms();
            unfused += parts["stats_ms"].get<double>();
        }
        // y against the control conv of the same input: the apply pass's output, or x itself.
        if (prologue) {
            parts["apply_ms"] = apply_ms(act);
            unfused += parts["apply_ms"].get<double>();
        } else {
            SF_CUDA_CHECK(cudaMemcpyAsync(b.x_act.p, b.x.p, b.in_elems * 2, cudaMemcpyDeviceToDevice, ex_.stream));
        }
        const double rel = y_rel_l2_from_control(y);
        check["y_rel_l2"] = rel;
        ok = ok && rel <= 1e-2;
        r["unfused_ms"] = unfused;
        r["unfused"] = parts;
        r["speedup"] = ms > 0 ? unfused / ms : 0.0;
        r["check"] = check;
        r["ok"] = ok;
        return r;
    } catch (const rt::Error& e) {
        return {{"error", e.what()}};
    }
}

}  // namespace tools
