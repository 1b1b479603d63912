// cuDNN backend descriptor helpers (runtime/cudnn_graph.h).
#include "runtime/cudnn_graph.h"

#include <algorithm>
#include <array>

#include "runtime/device_info.h"
#include "runtime/log.h"

namespace rt {

namespace {

// Throws through the SF_CUDNN_CHECK family's reporter, naming what was being done.
[[noreturn]] void fail(int line, const std::string& what, cudnnStatus_t s) {
    throw_cudnn(__FILE__, line, what.c_str(), s);
}

std::string attr_call(const char* fn, cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t a) {
    return format("%s(descriptor type %d, attribute %d)", fn, static_cast<int>(t), static_cast<int>(a));
}

}  // namespace

std::string cudnn_status_text(cudnnStatus_t s) {
    char detail[512] = {0};
    cudnnGetLastErrorString(detail, sizeof(detail));
    std::string out = cudnnGetErrorString(s);
    if (detail[0]) out += std::string(": ") + detail;
    return out;
}

// ---- CudnnDesc ----

CudnnDesc::CudnnDesc(cudnnBackendDescriptorType_t type) : type_(type) {
    const cudnnStatus_t s = cudnnBackendCreateDescriptor(type, &d_);
    if (s != CUDNN_STATUS_SUCCESS) {
        d_ = nullptr;
        fail(__LINE__, format("cudnnBackendCreateDescriptor(type %d)", static_cast<int>(type)), s);
    }
}

CudnnDesc::~CudnnDesc() {
    if (d_ && cudnnBackendDestroyDescriptor(d_) != CUDNN_STATUS_SUCCESS)
        SF_LOG_ERROR("cudnnBackendDestroyDescriptor failed (descriptor type %d)", static_cast<int>(type_));
}

CudnnDesc::CudnnDesc(CudnnDesc&& o) noexcept : d_(o.d_), type_(o.type_), finalized_(o.finalized_) {
    o.d_ = nullptr;
    o.finalized_ = false;
}

CudnnDesc& CudnnDesc::operator=(CudnnDesc&& o) noexcept {
    if (this != &o) {
        CudnnDesc old(std::move(*this));  // destroyed at scope end
        (void)old;
        d_ = o.d_;
        type_ = o.type_;
        finalized_ = o.finalized_;
        o.d_ = nullptr;
        o.finalized_ = false;
    }
    return *this;
}

CudnnDesc& CudnnDesc::set(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t atype, int64_t count,
                          const void* values) {
    SF_CHECK(d_ != nullptr, "CudnnDesc::set: attribute %d on an empty descriptor", static_cast<int>(a));
    const cudnnStatus_t s = cudnnBackendSetAttribute(d_, a, atype, count, values);
    if (s != CUDNN_STATUS_SUCCESS) fail(__LINE__, attr_call("cudnnBackendSetAttribute", type_, a), s);
    return *this;
}

CudnnDesc& CudnnDesc::set_i64(cudnnBackendAttributeName_t a, int64_t v) { return set(a, CUDNN_TYPE_INT64, 1, &v); }

CudnnDesc& CudnnDesc::set_i64s(cudnnBackendAttributeName_t a, const std::vector<int64_t>& v) {
    return set(a, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
}

CudnnDesc& CudnnDesc::set_float(cudnnBackendAttributeName_t a, float v) { return set(a, CUDNN_TYPE_FLOAT, 1, &v); }

CudnnDesc& CudnnDesc::set_bool(cudnnBackendAttributeName_t a, bool v) { return set(a, CUDNN_TYPE_BOOLEAN, 1, &v); }

CudnnDesc& CudnnDesc::set_data_type(cudnnBackendAttributeName_t a, cudnnDataType_t v) {
    return set(a, CUDNN_TYPE_DATA_TYPE, 1, &v);
}

CudnnDesc& CudnnDesc::set_handle(cudnnBackendAttributeName_t a, cudnnHandle_t h) {
    return set(a, CUDNN_TYPE_HANDLE, 1, &h);
}

CudnnDesc& CudnnDesc::set_desc(cudnnBackendAttributeName_t a, const CudnnDesc& d) {
    SF_CHECK(d.valid(), "CudnnDesc::set_desc: attribute %d given an empty descriptor", static_cast<int>(a));
    cudnnBackendDescriptor_t raw = d.get();
    return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

CudnnDesc& CudnnDesc::set_descs(cudnnBackendAttributeName_t a, const std::vector<cudnnBackendDescriptor_t>& ds) {
    return set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ds.size()), ds.data());
}

void CudnnDesc::finalize() {
    SF_CHECK(d_ != nullptr, "CudnnDesc::finalize: empty descriptor");
    const cudnnStatus_t s = cudnnBackendFinalize(d_);
    if (s != CUDNN_STATUS_SUCCESS)
        fail(__LINE__, format("cudnnBackendFinalize(descriptor type %d)", static_cast<int>(type_)), s);
    finalized_ = true;
}

cudnnStatus_t CudnnDesc::try_finalize(std::string* why) {
    SF_CHECK(d_ != nullptr, "CudnnDesc::try_finalize: empty descriptor");
    const cudnnStatus_t s = cudnnBackendFinalize(d_);
    if (s == CUDNN_STATUS_SUCCESS)
        finalized_ = true;
    else if (why)
        *why = cudnn_status_text(s);
    return s;
}

int64_t CudnnDesc::get(cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t atype, int64_t max_count,
                       void* out) const {
    SF_CHECK(d_ != nullptr, "CudnnDesc::get: attribute %d of an empty descriptor", static_cast<int>(a));
    int64_t count = 0;
    const cudnnStatus_t s = cudnnBackendGetAttribute(d_, a, atype, max_count, &count, out);
    if (s != CUDNN_STATUS_SUCCESS) fail(__LINE__, attr_call("cudnnBackendGetAttribute", type_, a), s);
    return count;
}

int64_t CudnnDesc::get_i64(cudnnBackendAttributeName_t a) const {
    int64_t v = 0;
    get(a, CUDNN_TYPE_INT64, 1, &v);
    return v;
}

// ---- tensors ----

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& dims) {
    SF_CHECK(dims.size() >= 3, "channels_last_strides: need (N, C, spatial...) dims, got %zu", dims.size());
    for (size_t i = 0; i < dims.size(); ++i)
        SF_CHECK(dims[i] > 0, "channels_last_strides: dim %zu is %lld (must be positive)", i,
                 static_cast<long long>(dims[i]));
    std::vector<int64_t> st(dims.size());
    int64_t run = dims[1];  // C innermost
    st[1] = 1;
    for (size_t i = dims.size() - 1; i >= 2; --i) {
        st[i] = run;
        run *= dims[i];
    }
    st[0] = run;
    return st;
}

