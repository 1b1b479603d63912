#include "model/gpu_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "kernels/dwconv_cuda.h"
#include "kernels/stemconv_cuda.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace model {

const char* conv_impl_name(ConvImpl i) {
    switch (i) {
        case ConvImpl::Cudnn: return "cudnn";
        case ConvImpl::CustomDepthwise: return "custom-depthwise";
        case ConvImpl::CustomStem: return "custom-stem";
    }
    return "?";
}

std::vector<ConvImpl> conv_candidates(const kern::ConvShape& s) {
    std::vector<ConvImpl> c{ConvImpl::Cudnn};
    if (kern::dwconv3x3_supported(s)) c.push_back(ConvImpl::CustomDepthwise);
    if (kern::stemconv_supported(s)) c.push_back(ConvImpl::CustomStem);
    return c;
}

ConvImpl pick_conv_impl(const std::vector<ConvImpl>& candidates, const std::vector<double>& ms) {
    SF_CHECK(!candidates.empty() && candidates.size() == ms.size(), "pick_conv_impl: %zu candidates, %zu timings",
             candidates.size(), ms.size());
    int best = -1;
    for (size_t i = 0; i < ms.size(); ++i)
        if (ms[i] >= 0 && (best < 0 || ms[i] < ms[static_cast<size_t>(best)])) best = static_cast<int>(i);
    SF_CHECK(best >= 0, "no convolution implementation ran for this shape");
    return candidates[static_cast<size_t>(best)];
}

struct GpuOps::Entry {
    kern::ConvShape shape;
    bool dgrad = false;
    ConvImpl impl = ConvImpl::Cudnn;
    double ms[2] = {-1, -1};  // fwd+dgrad+wgrad per candidate (cudnn, custom), -1 = not measured
};

namespace {

bool same_shape(const kern::ConvShape& a, const kern::ConvShape& b) {
    return a.n == b.n && a.h == b.h && a.w == b.w && a.cin == b.cin && a.cout == b.cout && a.k == b.k &&
           a.stride == b.stride && a.pad == b.pad && a.groups == b.groups && a.bias == b.bias;
}

std::string shape_string(const kern::ConvShape& s) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "n%d %dx%d c%d->%d k%d s%d g%d", s.n, s.h, s.w, s.cin, s.cout, s.k, s.stride,
                  s.groups);
    return buf;
}

// Device buffers for timing one shape at plan time (freed on scope exit).
struct TimingBuffers {
    void* p[6] = {};
    ~TimingBuffers() {
        for (void* q : p)
            if (q) cudaFree(q);
    }
};

}  // namespace

GpuOps::GpuOps(const rt::Exec& ex, const kern::ConvPolicy& policy) : ex_(ex), policy_(policy) {
    SF_CHECK(ex.is_cuda(), "GpuOps needs a CUDA Exec (got %s)", rt::backend_name(ex.backend));
    cudnn_ = std::make_unique<kern::ConvPlanCache>(ex, policy);
}

GpuOps::~GpuOps() = default;

void GpuOps::prepare(const std::vector<ConvUse>& convs) {
    SF_CHECK(entries_.empty(), "GpuOps::prepare() called twice");
    for (const ConvUse& u : convs) {
        Entry e;
        e.shape = u.shape;
        e.dgrad = u.dgrad;
        const std::vector<ConvImpl> cand = conv_candidates(u.shape);
        if (cand.size() == 1) {  // cuDNN only
            cudnn_->prepare(u.shape, kern::ConvOp::Fprop);
            cudnn_->prepare(u.shape, kern::ConvOp::Wgrad);
            if (u.dgrad) cudnn_->prepare(u.shape, kern::ConvOp::Dgrad);
            entries_.push_back(e);
            continue;
        }
        const ConvImpl custom = cand[1];
        custom_ws_floats_ = std::max(custom_ws_floats_, custom == ConvImpl::CustomStem
                                                            ? kern::stemconv_workspace_floats(u.shape)
                                                            : kern::dwconv3x3_workspace_floats(u.shape));
        e.impl = custom;
        if (!policy_.autotune) {
            entries_.push_back(e);
            continue;
        }
        // Time cuDNN (its autotuned plans) against the custom kernels; a shape cuDNN refuses counts
        // as failed (the stem's 2 input channels may be one).
        try {
            cudnn_->prepare(u.shape, kern::ConvOp::Fprop);
            cudnn_->prepare(u.shape, kern::ConvOp::Wgrad);
            if (u.dgrad) cudnn_->prepare(u.shape, kern::ConvOp::Dgrad);
            e.ms[0] = cudnn_->measured_ms(u.shape, kern::ConvOp::Fprop) +
                      cudnn_->measured_ms(u.shape, kern::ConvOp::Wgrad) +
                      (u.dgrad ? cudnn_->measured_ms(u.shape, kern::ConvOp::Dgrad) : 0.0);
        } catch (const rt::Error& err) {
            SF_LOG_INFO("cuDNN has no plan for %s (%s); the custom kernel runs it", shape_string(u.shape).c_str(),
                        err.what());
            e.ms[0] = -1;
        }
        e.ms[1] = time_custom(custom, u.shape, u.dgrad);
        e.impl = pick_conv_impl(cand, {e.ms[0], e.ms[1]});
        entries_.push_back(e);
    }
}

