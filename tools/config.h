// Training configuration: one YAML file (+ `key.path=value` command-line overrides) -> TrainConfig.
// Keys are those of the original's 1.1.1 training config where they mean the same thing
// (MODEL_SPEC §5); defaults are the 1.1.1 recipe. Keys of the original that mean nothing here are
// accepted, ignored and reported once at info level; any other unknown key, a wrong type or an
// out-of-range value is an error naming the full key path (and file:line). All errors of one load
// are collected and thrown together as one rt::Error, one per line. docs/CONFIG.md lists every key.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/loss.h"
#include "model/up_order.h"

namespace tools {

enum class AmpMode { Bf16, Fp32 };  // YAML: true|bf16 -> Bf16, false|fp32 -> Fp32
enum class Backend { Cuda, Cpu };
enum class SchedType { Sgdr, WarmupCosine };  // "sgdr" | "warmup_cosine"
enum class DataSource { Synthetic, Shards, Fixed };
enum class GuardMode { Min, Max };

const char* amp_mode_name(AmpMode m);        // "bf16" | "fp32"
const char* backend_name(Backend b);         // "cuda" | "cpu"
const char* sched_type_name(SchedType t);    // "sgdr" | "warmup_cosine"
const char* data_source_name(DataSource s);  // "synthetic" | "shards" | "fixed"
const char* guard_mode_name(GuardMode m);    // "min" | "max"

// model.fusion_up_order (docs/CONFIG.md): auto = conv_first on the CUDA backend (the faster order,
// docs/perf/OPTIMIZATION_LOG.md entry 1, trained to the gpu_quick bar on an H200) and the original's
// upsample_first on the CPU reference, which stays the oracle in the original's order.
enum class UpOrderSetting { Auto, UpsampleFirst, ConvFirst };
const char* up_order_setting_name(UpOrderSetting s);  // "auto" | "upsample_first" | "conv_first"
// The order a network on `backend` runs for setting s.
model::UpOrder resolve_up_order(UpOrderSetting s, Backend backend);

struct ModelSection {
    std::string name = "Lite-HRNet-18+LiteFPN";  // the only model slidefuse trains
    int input_channels = 2;                      // 2 (gray + mask, 1.1.1) or 4 (RGB + mask, early 1.1.0)
    int input_height = 256;                      // letterbox canvas, multiple of 32
    int input_width = 512;
    // slidefuse: the fusion up paths' order (model/up_order.h; docs/CONFIG.md). The same parameters;
    // conv_first runs the 1x1 conv before the upsample (equal in exact arithmetic, less work); auto:
    // resolve_up_order.
    UpOrderSetting fusion_up_order = UpOrderSetting::Auto;
    // slidefuse, CUDA only: every LiteBlock's expand BN + SiLU applied inside its depthwise conv's
    // loads, the expanded activation never stored (model::NetShape::fuse_expand_dw). Bitwise the same
    // step with the deterministic policy; the CPU backend ignores it.
    bool fuse_expand_dw = false;
    // slidefuse, CUDA only: every depthwise ConvBN's BN + SiLU applied inside the following 1x1 conv's loads
    // (LiteBlock project, DSConv pointwise), the depthwise activation never stored
    // (model::NetShape::fuse_dw_pw). The CPU backend ignores it.
    bool fuse_dw_pw = false;
    // slidefuse, CUDA only: the four heads' conv1 as one 3x3 128 -> 256 ConvBN (model::NetShape::merge_heads;
    // the same parameters and checkpoints). The CPU backend ignores it.
    bool merge_heads = false;
    // slidefuse, CUDA only: each head's conv2 applies its conv1's BN + ReLU on load, conv1's bias folded into
    // that BN (model::NetShape::fuse_head_bn; the same parameters and checkpoints). The CPU backend ignores it.
    bool fuse_head_bn = false;
    // slidefuse, CUDA only: each fusion up path's bilinear upsample (conv_first) formed inside its BN passes'
    // loads, the upsampled conv output never stored (model::NetShape::fuse_up_bn; bitwise the same step).
    bool fuse_up_bn = false;
};

// slidefuse, CUDA only: the CUDA backend's kernel choices, the `bench step` switches of the same names
// (docs/CONFIG.md; each off until a GPU measures it: docs/perf/OPTIMIZATION_LOG.md). None changes the
// parameters or what a checkpoint holds; most change results in the last bits (another summation order).
// Not part of the resume check: a run may resume with other kernels. The CPU backend ignores them.
struct CudaSection {
    bool pdl = false;                 // programmatic dependent launch of the project's kernels (sm_90+)
    bool dw_variants = true;          // the depthwise kernels' fastest variant when autotuning; false: variant 0
    int bn_row_batch = 1;             // BatchNorm + activation rows per loop turn: 1 or 4
    int bn_min_blocks = 1;            // resident blocks the BN backward's row kernels are compiled for: 1 or 3
    bool upsample_row_loads = false;  // the upsampling backward's window rows loaded together
    bool dw_fused_bwd = false;        // the stride-1 depthwise dgrad + wgrad in one kernel
    bool dw_fused_bn_bwd = false;     // with dw_fused_bwd: the depthwise BN's dx formed inside it
    bool dw_fused_bn_grad = false;    // with dw_fused_bwd and model.fuse_expand_dw: the expand BN's reductions too
    bool pw_custom = false;           // the project's tensor-core 1x1 conv as a candidate against cuDNN's
    bool pw_stats = false;            // with pw_custom: the 1x1 ConvBNs' BN statistics from its epilogue
    bool pw_bn_grad = false;          // with pw_custom: the depthwise BNs' reductions in its dgrad's epilogue
    bool pw_bn_bwd = false;           // with pw_custom: the 1x1 ConvBNs' BN dx in its dgrad and wgrad loads
    bool pw_fused_bwd = false;        // with pw_custom: the 1x1 dgrad and wgrad in one kernel where it fits
    bool dw_stats = false;            // the depthwise BNs' statistics from the staged forward's epilogue
    bool head_bn_grad = false;        // with model.fuse_head_bn: the heads' conv1 BN reductions in conv2's backward
    bool head_bn_dx = false;          // with head_bn_grad: no conv2 dx stored, the conv1 BN dx from the logits' grad
    bool branch_lanes = false;        // the HRNet stages' branches on side streams of their own
};

// The cuda section's keys in their order, each a bool switch (flag) or an int (number): the one list that
// writing, reading, comparing and naming the section walk (config.cpp, config_parse.cpp, cuda_policy.cpp).
struct CudaKey {
    const char* key;
    bool CudaSection::*flag;       // null for a number
    int CudaSection::*number;      // null for a flag
    bool (*valid)(int) = nullptr;  // a number's valid values
    const char* values = nullptr;  // ... in words, for the error ("1 or 4")
};
const std::vector<CudaKey>& cuda_keys();

struct OptimizerSection {
    std::string name = "AdamW";  // the only optimizer
    double lr = 3e-4;
    std::array<double, 2> betas = {0.9, 0.999};
    double eps = 1e-8;
    double weight_decay = 0.05;   // decoupled; applies to every parameter (single group)
    double clip_grad_norm = 1.0;  // global L2 norm; 0 = off
};

struct SchedSection {
    // sgdr: the original's CosineAnnealingWarmRestarts(T_0 = warmup_epochs, T_mult = t_mult,
    // eta_min = cosine_min_lr), stepped once per epoch (LR constant within an epoch).
    // warmup_cosine: linear warmup over warmup_steps, then per-step cosine to cosine_min_lr.
    SchedType type = SchedType::Sgdr;
    int epochs = 20;
    int warmup_epochs = 1;        // sgdr: T_0 (>= 1); unused by warmup_cosine
    int t_mult = 2;               // sgdr: T_mult
    double cosine_min_lr = 3e-6;  // eta_min; < optimizer.lr
    int64_t warmup_steps = 0;     // warmup_cosine only
};

struct TrainSection {
    AmpMode amp = AmpMode::Bf16;
    int batch_size = 128;
    int gradient_accumulation_steps = 1;
    uint64_t seed = 42;
    Backend backend = Backend::Cuda;
    bool deterministic = false;  // also set by the original's hardware.cudnn_deterministic
    int num_workers = 8;
    int prefetch_factor = 8;
    int64_t max_steps = 0;  // optimizer steps; 0 = the full schedule
};

struct LossWeights {  // config/loss.yaml 1.1.x (MODEL_SPEC §2.1)
    double heatmap = 1.0, offset = 1.0, hard_negative = 1.5, angle = 0.5, padding_bce = 0.3, y_axis = 0.8;
};

struct LossSection {
    model::LossVariant variant = model::LossVariant::Sider;
    LossWeights weights;
};

struct DataSection {
    DataSource source = DataSource::Synthetic;
    std::string processed_dir = "data/processed";  // shards
    int64_t num_samples = 214464;                  // synthetic/fixed: samples per epoch (MODEL_SPEC §4.3)
};

struct SecondGuardSection {
    std::string metric = "mae_px";
    double min_delta = 0.5;
    GuardMode mode = GuardMode::Min;
};

struct EarlyStoppingSection {
    bool enabled = true;
    int min_epochs = 10;
    double min_improvement = 0.5;  // in select_by's units (percentage points for hit_*)
    int patience = 5;
    SecondGuardSection second_guard;
};

struct EvalSection {
    int eval_interval = 1;  // epochs
    std::string select_by = "hit_le_5px";
    std::vector<std::string> metrics = {"mae_px", "rmse_px", "hit_le_2px", "hit_le_5px"};
    EarlyStoppingSection early_stopping;
};

struct LoggingSection {
    int log_interval = 10;  // steps
    std::string log_dir = "runs";
    bool tensorboard = true;  // TensorBoard event files in the run folder (tools/tensorboard.h)
    bool plot = true;         // metrics.png at the end (tools/plot_metrics.py, when matplotlib is present)
};

struct CheckpointsSection {
    std::string save_dir;   // "" (default): <the run's output folder>/checkpoints
    int save_interval = 1;  // epochs
    bool save_best = true;
    int keep_last = 3;
};

struct TrainConfig {
    ModelSection model;
    CudaSection cuda;
    OptimizerSection optimizer;
    SchedSection sched;
    TrainSection train;
    LossSection loss;
    DataSection data;
    EvalSection eval;
    LoggingSection logging;
    CheckpointsSection checkpoints;
};

// Field-by-field equality (doubles compared exactly).
bool operator==(const TrainConfig& a, const TrainConfig& b);
inline bool operator!=(const TrainConfig& a, const TrainConfig& b) { return !(a == b); }

// The metric names eval.select_by / eval.metrics / second_guard.metric accept.
const std::vector<std::string>& metric_names();

// Reads and validates a YAML file; overrides ("key.path=value", value a YAML scalar or flow
// sequence) are applied to the YAML tree before validation. Throws rt::Error listing every problem.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides);
// Same from YAML text; source_name stands for the file in messages.
TrainConfig parse_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                         const std::string& source_name);

// The full resolved config as YAML (every key, defaults filled in, amp as bf16/fp32);
// parse_config(to_yaml(c), {}, ...) == c. with_cuda = false leaves the cuda section out (the resume
// check's text: tools/train.h).
std::string to_yaml(const TrainConfig& c, bool with_cuda = true);
// Writes to_yaml(c) atomically (temp file in the same folder, fsync, rename).
void write_resolved_config(const TrainConfig& c, const std::string& path);
// 16 hex digits: FNV-1a 64 of to_yaml(c) (text_hash of another text).
std::string config_hash(const TrainConfig& c);
std::string text_hash(const std::string& text);
// The keys whose values differ between two to_yaml texts, as "changed: section.key: old -> new, ..."
// (at most 8 named); for a resume refused under another config.
std::string config_differences(const std::string& old_yaml, const std::string& new_yaml);

// The loss settings the config controls (variant and term weights); the rest keep LossConfig's defaults.
model::LossConfig loss_config(const TrainConfig& c);

}  // namespace tools