CudnnDesc cudnn_tensor(const CudnnTensorSpec& spec) {
    SF_CHECK(!spec.dims.empty() && spec.dims.size() == spec.strides.size(),
             "cudnn_tensor(uid %lld): %zu dims but %zu strides", static_cast<long long>(spec.uid), spec.dims.size(),
             spec.strides.size());
    SF_CHECK(spec.alignment > 0 && (spec.alignment & (spec.alignment - 1)) == 0,
             "cudnn_tensor(uid %lld): alignment %lld is not a power of two", static_cast<long long>(spec.uid),
             static_cast<long long>(spec.alignment));
    CudnnDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, spec.dtype)
        .set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, spec.dims)
        .set_i64s(CUDNN_ATTR_TENSOR_STRIDES, spec.strides)
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, spec.uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, spec.alignment)
        .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, spec.is_virtual);
    t.finalize();
    return t;
}

// ---- convolution descriptor ----

CudnnDesc cudnn_conv_desc(const CudnnConvSpec& spec) {
    const size_t nd = spec.pre_pad.size();
    SF_CHECK(nd >= 1 && spec.post_pad.size() == nd && spec.stride.size() == nd && spec.dilation.size() == nd,
             "cudnn_conv_desc: pre_pad/post_pad/stride/dilation sizes %zu/%zu/%zu/%zu must agree", nd,
             spec.post_pad.size(), spec.stride.size(), spec.dilation.size());
    CudnnDesc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const int64_t spatial = static_cast<int64_t>(nd);
    c.set_i64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, spatial)
        .set_data_type(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, spec.compute)
        .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &spec.mode)
        .set_i64s(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, spec.pre_pad)
        .set_i64s(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, spec.post_pad)
        .set_i64s(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, spec.stride)
        .set_i64s(CUDNN_ATTR_CONVOLUTION_DILATIONS, spec.dilation);
    c.finalize();
    return c;
}

