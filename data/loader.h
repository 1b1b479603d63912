// The training loader: worker threads read samples from compact shards into a ring of host
// batches (pinned when CUDA is usable, plain memory otherwise), in a per-epoch shuffled order
// derived from (seed, epoch), sharded by rank in whole global batches (epoch_order). The training
// thread takes ready batches in order; workers block when the ring is full (backpressure). A
// worker's error is re-thrown to the training thread with the file and record named. The position
// is a resumable cursor over this rank's batches.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/label.h"
#include "data/shard.h"

namespace data {

struct LoaderConfig {
    std::vector<std::string> shards;  // shard files; all must share one ShardSpec
    int batch_size = 128;
    int workers = 2;
    int prefetch = 4;  // batches in the ring
    uint64_t seed = 42;
    bool shuffle = true;  // sample-level shuffle per epoch
    bool drop_last = true;
    int rank = 0, world_size = 1;  // sharding by global batch (epoch_order): this rank's k-th
                                   // batch is the world-1 batch k * world_size + rank; with
                                   // drop_last every rank takes floor(total / (batch_size *
                                   // world_size)) batches, so all ranks run the same number of
                                   // steps; without it every sample is read by exactly one rank
    bool pinned = true;            // pinned host memory when CUDA is usable
};

struct Cursor {
    uint64_t epoch = 0;
    uint64_t batch = 0;  // batches of this epoch already handed out (a finished
                         // epoch reads as {epoch + 1, 0})
    bool operator==(const Cursor& o) const { return epoch == o.epoch && batch == o.batch; }
};

struct HostBatch {
    int n = 0;  // samples in this batch
    ShardSpec spec;
    const uint8_t* pixels = nullptr;       // n * spec.height * spec.width * spec.channels, HWC per sample
    const Label* labels = nullptr;         // n
    const uint64_t* sample_ids = nullptr;  // n global sample indices (file order), for tests/debugging
    Cursor cursor;                         // the position of this batch
};

// Counters for tests and the loader benchmark (a consistent snapshot; sequence numbers count from
// the start cursor).
struct LoaderStats {
    uint64_t filled = 0;         // batches completed by workers
    uint64_t handed = 0;         // batches handed out by next()
    uint64_t released = 0;       // batches returned by release()
    uint64_t max_ahead = 0;      // most batches ever claimed by workers and not yet released (<= prefetch)
    double consumer_wait_s = 0;  // time next() spent blocked waiting for a batch
    double worker_wait_s = 0;    // time workers spent blocked on a full ring, summed over workers
    bool pinned = false;         // ring in pinned (page-locked) memory
};

class Loader {
public:
    explicit Loader(const LoaderConfig& cfg, Cursor start = {});
    ~Loader();  // stops and joins the workers
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;

    // The next batch in order; valid until its release(). Blocks until it is ready; re-throws a
    // worker's error (rt::Error naming file and record), after which the loader stays stopped.
    // Up to `prefetch` batches may be held at once (more would deadlock and throws).
    const HostBatch& next();
    // Returns the oldest batch still held to the ring.
    void release();

    Cursor cursor() const;               // position after the last batch handed out
    uint64_t dataset_size() const;       // samples in all shards
    uint64_t batches_per_epoch() const;  // for this rank
    const ShardSpec& spec() const;
    LoaderStats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Sharding by global batch. The world-1 sequence of an epoch is the global batches G_0, G_1, ... of
// batch_size consecutive positions of the epoch permutation (the last one partial unless drop_last
// drops it). Rank r of world_size W takes G_r, G_{r+W}, G_{r+2W}, ...: its k-th batch is G_{k*W+r}.
// So W ranks with batch b and gradient accumulation A see in each optimizer step exactly the samples
// one process with batch b and accumulation A*W sees. With drop_last every rank takes
// floor(total / (b*W)) batches (equal step counts; when floor(total / b) is not a multiple of W the
// one process also reads the leftover global batches at each epoch's end, so from the first epoch
// boundary on the two runs' steps differ); without it rank r takes every G_j with
// j % W == r, the final partial one included: counts may differ by one, a rank may have none, and
// every sample is in exactly one rank's batches.
uint64_t rank_batches(uint64_t total, int batch_size, bool drop_last, int rank, int world_size);
// Samples in those batches (all full but, without drop_last, the final partial G_j on its rank).
uint64_t rank_samples(uint64_t total, int batch_size, bool drop_last, int rank, int world_size);

// Sample order of one epoch for one rank: a permutation of [0, total) from (seed, epoch) when
// shuffling (identity otherwise), then this rank's global batches back to back (rank_batches):
// element k*batch_size + i is position (k*W + rank)*batch_size + i of the permutation. Length
// rank_samples(...). Throws for world_size < 1, rank outside [0, world_size) or batch_size < 1.
std::vector<uint64_t> epoch_order(uint64_t total, uint64_t seed, uint64_t epoch, bool shuffle, int batch_size,
                                  bool drop_last, int rank, int world_size);

}  // namespace data
