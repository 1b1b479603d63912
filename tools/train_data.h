// Where the trainer's batches come from (data.source):
//   fixed     a small deterministic set made from train.seed (data/fixed_batch.h), for smoke runs;
//   shards    compact shards under data.processed_dir/{train,val} read by the pinned loader;
//   synthetic as shards, after generating the dataset there with the synthetic generator if the
//             train split holds no shards yet (a new user trains with no download).
// A source fills the model input (NHWC float: pixels/255 ..., valid mask) and the labels of one
// batch of exactly the network's batch size. Validation batches may hold fewer real samples than
// that; the rest repeat the last real one and are not counted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/label.h"
#include "tools/config.h"

namespace tools {

class BatchSource {
public:
    virtual ~BatchSource() = default;
    // Fills input (batch x H x W x C floats) and labels (batch); returns the number of real samples.
    virtual int next(float* input, std::vector<data::Label>& labels) = 0;
    virtual uint64_t batches_per_epoch() const = 0;
    virtual uint64_t samples() const = 0;   // in this split
    virtual std::string describe() const = 0;
};

enum class SplitRole { Train, Val };

// Throws naming the problem (missing folder, shard size different from the model input, ...).
std::unique_ptr<BatchSource> make_batch_source(const TrainConfig& cfg, SplitRole role);

// data.source=synthetic: generates the dataset into data.processed_dir unless its train split
// already holds shards. Returns true when it generated.
bool ensure_synthetic_dataset(const TrainConfig& cfg);

}  // namespace tools
