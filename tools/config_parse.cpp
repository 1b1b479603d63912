// YAML text (+ command-line overrides) -> TrainConfig: the section-by-section schema of the config
// (which keys exist, their types and ranges, cross-key checks), the override syntax, and the single
// rt::Error that lists every problem. The strict reader itself is config_reader.cpp.
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "kernels/bn_act_cuda.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/config.h"
#include "tools/config_reader.h"

namespace tools {
namespace {

using config_detail::above;
using config_detail::at_least;
using config_detail::Ctx;
using config_detail::describe;
using config_detail::Section;
using config_detail::short_number;
using config_detail::unit_interval_open;

void read_model(Section s, ModelSection& m) {
    s.choice<std::string>("name", m.name, {{"Lite-HRNet-18+LiteFPN", "Lite-HRNet-18+LiteFPN"}});
    if (s.integer("input_channels", m.input_channels, at_least(0)) && m.input_channels != 2 && m.input_channels != 4)
        s.error("input_channels", "expected 2 or 4, got " + std::to_string(m.input_channels));
    if (s.integer("input_height", m.input_height, at_least(32)) && m.input_height % 32 != 0)
        s.error("input_height", "expected a multiple of 32, got " + std::to_string(m.input_height));
    if (s.integer("input_width", m.input_width, at_least(32)) && m.input_width % 32 != 0)
        s.error("input_width", "expected a multiple of 32, got " + std::to_string(m.input_width));
    s.choice<UpOrderSetting>("fusion_up_order", m.fusion_up_order,
                             {{"auto", UpOrderSetting::Auto},
                              {"upsample_first", UpOrderSetting::UpsampleFirst},
                              {"conv_first", UpOrderSetting::ConvFirst}});
    s.boolean("fuse_expand_dw", m.fuse_expand_dw);
    s.boolean("fuse_dw_pw", m.fuse_dw_pw);
    s.boolean("merge_heads", m.merge_heads);
    s.boolean("fuse_head_bn", m.fuse_head_bn);
    s.boolean("fuse_up_bn", m.fuse_up_bn);
    s.ignore("model_path");
    s.finish();
}

// model: as read (dw_fused_bn_grad needs the fused LiteBlock).
void read_cuda(Section s, CudaSection& c, const ModelSection& m) {
    for (const CudaKey& k : cuda_keys()) {
        if (k.flag)
            s.boolean(k.key, c.*k.flag);
        else if (s.integer(k.key, c.*k.number, at_least(1)) && !k.valid(c.*k.number))
            s.error(k.key, std::string("expected ") + k.values + ", got " + std::to_string(c.*k.number));
    }
    // What a switch builds on must be on too (bench step's flags imply it; a config says it).
    const auto needs = [&](bool on, const char* key, bool base, const char* what) {
        if (on && !base) s.error(key, std::string("true needs ") + what);
    };
    needs(c.dw_fused_bn_bwd, "dw_fused_bn_bwd", c.dw_fused_bwd, "cuda.dw_fused_bwd: true");
    needs(c.dw_fused_bn_grad, "dw_fused_bn_grad", c.dw_fused_bwd && m.fuse_expand_dw,
          "cuda.dw_fused_bwd: true and model.fuse_expand_dw: true");
    needs(c.pw_stats, "pw_stats", c.pw_custom, "cuda.pw_custom: true");
    needs(c.pw_bn_grad, "pw_bn_grad", c.pw_custom, "cuda.pw_custom: true");
    needs(c.pw_bn_bwd, "pw_bn_bwd", c.pw_custom, "cuda.pw_custom: true");
    needs(c.pw_fused_bwd, "pw_fused_bwd", c.pw_custom, "cuda.pw_custom: true");
    needs(c.head_bn_grad, "head_bn_grad", m.fuse_head_bn, "model.fuse_head_bn: true");
    needs(c.head_bn_dx, "head_bn_dx", c.head_bn_grad, "cuda.head_bn_grad: true");
    s.finish();
}

void read_optimizer(Section s, OptimizerSection& o) {
    s.choice<std::string>("name", o.name, {{"AdamW", "AdamW"}});
    s.number("lr", o.lr, above(0));
    s.number_pair("betas", o.betas, unit_interval_open());
    s.number("eps", o.eps, above(0));
    s.number("weight_decay", o.weight_decay, at_least(0));
    s.number("clip_grad_norm", o.clip_grad_norm, at_least(0));
    s.finish();
}

// lr: optimizer.lr as read (cosine_min_lr must stay below it).
void read_sched(Section s, SchedSection& c, double lr) {
    s.choice<SchedType>("type", c.type, {{"sgdr", SchedType::Sgdr}, {"warmup_cosine", SchedType::WarmupCosine}});
    s.integer("epochs", c.epochs, at_least(1));
    s.integer("warmup_epochs", c.warmup_epochs, at_least(0));
    if (c.type == SchedType::Sgdr && c.warmup_epochs < 1)
        s.error("warmup_epochs", "expected >= 1 with sched.type sgdr (it is T_0), got 0");
    s.integer("t_mult", c.t_mult, at_least(1));
    s.number("cosine_min_lr", c.cosine_min_lr, at_least(0));
    if (c.cosine_min_lr >= lr)
        s.error("cosine_min_lr",
                "expected < optimizer.lr (" + short_number(lr) + "), got " + short_number(c.cosine_min_lr));
    s.integer("warmup_steps", c.warmup_steps, at_least(0));
    s.finish();
}

void read_train(Section s, TrainSection& t) {
    s.bool_or_choice<AmpMode>("amp", t.amp, AmpMode::Bf16, AmpMode::Fp32,
                              {{"bf16", AmpMode::Bf16}, {"fp32", AmpMode::Fp32}});
    s.integer("batch_size", t.batch_size, at_least(1));
    s.integer("gradient_accumulation_steps", t.gradient_accumulation_steps, at_least(1));
    s.integer("seed", t.seed, at_least(0));
    s.choice<Backend>("backend", t.backend, {{"cuda", Backend::Cuda}, {"cpu", Backend::Cpu}});
    s.boolean("deterministic", t.deterministic);
    s.integer("num_workers", t.num_workers, at_least(0));
    s.integer("prefetch_factor", t.prefetch_factor, at_least(1));
    s.integer("max_steps", t.max_steps, at_least(0));
    for (const char* k :
         {"channels_last", "compile_mode", "compile_model", "non_blocking", "persistent_workers", "pin_memory"})
        s.ignore(k);
    s.finish();
}

void read_loss(Section s, LossSection& l) {
    s.choice<model::LossVariant>("variant", l.variant,
                                 {{"sider", model::LossVariant::Sider}, {"corrected", model::LossVariant::Corrected}});
    Section w = s.child("weights");
    w.number("heatmap", l.weights.heatmap, at_least(0));
    w.number("offset", l.weights.offset, at_least(0));
    w.number("hard_negative", l.weights.hard_negative, at_least(0));
    w.number("angle", l.weights.angle, at_least(0));
    w.number("padding_bce", l.weights.padding_bce, at_least(0));
    w.number("y_axis", l.weights.y_axis, at_least(0));
    w.finish();
    s.finish();
}

void read_data(Section s, DataSection& d) {
    s.choice<DataSource>(
        "source", d.source,
        {{"synthetic", DataSource::Synthetic}, {"shards", DataSource::Shards}, {"fixed", DataSource::Fixed}});
    s.string("processed_dir", d.processed_dir, d.source == DataSource::Shards);
    s.integer("num_samples", d.num_samples, at_least(1));
    s.finish();
}

void read_eval(Section s, EvalSection& e) {
    std::vector<std::pair<std::string, std::string>> metrics;
    for (const auto& m : metric_names()) metrics.emplace_back(m, m);
    s.integer("eval_interval", e.eval_interval, at_least(1));
    s.choice("select_by", e.select_by, metrics);
    s.name_list("metrics", e.metrics, metric_names());
    Section es = s.child("early_stopping");
    EarlyStoppingSection& x = e.early_stopping;
    es.boolean("enabled", x.enabled);
    es.integer("min_epochs", x.min_epochs, at_least(0));
    es.number("min_improvement", x.min_improvement, at_least(0));
    es.integer("patience", x.patience, at_least(1));
    Section g = es.child("second_guard");
    g.choice("metric", x.second_guard.metric, metrics);
    g.number("min_delta", x.second_guard.min_delta, at_least(0));
    g.choice<GuardMode>("mode", x.second_guard.mode, {{"min", GuardMode::Min}, {"max", GuardMode::Max}});
    g.finish();
    es.finish();
    s.ignore("vis_fail_k");
    s.ignore("visualization");
    s.finish();
}

void read_logging(Section s, LoggingSection& l) {
    s.integer("log_interval", l.log_interval, at_least(1));
    s.string("log_dir", l.log_dir, true);
    s.boolean("tensorboard", l.tensorboard);
    s.boolean("plot", l.plot);
    for (const char* k :
         {"auto_launch_tensorboard", "tb_items", "tensorboard_dir", "tensorboard_port", "time_tracking"})
        s.ignore(k);
    s.finish();
}

void read_checkpoints(Section s, CheckpointsSection& c) {
    s.string("save_dir", c.save_dir, false);
    s.integer("save_interval", c.save_interval, at_least(1));
    s.boolean("save_best", c.save_best);
    s.integer("keep_last", c.keep_last, at_least(1));
    s.ignore("save_strategy");
    s.finish();
}

// The original's hardware section: only cudnn_deterministic means something (-> train.deterministic).
std::optional<bool> read_hardware(Section s) {
    std::optional<bool> deterministic;
    bool b = false;
    if (s.boolean("cudnn_deterministic", b)) deterministic = b;
    for (const char* k : {"allow_tf32", "cudnn_allow_tf32", "cudnn_benchmark", "device", "matmul_allow_tf32"})
        s.ignore(k);
    s.finish();
    return deterministic;
}

void read_root(Ctx& ctx, const YAML::Node& root, TrainConfig& c) {
    Section s(ctx, root, "");
    read_model(s.child("model"), c.model);
    read_cuda(s.child("cuda"), c.cuda, c.model);
    read_optimizer(s.child("optimizer"), c.optimizer);
    read_sched(s.child("sched"), c.sched, c.optimizer.lr);
    Section train = s.child("train");
    read_train(train, c.train);
    read_loss(s.child("loss"), c.loss);
    read_data(s.child("data"), c.data);
    read_eval(s.child("eval"), c.eval);
    read_logging(s.child("logging"), c.logging);
    read_checkpoints(s.child("checkpoints"), c.checkpoints);
    Section hardware = s.child("hardware");
    if (std::optional<bool> det = read_hardware(hardware)) {
        if (train.has("deterministic") && *det != c.train.deterministic)
            hardware.error("cudnn_deterministic", std::string("conflicts with train.deterministic (") +
                                                      (c.train.deterministic ? "true" : "false") + "); set only one");
        c.train.deterministic = *det;
    }
    s.ignore("monitoring");
    s.ignore("timestamp");
    s.finish();
}

// Applies one "a.b.c=value" to the tree, creating missing sections on the way.
void apply_override(Ctx& ctx, YAML::Node& root, const std::string& ov) {
    const std::string where = "command-line override '" + ov + "': ";
    const size_t eq = ov.find('=');
    if (eq == std::string::npos) {
        ctx.errors.push_back(where + "expected key.path=value");
        return;
    }
    const std::string path = ov.substr(0, eq);
    std::vector<std::string> parts;
    for (size_t b = 0;;) {
        const size_t dot = path.find('.', b);
        parts.push_back(path.substr(b, dot == std::string::npos ? std::string::npos : dot - b));
        if (dot == std::string::npos) break;
        b = dot + 1;
    }
    for (const auto& p : parts)
        if (p.empty() || p.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
                             std::string::npos) {
            ctx.errors.push_back(where +
                                 "expected key.path=value with a key path of letters, digits and '_' "
                                 "separated by '.', got '" +
                                 path + "'");
            return;
        }
    YAML::Node value;
    try {
        value = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception& e) {
        ctx.errors.push_back(where + "the value is not valid YAML: " + e.msg);
        return;
    }
    if (!root.IsMap()) root.reset(YAML::Node(YAML::NodeType::Map));
    YAML::Node cur;
    cur.reset(root);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        YAML::Node next = cur[parts[i]];
        std::string prefix = parts[0];
        for (size_t j = 1; j <= i; ++j) prefix += "." + parts[j];
        if (!next.IsDefined() || next.IsNull()) {
            next = YAML::Node(YAML::NodeType::Map);
            ctx.overrides.emplace(prefix, ov);  // a section this override created: errors there are its
        } else if (!next.IsMap()) {
            ctx.errors.push_back(where + "config key '" + prefix + "' is not a section");
            return;
        }
        cur.reset(next);
    }
    cur[parts.back()] = value;
    ctx.overrides[path] = ov;
}

[[noreturn]] void throw_errors(const Ctx& ctx) {
    std::string msg = "config '" + ctx.source + "': " + std::to_string(ctx.errors.size()) + " error(s):";
    for (const auto& e : ctx.errors) msg += "\n  " + e;
    throw rt::Error(msg);
}

}  // namespace

