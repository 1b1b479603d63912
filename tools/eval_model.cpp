#include "tools/eval_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <cuda_runtime.h>

#include "kernels/bf16.h"
#include "kernels/conv_cudnn.h"
#include "model/checkpoint.h"
#include "model/decode_cuda.h"
#include "model/loss_cuda.h"
#include "model/train_step_cuda.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "model/eval_step.h"
#include "runtime/device_report.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"
#include "tools/check.h"

namespace tools {

namespace fs = std::filesystem;

namespace {

const char* const kRunConfigName = "config.resolved.yaml";

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key) {
    const auto it = m.find(key);
    if (it == m.end()) return -1;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    return end && *end == '\0' && !it->second.empty() ? v : -1;
}

}  // namespace

CheckpointInfo inspect_checkpoint(const std::string& path) {
    std::error_code ec;
    SF_CHECK(fs::exists(path, ec), "checkpoint %s: no such file", path.c_str());
    SF_CHECK(fs::is_regular_file(path, ec), "checkpoint %s: not a regular file", path.c_str());
    CheckpointInfo info;
    info.path = path;
    info.input_channels = model::checkpoint_input_channels(path);
    // The run state lives in the metadata (model/checkpoint.h): read what eval reports and where
    // the run's folder is, without requiring it (exported weights have none).
    const rt::SafeTensors st = rt::SafeTensors::load(path);
    const auto& m = st.metadata();
    const auto kind = m.find("slidefuse.kind");
    if (kind != m.end()) info.kind = kind->second;
    info.step = meta_int(m, "run.step");
    info.epoch = meta_int(m, "run.epoch");
    const auto out = m.find("run.out_dir");
    if (out != m.end()) info.out_dir = out->second;
    return info;
}

std::string find_run_config(const CheckpointInfo& ckpt, std::vector<std::string>* looked) {
    const fs::path dir = fs::absolute(fs::path(ckpt.path)).parent_path();
    std::vector<fs::path> places = {dir / kRunConfigName, dir.parent_path() / kRunConfigName};
    if (!ckpt.out_dir.empty()) places.push_back(fs::path(ckpt.out_dir) / kRunConfigName);
    for (const fs::path& p : places) {
        if (looked) looked->push_back(p.string());
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) return p.string();
    }
    return "";
}

TrainConfig load_inference_config(const std::string& config_path, const CheckpointInfo& ckpt,
                                  const std::vector<std::string>& overrides, std::string* used) {
    std::vector<std::string> looked;
    const std::string run_config = find_run_config(ckpt, &looked);
    std::string path = config_path;
    if (path.empty()) {
        std::string where;
        for (const std::string& l : looked) where += "\n  " + l;
        SF_CHECK(!run_config.empty(), "no --config given and no %s found for checkpoint %s; looked in:%s",
                 kRunConfigName, ckpt.path.c_str(), where.c_str());
        path = run_config;
    }
    if (used) *used = path;
    const TrainConfig cfg = load_config(path, overrides);
    const ModelSection& m = cfg.model;
    SF_CHECK(ckpt.input_channels == m.input_channels,
             "checkpoint %s holds a model with %d input channels (stem.conv1.conv.weight), but the config (%s) has "
             "model.input_channels=%d",
             ckpt.path.c_str(), ckpt.input_channels, path.c_str(), m.input_channels);
    if (!run_config.empty()) {
        const TrainConfig run = load_config(run_config, {});
        SF_CHECK(run.model.input_height == m.input_height && run.model.input_width == m.input_width &&
                     run.model.input_channels == m.input_channels,
                 "checkpoint %s was trained at model.input_height=%d, input_width=%d, input_channels=%d (%s), but the "
                 "config (%s, with overrides) has %d, %d, %d",
                 ckpt.path.c_str(), run.model.input_height, run.model.input_width, run.model.input_channels,
                 run_config.c_str(), path.c_str(), m.input_height, m.input_width, m.input_channels);
    }
    return cfg;
}

// ---- the inference model: CPU reference backend, or CUDA ----

struct InferenceModel::Impl {
    virtual ~Impl() = default;
    virtual const model::NetShape& shape() const = 0;
    virtual float* input() = 0;
    virtual void run(std::vector<model::Decoded>& out) = 0;
    virtual const char* backend() const = 0;
};

