#include "tools/train.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/eval_step.h"
#include "model/init.h"
#include "model/schedule.h"
#include "model/train_step.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/progress.h"
#include "tools/train_data.h"

namespace tools {

namespace {

struct Args {
    std::string config;
    std::string out;
    std::vector<std::string> overrides;
};

Args parse_args(const std::vector<std::string>& args) {
    Args a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--config" || s == "--out") {
            SF_CHECK(i + 1 < args.size(), "%s needs a value", s.c_str());
            (s == "--config" ? a.config : a.out) = args[++i];
        } else if (s.rfind("--", 0) == 0) {
            SF_FAIL("unknown option '%s'\n%s", s.c_str(), train_usage().c_str());
        } else {
            SF_CHECK(s.find('=') != std::string::npos, "unexpected argument '%s' (overrides look like key.path=value)",
                     s.c_str());
            a.overrides.push_back(s);
        }
    }
    SF_CHECK(!a.config.empty(), "missing --config PATH\n%s", train_usage().c_str());
    return a;
}

void make_dirs(const std::string& path) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    SF_CHECK(!ec, "cannot create directory '%s': %s", path.c_str(), ec.message().c_str());
}

std::string default_run_dir(const TrainConfig& c) {
    char buf[64];
    const std::time_t t = std::time(nullptr);
    std::strftime(buf, sizeof(buf), "run-%Y%m%d-%H%M%S", std::localtime(&t));
    return c.logging.log_dir + "/" + buf;
}

model::OptimConfig optim_config(const TrainConfig& c) {
    model::OptimConfig oc;
    oc.adamw.lr = c.optimizer.lr;
    oc.adamw.beta1 = c.optimizer.betas[0];
    oc.adamw.beta2 = c.optimizer.betas[1];
    oc.adamw.eps = c.optimizer.eps;
    oc.adamw.weight_decay = c.optimizer.weight_decay;
    oc.clip_grad_norm = c.optimizer.clip_grad_norm;
    return oc;
}

double lr_at(const TrainConfig& c, int epoch, int64_t step, int64_t total) {
    if (c.sched.type == SchedType::Sgdr)
        return model::sgdr_lr(c.optimizer.lr, c.sched.cosine_min_lr, c.sched.warmup_epochs, c.sched.t_mult, epoch);
    return model::warmup_cosine_lr(c.optimizer.lr, c.sched.cosine_min_lr, c.sched.warmup_steps, total, step);
}

// One pass over the validation data with the original's metrics (MODEL_SPEC §3.5).
model::Metrics validate(const rt::Exec& ex, model::SiderNet& net, model::EvalStep& eval, BatchSource& val) {
    model::Metrics m;
    std::vector<data::Label> labels;
    std::vector<model::Decoded> decoded;
    for (uint64_t k = 0; k < val.batches_per_epoch(); ++k) {
        const int real = val.next(net.input(), labels);
        eval.run(ex, decoded);
        for (int b = 0; b < real; ++b) m.add(decoded[static_cast<size_t>(b)], labels[static_cast<size_t>(b)]);
    }
    return m;
}

nlohmann::json step_record(int64_t step, int epoch, const model::StepStats& s, double window_loss, int64_t skipped,
                           double sps) {
    return {{"step", step},
            {"epoch", epoch},
            {"loss", s.mean_loss},
            {"loss_mean_window", window_loss},
            {"focal_gap", s.loss.focal_gap},
            {"focal_slider", s.loss.focal_slider},
            {"offset", s.loss.offset},
            {"hard_negative", s.loss.hard_negative},
            {"angle", s.loss.angle},
            {"padding_bce", s.loss.padding_bce},
            {"y_axis", s.loss.y_axis},
            {"lr", s.lr},
            {"grad_norm", s.grad_norm},
            {"skipped_steps", skipped},
            {"samples_per_s", sps}};
}

}  // namespace

std::string train_usage() {
    return "usage: slidefuse train --config PATH [--out DIR] [key.path=value ...]\n"
           "  --config PATH   YAML training config (docs/CONFIG.md)\n"
           "  --out DIR       output folder (default: <logging.log_dir>/run-<timestamp>)\n"
           "  key.path=value  override any config key, e.g. train.batch_size=64 optimizer.betas=[0.9,0.99]";
}

