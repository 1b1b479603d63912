#include "runtime/lanes.h"

#include "runtime/cuda_check.h"
#include "runtime/log.h"

namespace rt {

StreamLanes::StreamLanes(int n)
    : n_(n), streams_(static_cast<size_t>(n), nullptr), join_(static_cast<size_t>(n), nullptr) {
    SF_CHECK(n >= 2 && n <= kMaxLanes, "StreamLanes: %d lanes (2..%d)", n, kMaxLanes);
    try {
        SF_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
        for (int k = 1; k < n; ++k) {
            SF_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[static_cast<size_t>(k)], cudaStreamNonBlocking));
            SF_CUDA_CHECK(cudaEventCreateWithFlags(&join_[static_cast<size_t>(k)], cudaEventDisableTiming));
        }
    } catch (...) {
        release();
        throw;
    }
}

StreamLanes::~StreamLanes() { release(); }

// Logs and continues (a destructor's path).
void StreamLanes::release() {
    auto report = [](cudaError_t e, const char* what) {
        if (e != cudaSuccess) SF_LOG_ERROR("%s: %s", what, cudaGetErrorString(e));
    };
    for (cudaEvent_t& e : join_)
        if (e) report(cudaEventDestroy(e), "cudaEventDestroy"), e = nullptr;
    for (cudaStream_t& s : streams_)
        if (s) report(cudaStreamDestroy(s), "cudaStreamDestroy"), s = nullptr;
    if (fork_) report(cudaEventDestroy(fork_), "cudaEventDestroy"), fork_ = nullptr;
}

Exec StreamLanes::lane(const Exec& main, int k) const {
    SF_CHECK(k >= 0 && k < n_, "StreamLanes::lane(%d): %d lanes", k, n_);
    SF_CHECK(main.is_cuda() && main.lane == 0, "StreamLanes::lane: forks from a CUDA Exec on lane 0");
    if (k == 0) return main;
    Exec e = main;
    e.stream = streams_[static_cast<size_t>(k)];
    e.lane = k;
    return e;
}

void StreamLanes::fork(const Exec& main, int k) const {
    SF_CHECK(k >= 1 && k <= n_, "StreamLanes::fork(%d): %d lanes", k, n_);
    SF_CHECK(main.is_cuda() && main.lane == 0, "StreamLanes::fork: forks from a CUDA Exec on lane 0");
    if (k == 1) return;
    SF_CUDA_CHECK(cudaEventRecord(fork_, main.stream));
    for (int j = 1; j < k; ++j) SF_CUDA_CHECK(cudaStreamWaitEvent(streams_[static_cast<size_t>(j)], fork_, 0));
}

void StreamLanes::join(const Exec& main, int k) const {
    SF_CHECK(k >= 1 && k <= n_, "StreamLanes::join(%d): %d lanes", k, n_);
    SF_CHECK(main.is_cuda() && main.lane == 0, "StreamLanes::join: joins into a CUDA Exec on lane 0");
    for (int j = 1; j < k; ++j) {
        SF_CUDA_CHECK(cudaEventRecord(join_[static_cast<size_t>(j)], streams_[static_cast<size_t>(j)]));
        SF_CUDA_CHECK(cudaStreamWaitEvent(main.stream, join_[static_cast<size_t>(j)], 0));
    }
}

}  // namespace rt
