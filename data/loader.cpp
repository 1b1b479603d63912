// The training loader (data/loader.h): worker threads fill a ring of host batches in order.
//
// Batches carry a sequence number s = epoch * batches_per_epoch + batch, counted from the start
// cursor; batch s lives in ring slot s % prefetch. Workers claim the next unclaimed s as soon as its
// slot is free (s < released + prefetch — the backpressure rule), read its samples straight into the
// slot with ShardReader::read (which checks each record's CRC and label), and mark the slot ready
// with s. next() hands out slot (handed % prefetch) once it holds sequence number `handed`, so
// batches leave strictly in order whatever order the workers finish in. All waiting is on two
// condition variables (workers: "a slot was freed"; training thread: "a batch is ready"); nothing
// spins. The first worker error stops the loader and is re-thrown by next().
#include "data/loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/arena.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/log.h"

namespace data {

namespace {

constexpr uint64_t kEmpty = ~uint64_t{0};  // slot holds no ready batch
constexpr size_t kSlotAlign = 256;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Slot {
    HostBatch batch;            // pointers into the ring arena, fixed at construction
    uint8_t* pixels = nullptr;  // (batch_size, H, W, C) uint8
    Label* labels = nullptr;    // (batch_size)
    uint64_t* ids = nullptr;    // (batch_size)
    uint64_t ready = kEmpty;    // sequence number of the batch it holds, once filled
};

}  // namespace

struct Loader::Impl {
    LoaderConfig cfg;
    std::vector<ShardReader> readers;
    std::vector<uint64_t> first;  // global index of each shard's first sample, + total at the end
    ShardSpec spec;
    size_t pixel_bytes = 0;
    uint64_t total = 0;     // samples in all shards
    uint64_t per_rank = 0;  // samples this rank takes per epoch
    uint64_t bpe = 0;       // batches per epoch of this rank (0: a rank with no validation batch)
    Cursor origin;          // the start cursor (the position of a loader with no batch)
    bool pinned = false;
    std::unique_ptr<rt::Arena> ring;  // pinned when CUDA is usable and cfg.pinned, else host
    std::vector<Slot> slots;

    mutable std::mutex mu;
    std::condition_variable space_cv;  // workers: a slot was released, or stop
    std::condition_variable ready_cv;  // training thread: a batch is ready, or an error
    uint64_t next_claim = 0, handed = 0, released = 0, start = 0;
    uint64_t filled = 0, max_ahead = 0;
    double consumer_wait_s = 0, worker_wait_s = 0;
    std::map<uint64_t, std::shared_ptr<const std::vector<uint64_t>>> orders;  // by epoch
    std::atomic<bool> stop{false};
    bool failed = false;
    std::string error;
    std::vector<std::thread> threads;

