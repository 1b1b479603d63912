#include "tools/train.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "data/fixed_batch.h"
#include "model/eval_step.h"
#include "model/init.h"
#include "model/schedule.h"
#include "model/train_step.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/config.h"
#include "tools/progress.h"

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
    std::string cur;
    for (size_t i = 0; i <= path.size(); ++i) {
        if (i == path.size() || path[i] == '/') {
            if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
                SF_FAIL("cannot create directory '%s': %s", cur.c_str(), std::strerror(errno));
        }
        if (i < path.size()) cur.push_back(path[i]);
    }
}

std::string default_run_dir(const TrainConfig& c) {
    char buf[64];
    const std::time_t t = std::time(nullptr);
    std::strftime(buf, sizeof(buf), "run-%Y%m%d-%H%M%S", std::localtime(&t));
    return c.logging.log_dir + "/" + buf;
}

// Deterministic per-epoch permutation of the sample indices from (seed, epoch).
std::vector<int> epoch_order(int n, uint64_t seed, int epoch) {
    std::vector<int> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    uint64_t s = model::init_hash(seed, 0x5348554646ull, static_cast<uint64_t>(epoch));
    for (int i = n - 1; i > 0; --i) {
        s = model::init_hash(s, 1, static_cast<uint64_t>(i));
        std::swap(idx[static_cast<size_t>(i)], idx[s % static_cast<uint64_t>(i + 1)]);
    }
    return idx;
}

