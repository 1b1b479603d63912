#include "runtime/dist.h"

#include <cstdlib>
#include <unistd.h>

#include "runtime/error.h"

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
    void broadcast(void*, size_t, int root) override { SF_CHECK(root == 0, "broadcast from rank %d in a world of 1", root); }
    void barrier() override {}
    [[noreturn]] void abort(int code) override { _exit(code); }
};

Comm* g_comm = nullptr;
double g_timeout_s = 600;

}  // namespace

Comm& comm() {
    static SingleComm single;
    return g_comm ? *g_comm : single;
}

int launcher_world_size() {
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
        const char* v = std::getenv(var);
        if (v && *v) return std::atoi(v);
    }
    return 1;
}

void init_distributed() {
    SF_CHECK(launcher_world_size() <= 1, "launched by an MPI launcher, but this build has no MPI support yet");
}

void finalize_distributed() {}

double collective_timeout_s() { return g_timeout_s; }
void set_collective_timeout_s(double seconds) { g_timeout_s = seconds; }

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
