// cuDNN's graph (backend descriptor) API under the CPU emulation (docs/EMULATION.md, "cuDNN").
//
// Written from the cuDNN 9 backend API reference, not from the project's callers: descriptors hold
// typed attributes, finalize checks what the reference requires (required attributes, attribute
// types and counts, tensor and convolution geometry), the heuristics return engine configurations
// from a small emulated catalogue, execution plans report a workspace size, and
// cudnnBackendExecute checks the variant pack (every tensor bound, pointers aligned as declared and
// inside device allocations large enough for their strides, the workspace) and queues the
// convolution on the handle's stream like any other emulated operation (so it is ordered, captured
// into graphs and replayed like a kernel).
//
// The catalogue (global index: numerical notes, what it does) exists to drive every path of a
// caller's engine selection, not to resemble cuDNN's engines:
//   0  TENSOR_CORE                  fp32 accumulation in a fixed order, no workspace, any beta.
//   1  TENSOR_CORE                  needs a workspace, which it overwrites with garbage while it runs
//                                   (a workspace that overlaps live data is caught); refuses beta != 0
//                                   at plan finalization (NOT_SUPPORTED), as real engines may.
//   2  TENSOR_CORE NONDETERMINISTIC dgrad / wgrad only: split-K with the order of the partial sums
//                                   changing from one execution to the next (bitwise results differ).
//   3  (none)                       the FALLBACK heuristics' direct engine: double accumulation.
// Modes A / B / INSTANT list fprop [1, 0], dgrad and wgrad [2, 1, 0]; FALLBACK lists [3, 0].
// SF_EMU_CUDNN_ENGINES=<i,j,...> keeps only those engines (to force a caller's fallbacks).
//
// Convolutions: 2 spatial dims, cross-correlation or convolution mode, groups = x.C / w.C, any
// strides, data types FLOAT / HALF / BFLOAT16 (any mix), alpha and beta as FLOAT or DOUBLE. With
// beta == 0 the destination is never read (it may hold NaN). One rounding to the destination type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/emu/emu_internal.h"
#include "tests/emu/streams.h"

struct cudnnContext {
    cudaStream_t stream = nullptr;
};

