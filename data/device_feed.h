// DeviceFeed: the host -> device leg of the loader (DESIGN §4-§5). Two device batch slots
// (ping-pong) for pixels and labels, filled by cudaMemcpyAsync on a dedicated non-blocking copy
// stream so the copy of batch k+1 overlaps the compute of batch k. Events order the two streams
// per slot:
//   copy(b, s)          copy stream waits for "compute released s", copies, records "s copied";
//   wait(compute, s)    the compute stream waits for "s copied" (only that copy, not the stream);
//   release(compute, s) records "compute released s" on the compute stream after its last use of s.
// The host batch must stay unreleased (loader.release()) until host_done(s) returns, since the
// copy reads it asynchronously. A step overlapping copy and compute (slot s = step % 2):
//   const HostBatch& b = loader.next(); feed.copy(b, s);         // batch k+1 -> slot s, async
//   feed.wait(ex, 1 - s); launch step on slot 1 - s; feed.release(ex, 1 - s);   // batch k
//   feed.host_done(s); loader.release();                         // copy has read the host batch
// wait() and release() enqueue stream-ordering operations: call them outside CUDA-graph capture,
// around the graph launch. CUDA-free header (stream and event handles forward-declared as the
// CUDA headers declare them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "data/label.h"
#include "data/loader.h"
#include "data/shard.h"
#include "runtime/exec.h"

struct CUevent_st;
typedef CUevent_st* cudaEvent_t;

namespace data {

class DeviceFeed {
public:
    static constexpr int kSlots = 2;

    // Device slots for batches of up to max_batch samples of `spec` on the current device.
    DeviceFeed(const ShardSpec& spec, int max_batch);
    ~DeviceFeed();  // synchronises the copy stream, then frees everything (errors logged)
    DeviceFeed(const DeviceFeed&) = delete;
    DeviceFeed& operator=(const DeviceFeed&) = delete;

    // Enqueues the copy of b's pixels and labels into `slot` (b.spec must match, b.n <= max_batch).
    void copy(const HostBatch& b, int slot);
    // Blocks the host until the copy into `slot` has read its host batch.
    void host_done(int slot) const;
    // Makes the compute stream wait for the copy into `slot`.
    void wait(const rt::Exec& compute, int slot) const;
    // Marks `slot` consumed by everything enqueued so far on the compute stream.
    void release(const rt::Exec& compute, int slot);

    const uint8_t* pixels(int slot) const;  // device (max_batch, H, W, C) uint8
    const Label* labels(int slot) const;    // device (max_batch) Label
    int count(int slot) const;              // samples of the last copy into `slot`
    cudaStream_t stream() const;            // the copy stream
    size_t pixel_bytes() const;             // per sample

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace data
