// TrainConfig names, equality, the resolved-config writer (to_yaml, write_resolved_config), its
// hash and the LossConfig it selects. Reading and validation live in config_parse.cpp.
#include "tools/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/bn_act_cuda.h"
#include "runtime/error.h"

namespace tools {

const char* amp_mode_name(AmpMode m) { return m == AmpMode::Bf16 ? "bf16" : "fp32"; }
const char* backend_name(Backend b) { return b == Backend::Cuda ? "cuda" : "cpu"; }

const char* up_order_setting_name(UpOrderSetting s) {
    switch (s) {
        case UpOrderSetting::UpsampleFirst: return "upsample_first";
        case UpOrderSetting::ConvFirst: return "conv_first";
        case UpOrderSetting::Auto: break;
    }
    return "auto";
}

model::UpOrder resolve_up_order(UpOrderSetting s, Backend backend) {
    switch (s) {
        case UpOrderSetting::UpsampleFirst: return model::UpOrder::UpsampleFirst;
        case UpOrderSetting::ConvFirst: return model::UpOrder::ConvFirst;
        case UpOrderSetting::Auto: break;
    }
    return backend == Backend::Cuda ? model::UpOrder::ConvFirst : model::UpOrder::UpsampleFirst;
}
const char* sched_type_name(SchedType t) { return t == SchedType::Sgdr ? "sgdr" : "warmup_cosine"; }
const char* guard_mode_name(GuardMode m) { return m == GuardMode::Min ? "min" : "max"; }
const char* data_source_name(DataSource s) {
    switch (s) {
        case DataSource::Synthetic: return "synthetic";
        case DataSource::Shards: return "shards";
        case DataSource::Fixed: return "fixed";
    }
    return "?";
}

const std::vector<std::string>& metric_names() {
    static const std::vector<std::string> names = {"mae_px", "rmse_px", "hit_le_2px", "hit_le_5px"};
    return names;
}

namespace {

// model::loss_variant_name lives in model/ (not linked into every tools test); the two names are
// part of the config format anyway.
const char* variant_name(model::LossVariant v) { return v == model::LossVariant::Sider ? "sider" : "corrected"; }

bool eq(const ModelSection& a, const ModelSection& b) {
    return a.name == b.name && a.input_channels == b.input_channels && a.input_height == b.input_height &&
           a.input_width == b.input_width && a.fusion_up_order == b.fusion_up_order &&
           a.fuse_expand_dw == b.fuse_expand_dw && a.fuse_dw_pw == b.fuse_dw_pw && a.merge_heads == b.merge_heads &&
           a.fuse_head_bn == b.fuse_head_bn && a.fuse_up_bn == b.fuse_up_bn;
}
bool eq(const CudaSection& a, const CudaSection& b) {
    for (const CudaKey& k : cuda_keys())
        if (k.flag ? a.*k.flag != b.*k.flag : a.*k.number != b.*k.number) return false;
    return true;
}

bool eq(const OptimizerSection& a, const OptimizerSection& b) {
    return a.name == b.name && a.lr == b.lr && a.betas == b.betas && a.eps == b.eps &&
           a.weight_decay == b.weight_decay && a.clip_grad_norm == b.clip_grad_norm;
}
bool eq(const SchedSection& a, const SchedSection& b) {
    return a.type == b.type && a.epochs == b.epochs && a.warmup_epochs == b.warmup_epochs && a.t_mult == b.t_mult &&
           a.cosine_min_lr == b.cosine_min_lr && a.warmup_steps == b.warmup_steps;
}
bool eq(const TrainSection& a, const TrainSection& b) {
    return a.amp == b.amp && a.batch_size == b.batch_size &&
           a.gradient_accumulation_steps == b.gradient_accumulation_steps && a.seed == b.seed &&
           a.backend == b.backend && a.deterministic == b.deterministic && a.num_workers == b.num_workers &&
           a.prefetch_factor == b.prefetch_factor && a.max_steps == b.max_steps;
}
bool eq(const LossSection& a, const LossSection& b) {
    const LossWeights &x = a.weights, &y = b.weights;
    return a.variant == b.variant && x.heatmap == y.heatmap && x.offset == y.offset &&
           x.hard_negative == y.hard_negative && x.angle == y.angle && x.padding_bce == y.padding_bce &&
           x.y_axis == y.y_axis;
}
bool eq(const DataSection& a, const DataSection& b) {
    return a.source == b.source && a.processed_dir == b.processed_dir && a.num_samples == b.num_samples;
}
bool eq(const EvalSection& a, const EvalSection& b) {
    const EarlyStoppingSection &x = a.early_stopping, &y = b.early_stopping;
    return a.eval_interval == b.eval_interval && a.select_by == b.select_by && a.metrics == b.metrics &&
           x.enabled == y.enabled && x.min_epochs == y.min_epochs && x.min_improvement == y.min_improvement &&
           x.patience == y.patience && x.second_guard.metric == y.second_guard.metric &&
           x.second_guard.min_delta == y.second_guard.min_delta && x.second_guard.mode == y.second_guard.mode;
}
bool eq(const LoggingSection& a, const LoggingSection& b) {
    return a.log_interval == b.log_interval && a.log_dir == b.log_dir && a.tensorboard == b.tensorboard &&
           a.plot == b.plot;
}
bool eq(const CheckpointsSection& a, const CheckpointsSection& b) {
    return a.save_dir == b.save_dir && a.save_interval == b.save_interval && a.save_best == b.save_best &&
           a.keep_last == b.keep_last;
}

// Shortest decimal that reads back exactly, always with a '.' or exponent so it reads as a number
// with a fraction ("1.0", "0.0003", "1e-08").
std::string yaml_double(double v) {
    char buf[40];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*g", p, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

// Double-quoted YAML string (paths may hold '\', ':' or '#').
std::string yaml_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char ch : s) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += static_cast<char>(ch);
        } else if (ch < 0x20 || ch == 0x7f) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", ch);
            out += esc;
        } else {
            out += static_cast<char>(ch);
        }
    }
    return out + "\"";
}