namespace {

using DescType = cudnnBackendDescriptorType_t;
using AttrName = cudnnBackendAttributeName_t;
using AttrType = cudnnBackendAttributeType_t;

thread_local std::string g_last_error;

cudnnStatus_t fail(cudnnStatus_t s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
cudnnStatus_t fail(cudnnStatus_t s, const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    g_last_error = std::string("[sfemu cuDNN] ") + buf;
    return s;
}

std::mutex g_mu;  // descriptors and handles may be used from several host threads
std::set<cudnnContext*> g_handles;

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
const char* op_name(OpKind k) { return k == OpKind::Fprop ? "fprop" : (k == OpKind::Dgrad ? "dgrad" : "wgrad"); }

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
    int64_t engine = -1;                         // ENGINE, ENGINECFG, EXECUTION_PLAN
    std::vector<Knob> knobs;                     // ENGINECFG, EXECUTION_PLAN
    int64_t workspace = 0;                       // ENGINECFG, EXECUTION_PLAN
    cudnnContext* handle = nullptr;              // EXECUTION_PLAN
    Knob knob{CUDNN_KNOB_TYPE_COUNTS, 0};        // KNOB_CHOICE
    std::vector<int64_t> uids;                   // VARIANT_PACK
    std::vector<void*> ptrs;
    void* ws = nullptr;
    explicit Desc(DescType t) : type(t) {}
};

std::map<const void*, std::shared_ptr<Desc>> g_descs;  // live descriptors by handle value

std::shared_ptr<Desc> lookup(cudnnBackendDescriptor_t d) {
    auto it = g_descs.find(d);
    return it == g_descs.end() ? nullptr : it->second;
}

// ---- attribute table: the type each (descriptor, attribute) takes, the count it allows ----

struct AttrRule {
    DescType desc;
    AttrName name;
    AttrType type;
    AttrType alt;  // a second accepted type (alpha/beta: FLOAT or DOUBLE), else same as type
    int64_t min_count, max_count;
    bool settable;
    DescType ref = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;  // BACKEND_DESCRIPTOR: the type it must be
};

constexpr int64_t kMany = 1 << 20;

const std::vector<AttrRule>& rules() {
    static const std::vector<AttrRule> r = {
        // tensors
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1, 1, true},
        {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1, 1, true},
        // convolution
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, 1, true},
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
        {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
        // convolution operations
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        // operation graph
        {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, true},
        {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, kMany, true},
        {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
        // heuristics
        {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, 1, true},
        {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
        {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, CUDNN_TYPE_INT32, CUDNN_TYPE_INT32, 1, 1, true},
        {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, kMany, false, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
        // engine configurations and engines
        {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_ENGINE_DESCRIPTOR},
        {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, kMany, true, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR},
        {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
        {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
        {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_SM_COUNT_TARGET, CUDNN_TYPE_INT32, CUDNN_TYPE_INT32, 1, 1, true},
        {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 0, kMany, false},
        {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 0, kMany, false},
        {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, 1, true},
        {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
        // execution plans and variant packs
        {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, true},
        {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
        {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
        {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMany, true},
        {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, CUDNN_TYPE_VOID_PTR, 1, kMany, true},
        {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, CUDNN_TYPE_VOID_PTR, 1, 1, true},
    };
    return r;
}

const AttrRule* rule_for(DescType d, AttrName a) {
    for (const AttrRule& r : rules())
        if (r.desc == d && r.name == a) return &r;
    return nullptr;
}

bool emulated_type(DescType t) {
    for (const AttrRule& r : rules())
        if (r.desc == t) return true;
    return false;
}

size_t attr_size(AttrType t) {
    switch (t) {
        case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
        case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
        case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
        case CUDNN_TYPE_INT64: return sizeof(int64_t);
        case CUDNN_TYPE_FLOAT: return sizeof(float);
        case CUDNN_TYPE_DOUBLE: return sizeof(double);
        case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
        case CUDNN_TYPE_CONVOLUTION_MODE: return sizeof(cudnnConvolutionMode_t);
        case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
        case CUDNN_TYPE_KNOB_TYPE: return sizeof(cudnnBackendKnobType_t);
        case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
        case CUDNN_TYPE_BEHAVIOR_NOTE: return sizeof(cudnnBackendBehaviorNote_t);
        case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
        case CUDNN_TYPE_INT32: return sizeof(int32_t);
        default: return 0;
    }
}

// ---- reading set attributes ----

const Value* attr(const Desc& d, AttrName a) {
    auto it = d.attrs.find(a);
    return it == d.attrs.end() ? nullptr : &it->second;
}

std::vector<int64_t> i64s(const Value& v) {
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

double real(const Value& v) { return v.type == CUDNN_TYPE_DOUBLE ? scalar<double>(v) : scalar<float>(v); }

size_t dtype_size(cudnnDataType_t t) {
    switch (t) {
        case CUDNN_DATA_FLOAT: return 4;
        case CUDNN_DATA_HALF:
        case CUDNN_DATA_BFLOAT16: return 2;
        default: return 0;
    }
}

// ---- the engine catalogue ----

std::vector<EngineSpec> catalogue() {
    return {
        {0, {CUDNN_NUMERICAL_NOTE_TENSOR_CORE}, {{CUDNN_KNOB_TYPE_TILE_SIZE, 0}}},
        {1, {CUDNN_NUMERICAL_NOTE_TENSOR_CORE}, {{CUDNN_KNOB_TYPE_TILE_SIZE, 1}, {CUDNN_KNOB_TYPE_STAGES, 3}}},
        {2, {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC}, {{CUDNN_KNOB_TYPE_SPLIT_K_SLC, 4}}},
        {3, {}, {}},
    };
}

bool engine_allowed(int64_t id) {
    const char* env = std::getenv("SF_EMU_CUDNN_ENGINES");
    if (!env || !*env) return true;
    std::string s = std::string(",") + env + ",";
    return s.find("," + std::to_string(id) + ",") != std::string::npos;
}

// Engines of a graph, in the order a heuristics mode lists them.
std::vector<int64_t> engines_for(const Graph& g, cudnnBackendHeurMode_t mode) {
    std::vector<int64_t> ids;
    if (mode == CUDNN_HEUR_MODE_FALLBACK)
        ids = {3, 0};
    else if (g.op.kind == OpKind::Fprop)
        ids = {1, 0};
    else
        ids = {2, 1, 0};
    ids.erase(std::remove_if(ids.begin(), ids.end(), [](int64_t i) { return !engine_allowed(i); }), ids.end());
    return ids;
}

bool engine_supports(int64_t id, const Graph& g) {
    if (id < 0 || id > 3) return false;
    if (id == 2 && g.op.kind == OpKind::Fprop) return false;
    return true;
}

int64_t numel(const Tensor& t) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    return n;
}

// Bytes engine 1 asks for: a split of the output in fp32, at least 4 KiB.
int64_t engine_workspace(int64_t id, const Graph& g) {
    if (id != 1) return 0;
    const Tensor& out = g.op.kind == OpKind::Fprop ? g.op.y : (g.op.kind == OpKind::Dgrad ? g.op.x : g.op.w);
    return std::max<int64_t>(4096, numel(out) * 4);
}

// "" when engine `id` can run graph g as a plan, else why not.
std::string plan_refusal(int64_t id, const Graph& g) {
    if (!engine_supports(id, g)) return "the engine does not support this operation";
    if (id == 1 && g.op.beta != 0) return "engine 1 supports beta == 0 only";
    return "";
}

// ---- finalization ----

cudnnStatus_t need(const Desc& d, AttrName a, const char* what) {
    if (attr(d, a)) return CUDNN_STATUS_SUCCESS;
    return fail(CUDNN_STATUS_BAD_PARAM, "finalize(descriptor type %d): required attribute %s (%d) not set",
                static_cast<int>(d.type), what, static_cast<int>(a));
}

#define SF_EMU_NEED(d, a)                                         \
    do {                                                          \
        const cudnnStatus_t need_s_ = need((d), (a), #a);         \
        if (need_s_ != CUDNN_STATUS_SUCCESS) return need_s_;      \
    } while (0)

cudnnStatus_t finalize_tensor(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
    SF_EMU_NEED(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    SF_EMU_NEED(d, CUDNN_ATTR_TENSOR_STRIDES);
    SF_EMU_NEED(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    SF_EMU_NEED(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    Tensor& t = d.tensor;
    t.dtype = scalar<cudnnDataType_t>(*attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE));
    t.dims = i64s(*attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS));
    t.strides = i64s(*attr(d, CUDNN_ATTR_TENSOR_STRIDES));
    t.uid = scalar<int64_t>(*attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID));
    t.alignment = scalar<int64_t>(*attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT));
    if (const Value* v = attr(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL)) t.is_virtual = scalar<bool>(*v);
    if (t.dims.size() != t.strides.size())
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: %zu dimensions but %zu strides",
                    static_cast<long long>(t.uid), t.dims.size(), t.strides.size());
    for (size_t i = 0; i < t.dims.size(); ++i)
        if (t.dims[i] <= 0 || t.strides[i] <= 0)
            return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: dimension %zu is %lld with stride %lld",
                        static_cast<long long>(t.uid), i, static_cast<long long>(t.dims[i]),
                        static_cast<long long>(t.strides[i]));
    if (t.alignment <= 0 || (t.alignment & (t.alignment - 1)))
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: byte alignment %lld is not a power of two",
                    static_cast<long long>(t.uid), static_cast<long long>(t.alignment));
    if (dtype_size(t.dtype) == 0)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "tensor uid %lld: data type %d is not emulated",
                    static_cast<long long>(t.uid), static_cast<int>(t.dtype));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_conv(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE);
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE);
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS);
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_DILATIONS);
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES);
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
    SF_EMU_NEED(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
    Conv& c = d.conv;
    c.compute = scalar<cudnnDataType_t>(*attr(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE));
    c.mode = scalar<cudnnConvolutionMode_t>(*attr(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE));
    c.spatial = scalar<int64_t>(*attr(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS));
    c.dilation = i64s(*attr(d, CUDNN_ATTR_CONVOLUTION_DILATIONS));
    c.stride = i64s(*attr(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES));
    c.pre = i64s(*attr(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS));
    c.post = i64s(*attr(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS));
    const size_t n = static_cast<size_t>(c.spatial);
    if (c.spatial < 1 || c.dilation.size() != n || c.stride.size() != n || c.pre.size() != n || c.post.size() != n)
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "convolution: %lld spatial dims but %zu dilations, %zu strides, %zu pre and %zu post paddings",
                    static_cast<long long>(c.spatial), c.dilation.size(), c.stride.size(), c.pre.size(),
                    c.post.size());
    for (size_t i = 0; i < n; ++i)
        if (c.dilation[i] < 1 || c.stride[i] < 1 || c.pre[i] < 0 || c.post[i] < 0)
            return fail(CUDNN_STATUS_BAD_PARAM, "convolution: dim %zu has dilation %lld, stride %lld, padding %lld/%lld",
                        i, static_cast<long long>(c.dilation[i]), static_cast<long long>(c.stride[i]),
                        static_cast<long long>(c.pre[i]), static_cast<long long>(c.post[i]));
    if (c.compute != CUDNN_DATA_FLOAT)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "convolution: compute type %d is not emulated (FLOAT only)",
                    static_cast<int>(c.compute));
    return CUDNN_STATUS_SUCCESS;
}

