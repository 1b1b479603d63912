// The loader (data/loader.h): epoch order (identity, permutation, per-epoch/seed change, rank
// sharding by global batch: the ranks' batches interleave to the world-1 batches), batch counts with and without
// drop_last, in-order delivery with exact pixels and labels, resume from a cursor, backpressure, a corrupted record
// surfacing from next() with the file and record named, teardown with blocked workers, and refused configurations.
// Shards are written here with ShardWriter on a tiny 32x64 canvas; sample g's pixels and label encode g. Also built
// with -fsanitize=thread (sf_tsan_loader_tests, label tsan).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "data/shard.h"
#include "runtime/error.h"
#include "runtime/exec.h"

namespace {

constexpr int kH = 32, kW = 64;
const data::ShardSpec kSpec{kH, kW, 1, false};

uint8_t pixel_of(uint64_t g, size_t j) { return static_cast<uint8_t>((g * 131 + j * 7 + (j >> 6) * 3) & 0xFF); }

std::vector<uint8_t> pixels_of(uint64_t g, const data::ShardSpec& spec = kSpec) {
    std::vector<uint8_t> px(static_cast<size_t>(spec.height) * spec.width * spec.channels);
    for (size_t j = 0; j < px.size(); ++j) px[j] = pixel_of(g, j);
    return px;
}

data::Label label_of(uint64_t g, const data::ShardSpec& spec = kSpec) {
    data::Label l;
    const float w = static_cast<float>(spec.width), h = static_cast<float>(spec.height);
    l.gap_x = 0.5f * w + static_cast<float>(g % 13);
    l.gap_y = 0.5f * h;
    l.slider_x = 6.0f;
    l.slider_y = 0.25f * h + static_cast<float>(g % 7);
    l.num_fakes = static_cast<int32_t>(g % 3);
    for (int k = 0; k < l.num_fakes; ++k) {
        l.fake_x[k] = 0.25f * w + 3.0f * k;
        l.fake_y[k] = 0.75f * h;
    }
    l.rect_x0 = 0;
    l.rect_x1 = static_cast<float>(spec.width);
    l.rect_y0 = 2;
    l.rect_y1 = static_cast<float>(spec.height - 2);
    return l;
}

std::string temp_dir() {
    char tmpl[] = "/tmp/sf_loader_XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    return d ? std::string(d) : std::string("/tmp");
}

// Shards of the given sizes; global sample g = concatenation order.
std::vector<std::string> write_shards(const std::vector<int>& sizes, const data::ShardSpec& spec = kSpec) {
    const std::string dir = temp_dir();
    std::vector<std::string> paths;
    uint64_t g = 0;
    for (size_t s = 0; s < sizes.size(); ++s) {
        paths.push_back(dir + "/part" + std::to_string(s) + ".sfshard");
        data::ShardWriter w(paths.back(), spec);
        for (int i = 0; i < sizes[s]; ++i, ++g) w.add(pixels_of(g, spec).data(), label_of(g, spec));
        w.finish();
    }
    return paths;
}

data::LoaderConfig config(const std::vector<std::string>& shards, int batch, bool shuffle, bool drop_last) {
    data::LoaderConfig c;
    c.shards = shards;
    c.batch_size = batch;
    c.workers = 3;
    c.prefetch = 3;
    c.seed = 7;
    c.shuffle = shuffle;
    c.drop_last = drop_last;
    c.pinned = false;
    return c;
}

// Takes `count` batches and returns their sample ids (checking pixels, labels and cursors).
std::vector<std::vector<uint64_t>> take(data::Loader& loader, int count) {
    std::vector<std::vector<uint64_t>> out;
    const size_t pb = static_cast<size_t>(loader.spec().height) * loader.spec().width * loader.spec().channels;
    for (int i = 0; i < count; ++i) {
        const data::Cursor before = loader.cursor();
        const data::HostBatch& b = loader.next();
        EXPECT_EQ(b.cursor, before);
        out.emplace_back(b.sample_ids, b.sample_ids + b.n);
        for (int k = 0; k < b.n; ++k) {
            const uint64_t g = b.sample_ids[k];
            const std::vector<uint8_t> want = pixels_of(g, b.spec);
            EXPECT_TRUE(std::equal(want.begin(), want.end(), b.pixels + k * pb)) << "pixels of sample " << g;
            const data::Label l = label_of(g, b.spec);
            EXPECT_EQ(b.labels[k].gap_x, l.gap_x) << "label of sample " << g;
            EXPECT_EQ(b.labels[k].slider_y, l.slider_y) << "label of sample " << g;
            EXPECT_EQ(b.labels[k].num_fakes, l.num_fakes) << "label of sample " << g;
        }
        loader.release();
    }
    return out;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const rt::Error& e) {
        return e.what();
    }
    return "";
}