void load_batch(const data::FixedSamples& d, const std::vector<int>& order, size_t first, int batch, float* input,
                std::vector<data::Label>& labels) {
    const size_t per = static_cast<size_t>(d.h) * d.w * d.c;
    labels.resize(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) {
        const size_t s = static_cast<size_t>(order[(first + static_cast<size_t>(b)) % order.size()]);
        std::copy(d.input.begin() + static_cast<std::ptrdiff_t>(s * per),
                  d.input.begin() + static_cast<std::ptrdiff_t>((s + 1) * per), input + static_cast<size_t>(b) * per);
        labels[static_cast<size_t>(b)] = d.labels[s];
    }
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
    SF_CHECK(cfg.data.source == DataSource::Fixed,
             "data.source=%s: only the fixed deterministic samples (data.source=fixed) are available in this build",
             data_source_name(cfg.data.source));
    const int batch = cfg.train.batch_size, accum = cfg.train.gradient_accumulation_steps;
    SF_CHECK(cfg.data.num_samples >= static_cast<int64_t>(batch),
             "data.num_samples (%lld) must be >= train.batch_size (%d)", static_cast<long long>(cfg.data.num_samples),
             batch);

    const std::string out = args.out.empty() ? default_run_dir(cfg) : args.out;
    make_dirs(out);
    write_resolved_config(cfg, out + "/config.resolved.yaml");
    std::ofstream metrics(out + "/metrics.jsonl");
    SF_CHECK(metrics.good(), "cannot write %s/metrics.jsonl", out.c_str());

    model::NetShape shape{batch, cfg.model.input_channels, cfg.model.input_height, cfg.model.input_width};
    model::SiderNet net(shape, rt::MemKind::Host);
    const model::Planner& plan = net.plan();
    model::init_parameters(net.table(), cfg.train.seed, plan.master(), plan.buffers(), plan.counters());
    const data::FixedSamples samples = data::make_fixed_samples(cfg.train.seed, static_cast<int>(cfg.data.num_samples),
                                                                shape.channels, shape.height, shape.width);

    model::OptimConfig oc;
    oc.adamw.lr = cfg.optimizer.lr;
    oc.adamw.beta1 = cfg.optimizer.betas[0];
    oc.adamw.beta2 = cfg.optimizer.betas[1];
    oc.adamw.eps = cfg.optimizer.eps;
    oc.adamw.weight_decay = cfg.optimizer.weight_decay;
    oc.clip_grad_norm = cfg.optimizer.clip_grad_norm;
    model::TrainStep step(net, loss_config(cfg), oc);
    model::EvalStep eval(net);
    const rt::Exec ex = rt::Exec::cpu();

    const int64_t steps_per_epoch = cfg.data.num_samples / (static_cast<int64_t>(batch) * accum);
    SF_CHECK(steps_per_epoch >= 1, "data.num_samples (%lld) is smaller than one optimizer step (%d x %d samples)",
             static_cast<long long>(cfg.data.num_samples), batch, accum);
    int64_t total = steps_per_epoch * cfg.sched.epochs;
    if (cfg.train.max_steps > 0) total = std::min(total, cfg.train.max_steps);
    SF_LOG_INFO(
        "training %s on the CPU reference backend: %zu parameters, batch %d x %d, input %dx%dx%d, %lld steps "
        "(%lld per epoch), loss %s, output %s",
        cfg.model.name.c_str(), net.table().num_parameters(), batch, accum, shape.channels, shape.height, shape.width,
        static_cast<long long>(total), static_cast<long long>(steps_per_epoch),
        model::loss_variant_name(cfg.loss.variant), out.c_str());

    Progress progress(total);
    std::vector<data::Label> labels;
    std::vector<model::Decoded> decoded;
    double first_loss = NAN, last_loss = NAN, window_loss = 0;
    int window = 0;
    int64_t done = 0;
    for (int epoch = 0; done < total; ++epoch) {
        const std::vector<int> order = epoch_order(static_cast<int>(cfg.data.num_samples), cfg.train.seed, epoch);
        size_t cursor = 0;
        for (int64_t k = 0; k < steps_per_epoch && done < total; ++k) {
            const double lr = cfg.sched.type == SchedType::Sgdr
                                  ? model::sgdr_lr(cfg.optimizer.lr, cfg.sched.cosine_min_lr, cfg.sched.warmup_epochs,
                                                   cfg.sched.t_mult, epoch)
                                  : model::warmup_cosine_lr(cfg.optimizer.lr, cfg.sched.cosine_min_lr,
                                                            cfg.sched.warmup_steps, total, done);
            for (int a = 0; a < accum; ++a, cursor += static_cast<size_t>(batch)) {
                load_batch(samples, order, cursor, batch, net.input(), labels);
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
                nlohmann::json j = {{"step", done},
                                    {"epoch", epoch + 1},
                                    {"loss", s.mean_loss},
                                    {"loss_mean_window", window_loss / window},
                                    {"focal_gap", s.loss.focal_gap},
                                    {"focal_slider", s.loss.focal_slider},
                                    {"offset", s.loss.offset},
                                    {"hard_negative", s.loss.hard_negative},
                                    {"angle", s.loss.angle},
                                    {"padding_bce", s.loss.padding_bce},
                                    {"y_axis", s.loss.y_axis},
                                    {"lr", lr},
                                    {"grad_norm", s.grad_norm},
                                    {"skipped_steps", step.skipped_steps()},
                                    {"samples_per_s", sps}};
                metrics << j.dump() << "\n" << std::flush;
                window_loss = 0;
                window = 0;
            }
        }
        // Validation at the end of an epoch (and of the run): the original's metrics on the samples.
        const bool epoch_end = done % steps_per_epoch == 0;
        if ((epoch_end && (epoch + 1) % cfg.eval.eval_interval == 0) || done == total) {
            model::Metrics m;
            std::vector<int> identity(static_cast<size_t>(cfg.data.num_samples));
            std::iota(identity.begin(), identity.end(), 0);
            for (size_t first = 0; first + static_cast<size_t>(batch) <= identity.size();
                 first += static_cast<size_t>(batch)) {
                load_batch(samples, identity, first, batch, net.input(), labels);
                eval.run(ex, decoded);
                for (int b = 0; b < batch; ++b) m.add(decoded[static_cast<size_t>(b)], labels[static_cast<size_t>(b)]);
            }
            progress.finish();
            std::printf(
                "validation after epoch %d: mae_px %.3f rmse_px %.3f hit_le_2px %.1f%% hit_le_5px %.1f%% (%zu "
                "samples)\n",
                epoch + 1, m.mae_px(), m.rmse_px(), m.hit_le_2px(), m.hit_le_5px(), m.count());
            nlohmann::json j = {
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
