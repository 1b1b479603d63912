#include "tools/eval_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "model/checkpoint.h"
#include "model/eval_step.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"

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

// ---- the inference model: CPU reference backend ----

struct InferenceModel::Impl {
    model::SiderNet net;
    model::EvalStep eval;
    rt::Exec ex = rt::Exec::cpu();
    Impl(const model::NetShape& s) : net(s, rt::MemKind::Host), eval(net) {}
};

InferenceModel::InferenceModel(const TrainConfig& cfg, int batch, const CheckpointInfo& ckpt) {
    SF_CHECK(batch >= 1, "inference batch size must be >= 1, got %d", batch);
    if (cfg.train.backend != Backend::Cpu)
        SF_LOG_INFO(
            "train.backend=%s: inference runs on the CPU reference backend (the CUDA inference path is not "
            "part of this build yet)",
            backend_name(cfg.train.backend));
    const model::NetShape shape{batch, cfg.model.input_channels, cfg.model.input_height, cfg.model.input_width};
    shape.validate();
    impl_ = std::make_unique<Impl>(shape);
    const model::Planner& plan = impl_->net.plan();
    const model::CheckpointView view{&impl_->net.table(), plan.master(),  nullptr, nullptr,
                                     plan.buffers(),      plan.counters()};
    model::load_checkpoint(ckpt.path, view, nullptr);
}

InferenceModel::~InferenceModel() = default;

const model::NetShape& InferenceModel::shape() const { return impl_->net.shape(); }
float* InferenceModel::input() { return impl_->net.input(); }
void InferenceModel::run(std::vector<model::Decoded>& out) { impl_->eval.run(impl_->ex, out); }
const char* InferenceModel::backend() const { return "cpu"; }

int default_eval_batch(const TrainConfig& cfg) { return std::min(cfg.train.batch_size, kMaxCpuEvalBatch); }

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