TrainConfig parse_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                         const std::string& source_name) {
    Ctx ctx;
    ctx.source = source_name;
    YAML::Node root;
    try {
        root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& e) {
        ctx.errors.push_back(source_name + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
        throw_errors(ctx);
    }
    const bool root_ok = root.IsMap() || root.IsNull();
    if (!root_ok)
        ctx.errors.push_back(source_name + ": expected a mapping of sections at the top level, got " + describe(root));
    for (const auto& ov : overrides) apply_override(ctx, root, ov);

    TrainConfig c;
    if (root_ok) read_root(ctx, root.IsMap() ? root : YAML::Node(), c);
    if (!ctx.errors.empty()) throw_errors(ctx);
    if (!ctx.ignored.empty()) {
        std::string keys;
        for (const auto& k : ctx.ignored) keys += (keys.empty() ? "" : ", ") + k;
        SF_LOG_INFO(
            "config '%s': ignoring %zu key(s) of the original config that mean nothing in slidefuse "
            "(docs/CONFIG.md): %s",
            source_name.c_str(), ctx.ignored.size(), keys.c_str());
    }
    return c;
}

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw rt::Error("config file '" + path +
                        "' is a folder: --config takes a YAML file (e.g. configs/default.yaml)");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw rt::Error("config file '" + path + "': cannot open: " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw rt::Error("config file '" + path + "': read failed");
    return parse_config(text.str(), overrides, path);
}

}  // namespace tools
