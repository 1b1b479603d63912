// NCCL between the GPUs of a data-parallel job: the CUDA step's gradient allreduce (docs/GPU_STEP.md,
// "Data parallel"). One rank per GPU; rank r takes the GPU of its node-local rank.
//
// NCCL is loaded at run time with dlopen("libnccl.so.2") and its few entry points resolved by name
// (as runtime/nvml.cpp loads NVML): the executable never links NCCL, so a GPU host without it runs
// every single-process command, and nothing here is touched unless a communicator is made. The types
// come from the toolkit's nccl.h at compile time (runtime/nccl.cpp only); NCCL >= 2.18 is required at
// run time (collectives in graph capture since 2.9.6; 2.18 is the floor this project supports).
//
//   rt::NcclComm nccl(comm().rank(), comm().world(), device);  // collective: every rank calls it
//   nccl.allreduce_sum(grads, n, stream);                      // enqueued; capturable in a CUDA graph
//
// Every NCCL call is checked (SF_NCCL_CHECK in nccl.cpp): an error throws rt::Error naming the call
// and NCCL's description.
#pragma once
#include <cstddef>
#include <string>

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct ncclComm;

namespace rt {

constexpr const char* kNcclLibrary = "libnccl.so.2";
constexpr int kNcclMinVersion = 21800;  // NCCL_VERSION(2, 18, 0)

// NCCL's version code as "2.18.3": X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
std::string nccl_version_string(int code);
// Throws unless `code` is at least kNcclMinVersion (names the library and the version found).
void check_nccl_version(int code, const std::string& library);
// Loads `library` (dlopen, then every entry point by dlsym) and returns its version code; throws when
// it cannot be loaded (naming it and LD_LIBRARY_PATH), lacks an entry point, or is older than 2.18.
// kNcclLibrary is loaded once per process and kept; any other name (tests) is loaded and closed again.
int load_nccl(const std::string& library = kNcclLibrary);
// CUDA devices this process sees (0 without a driver or device).
int visible_gpus();
// Throws unless GPU `device` (the node-local rank) is one of the `visible` GPUs of this process.
void check_rank_device(int rank, int device, int visible);

class NcclComm {
public:
    // Collective over rt::comm() (whose world must be `world`): loads NCCL, selects `device`, rank 0
    // makes the unique id and broadcasts it (rt::comm().broadcast), then ncclCommInitRank.
    NcclComm(int rank, int world, int device);
    ~NcclComm();  // ncclCommDestroy (nothing after abort()); logs failures
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    // In place sum over the ranks, enqueued on `stream` (ncclAllReduce, ncclSum; capturable).
    void allreduce_sum(float* d, size_t n, cudaStream_t stream);   // d: (n,) device fp32
    void allreduce_sum(double* d, size_t n, cudaStream_t stream);  // d: (n,) device fp64
    // Throws when NCCL reported an asynchronous error (a peer or the network failed).
    void check_async_error() const;
    // ncclCommAbort: ends in-flight collectives and frees the communicator (error paths).
    void abort();

    int rank() const { return rank_; }
    int world() const { return world_; }
    int device() const { return device_; }
    // "NCCL 2.28.9 (libnccl.so.2): rank 0 of 2, GPU 0"
    std::string describe() const;

private:
    ncclComm* comm_ = nullptr;
    int rank_ = 0, world_ = 1, device_ = 0, version_ = 0;
};

}  // namespace rt
