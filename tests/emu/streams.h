// Streams, events and graphs of the CPU emulation (tests/emu/streams.cpp). Work is queued per
// stream and runs only when the host waits for it (a stream/event/device synchronisation, a
// synchronous copy, a query) or when another stream waits for one of its events: the latest moment
// CUDA allows. A host read of device results without the synchronisation CUDA requires, or a
// stream that uses another's output without waiting for its event, therefore sees stale memory.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace sfemu {

// Queues `run` on stream s (null and cudaStreamLegacy: the legacy default stream), or appends it to
// the graph s is capturing. Returns the error CUDA would give (a sync-only operation while
// capturing, an unknown stream).
cudaError_t enqueue(cudaStream_t s, std::string what, std::function<void()> run);
// Runs everything queued on s.
cudaError_t sync_stream(cudaStream_t s);
// Runs every queued operation of every stream (cudaDeviceSynchronize, cudaFree).
cudaError_t sync_device();
// True while any stream captures in a mode that forbids synchronising calls.
bool capture_forbids_sync();
// Marks the captures of every stream invalid (a forbidden call happened during capture).
void invalidate_captures();
// True when s captures into a graph.
bool is_capturing(cudaStream_t s);

// The sticky-free error state behind cudaGetLastError / cudaPeekAtLastError.
cudaError_t set_error(cudaError_t e);

// A lost context (sfemu_lose_context): the sticky error every later launch, copy, allocation and
// synchronisation returns, as CUDA's do after a kernel's illegal address; cudaSuccess while it works.
cudaError_t context_lost();

// Launch-only mode (sfemu_set_launch_only): launches are checked as always (configuration, the sm_90
// build's resources), cuDNN executions validated, then nothing runs; memsets and device-to-device copies
// are skipped; new device allocations are untouched zero pages (mmap'd without reserving memory), so a
// full-size step (tens of GB) fits and costs only the host work around its launches.
bool launch_only();

}  // namespace sfemu

extern "C" {
// Emulation only: makes the context unusable as a faulting kernel would on a GPU (a sticky error,
// e.g. cudaErrorIllegalAddress, which cudaGetLastError does not clear). For tests of what happens
// after such a fault (tests/probe/suite_probe_test.cu); there is no way back within the process.
void sfemu_lose_context(cudaError_t sticky);
// Emulation only: launch-only mode on or off (above). Device memory allocated while it is on keeps no
// results; read only what host code wrote into it. For the full-size launch check
// (tests/emu/step/full_size_launch_test.cpp).
void sfemu_set_launch_only(bool on);
}
