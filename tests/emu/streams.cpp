// Streams, events and stream capture of the CPU emulation (tests/emu/streams.h); the graph API that
// instantiates, replays and describes a captured graph is tests/emu/graphs.cpp.
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
//    cudaErrorStreamCaptureUnjoined. A launch replays the chains interleaved (graphs.cpp).
#include "tests/emu/streams.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <set>
#include <vector>

#include "tests/emu/emu_internal.h"
#include "tests/emu/streams_internal.h"

namespace sfemu {

namespace {

CUstream_st g_legacy;
std::set<CUstream_st*> g_streams;  // user streams alive
std::set<CUevent_st*> g_events;
std::vector<std::unique_ptr<CUevent_st>> g_destroyed_events;
thread_local cudaError_t g_last_error = cudaSuccess;
cudaError_t g_context_lost = cudaSuccess;  // the whole context's, as CUDA's sticky errors are
bool g_launch_only = false;                // sfemu_set_launch_only

}  // namespace

CUstream_st* resolve(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy;
    return g_streams.count(s) ? s : nullptr;
}

namespace {

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

}  // namespace

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

namespace {

bool forbidden_during_capture(const CUstream_st* s) { return s->capture && s->mode != cudaStreamCaptureModeRelaxed; }

}  // namespace

cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) g_last_error = e;
    return e;
}

cudaError_t context_lost() { return g_context_lost; }

cudaError_t enqueue(cudaStream_t stream, std::string what, std::function<void()> run) {
    if (g_context_lost != cudaSuccess) return g_context_lost;
    CUstream_st* s = resolve(stream);
    if (!s) return set_error(cudaErrorInvalidResourceHandle);
    Op op;
    op.what = std::move(what);
    op.run = std::move(run);
    return set_error(push(s, std::move(op)));
}

cudaError_t sync_stream(cudaStream_t stream) {
    if (g_context_lost != cudaSuccess) return g_context_lost;
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
    if (g_context_lost != cudaSuccess) return g_context_lost;
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
    if (g_launch_only) {
        enqueue(cfg.stream, name, [] {});  // checked above; a node of the graph being captured, if any
        return;
    }
    enqueue(cfg.stream, name, [name, cfg, call] { run_grid(name, cfg, *call); });
}

bool launch_only() { return g_launch_only; }

}  // namespace sfemu

using sfemu::set_error;

extern "C" {

cudaError_t cudaGetLastError() {
    if (sfemu::g_context_lost != cudaSuccess) return sfemu::g_context_lost;  // sticky: not cleared
    const cudaError_t e = sfemu::g_last_error;
    sfemu::g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() {
    return sfemu::g_context_lost != cudaSuccess ? sfemu::g_context_lost : sfemu::g_last_error;
}

void sfemu_lose_context(cudaError_t sticky) { sfemu::g_context_lost = sticky; }
void sfemu_set_launch_only(bool on) { sfemu::g_launch_only = on; }

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
