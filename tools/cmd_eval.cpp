// `slidefuse eval`: a checkpoint's accuracy on one split with the original's validation metrics
// (MODEL_SPEC §3.5): eval-mode forward (BatchNorm running statistics), masked decode (§1.7),
// per-sample L1-over-axes errors in letterbox pixels. Prints the metric table, writes a JSON
// summary and optionally one CSV row per sample. docs/EVAL_PREDICT.md.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/fixed_batch.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/preprocess.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/commands.h"
#include "tools/eval_model.h"
#include "tools/progress.h"

namespace tools {

namespace {

std::string eval_usage() {
    return "usage: slidefuse eval --checkpoint PATH [--config PATH] [--split val|test|train] [--data DIR]\n"
           "                      [--out eval.json] [--csv per_sample.csv] [--batch-size N] [--bf16-floor]\n"
           "                      [--bn-stats running|batch] [key.path=value ...]\n"
           "  --checkpoint PATH  checkpoint or exported weights (.safetensors)\n"
           "  --config PATH      YAML config (default: the run's config.resolved.yaml beside the checkpoint,\n"
           "                     in its parent folder, or in the run folder recorded in it)\n"
           "  --split NAME       val (default), test or train: DIR/<split>/*.sfshard\n"
           "  --data DIR         dataset root holding <split>/ (or the split folder itself); default\n"
           "                     data.processed_dir. data.source=fixed evaluates the fixed samples instead\n"
           "  --out PATH         JSON summary (default: <checkpoint without .safetensors>.eval-<split>.json)\n"
           "  --csv PATH         per-sample CSV: true and predicted coordinates, errors\n"
           "  --batch-size N     samples per forward (default: train.batch_size, at most 4 on the CPU)\n"
           "  --bf16-floor       CPU reference with its conv weights and input rounded to bf16, as the CUDA\n"
           "                     network sees them: what rounding alone changes (needs train.backend=cpu;\n"
           "                     tools/backend_compare.py --floor-csv, docs/EVAL_PREDICT.md)\n"
           "  --bn-stats S       running (default): BatchNorm with the checkpoint's running statistics, the\n"
           "                     original's eval mode; batch: with each batch's own statistics, as in training\n"
           "                     (a diagnostic: results depend on --batch-size; a short last batch is\n"
           "                     normalized over its own samples)\n"
           "  key.path=value     config overrides, e.g. data.processed_dir=/data/sider";
}

struct Args {
    std::string checkpoint, config, split = "val", data, out, csv;
    int batch = 0;
    std::vector<std::string> overrides;
    bool help = false, bf16_floor = false;
    BnStats bn_stats = BnStats::Running;
};

Args parse_args(const std::vector<std::string>& args) {
    Args a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--help" || s == "-h") {
            a.help = true;
        } else if (s == "--checkpoint") {
            a.checkpoint = option_value(args, i);
        } else if (s == "--config") {
            a.config = option_value(args, i);
        } else if (s == "--split") {
            a.split = option_value(args, i);
        } else if (s == "--data") {
            a.data = option_value(args, i);
        } else if (s == "--out") {
            a.out = option_value(args, i);
        } else if (s == "--csv") {
            a.csv = option_value(args, i);
        } else if (s == "--batch-size") {
            a.batch = parse_positive_int(s, option_value(args, i));
        } else if (s == "--bf16-floor") {
            a.bf16_floor = true;
        } else if (s == "--bn-stats") {
            a.bn_stats = parse_bn_stats(option_value(args, i));
        } else if (s.rfind("--", 0) == 0) {
            SF_FAIL("unknown option '%s'\n%s", s.c_str(), eval_usage().c_str());
        } else {
            SF_CHECK(s.find('=') != std::string::npos, "unexpected argument '%s' (overrides look like key.path=value)",
                     s.c_str());
            a.overrides.push_back(s);
        }
    }
    if (a.help) return a;
    SF_CHECK(!a.checkpoint.empty(), "missing --checkpoint PATH\n%s", eval_usage().c_str());
    SF_CHECK(a.split == "val" || a.split == "test" || a.split == "train",
             "--split must be val, test or train, got '%s'", a.split.c_str());
    return a;
}

// ---- the samples to evaluate: every sample of the split once, in file order ----