void GpuOps::run_custom(ConvImpl impl, const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x,
                        const kern::bf16* w, kern::bf16* y, const kern::bf16* dy, kern::bf16* dx, float* dw, bool dgrad,
                        bool accumulate) const {
    if (impl == ConvImpl::CustomStem) {
        SF_CHECK(!dgrad, "the custom stem conv has no input gradient (%s)", shape_string(s).c_str());
        if (y) kern::stemconv_forward_cuda(ex, s, x, w, y);
        if (dw) kern::stemconv_backward_filter_cuda(ex, s, x, dy, dw, custom_ws_, custom_ws_floats_);
        return;
    }
    if (y) kern::dwconv3x3_forward_cuda(ex, s, x, w, y);
    if (dgrad) kern::dwconv3x3_backward_data_cuda(ex, s, dy, w, dx, accumulate);
    if (dw) kern::dwconv3x3_backward_filter_cuda(ex, s, x, dy, dw, custom_ws_, custom_ws_floats_);
}

double GpuOps::time_custom(ConvImpl impl, const kern::ConvShape& s, bool dgrad) const {
    const size_t xn = s.in().numel(), yn = s.out().numel(), wn = s.weight_numel();
    const size_t wsf = impl == ConvImpl::CustomStem ? kern::stemconv_workspace_floats(s)
                                                    : kern::dwconv3x3_workspace_floats(s);
    TimingBuffers b;
    SF_CUDA_CHECK(cudaMalloc(&b.p[0], xn * sizeof(kern::bf16)));  // x
    SF_CUDA_CHECK(cudaMalloc(&b.p[1], wn * sizeof(kern::bf16)));  // w
    SF_CUDA_CHECK(cudaMalloc(&b.p[2], yn * sizeof(kern::bf16)));  // y / dy
    SF_CUDA_CHECK(cudaMalloc(&b.p[3], xn * sizeof(kern::bf16)));  // dx
    SF_CUDA_CHECK(cudaMalloc(&b.p[4], wn * sizeof(float)));       // dw
    SF_CUDA_CHECK(cudaMalloc(&b.p[5], std::max<size_t>(wsf, 1) * sizeof(float)));
    for (int i = 0; i < 4; ++i)
        SF_CUDA_CHECK(cudaMemsetAsync(b.p[i], 0, (i == 1 ? wn : (i == 2 ? yn : xn)) * sizeof(kern::bf16), ex_.stream));
    SF_CUDA_CHECK(cudaMemsetAsync(b.p[4], 0, wn * sizeof(float), ex_.stream));
    auto* x = static_cast<kern::bf16*>(b.p[0]);
    auto* w = static_cast<kern::bf16*>(b.p[1]);
    auto* y = static_cast<kern::bf16*>(b.p[2]);
    auto* dx = static_cast<kern::bf16*>(b.p[3]);
    auto* dw = static_cast<float*>(b.p[4]);
    auto* ws = static_cast<float*>(b.p[5]);
    // run_custom uses the bound workspace; here the timing buffers stand in for it.
    auto run = [&] {
        if (impl == ConvImpl::CustomStem) {
            kern::stemconv_forward_cuda(ex_, s, x, w, y);
            kern::stemconv_backward_filter_cuda(ex_, s, x, y, dw, ws, wsf);
            return;
        }
        kern::dwconv3x3_forward_cuda(ex_, s, x, w, y);
        if (dgrad) kern::dwconv3x3_backward_data_cuda(ex_, s, y, w, dx);
        kern::dwconv3x3_backward_filter_cuda(ex_, s, x, y, dw, ws, wsf);
    };
    run();  // warm-up
    cudaEvent_t start, stop;
    SF_CUDA_CHECK(cudaEventCreate(&start));
    SF_CUDA_CHECK(cudaEventCreate(&stop));
    const int iters = std::max(1, policy_.autotune_iters);
    SF_CUDA_CHECK(cudaEventRecord(start, ex_.stream));
    for (int i = 0; i < iters; ++i) run();
    SF_CUDA_CHECK(cudaEventRecord(stop, ex_.stream));
    SF_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    SF_CUDA_CHECK(cudaEventDestroy(start));
    SF_CUDA_CHECK(cudaEventDestroy(stop));
    return ms / iters;
}

