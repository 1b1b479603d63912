// The C interface between slidefuse and its MPI plugin (libslidefuse_mpi.so, runtime/mpi/plugin.cpp).
// The plugin is the only code compiled against mpi.h and linked with libmpi; runtime/dist.cpp loads
// it with dlopen when an MPI launcher started the process, so the executable runs without MPI.
// Every function returns 0 or an MPI error code (error_string() turns it into text).
#pragma once
#include <stddef.h>

#define SF_MPI_PLUGIN_ABI 1
#define SF_MPI_PLUGIN_SYMBOL "sf_mpi_plugin_api"

enum { SF_MPI_FLOAT = 0, SF_MPI_DOUBLE = 1, SF_MPI_INT64 = 2 };
enum { SF_MPI_SUM = 0, SF_MPI_MAX = 1, SF_MPI_MIN = 2 };

struct sf_mpi_api {
    int abi;  // SF_MPI_PLUGIN_ABI
    // MPI_Init_thread; *thread_multiple = 1 when MPI_THREAD_MULTIPLE was granted (then abort() may be
    // called from the watchdog thread while the main thread waits in a collective).
    int (*init)(int* thread_multiple);
    // World rank and size; node-local rank and size (MPI_Comm_split_type shared).
    int (*ranks)(int* rank, int* size, int* local_rank, int* local_size);
    int (*allreduce)(void* buf, size_t count, int dtype, int op);  // in place, MPI_COMM_WORLD
    int (*bcast)(void* buf, size_t bytes, int root);
    int (*barrier)(void);
    void (*abort)(int code);  // MPI_Abort(MPI_COMM_WORLD, code); does not return
    int (*finalize)(void);
    void (*error_string)(int code, char* buf, int len);
    void (*library_version)(char* buf, int len);  // MPI_Get_library_version, first line
};

#ifdef __cplusplus
extern "C" {
#endif
typedef const struct sf_mpi_api* (*sf_mpi_plugin_fn)(void);
#ifdef __cplusplus
}
#endif
