// Internal to the emulated cuDNN graph API (cudnn_backend.cpp, cudnn_attributes.cpp, cudnn_descriptors.cpp,
// cudnn_conv.cpp; docs/EMULATION.md "cuDNN"): the descriptors' contents, the attribute rules,
// finalization and the convolution arithmetic.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct cudnnContext {
    cudaStream_t stream = nullptr;
};

namespace sfemu::cudnn {

using DescType = cudnnBackendDescriptorType_t;
using AttrName = cudnnBackendAttributeName_t;
using AttrType = cudnnBackendAttributeType_t;

// Records cuDNN's "last error string" (cudnnGetLastErrorString) and returns s.
cudnnStatus_t fail(cudnnStatus_t s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
std::string take_last_error();

// True for a handle cudnnCreate returned and cudnnDestroy has not destroyed.
bool live_handle(const cudnnContext* h);

// ---- finalized contents ----

struct Tensor {
    cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
    std::vector<int64_t> dims, strides;
    int64_t uid = 0, alignment = 0;
    bool is_virtual = false;
};

struct Conv {
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t spatial = 0;
    std::vector<int64_t> pre, post, stride, dilation;
};

enum class OpKind { Fprop, Dgrad, Wgrad };
inline const char* op_name(OpKind k) { return k == OpKind::Fprop ? "fprop" : (k == OpKind::Dgrad ? "dgrad" : "wgrad"); }

struct ConvOp {
    OpKind kind = OpKind::Fprop;
    Tensor x, w, y;  // dgrad: x is dx, y is dy; wgrad: w is dw, y is dy
    Conv conv;
    double alpha = 1, beta = 0;
    int64_t groups = 1;
};

struct Graph {
    ConvOp op;
    cudnnContext* handle = nullptr;
};

struct Knob {
    cudnnBackendKnobType_t type;
    int64_t value;
};

struct EngineSpec {
    int64_t id;
    std::vector<cudnnBackendNumericalNote_t> notes;
    std::vector<Knob> knobs;
};

struct Desc;
using DescRef = std::shared_ptr<const Desc>;

struct Value {
    AttrType type = CUDNN_TYPE_INT64;
    int64_t count = 0;
    std::vector<unsigned char> bytes;  // count elements, copied at set time
    std::vector<DescRef> descs;        // CUDNN_TYPE_BACKEND_DESCRIPTOR: snapshots of the finalized descriptors
};

struct Desc {
    DescType type;
    bool finalized = false;
    std::map<AttrName, Value> attrs;
    // Contents once finalized (or filled by a get).
    Tensor tensor;
    Conv conv;
    ConvOp op;
    std::shared_ptr<const Graph> graph;
    std::vector<std::shared_ptr<Desc>> results;  // ENGINEHEUR: finalized ENGINECFGs
    int64_t counted_only = 0;              // ENGINEHEUR of a graph no engine supports: the count cuDNN reports anyway
    int64_t engine = -1;                   // ENGINE, ENGINECFG, EXECUTION_PLAN
    std::vector<Knob> knobs;               // ENGINECFG, EXECUTION_PLAN
    int64_t workspace = 0;                 // ENGINECFG, EXECUTION_PLAN
    cudnnContext* handle = nullptr;        // EXECUTION_PLAN
    Knob knob{CUDNN_KNOB_TYPE_COUNTS, 0};  // KNOB_CHOICE
    std::vector<int64_t> uids;             // VARIANT_PACK
    std::vector<void*> ptrs;
    void* ws = nullptr;
    explicit Desc(DescType t) : type(t) {}
};

size_t dtype_size(cudnnDataType_t t);  // 0: not emulated
int64_t numel(const Tensor& t);
// Bytes from the base pointer to one past the tensor's last element.
int64_t extent_bytes(const Tensor& t);

// ---- attributes (cudnn_attributes.cpp) ----

struct AttrRule {
    DescType desc;
    AttrName name;
    AttrType type;
    AttrType alt;  // a second accepted type (alpha/beta: FLOAT or DOUBLE), else same as type
    int64_t min_count, max_count;
    bool settable;
    DescType ref = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;  // BACKEND_DESCRIPTOR: the type it must be
};
const AttrRule* rule_for(DescType d, AttrName a);  // null: not an attribute of d (or not emulated)

// The attribute names of each convolution operation: x is dx for dgrad, w is dw for wgrad, y is dy
// for both. The attribute rules and finalize both read them from here.
struct OpAttrs {
    DescType type;
    OpKind kind;
    AttrName alpha, beta, conv, x, w, y;
};
const std::vector<OpAttrs>& conv_op_attrs();  // fprop, dgrad, wgrad
bool emulated_type(DescType t);
size_t attr_size(AttrType t);
const Value* attr(const Desc& d, AttrName a);
// A set attribute's values.
inline std::vector<int64_t> i64s(const Value& v) {
    std::vector<int64_t> out(static_cast<size_t>(v.count));
    std::memcpy(out.data(), v.bytes.data(), out.size() * sizeof(int64_t));
    return out;
}

template <class T>
T scalar(const Value& v) {
    T t;
    std::memcpy(&t, v.bytes.data(), sizeof(T));
    return t;
}

inline double real(const Value& v) { return v.type == CUDNN_TYPE_DOUBLE ? scalar<double>(v) : scalar<float>(v); }

// ---- engines and finalization (cudnn_descriptors.cpp) ----

const std::vector<EngineSpec>& catalogue();
// Finalizes d by its type: the checks of the reference, then its contents.
cudnnStatus_t finalize(Desc& d);
// Fills an ENGINECFG for engine `id` on graph g (heuristics results, gets of ENGINECFG_ENGINE).
void fill_engine_cfg(Desc& cfg, int64_t id, const std::shared_ptr<const Graph>& g);

// ---- the arithmetic (cudnn_conv.cpp) ----

struct Job {
    ConvOp op;
    int64_t engine;
    void* x;
    void* w;
    void* y;
    void* ws;
    int64_t ws_bytes;
    uint64_t salt;  // engine 2's summation order
};
void run_conv(const Job& j);

}  // namespace sfemu::cudnn