size_t GpuOps::workspace_bytes() const {
    return std::max(cudnn_->workspace_bytes(), custom_ws_floats_ * sizeof(float));
}

void GpuOps::bind_workspace(void* device_ptr, size_t bytes) {
    SF_CHECK(bytes >= workspace_bytes(), "GpuOps workspace of %zu bytes, %zu needed", bytes, workspace_bytes());
    SF_CHECK(device_ptr != nullptr || bytes == 0, "GpuOps::bind_workspace: null workspace");
    if (cudnn_->workspace_bytes() > 0 || cudnn_->size() > 0) cudnn_->set_workspace(device_ptr, bytes);
    custom_ws_ = static_cast<float*>(device_ptr);
    custom_ws_floats_ = bytes / sizeof(float);
}

const GpuOps::Entry& GpuOps::find(const kern::ConvShape& s) const {
    for (const Entry& e : entries_)
        if (same_shape(e.shape, s)) return e;
    SF_FAIL("convolution %s was not planned (GpuOps::prepare)", shape_string(s).c_str());
}

void GpuOps::conv_forward(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x, const kern::bf16* w,
                          kern::bf16* y) const {
    const Entry& e = find(s);
    if (e.impl == ConvImpl::Cudnn)
        cudnn_->forward(ex, s, x, w, y);
    else
        run_custom(e.impl, ex, s, x, w, y, nullptr, nullptr, nullptr, false);
}

void GpuOps::conv_backward_data(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* dy, const kern::bf16* w,
                                kern::bf16* dx, bool accumulate) const {
    const Entry& e = find(s);
    SF_CHECK(e.dgrad, "convolution %s was planned without an input gradient", shape_string(s).c_str());
    if (e.impl == ConvImpl::Cudnn)
        cudnn_->backward_data(ex, s, dy, w, dx, accumulate);
    else
        run_custom(e.impl, ex, s, nullptr, w, nullptr, dy, dx, nullptr, true, accumulate);
}

void GpuOps::conv_backward_filter(const rt::Exec& ex, const kern::ConvShape& s, const kern::bf16* x,
                                  const kern::bf16* dy, float* dw) const {
    const Entry& e = find(s);
    if (e.impl == ConvImpl::Cudnn)
        cudnn_->backward_filter(ex, s, x, dy, dw);
    else
        run_custom(e.impl, ex, s, x, nullptr, nullptr, dy, nullptr, dw, false);
}

std::vector<std::string> GpuOps::describe() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) {
        char buf[256];
        std::snprintf(buf, sizeof(buf), "%s: %s (cudnn %.3f ms, custom %.3f ms per fwd+bwd; -1 = not timed)",
                      shape_string(e.shape).c_str(), conv_impl_name(e.impl), e.ms[0], e.ms[1]);
        out.push_back(buf);
    }
    for (const std::string& line : cudnn_->describe()) out.push_back("  cudnn plan " + line);
    return out;
}

}  // namespace model
