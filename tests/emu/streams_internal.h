// The emulation's stream, event and graph objects, shared by tests/emu/streams.cpp (streams, events,
// stream capture) and tests/emu/graphs.cpp (the graph API: instantiate, replay, nodes and edges).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

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
// The stream a handle names (null, cudaStreamLegacy, cudaStreamPerThread: the legacy stream), or null
// when it is no live stream.
CUstream_st* resolve(cudaStream_t s);
// Places op on s, or appends it to the graph s is capturing (streams.cpp).
cudaError_t push(CUstream_st* s, Op op);
}  // namespace sfemu