TEST(EpochOrder, IdentityWithoutShuffle) {
    const std::vector<uint64_t> o = data::epoch_order(11, 3, 5, false, 4, false, 0, 1);
    for (uint64_t i = 0; i < 11; ++i) EXPECT_EQ(o[i], i);
    EXPECT_TRUE(data::epoch_order(0, 3, 5, true, 4, false, 0, 1).empty());
}

TEST(EpochOrder, ShuffleIsAPermutationThatChangesWithEpochAndSeed) {
    const uint64_t n = 1000;
    const std::vector<uint64_t> a = data::epoch_order(n, 42, 0, true, 1, false, 0, 1);
    std::vector<uint64_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
    EXPECT_EQ(a, data::epoch_order(n, 42, 0, true, 1, false, 0, 1)) << "not deterministic";
    const std::vector<uint64_t> next_epoch = data::epoch_order(n, 42, 1, true, 1, false, 0, 1);
    const std::vector<uint64_t> other_seed = data::epoch_order(n, 43, 0, true, 1, false, 0, 1);
    EXPECT_NE(a, next_epoch);
    EXPECT_NE(a, other_seed);
    // A real shuffle moves almost everything (a fixed point has probability 1/n per element).
    int fixed = 0;
    for (uint64_t i = 0; i < n; ++i) fixed += a[i] == i;
    EXPECT_LT(fixed, 10);
}

// The world-1 batches of an epoch: consecutive blocks of b of the order (the last one may be short).
std::vector<std::vector<uint64_t>> blocks_of(const std::vector<uint64_t>& order, size_t b) {
    std::vector<std::vector<uint64_t>> out;
    for (size_t i = 0; i < order.size(); i += b)
        out.emplace_back(order.begin() + i, order.begin() + std::min(i + b, order.size()));
    return out;
}

// Interleaves the ranks' batches of one epoch: global batch j is batch j / W of rank j % W.
std::vector<std::vector<uint64_t>> interleave(const std::vector<std::vector<std::vector<uint64_t>>>& ranks) {
    std::vector<std::vector<uint64_t>> out;
    const size_t w = ranks.size();
    for (size_t j = 0; j / w < ranks[j % w].size(); ++j) out.push_back(ranks[j % w][j / w]);
    size_t held = 0;
    for (const auto& r : ranks) held += r.size();
    EXPECT_EQ(held, out.size()) << "a rank holds batches past the interleaved sequence";
    return out;
}

TEST(EpochOrder, RanksInterleaveToTheWorldOneBatches) {
    const std::pair<uint64_t, int> sizes[] = {{37, 4}, {24, 4}, {103, 5}, {10, 3}, {9, 1}, {3, 4}};
    for (int w : {2, 3})
        for (const auto& tb : sizes)
            for (bool shuffle : {false, true})
                for (bool drop : {true, false})
                    for (uint64_t epoch : {0, 1}) {
                        const uint64_t total = tb.first;
                        const int b = tb.second;
                        const std::string what = "W " + std::to_string(w) + " total " + std::to_string(total) + " b " +
                                                 std::to_string(b) + " shuffle " + std::to_string(shuffle) +
                                                 " drop_last " + std::to_string(drop) + " epoch " +
                                                 std::to_string(epoch);
                        auto world1 = blocks_of(data::epoch_order(total, 9, epoch, shuffle, b, drop, 0, 1), b);
                        EXPECT_EQ(world1.size(), drop ? total / b : (total + b - 1) / b) << what;
                        std::vector<std::vector<std::vector<uint64_t>>> ranks;
                        for (int r = 0; r < w; ++r) {
                            const auto mine = data::epoch_order(total, 9, epoch, shuffle, b, drop, r, w);
                            EXPECT_EQ(mine.size(), data::rank_samples(total, b, drop, r, w)) << what;
                            ranks.push_back(blocks_of(mine, b));
                            EXPECT_EQ(ranks.back().size(), data::rank_batches(total, b, drop, r, w)) << what;
                            if (drop) {
                                EXPECT_EQ(ranks.back().size(), total / (b * w)) << what << " rank " << r;
                            }
                        }
                        const auto merged = interleave(ranks);
                        // drop_last: the first W * floor(total / (b W)) world-1 batches; else all of them.
                        if (drop) world1.resize(total / (b * w) * w);
                        EXPECT_EQ(merged, world1) << what;
                    }
    EXPECT_NE(error_of([] { data::epoch_order(10, 1, 0, true, 2, true, 4, 4); }).find("rank 4"), std::string::npos);
    EXPECT_NE(error_of([] { data::epoch_order(10, 1, 0, true, 2, true, -1, 4); }).find("rank -1"), std::string::npos);
    EXPECT_NE(error_of([] { data::epoch_order(10, 1, 0, true, 2, true, 0, 0); }).find("world"), std::string::npos);
    EXPECT_NE(error_of([] { data::epoch_order(10, 1, 0, true, 0, true, 0, 1); }).find("batch_size"), std::string::npos);
}