class EvalData {
public:
    virtual ~EvalData() = default;
    // Fills the first n of `batch` input slots (NHWC floats), their labels and sample ids;
    // returns n (0 at the end).
    virtual int next(float* input, std::vector<data::Label>& labels, std::vector<uint64_t>& ids) = 0;
    virtual uint64_t samples() const = 0;
    virtual std::string describe() const = 0;
};

class FixedData : public EvalData {
public:
    FixedData(const TrainConfig& c, int batch)
        : batch_(batch),
          d_(data::make_fixed_samples(c.train.seed, static_cast<int>(c.data.num_samples), c.model.input_channels,
                                      c.model.input_height, c.model.input_width)) {}
    int next(float* input, std::vector<data::Label>& labels, std::vector<uint64_t>& ids) override {
        const int n = std::min(batch_, d_.n - pos_);
        const size_t per = static_cast<size_t>(d_.h) * d_.w * d_.c;
        labels.assign(d_.labels.begin() + pos_, d_.labels.begin() + pos_ + n);
        ids.clear();
        for (int b = 0; b < n; ++b) ids.push_back(static_cast<uint64_t>(pos_ + b));
        std::copy(d_.input.begin() + static_cast<std::ptrdiff_t>(pos_ * per),
                  d_.input.begin() + static_cast<std::ptrdiff_t>((pos_ + n) * per), input);
        pos_ += n;
        return n;
    }
    uint64_t samples() const override { return static_cast<uint64_t>(d_.n); }
    std::string describe() const override {
        return rt::format("%d fixed deterministic samples (data.source=fixed)", d_.n);
    }

private:
    int batch_;
    data::FixedSamples d_;
    int pos_ = 0;
};

class ShardData : public EvalData {
public:
    ShardData(const TrainConfig& c, const std::string& dir, const std::vector<std::string>& shards, int batch)
        : dir_(dir) {
        data::LoaderConfig lc;
        lc.shards = shards;
        lc.batch_size = batch;
        lc.workers = std::max(1, std::min(c.train.num_workers, 2));
        lc.prefetch = 2;
        lc.shuffle = false;
        lc.drop_last = false;
        lc.pinned = false;  // the CPU backend reads them
        loader_ = std::make_unique<data::Loader>(lc);
        const data::ShardSpec& s = loader_->spec();
        SF_CHECK(s.height == c.model.input_height && s.width == c.model.input_width,
                 "%s: shards are %dx%d, the model input is %dx%d (model.input_height/width)", dir.c_str(), s.height,
                 s.width, c.model.input_height, c.model.input_width);
        SF_CHECK(s.channels + 1 == c.model.input_channels,
                 "%s: shards hold %d pixel channel(s); model.input_channels=%d needs %d", dir.c_str(), s.channels,
                 c.model.input_channels, c.model.input_channels - 1);
        batches_ = loader_->batches_per_epoch();
    }
    int next(float* input, std::vector<data::Label>& labels, std::vector<uint64_t>& ids) override {
        if (done_ == batches_) return 0;
        const data::HostBatch& b = loader_->next();
        const data::ShardSpec& s = b.spec;
        const int n = b.n;  // b is refilled by the workers as soon as it is released
        kern::preprocess_ref(n, s.height, s.width, s.channels, b.pixels, b.labels, input);
        labels.assign(b.labels, b.labels + n);
        ids.assign(b.sample_ids, b.sample_ids + n);
        loader_->release();
        ++done_;
        return n;
    }
    uint64_t samples() const override { return loader_->dataset_size(); }
    std::string describe() const override {
        return rt::format("%llu samples in %s", static_cast<unsigned long long>(samples()), dir_.c_str());
    }

private:
    std::string dir_;
    std::unique_ptr<data::Loader> loader_;
    uint64_t batches_ = 0, done_ = 0;
};

bool holds_shards(const std::string& dir) {
    try {
        return !data::list_shards(dir).empty();
    } catch (const rt::Error&) {
        return false;
    }
}

std::unique_ptr<EvalData> make_eval_data(const TrainConfig& c, const Args& a, int batch) {
    if (c.data.source == DataSource::Fixed && a.data.empty()) {
        if (a.split != "val")
            SF_LOG_INFO("data.source=fixed has a single set of samples; --split %s is ignored", a.split.c_str());
        return std::make_unique<FixedData>(c, batch);
    }
    // DIR/<split>, or DIR itself when --data names a split folder.
    const std::string root = a.data.empty() ? c.data.processed_dir : a.data;
    std::string dir = root + "/" + a.split;
    if (!holds_shards(dir) && !a.data.empty() && holds_shards(root)) dir = root;
    const std::vector<std::string> shards = data::list_shards(dir);  // throws naming a missing/empty folder
    uint64_t total = 0;
    for (const std::string& s : shards) total += data::ShardReader(s).count();
    SF_CHECK(total > 0, "split '%s' (%s) holds no samples: its %zu shard(s) are empty", a.split.c_str(), dir.c_str(),
             shards.size());
    return std::make_unique<ShardData>(c, dir, shards, batch);
}

