// Planner: the model's memory plan (DESIGN §3), declared by the layers themselves.
// The network calls every layer's declare() twice with the same Planner:
//   1. sizing pass: each call reserves space and records names/shapes, the convolutions the step
//      will run and the scratch each op needs; nothing is allocated;
//   2. finish_sizing() makes one allocation per region (params, buffers, activations, activation
//      grads, workspace) and switches to the binding pass, in which the same calls, in the same
//      order, hand out the final pointers; finish_binding() checks both passes agreed and seals.
// After that no pointer changes and nothing allocates.
// A dry-run planner stops after the sizing pass: it reports the plan (bytes per region, conv
// shapes) without allocating anything, on any machine (batch-size search, CPU tests).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/tensor.h"
#include "model/params.h"
#include "runtime/arena.h"

namespace model {

class GpuOps;  // model/gpu_ops.h: convolution dispatch of the CUDA backend

// An activation tensor and its gradient (NHWC), element type T: float on the CPU reference
// backend, bf16 on CUDA (the heads' logits are float on both). Backward ops accumulate into g;
// the step zeroes every g with one pass over the activation-grad region before a backward.
template <class T>
struct ActT {
    T* v = nullptr;
    T* g = nullptr;
    kern::Shape4 shape;
    size_t numel() const { return shape.numel(); }
};
using Act = ActT<float>;

// A trainable parameter: master weights and gradient (same offsets in the flat ranges) and the
// bf16 working copy the CUDA forward reads.
struct Param {
    float* w = nullptr;
    float* g = nullptr;
    kern::bf16* h = nullptr;
    size_t numel = 0;
};

// A convolution the step runs, recorded by the sizing pass (the CUDA backend builds its plans from
// this list before the arena is sealed).
struct ConvUse {
    kern::ConvShape shape;
    bool dgrad = false;  // the input needs a gradient (false for the first conv)
};

// A layer with a convolution, in execution order (sizing pass), for per-layer reports: its
// profiling scope names are "<name> fwd" and "<name> bwd".
struct LayerUse {
    std::string name;
    kern::ConvShape shape;
    bool batchnorm = true;  // conv -> BN (+ activation); false for the heads' last 1x1
    kern::Act act = kern::Act::None;
    bool input_grad = true;  // the backward computes the input's gradient
};

// Bytes per region of a plan.
struct MemoryPlan {
    size_t params = 0, buffers = 0, activations = 0, activation_grads = 0, workspace = 0;
    size_t total() const { return params + buffers + activations + activation_grads + workspace; }
};

class Planner {
public:
    explicit Planner(rt::MemKind kind, bool dry_run = false);

    bool binding() const { return binding_; }
    bool dry_run() const { return dry_run_; }
    rt::MemKind kind() const { return kind_; }

    // An activation and its gradient. local_grad: the gradient lives only inside one layer's
    // backward (a ConvBN's conv output gradient: written by the BN backward, read by the conv's
    // backward right after), so every such gradient shares one region sized for the largest.
    template <class T>
    ActT<T> act(const kern::Shape4& s, const char* what, bool local_grad = false);
    float* scratch(size_t numel, const char* what);  // fp32 values only (saved statistics, ...)
    template <class T>
    T* scratch_as(size_t numel, const char* what);  // values of type T (the network input, ...)
    Param param(const std::string& name, std::vector<int64_t> torch_shape, bool conv_weight);
    float* buffer(const std::string& name, std::vector<int64_t> torch_shape);
    int64_t* counter(const std::string& name);

    // Sizing pass: records a convolution (deduplicated by shape; dgrad ORed).
    void conv(const kern::ConvShape& s, bool dgrad);
    const std::vector<ConvUse>& convs() const { return convs_; }
    void layer(const LayerUse& l);
    const std::vector<LayerUse>& layers() const { return layers_; }
    // Shared fp32 scratch for reductions (one op at a time on one stream): the region is the max
    // over every request and over extra_workspace_bytes(). Binding pass: returns the region.
    float* workspace(size_t floats);
    size_t workspace_floats() const { return workspace_floats_; }
    void set_extra_workspace_bytes(size_t bytes);  // before finish_sizing (convolution plans)
    // The CUDA backend's conv dispatch, handed to the layers at declare time (null on the CPU).
    void set_gpu_ops(GpuOps* ops) { ops_ = ops; }
    GpuOps* gpu_ops() const { return ops_; }

    void finish_sizing();
    void finish_binding();

    const ParamTable& table() const { return table_; }
    // Flat ranges (valid after finish_sizing): table().flat_size floats each.
    float* master() const { return flat_ + 0 * table_.flat_size; }
    float* grad() const { return flat_ + 1 * table_.flat_size; }
    float* adam_m() const { return flat_ + 2 * table_.flat_size; }
    float* adam_v() const { return flat_ + 3 * table_.flat_size; }
    // bf16 working copy of the master weights (same element offsets), written by the CUDA AdamW
    // and read by the bf16 forward; unused on the CPU backend.
    kern::bf16* working() const { return working_; }
    float* buffers() const { return buffers_; }
    int64_t* counters() const { return counters_; }
    void* act_grad_base() const { return act_grads_; }
    size_t act_grad_bytes() const { return act_grad_bytes_; }
    float* workspace_base() const { return workspace_; }
    size_t activation_bytes() const { return act_bytes_ + act_grad_bytes_; }
    MemoryPlan memory() const;

private:
    size_t reserve(size_t& cursor, size_t bytes);
    void* bind(uint8_t* base, size_t& cursor, size_t bytes);

    rt::MemKind kind_;
    bool dry_run_ = false;
    bool binding_ = false;
    ParamTable table_;
    size_t act_bytes_ = 0, act_grad_bytes_ = 0;
    size_t local_grad_bytes_ = 0;  // the shared layer-local gradient region (start of the grad arena)
    size_t workspace_floats_ = 0, extra_workspace_bytes_ = 0;
    std::vector<ConvUse> convs_;
    std::vector<LayerUse> layers_;
    GpuOps* ops_ = nullptr;
    // binding-pass cursors (must end where the sizing pass ended)
    size_t bind_param_ = 0, bind_act_ = 0, bind_grad_ = 0;
    size_t bind_buffer_idx_ = 0;
    std::unique_ptr<rt::Arena> params_arena_, buffers_arena_, acts_arena_, grads_arena_, ws_arena_;
    float* flat_ = nullptr;
    kern::bf16* working_ = nullptr;
    float* buffers_ = nullptr;
    int64_t* counters_ = nullptr;
    uint8_t* acts_ = nullptr;
    uint8_t* act_grads_ = nullptr;
    float* workspace_ = nullptr;
};

}  // namespace model
