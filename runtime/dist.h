// The process group of a data-parallel job (docs/DISTRIBUTED.md).
//
// slidefuse runs as one process, or as W ranks launched by an MPI launcher (mpirun, srun with PMIx):
// main() calls init_distributed() once; if the environment says an MPI launcher started this process
// (launcher_world_size() > 1), the MPI plugin (libslidefuse_mpi.so, built next to the
// executable when the build machine has MPI) is loaded with dlopen and MPI initialised; otherwise the
// process is rank 0 of a world of 1 and nothing about MPI is touched. The executable itself never
// links MPI, so a GPU host without MPI runs every single-process command.
//
// Collectives run on the host, in the same order on every rank, and throw rt::Error on failure. A
// watchdog bounds each one: a collective still waiting after collective_timeout_s() (a peer died,
// hangs, or raised) makes this rank print which collective and for how long, then abort the whole job
// (MPI_Abort, exit 1): a job never hangs. The CUDA path's gradient allreduce is NCCL's
// (runtime/nccl.h), bootstrapped through broadcast() here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rt {

enum class ReduceOp { Sum, Max, Min };

class Comm {
public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;
    virtual int world() const = 0;
    virtual int local_rank() const = 0;   // rank among this node's processes: the GPU a rank takes
    virtual int local_world() const = 0;  // processes on this node
    // e.g. "single process" or "MPI (Open MPI v4.1.4): rank 1 of 2, node-local rank 1 of 2"
    virtual std::string describe() const = 0;

    // In place, host memory, every rank the same n.
    virtual void allreduce(float* data, size_t n, ReduceOp op) = 0;
    virtual void allreduce(double* data, size_t n, ReduceOp op) = 0;
    virtual void allreduce(int64_t* data, size_t n, ReduceOp op) = 0;
    virtual void broadcast(void* data, size_t bytes, int root) = 0;
    virtual void barrier() = 0;
    // Ends every rank of the job with exit status `code` (MPI_Abort; a single process: _exit).
    [[noreturn]] virtual void abort(int code) = 0;
};

// The process-wide communicator: the one init_distributed() made, else a world of 1.
Comm& comm();
inline bool distributed() { return comm().world() > 1; }
inline bool is_rank0() { return comm().rank() == 0; }

// The world size an MPI launcher announced in the environment (first one set wins):
// OMPI_COMM_WORLD_SIZE (mpirun), PMI_SIZE (srun --mpi=pmi2), PMIX_SIZE, else SLURM_STEP_NUM_TASKS
// when PMIX_RANK is set (srun --mpi=pmix); 1 when none is. Throws on a value that is not a size.
int launcher_world_size();

// Once, from main(), before any command. Launched by MPI: loads the plugin, MPI_Init, starts the
// watchdog; throws rt::Error when the plugin is missing or MPI fails. Otherwise a world of 1.
void init_distributed();
// From main() at exit (MPI_Finalize after a barrier-free shutdown); safe to call when not initialised.
void finalize_distributed();

// The watchdog bound of one collective (default 600 s, env SF_DIST_TIMEOUT in seconds, or set here).
double collective_timeout_s();
void set_collective_timeout_s(double seconds);
// Another bound while it lives (e.g. the ranks waiting for rank 0 to generate a dataset).
class ScopedCollectiveTimeout {
public:
    explicit ScopedCollectiveTimeout(double seconds) : saved_(collective_timeout_s()) {
        set_collective_timeout_s(seconds);
    }
    ~ScopedCollectiveTimeout() { set_collective_timeout_s(saved_); }
    ScopedCollectiveTimeout(const ScopedCollectiveTimeout&) = delete;
    ScopedCollectiveTimeout& operator=(const ScopedCollectiveTimeout&) = delete;

private:
    double saved_;
};

// The training loop's heartbeat, for what the collective guard cannot see (a host thread blocked in
// a CUDA wait while a GPU collective never completes): while a HeartbeatScope lives in a job of
// several ranks, the watchdog aborts the job when no heartbeat() came for collective_timeout_s().
void heartbeat();
class HeartbeatScope {
public:
    HeartbeatScope();
    ~HeartbeatScope();
    HeartbeatScope(const HeartbeatScope&) = delete;
    HeartbeatScope& operator=(const HeartbeatScope&) = delete;
};

// Convenience over comm(): a string from root to every rank; the logical OR / MAX of a flag.
void broadcast_string(std::string& s, int root = 0);
int64_t allreduce_max(int64_t v);

// Log/console prefix of this rank ("[rank 1/4] "), empty in a world of 1.
std::string rank_prefix();

}  // namespace rt
