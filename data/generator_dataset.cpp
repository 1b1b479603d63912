// The train/val/test split by background and the multi-threaded dataset writer. Work unit = one
// shard: its sample indices are known up front (the split depends only on the background id), so
// each worker writes whole shards in index order and the files do not depend on the thread count
// or on which worker wrote which shard.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "data/generator.h"
#include "data/shard.h"
#include "data/shard_manifest.h"
#include "runtime/error.h"

namespace data {

Split split_of_background(int bg_id) {
    // Blocks of 10 backgrounds; a seed-42 permutation of each block: slots 0-7 train, 8 val, 9 test.
    constexpr int kBlock = 10;
    const uint64_t block = static_cast<uint64_t>(bg_id / kBlock);
    gen::Rng r(42, block, 0x5B1);
    int perm[kBlock];
    for (int i = 0; i < kBlock; ++i) perm[i] = i;
    for (int i = kBlock - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);
    int slot = 0;
    while (perm[slot] != bg_id % kBlock) ++slot;
    return slot < 8 ? Split::Train : slot == 8 ? Split::Val : Split::Test;
}

const char* split_name(Split s) { return s == Split::Train ? "train" : s == Split::Val ? "val" : "test"; }

namespace {

struct ShardJob {
    Split split;
    size_t number;                                      // within its split
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) index ranges, ascending
    uint64_t first() const { return ranges.front().first; }
};

// Walks the indices background by background and cuts each split's sequence into shards.
std::vector<ShardJob> plan_shards(uint64_t count, size_t shard_size) {
    std::vector<ShardJob> done;
    ShardJob open[3];
    size_t fill[3] = {0, 0, 0}, numbers[3] = {0, 0, 0};
    for (uint64_t b = 0; b * kSamplesPerBackground < count; ++b) {
        const int s = static_cast<int>(split_of_background(static_cast<int>(b)));
        uint64_t i = b * kSamplesPerBackground;
        const uint64_t end = std::min<uint64_t>(count, i + kSamplesPerBackground);
        while (i < end) {
            const uint64_t n = std::min<uint64_t>(end - i, shard_size - fill[s]);
            auto& rs = open[s].ranges;
            if (!rs.empty() && rs.back().second == i)
                rs.back().second += n;
            else
                rs.emplace_back(i, i + n);
            i += n;
            fill[s] += n;
            if (fill[s] == shard_size) {
                open[s].split = static_cast<Split>(s);
                open[s].number = numbers[s]++;
                done.push_back(std::move(open[s]));
                open[s] = ShardJob{};
                fill[s] = 0;
            }
        }
    }
    for (int s = 0; s < 3; ++s)
        if (fill[s] > 0) {
            open[s].split = static_cast<Split>(s);
            open[s].number = numbers[s]++;
            done.push_back(std::move(open[s]));
        }
    std::sort(done.begin(), done.end(), [](const ShardJob& a, const ShardJob& b) { return a.first() < b.first(); });
    return done;
}

std::string shard_path(const std::string& out_dir, const ShardJob& j) {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06zu%s", split_name(j.split), j.number, kShardExtension);
    return out_dir + "/" + split_name(j.split) + "/" + name;
}

// Creates the split folders that will receive shards; refuses folders that already hold some.
void prepare_dirs(const std::string& out_dir, const DatasetSummary& sum) {
    namespace fs = std::filesystem;
    for (int s = 0; s < 3; ++s) {
        if (sum.shards[s] == 0) continue;
        const fs::path dir = fs::path(out_dir) / split_name(static_cast<Split>(s));
        std::error_code ec;
        fs::create_directories(dir, ec);
        SF_CHECK(!ec && fs::is_directory(dir), "generate: cannot create %s: %s", dir.c_str(), ec.message().c_str());
        for (const auto& e : fs::directory_iterator(dir)) {
            if (e.path().extension() == ".tmp") fs::remove(e.path(), ec);  // left by an interrupted write
            SF_CHECK(e.path().extension() != kShardExtension,
                     "generate: %s already holds shards (%s); choose an empty --out folder", dir.c_str(),
                     e.path().filename().c_str());
        }
    }
}

// Workers take whole shards in order; the first error (a worker's or the progress callback's)
// stops everyone and is re-thrown by wait().
struct Run {
    const GenConfig& cfg;
    const ShardSpec spec;
    const std::string& out_dir;
    const std::vector<ShardJob>& jobs;
    std::atomic<size_t> next_job{0};
    std::atomic<uint64_t> shards_done{0};
    const uint64_t stop_after = generate_stop_after_shards();  // test hook (0: none)
    std::atomic<uint64_t> done{0};
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::condition_variable cv;
    std::exception_ptr error;
    int running = 0;

