// Streams, events and CUDA graphs of the CPU emulation (tests/emu/streams.h).
//  - Each stream is a FIFO of operations run as late as CUDA allows (see streams.h).
//  - An event records the generation of its latest cudaEventRecord; waiting for it (host or
//    stream) runs the recording stream until that generation has run.
//  - The legacy default stream orders against blocking streams (cudaStreamCreate without
//    cudaStreamNonBlocking) as in CUDA, by running the other side's queued work first.
//  - Stream capture appends the operations to a graph instead; a launch replays the recorded
//    operations, kernel parameters as captured. Synchronising during a global or thread-local
//    capture fails with cudaErrorStreamCaptureUnsupported and invalidates the capture.
//  - Cross-stream capture as in CUDA: a stream that waits for an event recorded in a capture joins
//    it; each captured operation depends on the previous one of its stream and on the points the
//    stream waited for, so the graph is a DAG of the streams' chains. Ending the capture with a
//    joined stream's last operation not among the origin's ancestors fails with
//    cudaErrorStreamCaptureUnjoined. A launch replays the graph in an order that interleaves its
//    chains (each chain's operations one at a time in turn, every dependency respected; with one
//    chain, capture order): two branches that share memory they should not then disturb each
//    other's results, which a replay in capture order would not show. SF_EMU_GRAPH_ORDER=capture
//    replays in capture order instead.
#include "tests/emu/streams.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <set>
#include <vector>

#include "tests/emu/emu_internal.h"

namespace sfemu {
struct Op {
    std::string what;
    std::function<void()> run;
    CUevent_st* record = nullptr;  // this operation records an event
    CUevent_st* wait = nullptr;    // this operation waits for an event
    uint64_t gen = 0;              // the record's generation, or the one waited for
};
}  // namespace sfemu

struct CUstream_st {
    std::deque<sfemu::Op> queue;
    bool blocking = true;
    bool running = false;           // its queue is being run (a cycle of waits is a deadlock)
    CUgraph_st* capture = nullptr;  // the graph being captured into
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    bool invalidated = false;
    bool capture_origin = false;   // began the capture (else joined it through an event)
    int cap_chain = -1;            // its chain in the graph being captured
    int cap_last = -1;             // its last captured operation (-1: none yet)
    std::vector<int> cap_pending;  // points waited for, dependencies of its next operation
};
struct CUevent_st {
    CUstream_st* stream = nullptr;  // the stream of the latest record
    uint64_t recorded = 0, completed = 0, queried = 0;
    bool timing = true;
    double ms = 0;                      // host time when the latest record ran
    CUgraph_st* captured_in = nullptr;  // recorded during this capture (no replayed operation)
    std::vector<int> captured_point;    // ... after these captured operations (the recording stream's state)
};
struct CUgraphNode_st {
    cudaGraphNodeType type = cudaGraphNodeTypeKernel;
};
struct CUgraph_st {
    std::vector<sfemu::Op> ops;
    std::vector<std::vector<int>> deps;  // per op: the earlier ops it depends on
    std::vector<int> chain;              // per op: the stream chain it was captured on
    int chains = 0;
    std::vector<CUgraphNode_st> nodes;  // one per op, built by cudaGraphGetNodes
};
struct CUgraphExec_st {
    std::vector<sfemu::Op> ops;  // in replay order
};