// ---- targets ----

void CudnnTarget::validate(const char* fn) const {
    SF_CHECK((handle != nullptr) != (device != nullptr),
             "%s: the cuDNN target needs exactly one of a handle and a "
             "device property descriptor (handle %p, device %p)",
             fn, static_cast<void*>(handle), static_cast<const void*>(device));
    SF_CHECK(
        !device || (device->valid() && device->finalized() && device->type() == CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR),
        "%s: the target's device property descriptor is not a finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR", fn);
}

namespace {

void check_device_prop_runtime(const char* fn) {
    const size_t v = cudnnGetVersion();
    SF_CHECK(v >= kCudnnDevicePropMinRuntime,
             "%s: the cuDNN library loaded is %s; device property descriptors (plans without a device) need cuDNN "
             ">= 9.8",
             fn, cudnn_version_string(v).c_str());
}

}  // namespace

CudnnDesc cudnn_device_prop_from_json(const std::string& json) {
    check_device_prop_runtime("cudnn_device_prop_from_json");
    SF_CHECK(!json.empty(), "cudnn_device_prop_from_json: empty JSON");
    CudnnDesc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    d.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, static_cast<int64_t>(json.size()), json.data());
    std::string why;
    if (d.try_finalize(&why) != CUDNN_STATUS_SUCCESS)
        SF_FAIL(
            "cuDNN refuses this device property JSON (%zu bytes): %s (run with CUDNN_LOGERR_DBG=1 "
            "CUDNN_LOGDEST_DBG=stderr to see the key it misses; configs/devices/README.md lists them)",
            json.size(), why.c_str());
    return d;
}

std::string cudnn_device_prop_json(cudnnHandle_t handle) {
    check_device_prop_runtime("cudnn_device_prop_json");
    SF_CHECK(handle != nullptr, "cudnn_device_prop_json: null handle");
    CudnnDesc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    d.set_handle(CUDNN_ATTR_DEVICEPROP_HANDLE, handle);
    d.finalize();
    const int64_t n = d.get(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, nullptr);
    SF_CHECK(n > 0, "cudnn_device_prop_json: cuDNN reports an empty JSON representation");
    std::string out(static_cast<size_t>(n), '\0');
    const int64_t got = d.get(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &out[0]);
    out.resize(static_cast<size_t>(std::min(got, n)));
    while (!out.empty() && out.back() == '\0') out.pop_back();
    return out;
}

// ---- operation graph ----

bool cudnn_try_op_graph(const CudnnTarget& target, const std::vector<const CudnnDesc*>& ops, CudnnDesc* graph,
                        std::string* why) {
    target.validate("cudnn_try_op_graph");
    SF_CHECK(graph != nullptr && !ops.empty(), "cudnn_try_op_graph: null graph or no ops");
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const CudnnDesc* op : ops) {
        SF_CHECK(op && op->finalized(), "cudnn_try_op_graph: every operation must be finalized first");
        raw.push_back(op->get());
    }
    CudnnDesc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    g.set_descs(CUDNN_ATTR_OPERATIONGRAPH_OPS, raw);
    if (target.handle) g.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, target.handle);
    if (g.try_finalize(why) != CUDNN_STATUS_SUCCESS) return false;
    *graph = std::move(g);
    return true;
}

// ---- engine configurations ----

bool CudnnEngineConfig::has_note(cudnnBackendNumericalNote_t n) const {
    return std::find(numerical_notes.begin(), numerical_notes.end(), n) != numerical_notes.end();
}

bool CudnnEngineConfig::has_behavior(cudnnBackendBehaviorNote_t n) const {
    return std::find(behavior_notes.begin(), behavior_notes.end(), n) != behavior_notes.end();
}

std::string CudnnEngineConfig::identity() const {
    std::string s = format("engine %lld knobs{", static_cast<long long>(engine_id));
    for (size_t i = 0; i < knobs.size(); ++i) {
        const char* name = cudnn_knob_name(knobs[i].first);
        s += (i ? "," : "") + (name ? std::string(name) : format("KNOB_%d", static_cast<int>(knobs[i].first))) +
             format("=%lld", static_cast<long long>(knobs[i].second));
    }
    return s + "}";
}

