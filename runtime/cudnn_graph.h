// cuDNN 9 graph (backend descriptor) API, used directly: cudnn-frontend is not a dependency of this
// project (docs/CONV_CUDNN.md says why). This file is generic: descriptors, tensors, convolution
// descriptors, operation graphs, heuristics, execution plans and variant packs; it knows no model.
//
//   CudnnDesc           owns one cudnnBackendDescriptor_t (create / set / get / finalize / destroy);
//                       every failed call throws rt::Error naming the call, the attribute and cuDNN's
//                       status plus its last error string.
//   cudnn_tensor        tensor descriptor from logical dims (N, C, spatial...) and element strides,
//                       unique id, byte alignment of the base pointer, virtual flag.
//   cudnn_engine_configs  engine configurations proposed by the heuristics (mode A, then the fallback
//                       list), each with its engine id, numerical / behaviour notes and knob choices.
//   cudnn_try_plan      execution plan of one engine configuration (false + reason if unsupported).
//   cudnn_execute       variant pack (unique ids -> device pointers, workspace) + cudnnBackendExecute
//                       on the handle's stream. No device allocation, no synchronisation.
//   CudnnTarget         what graphs, heuristics and plans are built for: a cuDNN handle (the device
//                       it was created on), or a device property descriptor (cuDNN >= 9.8) read from
//                       the JSON a GPU wrote (cudnn_device_prop_json): plans built without a device,
//                       with the real library, for the GPU it describes (docs/CONV_CUDNN.md).
//
// "try" functions return false / a status for what cuDNN may legitimately refuse (an operation or an
// engine that does not support a graph); everything else is a programming error and throws.
// Include only from files that talk to cuDNN (it pulls in cudnn.h through runtime/cuda_check.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda_check.h"

namespace rt {

// "CUDNN_STATUS_NOT_SUPPORTED_SHAPE: <cuDNN's last error string>" (the string part only if non-empty).
std::string cudnn_status_text(cudnnStatus_t s);

class CudnnDesc {
public:
    CudnnDesc() = default;
    explicit CudnnDesc(cudnnBackendDescriptorType_t type);  // cudnnBackendCreateDescriptor, checked
    ~CudnnDesc();                                           // destroys; logs (never throws) on failure
    CudnnDesc(CudnnDesc&& o) noexcept;
    CudnnDesc& operator=(CudnnDesc&& o) noexcept;
    CudnnDesc(const CudnnDesc&) = delete;
    CudnnDesc& operator=(const CudnnDesc&) = delete;

    cudnnBackendDescriptor_t get() const { return d_; }
    cudnnBackendDescriptorType_t type() const { return type_; }
    bool valid() const { return d_ != nullptr; }
    bool finalized() const { return finalized_; }
    // For descriptors cuDNN finalized itself (engine configurations returned by the heuristics).
    void assume_finalized() { finalized_ = d_ != nullptr; }

    // cudnnBackendSetAttribute, checked. `count` elements of `atype` at `values`.
    CudnnDesc& set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t atype, int64_t count, const void* values);
    CudnnDesc& set_i64(cudnnBackendAttributeName_t a, int64_t v);
    CudnnDesc& set_i64s(cudnnBackendAttributeName_t a, const std::vector<int64_t>& v);
    CudnnDesc& set_float(cudnnBackendAttributeName_t a, float v);
    CudnnDesc& set_bool(cudnnBackendAttributeName_t a, bool v);
    CudnnDesc& set_data_type(cudnnBackendAttributeName_t a, cudnnDataType_t v);
    CudnnDesc& set_handle(cudnnBackendAttributeName_t a, cudnnHandle_t h);
    CudnnDesc& set_desc(cudnnBackendAttributeName_t a, const CudnnDesc& d);
    CudnnDesc& set_descs(cudnnBackendAttributeName_t a, const std::vector<cudnnBackendDescriptor_t>& ds);

