// The activation gradients' liveness plan (model/planner_grads.cpp, model/grad_tape.h):
//   - the shared layout (first contribution overwrites, lifetimes share bytes, nothing zeroed)
//     gives every parameter gradient and the whole step bitwise equal to the reference layout
//     (every gradient its own region, zeroed, accumulated);
//   - with the gradient region poisoned with NaN before each micro-step, every parameter gradient
//     stays finite and bitwise equal: no op reads a gradient before it is written;
//   - no two gradients that live at the same time share a byte, on both backends' plans;
//   - the tape catches a backward whose order drifts from the traced schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "data/fixed_batch.h"
#include "kernels/conv_cudnn.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/init.h"
#include "model/net.h"
#include "model/train_step.h"
#include "tests/support/compare.h"

namespace {

const model::NetShape kSmall{2, 2, 64, 128};  // batch, channels, height, width

struct StepResult {
    std::vector<std::vector<float>> grads;  // the flat gradient after each micro-step
    std::vector<float> master;              // the weights after the optimizer step
    std::vector<float> buffers;             // BN running statistics
    double loss = 0;
};

// Two micro-steps (the gradient accumulates across them) and one AdamW step. poison: the whole
// activation-gradient region is filled with NaN before each micro-step.
StepResult run_step(model::GradLayout layout, bool poison) {
    const model::NetShape s = kSmall;
    model::SiderNet net(s, rt::MemKind::Host, layout);
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), 7, p.master(), p.buffers(), p.counters());
    const data::FixedSamples d = data::make_fixed_samples(11, s.batch, s.channels, s.height, s.width);
    model::TrainStep step(net, model::LossConfig{}, model::OptimConfig{});
    StepResult r;
    const size_t n = net.table().flat_size;
    for (int micro = 0; micro < 2; ++micro) {
        std::copy(d.input.begin(), d.input.end(), net.input());
        if (micro == 1)  // a different second micro-batch: the mirrored input
            std::reverse(net.input(), net.input() + d.input.size());
        if (poison)
            std::fill_n(static_cast<float*>(p.act_grad_base()), p.act_grad_bytes() / sizeof(float),
                        std::numeric_limits<float>::quiet_NaN());
        r.loss += step.micro_step(rt::Exec::cpu(), d.labels.data(), 0.5).total;
        r.grads.emplace_back(p.grad(), p.grad() + n);
    }
    step.optimizer_step(rt::Exec::cpu(), 1e-3);
    r.master.assign(p.master(), p.master() + n);
    r.buffers.assign(p.buffers(), p.buffers() + net.table().buffer_floats);
    return r;
}

// Names the first parameter whose gradient differs bitwise (or is not finite), "" when none.
std::string first_difference(const model::ParamTable& t, const std::vector<float>& a, const std::vector<float>& b) {
    for (const model::ParamInfo& p : t.params)
        for (size_t i = 0; i < p.numel; ++i) {
            const float x = a[p.offset + i], y = b[p.offset + i];
            if (!std::isfinite(x)) return p.name + " (not finite)";
            if (std::memcmp(&x, &y, sizeof(float)) != 0) return p.name + "[" + std::to_string(i) + "]";
        }
    return "";
}