std::string CudnnEngineConfig::describe() const {
    std::string s = identity() + " notes{";
    for (size_t i = 0; i < numerical_notes.size(); ++i)
        s += std::string(i ? "," : "") + cudnn_numerical_note_name(numerical_notes[i]);
    for (size_t i = 0; i < behavior_notes.size(); ++i)
        s += std::string(i || !numerical_notes.empty() ? "," : "") + cudnn_behavior_note_name(behavior_notes[i]);
    return s + "} [" + cudnn_heur_mode_name(source) + "]";
}

namespace {

// Engine id, notes and knob choices of one finalized engine configuration.
void inspect(CudnnEngineConfig& e) {
    CudnnDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t raw = engine.get();
    e.cfg.get(CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
    e.engine_id = engine.get_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX);

    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> nn{};
    int64_t cnt = engine.get(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                             static_cast<int64_t>(nn.size()), nn.data());
    e.numerical_notes.assign(nn.begin(), nn.begin() + std::min<int64_t>(cnt, static_cast<int64_t>(nn.size())));

    std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> bn{};
    cnt = engine.get(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, static_cast<int64_t>(bn.size()),
                     bn.data());
    e.behavior_notes.assign(bn.begin(), bn.begin() + std::min<int64_t>(cnt, static_cast<int64_t>(bn.size())));

    // Knob choices come back as pre-created KNOB_CHOICE descriptors, one per knob the config sets.
    std::vector<CudnnDesc> choices;
    std::vector<cudnnBackendDescriptor_t> raw_choices;
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
        choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        raw_choices.push_back(choices.back().get());
    }
    cnt = e.cfg.get(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    static_cast<int64_t>(raw_choices.size()), raw_choices.data());
    cnt = std::min<int64_t>(cnt, static_cast<int64_t>(choices.size()));
    for (int64_t i = 0; i < cnt; ++i) {
        cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
        int64_t value = 0;
        choices[i].get(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type);
        choices[i].get(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value);
        e.knobs.emplace_back(type, value);
    }
}

}  // namespace

std::vector<CudnnEngineConfig> cudnn_heuristic_configs(const CudnnTarget& target, const CudnnDesc& graph,
                                                       cudnnBackendHeurMode_t mode, std::string* why) {
    target.validate("cudnn_heuristic_configs");
    SF_CHECK(graph.valid() && graph.finalized(), "cudnn_heuristic_configs: the operation graph must be finalized");
    std::vector<CudnnEngineConfig> out;
    CudnnDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (target.device) heur.set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *target.device);
    std::string reason;
    if (heur.try_finalize(&reason) != CUDNN_STATUS_SUCCESS) {
        if (why) *why = format("%s: %s", cudnn_heur_mode_name(mode), reason.c_str());
        return out;
    }
    // Count first (no array), then fetch into that many pre-created ENGINECFG descriptors.
    const int64_t count = heur.get(CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, nullptr);
    if (count <= 0) {
        if (why) *why = format("%s: no engine configurations", cudnn_heur_mode_name(mode));
        return out;
    }
    std::vector<CudnnDesc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
        cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        raw.push_back(cfgs.back().get());
    }
    // cuDNN may write fewer than it counted (without a usable device it counts but returns none).
    const int64_t got =
        std::min(count, heur.get(CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, raw.data()));
    int64_t unreadable = 0;
    std::string first_error;
    for (int64_t i = 0; i < got; ++i) {
        CudnnEngineConfig e;
        e.cfg = std::move(cfgs[i]);
        e.cfg.assume_finalized();  // heuristics results come back finalized
        e.source = mode;
        try {
            inspect(e);
        } catch (const Error& err) {
            // Without its notes a configuration cannot be filtered (e.g. for determinism): skip it.
            SF_LOG_DEBUG("cudnn_heuristic_configs: skipping result %lld of %s: %s", static_cast<long long>(i),
                         cudnn_heur_mode_name(mode), err.what());
            if (unreadable++ == 0) first_error = err.what();
            continue;
        }
        out.push_back(std::move(e));
    }
    if (out.empty() && why)
        *why = format("%s: %lld configurations counted, %lld returned, %lld unreadable%s%s", cudnn_heur_mode_name(mode),
                      static_cast<long long>(count), static_cast<long long>(got), static_cast<long long>(unreadable),
                      unreadable ? " (first: " : "", unreadable ? (first_error + ")").c_str() : "");
    return out;
}

