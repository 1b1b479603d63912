// NetShape::fuse_head_bn (model/heads.h, `bench step --fuse-head-bn`): each head's conv1 leaves its BN + ReLU
// to its conv2 (kernels/head_conv_cuda.h, DwPrologue) and its conv bias folds into that BN (ConvBN::forward:
// the running mean takes momentum * bias, the eval prologue's mean is running_mean - bias). The heads' conv1
// biases start at zero, where the fold changes nothing; here they are set far from it (uniform in
// [-0.5, 0.5]) so that a fold done wrong shows, and one micro-step of the CUDA network with the switch and
// of the same network without it (four heads, and merged) is judged against the fp32 CPU reference step
// from the same state: each head's conv1 running mean close to the stored path's (a missing momentum * bias
// is 0.01-0.05 off) and, with its running variance, every head's conv1 and conv2 gradient and the eval
// logits (a missing running_mean - bias moves them by the bias over the standard deviation), no further
// from the reference than the stored path's (which rounds y + b to bf16 before the BN), the same counters;
// the plan without the heads' activation. The default
// micro-step against the CPU oracle: CudaStep.FuseHeadBnMicroStepMatchesTheCpuReference
// (model_step_fusions_reference_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/gpu_ops.h"
#include "model/train_step.h"
#include "tests/gpu/step_reference.h"
#include "tests/gpu/step_rig.h"
#include "tests/support/compare.h"

