// Import of the original Sider preprocessor's NPY dataset (MODEL_SPEC §4.2) into compact shards.
//
//   <in>/images/{split}/{split}_XXXX.npy             float32 [N, C, H, W]: C = 2 (gray/255, mask)
//                                                    or 4 (R, G, B /255, mask); N = 64 in practice
//   <in>/labels/{split}/{split}_XXXX_heatmaps.npy    float32 [N, 2, H/4, W/4]  (gap, slider)
//   <in>/labels/{split}/{split}_XXXX_offsets.npy     float32 [N, 4, H/4, W/4]  (du_gap, dv_gap, du_slider, dv_slider)
//   <in>/labels/{split}/{split}_XXXX_meta.json       per-sample lists (gap_angles, confusing_gaps, ...)
//
// Per sample the label is recovered exactly (docs/FORMAT.md, "Sider NPY import"): centres from
// the heatmap's unique 1.0 peak cell (u, v) plus the offset there, x = 4(u + 0.5 + du),
// y = 4(v + 0.5 + dv); the angle (radians) and fake-gap cells from the meta JSON (the original
// kept only the cell of a fake gap; its centre becomes 4(cell + 0.5)); the valid rectangle from
// the mask channel. Pixels are round(v*255), which must be within 1e-3 of an integer in 0..255.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/label.h"
#include "data/shard.h"

namespace data {

// One batch of the original dataset: its four files.
struct SiderFileSet {
    std::string split;
    int64_t batch_id = 0;
    std::string image, heatmaps, offsets, meta;  // paths
};

// The file sets of one split, in batch-id order. images/{split} and labels/{split} must exist and
// every file in them must belong to exactly one complete set ({split}_index.json and legacy
// *_weights.npy files are ignored); otherwise throws naming the first offending file. Existing
// but empty folders give an empty list.
std::vector<SiderFileSet> list_sider_split(const std::string& in_dir, const std::string& split);

// One batch, opened (memory-mapped) and validated: NPY dtypes, shapes and counts against each
// other, and the meta JSON's schema and list lengths. Sample contents are checked by decode().
class SiderBatch {
public:
    explicit SiderBatch(const SiderFileSet& files);
    ~SiderBatch();
    SiderBatch(SiderBatch&&) noexcept;
    SiderBatch(const SiderBatch&) = delete;
    SiderBatch& operator=(const SiderBatch&) = delete;

    size_t count() const;
    // height, width of the images; channels 1 (from C = 2) or 3 (from C = 4); quant4 false.
    const ShardSpec& spec() const;
    // Writes sample i's pixels (uint8 HWC, height*width*channels bytes) and returns its label.
    // Throws naming the file and the sample when a value cannot be recovered exactly.
    Label decode(size_t i, uint8_t* pixels) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

struct SiderConvertOptions {
    std::string in_dir;         // the original's processed folder (holds images/ and labels/)
    std::string out_dir;        // shards go to <out_dir>/<split>/<split>_NNNNN.sfshard
    std::string split = "all";  // train | val | test | all (the splits that have files)
    size_t shard_size = 4096;   // samples per shard (the last one of a split may hold fewer)
    bool quant4 = false;        // store 4-bit pixels (value & 0xF0)
    // Called after each batch file: (files done, files total over all splits, current split).
    std::function<void(size_t, size_t, const std::string&)> progress;
};

struct SiderSplitResult {
    std::string split;
    size_t files = 0, samples = 0;
    ShardSpec spec;
    std::vector<std::string> shards;
};

// Validates every batch of the chosen splits first (files, shapes, meta), then converts. Refuses an
// output split folder that already holds shards. On any error removes every shard and folder this
// call created before rethrowing, so nothing partial is left.
std::vector<SiderSplitResult> convert_sider(const SiderConvertOptions& opt);

}  // namespace data