TEST(Loader, DeliversEveryBatchInOrderWithoutShuffle) {
    const auto shards = write_shards({10, 0, 17, 10});  // an empty shard is valid and contributes nothing
    data::Loader loader(config(shards, 4, false, true));
    EXPECT_EQ(loader.dataset_size(), 37u);
    EXPECT_EQ(loader.batches_per_epoch(), 9u);
    EXPECT_EQ(loader.spec(), kSpec);
    const auto got = take(loader, 18);  // two epochs
    for (int i = 0; i < 18; ++i) {
        ASSERT_EQ(got[i].size(), 4u);
        for (int k = 0; k < 4; ++k) EXPECT_EQ(got[i][k], static_cast<uint64_t>((i % 9) * 4 + k));
    }
    EXPECT_EQ(loader.cursor(), (data::Cursor{2, 0}));
    EXPECT_FALSE(loader.stats().pinned);
}

TEST(Loader, RingIsPinnedExactlyWhenCudaIsUsable) {
    const auto shards = write_shards({10});
    data::LoaderConfig c = config(shards, 4, false, true);
    c.pinned = true;
    data::Loader loader(c);
    EXPECT_EQ(loader.stats().pinned, rt::cuda_device_available());
    EXPECT_EQ(take(loader, 3).size(), 3u);
}

TEST(Loader, DropLastControlsTheFinalPartialBatch) {
    const auto shards = write_shards({10, 17, 10});
    {
        data::Loader loader(config(shards, 8, true, true));
        EXPECT_EQ(loader.batches_per_epoch(), 4u);
        const auto got = take(loader, 8);
        for (const auto& b : got) EXPECT_EQ(b.size(), 8u);
    }
    {
        data::Loader loader(config(shards, 8, true, false));
        EXPECT_EQ(loader.batches_per_epoch(), 5u);
        const auto got = take(loader, 10);
        for (int e = 0; e < 2; ++e) {
            std::vector<uint64_t> epoch;
            for (int i = 0; i < 5; ++i) {
                EXPECT_EQ(got[e * 5 + i].size(), i < 4 ? 8u : 5u);
                epoch.insert(epoch.end(), got[e * 5 + i].begin(), got[e * 5 + i].end());
            }
            std::sort(epoch.begin(), epoch.end());
            for (uint64_t i = 0; i < 37; ++i) EXPECT_EQ(epoch[i], i) << "epoch " << e << " is not a permutation";
        }
    }
}

TEST(Loader, ShuffledEpochsAreDifferentPermutationsAcrossShards) {
    const auto shards = write_shards({10, 17, 10});
    data::Loader loader(config(shards, 37, true, true));
    const auto got = take(loader, 3);
    for (const auto& epoch : got) {
        std::vector<uint64_t> sorted = epoch;
        std::sort(sorted.begin(), sorted.end());
        for (uint64_t i = 0; i < 37; ++i) ASSERT_EQ(sorted[i], i);
    }
    EXPECT_NE(got[0], got[1]);
    EXPECT_NE(got[1], got[2]);
    EXPECT_EQ(got[1], data::epoch_order(37, 7, 1, true, 37, true, 0, 1));
}

