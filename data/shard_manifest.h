// The dataset manifest (docs/FORMAT.md "Dataset manifest"): <root>/manifest.json, written last
// and atomically by `slidefuse generate` / `convert` (and the trainer's on-demand generation)
// once every shard of the dataset is complete. A dataset folder without it is incomplete (an
// interrupted or failed write); one whose files disagree with it is damaged.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/shard.h"

namespace data {

constexpr int kManifestVersion = 1;
const char* const kManifestFile = "manifest.json";

struct ManifestShard {
    std::string file;          // name inside its split folder, e.g. "train_000000.sfshard"
    uint64_t samples = 0;      // records
    uint64_t bytes = 0;        // file size
    uint32_t records_crc = 0;  // CRC-32 of the shard's record-CRC section (covers every record)
};

struct DatasetManifest {
    std::string source;            // "synthetic" (generate) or "sider" (convert)
    uint64_t seed = 0, count = 0;  // synthetic: generator seed and samples 0..count-1 (else 0)
    ShardSpec spec;                // every shard's canvas, channels, quant4
    std::map<std::string, std::vector<ManifestShard>> splits;  // "train", "val", "test" (present ones)
    uint64_t samples(const std::string& split) const;          // 0 for an absent split
    std::string describe() const;  // "synthetic, 1000 samples (seed 3), 64x128 x1: train 800 / val 100 / test 100"
};

// The manifest of the shards now in root/{train,val,test} (each shard's header validated, its
// record-CRC section summed). Throws naming a bad shard.
DatasetManifest scan_dataset(const std::string& root, const std::string& source, uint64_t seed, uint64_t count);

// root/manifest.json via a temporary file, fsync and rename: it exists only complete.
void write_manifest(const std::string& root, const DatasetManifest& m);
bool has_manifest(const std::string& root);
// Throws naming the file and the key when it is missing, not JSON, of another version or incomplete.
DatasetManifest read_manifest(const std::string& root);

// Checks split `split` of root against m: every listed shard present with its size and records
// CRC, no shard that m does not list. Throws naming the file and what differs.
void verify_split(const std::string& root, const DatasetManifest& m, const std::string& split);

// Test hook: SF_TEST_GENERATE_STOP_AFTER_SHARDS=K makes generate_dataset fail once K shards are
// complete (an interrupted generation, deterministic with one thread). 0 when unset.
uint64_t generate_stop_after_shards();

}  // namespace data