namespace {

using namespace steprig;

constexpr const char* kHeads[] = {"heatmap_gap", "heatmap_piece", "offset", "angle"};

const model::BufferInfo* find_buffer(const model::ParamTable& t, const std::string& name) {
    for (const model::BufferInfo& b : t.buffers)
        if (b.name == name) return &b;
    return nullptr;
}

// The heads' conv1 biases of the CPU network (the rigs' initial state) set to values in [-0.5, 0.5].
void set_head_biases(model::SiderNet& cpu) {
    const model::ParamTable& t = cpu.table();
    uint64_t seed = 77;
    for (const char* head : kHeads) {
        const model::ParamInfo* p = t.find(std::string("dual_head.") + head + ".conv1.conv.bias");
        ASSERT_NE(p, nullptr) << head;
        const std::vector<double> v = sftest::random_uniform(p->numel, seed++, -0.5, 0.5);
        for (size_t i = 0; i < p->numel; ++i) cpu.plan().master()[p->offset + i] = static_cast<float>(v[i]);
    }
}

// The fp32 CPU reference: one micro-step of `net` (the rigs' initial state) on batch 0, then an eval forward.
struct CpuStep {
    std::vector<float> grad, buffers, logits[4];
};

CpuStep cpu_step(const model::SiderNet& init, const HostBatches& b) {
    model::SiderNet net(init.shape(), rt::MemKind::Host);
    const model::Planner &pi = init.plan(), &pn = net.plan();
    const model::ParamTable& t = init.table();
    std::copy(pi.master(), pi.master() + t.flat_size, pn.master());
    std::copy(pi.buffers(), pi.buffers() + t.buffer_floats, pn.buffers());
    cpu_input(net, b.pixels[0], b.labels[0], net.input());
    model::TrainStep step(net, model::LossConfig{}, optim());
    step.micro_step(rt::Exec::cpu(), b.labels[0].data(), 1.0);
    CpuStep r;
    r.grad.assign(pn.grad(), pn.grad() + t.flat_size);
    r.buffers.assign(pn.buffers(), pn.buffers() + t.buffer_floats);
    net.forward(rt::Exec::cpu(), false);
    const model::HeadLogits<float> l = net.logits();
    const size_t cells = static_cast<size_t>(l.n) * l.h * l.w, widths[] = {1, 1, 4, 2};
    const float* heads[] = {l.gap, l.slider, l.offset, l.angle};
    for (int h = 0; h < 4; ++h) r.logits[h].assign(heads[h], heads[h] + cells * widths[h]);
    return r;
}

// The fused network's error against the reference within `slack` of the stored path's (or below `floor`).
void expect_no_further(double fused, double plain, const std::string& what, double floor = 1e-3) {
    std::printf("[fuse_head_bn] %s: rel L2 to the CPU reference %.3g fused, %.3g stored\n", what.c_str(), fused, plain);
    EXPECT_LE(fused, std::max(1.1 * plain, floor)) << what;
}

void fuse_head_bn_keeps_the_heads(int merge) {
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    set_head_biases(cpu);
    const CpuStep ref = cpu_step(cpu, b);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    GpuRig plain(cpu, true, 1, order, merge), fused(cpu, true, 1, order, merge | kFuseHeadBn);
    const std::string what = merge ? "merged heads" : "four heads";

    // The plan: the heads' activation (N,H/4,W/4,4 x 64 bf16) is not stored; the fold's eval means (4 x 64
    // floats) are.
    const model::NetShape& s = cpu.shape();
    const size_t z_bytes = static_cast<size_t>(s.batch) * (s.height / 4) * (s.width / 4) * 4 * 64 * 2;
    const size_t ap = plain.net.plan().memory().activations, af = fused.net.plan().memory().activations;
    std::printf("[fuse_head_bn] %s: activations %zu -> %zu bytes (the heads' activation: %zu)\n", what.c_str(), ap, af,
                z_bytes);
    EXPECT_EQ(ap - af, z_bytes - 4 * 64 * 4) << what;

    for (GpuRig* r : {&plain, &fused}) {
        r->load(b.pixels[0], b.labels[0]);
        r->step.micro_step(0);
        r->ctx.synchronize();
    }
    const model::ParamTable& t = plain.net.plan().table();
    const model::Planner &pp = plain.net.plan(), &pf = fused.net.plan();
    std::printf("[fuse_head_bn] %s: loss %.6f stored, %.6f fused\n", what.c_str(), plain.step.read_stats().loss.total,
                fused.step.read_stats().loss.total);
    const std::vector<float> gp = plain.fetch(pp.grad(), t.flat_size), gf = fused.fetch(pf.grad(), t.flat_size);
    const std::vector<float> rp = plain.fetch(pp.buffers(), t.buffer_floats),
                             rf = fused.fetch(pf.buffers(), t.buffer_floats);
    for (const char* head : kHeads) {
        const std::string h = std::string("dual_head.") + head;
        for (const char* suffix :
             {".conv1.conv.weight", ".conv1.bn.weight", ".conv1.bn.bias", ".conv2.weight", ".conv2.bias"}) {
            const model::ParamInfo* p = t.find(h + suffix);
            ASSERT_NE(p, nullptr) << h << suffix;
            const float* c = ref.grad.data() + p->offset;
            if (std::all_of(c, c + p->numel, [](float x) { return x == 0; })) {
                // No gradient at all (the angle head without a rotated sample): none on either path.
                for (const std::vector<float>* g : {&gp, &gf})
                    EXPECT_TRUE(std::all_of(g->data() + p->offset, g->data() + p->offset + p->numel,
                                            [](float x) { return x == 0; }))
                        << what << " " << p->name;
                continue;
            }
            expect_no_further(rel_l2(gf.data() + p->offset, c, p->numel), rel_l2(gp.data() + p->offset, c, p->numel),
                              what + " " + p->name + " gradient", 2e-2);
        }
        // The running mean, the mean of y + b either way (the fold's momentum * b): the stored path's to
        // rounding (the reference's Hf differs from either CUDA network's by bf16's error, ~2e-3 here).
        const model::BufferInfo* m = find_buffer(t, h + ".conv1.bn.running_mean");
        const model::BufferInfo* v = find_buffer(t, h + ".conv1.bn.running_var");
        ASSERT_TRUE(m && v) << h;
        EXPECT_TRUE(sftest::close_elementwise(sftest::to_double(rf.data() + m->offset, m->numel),
                                              sftest::to_double(rp.data() + m->offset, m->numel), 1e-3, 1e-2,
                                              what + " " + m->name + " against the stored path"));
        expect_no_further(rel_l2(rf.data() + m->offset, ref.buffers.data() + m->offset, m->numel),
                          rel_l2(rp.data() + m->offset, ref.buffers.data() + m->offset, m->numel),
                          what + " " + m->name);
        expect_no_further(rel_l2(rf.data() + v->offset, ref.buffers.data() + v->offset, v->numel),
                          rel_l2(rp.data() + v->offset, ref.buffers.data() + v->offset, v->numel),
                          what + " " + v->name);
    }
    EXPECT_EQ(plain.fetch(pp.counters(), t.counters), fused.fetch(pf.counters(), t.counters)) << what;
    // The eval forward: the running statistics with the bias folded (eval_mean), against the reference's.
    compare_eval_logits(plain, fused, [&](int head, const std::vector<float>& x, const std::vector<float>& y) {
        const std::vector<float>& c = ref.logits[head];
        ASSERT_EQ(c.size(), y.size());
        expect_no_further(rel_l2(y.data(), c.data(), c.size()), rel_l2(x.data(), c.data(), c.size()),
                          what + ": eval logits of head " + std::to_string(head), 1e-2);
    });
}

TEST(CudaStep, FuseHeadBnKeepsEachHeadsGradientsStatisticsAndEvalLogits) {
    SF_REQUIRE_GPU();
    fuse_head_bn_keeps_the_heads(0);
}

TEST(CudaStep, FuseHeadBnWithMergedHeadsKeepsEachHeadsGradientsStatisticsAndEvalLogits) {
    SF_REQUIRE_GPU();
    fuse_head_bn_keeps_the_heads(kMergeHeads);
}

// kern::ConvPolicy::head_bn_grad (`bench step --head-bn-grad`): the heads' conv2 backward gathers the conv1 BN's
// backward reductions from the dx it stores (kern::HeadBnGrad), finalized into dgamma, dbeta and the coefficients of
// that BN's dx pass, which then runs alone. The same values summed per chunk of the conv2 backward instead of by the
// statistics pass: one micro-step changes only a summation order (expect_changed_order_only: the same plan and loss,
// some gradient not bitwise equal, each within relative L2 0.15 and all within 5e-2, the bounds of the other
// BN-backward epilogues' step tests), with four heads and merged; the captured micro-step has one kernel fewer per
// conv1 BN (the statistics pass's two kernels become the finalize).
TEST(CudaStep, HeadBnGradGathersTheConv1BnSums) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(1);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    set_head_biases(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    for (const int merge : {0, kMergeHeads}) {
        const std::string what = merge ? "head_bn_grad, merged heads" : "head_bn_grad, four heads";
        const kern::ConvPolicy base = GpuRig::policy(true, 1, 0, 0);
        kern::ConvPolicy with = base;
        with.head_bn_grad = true;
        GpuRig plain(cpu, base, 1, order, merge | kFuseHeadBn), fused(cpu, with, 1, order, merge | kFuseHeadBn);
        EXPECT_FALSE(plain.net.gpu_ops()->head_bn_grad()) << what;
        EXPECT_TRUE(fused.net.gpu_ops()->head_bn_grad()) << what;
        int gathering = 0;
        for (const model::LayerUse& l : fused.net.plan().layers()) gathering += l.kernels.gathers_input_bn_sums;
        for (const model::LayerUse& l : plain.net.plan().layers()) EXPECT_FALSE(l.kernels.gathers_input_bn_sums);
        EXPECT_EQ(gathering, 4) << what;  // the four conv2
        expect_changed_order_only(plain, fused, b, what, 0.15, 5e-2);
        for (GpuRig* r : {&plain, &fused}) r->train_step(b.pixels[0], b.labels[0]);  // the second one is captured
        const model::GraphNodeCounts& gp = plain.step.micro_graph_nodes();
        const model::GraphNodeCounts& gf = fused.step.micro_graph_nodes();
        ASSERT_TRUE(gp.captured && gf.captured) << what;
        EXPECT_EQ(gp.kernels - gf.kernels, merge ? 1 : 4) << what;
        std::printf("%s: micro-step kernels %d -> %d\n", what.c_str(), gp.kernels, gf.kernels);
    }
}

// kern::ConvPolicy::head_bn_dx (`bench step --head-bn-dx`, with head_bn_grad): the heads' conv2 backward stores no dx
// and the conv1 BN's dx pass forms it from the logits' gradients and the conv2 weights (kern::head_bn_dx_cuda), the
// same values: against head_bn_grad alone, the same gradient plan but for the four logits' gradients, which live
// until that dx pass now, the four conv2 marked in the plan, and two
// captured train steps on different batches (a dx pass reading the slot the conv2s no longer write would see the
// first step's values, or another tensor's, in the second) give bitwise the same weights, moments, statistics,
// loss and eval logits, with four heads and merged; the captured micro-step has as many kernels (the dx pass is
// replaced, not added).
TEST(CudaStep, HeadBnDxIsBitwiseTheStoredDx) {
    SF_REQUIRE_GPU();
    const HostBatches b = make_batches(2);
    model::SiderNet cpu(net_shape(), rt::MemKind::Host);
    init_cpu(cpu);
    set_head_biases(cpu);
    const model::UpOrder order = model::UpOrder::ConvFirst;
    for (const int merge : {0, kMergeHeads}) {
        const std::string what = merge ? "head_bn_dx, merged heads" : "head_bn_dx, four heads";
        SCOPED_TRACE(what);
        kern::ConvPolicy base = GpuRig::policy(true, 1, 0, 0);
        base.head_bn_grad = true;
        kern::ConvPolicy with = base;
        with.head_bn_dx = true;
        kern::ConvPolicy alone = GpuRig::policy(true, 1, 0, 0);
        alone.head_bn_dx = true;  // without head_bn_grad: not taken
        GpuRig stored(cpu, base, 1, order, merge | kFuseHeadBn), formed(cpu, with, 1, order, merge | kFuseHeadBn);
        EXPECT_FALSE(stored.net.gpu_ops()->head_bn_dx());
        EXPECT_TRUE(formed.net.gpu_ops()->head_bn_dx());
        EXPECT_FALSE(model::GpuOps::head_bn_dx(alone));
        int marked = 0;
        for (const model::LayerUse& l : formed.net.plan().layers()) marked += l.kernels.input_grad_recomputed;
        for (const model::LayerUse& l : stored.net.plan().layers()) EXPECT_FALSE(l.kernels.input_grad_recomputed);
        EXPECT_EQ(marked, 4);  // the four conv2
        const std::vector<model::GradSlot>& sa = stored.net.plan().grad_slots();
        const std::vector<model::GradSlot>& sb = formed.net.plan().grad_slots();
        ASSERT_EQ(sa.size(), sb.size());
        int extended = 0;  // the logits' gradients, read by the conv1 BN's dx pass now: live until then
        for (size_t i = 0; i < sa.size(); ++i) {
            if (sa[i].what == "head logits") {
                EXPECT_EQ(sa[i].first, sb[i].first) << i;
                EXPECT_GT(sb[i].last, sa[i].last) << i;
                ++extended;
            } else {
                EXPECT_TRUE(sa[i].first == sb[i].first && sa[i].last == sb[i].last && sa[i].offset == sb[i].offset)
                    << sa[i].what << " " << i;
            }
        }
        EXPECT_EQ(extended, 4);
        for (size_t k = 0; k < b.pixels.size(); ++k)
            for (GpuRig* r : {&stored, &formed}) r->train_step(b.pixels[k], b.labels[k]);  // the second captured
        expect_rigs_bitwise_equal(stored, formed);
        const model::GraphNodeCounts& gs = stored.step.micro_graph_nodes();
        const model::GraphNodeCounts& gf = formed.step.micro_graph_nodes();
        ASSERT_TRUE(gs.captured && gf.captured);
        EXPECT_EQ(gs.kernels, gf.kernels);
        std::printf("%s: micro-step kernels %d and %d\n", what.c_str(), gs.kernels, gf.kernels);
    }
}

}  // namespace
