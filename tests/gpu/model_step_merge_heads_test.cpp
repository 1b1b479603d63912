// NetShape::merge_heads (model/heads.h, `bench step --merge-heads`): the four heads' conv1 as one 3x3
// 128 -> 256 ConvBN whose parameters are copies of the heads' own, gathered before each pass and scattered
// back after (model::copy_segments_cuda). Here: the copy kernel against the host (every range exact,
// nothing else written) and its refusals; the merged network's plan (one conv for the four, the same
// parameter table, one conv for the four) and, after a step of the merged network, against the unmerged
// network loaded with that state, over two more accumulated micro-steps: each head's conv1 gradients
// (without the gather the merged copies would still hold the first step's, which its optimizer step zeroed
// in the heads' own; without the scatter the heads' own stay zero), running statistics and counters, and
// the eval logits. The
// step against the CPU reference: CudaStep.MergeHeadsMicroStepMatchesTheCpuReference and, with every
// fusion, CudaStep.AllFusionsMicroStepMatchesTheCpuReference (model_step_fusions_reference_test.cpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/device_util.h"
#include "model/train_step_cuda.h"
#include "runtime/arena.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

TEST(CopySegmentsGpu, CopiesEachRangeAndNothingElse) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const size_t n = 200000;
    rt::Arena arena("copy test", rt::MemKind::Device);
    const size_t a_off = arena.reserve(n * 4, 256, "a"), b_off = arena.reserve(n * 4, 256, "b");
    arena.allocate();
    arena.seal();
    uint32_t* a = arena.ptr<uint32_t>(a_off);
    uint32_t* b = arena.ptr<uint32_t>(b_off);
    std::vector<uint32_t> ha(n), hb(n, 0xdeadbeefu);
    for (size_t i = 0; i < n; ++i) ha[i] = static_cast<uint32_t>(i * 2654435761u);
    SF_CUDA_CHECK(cudaMemcpy(a, ha.data(), n * 4, cudaMemcpyHostToDevice));
    SF_CUDA_CHECK(cudaMemcpy(b, hb.data(), n * 4, cudaMemcpyHostToDevice));
    // Ranges of 1 word to more than a grid row covers (64 blocks of 256 threads: 16384 words), at odd
    // word offsets, one of them empty, in both directions between the buffers.
    struct R {
        size_t from, to, words;
        bool a_to_b;
    };
    const R rs[] = {{0, 0, 1, true},
                    {7, 100, 36864, true},
                    {50000, 60001, 64, true},
                    {90000, 90000, 0, true},
                    {120003, 150000, 17000, true},
                    {180000, 180000, 3, false},
                    {190001, 170001, 5000, false}};
    std::vector<model::CopySegment> segs;
    for (const R& r : rs)
        segs.push_back(r.a_to_b ? model::CopySegment{a + r.from, b + r.to, r.words}
                                : model::CopySegment{b + r.from, a + r.to, r.words});
    model::copy_segments_cuda(ctx.exec(), segs.data(), static_cast<int>(segs.size()));
    ctx.synchronize();
    std::vector<uint32_t> ga(n), gb(n);
    SF_CUDA_CHECK(cudaMemcpy(ga.data(), a, n * 4, cudaMemcpyDeviceToHost));
    SF_CUDA_CHECK(cudaMemcpy(gb.data(), b, n * 4, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> wa = ha, wb = hb;  // the expected contents: the sources are read before any write here
    for (const R& r : rs)
        for (size_t i = 0; i < r.words; ++i)
            (r.a_to_b ? wb[r.to + i] : wa[r.to + i]) = (r.a_to_b ? ha : hb)[r.from + i];
    EXPECT_EQ(ga, wa);
    EXPECT_EQ(gb, wb);
    model::copy_segments_cuda(ctx.exec(), segs.data(), 0);  // nothing
    ctx.synchronize();
}

TEST(CopySegmentsGpu, BadSegmentsAreRefused) {
    SF_REQUIRE_GPU();
    rt::CudaContext ctx;
    const rt::Exec& ex = ctx.exec();
    rt::Arena arena("copy refusals", rt::MemKind::Device);
    const size_t off = arena.reserve(4096, 256, "x");
    arena.allocate();
    arena.seal();
    auto* x = arena.ptr<uint8_t>(off);
    const model::CopySegment overlap[] = {{x, x + 64, 32}};  // dst [64, 192) over src [0, 128)
    SF_EXPECT_ERROR(model::copy_segments_cuda(ex, overlap, 1), "segment 0's destination overlaps segment 0's source");
    const model::CopySegment two[] = {{x, x + 1024, 16}, {x + 2048, x + 1032, 16}};
    SF_EXPECT_ERROR(model::copy_segments_cuda(ex, two, 2), "segment 0's destination overlaps segment 1's destination");
    const model::CopySegment odd[] = {{x + 2, x + 1024, 4}};
    SF_EXPECT_ERROR(model::copy_segments_cuda(ex, odd, 1), "segment 0", "4-byte aligned");
    const model::CopySegment null_src[] = {{nullptr, x, 4}};
    SF_EXPECT_ERROR(model::copy_segments_cuda(ex, null_src, 1), "non-null");
    std::vector<model::CopySegment> many(model::kMaxCopySegments + 1);
    SF_EXPECT_ERROR(model::copy_segments_cuda(ex, many.data(), static_cast<int>(many.size())), "33 segments",
                    "at most 32");
    SF_EXPECT_ERROR(model::copy_segments_cuda(rt::Exec::cpu(), overlap, 1), "CUDA Exec");
    const model::CopySegment empty[] = {{nullptr, nullptr, 0}};  // skipped
    model::copy_segments_cuda(ex, empty, 1);
    ctx.synchronize();
}

// The offsets of the heads' conv1 tensors in the table, per head: weight, bias, BN weight, BN bias.
std::vector<const model::ParamInfo*> head_conv1_params(const model::ParamTable& t, const std::string& head) {
    std::vector<const model::ParamInfo*> v;
    for (const char* s : {".conv.weight", ".conv.bias", ".bn.weight", ".bn.bias"}) {
        const model::ParamInfo* p = t.find("dual_head." + head + ".conv1" + s);
        EXPECT_NE(p, nullptr) << head << s;
        if (p) v.push_back(p);
    }
    return v;
}

TEST(CudaStep, MergeHeadsKeepsEachHeadsGradientsAndStatistics) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(2);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig merged(cpu, true, 2, order, kMergeHeads);

    // A step of two micro-steps: its optimizer step zeroes the heads' gradients, which the merged copies must
    // not keep (without the gather before the backward they would still hold this step's).
    for (size_t k = 0; k < 2; ++k) {
        merged.load(b.pixels[k], b.labels[k]);
        merged.step.micro_step(0);
    }
    merged.step.optimizer_step();
    merged.ctx.synchronize();
    // The unmerged network from the merged one's state after that step (the step at initialisation is chaotic:
    // two networks stepped apart would differ by more than the merge does).
    const model::Planner& pm = merged.net.plan();
    const model::ParamTable& t = pm.table();
    std::vector<float> master = merged.fetch(pm.master(), t.flat_size);
    std::vector<float> bufs = merged.fetch(pm.buffers(), t.buffer_floats);
    std::vector<int64_t> cnts = merged.fetch(pm.counters(), t.counters);
    GpuRig plain(cpu, true, 2, order, 0);
    plain.step.upload(model::CheckpointView{&t, master.data(), nullptr, nullptr, bufs.data(), cnts.data()});
    const model::Planner& pp = plain.net.plan();

    // The plan: one 3x3 128 -> 256 conv instead of the heads' four 128 -> 64, the same parameter table.
    ASSERT_EQ(pp.table().params.size(), t.params.size());
    for (size_t i = 0; i < t.params.size(); ++i) {
        EXPECT_EQ(pp.table().params[i].name, t.params[i].name);
        EXPECT_EQ(pp.table().params[i].offset, t.params[i].offset);
    }
    EXPECT_EQ(pp.table().buffer_floats, t.buffer_floats);
    EXPECT_EQ(pp.table().counters, t.counters);
    int merged_convs = 0, head_convs = 0;
    for (const model::ConvUse& u : pm.convs()) {
        merged_convs += u.shape.k == 3 && u.shape.cin == 128 && u.shape.cout == 256 && u.shape.bias;
        head_convs += u.shape.k == 3 && u.shape.cin == 128 && u.shape.cout == 64 && u.shape.bias;
    }
    EXPECT_EQ(merged_convs, 1);
    EXPECT_EQ(head_convs, 0);

    // Two accumulated micro-steps of each from the same state, then the gradients before an optimizer step.
    for (GpuRig* r : {&plain, &merged}) {
        for (size_t k : {size_t(1), size_t(0)}) {
            r->load(b.pixels[k], b.labels[k]);
            r->step.micro_step(0);
        }
        r->ctx.synchronize();
    }
    const std::vector<float> gp = plain.fetch(pp.grad(), t.flat_size), gm = merged.fetch(pm.grad(), t.flat_size);
    const std::vector<float> rp = plain.fetch(pp.buffers(), t.buffer_floats),
                             rm = merged.fetch(pm.buffers(), t.buffer_floats);
    for (const char* head : {"heatmap_gap", "heatmap_piece", "offset", "angle"}) {
        for (const model::ParamInfo* p : head_conv1_params(t, head)) {
            const double r = rel_l2(gm.data() + p->offset, gp.data() + p->offset, p->numel);
            std::printf("[merge_heads] %s gradient rel L2 %.3g\n", p->name.c_str(), r);
            // A conv bias before train-mode BN has an exactly zero gradient: rounding noise on both sides.
            if (p->name.find(".conv.bias") != std::string::npos) continue;
            EXPECT_LE(r, 2e-2) << p->name;
        }
        for (const char* s : {".bn.running_mean", ".bn.running_var"}) {
            const std::string name = std::string("dual_head.") + head + ".conv1" + s;
            const model::BufferInfo* bi = nullptr;
            for (const model::BufferInfo& x : t.buffers)
                if (x.name == name) bi = &x;
            ASSERT_NE(bi, nullptr) << name;
            const double r = rel_l2(rm.data() + bi->offset, rp.data() + bi->offset, bi->numel);
            std::printf("[merge_heads] %s rel L2 %.3g\n", name.c_str(), r);
            EXPECT_LE(r, 1e-3) << name;
        }
    }
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(gm), sftest::to_double(gp), 2e-2, "every gradient"));
    const std::vector<int64_t> cp = plain.fetch(pp.counters(), t.counters),
                               cm = merged.fetch(pm.counters(), t.counters);
    EXPECT_EQ(cp, cm);
    for (int64_t c : cm) EXPECT_EQ(c, 4);

    // The eval forward (the running statistics gathered): the logits close.
    compare_eval_logits(plain, merged, [](int h, const std::vector<float>& x, const std::vector<float>& y) {
        EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(y), sftest::to_double(x), 2e-2,
                                         "eval logits of head " + std::to_string(h)));
    });
}

}  // namespace
