// rt::Comm implementations (runtime/dist.h): a world of 1, and MPI through the dlopen'ed plugin with
// a watchdog over every collective.
#include "runtime/dist.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/error.h"
#include "runtime/mpi/plugin_api.h"

namespace rt {

namespace {

// A world of 1: every collective is the identity.
class SingleComm : public Comm {
public:
    int rank() const override { return 0; }
    int world() const override { return 1; }
    int local_rank() const override { return 0; }
    int local_world() const override { return 1; }
    std::string describe() const override { return "single process"; }
    void allreduce(float*, size_t, ReduceOp) override {}
    void allreduce(double*, size_t, ReduceOp) override {}
    void allreduce(int64_t*, size_t, ReduceOp) override {}
    void broadcast(void*, size_t, int root) override {
        SF_CHECK(root == 0, "broadcast from rank %d in a world of 1", root);
    }
    void barrier() override {}
    [[noreturn]] void abort(int code) override { _exit(code); }
};

std::atomic<double> g_timeout_s{0};  // 0: not yet read from SF_DIST_TIMEOUT
std::atomic<bool> g_heartbeat_armed{false};
std::atomic<int64_t> g_last_beat_ns{0};  // steady_clock of the last heartbeat()

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double timeout_from_env() {
    const char* v = std::getenv("SF_DIST_TIMEOUT");
    if (!v || !*v) return 600;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    SF_CHECK(end && *end == '\0' && s > 0, "SF_DIST_TIMEOUT expects a number of seconds > 0, got '%s'", v);
    return s;
}

// Where the plugin lives: $SF_MPI_PLUGIN, else next to the executable or one folder up (the test
// binaries live in build/tests, the plugin in build/).
std::string find_plugin() {
    if (const char* p = std::getenv("SF_MPI_PLUGIN"); p && *p) return p;
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return "libslidefuse_mpi.so";
    for (const std::filesystem::path& dir : {exe.parent_path(), exe.parent_path().parent_path()}) {
        const std::filesystem::path p = dir / "libslidefuse_mpi.so";
        if (std::filesystem::exists(p)) return p.string();
    }
    return (exe.parent_path() / "libslidefuse_mpi.so").string();
}

const char* op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : op == ReduceOp::Max ? "max" : "min"; }
int op_code(ReduceOp op) { return op == ReduceOp::Sum ? SF_MPI_SUM : op == ReduceOp::Max ? SF_MPI_MAX : SF_MPI_MIN; }

class MpiComm : public Comm {
public:
    explicit MpiComm(const sf_mpi_api* api) : api_(api) {
        int multiple = 0;
        check(api_->init(&multiple), "MPI_Init_thread");
        thread_multiple_ = multiple != 0;
        check(api_->ranks(&rank_, &world_, &local_rank_, &local_world_), "MPI_Comm_rank/size");
        char v[256];
        api_->library_version(v, sizeof(v));
        version_ = v;
        watchdog_ = std::thread([this] { watch(); });
    }
    ~MpiComm() override {
        {
            std::lock_guard<std::mutex> l(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        if (watchdog_.joinable()) watchdog_.join();
        api_->finalize();
    }
    int rank() const override { return rank_; }
    int world() const override { return world_; }
    int local_rank() const override { return local_rank_; }
    int local_world() const override { return local_world_; }
    std::string describe() const override {
        return format("MPI (%s): rank %d of %d, node-local rank %d of %d", version_.c_str(), rank_, world_, local_rank_,
                      local_world_);
    }
    void allreduce(float* d, size_t n, ReduceOp op) override { reduce(d, n, SF_MPI_FLOAT, op, "float"); }
    void allreduce(double* d, size_t n, ReduceOp op) override { reduce(d, n, SF_MPI_DOUBLE, op, "double"); }
    void allreduce(int64_t* d, size_t n, ReduceOp op) override { reduce(d, n, SF_MPI_INT64, op, "int64"); }
    void broadcast(void* d, size_t bytes, int root) override {
        SF_CHECK(root >= 0 && root < world_, "broadcast from rank %d in a world of %d", root, world_);
        const std::string what = format("broadcast of %zu bytes from rank %d", bytes, root);
        Guard g(this, what);
        check(api_->bcast(d, bytes, root), what.c_str());
    }
    void barrier() override {
        Guard g(this, "barrier");
        check(api_->barrier(), "barrier");
    }
    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        api_->abort(code);
        _exit(code);  // MPI_Abort returned (it should not)
    }

private:
    // Marks a collective under way for the watchdog.
    struct Guard {
        Guard(MpiComm* c, const std::string& what) : c_(c) {
            std::lock_guard<std::mutex> l(c_->mu_);
            c_->what_ = what;
            c_->since_ = std::chrono::steady_clock::now();
            c_->busy_ = true;
        }
        ~Guard() {
            std::lock_guard<std::mutex> l(c_->mu_);
            c_->busy_ = false;
        }
        MpiComm* c_;
    };

    void reduce(void* d, size_t n, int dtype, ReduceOp op, const char* type) {
        const std::string what = format("allreduce (%s) of %zu %s values", op_name(op), n, type);
        Guard g(this, what);
        check(api_->allreduce(d, n, dtype, op_code(op)), what.c_str());
    }

    void check(int rc, const char* what) const {
        if (rc == 0) return;
        char text[512];
        api_->error_string(rc, text, sizeof(text));
        SF_FAIL("rank %d: MPI %s failed: %s", rank_, what, text);
    }

    // Aborts the job when one collective waits longer than the timeout: a peer died, hangs or failed
    // between collectives. Wakes twice a second; costs nothing while no collective is under way.
    void watch() {
        std::unique_lock<std::mutex> l(mu_);
        while (!stop_) {
            cv_.wait_for(l, std::chrono::milliseconds(500));
            if (stop_) continue;
            const double limit = collective_timeout_s();
            const double silent = g_heartbeat_armed.load() ? (now_ns() - g_last_beat_ns.load()) * 1e-9 : 0;
            const double waited =
                busy_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count() : 0;
            if (waited > limit)
                std::fprintf(stderr,
                             "slidefuse: error: [rank %d/%d] %s has waited %.0f s for the other ranks (limit "
                             "SF_DIST_TIMEOUT=%g s): a rank died, hangs or stopped with an error; aborting the job\n",
                             rank_, world_, what_.c_str(), waited, limit);
            else if (silent > limit)
                std::fprintf(stderr,
                             "slidefuse: error: [rank %d/%d] no training step completed for %.0f s (limit "
                             "SF_DIST_TIMEOUT=%g s): this rank waits on its GPU or a peer that hangs; aborting the "
                             "job\n",
                             rank_, world_, silent, limit);
            else
                continue;
            std::fflush(stderr);
            if (thread_multiple_) api_->abort(1);
            _exit(1);  // without MPI_THREAD_MULTIPLE: the launcher ends the others on this exit status
        }
    }

    const sf_mpi_api* api_;
    int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
    bool thread_multiple_ = false;
    std::string version_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool busy_ = false, stop_ = false;
    std::string what_;
    std::chrono::steady_clock::time_point since_;
    std::thread watchdog_;
};

std::unique_ptr<Comm> g_comm;

}  // namespace

Comm& comm() {
    static SingleComm single;
    return g_comm ? *g_comm : single;
}

int launcher_world_size() {
    auto parse = [](const char* var, const char* v) {
        char* end = nullptr;
        const long n = std::strtol(v, &end, 10);
        SF_CHECK(end && *end == '\0' && n >= 1, "%s=%s is not a world size", var, v);
        return static_cast<int>(n);
    };
    // mpirun (Open MPI), srun --mpi=pmi2 (PMI_SIZE), a PMIx launcher that exports its size.
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
        const char* v = std::getenv(var);
        if (v && *v) return parse(var, v);
    }
    // srun --mpi=pmix gives the rank (PMIX_RANK) but not the size: the step's task count.
    const char* pmix_rank = std::getenv("PMIX_RANK");
    const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
    if (pmix_rank && *pmix_rank && tasks && *tasks) return parse("SLURM_STEP_NUM_TASKS", tasks);
    return 1;
}