const char* yaml_bool(bool b) { return b ? "true" : "false"; }

class YamlWriter {
public:
    void open(const char* section) {
        line(std::string(section) + ":");
        indent_ += 2;
    }
    void close() { indent_ -= 2; }
    void kv(const char* key, const std::string& value) { line(std::string(key) + ": " + value); }
    void kv(const char* key, int64_t value) { kv(key, std::to_string(value)); }
    void kv(const char* key, uint64_t value) { kv(key, std::to_string(value)); }
    void kv(const char* key, int value) { kv(key, std::to_string(value)); }
    void kv(const char* key, double value) { kv(key, yaml_double(value)); }
    void kv(const char* key, const char* value) { kv(key, std::string(value)); }
    const std::string& text() const { return out_; }

private:
    void line(const std::string& s) { out_ += std::string(static_cast<size_t>(indent_), ' ') + s + "\n"; }
    std::string out_;
    int indent_ = 0;
};

}  // namespace

const std::vector<CudaKey>& cuda_keys() {
    static const std::vector<CudaKey> keys = {
        {"pdl", &CudaSection::pdl, nullptr},
        {"dw_variants", &CudaSection::dw_variants, nullptr},
        {"bn_row_batch", nullptr, &CudaSection::bn_row_batch, kern::bn_act_row_batch_valid, "1 or 4"},
        {"bn_min_blocks", nullptr, &CudaSection::bn_min_blocks, kern::bn_act_min_blocks_valid, "1 or 3"},
        {"upsample_row_loads", &CudaSection::upsample_row_loads, nullptr},
        {"dw_fused_bwd", &CudaSection::dw_fused_bwd, nullptr},
        {"dw_fused_bn_bwd", &CudaSection::dw_fused_bn_bwd, nullptr},
        {"dw_fused_bn_grad", &CudaSection::dw_fused_bn_grad, nullptr},
        {"pw_custom", &CudaSection::pw_custom, nullptr},
        {"pw_stats", &CudaSection::pw_stats, nullptr},
        {"pw_bn_grad", &CudaSection::pw_bn_grad, nullptr},
        {"pw_bn_bwd", &CudaSection::pw_bn_bwd, nullptr},
        {"pw_fused_bwd", &CudaSection::pw_fused_bwd, nullptr},
        {"dw_stats", &CudaSection::dw_stats, nullptr},
        {"head_bn_grad", &CudaSection::head_bn_grad, nullptr},
        {"head_bn_dx", &CudaSection::head_bn_dx, nullptr},
        {"branch_lanes", &CudaSection::branch_lanes, nullptr},
    };
    return keys;
}