    Impl(const LoaderConfig& c, Cursor cur);
    void open_shards();
    void plan_ring();
    std::shared_ptr<const std::vector<uint64_t>> order_of(uint64_t epoch, std::unique_lock<std::mutex>& lock);
    void worker_loop();
    void fill(Slot& slot, uint64_t seq, const std::vector<uint64_t>& order);
    void fail(uint64_t seq, const std::string& what);
    void shutdown();
};

Loader::Impl::Impl(const LoaderConfig& c, Cursor cur) : cfg(c) {
    SF_CHECK(!cfg.shards.empty(), "loader: no shard files given");
    SF_CHECK(cfg.batch_size >= 1, "loader: batch_size must be >= 1 (got %d)", cfg.batch_size);
    SF_CHECK(cfg.workers >= 1, "loader: workers must be >= 1 (got %d)", cfg.workers);
    SF_CHECK(cfg.prefetch >= 1, "loader: prefetch must be >= 1 (got %d)", cfg.prefetch);
    SF_CHECK(cfg.world_size >= 1, "loader: world_size must be >= 1 (got %d)", cfg.world_size);
    SF_CHECK(cfg.rank >= 0 && cfg.rank < cfg.world_size, "loader: rank %d outside [0, %d) (world of size %d)", cfg.rank,
             cfg.world_size, cfg.world_size);
    open_shards();
    // Sharding by global batch (epoch_order): with drop_last every rank takes
    // floor(total / (batch_size * world_size)) batches, so all ranks run the same number of steps
    // (data-parallel collectives need that); the samples left over are different ones every epoch
    // when shuffling. Without drop_last a rank may have no batch at all (validation on many ranks).
    bpe = rank_batches(total, cfg.batch_size, cfg.drop_last, cfg.rank, cfg.world_size);
    per_rank = rank_samples(total, cfg.batch_size, cfg.drop_last, cfg.rank, cfg.world_size);
    SF_CHECK(total > 0, "loader: the %zu shard(s) hold no samples (first: %s)", readers.size(), cfg.shards[0].c_str());
    SF_CHECK(bpe > 0 || !cfg.drop_last,
             "loader: %llu samples (in %zu shards) make no batch of %d for each of %d rank(s) with drop_last: that "
             "needs at least batch %d x world %d = %llu samples",
             static_cast<unsigned long long>(total), readers.size(), cfg.batch_size, cfg.world_size, cfg.batch_size,
             cfg.world_size,
             static_cast<unsigned long long>(cfg.batch_size) * static_cast<unsigned long long>(cfg.world_size));
    SF_CHECK(cur.batch <= bpe, "loader: cursor batch %llu beyond the %llu batches of an epoch",
             static_cast<unsigned long long>(cur.batch), static_cast<unsigned long long>(bpe));
    SF_CHECK(cur.epoch <= ~uint64_t{0} / (bpe + 1), "loader: cursor epoch %llu out of range",
             static_cast<unsigned long long>(cur.epoch));
    origin = cur;
    start = cur.epoch * bpe + cur.batch;
    next_claim = handed = released = start;
    plan_ring();
}

void Loader::Impl::open_shards() {
    readers.reserve(cfg.shards.size());
    first.push_back(0);
    for (const std::string& path : cfg.shards) {
        readers.emplace_back(path);
        const ShardReader& r = readers.back();
        if (readers.size() == 1) {
            spec = r.spec();
            pixel_bytes = r.pixel_bytes();
        }
        SF_CHECK(r.spec() == spec,
                 "loader: shard %s has spec %dx%dx%d%s but %s has %dx%dx%d%s; all shards must share one spec",
                 path.c_str(), r.spec().height, r.spec().width, r.spec().channels, r.spec().quant4 ? " quant4" : "",
                 cfg.shards[0].c_str(), spec.height, spec.width, spec.channels, spec.quant4 ? " quant4" : "");
        total += r.count();
        first.push_back(total);
    }
}

// One arena for the whole ring: per slot pixels, labels and sample ids, each 256-byte aligned.
void Loader::Impl::plan_ring() {
    pinned = cfg.pinned && rt::cuda_device_available();
    ring = std::make_unique<rt::Arena>("loader_ring", pinned ? rt::MemKind::Pinned : rt::MemKind::Host);
    const size_t b = static_cast<size_t>(cfg.batch_size);
    struct Offsets {
        size_t pixels, labels, ids;
    };
    std::vector<Offsets> off(static_cast<size_t>(cfg.prefetch));
    for (Offsets& o : off) {
        o.pixels = ring->reserve(b * pixel_bytes, kSlotAlign, "pixels");
        o.labels = ring->reserve(b * sizeof(Label), kSlotAlign, "labels");
        o.ids = ring->reserve(b * sizeof(uint64_t), kSlotAlign, "sample ids");
    }
    ring->allocate();
    ring->seal();
    slots.resize(off.size());
    for (size_t i = 0; i < off.size(); ++i) {
        Slot& s = slots[i];
        s.pixels = ring->ptr<uint8_t>(off[i].pixels);
        s.labels = ring->ptr<Label>(off[i].labels);
        s.ids = ring->ptr<uint64_t>(off[i].ids);
        s.batch.spec = spec;
        s.batch.pixels = s.pixels;
        s.batch.labels = s.labels;
        s.batch.sample_ids = s.ids;
    }
}

// The order of `epoch`, shared by the workers. Built outside the lock (it is O(total)); two workers
// reaching a new epoch together may both build it, and the first one stored wins.
std::shared_ptr<const std::vector<uint64_t>> Loader::Impl::order_of(uint64_t epoch,
                                                                    std::unique_lock<std::mutex>& lock) {
    auto it = orders.find(epoch);
    if (it != orders.end()) return it->second;
    lock.unlock();
    auto built = std::make_shared<const std::vector<uint64_t>>(
        epoch_order(total, cfg.seed, epoch, cfg.shuffle, cfg.batch_size, cfg.drop_last, cfg.rank, cfg.world_size));
    lock.lock();
    auto& entry = orders[epoch];
    if (!entry) entry = std::move(built);
    // Epochs before the oldest unreleased batch are never needed again.
    orders.erase(orders.begin(), orders.lower_bound(released / bpe));
    return orders.at(epoch);
}

void Loader::Impl::worker_loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
        if (!stop && next_claim >= released + static_cast<uint64_t>(cfg.prefetch)) {
            const Clock::time_point t0 = Clock::now();
            space_cv.wait(lock, [&] { return stop || next_claim < released + static_cast<uint64_t>(cfg.prefetch); });
            worker_wait_s += seconds_since(t0);
        }
        if (stop) return;
        const uint64_t seq = next_claim++;
        max_ahead = std::max(max_ahead, next_claim - released);
        Slot& slot = slots[seq % slots.size()];
        try {
            const std::shared_ptr<const std::vector<uint64_t>> order = order_of(seq / bpe, lock);
            lock.unlock();
            fill(slot, seq, *order);
            lock.lock();
        } catch (const std::exception& e) {
            if (!lock.owns_lock()) lock.lock();
            fail(seq, e.what());
            return;
        } catch (...) {
            if (!lock.owns_lock()) lock.lock();
            fail(seq, "unknown exception");
            return;
        }
        if (stop) return;  // the slot may be half filled; nobody will read it
        slot.ready = seq;
        ++filled;
        ready_cv.notify_one();
    }
}