std::vector<CudnnEngineConfig> cudnn_engine_configs(const CudnnTarget& target, const CudnnDesc& graph,
                                                    std::string* why) {
    std::string why_a, why_fb;
    std::vector<CudnnEngineConfig> out = cudnn_heuristic_configs(target, graph, CUDNN_HEUR_MODE_A, &why_a);
    std::vector<CudnnEngineConfig> fb = cudnn_heuristic_configs(target, graph, CUDNN_HEUR_MODE_FALLBACK, &why_fb);
    for (CudnnEngineConfig& e : fb) {
        const std::string id = e.identity();
        const bool seen =
            std::any_of(out.begin(), out.end(), [&](const CudnnEngineConfig& o) { return o.identity() == id; });
        if (!seen) out.push_back(std::move(e));
    }
    if (out.empty() && why) *why = why_a + "; " + why_fb;
    return out;
}

// ---- execution plans ----

bool cudnn_try_plan(const CudnnTarget& target, const CudnnEngineConfig& cfg, CudnnDesc* plan, int64_t* workspace_bytes,
                    std::string* why) {
    target.validate("cudnn_try_plan");
    SF_CHECK(plan != nullptr && workspace_bytes != nullptr && cfg.cfg.valid(),
             "cudnn_try_plan: null plan/workspace_bytes or empty engine config");
    CudnnDesc p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    p.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg.cfg);
    if (target.handle)
        p.set_handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, target.handle);
    else
        p.set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *target.device);
    if (p.try_finalize(why) != CUDNN_STATUS_SUCCESS) return false;
    const int64_t ws = p.get_i64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
    SF_CHECK(ws >= 0, "cudnn_try_plan: %s reports a negative workspace (%lld)", cfg.identity().c_str(),
             static_cast<long long>(ws));
    *workspace_bytes = ws;
    *plan = std::move(p);
    return true;
}

namespace {

CudnnDesc variant_pack(const int64_t* uids, void* const* ptrs, int n, void* workspace) {
    SF_CHECK(n > 0 && uids && ptrs, "cudnn_execute: empty variant pack");
    for (int i = 0; i < n; ++i)
        SF_CHECK(ptrs[i] != nullptr, "cudnn_execute: null device pointer for tensor uid %lld",
                 static_cast<long long>(uids[i]));
    CudnnDesc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    vp.finalize();
    return vp;
}

}  // namespace

void cudnn_execute(cudnnHandle_t handle, const CudnnDesc& plan, const int64_t* uids, void* const* ptrs, int n,
                   void* workspace) {
    SF_CHECK(handle != nullptr && plan.finalized(), "cudnn_execute: null handle or unfinalized plan");
    CudnnDesc vp = variant_pack(uids, ptrs, n, workspace);
    SF_CUDNN_CHECK(cudnnBackendExecute(handle, plan.get(), vp.get()));
}

CudnnStreamScope::CudnnStreamScope(cudnnHandle_t handle, cudaStream_t stream, cudaStream_t home)
    : handle_(handle), stream_(stream), home_(home) {
    if (stream_ != home_) SF_CUDNN_CHECK(cudnnSetStream(handle_, stream_));
}

CudnnStreamScope::~CudnnStreamScope() {
    if (stream_ != home_ && cudnnSetStream(handle_, home_) != CUDNN_STATUS_SUCCESS)
        SF_LOG_ERROR("cudnnSetStream: the cuDNN handle could not be bound back to stream %p",
                     static_cast<void*>(home_));
}

cudnnStatus_t cudnn_try_execute(cudnnHandle_t handle, const CudnnDesc& plan, const int64_t* uids, void* const* ptrs,
                                int n, void* workspace, std::string* why) {
    SF_CHECK(handle != nullptr && plan.finalized(), "cudnn_try_execute: null handle or unfinalized plan");
    CudnnDesc vp = variant_pack(uids, ptrs, n, workspace);
    const cudnnStatus_t s = cudnnBackendExecute(handle, plan.get(), vp.get());
    if (s != CUDNN_STATUS_SUCCESS && why) *why = cudnn_status_text(s);
    return s;
}

}  // namespace rt
