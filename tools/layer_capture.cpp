#include "tools/layer_capture.h"

#include <cuda_runtime.h>

#include <cstring>

#include "runtime/cuda_check.h"
#include "runtime/error.h"

namespace tools {

namespace {

template <class T>
std::vector<T> copy_raw(const rt::Exec& ex, const T* p, size_t n, const char* what) {
    SF_CHECK(p != nullptr || n == 0, "check: '%s' has no storage", what);
    std::vector<T> h(n);
    if (!ex.is_cuda()) {
        if (n) std::memcpy(h.data(), p, n * sizeof(T));
        return h;
    }
    // Synchronise first: an error of a kernel the step enqueued before this point is reported
    // with the scope it was found at.
    const cudaError_t before = cudaStreamSynchronize(ex.stream);
    SF_CHECK(before == cudaSuccess, "check: CUDA error by the time of '%s': %s", what, cudaGetErrorString(before));
    SF_CUDA_CHECK(cudaMemcpyAsync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, ex.stream));
    SF_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
    return h;
}

}  // namespace

std::vector<float> to_host_f32(const rt::Exec& ex, const float* p, size_t n, const char* what) {
    return copy_raw(ex, p, n, what);
}

std::vector<float> to_host_f32(const rt::Exec& ex, const kern::bf16* p, size_t n, const char* what) {
    const std::vector<kern::bf16> raw = copy_raw(ex, p, n, what);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = kern::bf16_to_float(raw[i]);
    return f;
}

template <class T>
CaptureObserver<T>::CaptureObserver(const model::SiderNetT<T>& net) : net_(net), layers_(net.layer_outputs()) {
    for (size_t i = 0; i < layers_.size(); ++i) {
        fwd_[layers_[i].name + " fwd"] = i;
        bwd_[layers_[i].name + " bwd"] = i;
        cap_.layers.push_back({layers_[i].name, {}, {}});
    }
}

template <class T>
void CaptureObserver<T>::force_from(const StepCapture* forced) {
    SF_CHECK(!forced || model::kIsCpu<T>, "check: only the CPU reference can be forced to another backend's values");
    SF_CHECK(!forced || forced->layers.size() == layers_.size(), "check: forced capture of %zu layers for %zu",
             forced ? forced->layers.size() : 0, layers_.size());
    forced_ = forced;
}

namespace {

// Overwrites n host floats at p with `src` (the forced values).
void overwrite(float* p, const std::vector<float>& src, size_t n, const std::string& what) {
    SF_CHECK(p != nullptr && src.size() == n, "check: cannot force '%s' (%zu values for %zu)", what.c_str(), src.size(),
             n);
    std::memcpy(p, src.data(), n * sizeof(float));
}

}  // namespace

template <class T>
void CaptureObserver<T>::begin(const rt::Exec& ex, const char* name) {
    const auto it = bwd_.find(name);
    if (it == bwd_.end()) return;
    const model::LayerOutput<T>& l = layers_[it->second];
    LayerCapture& c = cap_.layers[it->second];
    c.grad_out =
        l.out ? to_host_f32(ex, l.out->g, l.out->numel(), name) : to_host_f32(ex, l.logits->g, l.logits->numel(), name);
    cap_.backward_order.push_back(it->second);
    if constexpr (model::kIsCpu<T>) {
        if (forced_) {
            const std::vector<float>& f = forced_->layers[it->second].grad_out;
            l.out ? overwrite(l.out->g, f, l.out->numel(), name) : overwrite(l.logits->g, f, l.logits->numel(), name);
        }
    }
}

template <class T>
void CaptureObserver<T>::end(const rt::Exec& ex, const char* name) {
    const auto it = fwd_.find(name);
    if (it == fwd_.end()) return;
    const model::LayerOutput<T>& l = layers_[it->second];
    LayerCapture& c = cap_.layers[it->second];
    c.out =
        l.out ? to_host_f32(ex, l.out->v, l.out->numel(), name) : to_host_f32(ex, l.logits->v, l.logits->numel(), name);
    cap_.forward_order.push_back(it->second);
    if constexpr (model::kIsCpu<T>) {
        if (forced_) {
            const std::vector<float>& f = forced_->layers[it->second].out;
            l.out ? overwrite(l.out->v, f, l.out->numel(), name) : overwrite(l.logits->v, f, l.logits->numel(), name);
        }
    }
}

template <class T>
StepCapture CaptureObserver<T>::finish(const rt::Exec& ex, const model::LossTerms& loss) {
    cap_.param_grads = to_host_f32(ex, net_.plan().grad(), net_.table().flat_size, "parameter gradients");
    cap_.loss = loss;
    StepCapture out = std::move(cap_);
    cap_ = StepCapture{};
    for (const model::LayerOutput<T>& l : layers_) cap_.layers.push_back({l.name, {}, {}});
    return out;
}

template class CaptureObserver<float>;
template class CaptureObserver<kern::bf16>;

}  // namespace tools
