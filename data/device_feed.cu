// DeviceFeed (data/device_feed.h): two device slots in one Device arena, a non-blocking copy
// stream, and per slot a "copied" event (recorded by the copy stream) and a "released" event
// (recorded by the compute stream). Waiting on a never-recorded event is a no-op in CUDA, so the
// first copy into a slot needs no special case.
#include <cuda_runtime.h>

#include "data/device_feed.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/log.h"

namespace data {

namespace {

constexpr size_t kAlign = 256;

void log_if_failed(cudaError_t e, const char* what) {
    if (e != cudaSuccess) SF_LOG_ERROR("device feed: %s: %s", what, cudaGetErrorString(e));
}

}  // namespace

struct DeviceFeed::Impl {
    ShardSpec spec;
    int max_batch = 0;
    size_t pixel_bytes = 0;
    rt::Arena arena{"device_feed", rt::MemKind::Device};
    size_t pixels_off[kSlots] = {}, labels_off[kSlots] = {};
    int count[kSlots] = {};
    cudaStream_t stream = nullptr;
    cudaEvent_t copied[kSlots] = {}, released[kSlots] = {};

    void check_slot(int slot) const {
        SF_CHECK(slot >= 0 && slot < kSlots, "device feed: slot %d outside 0..%d", slot, kSlots - 1);
    }
};

DeviceFeed::DeviceFeed(const ShardSpec& spec, int max_batch) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    SF_CHECK(max_batch >= 1, "device feed: max_batch must be >= 1 (got %d)", max_batch);
    m.spec = spec;
    m.max_batch = max_batch;
    m.pixel_bytes = static_cast<size_t>(spec.height) * spec.width * spec.channels;
    for (int s = 0; s < kSlots; ++s) {
        m.pixels_off[s] = m.arena.reserve(m.pixel_bytes * max_batch, kAlign, "pixels");
        m.labels_off[s] = m.arena.reserve(sizeof(Label) * max_batch, kAlign, "labels");
    }
    m.arena.allocate();
    m.arena.seal();
    // On a failure half way, the handles created so far are destroyed before rethrowing.
    try {
        SF_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
        for (int s = 0; s < kSlots; ++s) {
            SF_CUDA_CHECK(cudaEventCreateWithFlags(&m.copied[s], cudaEventDisableTiming));
            SF_CUDA_CHECK(cudaEventCreateWithFlags(&m.released[s], cudaEventDisableTiming));
        }
    } catch (...) {
        for (int s = 0; s < kSlots; ++s) {
            if (m.copied[s]) log_if_failed(cudaEventDestroy(m.copied[s]), "cudaEventDestroy");
            if (m.released[s]) log_if_failed(cudaEventDestroy(m.released[s]), "cudaEventDestroy");
        }
        if (m.stream) log_if_failed(cudaStreamDestroy(m.stream), "cudaStreamDestroy");
        throw;
    }
}

DeviceFeed::~DeviceFeed() {
    Impl& m = *impl_;
    // Copies in flight must finish before the arena (their destination) is freed.
    log_if_failed(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
    for (int s = 0; s < kSlots; ++s) {
        log_if_failed(cudaEventDestroy(m.copied[s]), "cudaEventDestroy");
        log_if_failed(cudaEventDestroy(m.released[s]), "cudaEventDestroy");
    }
    log_if_failed(cudaStreamDestroy(m.stream), "cudaStreamDestroy");
}

void DeviceFeed::copy(const HostBatch& b, int slot) {
    Impl& m = *impl_;
    m.check_slot(slot);
    SF_CHECK(b.spec == m.spec, "device feed: batch spec %dx%dx%d differs from the feed's %dx%dx%d", b.spec.height,
             b.spec.width, b.spec.channels, m.spec.height, m.spec.width, m.spec.channels);
    SF_CHECK(b.n >= 0 && b.n <= m.max_batch, "device feed: batch of %d samples exceeds the slot size %d", b.n,
             m.max_batch);
    SF_CHECK(b.n == 0 || (b.pixels != nullptr && b.labels != nullptr), "device feed: batch without pixels or labels");
    // The compute stream may still be reading the slot's previous batch.
    SF_CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.released[slot], 0));
    if (b.n > 0) {
        SF_CUDA_CHECK(cudaMemcpyAsync(m.arena.at(m.pixels_off[slot]), b.pixels, m.pixel_bytes * b.n,
                                      cudaMemcpyHostToDevice, m.stream));
        SF_CUDA_CHECK(cudaMemcpyAsync(m.arena.at(m.labels_off[slot]), b.labels, sizeof(Label) * b.n,
                                      cudaMemcpyHostToDevice, m.stream));
    }
    SF_CUDA_CHECK(cudaEventRecord(m.copied[slot], m.stream));
    m.count[slot] = b.n;
}

void DeviceFeed::host_done(int slot) const {
    impl_->check_slot(slot);
    SF_CUDA_CHECK(cudaEventSynchronize(impl_->copied[slot]));
}

void DeviceFeed::wait(const rt::Exec& compute, int slot) const {
    impl_->check_slot(slot);
    SF_CHECK(compute.is_cuda(), "device feed: wait() needs a CUDA Exec");
    SF_CUDA_CHECK(cudaStreamWaitEvent(compute.stream, impl_->copied[slot], 0));
}

void DeviceFeed::release(const rt::Exec& compute, int slot) {
    impl_->check_slot(slot);
    SF_CHECK(compute.is_cuda(), "device feed: release() needs a CUDA Exec");
    SF_CUDA_CHECK(cudaEventRecord(impl_->released[slot], compute.stream));
}

const uint8_t* DeviceFeed::pixels(int slot) const {
    impl_->check_slot(slot);
    return impl_->arena.ptr<uint8_t>(impl_->pixels_off[slot]);
}

const Label* DeviceFeed::labels(int slot) const {
    impl_->check_slot(slot);
    return impl_->arena.ptr<Label>(impl_->labels_off[slot]);
}

int DeviceFeed::count(int slot) const {
    impl_->check_slot(slot);
    return impl_->count[slot];
}

cudaStream_t DeviceFeed::stream() const { return impl_->stream; }
size_t DeviceFeed::pixel_bytes() const { return impl_->pixel_bytes; }

}  // namespace data