bool operator==(const TrainConfig& a, const TrainConfig& b) {
    return eq(a.model, b.model) && eq(a.cuda, b.cuda) && eq(a.optimizer, b.optimizer) && eq(a.sched, b.sched) &&
           eq(a.train, b.train) && eq(a.loss, b.loss) && eq(a.data, b.data) && eq(a.eval, b.eval) &&
           eq(a.logging, b.logging) && eq(a.checkpoints, b.checkpoints);
}

std::string to_yaml(const TrainConfig& c, bool with_cuda) {
    YamlWriter w;
    w.open("model");
    w.kv("name", yaml_string(c.model.name));
    w.kv("input_channels", c.model.input_channels);
    w.kv("input_height", c.model.input_height);
    w.kv("input_width", c.model.input_width);
    w.kv("fusion_up_order", up_order_setting_name(c.model.fusion_up_order));
    w.kv("fuse_expand_dw", yaml_bool(c.model.fuse_expand_dw));
    w.kv("fuse_dw_pw", yaml_bool(c.model.fuse_dw_pw));
    w.kv("merge_heads", yaml_bool(c.model.merge_heads));
    w.kv("fuse_head_bn", yaml_bool(c.model.fuse_head_bn));
    w.kv("fuse_up_bn", yaml_bool(c.model.fuse_up_bn));
    w.close();
    if (with_cuda) {
        const CudaSection& k = c.cuda;
        w.open("cuda");
        for (const CudaKey& ck : cuda_keys()) {
            if (ck.flag)
                w.kv(ck.key, yaml_bool(k.*ck.flag));
            else
                w.kv(ck.key, k.*ck.number);
        }
        w.close();
    }
    w.open("optimizer");
    w.kv("name", yaml_string(c.optimizer.name));
    w.kv("lr", c.optimizer.lr);
    w.kv("betas", "[" + yaml_double(c.optimizer.betas[0]) + ", " + yaml_double(c.optimizer.betas[1]) + "]");
    w.kv("eps", c.optimizer.eps);
    w.kv("weight_decay", c.optimizer.weight_decay);
    w.kv("clip_grad_norm", c.optimizer.clip_grad_norm);
    w.close();
    w.open("sched");
    w.kv("type", sched_type_name(c.sched.type));
    w.kv("epochs", c.sched.epochs);
    w.kv("warmup_epochs", c.sched.warmup_epochs);
    w.kv("t_mult", c.sched.t_mult);
    w.kv("cosine_min_lr", c.sched.cosine_min_lr);
    w.kv("warmup_steps", c.sched.warmup_steps);
    w.close();
    w.open("train");
    w.kv("amp", amp_mode_name(c.train.amp));
    w.kv("batch_size", c.train.batch_size);
    w.kv("gradient_accumulation_steps", c.train.gradient_accumulation_steps);
    w.kv("seed", c.train.seed);
    w.kv("backend", backend_name(c.train.backend));
    w.kv("deterministic", yaml_bool(c.train.deterministic));
    w.kv("num_workers", c.train.num_workers);
    w.kv("prefetch_factor", c.train.prefetch_factor);
    w.kv("max_steps", c.train.max_steps);
    w.close();
    w.open("loss");
    w.kv("variant", variant_name(c.loss.variant));
    w.open("weights");
    w.kv("heatmap", c.loss.weights.heatmap);
    w.kv("offset", c.loss.weights.offset);
    w.kv("hard_negative", c.loss.weights.hard_negative);
    w.kv("angle", c.loss.weights.angle);
    w.kv("padding_bce", c.loss.weights.padding_bce);
    w.kv("y_axis", c.loss.weights.y_axis);
    w.close();
    w.close();
    w.open("data");
    w.kv("source", data_source_name(c.data.source));
    w.kv("processed_dir", yaml_string(c.data.processed_dir));
    w.kv("num_samples", c.data.num_samples);
    w.close();
    w.open("eval");
    w.kv("eval_interval", c.eval.eval_interval);
    w.kv("select_by", c.eval.select_by);
    std::string metrics;
    for (const auto& m : c.eval.metrics) metrics += (metrics.empty() ? "" : ", ") + m;
    w.kv("metrics", "[" + metrics + "]");
    const EarlyStoppingSection& es = c.eval.early_stopping;
    w.open("early_stopping");
    w.kv("enabled", yaml_bool(es.enabled));
    w.kv("min_epochs", es.min_epochs);
    w.kv("min_improvement", es.min_improvement);
    w.kv("patience", es.patience);
    w.open("second_guard");
    w.kv("metric", es.second_guard.metric);
    w.kv("min_delta", es.second_guard.min_delta);
    w.kv("mode", guard_mode_name(es.second_guard.mode));
    w.close();
    w.close();
    w.close();
    w.open("logging");
    w.kv("log_interval", c.logging.log_interval);
    w.kv("log_dir", yaml_string(c.logging.log_dir));
    w.kv("tensorboard", yaml_bool(c.logging.tensorboard));
    w.kv("plot", yaml_bool(c.logging.plot));
    w.close();
    w.open("checkpoints");
    w.kv("save_dir", yaml_string(c.checkpoints.save_dir));
    w.kv("save_interval", c.checkpoints.save_interval);
    w.kv("save_best", yaml_bool(c.checkpoints.save_best));
    w.kv("keep_last", c.checkpoints.keep_last);
    w.close();
    return "# slidefuse resolved training config (every key; docs/CONFIG.md)\n" + w.text();
}