namespace sfemu {

namespace {

CUstream_st g_legacy;
std::set<CUstream_st*> g_streams;  // user streams alive
std::set<CUevent_st*> g_events;
std::vector<std::unique_ptr<CUevent_st>> g_destroyed_events;
thread_local cudaError_t g_last_error = cudaSuccess;

CUstream_st* resolve(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy;
    return g_streams.count(s) ? s : nullptr;
}

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void drain_until(CUstream_st* s, const std::function<bool()>& done);

void wait_event(CUevent_st* e, uint64_t gen) {
    if (e->completed >= gen) return;
    drain_until(e->stream, [e, gen] { return e->completed >= gen; });
}

void run_front(CUstream_st* s) {
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    if (op.wait) wait_event(op.wait, op.gen);
    if (op.run) op.run();
    if (op.record) {
        op.record->completed = op.gen;
        op.record->ms = now_ms();
    }
}

void drain_until(CUstream_st* s, const std::function<bool()>& done) {
    if (s->running) fatal("streams wait for each other's events in a cycle (a deadlock on the GPU)");
    s->running = true;
    while (!s->queue.empty() && !(done && done())) run_front(s);
    s->running = false;
}

void drain(CUstream_st* s) { drain_until(s, nullptr); }

// The capture point of s now: its last operation and the points it waited for since.
std::vector<int> capture_point(const CUstream_st* s) {
    std::vector<int> p = s->cap_pending;
    if (s->cap_last >= 0) p.push_back(s->cap_last);
    return p;
}

void join_capture(CUstream_st* s, CUgraph_st* g, cudaStreamCaptureMode mode) {
    s->capture = g;
    s->mode = mode;
    s->invalidated = false;
    s->capture_origin = false;
    s->cap_chain = g->chains++;
    s->cap_last = -1;
    s->cap_pending.clear();
}

CUstream_st* capture_origin(const CUgraph_st* g) {
    for (CUstream_st* o : g_streams)
        if (o->capture == g && o->capture_origin) return o;
    return nullptr;
}

// Places op on s (or its capture); records and waits take their generation now, as in CUDA.
cudaError_t push(CUstream_st* s, Op op) {
    if (!s->capture && op.wait && op.wait->captured_in) {  // waits for a point of a capture: joins it
        CUgraph_st* g = op.wait->captured_in;
        const CUstream_st* origin = capture_origin(g);
        if (!origin) return cudaErrorStreamCaptureUnmatched;
        join_capture(s, g, origin->mode);
    }
    if (s->capture) {
        if (op.record) {  // marks a point of the capture; replays record nothing
            op.record->captured_in = s->capture;
            op.record->captured_point = capture_point(s);
            return cudaSuccess;
        }
        if (op.wait) {
            if (op.wait->captured_in != s->capture) {
                s->invalidated = true;
                return cudaErrorStreamCaptureIsolation;  // an event from outside the capture
            }
            for (int d : op.wait->captured_point) s->cap_pending.push_back(d);
            return cudaSuccess;
        }
        CUgraph_st* g = s->capture;
        g->deps.push_back(capture_point(s));
        g->chain.push_back(s->cap_chain);
        s->cap_last = static_cast<int>(g->ops.size());
        s->cap_pending.clear();
        g->ops.push_back(std::move(op));
        return cudaSuccess;
    }
    if (s == &g_legacy) {
        for (CUstream_st* o : g_streams)
            if (o->blocking) drain(o);
    } else if (s->blocking) {
        drain(&g_legacy);
    }
    if (op.record) {
        op.gen = ++op.record->recorded;
        op.record->stream = s;
        op.record->captured_in = nullptr;
    }
    if (op.wait) {
        op.gen = op.wait->recorded;
        if (op.gen == 0) return cudaSuccess;  // never recorded: waiting is a no-op
    }
    s->queue.push_back(std::move(op));
    return cudaSuccess;
}

bool forbidden_during_capture(const CUstream_st* s) { return s->capture && s->mode != cudaStreamCaptureModeRelaxed; }

}  // namespace

cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) g_last_error = e;
    return e;
}