TEST(Loader, RanksInterleaveToTheWorldOneBatches) {
    const auto shards = write_shards({10, 17, 10});
    for (int w : {2, 3})
        for (int b : {4, 5})
            for (bool shuffle : {false, true})
                for (bool drop : {true, false}) {
                    const std::string what = "W " + std::to_string(w) + " b " + std::to_string(b) + " shuffle " +
                                             std::to_string(shuffle) + " drop_last " + std::to_string(drop);
                    data::Loader one(config(shards, b, shuffle, drop));
                    const int bpe1 = static_cast<int>(one.batches_per_epoch());
                    const auto world1 = take(one, 2 * bpe1);
                    std::vector<std::vector<std::vector<uint64_t>>> got(w);
                    std::vector<int> bpe(w);
                    for (int r = 0; r < w; ++r) {
                        data::LoaderConfig c = config(shards, b, shuffle, drop);
                        c.rank = r;
                        c.world_size = w;
                        data::Loader loader(c);
                        bpe[r] = static_cast<int>(loader.batches_per_epoch());
                        if (drop) {
                            EXPECT_EQ(bpe[r], 37 / (b * w)) << what << ": equal counts on all ranks";
                        }
                        got[r] = take(loader, 2 * bpe[r]);
                    }
                    for (int e = 0; e < 2; ++e) {
                        std::vector<std::vector<std::vector<uint64_t>>> epoch(w);
                        for (int r = 0; r < w; ++r)
                            epoch[r].assign(got[r].begin() + e * bpe[r], got[r].begin() + (e + 1) * bpe[r]);
                        const auto merged = interleave(epoch);
                        const std::vector<std::vector<uint64_t>> want(world1.begin() + e * bpe1,
                                                                      world1.begin() + e * bpe1 + merged.size());
                        EXPECT_EQ(merged, want) << what << " epoch " << e;
                        std::vector<uint64_t> all;
                        for (const auto& batch : merged) all.insert(all.end(), batch.begin(), batch.end());
                        std::sort(all.begin(), all.end());
                        EXPECT_EQ(std::unique(all.begin(), all.end()), all.end()) << what << ": a sample twice";
                        if (!drop) {
                            EXPECT_EQ(all.size(), 37u) << what << ": validation reads every sample once";
                        }
                    }
                }
}

TEST(Loader, ARankWithNoValidationBatchIsEmptyNotAnError) {
    const auto shards = write_shards({10});
    data::LoaderConfig c = config(shards, 4, false, false);  // 3 global batches (4, 4, 2) over 4 ranks
    c.world_size = 4;
    c.rank = 2;
    {
        data::Loader loader(c);
        EXPECT_EQ(loader.batches_per_epoch(), 1u);
        EXPECT_EQ(take(loader, 2), (std::vector<std::vector<uint64_t>>{{8, 9}, {8, 9}}))
            << "the partial batch is the last rank-2 batch";
    }
    c.rank = 3;
    data::Loader empty(c, data::Cursor{2, 0});
    EXPECT_EQ(empty.batches_per_epoch(), 0u);
    EXPECT_EQ(empty.cursor(), (data::Cursor{2, 0}));
    EXPECT_NE(error_of([&] { empty.next(); }).find("no batch"), std::string::npos);
}

TEST(Loader, ResumeFromACursorRepeatsTheUninterruptedRun) {
    const auto shards = write_shards({10, 17, 10});
    for (bool drop_last : {true, false}) {
        data::LoaderConfig c = config(shards, 8, true, drop_last);
        std::vector<std::vector<uint64_t>> full;
        {
            data::Loader loader(c);
            full = take(loader, 14);
        }
        for (int cut : {0, 1, 3, 4, 5, 7, 9}) {
            data::Cursor at;
            {
                data::Loader first(c);
                take(first, cut);
                at = first.cursor();
            }
            c.workers = 1 + cut % 3;
            data::Loader resumed(c, at);
            EXPECT_EQ(resumed.cursor(), at);
            const auto rest = take(resumed, 14 - cut);
            for (int i = cut; i < 14; ++i)
                EXPECT_EQ(rest[i - cut], full[i])
                    << "batch " << i << " after resuming at " << cut << ", drop_last " << drop_last;
        }
    }
}

TEST(Loader, BackpressureBoundsTheWorkAhead) {
    const auto shards = write_shards({10, 17, 10});
    data::LoaderConfig c = config(shards, 2, true, true);
    c.prefetch = 2;
    c.workers = 4;
    data::Loader loader(c);
    for (int i = 0; i < 12; ++i) {
        // Give the workers time to run ahead as far as they can, then check they stopped at the ring.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (loader.stats().filled < static_cast<uint64_t>(i) + 2 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const data::LoaderStats s = loader.stats();
        EXPECT_EQ(s.released, static_cast<uint64_t>(i));
        EXPECT_EQ(s.filled, s.released + 2) << "the ring should be full and no fuller";
        EXPECT_LE(s.max_ahead, 2u);
        loader.next();
        loader.release();
    }
    EXPECT_GT(loader.stats().worker_wait_s, 0.0);
}

TEST(Loader, SeveralBatchesMayBeHeldUpToThePrefetchDepth) {
    const auto shards = write_shards({10, 17, 10});
    data::LoaderConfig c = config(shards, 4, false, true);
    c.prefetch = 2;
    data::Loader loader(c);
    const data::HostBatch& a = loader.next();
    const data::HostBatch& b = loader.next();
    EXPECT_EQ(a.sample_ids[0], 0u);
    EXPECT_EQ(b.sample_ids[0], 4u);
    EXPECT_NE(error_of([&] { loader.next(); }), "") << "a third outstanding batch would deadlock";
    loader.release();
    loader.release();
    EXPECT_NE(error_of([&] { loader.release(); }), "");
    EXPECT_EQ(loader.next().sample_ids[0], 8u);
    loader.release();
}