void init_distributed() {
    if (g_comm) return;
    const int launched = launcher_world_size();
    if (launched <= 1) return;  // a single process, or a world of 1 under mpirun: nothing to share
    collective_timeout_s();     // SF_DIST_TIMEOUT is checked here, not in the watchdog thread
    const std::string path = find_plugin();
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    SF_CHECK(lib,
             "this process was started by an MPI launcher with %d ranks, but the MPI plugin could not be loaded "
             "(%s): build slidefuse on a machine with MPI (scripts/setup.sh installs Open MPI) so that "
             "libslidefuse_mpi.so is built next to the executable, or set SF_MPI_PLUGIN to its path",
             launched, dlerror());
    auto fn = reinterpret_cast<sf_mpi_plugin_fn>(dlsym(lib, SF_MPI_PLUGIN_SYMBOL));
    SF_CHECK(fn, "%s has no %s: not a slidefuse MPI plugin", path.c_str(), SF_MPI_PLUGIN_SYMBOL);
    const sf_mpi_api* api = fn();
    SF_CHECK(api && api->abi == SF_MPI_PLUGIN_ABI, "%s was built for another slidefuse (plugin ABI %d, expected %d)",
             path.c_str(), api ? api->abi : -1, SF_MPI_PLUGIN_ABI);
    g_comm = std::make_unique<MpiComm>(api);
    SF_CHECK(g_comm->world() == launched, "MPI reports a world of %d ranks, the launcher's environment %d",
             g_comm->world(), launched);
}

void finalize_distributed() { g_comm.reset(); }

double collective_timeout_s() {
    double t = g_timeout_s.load();
    if (t <= 0) {
        t = timeout_from_env();
        g_timeout_s.store(t);
    }
    return t;
}
void set_collective_timeout_s(double seconds) {
    SF_CHECK(seconds > 0, "the collective timeout must be > 0 s, got %g", seconds);
    g_timeout_s.store(seconds);
}

void heartbeat() { g_last_beat_ns.store(now_ns()); }

HeartbeatScope::HeartbeatScope() {
    heartbeat();
    g_heartbeat_armed.store(true);
}
HeartbeatScope::~HeartbeatScope() { g_heartbeat_armed.store(false); }

void broadcast_string(std::string& s, int root) {
    int64_t n = static_cast<int64_t>(s.size());
    comm().broadcast(&n, sizeof(n), root);
    s.resize(static_cast<size_t>(n));
    if (n > 0) comm().broadcast(&s[0], s.size(), root);
}

int64_t allreduce_max(int64_t v) {
    comm().allreduce(&v, 1, ReduceOp::Max);
    return v;
}

std::string rank_prefix() {
    if (comm().world() <= 1) return "";
    return "[rank " + std::to_string(comm().rank()) + "/" + std::to_string(comm().world()) + "] ";
}

}  // namespace rt