void write_resolved_config(const TrainConfig& c, const std::string& path) {
    const std::string text = to_yaml(c);
    const std::string tmp = path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw rt::Error("config file '" + path + "': cannot create '" + tmp + "': " + std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
    }
    const int err = done < text.size() ? errno : (::fsync(fd) != 0 ? errno : 0);
    ::close(fd);
    if (err != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(err != 0 ? err : errno);
        ::unlink(tmp.c_str());
        throw rt::Error("config file '" + path + "': write failed: " + why);
    }
}

std::string config_hash(const TrainConfig& c) { return text_hash(to_yaml(c)); }

std::string text_hash(const std::string& text) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
    for (unsigned char ch : text) {
        h ^= ch;
        h *= 0x100000001b3ull;  // FNV 64 prime
    }
    char buf[20];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

namespace {

// to_yaml text as "section.key" -> value (two-space indentation per level; comments skipped).
std::map<std::string, std::string> flatten_yaml(const std::string& text) {
    std::map<std::string, std::string> out;
    std::vector<std::string> path;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        const size_t indent = line.find_first_not_of(' ');
        if (indent == std::string::npos || line[indent] == '#') continue;
        path.resize(std::min(path.size(), indent / 2));
        const size_t colon = line.find(": ", indent);
        if (colon == std::string::npos) {  // "section:"
            path.push_back(line.substr(indent, line.size() - indent - 1));
            continue;
        }
        std::string key;
        for (const std::string& p : path) key += p + ".";
        out[key + line.substr(indent, colon - indent)] = line.substr(colon + 2);
    }
    return out;
}

}  // namespace

std::string config_differences(const std::string& old_yaml, const std::string& new_yaml) {
    if (old_yaml.empty())
        return "the saved run recorded no config to compare (an older checkpoint); its config hash differs";
    const std::map<std::string, std::string> a = flatten_yaml(old_yaml), b = flatten_yaml(new_yaml);
    std::string out;
    size_t n = 0;
    auto add = [&](const std::string& key, const std::string& was, const std::string& now) {
        if (n++ < 8) out += (out.empty() ? "" : ", ") + key + ": " + was + " -> " + now;
    };
    for (const auto& kv : a) {
        auto it = b.find(kv.first);
        if (it == b.end())
            add(kv.first, kv.second, "(absent)");
        else if (it->second != kv.second)
            add(kv.first, kv.second, it->second);
    }
    for (const auto& kv : b)
        if (!a.count(kv.first)) add(kv.first, "(absent)", kv.second);
    if (n > 8) out += rt::format(" and %zu more", n - 8);
    return n == 0 ? "no key differs; the config hash does" : "changed: " + out;
}

model::LossConfig loss_config(const TrainConfig& c) {
    model::LossConfig l;
    l.variant = c.loss.variant;
    l.w_heatmap = c.loss.weights.heatmap;
    l.w_offset = c.loss.weights.offset;
    l.w_hard_negative = c.loss.weights.hard_negative;
    l.w_angle = c.loss.weights.angle;
    l.w_padding_bce = c.loss.weights.padding_bce;
    l.w_y_axis = c.loss.weights.y_axis;
    return l;
}

}  // namespace tools
