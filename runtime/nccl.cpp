// NCCL through dlopen (runtime/nccl.h). nccl.h gives the types and enums at compile time; the
// functions are resolved by name from the library loaded at run time, never linked.
#include "runtime/nccl.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "runtime/cuda_check.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace rt {

namespace {

// The entry points used (all required).
struct NcclApi {
    ncclResult_t (*get_version)(int*) = nullptr;
    ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
    ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
    ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) = nullptr;
    ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
    ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
    const char* (*get_error_string)(ncclResult_t) = nullptr;
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
};

struct NcclLib {
    void* handle = nullptr;
    NcclApi api;
    int version = 0;
};

template <class F>
bool resolve(void* lib, const char* name, F* fn) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
    return *fn != nullptr;
}

// dlopen + dlsym + version check; the handle is closed again when anything fails.
NcclLib open_nccl(const std::string& library) {
    NcclLib l;
    dlerror();
    l.handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
        const char* e = dlerror();
        SF_FAIL(
            "NCCL unavailable: dlopen(\"%s\") failed: %s. Training on more than one GPU needs NCCL >= 2.18: "
            "add the folder holding %s to LD_LIBRARY_PATH (a PyTorch environment has it under "
            "site-packages/nvidia/nccl/lib; scripts/gpu_test.sh adds it)",
            library.c_str(), e ? e : "unknown error", library.c_str());
    }
    NcclApi& a = l.api;
    const char* missing = nullptr;
    if (!resolve(l.handle, "ncclGetVersion", &a.get_version)) missing = "ncclGetVersion";
    if (!resolve(l.handle, "ncclGetUniqueId", &a.get_unique_id)) missing = "ncclGetUniqueId";
    if (!resolve(l.handle, "ncclCommInitRank", &a.comm_init_rank)) missing = "ncclCommInitRank";
    if (!resolve(l.handle, "ncclAllReduce", &a.all_reduce)) missing = "ncclAllReduce";
    if (!resolve(l.handle, "ncclCommDestroy", &a.comm_destroy)) missing = "ncclCommDestroy";
    if (!resolve(l.handle, "ncclCommAbort", &a.comm_abort)) missing = "ncclCommAbort";
    if (!resolve(l.handle, "ncclGetErrorString", &a.get_error_string)) missing = "ncclGetErrorString";
    if (!resolve(l.handle, "ncclCommGetAsyncError", &a.comm_get_async_error)) missing = "ncclCommGetAsyncError";
    int rc = ncclSuccess;
    if (!missing) rc = a.get_version(&l.version);
    if (missing || rc != ncclSuccess) {
        dlclose(l.handle);
        SF_CHECK(!missing, "NCCL: %s not found in %s (not an NCCL library?)", missing, library.c_str());
        SF_FAIL("NCCL: ncclGetVersion failed in %s (error %d)", library.c_str(), rc);
    }
    try {
        check_nccl_version(l.version, library);
    } catch (...) {
        dlclose(l.handle);
        throw;
    }
    return l;
}

std::mutex g_mutex;
NcclLib* g_lib = nullptr;  // kNcclLibrary, kept for the process

const NcclLib& process_lib() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_lib) g_lib = new NcclLib(open_nccl(kNcclLibrary));
    return *g_lib;
}

const NcclApi& api() { return process_lib().api; }

[[noreturn]] void throw_nccl(const char* file, int line, const char* expr, ncclResult_t r) {
    const char* s = g_lib ? g_lib->api.get_error_string(r) : nullptr;
    throw_error(file, line, expr, format("NCCL error %d: %s", static_cast<int>(r), s ? s : "unknown"));
}

}  // namespace

}  // namespace rt