const Desc& ref(const Desc& d, AttrName a) { return *attr(d, a)->descs.at(0); }

cudnnStatus_t finalize_op(Desc& d) {
    AttrName a_alpha, a_beta, a_conv, a_x, a_w, a_y;
    OpKind kind;
    switch (d.type) {
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
            kind = OpKind::Fprop;
            a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA;
            a_conv = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC;
            a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W;
            a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y;
            break;
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
            kind = OpKind::Dgrad;
            a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA;
            a_conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC;
            a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W;
            a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY;
            break;
        default:
            kind = OpKind::Wgrad;
            a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
            a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA;
            a_conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC;
            a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW;
            a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY;
            break;
    }
    SF_EMU_NEED(d, a_conv);
    SF_EMU_NEED(d, a_x);
    SF_EMU_NEED(d, a_w);
    SF_EMU_NEED(d, a_y);
    ConvOp& op = d.op;
    op.kind = kind;
    op.conv = ref(d, a_conv).conv;
    op.x = ref(d, a_x).tensor;
    op.w = ref(d, a_w).tensor;
    op.y = ref(d, a_y).tensor;
    op.alpha = attr(d, a_alpha) ? real(*attr(d, a_alpha)) : 1.0;
    op.beta = attr(d, a_beta) ? real(*attr(d, a_beta)) : 0.0;
    const char* name = op_name(kind);
    if (op.conv.spatial != 2)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s: %lld spatial dims (only 2 are emulated)", name,
                    static_cast<long long>(op.conv.spatial));
    for (const Tensor* t : {&op.x, &op.w, &op.y})
        if (t->dims.size() != 4)
            return fail(CUDNN_STATUS_BAD_PARAM, "%s: tensor uid %lld has %zu dims; a 2-d convolution needs 4", name,
                        static_cast<long long>(t->uid), t->dims.size());
    if (op.x.uid == op.w.uid || op.x.uid == op.y.uid || op.w.uid == op.y.uid)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: tensors share a unique id", name);
    const int64_t n = op.x.dims[0], c = op.x.dims[1], k = op.w.dims[0], cg = op.w.dims[1];
    if (cg <= 0 || c % cg != 0)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: x has %lld channels, w %lld per group", name,
                    static_cast<long long>(c), static_cast<long long>(cg));
    op.groups = c / cg;
    if (k % op.groups != 0)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: %lld filters do not split into %lld groups", name,
                    static_cast<long long>(k), static_cast<long long>(op.groups));
    int64_t expect[4] = {n, k, 0, 0};
    for (int i = 0; i < 2; ++i) {
        const int64_t in = op.x.dims[2 + i], r = op.w.dims[2 + i];
        const int64_t span = op.conv.dilation[i] * (r - 1) + 1;
        const int64_t padded = in + op.conv.pre[i] + op.conv.post[i];
        expect[2 + i] = padded < span ? 0 : (padded - span) / op.conv.stride[i] + 1;
    }
    for (int i = 0; i < 4; ++i)
        if (op.y.dims[i] != expect[i])
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "%s: y/dy dims (%lld,%lld,%lld,%lld) but x, w and the convolution give (%lld,%lld,%lld,%lld)",
                        name, static_cast<long long>(op.y.dims[0]), static_cast<long long>(op.y.dims[1]),
                        static_cast<long long>(op.y.dims[2]), static_cast<long long>(op.y.dims[3]),
                        static_cast<long long>(expect[0]), static_cast<long long>(expect[1]),
                        static_cast<long long>(expect[2]), static_cast<long long>(expect[3]));
    if (op.x.is_virtual || op.w.is_virtual || op.y.is_virtual)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s: virtual tensors (fused graphs) are not emulated", name);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_graph(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
    SF_EMU_NEED(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    const Value& ops = *attr(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (ops.descs.size() != 1)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "operation graph of %zu operations: only single convolutions are emulated",
                    ops.descs.size());
    const Desc& op = *ops.descs[0];
    if (op.type != CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR &&
        op.type != CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR &&
        op.type != CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "operation graph: operation type %d is not emulated",
                    static_cast<int>(op.type));
    auto g = std::make_shared<Graph>();
    g->op = op.op;
    g->handle = scalar<cudnnContext*>(*attr(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE));
    if (!g_handles.count(g->handle)) return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: not a live cuDNN handle");
    d.graph = g;
    return CUDNN_STATUS_SUCCESS;
}

