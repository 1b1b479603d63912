// Captures what one eager micro-step leaves behind per layer (tools/layer_check.h StepCapture),
// on either backend, through the profiling scopes (runtime/profile.h): at "<layer> fwd" end the
// layer's output is copied to the host, at "<layer> bwd" begin its output's gradient (complete
// then: every consumer's backward has run, and the layer's own backward has not yet reused the
// region). Gradient regions may be shared between layers whose lifetimes do not overlap, so each
// is copied at the one moment it is known to hold this layer's values. A diagnostic: every copy
// synchronises the stream; it runs with graphs off and never inside a training run.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/bf16.h"
#include "model/net.h"
#include "runtime/profile.h"
#include "tools/layer_check.h"

namespace tools {

// n elements of a network tensor as host fp32: a host copy on the CPU backend; on CUDA a copy on
// ex.stream, synchronised (a kernel error of the step surfaces here, named by `what`).
std::vector<float> to_host_f32(const rt::Exec& ex, const float* p, size_t n, const char* what);
std::vector<float> to_host_f32(const rt::Exec& ex, const kern::bf16* p, size_t n, const char* what);

template <class T>
class CaptureObserver : public rt::ScopeObserver {
public:
    explicit CaptureObserver(const model::SiderNetT<T>& net);
    // Isolated comparison (CPU backend only): after copying its own value, each layer's output
    // (at "<layer> fwd" end) and output gradient (at "<layer> bwd" begin) is overwritten with
    // `forced`'s, so every later layer computes from the checked backend's values and each
    // captured tensor differs from `forced` only by what its own layer does.
    void force_from(const StepCapture* forced);
    void begin(const rt::Exec& ex, const char* name) override;
    void end(const rt::Exec& ex, const char* name) override;
    // After the micro-step (its backward done): adds the flat parameter gradients and the loss
    // terms, and hands the capture over.
    StepCapture finish(const rt::Exec& ex, const model::LossTerms& loss);

private:
    const model::SiderNetT<T>& net_;
    std::vector<model::LayerOutput<T>> layers_;
    std::unordered_map<std::string, size_t> fwd_, bwd_;  // scope name -> layer index
    StepCapture cap_;
    const StepCapture* forced_ = nullptr;
};

extern template class CaptureObserver<float>;
extern template class CaptureObserver<kern::bf16>;

}  // namespace tools
