// Where the trainer's batches come from (data.source):
//   fixed     a small deterministic set made from train.seed (data/fixed_batch.h), for smoke runs;
//   shards    compact shards under data.processed_dir/{train,val} read by the pinned loader;
//   synthetic as shards, after generating the dataset there with the synthetic generator if the
//             train split holds no shards yet (a new user trains with no download).
// A source fills the model input (NHWC float: pixels/255 ..., valid mask) and the labels of one
// batch of exactly the network's batch size. Validation batches may hold fewer real samples than
// that; the rest repeat the last real one and are not counted.
// A source's position is a data::Cursor {epoch of its data order, batches of that epoch taken};
// seek() continues from a cursor exactly as if the batches before it had been taken (resume).
// Data-parallel: rank r of W reads whole global batches (data/loader.h: epoch_order): its k-th
// batch of an epoch is batch k*W + r of the one-process sequence, for every source kind. Its
// cursor counts its own batches. Training gives every rank floor(samples / (batch * W)) batches;
// validation gives every sample to exactly one rank (a rank may have no batch).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/label.h"
#include "data/loader.h"
#include "tools/config.h"

namespace tools {

class BatchSource {
public:
    virtual ~BatchSource() = default;
    // Fills input (batch x H x W x C floats) and labels (batch); returns the number of real samples.
    virtual int next(float* input, std::vector<data::Label>& labels) = 0;
    virtual uint64_t batches_per_epoch() const = 0;
    // Position of the next batch; an epoch just finished reads as {epoch + 1, 0}.
    virtual data::Cursor cursor() const = 0;
    // Continues at c (c.batch <= batches_per_epoch(); throws naming the cursor otherwise).
    virtual void seek(const data::Cursor& c) = 0;
    virtual uint64_t samples() const = 0;  // in this split
    virtual std::string describe() const = 0;
    // Device backends: the next batch as the loader made it (uint8 pixels, labels, n real
    // samples), valid until release_raw(); the cursor advances as with next(). nullptr for a
    // source without shards (data.source=fixed).
    virtual const data::HostBatch* next_raw() { return nullptr; }
    virtual void release_raw() {}
    // Seconds next()/next_raw() have spent blocked waiting for the loader, since construction (0 for
    // a source without a loader). Its growth over training time says whether the loader keeps up.
    virtual double wait_seconds() const { return 0; }
};

enum class SplitRole { Train, Val };

// Throws naming the problem (missing folder, shard size different from the model input, rank
// outside [0, world), a training split too small to give every rank one batch, ...).
std::unique_ptr<BatchSource> make_batch_source(const TrainConfig& cfg, SplitRole role, int rank = 0, int world = 1);

// data.source=synthetic: generates the dataset into data.processed_dir unless its train split
// already holds shards. Returns true when it generated.
bool ensure_synthetic_dataset(const TrainConfig& cfg);

}  // namespace tools