// Fills an ENGINECFG (and the ENGINE it names) for engine `id` on graph g.
void fill_engine_cfg(Desc& cfg, int64_t id, const std::shared_ptr<const Graph>& g) {
    cfg.graph = g;
    cfg.engine = id;
    for (const EngineSpec& e : catalogue())
        if (e.id == id) cfg.knobs = e.knobs;
    cfg.workspace = engine_workspace(id, *g);
    cfg.finalized = true;
}

cudnnStatus_t finalize_heur(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    SF_EMU_NEED(d, CUDNN_ATTR_ENGINEHEUR_MODE);
    const cudnnBackendHeurMode_t mode = scalar<cudnnBackendHeurMode_t>(*attr(d, CUDNN_ATTR_ENGINEHEUR_MODE));
    if (mode != CUDNN_HEUR_MODE_INSTANT && mode != CUDNN_HEUR_MODE_B && mode != CUDNN_HEUR_MODE_FALLBACK &&
        mode != CUDNN_HEUR_MODE_A)
        return fail(CUDNN_STATUS_BAD_PARAM, "heuristics: unknown mode %d", static_cast<int>(mode));
    d.graph = ref(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH).graph;
    for (int64_t id : engines_for(*d.graph, mode)) {
        auto cfg = std::make_shared<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        fill_engine_cfg(*cfg, id, d.graph);
        d.results.push_back(cfg);
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_engine(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    SF_EMU_NEED(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    d.graph = ref(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH).graph;
    d.engine = scalar<int64_t>(*attr(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX));
    if (!engine_supports(d.engine, *d.graph) || !engine_allowed(d.engine))
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "engine %lld does not support this graph",
                    static_cast<long long>(d.engine));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_cfg(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    const Desc& e = ref(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    fill_engine_cfg(d, e.engine, e.graph);
    if (const Value* k = attr(d, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES)) {
        d.knobs.clear();
        for (const DescRef& c : k->descs) d.knobs.push_back(c->knob);
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_knob(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE);
    SF_EMU_NEED(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
    d.knob = {scalar<cudnnBackendKnobType_t>(*attr(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE)),
              scalar<int64_t>(*attr(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE))};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_plan(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
    SF_EMU_NEED(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    const Desc& cfg = ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    d.handle = scalar<cudnnContext*>(*attr(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE));
    if (!g_handles.count(d.handle)) return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: not a live cuDNN handle");
    d.graph = cfg.graph;
    d.engine = cfg.engine;
    d.knobs = cfg.knobs;
    d.workspace = cfg.workspace;
    const std::string why = plan_refusal(d.engine, *d.graph);
    if (!why.empty())
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "execution plan (engine %lld, %s): %s", static_cast<long long>(d.engine),
                    op_name(d.graph->op.kind), why.c_str());
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_pack(Desc& d) {
    SF_EMU_NEED(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    SF_EMU_NEED(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    const Value& u = *attr(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const Value& p = *attr(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    if (u.count != p.count)
        return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: %lld unique ids but %lld data pointers",
                    static_cast<long long>(u.count), static_cast<long long>(p.count));
    d.uids = i64s(u);
    d.ptrs.resize(static_cast<size_t>(p.count));
    std::memcpy(d.ptrs.data(), p.bytes.data(), d.ptrs.size() * sizeof(void*));
    d.ws = attr(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE) ? scalar<void*>(*attr(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
                                                      : nullptr;
    return CUDNN_STATUS_SUCCESS;
}

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
                    out[i++] = load(p, t.dtype, n * t.strides[0] + c * t.strides[1] + h * t.strides[2] + w * t.strides[3]);
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

struct Job {
    ConvOp op;
    int64_t engine;
    void* x;
    void* w;
    void* y;
    void* ws;
    int64_t ws_bytes;
    uint64_t salt;
};

void run_conv(const Job& j) {
    const ConvOp& op = j.op;
    const Conv& cv = op.conv;
    const int64_t N = op.x.dims[0], C = op.x.dims[1], H = op.x.dims[2], W = op.x.dims[3];
    const int64_t K = op.w.dims[0], CG = op.w.dims[1], R = op.w.dims[2], S = op.w.dims[3];
    const int64_t P = op.y.dims[2], Q = op.y.dims[3], G = op.groups, KG = K / G;
    const bool flip = cv.mode == CUDNN_CONVOLUTION;
    // The engine's scratch: garbage over the whole workspace while it runs.
    if (j.ws && j.ws_bytes > 0) std::memset(j.ws, 0xA5, static_cast<size_t>(j.ws_bytes));
    // Input h, w of output (p, q) and filter tap (r, s); false when it falls into the padding.
    auto tap = [&](int64_t p, int64_t q, int64_t r, int64_t s, int64_t* h, int64_t* w) {
        const int64_t rr = flip ? R - 1 - r : r, ss = flip ? S - 1 - s : s;
        *h = p * cv.stride[0] - cv.pre[0] + rr * cv.dilation[0];
        *w = q * cv.stride[1] - cv.pre[1] + ss * cv.dilation[1];
        return *h >= 0 && *h < H && *w >= 0 && *w < W;
    };
    auto off = [](const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
        return a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
    };
    auto finish = [&](const Tensor& t, void* base, int64_t o, float acc) {
        float v = static_cast<float>(op.alpha) * acc;
        if (op.beta != 0) v += static_cast<float>(op.beta) * load(base, t.dtype, o);
        store(base, t.dtype, o, v);
    };
    if (op.kind == OpKind::Fprop) {
        const std::vector<float> xs = dense(op.x, j.x), ws = dense(op.w, j.w);
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) {
                Accumulator a{j.engine, j.salt, {}};
                const int64_t g = k / KG;
                for (int64_t p = 0; p < P; ++p)
                    for (int64_t q = 0; q < Q; ++q) {
                        a.terms.clear();
                        for (int64_t r = 0; r < R; ++r)
                            for (int64_t s = 0; s < S; ++s) {
                                int64_t h, w;
                                if (!tap(p, q, r, s, &h, &w)) continue;
                                for (int64_t c = 0; c < CG; ++c)
                                    a.terms.push_back(xs[static_cast<size_t>(((n * C + g * CG + c) * H + h) * W + w)] *
                                                      ws[static_cast<size_t>(((k * CG + c) * R + r) * S + s)]);
                            }
                        finish(op.y, j.y, off(op.y, n, k, p, q), a.finish());
                    }
            }
    } else if (op.kind == OpKind::Dgrad) {
        const std::vector<float> dy = dense(op.y, j.y), ws = dense(op.w, j.w);
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c) {
                Accumulator a{j.engine, j.salt, {}};
                const int64_t g = c / CG, cl = c % CG;
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t w = 0; w < W; ++w) {
                        a.terms.clear();
                        for (int64_t r = 0; r < R; ++r)
                            for (int64_t s = 0; s < S; ++s) {
                                const int64_t rr = flip ? R - 1 - r : r, ss = flip ? S - 1 - s : s;
                                const int64_t ph = h + cv.pre[0] - rr * cv.dilation[0];
                                const int64_t qw = w + cv.pre[1] - ss * cv.dilation[1];
                                if (ph < 0 || qw < 0 || ph % cv.stride[0] || qw % cv.stride[1]) continue;
                                const int64_t p = ph / cv.stride[0], q = qw / cv.stride[1];
                                if (p >= P || q >= Q) continue;
                                for (int64_t kk = 0; kk < KG; ++kk) {
                                    const int64_t k = g * KG + kk;
                                    a.terms.push_back(dy[static_cast<size_t>(((n * K + k) * P + p) * Q + q)] *
                                                      ws[static_cast<size_t>(((k * CG + cl) * R + r) * S + s)]);
                                }
                            }
                        finish(op.x, j.x, off(op.x, n, c, h, w), a.finish());
                    }
            }
    } else {
        const std::vector<float> xs = dense(op.x, j.x), dy = dense(op.y, j.y);
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t c = 0; c < CG; ++c) {
                Accumulator a{j.engine, j.salt, {}};
                const int64_t g = k / KG;
                for (int64_t r = 0; r < R; ++r)
                    for (int64_t s = 0; s < S; ++s) {
                        a.terms.clear();
                        for (int64_t n = 0; n < N; ++n)
                            for (int64_t p = 0; p < P; ++p)
                                for (int64_t q = 0; q < Q; ++q) {
                                    int64_t h, w;
                                    if (!tap(p, q, r, s, &h, &w)) continue;
                                    a.terms.push_back(xs[static_cast<size_t>(((n * C + g * CG + c) * H + h) * W + w)] *
                                                      dy[static_cast<size_t>(((n * K + k) * P + p) * Q + q)]);
                                }
                        finish(op.w, j.w, off(op.w, k, c, r, s), a.finish());
                    }
            }
    }
}

// Bytes from the base pointer to one past the tensor's last element.
int64_t extent_bytes(const Tensor& t) {
    int64_t last = 0;
    for (size_t i = 0; i < t.dims.size(); ++i) last += (t.dims[i] - 1) * t.strides[i];
    return (last + 1) * static_cast<int64_t>(dtype_size(t.dtype));
}

cudnnStatus_t check_binding(const Tensor& t, void* p, const char* role) {
    if (!p) return fail(CUDNN_STATUS_BAD_PARAM, "execute: tensor uid %lld (%s) is not in the variant pack",
                        static_cast<long long>(t.uid), role);
    if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(t.alignment))
        return fail(CUDNN_STATUS_BAD_PARAM, "execute: tensor uid %lld (%s) at %p is not %lld-byte aligned as declared",
                    static_cast<long long>(t.uid), role, p, static_cast<long long>(t.alignment));
    const int64_t bytes = extent_bytes(t);
    const sfemu::Allocation* a = sfemu::find_allocation(p, static_cast<size_t>(bytes));
    if (!a || !a->device)
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "execute: tensor uid %lld (%s) at %p: no device allocation holds its %lld bytes",
                    static_cast<long long>(t.uid), role, p, static_cast<long long>(bytes));
    return CUDNN_STATUS_SUCCESS;
}

uint64_t g_executions = 0;

}  // namespace

extern "C" {

// ---- handles and strings ----

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
    if (!h) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: null handle pointer");
    std::lock_guard<std::mutex> lk(g_mu);
    *h = new cudnnContext;
    g_handles.insert(*h);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_handles.erase(h)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a live handle");
    delete h;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_handles.count(h)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a live handle");
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t* s) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_handles.count(h) || !s) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: not a live handle");
    *s = h->stream;
    return CUDNN_STATUS_SUCCESS;
}

size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
        case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
        case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
        default: return "CUDNN_STATUS_<emulated: other>";
    }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
    if (!message || !max_size) return;
    std::snprintf(message, max_size, "%s", g_last_error.c_str());
    g_last_error.clear();
}

// ---- descriptors ----

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendCreateDescriptor: null descriptor pointer");
    if (!emulated_type(type))
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendCreateDescriptor: descriptor type %d is not emulated",
                    static_cast<int>(type));
    std::lock_guard<std::mutex> lk(g_mu);
    auto p = std::make_shared<Desc>(type);
    *d = p.get();
    g_descs[p.get()] = p;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_descs.erase(d))
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendDestroyDescriptor: %p is not a live descriptor", d);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    std::lock_guard<std::mutex> lk(g_mu);
    std::shared_ptr<Desc> d = lookup(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: %p is not a live descriptor", desc);
    if (d->finalized)
        return fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnBackendSetAttribute(attribute %d): the descriptor is finalized",
                    static_cast<int>(name));
    const AttrRule* r = rule_for(d->type, name);
    if (!r || !r->settable)
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: attribute %d cannot be set on descriptor type %d%s",
                    static_cast<int>(name), static_cast<int>(d->type), r ? "" : " (or is not emulated)");
    if (type != r->type && type != r->alt)
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(type %d, attribute %d): attribute type %d, expected %d",
                    static_cast<int>(d->type), static_cast<int>(name), static_cast<int>(type), static_cast<int>(r->type));
    if (count < r->min_count || count > r->max_count || (count > 0 && !values))
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(type %d, attribute %d): %lld elements (allowed %lld..%lld)",
                    static_cast<int>(d->type), static_cast<int>(name), static_cast<long long>(count),
                    static_cast<long long>(r->min_count), static_cast<long long>(r->max_count));
    Value v;
    v.type = type;
    v.count = count;
    const size_t bytes = attr_size(type) * static_cast<size_t>(count);
    v.bytes.assign(static_cast<const unsigned char*>(values), static_cast<const unsigned char*>(values) + bytes);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        const cudnnBackendDescriptor_t* ds = static_cast<const cudnnBackendDescriptor_t*>(values);
        for (int64_t i = 0; i < count; ++i) {
            std::shared_ptr<Desc> ref_d = lookup(ds[i]);
            if (!ref_d)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(attribute %d): element %lld is not a live descriptor",
                            static_cast<int>(name), static_cast<long long>(i));
            if (!ref_d->finalized)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(attribute %d): element %lld is not finalized",
                            static_cast<int>(name), static_cast<long long>(i));
            const bool is_op = ref_d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
                               ref_d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
                               ref_d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
            const bool ok = name == CUDNN_ATTR_OPERATIONGRAPH_OPS ? is_op : ref_d->type == r->ref;
            if (!ok)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(attribute %d): element %lld has descriptor type %d",
                            static_cast<int>(name), static_cast<long long>(i), static_cast<int>(ref_d->type));
            v.descs.push_back(std::make_shared<const Desc>(*ref_d));  // a snapshot: the caller may destroy it
        }
    }
    d->attrs[name] = std::move(v);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
    std::lock_guard<std::mutex> lk(g_mu);
    std::shared_ptr<Desc> d = lookup(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: %p is not a live descriptor", desc);
    if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: already finalized");
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    switch (d->type) {
        case CUDNN_BACKEND_TENSOR_DESCRIPTOR: s = finalize_tensor(*d); break;
        case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: s = finalize_conv(*d); break;
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: s = finalize_op(*d); break;
        case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: s = finalize_graph(*d); break;
        case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: s = finalize_heur(*d); break;
        case CUDNN_BACKEND_ENGINE_DESCRIPTOR: s = finalize_engine(*d); break;
        case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: s = finalize_cfg(*d); break;
        case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: s = finalize_knob(*d); break;
        case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: s = finalize_plan(*d); break;
        case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: s = finalize_pack(*d); break;
        default: s = fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendFinalize: type %d not emulated", static_cast<int>(d->type));
    }
    if (s == CUDNN_STATUS_SUCCESS) d->finalized = true;
    return s;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* out) {
    std::lock_guard<std::mutex> lk(g_mu);
    std::shared_ptr<Desc> d = lookup(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: %p is not a live descriptor", desc);
    if (!d->finalized)
        return fail(CUDNN_STATUS_NOT_INITIALIZED, "cudnnBackendGetAttribute(attribute %d): the descriptor is not finalized",
                    static_cast<int>(name));
    const AttrRule* r = rule_for(d->type, name);
    if (!r) return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendGetAttribute: attribute %d of type %d is not emulated",
                        static_cast<int>(name), static_cast<int>(d->type));
    if (type != r->type && type != r->alt)
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute(attribute %d): attribute type %d, expected %d",
                    static_cast<int>(name), static_cast<int>(type), static_cast<int>(r->type));
    if (!count) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: null element count");
    if (requested < 0 || (requested > 0 && !out))
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: %lld elements requested into %p",
                    static_cast<long long>(requested), out);
    auto put_i64 = [&](int64_t v) {
        *count = 1;
        if (requested >= 1) std::memcpy(out, &v, sizeof v);
        return CUDNN_STATUS_SUCCESS;
    };
    // Fills caller-created descriptors of type `want` with `fill` for each of n results.
    auto fill_descs = [&](int64_t n, DescType want, auto fill) -> cudnnStatus_t {
        *count = n;
        cudnnBackendDescriptor_t* arr = static_cast<cudnnBackendDescriptor_t*>(out);
        for (int64_t i = 0; i < std::min(n, requested); ++i) {
            std::shared_ptr<Desc> t = lookup(arr[i]);
            if (!t || t->type != want)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute(attribute %d): element %lld is not a live "
                            "descriptor of type %d", static_cast<int>(name), static_cast<long long>(i), static_cast<int>(want));
            fill(*t, i);
        }
        return CUDNN_STATUS_SUCCESS;
    };
    switch (name) {
        case CUDNN_ATTR_ENGINEHEUR_RESULTS:
            return fill_descs(static_cast<int64_t>(d->results.size()), CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                              [&](Desc& t, int64_t i) {
                                  const Desc& src = *d->results[static_cast<size_t>(i)];
                                  fill_engine_cfg(t, src.engine, src.graph);
                              });
        case CUDNN_ATTR_ENGINECFG_ENGINE:
            return fill_descs(1, CUDNN_BACKEND_ENGINE_DESCRIPTOR, [&](Desc& t, int64_t) {
                t.graph = d->graph;
                t.engine = d->engine;
                t.finalized = true;
            });
        case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES:
            return fill_descs(static_cast<int64_t>(d->knobs.size()), CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                              [&](Desc& t, int64_t i) {
                                  t.knob = d->knobs[static_cast<size_t>(i)];
                                  t.finalized = true;
                              });
        case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
        case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: return put_i64(d->workspace);
        case CUDNN_ATTR_ENGINE_GLOBAL_INDEX: return put_i64(d->engine);
        case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: return put_i64(4);
        case CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE:
            *count = 1;
            if (requested >= 1) std::memcpy(out, &d->knob.type, sizeof d->knob.type);
            return CUDNN_STATUS_SUCCESS;
        case CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE: return put_i64(d->knob.value);
        case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
            std::vector<cudnnBackendNumericalNote_t> notes;
            for (const EngineSpec& e : catalogue())
                if (e.id == d->engine) notes = e.notes;
            *count = static_cast<int64_t>(notes.size());
            if (requested > 0 && !notes.empty())
                std::memcpy(out, notes.data(), sizeof(notes[0]) * static_cast<size_t>(std::min(*count, requested)));
            return CUDNN_STATUS_SUCCESS;
        }
        case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE: *count = 0; return CUDNN_STATUS_SUCCESS;
        default: break;
    }
    // Any other attribute: what was set.
    const Value* v = attr(*d, name);
    if (!v) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: attribute %d was never set",
                        static_cast<int>(name));
    if (v->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendGetAttribute: reading back descriptor attribute %d is not emulated",
                    static_cast<int>(name));
    *count = v->count;
    if (requested > 0) std::memcpy(out, v->bytes.data(), attr_size(v->type) * static_cast<size_t>(std::min(v->count, requested)));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan_desc,
                                  cudnnBackendDescriptor_t pack_desc) {
    Job job;
    cudaStream_t stream;
    {
        std::lock_guard<std::mutex> lk(g_mu);
        if (!g_handles.count(handle)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: not a live handle");
        std::shared_ptr<Desc> plan = lookup(plan_desc), pack = lookup(pack_desc);
        if (!plan || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !plan->finalized)
            return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: not a finalized execution plan");
        if (!pack || pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !pack->finalized)
            return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: not a finalized variant pack");
        const ConvOp& op = plan->graph->op;
        auto bound = [&](const Tensor& t) -> void* {
            for (size_t i = 0; i < pack->uids.size(); ++i)
                if (pack->uids[i] == t.uid) return pack->ptrs[i];
            return nullptr;
        };
        job.op = op;
        job.engine = plan->engine;
        job.x = bound(op.x), job.w = bound(op.w), job.y = bound(op.y);
        const char* roles[3][3] = {{"x", "w", "y"}, {"dx", "w", "dy"}, {"x", "dw", "dy"}};
        const int k = static_cast<int>(op.kind);
        for (auto [t, p, role] : {std::tuple<const Tensor&, void*, const char*>{op.x, job.x, roles[k][0]},
                                  std::tuple<const Tensor&, void*, const char*>{op.w, job.w, roles[k][1]},
                                  std::tuple<const Tensor&, void*, const char*>{op.y, job.y, roles[k][2]}}) {
            const cudnnStatus_t s = check_binding(t, p, role);
            if (s != CUDNN_STATUS_SUCCESS) return s;
        }
        job.ws = pack->ws;
        job.ws_bytes = plan->workspace;
        if (plan->workspace > 0) {
            const sfemu::Allocation* a = pack->ws ? sfemu::find_allocation(pack->ws, static_cast<size_t>(plan->workspace))
                                                  : nullptr;
            if (!a || !a->device)
                return fail(CUDNN_STATUS_BAD_PARAM, "execute: the plan needs %lld bytes of device workspace, given %p",
                            static_cast<long long>(plan->workspace), pack->ws);
        }
        stream = handle->stream;
    }
    std::string what = std::string("cudnn ") + op_name(job.op.kind) + " engine " + std::to_string(job.engine);
    // Engine 2's order changes with every run (a replayed graph node too), as atomics would.
    const cudaError_t e = sfemu::enqueue(stream, what, [job]() mutable {
        job.salt = ++g_executions;
        run_conv(job);
    });
    if (e != cudaSuccess)
        return fail(CUDNN_STATUS_EXECUTION_FAILED, "cudnnBackendExecute: the stream refused the work (%s)",
                    cudaGetErrorName(e));
    return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
