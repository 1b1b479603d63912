#include "tools/train_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "data/fixed_batch.h"
#include "data/generator.h"
#include "data/loader.h"
#include "data/shard_manifest.h"
#include "kernels/preprocess.h"
#include "model/init.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/progress.h"

namespace tools {

namespace {

int model_pixel_channels(const TrainConfig& c) { return c.model.input_channels - 1; }  // the last is the mask

// Data-parallel position of this source: rank `rank` of `world` (checked by make_batch_source).
struct RankOf {
    int rank = 0, world = 1;
};

// ---- fixed: the deterministic samples, shuffled per epoch from (seed, epoch) ----
// Global batches are the full batches of the epoch's order (no partial one, as with one process);
// rank r's k-th batch is global batch k*W + r. Training: floor(n / (batch*W)) batches on every
// rank; validation: the global batches j with j % W == r (a rank may have none).
class FixedSource : public BatchSource {
public:
    FixedSource(const TrainConfig& c, SplitRole role, RankOf rk)
        : batch_(c.train.batch_size),
          role_(role),
          rk_(rk),
          d_(data::make_fixed_samples(c.train.seed, static_cast<int>(c.data.num_samples), c.model.input_channels,
                                      c.model.input_height, c.model.input_width)),
          seed_(c.train.seed) {
        SF_CHECK(c.data.num_samples >= batch_, "data.num_samples (%lld) must be >= train.batch_size (%d)",
                 static_cast<long long>(c.data.num_samples), batch_);
        const long long need = static_cast<long long>(batch_) * rk_.world;
        SF_CHECK(role != SplitRole::Train || c.data.num_samples >= need,
                 "data.num_samples (%lld) gives no training batch to every rank: with train.batch_size %d and world "
                 "size %d it must be >= %d x %d = %lld",
                 static_cast<long long>(c.data.num_samples), batch_, rk_.world, batch_, rk_.world, need);
        const uint64_t full = static_cast<uint64_t>(d_.n / batch_) * static_cast<uint64_t>(batch_);
        bpe_ = data::rank_batches(full, batch_, role == SplitRole::Train, rk_.rank, rk_.world);
        make_order();
    }
    int next(float* input, std::vector<data::Label>& labels) override {
        SF_CHECK(bpe_ > 0, "rank %d of %d has no validation batch of %d in %s", rk_.rank, rk_.world, batch_,
                 describe().c_str());
        if (cur_.batch == bpe_) {
            ++cur_.epoch;
            cur_.batch = 0;
            make_order();
        }
        const size_t per = static_cast<size_t>(d_.h) * d_.w * d_.c;
        const uint64_t global = cur_.batch * static_cast<uint64_t>(rk_.world) + static_cast<uint64_t>(rk_.rank);
        const size_t first = static_cast<size_t>(global) * static_cast<size_t>(batch_);
        labels.resize(static_cast<size_t>(batch_));
        for (int b = 0; b < batch_; ++b) {
            const size_t s = static_cast<size_t>(order_[first + static_cast<size_t>(b)]);
            std::copy(d_.input.begin() + static_cast<std::ptrdiff_t>(s * per),
                      d_.input.begin() + static_cast<std::ptrdiff_t>((s + 1) * per), input + b * per);
            labels[static_cast<size_t>(b)] = d_.labels[s];
        }
        ++cur_.batch;
        return batch_;
    }
    uint64_t batches_per_epoch() const override { return bpe_; }
    uint64_t samples() const override { return static_cast<uint64_t>(d_.n); }
    std::string describe() const override {
        if (rk_.world == 1) return rt::format("%d fixed deterministic samples", d_.n);
        return rt::format("%d fixed deterministic samples (rank %d of %d)", d_.n, rk_.rank, rk_.world);
    }
    data::Cursor cursor() const override {
        return cur_.batch == bpe_ && bpe_ > 0 ? data::Cursor{cur_.epoch + 1, 0} : cur_;
    }
    void seek(const data::Cursor& c) override {
        SF_CHECK(c.batch <= bpe_, "cursor batch %llu beyond the %llu batches of an epoch of %s",
                 static_cast<unsigned long long>(c.batch), static_cast<unsigned long long>(bpe_), describe().c_str());
        cur_ = c;
        make_order();
    }

private:
    // The sample order of epoch cur_.epoch (all ranks build the same one). Train: a permutation from
    // (seed, epoch) (Fisher-Yates on counter-based hashes); validation: every sample once, in order.
    void make_order() {
        order_.resize(static_cast<size_t>(d_.n));
        for (int i = 0; i < d_.n; ++i) order_[static_cast<size_t>(i)] = i;
        if (role_ != SplitRole::Train) return;
        uint64_t s = model::init_hash(seed_, 0x5348554646ull, cur_.epoch);
        for (int i = d_.n - 1; i > 0; --i) {
            s = model::init_hash(s, 1, static_cast<uint64_t>(i));
            std::swap(order_[static_cast<size_t>(i)], order_[s % static_cast<uint64_t>(i + 1)]);
        }
    }

