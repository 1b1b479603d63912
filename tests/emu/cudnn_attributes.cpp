// The emulated cuDNN's attributes (docs/EMULATION.md "cuDNN"): the last error string, the type and
// element count each (descriptor, attribute) takes, and the data type sizes.
#include <cstdarg>
#include <cstdio>

#include "tests/emu/cudnn_emu.h"

namespace sfemu::cudnn {

namespace {
thread_local std::string g_last_error;
}  // namespace

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

std::string take_last_error() {
    std::string s;
    s.swap(g_last_error);
    return s;
}

// ---- attribute table: the type each (descriptor, attribute) takes, the count it allows ----

constexpr int64_t kMany = 1 << 20;

const std::vector<OpAttrs>& conv_op_attrs() {
    static const std::vector<OpAttrs> table = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, OpKind::Fprop,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, OpKind::Dgrad,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, OpKind::Wgrad,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
    };
    return table;
}

namespace {

// The rules of the three convolution operations, from their attribute names: alpha and beta a
// FLOAT or DOUBLE scalar, the convolution descriptor and three tensors one descriptor each.
void add_conv_op_rules(std::vector<AttrRule>& r) {
    for (const OpAttrs& o : conv_op_attrs()) {
        for (AttrName a : {o.alpha, o.beta}) r.push_back({o.type, a, CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true});
        r.push_back({o.type, o.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
                     CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR});
        for (AttrName a : {o.x, o.w, o.y})
            r.push_back({o.type, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
                         CUDNN_BACKEND_TENSOR_DESCRIPTOR});
    }
}

}  // namespace

const std::vector<AttrRule>& rules() {
    static const std::vector<AttrRule> r = [] {
        std::vector<AttrRule> v = {
            // tensors
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1,
             1, true},
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE,
             1, 1, true},
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1,
             CUDNN_DIM_MAX, true},
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1,
             CUDNN_DIM_MAX, true},
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1,
             true},
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1,
             1, true},
            {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1,
             1, true},
            // convolution
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
             CUDNN_TYPE_DATA_TYPE, 1, 1, true},
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
             CUDNN_TYPE_CONVOLUTION_MODE, 1, 1, true},
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, 1, true},
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64,
             1, CUDNN_DIM_MAX, true},
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
            {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true},
            // operation graph
            {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
             CUDNN_TYPE_HANDLE, 1, 1, true},
            {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, kMany, true},
            {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, 1, false},
            // heuristics
            {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE,
             CUDNN_TYPE_HEUR_MODE, 1, 1, true},
            {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
            {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, CUDNN_TYPE_INT32,
             CUDNN_TYPE_INT32, 1, 1, true},
            {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, kMany, false, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
            // engine configurations and engines
            {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_ENGINE_DESCRIPTOR},
            {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, kMany, true, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR},
            {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, 1, false},
            {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
            {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1,
             true},
            {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_SM_COUNT_TARGET, CUDNN_TYPE_INT32, CUDNN_TYPE_INT32, 1,
             1, true},
            {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
             CUDNN_TYPE_NUMERICAL_NOTE, 0, kMany, false},
            {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
             CUDNN_TYPE_BEHAVIOR_NOTE, 0, kMany, false},
            {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
             CUDNN_TYPE_KNOB_TYPE, 1, 1, true},
            {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, 1, true},
            // execution plans and variant packs
            {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
             CUDNN_TYPE_HANDLE, 1, 1, true},
            {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
             CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
             CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
            {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, 1, false},
            {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
             CUDNN_TYPE_INT64, 1, kMany, true},
            {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
             CUDNN_TYPE_VOID_PTR, 1, kMany, true},
            {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
             CUDNN_TYPE_VOID_PTR, 1, 1, true},
        };
        add_conv_op_rules(v);
        return v;
    }();
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

size_t dtype_size(cudnnDataType_t t) {
    switch (t) {
        case CUDNN_DATA_FLOAT: return 4;
        case CUDNN_DATA_HALF:
        case CUDNN_DATA_BFLOAT16: return 2;
        default: return 0;
    }
}

}  // namespace sfemu::cudnn
