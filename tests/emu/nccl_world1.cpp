// libnccl.so.2 for the CPU emulation (docs/EMULATION.md, "NCCL"): a communicator of one rank, the
// only world a single process can form. Built as a shared library next to sf_emu_step_tests, which
// exports the emulation's stream queue (ENABLE_EXPORTS); runtime/nccl.cpp dlopens it by its real
// name when the test's LD_LIBRARY_PATH puts this folder first. Not compiled into the executable.
//
// What it checks: the calls the project makes, their arguments (a communicator of world 1 and
// rank 0, the unique id it handed out, device buffers holding count elements, a supported type
// and operation), and their place in the stream: ncclAllReduce is queued on the given stream like
// a kernel (ordered, captured into graphs, replayed). The sum over one rank is the input itself:
// an out-of-place call copies, an in-place call leaves the buffer as it is.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "tests/emu/emu_internal.h"
#include "tests/emu/streams.h"

struct ncclComm {
    int nranks = 0, rank = -1;
};

namespace {

std::set<ncclComm*> g_comms;
const char kIdTag[] = "sfemu-nccl-world1";
std::string g_last;

ncclResult_t fail(ncclResult_t r, const std::string& why) {
    g_last = why;
    std::fprintf(stderr, "sfemu NCCL: %s\n", why.c_str());
    return r;
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64: return 8;
        default: return 0;
    }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int* version) {
    if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: null pointer");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId: null pointer");
    std::memset(id, 0, sizeof *id);
    std::memcpy(id->internal, kIdTag, sizeof kIdTag);
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                                     int rank) {
    if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRank: null communicator pointer");
    if (std::memcmp(id.internal, kIdTag, sizeof kIdTag) != 0)
        return fail(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
    if (nranks != 1 || rank != 0)
        return fail(ncclInvalidUsage, "ncclCommInitRank: the emulation forms a world of 1 (asked: rank " +
                                          std::to_string(rank) + " of " + std::to_string(nranks) + ")");
    ncclComm* c = new ncclComm;
    c->nranks = 1;
    c->rank = 0;
    g_comms.insert(c);
    *comm = c;
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!g_comms.erase(comm)) return fail(ncclInvalidArgument, "ncclCommDestroy: not a live communicator");
    delete comm;
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

__attribute__((visibility("default"))) ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
    if (!g_comms.count(comm) || !async) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: bad arguments");
    *async = ncclSuccess;
    return ncclSuccess;
}

__attribute__((visibility("default"))) const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclInvalidArgument: return "invalid argument (sfemu NCCL)";
        case ncclInvalidUsage: return "invalid usage (sfemu NCCL)";
        default: return "error (sfemu NCCL)";
    }
}

__attribute__((visibility("default"))) ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                                                                  ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                                                  cudaStream_t stream) {
    if (!g_comms.count(comm)) return fail(ncclInvalidArgument, "ncclAllReduce: not a live communicator");
    const size_t elem = type_size(type);
    if (elem == 0) return fail(ncclInvalidArgument, "ncclAllReduce: data type not emulated");
    if (op != ncclSum && op != ncclMax && op != ncclMin && op != ncclProd && op != ncclAvg)
        return fail(ncclInvalidArgument, "ncclAllReduce: unknown operation");
    const size_t bytes = count * elem;
    if (count > 0) {
        const sfemu::Allocation* a = sfemu::find_allocation(send, bytes);
        const sfemu::Allocation* b = sfemu::find_allocation(recv, bytes);
        if (!a || !a->device || !b || !b->device)
            return fail(ncclInvalidArgument,
                        "ncclAllReduce: send/recv are not device buffers of " + std::to_string(bytes) + " bytes");
    }
    // One rank: every reduction of one value is the value.
    const cudaError_t e = sfemu::enqueue(stream, "ncclAllReduce (world 1)", [send, recv, bytes] {
        if (send != recv && bytes) std::memmove(recv, send, bytes);
    });
    if (e != cudaSuccess) return fail(ncclUnhandledCudaError, std::string("ncclAllReduce: ") + cudaGetErrorName(e));
    return ncclSuccess;
}

}  // extern "C"