// Overwrites one pixel byte of sample g in its shard file (found by its unique pixel content).
void corrupt_sample(const std::string& path, uint64_t g) {
    std::vector<char> bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::vector<uint8_t> px = pixels_of(g);
    auto it = std::search(bytes.begin(), bytes.end(), px.begin(), px.end(),
                          [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; });
    ASSERT_NE(it, bytes.end()) << "sample " << g << " not found in " << path;
    it[100] = static_cast<char>(it[100] ^ 0x5A);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Loader, CorruptedRecordSurfacesFromNextNamingFileAndRecord) {
    const auto shards = write_shards({10, 17, 10});
    corrupt_sample(shards[1], 10 + 6);  // record 6 of the second shard
    data::LoaderConfig c = config(shards, 4, true, true);
    data::Loader loader(c);
    std::string msg;
    for (int i = 0; i < 20 && msg.empty(); ++i) {
        msg = error_of([&] {
            loader.next();
            loader.release();
        });
    }
    ASSERT_NE(msg, "") << "the corrupted record was never reported";
    EXPECT_NE(msg.find(shards[1]), std::string::npos) << msg;
    EXPECT_NE(msg.find("record 6"), std::string::npos) << msg;
    EXPECT_EQ(error_of([&] { loader.next(); }), msg) << "the loader stays stopped with the same error";
}

TEST(Loader, DestructorReturnsWithBlockedWorkers) {
    const auto shards = write_shards({10, 17, 10});
    data::LoaderConfig c = config(shards, 2, true, true);
    c.prefetch = 2;
    c.workers = 4;
    {
        data::Loader loader(c);  // never consumed: every worker ends up blocked on the full ring
        while (loader.stats().filled < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    {
        data::Loader loader(c);
        loader.next();  // destroyed while a batch is held
    }
    {
        data::Loader loader(c);  // destroyed immediately, workers possibly mid-batch
    }
    SUCCEED();
}

TEST(Loader, RefusesBadConfigurations) {
    const auto shards = write_shards({10, 17, 10});
    const auto other = write_shards({5}, data::ShardSpec{kH, kH, 1, false});
    data::LoaderConfig c = config(shards, 4, true, true);
    c.shards.push_back(other[0]);
    const std::string msg = error_of([&] { data::Loader l(c); });
    EXPECT_NE(msg.find(other[0]), std::string::npos) << msg;
    EXPECT_NE(msg.find("spec"), std::string::npos) << msg;

    auto refused = [&](void (*edit)(data::LoaderConfig&), const char* needle) {
        data::LoaderConfig bad = config(shards, 4, true, true);
        edit(bad);
        const std::string m = error_of([&] { data::Loader l(bad); });
        EXPECT_NE(m.find(needle), std::string::npos) << "'" << m << "' should mention " << needle;
    };
    refused([](data::LoaderConfig& b) { b.shards.clear(); }, "no shard");
    refused([](data::LoaderConfig& b) { b.batch_size = 0; }, "batch_size");
    refused([](data::LoaderConfig& b) { b.workers = 0; }, "workers");
    refused([](data::LoaderConfig& b) { b.prefetch = 0; }, "prefetch");
    refused([](data::LoaderConfig& b) { b.rank = 2, b.world_size = 2; }, "rank 2 outside");
    refused([](data::LoaderConfig& b) { b.rank = -1, b.world_size = 2; }, "rank -1 outside");
    refused([](data::LoaderConfig& b) { b.world_size = 0; }, "world_size");
    // 37 training samples give no batch of 4 to each of 10 ranks (that needs 40).
    refused([](data::LoaderConfig& b) { b.world_size = 10; },
            "37 samples (in 3 shards) make no batch of 4 for each of 10");
    refused([](data::LoaderConfig& b) { b.world_size = 10; }, "batch 4 x world 10 = 40 samples");
    refused([](data::LoaderConfig& b) { b.batch_size = 38; }, "no batch");
    refused([](data::LoaderConfig& b) { b.shards.push_back("/nonexistent/x.sfshard"); }, "/nonexistent/x.sfshard");
    data::LoaderConfig ok = config(shards, 4, true, true);
    EXPECT_NE(error_of([&] { data::Loader l(ok, data::Cursor{0, 10}); }).find("cursor"), std::string::npos);
}

}  // namespace