namespace {

class CpuInference : public InferenceModel::Impl {
public:
    CpuInference(const model::NetShape& s, const std::string& ckpt, bool bf16_floor, bool batch_stats)
        : net_(s, rt::MemKind::Host), eval_(net_, batch_stats), bf16_floor_(bf16_floor) {
        const model::Planner& plan = net_.plan();
        model::load_checkpoint(ckpt, {&net_.table(), plan.master(), nullptr, nullptr, plan.buffers(), plan.counters()},
                               nullptr);
        if (bf16_floor_) {
            const size_t n = round_conv_weights_bf16(net_);
            SF_LOG_INFO("bf16 floor: %zu conv weights rounded to bf16; inputs are rounded before each forward", n);
        }
    }
    const model::NetShape& shape() const override { return net_.shape(); }
    float* input() override { return net_.input(); }
    void run(std::vector<model::Decoded>& out) override {
        if (bf16_floor_) {
            const model::NetShape& s = net_.shape();
            const size_t n = static_cast<size_t>(s.batch) * s.height * s.width * s.channels;
            float* x = net_.input();
            for (size_t i = 0; i < n; ++i) x[i] = kern::round_bf16(x[i]);
        }
        eval_.run(rt::Exec::cpu(), out);
    }
    const char* backend() const override { return "cpu"; }

private:
    model::SiderNet net_;
    model::EvalStep eval_;
    bool bf16_floor_;
};

// The same forward on the CUDA network (bf16): the host input is rounded to bf16 and copied in,
// the min-pooled valid mask and the decode run on the device (model/decode_cuda.h).
class CudaInference : public InferenceModel::Impl {
public:
    CudaInference(const model::NetShape& s, const std::string& ckpt, bool batch_stats)
        : ctx_(0),
          net_(s, ctx_.exec(), policy()),
          host_(s.batch * static_cast<size_t>(s.height) * s.width * s.channels),
          batch_stats_(batch_stats) {
        const model::ParamTable& t = net_.table();
        std::vector<float> master(t.flat_size), buffers(t.buffer_floats);
        std::vector<int64_t> counters(t.counters);
        const model::CheckpointView v{&t, master.data(), nullptr, nullptr, buffers.data(), counters.data()};
        model::load_checkpoint(ckpt, v, nullptr);
        model::upload_state(ctx_.exec(), net_.plan(), v);
        const size_t cells = static_cast<size_t>(s.batch) * net_.grid_h() * net_.grid_w();
        const size_t o_min = dev_.reserve(cells * sizeof(float), 256, "valid mask (min)");
        const size_t o_dec = dev_.reserve(s.batch * sizeof(model::Decoded), 256, "decoded");
        dev_.allocate();
        dev_.seal();
        valid_min_ = dev_.ptr<float>(o_min);
        decoded_ = dev_.ptr<model::Decoded>(o_dec);
        staged_.resize(host_.size());
    }
    const model::NetShape& shape() const override { return net_.shape(); }
    float* input() override { return host_.data(); }
    void run(std::vector<model::Decoded>& out) override {
        const rt::Exec& ex = ctx_.exec();
        const model::NetShape& s = net_.shape();
        for (size_t i = 0; i < host_.size(); ++i) staged_[i] = kern::float_to_bf16(host_[i]);
        SF_CUDA_CHECK(cudaMemcpyAsync(net_.input(), staged_.data(), staged_.size() * sizeof(kern::bf16),
                                      cudaMemcpyHostToDevice, ex.stream));
        model::mask_grid_cuda(ex, s.batch, s.height, s.width, s.channels, s.channels - 1, 4, net_.input(), nullptr,
                              valid_min_);
        net_.forward(ex, batch_stats_);
        const model::HeadLogits<float> l = net_.logits();
        model::decode_cuda(ex, s.batch, l.h, l.w, 4, l.gap, l.slider, l.offset, valid_min_, decoded_);
        out.resize(static_cast<size_t>(s.batch));
        SF_CUDA_CHECK(cudaMemcpyAsync(out.data(), decoded_, out.size() * sizeof(model::Decoded),
                                      cudaMemcpyDeviceToHost, ex.stream));
        ctx_.synchronize();
    }
    const char* backend() const override { return "cuda"; }

private:
    static kern::ConvPolicy policy() {
        kern::ConvPolicy p;
        p.autotune = false;  // a short inference job: the heuristics' first plan, no timing runs
        return p;
    }
    rt::CudaContext ctx_;
    model::SiderNetCuda net_;
    std::vector<float> host_;
    std::vector<kern::bf16> staged_;
    bool batch_stats_;
    rt::Arena dev_{"inference", rt::MemKind::Device};
    float* valid_min_ = nullptr;
    model::Decoded* decoded_ = nullptr;
};

// train.backend=cuda runs on the GPU when one is usable, else (said at info level) on the CPU.
bool use_cuda(const TrainConfig& cfg) {
    if (cfg.train.backend != Backend::Cuda) return false;
    std::string why;
    if (rt::cuda_device_available(&why)) {
        rt::check_cuda_device(0, "train.backend=cuda");  // reports the GPU; refuses one this build cannot run on
        return true;
    }
    SF_LOG_INFO("train.backend=cuda but no usable CUDA device (%s): inference runs on the CPU reference backend",
                why.c_str());
    return false;
}

}  // namespace

