// The emulated cuDNN's descriptors (docs/EMULATION.md "cuDNN"): the engine catalogue and what
// finalize checks and computes for each descriptor type (the attribute rules: cudnn_attributes.cpp).
#include <algorithm>
#include <cstdlib>

#include "tests/emu/cudnn_emu.h"

namespace sfemu::cudnn {

// ---- the engine catalogue ----

const std::vector<EngineSpec>& catalogue() {
    static const std::vector<EngineSpec> c = {
        {0, {CUDNN_NUMERICAL_NOTE_TENSOR_CORE}, {{CUDNN_KNOB_TYPE_TILE_SIZE, 0}}},
        {1, {CUDNN_NUMERICAL_NOTE_TENSOR_CORE}, {{CUDNN_KNOB_TYPE_TILE_SIZE, 1}, {CUDNN_KNOB_TYPE_STAGES, 3}}},
        {2,
         {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC},
         {{CUDNN_KNOB_TYPE_SPLIT_K_SLC, 4}}},
        {3, {}, {}},
    };
    return c;
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

// cuDNN 9.19 (measured with the real library for sm_90, docs/CONV_CUDNN.md): no engine for a
// convolution whose x, w and y differ in data type (bf16 x/dy with an fp32 dW included); the
// heuristics still count their list but return none of it.
bool same_data_types(const Graph& g) { return g.op.x.dtype == g.op.w.dtype && g.op.w.dtype == g.op.y.dtype; }

bool engine_supports(int64_t id, const Graph& g) {
    if (id < 0 || id > 3) return false;
    if (!same_data_types(g)) return false;
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

#define SF_EMU_NEED(d, a)                                    \
    do {                                                     \
        const cudnnStatus_t need_s_ = need((d), (a), #a);    \
        if (need_s_ != CUDNN_STATUS_SUCCESS) return need_s_; \
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
                    static_cast<long long>(c.spatial), c.dilation.size(), c.stride.size(), c.pre.size(), c.post.size());
    for (size_t i = 0; i < n; ++i)
        if (c.dilation[i] < 1 || c.stride[i] < 1 || c.pre[i] < 0 || c.post[i] < 0)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "convolution: dim %zu has dilation %lld, stride %lld, padding %lld/%lld", i,
                        static_cast<long long>(c.dilation[i]), static_cast<long long>(c.stride[i]),
                        static_cast<long long>(c.pre[i]), static_cast<long long>(c.post[i]));
    if (c.compute != CUDNN_DATA_FLOAT)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "convolution: compute type %d is not emulated (FLOAT only)",
                    static_cast<int>(c.compute));
    return CUDNN_STATUS_SUCCESS;
}

const Desc& ref(const Desc& d, AttrName a) { return *attr(d, a)->descs.at(0); }

const OpAttrs& op_attrs(DescType t) {
    for (const OpAttrs& o : conv_op_attrs())
        if (o.type == t) return o;
    return conv_op_attrs().front();  // unreachable: finalize() dispatches only these three types
}

cudnnStatus_t finalize_op(Desc& d) {
    const OpAttrs& at = op_attrs(d.type);
    const OpKind kind = at.kind;
    const AttrName a_alpha = at.alpha, a_beta = at.beta, a_conv = at.conv, a_x = at.x, a_w = at.w, a_y = at.y;
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
        return fail(CUDNN_STATUS_NOT_SUPPORTED,
                    "operation graph of %zu operations: only single convolutions are emulated", ops.descs.size());
    const Desc& op = *ops.descs[0];
    if (op.type != CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR &&
        op.type != CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR &&
        op.type != CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "operation graph: operation type %d is not emulated",
                    static_cast<int>(op.type));
    auto g = std::make_shared<Graph>();
    g->op = op.op;
    g->handle = scalar<cudnnContext*>(*attr(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE));
    if (!live_handle(g->handle)) return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: not a live cuDNN handle");
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
    if (!same_data_types(*d.graph)) {
        d.counted_only = static_cast<int64_t>(engines_for(*d.graph, mode).size());
        return CUDNN_STATUS_SUCCESS;
    }
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
    if (!live_handle(d.handle)) return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: not a live cuDNN handle");
    d.graph = cfg.graph;
    d.engine = cfg.engine;
    d.knobs = cfg.knobs;
    d.workspace = cfg.workspace;
    const std::string why = plan_refusal(d.engine, *d.graph);
    if (!why.empty())
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "execution plan (engine %lld, %s): %s",
                    static_cast<long long>(d.engine), op_name(d.graph->op.kind), why.c_str());
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

cudnnStatus_t finalize(Desc& d) {
    switch (d.type) {
        case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return finalize_tensor(d);
        case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: return finalize_conv(d);
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return finalize_op(d);
        case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return finalize_graph(d);
        case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return finalize_heur(d);
        case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return finalize_engine(d);
        case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return finalize_cfg(d);
        case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: return finalize_knob(d);
        case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return finalize_plan(d);
        case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return finalize_pack(d);
        default:
            return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendFinalize: descriptor type %d is not emulated",
                        static_cast<int>(d.type));
    }
}

}  // namespace sfemu::cudnn
