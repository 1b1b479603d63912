// The graph API of the CPU emulation (tests/emu/streams.h, streams_internal.h): instantiating a captured
// graph in its replay order, launching it, and its nodes and edges. A launch replays the graph in an order
// that interleaves its streams' chains (each ready operation of each chain in turn, every dependency
// respected; one chain: capture order), so two branches that share memory they should not disturb each
// other's results, which a replay in capture order would not show; SF_EMU_GRAPH_ORDER=capture replays in
// capture order.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "tests/emu/streams.h"
#include "tests/emu/streams_internal.h"

using sfemu::set_error;

extern "C" {

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

}  // extern "C"