// Throws rt::Error naming the call and ncclGetErrorString of its result.
#define SF_NCCL_CHECK(call)                                                           \
    do {                                                                              \
        const ncclResult_t sf_r_ = (call);                                            \
        if (sf_r_ != ncclSuccess) ::rt::throw_nccl(__FILE__, __LINE__, #call, sf_r_); \
    } while (0)

namespace rt {

std::string nccl_version_string(int code) {
    const int major = code >= 10000 ? code / 10000 : code / 1000;
    const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
    return format("%d.%d.%d", major, minor, code % 100);
}

void check_nccl_version(int code, const std::string& library) {
    SF_CHECK(code >= kNcclMinVersion,
             "%s is NCCL %s; slidefuse needs NCCL >= %s (collectives captured in CUDA graphs): put a newer "
             "libnccl.so.2 first on LD_LIBRARY_PATH",
             library.c_str(), nccl_version_string(code).c_str(), nccl_version_string(kNcclMinVersion).c_str());
}

int load_nccl(const std::string& library) {
    if (library == kNcclLibrary) return process_lib().version;
    NcclLib l = open_nccl(library);
    dlclose(l.handle);
    return l.version;
}

int visible_gpus() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the error; CudaContext / check_cuda_device say why
        n = 0;
    }
    return n;
}

void check_rank_device(int rank, int device, int visible) {
    SF_CHECK(device >= 0 && device < visible,
             "rank %d takes GPU %d (its node-local rank), but this process sees %d GPU(s): launch at most one "
             "rank per visible GPU on each node (CUDA_VISIBLE_DEVICES=%s)",
             rank, device, visible,
             std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset");
}

NcclComm::NcclComm(int rank, int world, int device) : rank_(rank), world_(world), device_(device) {
    SF_CHECK(world >= 1 && rank >= 0 && rank < world, "NCCL communicator: rank %d of a world of %d", rank, world);
    SF_CHECK(world == comm().world() && rank == comm().rank(),
             "NCCL communicator as rank %d of %d, but this process is rank %d of %d (%s)", rank, world, comm().rank(),
             comm().world(), comm().describe().c_str());
    // Library, GPU and (rank 0) unique id first, then every rank learns whether all succeeded: a
    // rank that failed throws its own error, the others a short one, instead of waiting in the
    // broadcast of an id that never comes.
    ncclUniqueId id{};
    std::exception_ptr failed;
    try {
        version_ = process_lib().version;
        check_rank_device(rank, device, visible_gpus());
        SF_CUDA_CHECK(cudaSetDevice(device));  // ncclCommInitRank binds the current device
        if (rank == 0) SF_NCCL_CHECK(api().get_unique_id(&id));
    } catch (const Error&) {
        failed = std::current_exception();
    }
    const int64_t any_failed = allreduce_max(failed ? 1 : 0);
    if (failed) std::rethrow_exception(failed);
    SF_CHECK(any_failed == 0, "NCCL setup failed on another rank (its error says why)");
    comm().broadcast(&id, sizeof(id), 0);
    ncclComm_t c = nullptr;
    SF_NCCL_CHECK(api().comm_init_rank(&c, world, id, rank));
    comm_ = c;
    SF_LOG_INFO("%s", describe().c_str());
}

NcclComm::~NcclComm() {
    if (!comm_) return;
    const ncclResult_t r = api().comm_destroy(comm_);
    if (r != ncclSuccess) SF_LOG_ERROR("ncclCommDestroy: %s", api().get_error_string(r));
}

void NcclComm::allreduce_sum(float* d, size_t n, cudaStream_t stream) {
    SF_CHECK(comm_, "allreduce on an aborted NCCL communicator");
    SF_NCCL_CHECK(api().all_reduce(d, d, n, ncclFloat, ncclSum, comm_, stream));
}

void NcclComm::allreduce_sum(double* d, size_t n, cudaStream_t stream) {
    SF_CHECK(comm_, "allreduce on an aborted NCCL communicator");
    SF_NCCL_CHECK(api().all_reduce(d, d, n, ncclDouble, ncclSum, comm_, stream));
}

void NcclComm::check_async_error() const {
    if (!comm_) return;
    ncclResult_t async = ncclSuccess;
    SF_NCCL_CHECK(api().comm_get_async_error(comm_, &async));
    SF_CHECK(async == ncclSuccess || async == ncclInProgress, "NCCL asynchronous error on rank %d: %s", rank_,
             api().get_error_string(async));
}

void NcclComm::abort() {
    if (!comm_) return;
    ncclComm_t c = comm_;
    comm_ = nullptr;
    SF_NCCL_CHECK(api().comm_abort(c));
}

std::string NcclComm::describe() const {
    return format("NCCL %s (%s): rank %d of %d, GPU %d", nccl_version_string(version_).c_str(), kNcclLibrary, rank_,
                  world_, device_);
}

}  // namespace rt