// Reads the samples of batch `seq` into `slot` (no lock held; the slot is this worker's alone).
void Loader::Impl::fill(Slot& slot, uint64_t seq, const std::vector<uint64_t>& order) {
    const uint64_t epoch = seq / bpe, batch = seq % bpe;
    const uint64_t b = static_cast<uint64_t>(cfg.batch_size);
    const uint64_t begin = batch * b;
    const int n = static_cast<int>(std::min(b, per_rank - begin));
    for (int k = 0; k < n; ++k) {
        if (stop.load(std::memory_order_relaxed)) return;
        const uint64_t g = order[begin + static_cast<uint64_t>(k)];
        const size_t shard = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), g) - first.begin()) - 1;
        slot.labels[k] = readers[shard].read(static_cast<size_t>(g - first[shard]), slot.pixels + k * pixel_bytes);
        slot.ids[k] = g;
    }
    slot.batch.n = n;
    slot.batch.cursor = Cursor{epoch, batch};
}

// Called with the lock held: records the first error and stops everything.
void Loader::Impl::fail(uint64_t seq, const std::string& what) {
    if (!failed) {
        failed = true;
        error = rt::format("data loader (epoch %llu, batch %llu): %s", static_cast<unsigned long long>(seq / bpe),
                           static_cast<unsigned long long>(seq % bpe), what.c_str());
    }
    stop = true;
    space_cv.notify_all();
    ready_cv.notify_all();
}

void Loader::Impl::shutdown() {
    {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
    }
    space_cv.notify_all();
    ready_cv.notify_all();
    for (std::thread& t : threads)
        if (t.joinable()) t.join();
    threads.clear();
}

Loader::Loader(const LoaderConfig& cfg, Cursor start) : impl_(std::make_unique<Impl>(cfg, start)) {
    // A rank with no batch (validation split smaller than the world's batches) starts no worker.
    const int workers = impl_->bpe == 0 ? 0 : cfg.workers;
    impl_->threads.reserve(static_cast<size_t>(workers));
    try {
        for (int i = 0; i < workers; ++i) impl_->threads.emplace_back([this] { impl_->worker_loop(); });
    } catch (...) {
        impl_->shutdown();
        throw;
    }
}

Loader::~Loader() { impl_->shutdown(); }

const HostBatch& Loader::next() {
    Impl& m = *impl_;
    SF_CHECK(m.bpe > 0,
             "loader: rank %d of %d has no batch of %d in the %llu samples (no drop_last); "
             "batches_per_epoch() is 0",
             m.cfg.rank, m.cfg.world_size, m.cfg.batch_size, static_cast<unsigned long long>(m.total));
    std::unique_lock<std::mutex> lock(m.mu);
    SF_CHECK(m.handed - m.released < static_cast<uint64_t>(m.cfg.prefetch),
             "loader: next() with %d batches not yet released (prefetch %d); release() them first",
             static_cast<int>(m.handed - m.released), m.cfg.prefetch);
    Slot& slot = m.slots[m.handed % m.slots.size()];
    if (!m.failed && slot.ready != m.handed) {
        const Clock::time_point t0 = Clock::now();
        m.ready_cv.wait(lock, [&] { return m.failed || slot.ready == m.handed; });
        m.consumer_wait_s += seconds_since(t0);
    }
    if (m.failed) throw rt::Error(m.error);
    ++m.handed;
    return slot.batch;
}

void Loader::release() {
    Impl& m = *impl_;
    {
        std::lock_guard<std::mutex> lock(m.mu);
        SF_CHECK(m.released < m.handed, "loader: release() without a batch handed out by next()");
        m.slots[m.released % m.slots.size()].ready = kEmpty;
        ++m.released;
    }
    m.space_cv.notify_one();  // exactly one more batch may be claimed
}

Cursor Loader::cursor() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->bpe == 0) return impl_->origin;
    return Cursor{impl_->handed / impl_->bpe, impl_->handed % impl_->bpe};
}

uint64_t Loader::dataset_size() const { return impl_->total; }
uint64_t Loader::batches_per_epoch() const { return impl_->bpe; }
const ShardSpec& Loader::spec() const { return impl_->spec; }

LoaderStats Loader::stats() const {
    const Impl& m = *impl_;
    std::lock_guard<std::mutex> lock(m.mu);
    LoaderStats s;
    s.filled = m.filled;
    s.handed = m.handed - m.start;
    s.released = m.released - m.start;
    s.max_ahead = m.max_ahead;
    s.consumer_wait_s = m.consumer_wait_s;
    s.worker_wait_s = m.worker_wait_s;
    s.pinned = m.pinned;
    return s;
}

}  // namespace data
