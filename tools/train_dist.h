// What the training loop does differently in a data-parallel job (docs/DISTRIBUTED.md), over
// rt::comm(): every function is a collective (every rank calls it at the same point) and a no-op in
// a world of 1.
#pragma once
#include <cstdint>
#include <string>

#include "model/decode.h"
#include "tools/train.h"

namespace tools {

// Validation metrics of the whole split from each rank's share.
model::Metrics reduce_metrics(const model::Metrics& local);

// BatchNorm running statistics and num_batches_tracked of rank 0 on every rank, as PyTorch DDP's
// broadcast_buffers does before each forward; done before each validation, the only place the
// running statistics are read (training forwards use the batch statistics).
void share_bn_buffers(TrainBackend& backend);

// Checks that every rank holds the same weights and AdamW state (`view`: the backend's host_state();
// CRC-32 of each, compared by an allreduce of min and max): throws naming the step when they differ.
void check_ranks_agree(const model::CheckpointView& view, int64_t step);

// The stop decision shared by all ranks: the largest signal number any rank received (0: none).
int agree_on_signal(int local_signal);

// A fault injected for the tests of failure handling: SF_FAULT=<action>@<rank>:<step> makes rank
// <rank> act just before optimizer step <step> (1-based): raise (an error), kill (SIGKILL itself),
// hang (sleep forever), signal (SIGTERM itself: a stop request on one rank), diverge (perturb one
// weight, which the next agreement check must catch). Unset: none.
struct Fault {
    enum class Action { None, Raise, Kill, Hang, Signal, Diverge } action = Action::None;
    int rank = 0;
    int64_t step = 0;
};
Fault fault_from_env();  // throws on a malformed SF_FAULT
// Acts when f targets this rank and `step` (the step about to run).
void inject_fault(const Fault& f, int64_t step, TrainBackend& backend);

}  // namespace tools
