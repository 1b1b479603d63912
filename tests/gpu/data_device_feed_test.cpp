// DeviceFeed (data/device_feed.cu): host batches round-trip exactly through both device slots,
// a slot re-filled after the compute stream released it holds the new batch, partial batches
// copy only their samples, and the whole path loader -> pinned ring -> feed -> preprocess_cuda
// matches preprocess_ref on the same host batch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data/device_feed.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/preprocess.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/exec.h"
#include "tests/support/compare.h"

namespace {

const data::ShardSpec kSpec{8, 16, 1, false};

// A host batch backed by vectors; sample values depend on `tag`.
struct OwnedBatch {
    std::vector<uint8_t> pixels;
    std::vector<data::Label> labels;
    data::HostBatch batch;
    OwnedBatch(int n, int tag) : pixels(static_cast<size_t>(n) * 8 * 16), labels(static_cast<size_t>(n)) {
        for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 3 + tag * 17);
        for (int i = 0; i < n; ++i) labels[static_cast<size_t>(i)].gap_x = static_cast<float>(tag * 100 + i);
        batch.n = n;
        batch.spec = kSpec;
        batch.pixels = pixels.data();
        batch.labels = labels.data();
    }
};

// Reads slot `slot` back on the compute stream after waiting for its copy.
void read_back(data::DeviceFeed& feed, const rt::CudaContext& ctx, int slot, int n, std::vector<uint8_t>& px,
               std::vector<data::Label>& lab) {
    px.assign(feed.pixel_bytes() * n, 0);
    lab.assign(static_cast<size_t>(n), data::Label{});
    feed.wait(ctx.exec(), slot);
    SF_CUDA_CHECK(cudaMemcpyAsync(px.data(), feed.pixels(slot), px.size(), cudaMemcpyDeviceToHost, ctx.exec().stream));
    SF_CUDA_CHECK(cudaMemcpyAsync(lab.data(), feed.labels(slot), lab.size() * sizeof(data::Label),
                                  cudaMemcpyDeviceToHost, ctx.exec().stream));
    feed.release(ctx.exec(), slot);
    ctx.synchronize();
}

void expect_same(const OwnedBatch& want, const std::vector<uint8_t>& px, const std::vector<data::Label>& lab) {
    EXPECT_TRUE(std::memcmp(want.pixels.data(), px.data(), px.size()) == 0);
    for (size_t i = 0; i < lab.size(); ++i) EXPECT_EQ(lab[i].gap_x, want.labels[i].gap_x) << "label " << i;
}

TEST(DataDeviceFeedGpu, RoundTripsThroughBothSlots) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    data::DeviceFeed feed(kSpec, 4);
    const OwnedBatch a(4, 1), b(4, 2), c(3, 3);  // c is a partial batch
    std::vector<uint8_t> px;
    std::vector<data::Label> lab;

    feed.copy(a.batch, 0);
    feed.copy(b.batch, 1);
    feed.host_done(0);
    feed.host_done(1);
    read_back(feed, ctx, 0, 4, px, lab);
    expect_same(a, px, lab);
    read_back(feed, ctx, 1, 4, px, lab);
    expect_same(b, px, lab);

    feed.copy(c.batch, 0);  // after the compute stream released slot 0
    EXPECT_EQ(feed.count(0), 3);
    read_back(feed, ctx, 0, 3, px, lab);
    expect_same(c, px, lab);
    read_back(feed, ctx, 1, 4, px, lab);  // slot 1 untouched
    expect_same(b, px, lab);
}

TEST(DataDeviceFeedGpu, RefusesMismatchedBatches) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    data::DeviceFeed feed(kSpec, 2);
    OwnedBatch big(3, 1);
    EXPECT_THROW(feed.copy(big.batch, 0), rt::Error);
    OwnedBatch ok(2, 1);
    EXPECT_THROW(feed.copy(ok.batch, 2), rt::Error);
    ok.batch.spec.width = 8;
    EXPECT_THROW(feed.copy(ok.batch, 0), rt::Error);
}

TEST(DataDeviceFeedGpu, LoaderToPreprocessMatchesTheReference) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const data::ShardSpec spec{32, 64, 1, false};
    char tmpl[] = "/tmp/sf_feed_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string path = std::string(tmpl) + "/a.sfshard";
    {
        data::ShardWriter w(path, spec);
        std::vector<uint8_t> px(32 * 64);
        for (int s = 0; s < 24; ++s) {
            for (size_t j = 0; j < px.size(); ++j) px[j] = static_cast<uint8_t>(j * 5 + s * 29);
            data::Label l;
            l.gap_x = 40, l.gap_y = 16, l.slider_x = 8, l.slider_y = 16;
            l.rect_x0 = 0, l.rect_x1 = 64, l.rect_y0 = static_cast<float>(s % 5), l.rect_y1 = 30;
            w.add(px.data(), l);
        }
        w.finish();
    }
    data::LoaderConfig cfg;
    cfg.shards = {path};
    cfg.batch_size = 8;
    data::Loader loader(cfg);
    EXPECT_TRUE(loader.stats().pinned);
    data::DeviceFeed feed(spec, 8);
    rt::Arena out("feed_test_out", rt::MemKind::Device);
    const size_t elems = 8 * 32 * 64 * 2;
    const size_t off = out.reserve(elems * 2, 256, "out");
    out.allocate();
    out.seal();
    for (int step = 0; step < 5; ++step) {
        const int slot = step % 2;
        const data::HostBatch& b = loader.next();
        feed.copy(b, slot);
        feed.wait(ctx.exec(), slot);
        kern::preprocess_cuda(ctx.exec(), b.n, 32, 64, 1, feed.pixels(slot), feed.labels(slot), out.at(off));
        feed.release(ctx.exec(), slot);
        std::vector<uint16_t> got(elems);
        SF_CUDA_CHECK(cudaMemcpyAsync(got.data(), out.at(off), elems * 2, cudaMemcpyDeviceToHost, ctx.exec().stream));
        ctx.synchronize();
        std::vector<float> ref(elems);
        kern::preprocess_ref(b.n, 32, 64, 1, b.pixels, b.labels, ref.data());
        feed.host_done(slot);
        loader.release();
        std::vector<double> g(elems);
        for (size_t i = 0; i < elems; ++i) {
            const uint32_t u = static_cast<uint32_t>(got[i]) << 16;
            float f;
            std::memcpy(&f, &u, 4);
            g[i] = f;
        }
        EXPECT_TRUE(sftest::close_elementwise(g, sftest::to_double(ref), 0, 1.0 / 256, "step " + std::to_string(step)));
    }
}

}  // namespace
