// Checkpoints (safetensors, docs/CHECKPOINTS.md). One file holds:
//   - every parameter under its PyTorch state_dict key, in PyTorch layout (OIHW conv weights), F32;
//   - every buffer under its key (running_mean/var F32, num_batches_tracked I64, shape ());
//   - AdamW state beside them: "optimizer.exp_avg.<key>" and "optimizer.exp_avg_sq.<key>", F32,
//     PyTorch layout (absent in exported weight files);
//   - the run state in __metadata__ ("run.*": step, epoch, skipped steps, seed, loader cursor,
//     config hash, best metric, early-stopping state) and "slidefuse.version" / "slidefuse.kind";
//   - "slidefuse.checksum": CRC-32 of the tensor data and the other metadata, verified by every
//     load (a file without one, written before checksums, loads with a warning).
// Writes are atomic (temp file, fsync, rename, fsync of the folder: a crash never leaves a partial
// checkpoint under the final name).
// Every pointer below is HOST memory laid out as the model's flat ranges (ParamTable offsets,
// KRSC conv weights); the CUDA trainer stages its device ranges through host copies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"

namespace model {

constexpr int kCheckpointVersion = 1;

// Everything besides the tensors that a resumed run needs to continue exactly where the saved run
// was (docs/CHECKPOINTS.md "What is restored"). Doubles are stored with 17 significant digits, so
// they round-trip bit for bit (inf included).
struct RunState {
    int64_t step = 0;           // optimizer steps done, skipped ones included (the run's step counter)
    int64_t adam_step = 0;      // AdamW updates applied (the bias-correction t); = step - skipped
    int64_t epoch = 0;          // epochs completed
    int64_t skipped = 0;        // non-finite steps skipped so far
    int64_t bad_streak = 0;     // consecutive non-finite steps at save time
    uint64_t seed = 0;          // train.seed of the run
    uint64_t cursor_epoch = 0;  // loader cursor (data::Cursor) of the NEXT batch
    uint64_t cursor_batch = 0;
    std::string config_hash;                 // tools::resume_config_hash of the resolved config
    double best_metric = 0;                  // best validation value so far (see best_metric_name): best.safetensors
    std::string best_metric_name;            // e.g. "mae_px"; empty before the first validation
    int64_t epochs_without_improvement = 0;  // early-stopping patience counter
    double es_best = 0;                      // early stopping: best select_by value counted (from min_epochs on)
    double guard_best = 0;                   // early stopping: best second_guard metric value
    double window_loss_sum = 0;              // log window (logging.log_interval) open at save time: loss sum
    int64_t window_steps = 0;                //   and its steps
    std::string out_dir;                     // the run's output folder (metrics.jsonl), reused by a resume
    // Optional (absent when empty):
    std::string stopped_by_error;  // saved as the last good step of a run that an error ended: the error
    std::string config_yaml;       // the resolved config (a refused resume names the keys that differ)
    int64_t world_size = 1;        // data-parallel ranks of the run (written when > 1)
};

// Host views of everything a checkpoint holds. adam_m / adam_v may be null (weights only).
struct CheckpointView {
    const ParamTable* table = nullptr;
    float* master = nullptr;      // flat_size floats
    float* adam_m = nullptr;      // flat_size floats or null
    float* adam_v = nullptr;      // flat_size floats or null
    float* buffers = nullptr;     // buffer_floats
    int64_t* counters = nullptr;  // counters
};

// Writes a full checkpoint (weights, buffers, AdamW state when present, run state). Atomic.
void save_checkpoint(const std::string& path, const CheckpointView& v, const RunState& rs);
// Writes weights and buffers only, PyTorch names and layout, no optimizer state: the file
// tools/reference loads with load_state_dict(strict=True).
void export_weights(const std::string& path, const CheckpointView& v);

// Loads a checkpoint or an exported weight file into v. Every key of the table must be present
// with the right shape and dtype; unknown keys are refused; adam_m/adam_v are filled when non-null
// (error if the file has no optimizer state); rs (may be null) receives the run state (error if
// the file has none and rs is non-null). Throws rt::Error naming the file and the problem
// (truncated, bad header, missing/extra key, wrong shape, non-finite weights, version, checksum).
// Everything is checked before anything is written into v: a refused file leaves v untouched.
// A safetensors file without slidefuse metadata (e.g. written by PyTorch from the reference model's
// state_dict) loads as weights when adam_m/adam_v and rs are null.
void load_checkpoint(const std::string& path, const CheckpointView& v, RunState* rs);

// Input channels of the model a checkpoint or weight file was written for (dim 1 of
// "stem.conv1.conv.weight": 2 or 4), to build a matching network before load_checkpoint.
int checkpoint_input_channels(const std::string& path);

// Checkpoint folder management: "<dir>/ckpt-<step 8 digits>.safetensors" and "<dir>/best.safetensors".
std::string checkpoint_path(const std::string& dir, int64_t step);
std::string best_checkpoint_path(const std::string& dir);
// Existing step checkpoints in dir, oldest first (by step; temp files and other names ignored;
// a missing dir has none).
std::vector<std::string> list_checkpoints(const std::string& dir);
// Deletes all but the newest keep_last step checkpoints (best.safetensors is never touched).
void prune_checkpoints(const std::string& dir, int keep_last);
// --resume auto: the newest loadable step checkpoint in dir, or "" when there is none. A newer
// file that does not load (structure, version, run state, checksum) is skipped with a warning
// naming why.
std::string latest_checkpoint(const std::string& dir);

}  // namespace model
