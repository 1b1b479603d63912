// What `slidefuse eval` and `slidefuse predict` share: reading what a checkpoint is, finding the
// config of its run, checking that the two fit, and the inference model (forward with BatchNorm
// running statistics, the heads' activations, the masked decode of MODEL_SPEC §1.7).
// The backend is chosen here and nowhere else: train.backend=cuda runs the bf16 CUDA network when a
// device is usable (the CPU reference otherwise, said at info level); train.backend=cpu the CPU
// reference.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/decode.h"
#include "model/net.h"
#include "tools/config.h"

namespace tools {

// What the file says about itself (checkpoint or exported weights; a foreign safetensors file
// with the model's keys has no slidefuse metadata and step = -1).
struct CheckpointInfo {
    std::string path;
    int input_channels = 0;  // dim 1 of stem.conv1.conv.weight
    std::string kind;        // "checkpoint" | "weights" | "" (no slidefuse metadata)
    int64_t step = -1, epoch = -1;
    std::string out_dir;  // run.out_dir: the run folder that wrote it ("" when unknown)
};
// Throws rt::Error naming the file: missing, not a safetensors file, no stem weight.
CheckpointInfo inspect_checkpoint(const std::string& path);

// The run's config.resolved.yaml for a checkpoint: in the checkpoint's folder, its parent, or the
// run.out_dir recorded in it, first found; "" when none exists. `looked` gets the places tried.
std::string find_run_config(const CheckpointInfo& ckpt, std::vector<std::string>* looked = nullptr);

// The config an inference command runs with: `config_path` if given, else the run's (error
// listing where it looked if there is none), with the overrides applied. Then checks the
// checkpoint fits: its input channels must equal model.input_channels, and when the run's config
// is known, model.input_height/width must be the run's (the weights themselves fit any size).
// *used gets the config file read.
TrainConfig load_inference_config(const std::string& config_path, const CheckpointInfo& ckpt,
                                  const std::vector<std::string>& overrides, std::string* used);

// Which statistics every BatchNorm normalizes with at inference.
enum class BnStats {
    Running,  // the checkpoint's running mean and variance: the original's eval mode (default)
    Batch,    // each forward's own batch mean and biased variance, as in training (a diagnostic:
              // every sample's result depends on the batch it is in; the running statistics are unused)
};
const char* bn_stats_name(BnStats s);     // "running" | "batch"
BnStats parse_bn_stats(const std::string& s);  // throws naming the accepted values

struct InferenceOptions {
    // CPU reference only (refused with train.backend=cuda): the conv weights are rounded to bf16 after
    // loading and every input to bf16 before each forward, as the CUDA network sees them: the
    // precision floor of docs/CHECK.md, i.e. what rounding alone changes in the outputs.
    bool bf16_floor = false;
    BnStats bn_stats = BnStats::Running;  // either backend
};

class InferenceModel {
public:
    // A network for (batch, model.input_channels, input_height, input_width) with the weights and
    // BatchNorm statistics of the checkpoint. Throws naming the file when they do not load, and
    // naming the batch when opt.bn_stats is Batch and it is too small for batch statistics.
    InferenceModel(const TrainConfig& cfg, int batch, const CheckpointInfo& ckpt, const InferenceOptions& opt = {});
    ~InferenceModel();
    InferenceModel(const InferenceModel&) = delete;
    InferenceModel& operator=(const InferenceModel&) = delete;

    const model::NetShape& shape() const;
    // Host input (batch, H, W, C) floats: pixels/255 ..., valid mask (kern::preprocess_ref layout).
    float* input();
    // Forward in eval mode and decode: out gets shape().batch entries, letterbox pixels.
    void run(std::vector<model::Decoded>& out);
    const char* backend() const;  // "cpu" | "cuda"
    bool bf16_floor() const;
    BnStats bn_stats() const;

    struct Impl;  // the backend (tools/eval_model.cpp)

private:
    std::unique_ptr<Impl> impl_;
    InferenceOptions opt_;
};

// The default inference batch: train.batch_size on a usable GPU, at most kMaxCpuEvalBatch on the
// CPU backend,
// whose network holds every activation and its gradient: about 0.75 GB per 256x512 sample.
constexpr int kMaxCpuEvalBatch = 4;
int default_eval_batch(const TrainConfig& cfg);

// Command-line helpers shared by the two commands: the value after option i (error naming it).
const std::string& option_value(const std::vector<std::string>& args, size_t& i);
int parse_positive_int(const std::string& option, const std::string& value);
// Fails early (before minutes of inference) when an output file's folder does not exist.
void check_output_path(const std::string& option, const std::string& path);

}  // namespace tools
