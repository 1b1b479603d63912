// The flat parameter table: every trainable parameter and every buffer of the model, in the
// order and with the names of the original PyTorch state_dict (docs/MODEL.md).
// Parameters live in one flat range per kind (master | grad | adam m | adam v, fp32, and a bf16
// working copy), identical element offsets, so zeroing, the global grad norm and AdamW are single passes over one range.
// Conv weights are stored KRSC (Cout, kh, kw, Cin/g); everything else as in PyTorch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace model {

struct ParamInfo {
    std::string name;                  // state_dict key, e.g. "stem.conv1.conv.weight"
    std::vector<int64_t> torch_shape;  // PyTorch shape: OIHW for conv weights
    size_t numel = 0;
    size_t offset = 0;         // element offset into the flat ranges
    bool conv_weight = false;  // stored KRSC; torch_shape = (Cout, Cin/g, kh, kw)
};

struct BufferInfo {
    std::string name;                  // e.g. "stem.conv1.bn.running_mean"
    std::vector<int64_t> torch_shape;  // (C,) or () for num_batches_tracked
    size_t numel = 0;
    size_t offset = 0;     // float offset (running stats) or counter index
    bool counter = false;  // num_batches_tracked: int64 counter
};

// Elements between parameter starts are padded to this multiple (64-byte alignment for vector
// access on the GPU); padding elements stay zero and never change under AdamW.
constexpr size_t kParamAlign = 16;

struct ParamTable {
    std::vector<ParamInfo> params;
    std::vector<BufferInfo> buffers;
    size_t flat_size = 0;      // floats per flat range, padding included
    size_t buffer_floats = 0;  // running statistics
    size_t counters = 0;       // num_batches_tracked entries

    size_t num_parameters() const;  // sum of numel (the model's parameter count)
    const ParamInfo* find(const std::string& name) const;
};

// Index of PyTorch-contiguous element `torch_index` inside our storage of the parameter.
size_t storage_index(const ParamInfo& p, size_t torch_index);
// Whole-tensor conversions between our storage and PyTorch layout.
void to_torch_layout(const ParamInfo& p, const float* ours, float* torch);
void from_torch_layout(const ParamInfo& p, const float* torch, float* ours);

}  // namespace model
