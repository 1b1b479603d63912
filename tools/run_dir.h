// The folders of a training run (docs/CHECKPOINTS.md "Run folders"): every run writes into its
// own output folder (--out, or a new <logging.log_dir>/run-<timestamp>), its checkpoints into
// <out>/checkpoints unless checkpoints.save_dir names another folder, and claims that checkpoint
// folder with an owner file so that no second run mixes its checkpoints (or its keep_last
// pruning) with the first's. Everything here runs before step 1, so that an unwritable folder is
// found before any work is done.
#pragma once
#include <cstdint>
#include <string>

#include "tools/config.h"

namespace tools {

// A new, empty <log_dir>/run-YYYYmmdd-HHMMSS (-2, -3, ... when that name is taken: two runs
// started in the same second get two folders). Created here.
std::string new_run_dir(const std::string& log_dir);

// The checkpoint folder of the run writing to out_dir: checkpoints.save_dir, or <out_dir>/checkpoints.
std::string checkpoint_dir(const TrainConfig& cfg, const std::string& out_dir);

// --resume auto: the folder to search. checkpoints.save_dir when set; else <out>/checkpoints with
// --out; else the checkpoint folder of the run in logging.log_dir whose newest step checkpoint is
// the most recent ("" when there is none).
std::string resume_search_dir(const TrainConfig& cfg, const std::string& out_arg);

// Creates dir (and parents) and checks that a file can be created in it; throws naming the folder
// and what it is for ("output folder", "checkpoint folder") otherwise.
void ensure_writable_dir(const std::string& dir, const char* what);

// Removes the "*.tmp" files an interrupted write (kill, full disk) left in dir; logs each.
void remove_stale_temp_files(const std::string& dir);

// A resumed run continues metrics.jsonl where its checkpoint was: records of steps after `step`
// (written by the interrupted run after that checkpoint) and a torn last line are dropped.
void truncate_metrics(const std::string& path, int64_t step);

// Claims ckpt_dir for the run writing to out_dir: writes <ckpt_dir>/RUN (the run's output folder,
// absolute) unless it already names this run. A run resumed from a checkpoint inside ckpt_dir
// (resumed_from) continues that folder's run and takes it over. Otherwise throws when the folder
// belongs to another run, or holds step checkpoints without an owner file.
void claim_checkpoint_dir(const std::string& ckpt_dir, const std::string& out_dir, const std::string& resumed_from);

}  // namespace tools
