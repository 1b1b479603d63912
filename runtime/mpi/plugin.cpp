// libslidefuse_mpi.so: MPI for slidefuse's host collectives (runtime/mpi/plugin_api.h). Loaded by
// runtime/dist.cpp only when an MPI launcher started the process.
#include <dlfcn.h>
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "runtime/mpi/plugin_api.h"

namespace {

MPI_Comm g_node = MPI_COMM_NULL;

int init(int* thread_multiple) {
    // Open MPI's components are plugins that resolve libmpi's symbols globally: promote libmpi to
    // the global scope (slidefuse dlopens this plugin, and with it libmpi, RTLD_LOCAL otherwise).
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) && info.dli_fname)
        dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return rc;
    *thread_multiple = provided == MPI_THREAD_MULTIPLE ? 1 : 0;
    // Errors come back as codes (the caller throws naming the collective) instead of aborting here.
    rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) return rc;
    return MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &g_node);
}

int ranks(int* rank, int* size, int* local_rank, int* local_size) {
    int rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(g_node, local_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(g_node, local_size);
    return rc;
}

MPI_Datatype dtype_of(int d) { return d == SF_MPI_FLOAT ? MPI_FLOAT : d == SF_MPI_DOUBLE ? MPI_DOUBLE : MPI_INT64_T; }
size_t size_of(int d) { return d == SF_MPI_FLOAT ? 4 : 8; }
MPI_Op op_of(int o) { return o == SF_MPI_SUM ? MPI_SUM : o == SF_MPI_MAX ? MPI_MAX : MPI_MIN; }

// MPI counts are int: large buffers go in chunks (the same chunking on every rank).
constexpr size_t kChunk = static_cast<size_t>(INT_MAX) / 2;

int allreduce(void* buf, size_t count, int dtype, int op) {
    char* p = static_cast<char*>(buf);
    for (size_t done = 0; done < count;) {
        const size_t n = count - done < kChunk ? count - done : kChunk;
        const int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * size_of(dtype), static_cast<int>(n), dtype_of(dtype),
                                     op_of(op), MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return rc;
        done += n;
    }
    return MPI_SUCCESS;
}

int bcast(void* buf, size_t bytes, int root) {
    char* p = static_cast<char*>(buf);
    for (size_t done = 0; done < bytes;) {
        const size_t n = bytes - done < kChunk ? bytes - done : kChunk;
        const int rc = MPI_Bcast(p + done, static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return rc;
        done += n;
    }
    return MPI_SUCCESS;
}

int barrier() { return MPI_Barrier(MPI_COMM_WORLD); }
void abort_job(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
int finalize() {
    if (g_node != MPI_COMM_NULL) MPI_Comm_free(&g_node);
    return MPI_Finalize();
}

void error_string(int code, char* buf, int len) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) n = 0;
    text[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = '\0';
    std::strncpy(buf, n ? text : "unknown MPI error", static_cast<size_t>(len) - 1);
    buf[len - 1] = '\0';
}

void library_version(char* buf, int len) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    if (MPI_Get_library_version(text, &n) != MPI_SUCCESS) n = 0;
    text[n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    int i = 0;
    for (; i < len - 1 && text[i] && text[i] != '\n' && text[i] != ','; ++i) buf[i] = text[i];
    buf[i] = '\0';
}

const sf_mpi_api kApi = {SF_MPI_PLUGIN_ABI, init,      ranks,    allreduce,    bcast,
                         barrier,           abort_job, finalize, error_string, library_version};

}  // namespace

extern "C" __attribute__((visibility("default"))) const sf_mpi_api* sf_mpi_plugin_api() { return &kApi; }