int cmd_train(const std::vector<std::string>& argv) {
    const Args args = parse_args(argv);
    const TrainConfig cfg = load_config(args.config, args.overrides);
    SF_CHECK(cfg.train.backend == Backend::Cpu,
             "train.backend=cuda: the CUDA training step is not part of this build yet; run the CPU reference "
             "backend with train.backend=cpu");
    const int batch = cfg.train.batch_size, accum = cfg.train.gradient_accumulation_steps;
    if (cfg.data.source == DataSource::Synthetic) ensure_synthetic_dataset(cfg);
    std::unique_ptr<BatchSource> train_data = make_batch_source(cfg, SplitRole::Train);
    std::unique_ptr<BatchSource> val_data = make_batch_source(cfg, SplitRole::Val);
    const int64_t steps_per_epoch = static_cast<int64_t>(train_data->batches_per_epoch()) / accum;
    SF_CHECK(steps_per_epoch >= 1, "the training data (%s) is smaller than one optimizer step (%d x %d samples)",
             train_data->describe().c_str(), batch, accum);

    const std::string out = args.out.empty() ? default_run_dir(cfg) : args.out;
    make_dirs(out);
    write_resolved_config(cfg, out + "/config.resolved.yaml");
    std::ofstream metrics(out + "/metrics.jsonl");
    SF_CHECK(metrics.good(), "cannot write %s/metrics.jsonl", out.c_str());

    model::NetShape shape{batch, cfg.model.input_channels, cfg.model.input_height, cfg.model.input_width};
    model::SiderNet net(shape, rt::MemKind::Host);
    const model::Planner& plan = net.plan();
    model::init_parameters(net.table(), cfg.train.seed, plan.master(), plan.buffers(), plan.counters());
    model::TrainStep step(net, loss_config(cfg), optim_config(cfg));
    model::EvalStep eval(net);
    const rt::Exec ex = rt::Exec::cpu();

    int64_t total = steps_per_epoch * cfg.sched.epochs;
    if (cfg.train.max_steps > 0) total = std::min(total, cfg.train.max_steps);
    SF_LOG_INFO(
        "training %s on the CPU reference backend: %zu parameters, batch %d x %d, input %dx%dx%d, %lld steps "
        "(%lld per epoch), loss %s; train: %s; val: %s; output %s",
        cfg.model.name.c_str(), net.table().num_parameters(), batch, accum, shape.channels, shape.height, shape.width,
        static_cast<long long>(total), static_cast<long long>(steps_per_epoch),
        model::loss_variant_name(cfg.loss.variant), train_data->describe().c_str(), val_data->describe().c_str(),
        out.c_str());

    Progress progress(total);
    std::vector<data::Label> labels;
    double first_loss = NAN, last_loss = NAN, window_loss = 0;
    int window = 0;
    int64_t done = 0;
    for (int epoch = 0; done < total; ++epoch) {
        for (int64_t k = 0; k < steps_per_epoch && done < total; ++k) {
            const double lr = lr_at(cfg, epoch, done, total);
            for (int a = 0; a < accum; ++a) {
                train_data->next(net.input(), labels);
                step.micro_step(ex, labels.data(), 1.0 / accum);
            }
            const model::StepStats s = step.optimizer_step(ex, lr);
            ++done;
            if (std::isnan(first_loss)) first_loss = s.mean_loss;
            last_loss = s.mean_loss;
            window_loss += s.mean_loss;
            ++window;
            if (done % cfg.logging.log_interval == 0 || done == total) {
                const double sps = static_cast<double>(done) * batch * accum / progress.elapsed_s();
                char body[256];
                std::snprintf(body, sizeof(body), "epoch %d | loss %.4f | lr %.3e | grad norm %.3e | %.2f samples/s",
                              epoch + 1, window_loss / window, lr, s.grad_norm, sps);
                progress.update(done, body);
                metrics << step_record(done, epoch + 1, s, window_loss / window, step.skipped_steps(), sps).dump()
                        << "\n"
                        << std::flush;
                window_loss = 0;
                window = 0;
            }
        }
        // Validation at the end of an epoch (every eval.eval_interval) and of the run.
        const bool epoch_end = done % steps_per_epoch == 0;
        if ((epoch_end && (epoch + 1) % cfg.eval.eval_interval == 0) || done == total) {
            const model::Metrics m = validate(ex, net, eval, *val_data);
            progress.finish();
            std::printf(
                "validation after epoch %d: mae_px %.3f rmse_px %.3f hit_le_2px %.1f%% hit_le_5px %.1f%% "
                "(%zu samples)\n",
                epoch + 1, m.mae_px(), m.rmse_px(), m.hit_le_2px(), m.hit_le_5px(), m.count());
            const nlohmann::json j = {
                {"validation", true},           {"epoch", epoch + 1},     {"step", done},
                {"mae_px", m.mae_px()},         {"rmse_px", m.rmse_px()}, {"hit_le_2px", m.hit_le_2px()},
                {"hit_le_5px", m.hit_le_5px()}, {"gap_mae", m.gap_mae()}, {"slider_mae", m.slider_mae()},
                {"samples", m.count()}};
            metrics << j.dump() << "\n" << std::flush;
        }
    }
    progress.finish();
    std::printf("done: %lld steps in %s, loss %.4f -> %.4f, %lld skipped; outputs in %s\n",
                static_cast<long long>(done), format_duration(progress.elapsed_s()).c_str(), first_loss, last_loss,
                static_cast<long long>(step.skipped_steps()), out.c_str());
    return 0;
}

}  // namespace tools
