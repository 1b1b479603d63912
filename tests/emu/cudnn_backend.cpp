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
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/emu/cudnn_emu.h"
#include "tests/emu/emu_internal.h"
#include "tests/emu/streams.h"

namespace sfemu::cudnn {

namespace {

std::mutex g_mu;  // descriptors and handles may be used from several host threads
std::set<const cudnnContext*> g_handles;
std::map<const void*, std::shared_ptr<Desc>> g_descs;  // live descriptors by handle value

std::shared_ptr<Desc> lookup(cudnnBackendDescriptor_t d) {
    auto it = g_descs.find(d);
    return it == g_descs.end() ? nullptr : it->second;
}

}  // namespace

int64_t extent_bytes(const Tensor& t) {
    int64_t last = 0;
    for (size_t i = 0; i < t.dims.size(); ++i) last += (t.dims[i] - 1) * t.strides[i];
    return (last + 1) * static_cast<int64_t>(dtype_size(t.dtype));
}

namespace {

cudnnStatus_t check_binding(const Tensor& t, void* p, const char* role) {
    if (!p)
        return fail(CUDNN_STATUS_BAD_PARAM, "execute: tensor uid %lld (%s) is not in the variant pack",
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

bool live_handle(const cudnnContext* h) { return g_handles.count(h) != 0; }

}  // namespace sfemu::cudnn

using namespace sfemu::cudnn;

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
    std::snprintf(message, max_size, "%s", take_last_error().c_str());
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
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "cudnnBackendSetAttribute: attribute %d cannot be set on descriptor type %d%s",
                    static_cast<int>(name), static_cast<int>(d->type), r ? "" : " (or is not emulated)");
    if (type != r->type && type != r->alt)
        return fail(
            CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute(type %d, attribute %d): attribute type %d, expected %d",
            static_cast<int>(d->type), static_cast<int>(name), static_cast<int>(type), static_cast<int>(r->type));
    if (count < r->min_count || count > r->max_count || (count > 0 && !values))
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "cudnnBackendSetAttribute(type %d, attribute %d): %lld elements (allowed %lld..%lld)",
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
                return fail(CUDNN_STATUS_BAD_PARAM,
                            "cudnnBackendSetAttribute(attribute %d): element %lld is not a live descriptor",
                            static_cast<int>(name), static_cast<long long>(i));
            if (!ref_d->finalized)
                return fail(CUDNN_STATUS_BAD_PARAM,
                            "cudnnBackendSetAttribute(attribute %d): element %lld is not finalized",
                            static_cast<int>(name), static_cast<long long>(i));
            const bool is_op = ref_d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
                               ref_d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
                               ref_d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
            const bool ok = name == CUDNN_ATTR_OPERATIONGRAPH_OPS ? is_op : ref_d->type == r->ref;
            if (!ok)
                return fail(CUDNN_STATUS_BAD_PARAM,
                            "cudnnBackendSetAttribute(attribute %d): element %lld has descriptor type %d",
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
    const cudnnStatus_t s = finalize(*d);
    if (s == CUDNN_STATUS_SUCCESS) d->finalized = true;
    return s;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* out) {
    std::lock_guard<std::mutex> lk(g_mu);
    std::shared_ptr<Desc> d = lookup(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: %p is not a live descriptor", desc);
    if (!d->finalized)
        return fail(CUDNN_STATUS_NOT_INITIALIZED,
                    "cudnnBackendGetAttribute(attribute %d): the descriptor is not finalized", static_cast<int>(name));
    const AttrRule* r = rule_for(d->type, name);
    if (!r)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendGetAttribute: attribute %d of type %d is not emulated",
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
                return fail(CUDNN_STATUS_BAD_PARAM,
                            "cudnnBackendGetAttribute(attribute %d): element %lld is not a live "
                            "descriptor of type %d",
                            static_cast<int>(name), static_cast<long long>(i), static_cast<int>(want));
            fill(*t, i);
        }
        return CUDNN_STATUS_SUCCESS;
    };
    switch (name) {
        case CUDNN_ATTR_ENGINEHEUR_RESULTS:
            if (d->results.empty() && d->counted_only > 0) {  // as the real library: counted, none returned
                *count = requested == 0 ? d->counted_only : 0;
                return CUDNN_STATUS_SUCCESS;
            }
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
    if (!v)
        return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: attribute %d was never set",
                    static_cast<int>(name));
    if (v->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        return fail(CUDNN_STATUS_NOT_SUPPORTED,
                    "cudnnBackendGetAttribute: reading back descriptor attribute %d is not emulated",
                    static_cast<int>(name));
    *count = v->count;
    if (requested > 0)
        std::memcpy(out, v->bytes.data(), attr_size(v->type) * static_cast<size_t>(std::min(v->count, requested)));
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
            const sfemu::Allocation* a =
                pack->ws ? sfemu::find_allocation(pack->ws, static_cast<size_t>(plan->workspace)) : nullptr;
            if (!a || !a->device)
                return fail(CUDNN_STATUS_BAD_PARAM, "execute: the plan needs %lld bytes of device workspace, given %p",
                            static_cast<long long>(plan->workspace), pack->ws);
        }
        stream = handle->stream;
    }
    std::string what = std::string("cudnn ") + op_name(job.op.kind) + " engine " + std::to_string(job.engine);
    // Engine 2's order changes with every run (a replayed graph node too), as atomics would. Launch-only
    // mode (tests/emu/streams.h): validated above, nothing computed.
    const cudaError_t e =
        sfemu::launch_only() ? sfemu::enqueue(stream, what, [] {}) : sfemu::enqueue(stream, what, [job]() mutable {
            job.salt = ++g_executions;
            run_conv(job);
        });
    if (e != cudaSuccess)
        return fail(CUDNN_STATUS_EXECUTION_FAILED, "cudnnBackendExecute: the stream refused the work (%s)",
                    cudaGetErrorName(e));
    return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
