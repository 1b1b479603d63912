// cuDNN convolution plans (kernels/conv_cudnn.h, docs/CONV_CUDNN.md): graph construction per
// (op, accumulation variant), candidate selection, the plan cache and its step-time entry points.
// The pure helpers (plan key, variants, scratch sizes, cuDNN dims) are in kernels/conv_cudnn_plan.cpp,
// the device-free decisions in kernels/conv_cudnn_select.cpp, launches and autotuning in
// kernels/conv_cudnn_tune.cpp.
#include "kernels/conv_cudnn.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <unordered_map>

#include "kernels/conv_cudnn_engine.h"
#include "kernels/conv_cudnn_probe.h"
#include "runtime/cuda_check.h"
#include "runtime/cudnn_graph.h"
#include "runtime/error.h"
#include "runtime/launch_check.h"
#include "runtime/log.h"

namespace kern {

namespace {

using conv_detail::ConvGraph;
using conv_detail::Engine;
using rt::CudnnDesc;
using rt::CudnnEngineConfig;

// ---- graphs and candidates ----

struct Plan {
    ConvPlanKey key;
    Engine e;
    ConvWorkspaceLayout layout;
    size_t scratch = 0;   // scratch bytes at layout.scratch_offset
    int timed = 0;        // candidates timed (here, or by the network whose choice was reused)
    bool reused = false;  // rebuilt from the process store (no autotuning here)
};

std::vector<int64_t> vec4(const int64_t (&a)[4]) { return {a[0], a[1], a[2], a[3]}; }
std::vector<int64_t> vec2(const int64_t (&a)[2]) { return {a[0], a[1]}; }

// Data type of the W tensor: fp32 for wgrad's fp32 outputs, bf16 everywhere else.
cudnnDataType_t w_dtype(ConvOp op, ConvAccum a) {
    return op == ConvOp::Wgrad && (a == ConvAccum::InPlace || a == ConvAccum::ScratchF32) ? CUDNN_DATA_FLOAT
                                                                                          : CUDNN_DATA_BFLOAT16;
}

// Tensors, convolution descriptor and the one operation (no handle, no device needed). False (+ why)
// when cuDNN refuses the operation (e.g. a data-type combination it does not know).
bool build_operation(const ConvShape& s, ConvOp op, ConvAccum a, ConvGraph* g, std::string* why) {
    const ConvCudnnDims d = conv_cudnn_dims(s);
    auto tensor = [](const int64_t(&dims)[4], const int64_t(&st)[4], int64_t uid, cudnnDataType_t t) {
        rt::CudnnTensorSpec spec;
        spec.dtype = t;
        spec.dims = vec4(dims);
        spec.strides = vec4(st);
        spec.uid = uid;
        spec.alignment = static_cast<int64_t>(kConvTensorAlign);
        return rt::cudnn_tensor(spec);
    };
    g->x = tensor(d.x_dims, d.x_strides, kConvUidX, CUDNN_DATA_BFLOAT16);
    g->w = tensor(d.w_dims, d.w_strides, kConvUidW, w_dtype(op, a));
    g->y = tensor(d.y_dims, d.y_strides, kConvUidY, CUDNN_DATA_BFLOAT16);
    rt::CudnnConvSpec cs;
    cs.pre_pad = cs.post_pad = vec2(d.pad);
    cs.stride = vec2(d.stride);
    cs.dilation = vec2(d.dilation);
    g->conv = rt::cudnn_conv_desc(cs);

    const float beta = a == ConvAccum::InPlace ? 1.0f : 0.0f;
    std::string reason;
    if (!conv_cudnn_operation(op, g->x, g->w, g->y, g->conv, beta, &g->op, &reason)) {
        *why = "operation: " + reason;
        return false;
    }
    return true;
}

// build_operation, then the operation graph. False (+ why) when cuDNN refuses either.
bool build_graph(const rt::CudnnTarget& t, const ConvShape& s, ConvOp op, ConvAccum a, ConvGraph* g,
                 std::string* why) {
    if (!build_operation(s, op, a, g, why)) return false;
    std::string reason;
    if (!rt::cudnn_try_op_graph(t, {&g->op}, &g->graph, &reason)) {
        *why = "graph: " + reason;
        return false;
    }
    return true;
}

ConvCandidateInfo candidate_info(const CudnnEngineConfig& c) {
    ConvCandidateInfo i;
    i.nondeterministic = c.has_note(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
    i.demoted = c.has_note(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) ||
                c.has_note(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
    i.runtime_compiled = c.has_behavior(CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION);
    return i;
}

// Finalized plans of one variant, chosen by conv_select_candidates from the heuristics' list (at
// most `limit`). With `only` set, just the configuration of that identity (a stored choice being
// rebuilt for this handle). *report gets a one-line account. The target is the handle plans run on,
// or a device property descriptor (plans inspected, never executed: conv_plan_probe).
std::vector<Engine> variant_engines(const rt::CudnnTarget& t, const ConvShape& s, ConvOp op, ConvAccum a,
                                    const ConvPolicy& policy, int limit, const std::string* only, std::string* report) {
    std::vector<Engine> out;
    auto graph = std::make_shared<ConvGraph>();
    std::string why;
    if (!build_graph(t, s, op, a, graph.get(), &why)) {
        *report = rt::format("%s: %s", conv_accum_name(a), why.c_str());
        return out;
    }
    std::vector<CudnnEngineConfig> cfgs = rt::cudnn_engine_configs(t, graph->graph, &why);
    if (cfgs.empty()) {
        *report = rt::format("%s: no engine configurations (%s)", conv_accum_name(a), why.c_str());
        return out;
    }
    if (only) {  // keep the stored winner alone (gone from the list: nothing qualifies)
        cfgs.erase(
            std::remove_if(cfgs.begin(), cfgs.end(), [&](const CudnnEngineConfig& c) { return c.identity() != *only; }),
            cfgs.end());
        limit = 1;
    }
    std::vector<ConvCandidateInfo> info;
    for (const CudnnEngineConfig& c : cfgs) info.push_back(candidate_info(c));
    std::vector<CudnnDesc> plans(cfgs.size());
    std::vector<size_t> ws(cfgs.size(), 0);
    std::string first_refusal;
    const ConvCandidateChoice ch =
        conv_select_candidates(info, policy.deterministic, policy.max_workspace, limit, [&](size_t i, size_t* bytes) {
            int64_t w = 0;
            if (!rt::cudnn_try_plan(t, cfgs[i], &plans[i], &w, &why)) {
                if (first_refusal.empty()) first_refusal = cfgs[i].identity() + ": " + why;
                return false;
            }
            *bytes = ws[i] = static_cast<size_t>(w);
            return true;
        });
    for (size_t i : ch.kept) {
        Engine e;
        e.accum = a;
        e.graph = graph;
        e.plan = std::move(plans[i]);
        e.cfg = std::move(cfgs[i]);
        e.cudnn_ws = ws[i];
        e.demoted = ch.tier >= 2;
        out.push_back(std::move(e));
    }
    *report = rt::format(
        "%s: %zu configurations, %d nondeterministic excluded, %d over the workspace limit, %d refused%s%s, "
        "%d in later tiers not tried, %zu kept (tier %d)",
        conv_accum_name(a), info.size(), ch.nondeterministic, ch.over_workspace, ch.refused,
        ch.refused ? " (first: " : "", ch.refused ? (first_refusal + ")").c_str() : "", ch.not_tried, out.size(),
        ch.tier);
    return out;
}

std::string no_engine_message(const ConvPlanKey& key, const std::vector<std::string>& reports) {
    const ConvShape& s = key.shape;
    std::string msg = rt::format("ConvPlanCache::prepare(%s): no cuDNN engine qualifies.", key.to_string().c_str());
    for (const std::string& r : reports) msg += " [" + r + "]";
    // bf16 NHWC engines generally move channels in 16-byte vectors (8 x bf16).
    if (s.cin % 8 != 0)
        msg += rt::format(
            " Hint: Cin=%d is not a multiple of 8: pad x to (N,H,W,%d) and w to (Cout,k,k,%d) with zero channels "
            "and prepare the padded shape (docs/CONV_CUDNN.md).",
            s.cin, static_cast<int>(conv_align_up(s.cin, 8)), static_cast<int>(conv_align_up(s.cin, 8)));
    if (s.cout % 8 != 0)
        msg += rt::format(
            " Hint: Cout=%d is not a multiple of 8: pad w with zero filters to Cout=%d and ignore the extra output "
            "channels (docs/CONV_CUDNN.md).",
            s.cout, static_cast<int>(conv_align_up(s.cout, 8)));
    return msg;
}

// The candidates of every variant in preference order: the tier-0 variants (then the fallback tier
// if they have nothing); without autotuning only the first variant with a plan (its first plan).
// *reports gets one line per variant tried. Throws ConvUnsupported when no variant has a plan.
std::vector<Engine> collect_candidates(const rt::CudnnTarget& t, const ConvShape& s, ConvOp op, const ConvPolicy& pol,
                                       const ConvPlanKey& key, std::vector<std::string>* reports) {
    const std::vector<ConvAccum> variants = conv_accum_variants(op, key.overwrite);
    const size_t tier0 = conv_accum_tier0(op, key.overwrite);
    const int limit = pol.autotune ? pol.max_candidates : 1;
    std::vector<Engine> cands;
    for (size_t v = 0; v < variants.size(); ++v) {
        if (v == tier0 && !cands.empty()) break;
        if (!pol.autotune && !cands.empty()) break;
        std::string report;
        std::vector<Engine> got = variant_engines(t, s, op, variants[v], pol, limit, nullptr, &report);
        reports->push_back(report);
        SF_LOG_DEBUG("conv plan %s: %s", key.to_string().c_str(), report.c_str());
        for (Engine& e : got) cands.push_back(std::move(e));
    }
    if (cands.empty())
        throw ConvUnsupported(rt::format("%s:%d: %s", __FILE__, __LINE__, no_engine_message(key, *reports).c_str()));
    return cands;
}

// collect_candidates on the Exec's handle, then the pick: the first, or with autotuning the fastest
// (every candidate timed). *timed = candidates timed. Overwrite-mode dgrad keys time their
// candidates as they will run (an InPlace fallback with the zeroing of dx).
Engine choose_engine(const rt::Exec& ex, const ConvShape& s, ConvOp op, const ConvPolicy& pol, const ConvPlanKey& key,
                     int* timed) {
    std::vector<std::string> reports;
    std::vector<Engine> cands = collect_candidates(rt::CudnnTarget::of(ex.cudnn), s, op, pol, key, &reports);
    size_t pick = 0;
    *timed = 0;
    if (pol.autotune) {
        const int best = conv_detail::autotune(ex, s, op, cands, pol.autotune_iters, !key.overwrite);
        if (best < 0)
            throw ConvUnsupported(rt::format("%s:%d: ConvPlanCache::prepare(%s): none of the %zu candidate engines ran",
                                             __FILE__, __LINE__, key.to_string().c_str(), cands.size()));
        pick = static_cast<size_t>(best);
        *timed = static_cast<int>(cands.size());
    }
    return std::move(cands[pick]);
}

// The stored winner `c`, finalized again for this handle. False when the heuristics no longer
// list it or it does not finalize (then the key is chosen afresh).
bool rebuild_engine(cudnnHandle_t h, const ConvShape& s, ConvOp op, const ConvPolicy& pol, const ConvPlanChoice& c,
                    Engine* out, std::string* report) {
    std::vector<Engine> got = variant_engines(rt::CudnnTarget::of(h), s, op, c.accum, pol, 1, &c.engine, report);
    if (got.empty()) return false;
    *out = std::move(got.front());
    out->ms = c.ms;
    return true;
}

}  // namespace

bool conv_cudnn_operation_ok(const ConvShape& s, ConvOp op, ConvAccum a, std::string* why) {
    std::vector<ConvAccum> vs = conv_accum_variants(op);
    if (op == ConvOp::Dgrad)
        for (ConvAccum v : conv_accum_variants(op, true)) vs.push_back(v);
    SF_CHECK(std::find(vs.begin(), vs.end(), a) != vs.end(), "conv_cudnn_operation_ok: %s is not a variant of %s",
             conv_accum_name(a), conv_op_name(op));
    ConvGraph g;
    std::string reason;
    const bool ok = build_operation(s, op, a, &g, &reason);
    if (why) *why = reason;
    return ok;
}

// ---- plans inspected, not executed (a device property descriptor, or a handle) ----

ConvPlanProbe conv_plan_probe(const rt::CudnnTarget& target, const ConvShape& s, ConvOp op, bool overwrite,
                              const ConvPolicy& policy) {
    s.validate();
    ConvPlanProbe out;
    out.key = conv_plan_key(op, s, policy, overwrite);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        std::vector<Engine> cands =
            collect_candidates(target, s, op, policy, out.key, &out.reports);
        const Engine& e = cands.front();  // the heuristics' first: what a run without autotuning takes
        out.ok = true;
        out.accum = e.accum;
        out.engine = e.cfg.describe() + (e.demoted ? " (demoted note, no alternative)" : "");
        out.cudnn_ws = e.cudnn_ws;
        out.scratch = conv_scratch_bytes(op, e.accum, s);
        out.workspace = conv_workspace_layout(e.cudnn_ws, out.scratch).total;
        out.candidates = static_cast<int>(cands.size());
        for (const Engine& c : cands)
            out.max_workspace = std::max(out.max_workspace, conv_workspace_layout(c.cudnn_ws,
                                                                                  conv_scratch_bytes(op, c.accum, s))
                                                                .total);
    } catch (const ConvUnsupported& err) {
        out.ok = false;
        out.error = err.what();
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

// ---- ConvPlanCache ----

struct ConvPlanCache::Impl {
    rt::Exec ex;
    ConvPolicy policy;
    std::unordered_map<ConvPlanKey, std::unique_ptr<Plan>, ConvPlanKeyHash> plans;
    void* workspace = nullptr;
    size_t workspace_size = 0;  // per lane
    int lanes = 1;              // lane k's workspace: workspace + k * workspace_size
    bool workspace_set = false;
    int device = 0;            // cudaGetDevice at construction (part of the process-store key)
    size_t cudnn_version = 0;  // cudnnGetVersion: the library loaded (part of the process-store key)
    PlanTime time;

    const Plan& step_plan(const rt::Exec& e, const ConvShape& s, ConvOp op, const char* fn,
                          bool overwrite = false) const {
        const ConvPlanKey key = conv_plan_key(op, s, policy, overwrite);
        // Lane 0: the Exec the plans were built with. Lane k > 0 (rt::StreamLanes): the same handle, its own
        // stream, which the launch binds the handle to for the call (rt::CudnnStreamScope).
        SF_CHECK(e.is_cuda() && e.cudnn == ex.cudnn && (e.lane == 0 ? e.stream == ex.stream : e.stream != nullptr),
                 "ConvPlanCache::%s(%s): called with a different Exec (%s, handle %p, stream %p, lane %d) than the "
                 "plans were built for (handle %p, stream %p)",
                 fn, key.to_string().c_str(), rt::backend_name(e.backend), static_cast<void*>(e.cudnn),
                 static_cast<void*>(e.stream), e.lane, static_cast<void*>(ex.cudnn), static_cast<void*>(ex.stream));
        SF_CHECK(e.lane >= 0 && e.lane < lanes, "ConvPlanCache::%s(%s): lane %d, the workspace was set for %d lane(s)",
                 fn, key.to_string().c_str(), e.lane, lanes);
        // cuDNN enqueues on the handle's current stream, not on e.stream: a handle rebound elsewhere
        // would put the conv outside the stream order (and outside a CUDA-graph capture).
        cudaStream_t bound = nullptr;
        SF_CUDNN_CHECK(cudnnGetStream(e.cudnn, &bound));
        SF_CHECK(bound == ex.stream,
                 "ConvPlanCache::%s(%s): the cuDNN handle is now bound to stream %p, not the plans' %p", fn,
                 key.to_string().c_str(), static_cast<void*>(bound), static_cast<void*>(ex.stream));
        const auto it = plans.find(key);
        if (it == plans.end() && op == ConvOp::Dgrad) {  // the other mode prepared: say which is missing
            const ConvPlanKey other = conv_plan_key(op, s, policy, !overwrite);
            if (plans.count(other)) conv_check_dgrad_mode(other, !overwrite);
        }
        SF_CHECK(it != plans.end(), "ConvPlanCache::%s: no plan for %s (prepare() it at plan time)", fn,
                 key.to_string().c_str());
        SF_CHECK(workspace_set, "ConvPlanCache::%s(%s): set_workspace() was not called", fn, key.to_string().c_str());
        return *it->second;
    }
    void* lane_workspace(const rt::Exec& e) const {
        return workspace ? static_cast<uint8_t*>(workspace) + static_cast<size_t>(e.lane) * workspace_size : nullptr;
    }
};

ConvPlanCache::ConvPlanCache(const rt::Exec& ex, const ConvPolicy& policy) : impl_(std::make_unique<Impl>()) {
    SF_CHECK(ex.is_cuda(), "ConvPlanCache needs a CUDA Exec (got %s): cuDNN plans are built on a device",
             rt::backend_name(ex.backend));
    SF_CHECK(ex.cudnn != nullptr && ex.stream != nullptr, "ConvPlanCache: the CUDA Exec has no cuDNN handle or stream");
    SF_CHECK(policy.autotune_iters >= 1, "ConvPlanCache: autotune_iters must be >= 1, got %d", policy.autotune_iters);
    cudaStream_t bound = nullptr;
    SF_CUDNN_CHECK(cudnnGetStream(ex.cudnn, &bound));
    SF_CHECK(bound == ex.stream, "ConvPlanCache: the cuDNN handle is bound to stream %p, the Exec's stream is %p",
             static_cast<void*>(bound), static_cast<void*>(ex.stream));
    SF_CHECK(policy.max_candidates >= 1, "ConvPlanCache: max_candidates must be >= 1, got %d", policy.max_candidates);
    SF_CUDA_CHECK(cudaGetDevice(&impl_->device));
    impl_->cudnn_version = cudnnGetVersion();
    impl_->ex = ex;
    impl_->policy = policy;
}

ConvPlanCache::~ConvPlanCache() = default;

size_t ConvPlanCache::prepare(const ConvShape& s, ConvOp op, bool overwrite) {
    s.validate();
    const ConvPlanKey key = conv_plan_key(op, s, impl_->policy, overwrite);
    const auto found = impl_->plans.find(key);
    if (found != impl_->plans.end()) return found->second->layout.total;
    SF_CHECK(!impl_->workspace_set,
             "ConvPlanCache::prepare(%s): the workspace is already set; prepare every shape "
             "before set_workspace()",
             key.to_string().c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const ConvPolicy& pol = impl_->policy;
    const ConvPlanStoreKey skey{key, impl_->device, impl_->cudnn_version};
    auto plan = std::make_unique<Plan>();
    plan->key = key;
    Engine fresh;
    bool built = false;
    const ConvPlanChoice choice = ConvPlanStore::process().get_or_build(
        skey,
        [&] {
            fresh = choose_engine(impl_->ex, s, op, pol, key, &plan->timed);
            return ConvPlanChoice{fresh.cfg.identity(), fresh.accum, fresh.ms, plan->timed};
        },
        &built);
    std::string report;
    if (built) {
        plan->e = std::move(fresh);
    } else if (rebuild_engine(impl_->ex.cudnn, s, op, pol, choice, &plan->e, &report)) {
        plan->timed = choice.timed;
        plan->reused = true;
    } else {  // the library no longer offers the stored engine for this handle: choose afresh
        SF_LOG_WARN("conv plan %s: the stored engine (%s) did not rebuild (%s); choosing again",
                    key.to_string().c_str(), choice.engine.c_str(), report.c_str());
        plan->e = choose_engine(impl_->ex, s, op, pol, key, &plan->timed);
        ConvPlanStore::process().put(skey, {plan->e.cfg.identity(), plan->e.accum, plan->e.ms, plan->timed});
    }
    if (overwrite && plan->e.accum != ConvAccum::Overwrite)
        SF_LOG_WARN(
            "conv plan %s: no beta=0 cuDNN engine for this shape; the overwrite-mode dgrad falls back to a beta=1 "
            "plan that zeroes dx (%zu bytes) before each call",
            key.to_string().c_str(), s.in().numel() * sizeof(bf16));
    plan->scratch = conv_scratch_bytes(op, plan->e.accum, s);
    plan->layout = conv_workspace_layout(plan->e.cudnn_ws, plan->scratch);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    (plan->reused ? impl_->time.reused : impl_->time.tuned) += 1;
    impl_->time.seconds += sec;
    SF_LOG_DEBUG("conv plan %s: %s in %.3f s (%s)", key.to_string().c_str(), plan->e.cfg.identity().c_str(), sec,
                 plan->reused ? "rebuilt from the process store" : "chosen here");
    const size_t total = plan->layout.total;
    impl_->plans.emplace(key, std::move(plan));
    return total;
}

ConvPlanCache::PlanTime ConvPlanCache::plan_time() const { return impl_->time; }

size_t ConvPlanCache::workspace_bytes() const {
    size_t m = 0;
    for (const auto& kv : impl_->plans) m = std::max(m, kv.second->layout.total);
    return m;
}

void ConvPlanCache::set_workspace(void* device_ptr, size_t bytes, int lanes) {
    SF_CHECK(!impl_->workspace_set, "ConvPlanCache::set_workspace: called twice");
    SF_CHECK(lanes >= 1 && (lanes == 1 || bytes % kConvWorkspaceAlign == 0),
             "ConvPlanCache::set_workspace: %d lane(s) of %zu bytes (lanes >= 1, each a multiple of %zu bytes)", lanes,
             bytes, kConvWorkspaceAlign);
    const size_t need = workspace_bytes();
    SF_CHECK(bytes >= need, "ConvPlanCache::set_workspace: %zu bytes given, the prepared plans need %zu", bytes, need);
    SF_CHECK(need == 0 || device_ptr != nullptr, "ConvPlanCache::set_workspace: null workspace (%zu bytes needed)",
             need);
    SF_CHECK(reinterpret_cast<uintptr_t>(device_ptr) % kConvWorkspaceAlign == 0,
             "ConvPlanCache::set_workspace: workspace %p is not %zu-byte aligned", device_ptr, kConvWorkspaceAlign);
    impl_->workspace = device_ptr;
    impl_->workspace_size = bytes;
    impl_->lanes = lanes;
    impl_->workspace_set = true;
}

void ConvPlanCache::forward(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* w, bf16* y) {
    const Plan& p = impl_->step_plan(ex, s, ConvOp::Fprop, "forward");
    SF_CHECK(rt::aligned(x, kConvTensorAlign) && rt::aligned(w, kConvTensorAlign) && rt::aligned(y, kConvTensorAlign),
             "ConvPlanCache::forward(%s): x %p, w %p, y %p must be non-null and 16-byte aligned",
             p.key.to_string().c_str(), static_cast<const void*>(x), static_cast<const void*>(w),
             static_cast<void*>(y));
    const rt::CudnnStreamScope on_lane(ex.cudnn, ex.stream, impl_->ex.stream);  // a branch lane's stream
    conv_detail::launch(ex, s, ConvOp::Fprop, p.e, x, w, y, impl_->lane_workspace(ex), nullptr);
}

void ConvPlanCache::backward_data(const rt::Exec& ex, const ConvShape& s, const bf16* dy, const bf16* w, bf16* dx,
                                  bool accumulate) {
    const Plan& p = impl_->step_plan(ex, s, ConvOp::Dgrad, "backward_data", !accumulate);
    SF_CHECK(rt::aligned(dy, kConvTensorAlign) && rt::aligned(w, kConvTensorAlign) && rt::aligned(dx, kConvTensorAlign),
             "ConvPlanCache::backward_data(%s): dy %p, w %p, dx %p must be non-null and 16-byte aligned",
             p.key.to_string().c_str(), static_cast<const void*>(dy), static_cast<const void*>(w),
             static_cast<void*>(dx));
    const rt::CudnnStreamScope on_lane(ex.cudnn, ex.stream, impl_->ex.stream);  // a branch lane's stream
    conv_detail::launch(ex, s, ConvOp::Dgrad, p.e, dy, w, dx, impl_->lane_workspace(ex), nullptr, accumulate);
}

void ConvPlanCache::backward_filter(const rt::Exec& ex, const ConvShape& s, const bf16* x, const bf16* dy, float* dw) {
    const Plan& p = impl_->step_plan(ex, s, ConvOp::Wgrad, "backward_filter");
    SF_CHECK(rt::aligned(x, kConvTensorAlign) && rt::aligned(dy, kConvTensorAlign) && rt::aligned(dw, kConvTensorAlign),
             "ConvPlanCache::backward_filter(%s): x %p, dy %p, dw %p must be non-null and 16-byte aligned",
             p.key.to_string().c_str(), static_cast<const void*>(x), static_cast<const void*>(dy),
             static_cast<void*>(dw));
    const rt::CudnnStreamScope on_lane(ex.cudnn, ex.stream, impl_->ex.stream);  // a branch lane's stream
    conv_detail::launch(ex, s, ConvOp::Wgrad, p.e, x, dy, dw, impl_->lane_workspace(ex), nullptr);
}

double ConvPlanCache::measured_ms(const ConvShape& s, ConvOp op, bool overwrite) const {
    const ConvPlanKey key = conv_plan_key(op, s, impl_->policy, overwrite);
    const auto it = impl_->plans.find(key);
    SF_CHECK(it != impl_->plans.end(), "ConvPlanCache::measured_ms: no plan for %s", key.to_string().c_str());
    return it->second->e.ms;
}

size_t ConvPlanCache::overwrite_zeroed_bytes(const ConvShape& s) const {
    const ConvPlanKey key = conv_plan_key(ConvOp::Dgrad, s, impl_->policy, true);
    const auto it = impl_->plans.find(key);
    SF_CHECK(it != impl_->plans.end(), "ConvPlanCache::overwrite_zeroed_bytes: no plan for %s",
             key.to_string().c_str());
    return it->second->e.accum == ConvAccum::InPlace ? s.in().numel() * sizeof(bf16) : 0;
}

std::vector<std::string> ConvPlanCache::describe() const {
    std::vector<std::string> out;
    for (const auto& kv : impl_->plans) {
        const Plan& p = *kv.second;
        std::string timing =
            p.timed ? rt::format("%.4f ms (fastest of %d timed%s)", p.e.ms, p.timed, p.reused ? ", choice reused" : "")
                    : std::string("not timed (heuristics' first)");
        out.push_back(rt::format("%s | %s%s | %s | ws %zu B (cudnn %zu + scratch %zu) | %s", p.key.to_string().c_str(),
                                 p.e.cfg.describe().c_str(), p.e.demoted ? " (demoted note, no alternative)" : "",
                                 conv_accum_name(p.e.accum), p.layout.total, p.e.cudnn_ws, p.scratch, timing.c_str()));
    }
    std::sort(out.begin(), out.end());
    return out;
}

size_t ConvPlanCache::size() const { return impl_->plans.size(); }

}  // namespace kern
