// Planner: the model's memory plan (DESIGN §3), declared by the layers themselves.
// The network calls every layer's declare() twice with the same Planner:
//   1. sizing pass: each call reserves space and records names/shapes; nothing is allocated;
//   2. finish_sizing() makes one allocation per region (params, buffers, activations,
//      activation grads) and switches to the binding pass, in which the same calls, in the same
//      order, hand out the final pointers; finish_binding() checks both passes agreed and seals.
// After that no pointer changes and nothing allocates.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/tensor.h"
#include "model/params.h"
#include "runtime/arena.h"

namespace model {

// An activation tensor and its gradient (NHWC). Backward ops accumulate into g; the trainer
// zeroes every g with one pass over the activation-grad region before a backward.
struct Act {
    float* v = nullptr;
    float* g = nullptr;
    kern::Shape4 shape;
    size_t numel() const { return shape.numel(); }
};

// A trainable parameter: master weights and gradient (same offsets in the flat ranges).
struct Param {
    float* w = nullptr;
    float* g = nullptr;
    size_t numel = 0;
};

class Planner {
public:
    explicit Planner(rt::MemKind kind);

    bool binding() const { return binding_; }

    Act act(const kern::Shape4& s, const char* what);
    float* scratch(size_t numel, const char* what);  // values only (saved statistics, ...)
    Param param(const std::string& name, std::vector<int64_t> torch_shape, bool conv_weight);
    float* buffer(const std::string& name, std::vector<int64_t> torch_shape);
    int64_t* counter(const std::string& name);

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
    float* act_grad_base() const { return act_grads_; }
    size_t act_grad_floats() const { return act_grad_floats_; }
    size_t activation_bytes() const;

private:
    size_t reserve_floats(size_t& cursor, size_t n);

    rt::MemKind kind_;
    bool binding_ = false;
    ParamTable table_;
    size_t act_floats_ = 0, act_grad_floats_ = 0;
    // binding-pass cursors (must end where the sizing pass ended)
    size_t bind_param_ = 0, bind_buffer_ = 0, bind_act_ = 0, bind_grad_ = 0;
    size_t bind_buffer_idx_ = 0;
    std::unique_ptr<rt::Arena> params_arena_, buffers_arena_, acts_arena_, grads_arena_;
    float* flat_ = nullptr;
    kern::bf16* working_ = nullptr;
    float* buffers_ = nullptr;
    int64_t* counters_ = nullptr;
    float* acts_ = nullptr;
    float* act_grads_ = nullptr;
};

}  // namespace model