cudaError_t enqueue(cudaStream_t stream, std::string what, std::function<void()> run) {
    CUstream_st* s = resolve(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    Op op;
    op.what = std::move(what);
    op.run = std::move(run);
    return set_error(push(s, std::move(op)));
}

cudaError_t sync_stream(cudaStream_t stream) {
    CUstream_st* s = resolve(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (s->capture) {
        s->invalidated = true;
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    if (s == &g_legacy) {
        for (CUstream_st* o : g_streams)
            if (o->blocking) drain(o);
    }
    drain(s);
    return cudaSuccess;
}

cudaError_t sync_device() {
    if (capture_forbids_sync()) {
        invalidate_captures();
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    drain(&g_legacy);
    for (CUstream_st* s : g_streams) drain(s);
    return cudaSuccess;
}

bool capture_forbids_sync() {
    for (const CUstream_st* s : g_streams)
        if (forbidden_during_capture(s)) return true;
    return false;
}

void invalidate_captures() {
    for (CUstream_st* s : g_streams)
        if (forbidden_during_capture(s)) s->invalidated = true;
}

bool is_capturing(cudaStream_t stream) {
    const CUstream_st* s = resolve(stream);
    return s && s->capture;
}

void enqueue_launch(const char* name, const LaunchConfig& cfg, std::shared_ptr<const KernelCall> call) {
    const std::string bad = check_config(cfg);
    if (!bad.empty()) {
        std::fprintf(stderr, "sfemu: launch of %s rejected: %s (grid %u,%u,%u, block %u,%u,%u)\n", name, bad.c_str(),
                     cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z);
        set_error(cudaErrorInvalidConfiguration);
        return;
    }
    const std::string over = check_resources(name, cfg, call->entry());
    if (!over.empty()) {
        std::fprintf(stderr, "sfemu: launch of %s rejected as the GPU would (too many resources requested): %s\n", name,
                     over.c_str());
        set_error(cudaErrorLaunchOutOfResources);
        return;
    }
    enqueue(cfg.stream, name, [name, cfg, call] { run_grid(name, cfg, *call); });
}

}  // namespace sfemu

using sfemu::set_error;

extern "C" {

cudaError_t cudaGetLastError() {
    const cudaError_t e = sfemu::g_last_error;
    sfemu::g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return sfemu::g_last_error; }

// ---- streams ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    if (!s) return set_error(cudaErrorInvalidValue);
    *s = new CUstream_st;
    (*s)->blocking = (flags & cudaStreamNonBlocking) == 0;
    sfemu::g_streams.insert(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!sfemu::g_streams.count(stream)) return set_error(cudaErrorInvalidResourceHandle);
    sfemu::drain(stream);  // CUDA completes the queued work before releasing the stream
    sfemu::g_streams.erase(stream);
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) { return sfemu::sync_stream(s); }

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (s->queue.empty()) return cudaSuccess;
    sfemu::drain(s);  // the next query finds it done
    return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!s || !sfemu::g_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
    sfemu::Op op;
    op.what = "cudaStreamWaitEvent";
    op.wait = e;
    return set_error(sfemu::push(s, std::move(op)));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    if (s == &sfemu::g_legacy) return set_error(cudaErrorStreamCaptureUnsupported);
    if (s->capture) return set_error(cudaErrorIllegalState);
    sfemu::join_capture(s, new CUgraph_st, mode);
    s->capture_origin = true;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!s || !graph) return set_error(cudaErrorInvalidValue);
    if (!s->capture) return set_error(cudaErrorIllegalState);
    CUgraph_st* g = s->capture;
    if (!s->capture_origin) return set_error(cudaErrorStreamCaptureUnmatched);  // a joined stream
    // Every joined stream's work must lead into the origin's: its last operation an ancestor of the
    // origin's capture point.
    std::vector<bool> reach(g->ops.size(), false);
    std::vector<int> todo = sfemu::capture_point(s);
    while (!todo.empty()) {
        const int i = todo.back();
        todo.pop_back();
        if (reach[static_cast<size_t>(i)]) continue;
        reach[static_cast<size_t>(i)] = true;
        for (int d : g->deps[static_cast<size_t>(i)]) todo.push_back(d);
    }
    bool unjoined = false, invalid = s->invalidated;
    for (CUstream_st* o : sfemu::g_streams) {
        if (o->capture != g || o == s) continue;
        if (o->cap_last >= 0 && !reach[static_cast<size_t>(o->cap_last)]) unjoined = true;
        invalid = invalid || o->invalidated;
        o->capture = nullptr;
    }
    s->capture = nullptr;
    for (cudaEvent_t e : sfemu::g_events)
        if (e->captured_in == g) e->captured_in = nullptr;
    if (invalid || unjoined) {
        delete g;
        *graph = nullptr;
        return set_error(unjoined && !invalid ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!s || !status) return set_error(cudaErrorInvalidValue);
    *status = !s->capture      ? cudaStreamCaptureStatusNone
              : s->invalidated ? cudaStreamCaptureStatusInvalidated
                               : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

// ---- graphs ----

// The replay order (see the header comment): chains in turn, each ready operation of a chain run
// before the turn passes on; SF_EMU_GRAPH_ORDER=capture: capture order.
static std::vector<size_t> replay_order(const CUgraph_st* g) {
    const size_t n = g->ops.size();
    std::vector<size_t> order;
    const char* env = std::getenv("SF_EMU_GRAPH_ORDER");
    if (g->chains <= 1 || (env && std::string(env) == "capture")) {
        for (size_t i = 0; i < n; ++i) order.push_back(i);
        return order;
    }
    std::vector<std::deque<size_t>> chain_ops(static_cast<size_t>(g->chains));
    for (size_t i = 0; i < n; ++i) chain_ops[static_cast<size_t>(g->chain[i])].push_back(i);
    std::vector<bool> done(n, false);
    auto ready = [&](size_t i) {
        for (int d : g->deps[i])
            if (!done[static_cast<size_t>(d)]) return false;
        return true;
    };
    while (order.size() < n) {
        bool progressed = false;
        for (auto& q : chain_ops) {
            if (q.empty() || !ready(q.front())) continue;
            order.push_back(q.front());
            done[q.front()] = true;
            q.pop_front();
            progressed = true;
        }
        if (!progressed) {
            std::fprintf(stderr, "sfemu: a captured graph's dependencies form a cycle\n");
            std::abort();
        }
    }
    return order;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!exec || !graph) return set_error(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st;
    for (size_t i : replay_order(graph)) (*exec)->ops.push_back(graph->ops[i]);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!exec || !s) return set_error(cudaErrorInvalidValue);
    for (const sfemu::Op& op : exec->ops) {
        const cudaError_t e = sfemu::push(s, op);
        if (e != cudaSuccess) return set_error(e);
    }
    return cudaSuccess;
}

// A node per captured operation: a copy, a memset, or a kernel (every other operation: kernels, and
// the cuDNN, cuBLASLt and NCCL calls, which launch kernels on a GPU; the emulation counts one each).
// Event records and waits inside a capture are edges, not nodes, as in CUDA.
static void build_nodes(cudaGraph_t graph) {
    if (graph->nodes.size() == graph->ops.size()) return;
    graph->nodes.clear();
    for (const sfemu::Op& op : graph->ops) {
        CUgraphNode_st n;
        if (op.what == "cudaMemcpyAsync")
            n.type = cudaGraphNodeTypeMemcpy;
        else if (op.what == "cudaMemsetAsync")
            n.type = cudaGraphNodeTypeMemset;
        graph->nodes.push_back(n);
    }
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
    if (!graph || !numNodes) return set_error(cudaErrorInvalidValue);
    build_nodes(graph);
    if (!nodes) {
        *numNodes = graph->nodes.size();
        return cudaSuccess;
    }
    const size_t got = std::min(*numNodes, graph->nodes.size());
    for (size_t i = 0; i < *numNodes; ++i) nodes[i] = i < got ? &graph->nodes[i] : nullptr;
    *numNodes = got;
    return cudaSuccess;
}

// The emulated graph's edges are its captured dependencies (one stream: node i -> node i + 1), every
// edge an ordinary (full) dependency. The emulation has no programmatic dependent launch
// (runtime/launch.cuh runs the plain launch), so it never reports a programmatic edge.
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                              cudaGraphEdgeData* edgeData, size_t* numEdges) {
    if (!graph || !numEdges) return set_error(cudaErrorInvalidValue);
    build_nodes(graph);
    std::vector<std::pair<size_t, size_t>> edges;
    for (size_t i = 0; i < graph->deps.size(); ++i)
        for (int d : graph->deps[i]) edges.emplace_back(static_cast<size_t>(d), i);
    if (!from && !to && !edgeData) {
        *numEdges = edges.size();
        return cudaSuccess;
    }
    if (!from || !to) return set_error(cudaErrorInvalidValue);
    const size_t got = std::min(*numEdges, edges.size());
    for (size_t i = 0; i < got; ++i) {
        from[i] = &graph->nodes[edges[i].first];
        to[i] = &graph->nodes[edges[i].second];
        if (edgeData) edgeData[i] = cudaGraphEdgeData{};
    }
    *numEdges = got;
    return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
    if (!node || !type) return set_error(cudaErrorInvalidValue);
    *type = node->type;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
    delete g;
    return cudaSuccess;
}

// ---- events ----

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    if (!e) return set_error(cudaErrorInvalidValue);
    *e = new CUevent_st;
    (*e)->timing = (flags & cudaEventDisableTiming) == 0;
    sfemu::g_events.insert(*e);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!sfemu::g_events.erase(e)) return set_error(cudaErrorInvalidResourceHandle);
    // Operations still queued may refer to it (CUDA lets them complete): kept, not deleted.
    sfemu::g_destroyed_events.emplace_back(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
    CUstream_st* s = sfemu::resolve(stream);
    if (!s || !sfemu::g_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
    sfemu::Op op;
    op.what = "cudaEventRecord";
    op.record = e;
    return set_error(sfemu::push(s, std::move(op)));
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!sfemu::g_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
    if (e->captured_in || sfemu::capture_forbids_sync()) {
        sfemu::invalidate_captures();
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    sfemu::wait_event(e, e->recorded);
    return cudaSuccess;
}

// The first query of a pending record answers cudaErrorNotReady (as a busy GPU would); the next
// one runs the work and answers cudaSuccess, so polling loops end.
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!sfemu::g_events.count(e)) return set_error(cudaErrorInvalidResourceHandle);
    if (e->completed >= e->recorded) return cudaSuccess;
    const bool first = e->queried < e->recorded;
    e->queried = e->recorded;
    if (first) return cudaErrorNotReady;
    sfemu::wait_event(e, e->recorded);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !sfemu::g_events.count(a) || !sfemu::g_events.count(b)) return set_error(cudaErrorInvalidResourceHandle);
    if (!a->timing || !b->timing) return set_error(cudaErrorInvalidResourceHandle);
    if (a->completed < a->recorded || b->completed < b->recorded || !a->recorded || !b->recorded)
        return set_error(cudaErrorNotReady);
    *ms = static_cast<float>(b->ms - a->ms);  // host time of the emulation, not a GPU figure
    return cudaSuccess;
}

}  // extern "C"
