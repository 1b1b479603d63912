// StreamLanes: side streams for independent branches of work inside one step (the HRNet stages'
// branches, docs/GPU_STEP.md "Branch lanes"). Lane 0 is the caller's Exec (its stream); lanes 1..n-1 own
// a non-blocking stream each. fork() makes lanes 1..k-1 wait for everything enqueued so far on lane 0,
// join() makes lane 0 wait for everything enqueued on them: cudaEventRecord + cudaStreamWaitEvent, which a
// stream capture turns into graph edges (a side stream that waits for an event recorded in a capture
// joins that capture), so a captured step holds the branches as parallel paths of its graph.
// Events are created once and reused: a wait takes the event's latest record at the time it is enqueued,
// in eager mode and in a capture alike, so one fork event and one join event per lane serve every
// section. Nothing here allocates device memory or synchronises.
#pragma once
#include <vector>

#include "runtime/exec.h"

struct CUevent_st;
typedef CUevent_st* cudaEvent_t;

namespace rt {

class StreamLanes {
public:
    static constexpr int kMaxLanes = 4;  // the widest HRNet stage has four branches
    // n lanes (2..kMaxLanes) on the current device; lane 0 is whatever Exec fork/join are given.
    explicit StreamLanes(int n);
    ~StreamLanes();
    StreamLanes(const StreamLanes&) = delete;
    StreamLanes& operator=(const StreamLanes&) = delete;

    int size() const { return n_; }
    // The Exec of lane k (1..size()-1) for work forked from `main`: main's handles and switches, lane k's
    // stream, lane = k. k = 0 returns main itself.
    Exec lane(const Exec& main, int k) const;
    // Lanes 1..k-1 wait for the work enqueued on main so far (k <= size()).
    void fork(const Exec& main, int k) const;
    // main waits for the work enqueued on lanes 1..k-1 so far.
    void join(const Exec& main, int k) const;

private:
    void release();

    int n_ = 0;
    std::vector<cudaStream_t> streams_;  // [0] unused (lane 0 is the caller's stream)
    cudaEvent_t fork_ = nullptr;
    std::vector<cudaEvent_t> join_;  // [k]: lane k's end of a section
};

}  // namespace rt