    Run(const GenConfig& c, const ShardSpec& sp, const std::string& out, const std::vector<ShardJob>& j)
        : cfg(c), spec(sp), out_dir(out), jobs(j) {}
    void fail(std::exception_ptr e) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = e;
        stop = true;
    }
    void worker() {
        try {
            for (size_t k; !stop && (k = next_job++) < jobs.size();) {
                const ShardJob& j = jobs[k];
                const std::string path = shard_path(out_dir, j);
                ShardWriter w(path, spec);
                for (const auto& r : j.ranges)
                    for (uint64_t i = r.first; i < r.second && !stop; ++i) {
                        const GenSample s = generate_sample(cfg, i);
                        validate_label(s.label, cfg.height, cfg.width, path + ": sample " + std::to_string(i));
                        w.add(s.pixels.data(), s.label);
                        ++done;
                    }
                if (stop) break;
                w.finish();
                SF_CHECK(stop_after == 0 || ++shards_done < stop_after,
                         "generate: stopped after %llu shards (SF_TEST_GENERATE_STOP_AFTER_SHARDS)",
                         static_cast<unsigned long long>(stop_after));
            }
        } catch (...) {
            fail(std::current_exception());
        }
        std::lock_guard<std::mutex> lock(mu);
        --running;
        cv.notify_all();
    }
    // Runs `threads` workers to the end, reporting progress about twice a second.
    double run(int threads, uint64_t count, const GenProgress& progress) {
        const auto t0 = std::chrono::steady_clock::now();
        auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
        std::vector<std::thread> pool;
        running = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), jobs.size()));
        for (int t = running; t > 0; --t) pool.emplace_back([this] { worker(); });
        {
            std::unique_lock<std::mutex> lock(mu);
            while (running > 0) {
                cv.wait_for(lock, std::chrono::milliseconds(500));
                if (!progress || running == 0 || stop) continue;
                lock.unlock();
                try {
                    progress(done.load(), count, elapsed());
                } catch (...) {
                    fail(std::current_exception());
                }
                lock.lock();
            }
        }
        for (std::thread& t : pool) t.join();
        if (error) std::rethrow_exception(error);
        const double seconds = elapsed();
        if (progress) progress(done.load(), count, seconds);
        return seconds;
    }
};

DatasetSummary summarize(const std::vector<ShardJob>& jobs) {
    DatasetSummary sum;
    for (const ShardJob& j : jobs) {
        const int s = static_cast<int>(j.split);
        ++sum.shards[s];
        for (const auto& r : j.ranges) sum.samples[s] += r.second - r.first;
    }
    return sum;
}

}  // namespace

DatasetSummary plan_dataset(uint64_t count, size_t shard_size) { return summarize(plan_shards(count, shard_size)); }

DatasetSummary generate_dataset(const GenConfig& cfg, uint64_t count, const std::string& out_dir, int threads,
                                size_t shard_size, const GenProgress& progress) {
    SF_CHECK(count >= 1, "generate: count must be at least 1");
    SF_CHECK(threads >= 1 && threads <= 1024, "generate: threads must be 1..1024, got %d", threads);
    SF_CHECK(shard_size >= 1, "generate: shard size must be at least 1");
    SF_CHECK(count / kSamplesPerBackground < static_cast<uint64_t>(INT32_MAX), "generate: count %llu is too large",
             static_cast<unsigned long long>(count));
    const ShardSpec spec{cfg.height, cfg.width, cfg.channels, cfg.quant4};
    validate_spec(spec, "generate");
    generate_sample(cfg, 0);  // rejects a bad config before any file is made

    const std::vector<ShardJob> jobs = plan_shards(count, shard_size);
    DatasetSummary sum = summarize(jobs);
    prepare_dirs(out_dir, sum);
    std::remove((out_dir + "/" + kManifestFile).c_str());  // incomplete until the end
    Run run(cfg, spec, out_dir, jobs);
    sum.seconds = run.run(threads, count, progress);
    // Last: the manifest makes the dataset complete (docs/FORMAT.md).
    write_manifest(out_dir, scan_dataset(out_dir, "synthetic", cfg.seed, count));
    return sum;
}

}  // namespace data