    int batch_;
    SplitRole role_;
    RankOf rk_;
    data::FixedSamples d_;
    uint64_t seed_;
    uint64_t bpe_ = 0;  // batches per epoch of this rank
    data::Cursor cur_;  // next batch: cur_.batch of epoch cur_.epoch (== bpe_: epoch done)
    std::vector<int> order_;
};

// A split is read only from a complete dataset (its manifest written last) and only as the
// manifest lists it: an interrupted generate/convert or a changed shard is refused here.
void verify_dataset_split(const std::string& root, const std::string& split) {
    SF_CHECK(data::has_manifest(root),
             "data.processed_dir '%s' has no %s: the dataset is incomplete (its generate or convert was interrupted) "
             "or was written before manifests existed; write it again with slidefuse generate / convert",
             root.c_str(), data::kManifestFile);
    const data::DatasetManifest m = data::read_manifest(root);
    SF_CHECK(m.samples(split) > 0, "data.processed_dir '%s' has no %s samples (%s)", root.c_str(), split.c_str(),
             m.describe().c_str());
    data::verify_split(root, m, split);
}

// ---- shards: the loader, then the uint8 -> float preprocessing of the CPU backend ----
class ShardSource : public BatchSource {
public:
    ShardSource(const TrainConfig& c, SplitRole role, RankOf rk, const std::string& root, const std::string& split)
        : batch_(c.train.batch_size), dir_(root + "/" + split) {
        const std::string& dir = dir_;
        verify_dataset_split(root, split);
        lc_.shards = data::list_shards(dir);
        lc_.batch_size = batch_;
        lc_.workers = std::max(1, c.train.num_workers);
        lc_.prefetch = std::max(2, c.train.prefetch_factor);
        lc_.seed = c.train.seed;
        lc_.shuffle = role == SplitRole::Train;
        lc_.drop_last = role == SplitRole::Train;
        lc_.rank = rk.rank;
        lc_.world_size = rk.world;
        loader_ = std::make_unique<data::Loader>(lc_);
        const data::ShardSpec& s = loader_->spec();
        SF_CHECK(s.height == c.model.input_height && s.width == c.model.input_width,
                 "%s: shards are %dx%d, the model input is %dx%d (model.input_height/width)", dir.c_str(), s.height,
                 s.width, c.model.input_height, c.model.input_width);
        SF_CHECK(s.channels == model_pixel_channels(c),
                 "%s: shards hold %d pixel channel(s); model.input_channels=%d needs %d", dir.c_str(), s.channels,
                 c.model.input_channels, model_pixel_channels(c));
    }
    int next(float* input, std::vector<data::Label>& labels) override {
        const data::HostBatch& b = loader_->next();
        // Everything read from b is taken before release(): a worker may refill the slot at once.
        const data::ShardSpec s = b.spec;
        const int n = b.n;
        const size_t per_in = static_cast<size_t>(s.height) * s.width * (s.channels + 1);
        labels.assign(b.labels, b.labels + n);
        kern::preprocess_ref(n, s.height, s.width, s.channels, b.pixels, b.labels, input);
        loader_->release();
        for (int i = n; i < batch_; ++i) {  // pad a short validation batch with its last sample
            std::copy(input + static_cast<size_t>(n - 1) * per_in, input + static_cast<size_t>(n) * per_in,
                      input + static_cast<size_t>(i) * per_in);
            labels.push_back(labels.back());
        }
        return n;
    }
    const data::HostBatch* next_raw() override { return &loader_->next(); }
    void release_raw() override { loader_->release(); }
    uint64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
    uint64_t samples() const override { return loader_->dataset_size(); }
    std::string describe() const override {
        const std::string what =
            rt::format("%llu samples in %s", static_cast<unsigned long long>(loader_->dataset_size()), dir_.c_str());
        if (lc_.world_size == 1) return what;
        return what + rt::format(" (rank %d of %d)", lc_.rank, lc_.world_size);
    }
    data::Cursor cursor() const override { return loader_->cursor(); }
    // The loader's workers run ahead of the cursor: a new loader starts exactly there.
    void seek(const data::Cursor& c) override {
        earlier_wait_s_ += loader_->stats().consumer_wait_s;
        loader_.reset();
        loader_ = std::make_unique<data::Loader>(lc_, c);
    }
    double wait_seconds() const override { return earlier_wait_s_ + loader_->stats().consumer_wait_s; }

private:
    double earlier_wait_s_ = 0;  // of the loaders seek() replaced
    int batch_;
    std::string dir_;
    data::LoaderConfig lc_;
    std::unique_ptr<data::Loader> loader_;
};

constexpr size_t kGenShardSize = 4096;

// The generator's sample count for data.num_samples: the train split takes 80% of the backgrounds.
uint64_t synthetic_count(int64_t num_samples) {
    return static_cast<uint64_t>(std::ceil(static_cast<double>(num_samples) / 0.8));
}

// A synthetic dataset of num_samples has a val split and at least one optimizer step of train samples.
bool synthetic_size_ok(const TrainConfig& c, int64_t num_samples) {
    const data::DatasetSummary p = data::plan_dataset(synthetic_count(num_samples), kGenShardSize);
    const uint64_t step = static_cast<uint64_t>(c.train.batch_size) * c.train.gradient_accumulation_steps;
    return p.samples[1] >= 1 && p.samples[0] >= step;
}

// Before anything is generated: the splits are by background (100 samples each, 1 in 10 to val).
void check_synthetic_size(const TrainConfig& c) {
    if (synthetic_size_ok(c, c.data.num_samples)) return;
    int64_t lo = c.data.num_samples, hi = std::max<int64_t>(lo, 1);
    while (!synthetic_size_ok(c, hi)) hi *= 2;
    while (lo + 1 < hi) {  // the property is monotonic in the count
        const int64_t mid = lo + (hi - lo) / 2;
        (synthetic_size_ok(c, mid) ? hi : lo) = mid;
    }
    SF_FAIL(
        "data.num_samples=%lld is too small for a synthetic dataset with train and val splits (the split is by "
        "background: %d samples each, 1 background in 10 goes to val): the smallest is data.num_samples=%lld",
        static_cast<long long>(c.data.num_samples), data::kSamplesPerBackground, static_cast<long long>(hi));
}

bool any_shards(const std::string& root) {
    for (const char* split : {"train", "val", "test"}) {
        try {
            if (!data::list_shards(root + "/" + split).empty()) return true;
        } catch (const rt::Error&) {
        }
    }
    return false;
}

// Removes what an interrupted generation left in root's split folders (shards and temp files only).
void remove_partial_dataset(const std::string& root) {
    namespace fs = std::filesystem;
    for (const char* split : {"train", "val", "test"}) {
        std::error_code ec;
        for (fs::directory_iterator it(root + "/" + split, ec), end; !ec && it != end; it.increment(ec)) {
            const fs::path p = it->path();
            if (p.extension() == data::kShardExtension || p.extension() == ".tmp") fs::remove(p, ec);
        }
    }
}

// An existing complete dataset must be the one the config asks for.
void check_manifest_matches(const TrainConfig& c, const data::DatasetManifest& m, uint64_t count) {
    const std::string& root = c.data.processed_dir;
    const bool same = m.source == "synthetic" && m.seed == c.train.seed && m.count == count &&
                      m.spec.height == c.model.input_height && m.spec.width == c.model.input_width &&
                      m.spec.channels == model_pixel_channels(c) && !m.spec.quant4;
    SF_CHECK(same,
             "data.processed_dir '%s' holds another dataset (%s) than the config asks for (synthetic, %llu samples "
             "(seed %llu), %dx%d x%d: data.num_samples=%lld, train.seed, model.input_height/width/channels): it is "
             "not overwritten; point data.processed_dir at another folder or delete this one",
             root.c_str(), m.describe().c_str(), static_cast<unsigned long long>(count),
             static_cast<unsigned long long>(c.train.seed), c.model.input_height, c.model.input_width,
             model_pixel_channels(c), static_cast<long long>(c.data.num_samples));
}

}  // namespace

bool ensure_synthetic_dataset(const TrainConfig& c) {
    const std::string root = c.data.processed_dir;
    const uint64_t count = synthetic_count(c.data.num_samples);
    if (data::has_manifest(root)) {
        check_manifest_matches(c, data::read_manifest(root), count);
        return false;  // the shards are verified against it when the sources open
    }
    check_synthetic_size(c);
    if (any_shards(root)) {
        SF_LOG_WARN(
            "data.processed_dir '%s' holds shards but no %s: an interrupted generation; generating the "
            "dataset again",
            root.c_str(), data::kManifestFile);
        remove_partial_dataset(root);
    }
    data::GenConfig g;
    g.seed = c.train.seed;
    g.height = c.model.input_height;
    g.width = c.model.input_width;
    g.channels = model_pixel_channels(c);
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    SF_LOG_INFO("data.source=synthetic: no dataset in %s; generating %llu samples there (%d threads)", root.c_str(),
                static_cast<unsigned long long>(count), threads);
    Progress progress(static_cast<int64_t>(count));
    const data::DatasetSummary s =
        data::generate_dataset(g, count, root, threads, kGenShardSize, [&](uint64_t done, uint64_t, double) {
            progress.update(static_cast<int64_t>(done), "generating synthetic dataset");
        });
    progress.finish();
    SF_LOG_INFO("generated train %llu / val %llu / test %llu samples in %.1f s",
                static_cast<unsigned long long>(s.samples[0]), static_cast<unsigned long long>(s.samples[1]),
                static_cast<unsigned long long>(s.samples[2]), s.seconds);
    return true;
}

std::unique_ptr<BatchSource> make_batch_source(const TrainConfig& c, SplitRole role, int rank, int world) {
    SF_CHECK(world >= 1, "data source: world size must be >= 1 (got %d)", world);
    SF_CHECK(rank >= 0 && rank < world, "data source: rank %d outside [0, %d) (world of size %d)", rank, world, world);
    const RankOf rk{rank, world};
    switch (c.data.source) {
        case DataSource::Fixed: return std::make_unique<FixedSource>(c, role, rk);
        case DataSource::Synthetic:
        case DataSource::Shards:
            return std::make_unique<ShardSource>(c, role, rk, c.data.processed_dir,
                                                 role == SplitRole::Train ? "train" : "val");
    }
    SF_FAIL("unknown data source");
}

}  // namespace tools
