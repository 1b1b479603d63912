// Kernel launches of the project's own CUDA kernels, with Hopper's programmatic dependent launch
// (PDL) when the Exec asks for it (rt::Exec::pdl; docs/GPU_STEP.md, "Programmatic dependent launch").
// Include from .cu files only.
//
//   rt::launch(ex, "bn_act_stats_kernel", bn_act_stats_kernel<R>, grid, block, 0, rows, c, ...);
//
// is `bn_act_stats_kernel<R><<<grid, block, 0, ex.stream>>>(rows, c, ...)` when ex.pdl is false, and
// the same launch with cudaLaunchAttributeProgrammaticStreamSerialization when it is true: the
// kernel's blocks may then be scheduled while the previous kernel on the stream is still finishing
// (during a stream capture only where the launch's predecessors are all kernels: pdl_allowed).
// That is only safe because every kernel launched here starts with rt::pdl_entry() (checked over
// the sources by tests/tools/test_pdl_entry.py):
//   griddepcontrol.wait              wait until the previous grid has completed and its memory is
//                                    visible (returns at once when the launch had no PDL attribute);
//   griddepcontrol.launch_dependents let the next grid's blocks be scheduled (they wait in their own
//                                    pdl_entry for this grid's completion).
// So no kernel touches memory before its predecessor is complete: PDL only hides the launch latency
// between two dependent kernels, never reorders a read or a write. The launch returns its status,
// checked here (rt::Error naming the kernel); nothing allocates or synchronises.
// Under the CPU emulation (SF_EMU) the launch is the emulated one and the two instructions are absent:
// PDL changes no result, so the emulation runs the plain launch.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "runtime/cuda_check.h"
#include "runtime/exec.h"

namespace rt {

// First statement of every kernel launched through rt::launch (see above). sm_90 and newer only;
// the project builds for sm_90.
__device__ __forceinline__ void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#ifndef SF_EMU
// With PDL asked for, whether this launch may carry the attribute: always outside a stream capture;
// inside one only when the launch will depend on exactly one node and it is a kernel node (a
// programmatic edge joins two kernels; after a memset, a copy, the capture's first node or the join of
// branch lanes, several nodes, the launch keeps its ordinary dependencies instead of relying on how the
// capture would treat the attribute there).
inline bool pdl_allowed(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t* deps = nullptr;
    const cudaGraphEdgeData* edges = nullptr;  // asked for, else a dependency with edge data is cudaErrorLossyQuery
    size_t n = 0;
    SF_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, &edges, &n));
    if (status != cudaStreamCaptureStatusActive) return true;
    for (size_t i = 0; i < n; ++i) {
        cudaGraphNodeType t = cudaGraphNodeTypeEmpty;
        SF_CUDA_CHECK(cudaGraphNodeGetType(deps[i], &t));
        if (t != cudaGraphNodeTypeKernel) return false;
    }
    return n == 1;  // several: a join of branch lanes (runtime/lanes.h), whose edges stay ordinary ones
}
#endif

template <class... P, class... A>
void launch(const Exec& ex, const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
#ifdef SF_EMU
    ::sfemu::launch(name, ::sfemu::config(grid, block, smem, ex.stream), kernel, std::forward<A>(args)...);
    const cudaError_t e = cudaGetLastError();
#else
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ex.stream;
    const bool pdl = ex.pdl && pdl_allowed(ex.stream);
    cfg.attrs = pdl ? attr : nullptr;
    cfg.numAttrs = pdl ? 1u : 0u;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
#endif
    if (e != cudaSuccess) throw_cuda(__FILE__, __LINE__, name, e);
}

}  // namespace rt