// ---- outputs ----

struct Row {
    uint64_t id;
    data::Label label;
    model::Decoded pred;
    model::SampleError err;
};

void write_csv(const std::string& path, const std::vector<Row>& rows) {
    FILE* f = std::fopen(path.c_str(), "w");
    SF_CHECK(f != nullptr, "cannot write %s", path.c_str());
    std::fprintf(f,
                 "sample,gap_x,gap_y,slider_x,slider_y,pred_gap_x,pred_gap_y,pred_slider_x,pred_slider_y,gap_score,"
                 "slider_score,gap_err,slider_err,combined_err\n");
    for (const Row& r : rows) {
        // %.9g: floats round-trip exactly; %.17g: doubles do.
        std::fprintf(f, "%llu,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.17g,%.17g,%.17g\n",
                     static_cast<unsigned long long>(r.id), r.label.gap_x, r.label.gap_y, r.label.slider_x,
                     r.label.slider_y, r.pred.gap_x, r.pred.gap_y, r.pred.slider_x, r.pred.slider_y, r.pred.gap_score,
                     r.pred.slider_score, r.err.gap, r.err.slider, r.err.combined);
    }
    const bool ok = std::ferror(f) == 0;
    SF_CHECK(std::fclose(f) == 0 && ok, "error writing %s", path.c_str());
}

void write_json(const std::string& path, const nlohmann::json& j) {
    std::ofstream f(path);
    SF_CHECK(f.good(), "cannot write %s", path.c_str());
    f << j.dump(2) << "\n";
    f.close();
    SF_CHECK(!f.fail(), "error writing %s", path.c_str());
}

void print_table(const model::Metrics& m) {
    std::printf("  %-14s %10s\n", "metric", "value");
    std::printf("  %-14s %10.3f\n", "MAE px", m.mae_px());
    std::printf("  %-14s %10.3f\n", "RMSE px", m.rmse_px());
    std::printf("  %-14s %9.2f%%\n", "hit@2px", m.hit_le_2px());
    std::printf("  %-14s %9.2f%%\n", "hit@5px", m.hit_le_5px());
    std::printf("  %-14s %10.3f\n", "gap MAE px", m.gap_mae());
    std::printf("  %-14s %10.3f\n", "slider MAE px", m.slider_mae());
    std::printf("  %-14s %10zu\n", "samples", m.count());
}

std::string default_out(const std::string& checkpoint, const std::string& split) {
    std::string stem = checkpoint;
    const std::string ext = ".safetensors";
    if (stem.size() > ext.size() && stem.compare(stem.size() - ext.size(), ext.size(), ext) == 0)
        stem.resize(stem.size() - ext.size());
    return stem + ".eval-" + split + ".json";
}

}  // namespace

