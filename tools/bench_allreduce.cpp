#include "tools/bench_allreduce.h"

#include <cuda_runtime.h>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/nccl.h"

namespace tools {

double allreduce_bus_factor(int world) {
    SF_CHECK(world >= 1, "allreduce over %d ranks", world);
    return 2.0 * (world - 1) / world;
}

AllreduceTiming allreduce_timing(size_t bytes, int world, int reps, double total_ms) {
    SF_CHECK(reps >= 1 && total_ms > 0, "allreduce timing: %d allreduces in %g ms", reps, total_ms);
    AllreduceTiming t;
    t.world = world;
    t.reps = reps;
    t.bytes = bytes;
    t.ms = total_ms / reps;
    t.algbw_gbps = static_cast<double>(bytes) / (t.ms * 1e-3) / 1e9;
    t.busbw_gbps = t.algbw_gbps * allreduce_bus_factor(world);
    return t;
}

nlohmann::json allreduce_json(const AllreduceTiming& t) {
    return {{"world", t.world},           {"reps", t.reps},
            {"bytes", t.bytes},           {"ms", t.ms},
            {"algbw_gbps", t.algbw_gbps}, {"busbw_gbps", t.busbw_gbps}};
}

AllreduceTiming allreduce_from_json(const nlohmann::json& j) {
    AllreduceTiming t;
    t.world = j.at("world").get<int>();
    t.reps = j.at("reps").get<int>();
    t.bytes = j.at("bytes").get<size_t>();
    t.ms = j.at("ms").get<double>();
    t.algbw_gbps = j.at("algbw_gbps").get<double>();
    t.busbw_gbps = j.at("busbw_gbps").get<double>();
    return t;
}

std::string allreduce_line(const AllreduceTiming& t) {
    return rt::format("allreduce %.1f MB over %d rank%s: %.3f ms (algbw %.1f GB/s, busbw %.1f GB/s)", t.bytes / 1e6,
                      t.world, t.world == 1 ? "" : "s", t.ms, t.algbw_gbps, t.busbw_gbps);
}

namespace {

// Two events destroyed on every exit path.
struct EventPair {
    cudaEvent_t a = nullptr, b = nullptr;
    EventPair() {
        SF_CUDA_CHECK(cudaEventCreate(&a));
        SF_CUDA_CHECK(cudaEventCreate(&b));
    }
    ~EventPair() {
        if (a) cudaEventDestroy(a);
        if (b) cudaEventDestroy(b);
    }
    EventPair(const EventPair&) = delete;
    EventPair& operator=(const EventPair&) = delete;
};

}  // namespace

AllreduceTiming time_allreduce(rt::NcclComm& nccl, float* d, size_t n, cudaStream_t stream, int reps) {
    SF_CHECK(d && n > 0 && reps >= 1, "time_allreduce: %zu floats, %d allreduces", n, reps);
    const EventPair ev;
    SF_CUDA_CHECK(cudaEventRecord(ev.a, stream));
    for (int k = 0; k < reps; ++k) nccl.allreduce_sum(d, n, stream);
    SF_CUDA_CHECK(cudaEventRecord(ev.b, stream));
    SF_CUDA_CHECK(cudaEventSynchronize(ev.b));
    nccl.check_async_error();
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.a, ev.b));
    return allreduce_timing(n * sizeof(float), nccl.world(), reps, ms);
}

}  // namespace tools
