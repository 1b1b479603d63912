// Profiling scopes (DESIGN §6): every layer's forward and backward, the loss, the optimizer and
// data movement open an rt::Scope. A scope is an NVTX range (visible in Nsight Systems / Compute
// timelines, named like the PyTorch state_dict prefix: "stage2.fusion.smooth_1_4 fwd") and, when
// the Exec carries a ScopeObserver, also a pair of observer calls (the per-layer timing of
// `slidefuse bench --layers` records CUDA events there). With no profiler attached NVTX calls are
// no-ops behind a function pointer. Scopes enqueue nothing on the stream themselves, so they are
// free inside CUDA-graph capture (the observer is only used in eager mode).
#pragma once
#include <string>

#include "runtime/exec.h"

namespace rt {

class ScopeObserver {
public:
    virtual ~ScopeObserver() = default;
    virtual void begin(const Exec& ex, const char* name) = 0;
    virtual void end(const Exec& ex, const char* name) = 0;
};

class Scope {
public:
    Scope(const Exec& ex, const char* name);
    Scope(const Exec& ex, const std::string& name) : Scope(ex, name.c_str()) {}
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    const Exec& ex_;
    const char* name_;
};

// cudaProfilerStart/Stop around the steps of `--profile-steps a:b` (nsys
// --capture-range=cudaProfilerApi, ncu --profile-from-start off). Checked calls.
void profiler_start();
void profiler_stop();

// "a:b" -> [a, b] (1-based optimizer steps, inclusive); throws naming the problem.
struct StepRange {
    long long first = 0, last = -1;
    bool empty() const { return last < first; }
    bool contains(long long step) const { return step >= first && step <= last; }
};
StepRange parse_step_range(const std::string& s);

}  // namespace rt