int cmd_eval(const std::vector<std::string>& argv) {
    const Args a = parse_args(argv);
    if (a.help) {
        std::printf("%s\n", eval_usage().c_str());
        return 0;
    }
    const CheckpointInfo ckpt = inspect_checkpoint(a.checkpoint);
    const std::string out = a.out.empty() ? default_out(ckpt.path, a.split) : a.out;
    check_output_path("--out", out);
    if (!a.csv.empty()) check_output_path("--csv", a.csv);
    std::string config_used;
    const TrainConfig cfg = load_inference_config(a.config, ckpt, a.overrides, &config_used);
    const int batch = a.batch > 0 ? a.batch : default_eval_batch(cfg);
    std::unique_ptr<EvalData> data = make_eval_data(cfg, a, batch);
    const InferenceOptions opt{a.bf16_floor, a.bn_stats};
    const bool batch_stats = a.bn_stats == BnStats::Batch;
    InferenceModel model(cfg, batch, ckpt, opt);
    const model::NetShape& shape = model.shape();
    const size_t per = static_cast<size_t>(shape.height) * shape.width * shape.channels;
    SF_LOG_INFO("eval: %s (config %s) on %s, split %s: %s, batch %d, %s backend%s%s", ckpt.path.c_str(),
                config_used.c_str(), cfg.model.name.c_str(), a.split.c_str(), data->describe().c_str(), batch,
                model.backend(), a.bf16_floor ? " (bf16 floor: conv weights and input rounded to bf16)" : "",
                batch_stats ? ", BatchNorm with each batch's own statistics (--bn-stats batch)" : "");

    const auto t0 = std::chrono::steady_clock::now();
    Progress progress(static_cast<int64_t>(data->samples()));
    double last_report = 0;
    model::Metrics metrics;
    std::vector<Row> rows;
    std::vector<data::Label> labels;
    std::vector<uint64_t> ids;
    std::vector<model::Decoded> decoded;
    std::unique_ptr<InferenceModel> tail;  // --bn-stats batch: a network of the short last batch's size
    for (int n; (n = data->next(model.input(), labels, ids)) > 0;) {
        InferenceModel* m = &model;
        if (n < batch && batch_stats) {
            // Batch statistics over repeated samples would be other statistics: the short last batch
            // runs alone, on a network of its own size.
            SF_LOG_INFO("eval: the last batch holds %d of %d samples; it is normalized over its own", n, batch);
            tail = std::make_unique<InferenceModel>(cfg, n, ckpt, opt);
            std::copy(model.input(), model.input() + static_cast<size_t>(n) * per, tail->input());
            m = tail.get();
        } else {
            // A short last batch repeats its last sample; the repeats are not counted (with running
            // statistics every sample's result is its own).
            for (int b = n; b < batch; ++b)
                std::copy(model.input() + static_cast<size_t>(n - 1) * per,
                          model.input() + static_cast<size_t>(n) * per, model.input() + static_cast<size_t>(b) * per);
        }
        m->run(decoded);
        for (int b = 0; b < n; ++b) {
            const size_t k = static_cast<size_t>(b);
            metrics.add(decoded[k], labels[k]);
            rows.push_back({ids[k], labels[k], decoded[k], model::sample_error(decoded[k], labels[k])});
        }
        if (progress.elapsed_s() - last_report >= 5.0) {  // a long CPU eval shows it is alive, quietly
            last_report = progress.elapsed_s();
            progress.update(static_cast<int64_t>(metrics.count()),
                            rt::format("eval %s | mae_px so far %.3f", a.split.c_str(), metrics.mae_px()));
        }
    }
    progress.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SF_CHECK(metrics.count() > 0, "split '%s' (%s) gave no samples", a.split.c_str(), data->describe().c_str());

    std::printf("eval of %s on split %s (%s)%s%s:\n", ckpt.path.c_str(), a.split.c_str(), data->describe().c_str(),
                a.bf16_floor ? ", bf16 floor (CPU reference, conv weights and input rounded to bf16)" : "",
                batch_stats ? rt::format(", BatchNorm batch statistics (batches of %d)", batch).c_str() : "");
    print_table(metrics);
    const nlohmann::json j = {{"checkpoint", ckpt.path},
                              {"checkpoint_kind", ckpt.kind},
                              {"checkpoint_step", ckpt.step},
                              {"checkpoint_epoch", ckpt.epoch},
                              {"config", config_used},
                              {"split", a.split},
                              {"data", data->describe()},
                              {"backend", model.backend()},
                              {"bf16_floor", model.bf16_floor()},
                              {"bn_stats", bn_stats_name(model.bn_stats())},
                              {"batch_size", batch},
                              {"input", {shape.channels, shape.height, shape.width}},
                              {"samples", metrics.count()},
                              {"mae_px", metrics.mae_px()},
                              {"rmse_px", metrics.rmse_px()},
                              {"hit_le_2px", metrics.hit_le_2px()},
                              {"hit_le_5px", metrics.hit_le_5px()},
                              {"gap_mae", metrics.gap_mae()},
                              {"slider_mae", metrics.slider_mae()},
                              {"seconds", seconds},
                              {"samples_per_s", seconds > 0 ? static_cast<double>(metrics.count()) / seconds : 0.0}};
    write_json(out, j);
    std::printf("wrote %s", out.c_str());
    if (!a.csv.empty()) {
        write_csv(a.csv, rows);
        std::printf(" and %s", a.csv.c_str());
    }
    std::printf(" (%.1f s, %.1f samples/s)\n", seconds, j["samples_per_s"].get<double>());
    return 0;
}

}  // namespace tools