InferenceModel::InferenceModel(const TrainConfig& cfg, int batch, const CheckpointInfo& ckpt,
                               const InferenceOptions& opt)
    : opt_(opt) {
    SF_CHECK(batch >= 1, "inference batch size must be >= 1, got %d", batch);
    SF_CHECK(!opt.bf16_floor || cfg.train.backend == Backend::Cpu,
             "the bf16 floor is the CPU reference with bf16-rounded conv weights and input: it needs "
             "train.backend=cpu, got train.backend=cuda");
    const bool cuda = use_cuda(cfg);
    const model::NetShape shape{batch,
                                cfg.model.input_channels,
                                cfg.model.input_height,
                                cfg.model.input_width,
                                resolve_up_order(cfg.model.fusion_up_order, cuda ? Backend::Cuda : Backend::Cpu),
                                cfg.model.fuse_expand_dw,
                                cfg.model.fuse_dw_pw,
                                cfg.model.merge_heads,
                                cfg.model.fuse_head_bn,
                                cfg.model.fuse_up_bn};
    const bool batch_stats = opt.bn_stats == BnStats::Batch;
    if (batch_stats)
        shape.validate_for_training();  // names the batch when it leaves one value per channel
    else
        shape.validate();
    if (cuda)
        impl_ = std::make_unique<CudaInference>(shape, ckpt.path, batch_stats);
    else
        impl_ = std::make_unique<CpuInference>(shape, ckpt.path, opt.bf16_floor, batch_stats);
}

InferenceModel::~InferenceModel() = default;

const model::NetShape& InferenceModel::shape() const { return impl_->shape(); }
float* InferenceModel::input() { return impl_->input(); }
void InferenceModel::run(std::vector<model::Decoded>& out) { impl_->run(out); }
const char* InferenceModel::backend() const { return impl_->backend(); }
bool InferenceModel::bf16_floor() const { return opt_.bf16_floor; }
BnStats InferenceModel::bn_stats() const { return opt_.bn_stats; }

const char* bn_stats_name(BnStats s) { return s == BnStats::Batch ? "batch" : "running"; }

BnStats parse_bn_stats(const std::string& s) {
    if (s == "running") return BnStats::Running;
    if (s == "batch") return BnStats::Batch;
    SF_FAIL("--bn-stats must be running (the checkpoint's BatchNorm statistics) or batch (each batch's own), got '%s'",
            s.c_str());
}

int default_eval_batch(const TrainConfig& cfg) {
    std::string why;
    const bool gpu = cfg.train.backend == Backend::Cuda && rt::cuda_device_available(&why);
    return gpu ? cfg.train.batch_size : std::min(cfg.train.batch_size, kMaxCpuEvalBatch);
}

const std::string& option_value(const std::vector<std::string>& args, size_t& i) {
    SF_CHECK(i + 1 < args.size(), "%s needs a value", args[i].c_str());
    return args[++i];
}

int parse_positive_int(const std::string& option, const std::string& value) {
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    SF_CHECK(!value.empty() && end && *end == '\0' && v >= 1 && v <= 1 << 20, "%s: '%s' is not a positive integer",
             option.c_str(), value.c_str());
    return static_cast<int>(v);
}

void check_output_path(const std::string& option, const std::string& path) {
    const fs::path dir = fs::absolute(fs::path(path)).parent_path();
    std::error_code ec;
    SF_CHECK(fs::is_directory(dir, ec), "%s %s: folder %s does not exist", option.c_str(), path.c_str(),
             dir.string().c_str());
}

}  // namespace tools
