// Exec: where and how an op runs. Backend CPU (reference, fp32, OpenMP threads) or CUDA (stream,
// cuDNN and cuBLASLt handles). Passed by const reference to every op; holds no ownership.
// CUDA-free header: the handle types are forward-declared exactly as the CUDA headers declare them.
#pragma once
#include <string>

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct cudnnContext;
typedef cudnnContext* cudnnHandle_t;
struct cublasLtContext;
typedef cublasLtContext* cublasLtHandle_t;

namespace rt {

class ScopeObserver;  // runtime/profile.h

enum class Backend { Cpu, Cuda };

const char* backend_name(Backend b);
Backend parse_backend(const std::string& s);  // "cpu" | "cuda"; throws otherwise

struct Exec {
    Backend backend = Backend::Cpu;
    int device = -1;                // CUDA device ordinal, -1 on CPU
    cudaStream_t stream = nullptr;  // compute stream
    cudnnHandle_t cudnn = nullptr;
    cublasLtHandle_t cublaslt = nullptr;
    ScopeObserver* observer = nullptr;  // per-layer timing (eager profiling); null normally
    // The project's kernels launched with programmatic dependent launch (runtime/launch.cuh): each
    // may be scheduled while its predecessor on the stream finishes. Off unless asked for
    // (`bench step --pdl`; docs/GPU_STEP.md).
    bool pdl = false;
    // The branch lane this Exec enqueues on (runtime/lanes.h): 0, the compute stream; k > 0, the k-th side
    // stream of a StreamLanes, whose work the network forks from lane 0 and joins back into it. Ops that
    // use shared scratch take lane k's share of it (model::Planner::workspace, model::GpuOps).
    int lane = 0;

    bool is_cuda() const { return backend == Backend::Cuda; }
    static Exec cpu() { return Exec{}; }
};

// True when a CUDA device can be used; otherwise false with the reason in *why.
bool cuda_device_available(std::string* why = nullptr);

// Owns a CUDA stream and the cuDNN/cuBLASLt handles bound to it.
class CudaContext {
public:
    explicit CudaContext(int device = 0);
    ~CudaContext();
    CudaContext(const CudaContext&) = delete;
    CudaContext& operator=(const CudaContext&) = delete;
    const Exec& exec() const { return exec_; }
    void synchronize() const;

private:
    Exec exec_;
};

}  // namespace rt
