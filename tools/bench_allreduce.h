// The gradient allreduce of `slidefuse bench step --world N` (docs/BENCH.md): K back-to-back NCCL
// allreduces of the step's flat fp32 gradient buffer on the step's stream, bracketed by two CUDA
// events after the timed steps, and the bandwidths of nccl-tests (its PERFORMANCE.md):
//   algbw = bytes / time                        (bytes of the buffer, time of one allreduce)
//   busbw = algbw * 2 (N - 1) / N               (what each link carries in a ring; 0 for N = 1)
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace rt {
class NcclComm;
}

namespace tools {

constexpr int kAllreduceReps = 20;  // allreduces timed back to back

struct AllreduceTiming {
    int world = 1;
    int reps = 0;
    size_t bytes = 0;       // of one allreduce
    double ms = 0;          // one allreduce: the K-allreduce window / K
    double algbw_gbps = 0;  // 1e9 bytes/s
    double busbw_gbps = 0;
};

// 2 (N - 1) / N: busbw / algbw of an allreduce over N ranks.
double allreduce_bus_factor(int world);
// From the window `total_ms` of `reps` allreduces of `bytes` each over `world` ranks; throws on
// reps < 1, world < 1 or a non-positive window.
AllreduceTiming allreduce_timing(size_t bytes, int world, int reps, double total_ms);
// {"world", "reps", "bytes", "ms", "algbw_gbps", "busbw_gbps"}
nlohmann::json allreduce_json(const AllreduceTiming& t);
// The inverse of allreduce_json (the text report reads the run's JSON record back).
AllreduceTiming allreduce_from_json(const nlohmann::json& j);
// "allreduce 13.1 MB over 2 ranks: 0.092 ms (algbw 142.6 GB/s, busbw 142.6 GB/s)"
std::string allreduce_line(const AllreduceTiming& t);

// Times `reps` allreduces of d (n floats, device) on `stream` (the step's), after the steps: the
// stream is synchronised. Every rank must call it with the same n and reps. The gradient buffer
// holds zeros between steps (AdamW leaves it zeroed), so summing it changes nothing.
AllreduceTiming time_allreduce(rt::NcclComm& nccl, float* d, size_t n, cudaStream_t stream, int reps);

}  // namespace tools