TEST(GradPlan, SharedLayoutIsBitwiseTheReferenceLayoutEvenOverNaN) {
    const model::SiderNet layout_probe(kSmall, rt::MemKind::Host);
    const model::MemoryPlan m = layout_probe.plan().memory();
    EXPECT_EQ(m.grad_zeroed, 0u);  // nothing is zeroed in the shared layout
    const StepResult ref = run_step(model::GradLayout::Separate, false);
    const StepResult shared = run_step(model::GradLayout::Shared, false);
    const StepResult poisoned = run_step(model::GradLayout::Shared, true);
    // The reference layout must be a real oracle: its gradients are nonzero and finite.
    double energy = 0;
    for (float g : ref.grads[1]) energy += std::fabs(g);
    ASSERT_TRUE(std::isfinite(energy));
    ASSERT_GT(energy, 0.0);
    const model::ParamTable& t = layout_probe.table();
    for (size_t k = 0; k < ref.grads.size(); ++k) {
        EXPECT_EQ(first_difference(t, shared.grads[k], ref.grads[k]), "") << "micro-step " << k;
        EXPECT_EQ(first_difference(t, poisoned.grads[k], ref.grads[k]), "") << "micro-step " << k << " (NaN poison)";
    }
    EXPECT_EQ(shared.loss, ref.loss);
    EXPECT_EQ(poisoned.loss, ref.loss);
    EXPECT_EQ(0, std::memcmp(shared.master.data(), ref.master.data(), ref.master.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(poisoned.master.data(), ref.master.data(), ref.master.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(shared.buffers.data(), ref.buffers.data(), ref.buffers.size() * sizeof(float)));
}

// No two gradients whose lifetimes intersect share a byte; every slot lies inside the region.
void expect_disjoint_when_live(const model::Planner& p, const char* what) {
    const std::vector<model::GradSlot>& g = p.grad_slots();
    const size_t region = p.memory().activation_grads;
    size_t used = 0, shared_pairs = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        if (!g[i].used()) continue;
        ++used;
        ASSERT_LE(g[i].offset + g[i].bytes, region) << what << ": slot " << i << " (" << g[i].what << ")";
        ASSERT_EQ(g[i].offset % 256, 0u) << what << ": slot " << i;
        for (size_t j = i + 1; j < g.size(); ++j) {
            if (!g[j].used()) continue;
            const bool live = g[i].first <= g[j].last && g[j].first <= g[i].last;
            const bool bytes = g[i].offset < g[j].offset + g[j].bytes && g[j].offset < g[i].offset + g[i].bytes;
            ASSERT_FALSE(live && bytes) << what << ": " << g[i].what << " #" << i << " [" << g[i].first << ", "
                                        << g[i].last << "] and " << g[j].what << " #" << j << " [" << g[j].first << ", "
                                        << g[j].last << "] share bytes";
            shared_pairs += bytes;
        }
    }
    EXPECT_GT(used, 100u) << what;
    EXPECT_GT(shared_pairs, 0u) << what << ": the plan shares nothing";
}

TEST(GradPlan, GradientsThatLiveTogetherNeverShareBytes) {
    model::NetShape s = kSmall;
    const model::SiderNet cpu(s, model::DryRun{});
    const model::SiderNetCuda gpu(s, model::DryRun{});
    expect_disjoint_when_live(cpu.plan(), "cpu");
    expect_disjoint_when_live(gpu.plan(), "cuda");
    // The allocated CPU network binds the same plan it reported dry.
    const model::SiderNet real(s, rt::MemKind::Host);
    EXPECT_EQ(real.plan().memory().activation_grads, cpu.plan().memory().activation_grads);
}

// A dry run planned for a policy with the depthwise ConvBNs' BN backward inside the fused conv
// backward (GpuOps::dw_fused_bn: `bench step --dw-fused-bwd-bn`) plans what that network binds: the
// fused op reads the BN's dy while it writes the conv input's dx, so the two never share bytes (they
// may without it), and the layers reserve the fused kernel's larger workspace. The real CUDA network's
// plan is compared with this dry run in tests/gpu/model_step_dw_fused_test.cpp.
TEST(GradPlan, DryRunPlansTheFusedBnBackwardOfItsPolicy) {
    kern::ConvPolicy fused;
    fused.dw_fused_bwd = true;
    fused.dw_fused_bn_bwd = true;
    kern::ConvPolicy fused_only = fused;
    fused_only.dw_fused_bn_bwd = false;
    const model::NetShape s = kSmall;
    const model::SiderNetCuda plain(s, model::DryRun{}), with_bn(s, model::DryRun{&fused}),
        without_bn(s, model::DryRun{&fused_only});
    EXPECT_TRUE(with_bn.plan().dw_fused_bn());
    EXPECT_FALSE(without_bn.plan().dw_fused_bn());
    EXPECT_FALSE(plain.plan().dw_fused_bn());
    expect_disjoint_when_live(with_bn.plan(), "cuda, fused BN backward");
    const model::MemoryPlan a = plain.plan().memory(), b = with_bn.plan().memory(), c = without_bn.plan().memory();
    // The fused conv backward alone changes nothing the planner sees (it reports the passes it replaces).
    EXPECT_EQ(c.activation_grads, a.activation_grads);
    EXPECT_EQ(c.workspace, a.workspace);
    // With the BN's dx inside it: each such layer's workspace holds the fused kernel's partials after
    // the BN's (the region is the max over all layers), and no less gradient memory (dy stays live one
    // op longer).
    size_t fused_ws = 0;
    for (const model::ConvUse& u : with_bn.plan().convs())
        if (u.dgrad && kern::dwconv3x3_fused_supported(u.shape))
            fused_ws = std::max(fused_ws, model::GpuOps::dw_fused_bn_workspace_floats(u.shape) * sizeof(float));
    ASSERT_GT(fused_ws, 0u);
    EXPECT_GE(b.workspace, std::max(a.workspace, fused_ws));
    EXPECT_GE(b.activation_grads, a.activation_grads);
    EXPECT_EQ(b.activations, a.activations);
    EXPECT_EQ(b.grad_tensors, a.grad_tensors);
    std::printf("[grad plan] fused BN backward at batch %d, %dx%d: activation grads %zu -> %zu B, workspace %zu -> %zu B\n",
                s.batch, s.height, s.width, a.activation_grads, b.activation_grads, a.workspace, b.workspace);
    // Which layers declared it: the stride-1 depthwise ConvBNs whose backward the trace reports as the
    // fused op (its dy read by the dx write) differ from the plain plan's lifetimes.
    size_t differing = 0;
    const std::vector<model::GradSlot>& ga = plain.plan().grad_slots();
    const std::vector<model::GradSlot>& gb = with_bn.plan().grad_slots();
    ASSERT_EQ(ga.size(), gb.size());
    for (size_t i = 0; i < ga.size(); ++i) differing += ga[i].first != gb[i].first || ga[i].last != gb[i].last;
    EXPECT_GT(differing, 0u) << "no gradient's lifetime changed: the dry run did not plan the fused BN backward";
    std::printf("[grad plan] %zu of %zu gradient lifetimes differ with the fused BN backward\n", differing, ga.size());
}

// The same for the 1x1 ConvBNs' BN dx formed in the project's dgrad and wgrad loads (GpuOps::pw_bn_bwd:
// `bench step --pw-bn-bwd`): the dry run traces the fused op (dy read while dx is written) for exactly the
// eligible 1x1 ConvBNs (a BN, an input gradient, no bias, upsample or producer's BN-backward epilogue, cout
// and, with a prologue, cin at most 512), marks their shapes (ConvUse::bn_bwd_prologue with the BN's
// activation), reserves the BN's coefficients and the wgrad's partials in their workspace, and without
// pw_custom plans nothing of it. On the fused network too (the expand's BN is then the depthwise prologue's).
// (ConvUse::bn_bwd_act is what GpuOps times with; the activation a layer runs is its own.)
TEST(GradPlan, DryRunPlansThePwBnBwdOfItsPolicy) {
    for (const bool fused : {false, true}) {
        model::NetShape s = kSmall;
        s.fuse_expand_dw = s.fuse_dw_pw = fused;
        const std::string what = fused ? "pw_bn_bwd, fused network" : "pw_bn_bwd";
        kern::ConvPolicy base;
        base.pw_custom = true;
        kern::ConvPolicy with = base, off;
        with.pw_bn_bwd = off.pw_bn_bwd = true;
        const model::SiderNetCuda a(s, model::DryRun{&base}), b(s, model::DryRun{&with}), c(s, model::DryRun{&off});
        EXPECT_FALSE(a.plan().pw_bn_bwd());
        EXPECT_TRUE(b.plan().pw_bn_bwd());
        EXPECT_FALSE(c.plan().pw_bn_bwd()) << "pw_bn_bwd needs pw_custom";
        expect_disjoint_when_live(b.plan(), what.c_str());
        size_t layers = 0, most = 0;
        for (const model::LayerUse& l : b.plan().layers()) {
            const kern::ConvShape& cs = l.shape;
            const bool want = l.batchnorm && l.input_grad && l.upsample == 1 && !cs.bias &&
                              kern::pwconv_supported(cs) && cs.cout <= kern::kPwMaxPrologueK &&
                              (!l.input_bn_prologue || cs.cin <= kern::kPwMaxPrologueK);
            if (!want) continue;
            ++layers;
            most = std::max(most, model::GpuOps::pw_fused_bn_workspace_floats(cs) * sizeof(float));
            for (const model::ConvUse& u : b.plan().convs()) {
                if (model::same_conv_shape(u.shape, cs)) {
                    EXPECT_TRUE(u.bn_bwd_prologue) << what << " " << l.name;
                }
            }
        }
        // Every LiteBlock's expand and project, every DSConv's pointwise conv and the other 1x1 ConvBNs.
        EXPECT_GE(layers, 23u * 2 + 18) << what;
        for (const model::ConvUse& u : a.plan().convs()) EXPECT_FALSE(u.bn_bwd_prologue) << u.shape.describe();
        for (const model::ConvUse& u : c.plan().convs()) EXPECT_FALSE(u.bn_bwd_prologue) << u.shape.describe();
        const model::MemoryPlan ma = a.plan().memory(), mb = b.plan().memory();
        EXPECT_GE(mb.workspace, std::max(ma.workspace, most)) << what;
        EXPECT_GE(mb.activation_grads, ma.activation_grads) << what;
        EXPECT_EQ(mb.activations, ma.activations) << what;
        EXPECT_EQ(mb.grad_tensors, ma.grad_tensors) << what;
        size_t differing = 0;
        const std::vector<model::GradSlot>& ga = a.plan().grad_slots();
        const std::vector<model::GradSlot>& gb = b.plan().grad_slots();
        ASSERT_EQ(ga.size(), gb.size()) << what;
        for (size_t i = 0; i < ga.size(); ++i) differing += ga[i].first != gb[i].first || ga[i].last != gb[i].last;
        EXPECT_GT(differing, 0u) << what << ": no gradient's lifetime changed: the dry run did not plan the fused op";
        std::printf("[grad plan] %s: %zu layers; activation grads %zu -> %zu B, workspace %zu -> %zu B, %zu lifetimes "
                    "differ\n",
                    what.c_str(), layers, ma.activation_grads, mb.activation_grads, ma.workspace, mb.workspace,
                    differing);
    }
}

// A BN-backward epilogue switch (the BN's reductions gathered by its consumer's backward-data) changes no
// gradient's memory or lifetime (the epilogue and the dx pass report the passes they replace): the dry run
// of `with` plans the gradients of `base`'s; each producer layer keeps its 2 * C coefficients
// (ConvBN::bn_coef, coef_bytes over `layers` tensors) among the activations; the workspace does not shrink.
void expect_epilogue_plan(const model::SiderNetCuda& a, const model::SiderNetCuda& b, size_t coef_bytes,
                          size_t layers, const char* what) {
    const model::MemoryPlan ma = a.plan().memory(), mb = b.plan().memory();
    EXPECT_EQ(mb.activation_grads, ma.activation_grads) << what;
    EXPECT_EQ(mb.grad_tensors, ma.grad_tensors) << what;
    EXPECT_GE(mb.activations, ma.activations + coef_bytes) << what;
    EXPECT_LE(mb.activations, ma.activations + coef_bytes + layers * 256) << what;  // 256-byte aligned tensors
    EXPECT_GE(mb.workspace, ma.workspace) << what;
    const std::vector<model::GradSlot>& ga = a.plan().grad_slots();
    const std::vector<model::GradSlot>& gb = b.plan().grad_slots();
    ASSERT_EQ(ga.size(), gb.size()) << what;
    for (size_t i = 0; i < ga.size(); ++i)
        EXPECT_TRUE(ga[i].first == gb[i].first && ga[i].last == gb[i].last && ga[i].offset == gb[i].offset)
            << what << ": " << ga[i].what << " " << i;
    std::printf("[grad plan] %s: %zu layers keep %zu B of coefficients; activations %zu -> %zu B, workspace %zu -> "
                "%zu B\n",
                what, layers, coef_bytes, ma.activations, mb.activations, ma.workspace, mb.workspace);
}

// The expand BN's backward reductions in the fused LiteBlock's depthwise kernel (GpuOps::dw_bn_grad:
// `bench step --dw-fused-bn-grad`), with and without the depthwise BN's dx inside that kernel
// (dw_fused_bn_bwd): each fused LiteBlock's expand keeps the coefficients; without dw_fused_bwd the
// switch is off.
TEST(GradPlan, DryRunPlansTheDwBnGradEpilogueOfItsPolicy) {
    model::NetShape s = kSmall;
    s.fuse_expand_dw = true;
    size_t coef_bytes = 0, blocks = 0;  // the expands whose BN a depthwise conv applies on load
    const model::SiderNetCuda plain(s, model::DryRun{});
    for (const model::LayerUse& l : plain.plan().layers())
        if (l.input_bn_prologue && l.shape.groups > 1) {
            coef_bytes += 2 * static_cast<size_t>(l.shape.cin) * sizeof(float);
            ++blocks;
        }
    ASSERT_GT(blocks, 0u);
    for (bool bn_bwd : {false, true}) {
        kern::ConvPolicy base;
        base.dw_fused_bwd = true;
        base.dw_fused_bn_bwd = bn_bwd;
        kern::ConvPolicy epi = base, off = base;
        epi.dw_fused_bn_grad = true;
        off.dw_fused_bwd = false;
        off.dw_fused_bn_grad = true;
        const model::SiderNetCuda a(s, model::DryRun{&base}), b(s, model::DryRun{&epi}), c(s, model::DryRun{&off});
        EXPECT_FALSE(a.plan().dw_bn_grad());
        EXPECT_TRUE(b.plan().dw_bn_grad());
        EXPECT_FALSE(c.plan().dw_bn_grad());  // dw_fused_bn_grad needs dw_fused_bwd
        expect_epilogue_plan(a, b, coef_bytes, blocks,
                             bn_bwd ? "dw_fused_bn_grad with dw_fused_bn_bwd" : "dw_fused_bn_grad");
    }
}

// The depthwise BNs' backward reductions in their 1x1 consumer's dgrad (GpuOps::pw_bn_grad: `bench step
// --pw-bn-grad`): every depthwise ConvBN (a LiteBlock's, a DSConv's) keeps the coefficients, and the
// consumers reserve the epilogue's partials; without pw_custom the switch is off. With and without the
// fusions that change those layers (fuse_expand_dw, fuse_dw_pw).
TEST(GradPlan, DryRunPlansThePwBnGradEpilogueOfItsPolicy) {
    for (bool fused : {false, true}) {
        model::NetShape s = kSmall;
        s.fuse_expand_dw = s.fuse_dw_pw = fused;
        kern::ConvPolicy base;
        base.pw_custom = true;
        kern::ConvPolicy epi = base, off;
        epi.pw_bn_grad = off.pw_bn_grad = true;
        const model::SiderNetCuda a(s, model::DryRun{&base}), b(s, model::DryRun{&epi}), c(s, model::DryRun{&off});
        EXPECT_FALSE(a.plan().pw_bn_grad());
        EXPECT_TRUE(b.plan().pw_bn_grad());
        EXPECT_FALSE(c.plan().pw_bn_grad());  // pw_bn_grad needs pw_custom
        size_t coef_bytes = 0, layers = 0, most = 0;
        const std::vector<model::LayerUse>& ls = b.plan().layers();
        for (size_t i = 0; i < ls.size(); ++i) {
            if (ls[i].shape.groups == 1 || ls[i].shape.groups != ls[i].shape.cin) continue;  // depthwise only
            coef_bytes += 2 * static_cast<size_t>(ls[i].shape.cout) * sizeof(float);
            ++layers;
            ASSERT_LT(i + 1, ls.size());
            const kern::ConvShape& consumer = ls[i + 1].shape;  // the 1x1 conv that reads it (declared next)
            EXPECT_EQ(consumer.k, 1) << ls[i + 1].name;
            if (kern::pwconv_supported(consumer))
                most = std::max(most, kern::pwconv_dgrad_workspace_floats(consumer) * sizeof(float));
            // The consumer's shape is marked for GpuOps's timing (ConvUse::bn_grad_epilogue) with the BN's
            // activation; not without the switch.
            for (const model::ConvUse& u : b.plan().convs()) {
                if (!model::same_conv_shape(u.shape, consumer)) continue;
                EXPECT_TRUE(u.bn_grad_epilogue && u.bn_grad_act == kern::Act::Silu) << ls[i + 1].name;
            }
        }
        for (const model::ConvUse& u : a.plan().convs()) EXPECT_FALSE(u.bn_grad_epilogue) << u.shape.describe();
        EXPECT_EQ(layers, 41u);  // 23 LiteBlocks and 18 DSConvs
        EXPECT_GT(most, 0u);
        EXPECT_GE(b.plan().memory().workspace, most);
        expect_epilogue_plan(a, b, coef_bytes, layers, fused ? "pw_bn_grad, fused network" : "pw_bn_grad");
    }
}

// ConvUse::stats_epilogue marks exactly the 1x1 shapes of ConvBNs that take their statistics from the
// project's kernel's epilogue under pw_stats (a BN, no bias, no upsample, a supported shape), for GpuOps's
// timing; nothing without the switch.
TEST(GradPlan, DryRunMarksTheStatisticsEpilogueShapes) {
    kern::ConvPolicy with, without;
    with.pw_custom = with.pw_stats = without.pw_custom = true;
    const model::SiderNetCuda a(kSmall, model::DryRun{&without}), b(kSmall, model::DryRun{&with});
    size_t marked = 0;
    for (const model::ConvUse& u : b.plan().convs()) {
        bool want = false;
        for (const model::LayerUse& l : b.plan().layers())
            want = want || (model::same_conv_shape(l.shape, u.shape) && l.batchnorm && l.upsample == 1 &&
                            !l.shape.bias && kern::pwconv_supported(l.shape));
        EXPECT_EQ(u.stats_epilogue, want) << u.shape.describe();
        marked += u.stats_epilogue;
    }
    EXPECT_GT(marked, 0u);
    for (const model::ConvUse& u : a.plan().convs()) EXPECT_FALSE(u.stats_epilogue) << u.shape.describe();
}

// ConvPolicy::dw_stats: the depthwise shapes of BN layers (every depthwise conv of the network) are marked
// for the staged forward's statistics epilogue, and only they; their layers' workspace holds its partials.
TEST(GradPlan, DryRunMarksTheDepthwiseStatisticsEpilogueShapes) {
    kern::ConvPolicy with, without;
    with.dw_stats = true;
    const model::SiderNetCuda a(kSmall, model::DryRun{&without}), b(kSmall, model::DryRun{&with});
    size_t marked = 0, most = 0;
    for (const model::ConvUse& u : b.plan().convs()) {
        bool want = false;
        for (const model::LayerUse& l : b.plan().layers())
            want = want || (model::same_conv_shape(l.shape, u.shape) && l.batchnorm && l.upsample == 1 &&
                            !l.shape.bias && kern::dwconv3x3_supported(l.shape));
        EXPECT_EQ(u.stats_epilogue, want) << u.shape.describe();
        EXPECT_EQ(u.stats_epilogue, u.shape.groups > 1) << u.shape.describe() << ": every depthwise conv, no other";
        marked += u.stats_epilogue;
        if (u.stats_epilogue) most = std::max(most, kern::dwconv3x3_stats_workspace_floats(u.shape));
    }
    EXPECT_GT(marked, 0u);
    EXPECT_GE(b.plan().workspace_floats(), most);
    for (const model::ConvUse& u : a.plan().convs()) EXPECT_FALSE(u.stats_epilogue) << u.shape.describe();
}

// A layer whose output only feeds a sum (a LiteBlock's project conv, every fusion path) reads the
// sum's gradient itself: the only gradient copies left are each fusion's into its last branch's
// input gradient (the first contribution to it; the other branches' already hold a path's). Both
// backends, both up-path orders.
TEST(GradPlan, OnlyTheFusionsLastBranchGradientIsCopied) {
    for (const model::UpOrder order : {model::UpOrder::UpsampleFirst, model::UpOrder::ConvFirst}) {
        model::NetShape s = kSmall;
        s.up_order = order;
        auto level_numel = [&](int level) {  // branch `level`: (N, H/(4*2^L), W/(4*2^L), 32*2^L)
            return static_cast<size_t>(s.batch) * (s.height / (4 << level)) * (s.width / (4 << level)) * (32 << level);
        };
        const size_t last_branches = level_numel(1) + level_numel(2) + level_numel(3);  // stages 2, 3, 4
        const model::MemoryPlan cpu = model::SiderNet(s, model::DryRun{}).plan().memory();
        const model::MemoryPlan gpu = model::SiderNetCuda(s, model::DryRun{}).plan().memory();
        const char* o = model::up_order_name(order);
        EXPECT_EQ(cpu.grad_copies, 3u) << o;
        EXPECT_EQ(gpu.grad_copies, 3u) << o;
        EXPECT_EQ(cpu.grad_copied, last_branches * sizeof(float)) << o;
        EXPECT_EQ(gpu.grad_copied, last_branches * sizeof(kern::bf16)) << o;
    }
}

// The issue's targets at 256x512, against the previous layout: every gradient its own region
// except the ConvBN conv-output gradients, which shared one region sized for the largest.
TEST(GradPlan, Bf16PlanMeetsTheMemoryTargetsAt256x512) {
    model::NetShape s;
    s.batch = 8;
    const model::SiderNetCuda h(s, model::DryRun{});
    size_t before = 0, conv_max = 0;
    for (const model::GradSlot& g : h.plan().grad_slots()) {
        const size_t b = (g.bytes + 255) / 256 * 256;
        if (g.what == "conv")
            conv_max = std::max(conv_max, b);
        else
            before += b;
    }
    before += conv_max;
    const model::MemoryPlan m = h.plan().memory();
    std::printf(
        "[grad plan] bf16 batch 8 at 256x512: activation grads %.1f MB (previous layout %.1f MB), zeroed "
        "per micro-step %.1f MB (previous %.1f MB), %zu gradients\n",
        m.activation_grads / 1e6, before / 1e6, m.grad_zeroed / 1e6, before / 1e6, m.grad_tensors);
    EXPECT_LE(m.activation_grads, before / 2);
    EXPECT_LE(m.grad_zeroed, before / 20);
    EXPECT_LE(m.grad_dgrad_first, m.grad_unshared);
}

TEST(GradTape, ReplayCatchesADriftedBackward) {
    model::GradTape tape;
    int a = 0, b = 0, c = 0;
    bool acc[2];
    tape.begin_trace();
    {
        model::GradTape::Active on(tape);
        EXPECT_FALSE(model::grad_op({&a}, {&b}, acc));  // tracing: nothing runs
        EXPECT_FALSE(model::grad_op({&b}, {&c, &a}, acc));
    }
    tape.end_trace();
    ASSERT_EQ(tape.events().size(), 5u);
    EXPECT_EQ(tape.ops(), 2);
    SF_EXPECT_ERROR(model::GradTape::Active{tape}, "before the gradient plan was bound");
    tape.set_replay({&b, &c, &a}, {false, false, true}, false);
    {
        model::GradTape::Active on(tape);
        ASSERT_TRUE(model::grad_op({&a}, {&b}, acc));
        EXPECT_FALSE(acc[0]);
        ASSERT_TRUE(model::grad_op({&b}, {&c, &a}, acc));
        EXPECT_FALSE(acc[0]);
        EXPECT_TRUE(acc[1]);
        on.finish();
    }
    {
        model::GradTape::Active on(tape);
        SF_EXPECT_ERROR(model::grad_op({&a}, {&c}, acc), "order changed");  // wrong target
    }
    {
        model::GradTape::Active on(tape);
        ASSERT_TRUE(model::grad_op({&a}, {&b}, acc));
        SF_EXPECT_ERROR(on.finish(), "wrote 1 activation gradients, its traced schedule has 3");
    }
    // The reference layout: the same targets, every write accumulates.
    tape.set_replay({&b, &c, &a}, {false, false, true}, true);
    model::GradTape::Active on(tape);
    ASSERT_TRUE(model::grad_op({&a}, {&b}, acc));
    EXPECT_TRUE(acc[0]);
}

TEST(GradTape, WithoutAnActiveTapeEveryWriteAccumulates) {
    int a = 0, b = 0;
    bool acc[2] = {false, false};
    EXPECT_TRUE(model::grad_op({&a}, {&b, &a}, acc));
    EXPECT_TRUE(acc[0] && acc[1]);
}

}  // namespace
