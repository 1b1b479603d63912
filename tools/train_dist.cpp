#include "tools/train_dist.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/crc32.h"
#include "runtime/dist.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace tools {

model::Metrics reduce_metrics(const model::Metrics& local) {
    if (!rt::distributed()) return local;
    std::array<double, 7> s = local.sums();
    rt::comm().allreduce(s.data(), s.size(), rt::ReduceOp::Sum);
    return model::Metrics::from_sums(static_cast<size_t>(s[0]), static_cast<size_t>(s[1]), static_cast<size_t>(s[2]),
                                     s[3], s[4], s[5], s[6]);
}

void share_bn_buffers(TrainBackend& backend) {
    if (!rt::distributed()) return;
    const model::CheckpointView v = backend.host_state();
    rt::comm().broadcast(v.buffers, v.table->buffer_floats * sizeof(float), 0);
    rt::comm().broadcast(v.counters, v.table->counters * sizeof(int64_t), 0);
    backend.commit_host_state();
}

void check_ranks_agree(const model::CheckpointView& v, int64_t step) {
    if (!rt::distributed()) return;
    const size_t bytes = v.table->flat_size * sizeof(float);
    const uint32_t weights = data::crc32(v.master, bytes);
    uint32_t adam = v.adam_m ? data::crc32(v.adam_m, bytes) : 0;
    if (v.adam_v) adam = data::crc32(v.adam_v, bytes, adam);
    int64_t lo[2] = {weights, adam}, hi[2] = {weights, adam};
    rt::comm().allreduce(lo, 2, rt::ReduceOp::Min);
    rt::comm().allreduce(hi, 2, rt::ReduceOp::Max);
    SF_CHECK(lo[0] == hi[0] && lo[1] == hi[1],
             "the ranks disagree on the %s after step %lld (this rank: weights crc32 %08x, AdamW state %08x): the "
             "data-parallel update must be identical on every rank; the job stops",
             lo[0] != hi[0] ? "weights" : "AdamW state", static_cast<long long>(step), weights, adam);
    SF_LOG_INFO("ranks agree after step %lld: weights and AdamW state identical on all %d ranks (crc32 %08x)",
                static_cast<long long>(step), rt::comm().world(), weights);
}

int agree_on_signal(int local_signal) {
    if (!rt::distributed()) return local_signal;
    return static_cast<int>(rt::allreduce_max(local_signal));
}

Fault fault_from_env() {
    Fault f;
    const char* v = std::getenv("SF_FAULT");
    if (!v || !*v) return f;
    const std::string s = v;
    const size_t at = s.find('@'), colon = s.find(':');
    SF_CHECK(at != std::string::npos && colon != std::string::npos && colon > at,
             "SF_FAULT expects <action>@<rank>:<step>, got '%s'", v);
    const std::string action = s.substr(0, at);
    static const std::pair<const char*, Fault::Action> kActions[] = {{"raise", Fault::Action::Raise},
                                                                     {"kill", Fault::Action::Kill},
                                                                     {"hang", Fault::Action::Hang},
                                                                     {"signal", Fault::Action::Signal},
                                                                     {"diverge", Fault::Action::Diverge}};
    for (const auto& a : kActions)
        if (action == a.first) f.action = a.second;
    SF_CHECK(f.action != Fault::Action::None, "SF_FAULT: unknown action '%s' (raise, kill, hang, signal, diverge)",
             action.c_str());
    char* end = nullptr;
    f.rank = static_cast<int>(std::strtol(s.c_str() + at + 1, &end, 10));
    SF_CHECK(end == s.c_str() + colon && f.rank >= 0, "SF_FAULT: bad rank in '%s'", v);
    f.step = std::strtoll(s.c_str() + colon + 1, &end, 10);
    SF_CHECK(*end == '\0' && f.step >= 1, "SF_FAULT: bad step in '%s'", v);
    return f;
}

void inject_fault(const Fault& f, int64_t step, TrainBackend& backend) {
    if (f.action == Fault::Action::None || f.rank != rt::comm().rank() || f.step != step) return;
    SF_LOG_WARN("SF_FAULT: injecting the fault before step %lld", static_cast<long long>(step));
    switch (f.action) {
        case Fault::Action::Raise:
            SF_FAIL("SF_FAULT: an error injected before step %lld", static_cast<long long>(step));
        case Fault::Action::Kill: ::kill(::getpid(), SIGKILL); break;
        case Fault::Action::Hang:
            for (;;) ::pause();
        case Fault::Action::Signal: ::kill(::getpid(), SIGTERM); break;
        case Fault::Action::Diverge: {
            const model::CheckpointView v = backend.host_state();
            v.master[0] += 1e-3f;
            backend.commit_host_state();
            break;
        }
        case Fault::Action::None: break;
    }
}

}  // namespace tools