    void finalize();  // checked
    // cudnnBackendFinalize without throwing; on failure *why (if given) receives cudnn_status_text.
    cudnnStatus_t try_finalize(std::string* why = nullptr);

    // cudnnBackendGetAttribute, checked: up to `max_count` elements into `out`; returns the count
    // cuDNN reports (may exceed max_count when the attribute holds more).
    int64_t get(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t atype, int64_t max_count, void* out) const;
    int64_t get_i64(cudnnBackendAttributeName_t a) const;

private:
    cudnnBackendDescriptor_t d_ = nullptr;
    cudnnBackendDescriptorType_t type_ = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;
    bool finalized_ = false;
};

// ---- tensors ----

struct CudnnTensorSpec {
    cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
    std::vector<int64_t> dims;     // logical order (N, C, D1, ..., Dk), as cuDNN wants them
    std::vector<int64_t> strides;  // in elements, same order as dims
    int64_t uid = 0;               // unique id within a graph; the variant pack binds pointers by it
    int64_t alignment = 16;        // guaranteed byte alignment of the base pointer
    bool is_virtual = false;       // intermediate of a fused graph (never bound to memory)
};

// Packed channels-last (NHWC-style) strides for logical dims (N, C, D1..Dk): C is innermost (stride
// 1), then Dk, ..., D1, then N. Example: dims (N,C,H,W) -> (H*W*C, 1, W*C, C). Throws for fewer than
// 3 dims or a non-positive dim.
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& dims);

// Finalized tensor descriptor. Throws for inconsistent specs (dims/strides size) or cuDNN errors.
CudnnDesc cudnn_tensor(const CudnnTensorSpec& spec);

// ---- convolution descriptor ----

struct CudnnConvSpec {
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;  // accumulation type
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    std::vector<int64_t> pre_pad, post_pad, stride, dilation;  // one entry per spatial dim
};

// Finalized convolution descriptor (spatial dims = pre_pad.size(); all four vectors that long).
CudnnDesc cudnn_conv_desc(const CudnnConvSpec& spec);

// ---- targets: a handle, or a device described without one ----

// Exactly one of the two is set. With a handle, graphs and plans name it (the path that executes);
// with a device property descriptor, the heuristics and plans are told the device's properties
// instead, and the plans can be finalized and inspected (engine, workspace) but not executed here.
struct CudnnTarget {
    cudnnHandle_t handle = nullptr;
    const CudnnDesc* device = nullptr;  // finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR
    static CudnnTarget of(cudnnHandle_t h) { return CudnnTarget{h, nullptr}; }
    static CudnnTarget of(const CudnnDesc& d) { return CudnnTarget{nullptr, &d}; }
    void validate(const char* fn) const;  // throws unless exactly one is set (the descriptor finalized)
};

// The first cuDNN runtime with device property descriptors (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR).
constexpr size_t kCudnnDevicePropMinRuntime = 90800;

// Finalized device property descriptor from its JSON (what cudnn_device_prop_json wrote on a GPU).
// Throws rt::Error with cuDNN's reason (e.g. the first key it misses) for a JSON it refuses, and
// for a cuDNN runtime older than 9.8.
CudnnDesc cudnn_device_prop_from_json(const std::string& json);
// The JSON of the device `handle` was created on (CUDNN_ATTR_DEVICEPROP_HANDLE): needs that device.
std::string cudnn_device_prop_json(cudnnHandle_t handle);

// ---- operation graph ----

// Operation graph over already finalized operations. False (+ reason) when cuDNN refuses the graph.
// The handle (when the target has one) is set on the graph; cuDNN >= 9.8 finalizes graphs without.
bool cudnn_try_op_graph(const CudnnTarget& target, const std::vector<const CudnnDesc*>& ops, CudnnDesc* graph,
                        std::string* why);

// ---- engine configurations ----

struct CudnnEngineConfig {
    CudnnDesc cfg;           // finalized engine configuration (as the heuristics return it)
    int64_t engine_id = -1;  // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
    cudnnBackendHeurMode_t source = CUDNN_HEUR_MODE_A;
    std::vector<cudnnBackendNumericalNote_t> numerical_notes;
    std::vector<cudnnBackendBehaviorNote_t> behavior_notes;
    std::vector<std::pair<cudnnBackendKnobType_t, int64_t>> knobs;  // knob choices, in cuDNN's order

    bool has_note(cudnnBackendNumericalNote_t n) const;
    bool has_behavior(cudnnBackendBehaviorNote_t n) const;
    // "engine 12 knobs{TILE_SIZE=3,STAGES=4} notes{TENSOR_CORE} [heurA]"; also the dedup identity
    // (without the source tag) via identity().
    std::string describe() const;
    std::string identity() const;
};

const char* cudnn_numerical_note_name(cudnnBackendNumericalNote_t n);
const char* cudnn_behavior_note_name(cudnnBackendBehaviorNote_t n);
const char* cudnn_knob_name(cudnnBackendKnobType_t k);  // "TILE_SIZE", ...; nullptr if deprecated/unknown
const char* cudnn_heur_mode_name(cudnnBackendHeurMode_t m);

// Engine configurations one heuristics mode proposes for a finalized graph, best first (results whose
// engine, notes or knobs cannot be read back are skipped: they could not be filtered). Empty (with
// the reason in *why) when the heuristics descriptor does not finalize for this graph. A target with
// a device property descriptor hands it to the heuristics (CUDNN_ATTR_ENGINEHEUR_DEVICEPROP).
std::vector<CudnnEngineConfig> cudnn_heuristic_configs(const CudnnTarget& target, const CudnnDesc& graph,
                                                       cudnnBackendHeurMode_t mode, std::string* why);

// CUDNN_HEUR_MODE_A's list, then CUDNN_HEUR_MODE_FALLBACK's entries not already listed (same engine
// and knob choices). Empty with both reasons in *why when neither proposes anything.
std::vector<CudnnEngineConfig> cudnn_engine_configs(const CudnnTarget& target, const CudnnDesc& graph,
                                                    std::string* why);

// ---- execution plans ----

// Builds and finalizes the execution plan of `cfg` for the target (its handle, or its device
// property descriptor: CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP). False (+ reason) when the engine refuses
// (e.g. an unsupported beta, alignment or data type); *workspace_bytes gets
// CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE.
bool cudnn_try_plan(const CudnnTarget& target, const CudnnEngineConfig& cfg, CudnnDesc* plan,
                    int64_t* workspace_bytes, std::string* why);

// Variant pack binding uids[i] -> ptrs[i] (n entries) and `workspace` (may be null when the plan needs
// none), then cudnnBackendExecute on the handle's stream. The try form returns the status instead of
// throwing (autotuning skips engines that fail to launch).
void cudnn_execute(cudnnHandle_t handle, const CudnnDesc& plan, const int64_t* uids, void* const* ptrs, int n,
                   void* workspace);
cudnnStatus_t cudnn_try_execute(cudnnHandle_t handle, const CudnnDesc& plan, const int64_t* uids, void* const* ptrs,
                                int n, void* workspace, std::string* why);

// Binds `handle` to `stream` for the scope's duration, then back to `home` (cudnnSetStream; nothing when
// the two are the same). Host state only: in a stream capture the calls made meanwhile join `stream`, as
// with a handle of its own (one handle shared by the branch lanes, runtime/lanes.h). The destructor logs
// a failure to bind back and continues; the next call's stream check then names the stream.
class CudnnStreamScope {
public:
    CudnnStreamScope(cudnnHandle_t handle, cudaStream_t stream, cudaStream_t home);
    ~CudnnStreamScope();
    CudnnStreamScope(const CudnnStreamScope&) = delete;
    CudnnStreamScope& operator=(const CudnnStreamScope&) = delete;

private:
    cudnnHandle_t handle_;
    cudaStream_t stream_, home_;
};

}  // namespace rt
