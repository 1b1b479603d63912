// The step's cost model with the CUDA step's kernel switches (kern::ConvPolicy: the BN statistics in the conv's
// epilogue, the BN's dx in the conv backward's loads, the depthwise backward in one kernel, a producer's BN
// reductions in its consumer's dgrad): which layers a dry run marks (model::LayerUse), the bytes each switch
// takes off the step layer by layer against amounts counted here from the shapes, FLOPs moved and not lost,
// and `slidefuse plan`'s flags for them.
#include <gtest/gtest.h>

#include <functional>

#include "model/net.h"
#include "tests/support/compare.h"
#include "tools/plan_roofline.h"
#include "tools/step_model.h"

namespace {

using tools::StepModelRow;
using tools::StepPart;

constexpr int kParts = static_cast<int>(StepPart::kCount);

model::NetShape small(bool fuse_expand_dw = false) {
    model::NetShape s{2, 2, 128, 256, model::UpOrder::ConvFirst};
    s.fuse_expand_dw = fuse_expand_dw;
    return s;
}

std::vector<model::LayerUse> layers(const model::NetShape& s, const kern::ConvPolicy& k) {
    const model::SiderNetCuda net(s, model::DryRun{&k});
    return net.plan().layers();
}

double total(const std::vector<StepModelRow>& rows, double tools::OpCost::*field) {
    double t = 0;
    for (const StepModelRow& r : rows)
        for (int q = 0; q < kParts; ++q) t += r.part[q].*field;
    return t;
}
double bytes(const std::vector<StepModelRow>& rows) { return total(rows, &tools::OpCost::bytes); }
double flops(const std::vector<StepModelRow>& rows) {
    return total(rows, &tools::OpCost::simt_flops) + total(rows, &tools::OpCost::tensor_flops);
}

bool pointwise_bn(const model::LayerUse& l) {  // a 1x1 ConvBN the project's kernel can run (kernels/pwconv_cuda.h)
    const kern::ConvShape& s = l.shape;
    return l.batchnorm && s.k == 1 && l.upsample == 1 && !s.bias && s.cin % 32 == 0 && s.cout % 32 == 0;
}
bool depthwise(const model::LayerUse& l) { return l.shape.groups > 1; }
double out_bytes(const model::LayerUse& l) { return 2.0 * l.shape.out().numel(); }  // bf16

TEST(StepModelKernels, BnBackwardPassesAddUpToTheBackward) {
    for (kern::Act act : {kern::Act::None, kern::Act::Relu, kern::Act::Silu}) {
        const tools::OpCost all = tools::bn_act_backward_cost(1000, 64, act);
        const tools::OpCost red = tools::bn_act_backward_reduce_cost(1000, 64, act);
        const tools::OpCost dx = tools::bn_act_backward_dx_cost(1000, 64, act);
        EXPECT_DOUBLE_EQ(red.bytes + dx.bytes, all.bytes);
        EXPECT_DOUBLE_EQ(red.simt_flops + dx.simt_flops, all.simt_flops);
        EXPECT_DOUBLE_EQ(red.bytes, 2 * 64000.0 * 2 + 4 * 64 * 4);  // x and dy read; 4 of the 8 vectors
        EXPECT_DOUBLE_EQ(dx.bytes, 3 * 64000.0 * 2 + 4 * 64 * 4);   // x and dy read, dx written
    }
    SF_EXPECT_ERROR(tools::bn_act_backward_dx_cost(0, 64, kern::Act::Silu), "rows 0");
}

// Which layers a dry run planned for each switch marks, by the switches' documented rules (kern::ConvPolicy).
TEST(StepModelKernels, EachSwitchMarksTheLayersItsRuleNames) {
    const model::NetShape s = small();
    int dw = 0, dw1 = 0, pw = 0;
    for (const model::LayerUse& l : layers(s, kern::ConvPolicy{})) {
        EXPECT_FALSE(l.kernels.stats_in_conv || l.kernels.bn_dx_in_conv || l.kernels.dw_fused_bwd ||
                     l.kernels.gathers_input_bn_sums)
            << l.name;
        dw += depthwise(l);
        dw1 += depthwise(l) && l.shape.stride == 1;
        pw += pointwise_bn(l);
    }
    EXPECT_EQ(dw, 41);
    EXPECT_GT(dw1, 20);
    EXPECT_LT(dw1, dw);  // the stride-2 DSConvs of the down paths
    EXPECT_GT(pw, 60);

    kern::ConvPolicy k;
    k.dw_stats = true;  // every depthwise ConvBN (all run on the project's kernels)
    for (const model::LayerUse& l : layers(s, k)) EXPECT_EQ(l.kernels.stats_in_conv, depthwise(l)) << l.name;
    k = {};
    k.pw_custom = k.pw_stats = true;  // every 1x1 ConvBN the project's kernel supports, never upsampled
    for (const model::LayerUse& l : layers(s, k)) EXPECT_EQ(l.kernels.stats_in_conv, pointwise_bn(l)) << l.name;
    k = {};
    k.dw_fused_bwd = true;  // the stride-1 depthwise convs; with dw_fused_bn_bwd their BN's dx inside too
    for (const model::LayerUse& l : layers(s, k)) {
        EXPECT_EQ(l.kernels.dw_fused_bwd, depthwise(l) && l.shape.stride == 1) << l.name;
        EXPECT_FALSE(l.kernels.bn_dx_in_conv) << l.name;
    }
    k.dw_fused_bn_bwd = true;
    for (const model::LayerUse& l : layers(s, k)) EXPECT_EQ(l.kernels.bn_dx_in_conv, l.kernels.dw_fused_bwd) << l.name;
    k = {};
    k.pw_custom = k.pw_bn_bwd = true;  // 1x1 ConvBNs with an input gradient (every one here)
    for (const model::LayerUse& l : layers(s, k))
        EXPECT_EQ(l.kernels.bn_dx_in_conv, pointwise_bn(l) && l.input_grad) << l.name;
    k = {};
    k.pw_custom = k.pw_bn_grad = true;  // the 1x1 conv after each depthwise one (LiteBlock project, DSConv pw)
    const std::vector<model::LayerUse> g = layers(s, k);
    int gatherers = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        const bool after_dw = i > 0 && depthwise(g[i - 1]) && pointwise_bn(g[i]);
        EXPECT_EQ(g[i].kernels.gathers_input_bn_sums, after_dw) << g[i].name;
        gatherers += g[i].kernels.gathers_input_bn_sums;
    }
    EXPECT_EQ(gatherers, 41);  // every depthwise conv is followed by a 1x1 one
    k = {};
    k.pw_custom = k.pw_fused_bwd = true;  // 1x1 ConvBNs with an input gradient, 32-128 channels, cin * cout <= 8192
    int fused = 0, too_wide = 0;
    for (const model::LayerUse& l : layers(s, k)) {
        const bool fits = (l.shape.cin == 32 || l.shape.cin == 64 || l.shape.cin == 128) &&
                          (l.shape.cout == 32 || l.shape.cout == 64 || l.shape.cout == 128) &&
                          l.shape.cin * l.shape.cout <= 8192;
        EXPECT_EQ(l.kernels.pw_fused_bwd, pointwise_bn(l) && l.input_grad && l.upsample == 1 && fits) << l.name;
        fused += l.kernels.pw_fused_bwd;
        too_wide += pointwise_bn(l) && l.input_grad && !fits;
    }
    EXPECT_GT(fused, 0);
    EXPECT_GT(too_wide, 0);  // the 1/16 and 1/32 branches' LiteBlocks
    // A dgrad gathering its producer's sums takes them in the fused pass's epilogue where that BN's activation is
    // SiLU (the LiteBlock projects, the DSConv pointwise convs): the same layers as without pw_bn_grad.
    const std::vector<model::LayerUse> without = layers(s, k);
    k.pw_bn_grad = true;
    const std::vector<model::LayerUse> with = layers(s, k);
    ASSERT_EQ(with.size(), without.size());
    int gatherers_fused = 0, still = 0;
    for (size_t i = 0; i < with.size(); ++i) {
        const model::LayerUse& l = with[i];
        const bool silu_producer = !l.kernels.gathers_input_bn_sums || with[i - 1].act == kern::Act::Silu;
        EXPECT_EQ(l.kernels.pw_fused_bwd, without[i].kernels.pw_fused_bwd && silu_producer) << l.name;
        gatherers_fused += l.kernels.gathers_input_bn_sums && l.kernels.pw_fused_bwd;
        still += l.kernels.pw_fused_bwd;
    }
    EXPECT_GT(gatherers_fused, 10);  // the 1/4 and 1/8 LiteBlocks' projects, DSConvs of those widths
    EXPECT_EQ(still, fused);
    k.pw_bn_bwd = true;  // with the BN-backward prologue too (the layer's own BN: not ReLU with the epilogue)
    for (const model::LayerUse& l : layers(s, k))
        EXPECT_FALSE(l.kernels.gathers_input_bn_sums && l.kernels.pw_fused_bwd && l.act == kern::Act::Relu) << l.name;
    k = {};
    k.dw_fused_bwd = k.dw_fused_bn_grad = true;  // the fused LiteBlock's depthwise conv gathers the expand's sums
    for (const model::LayerUse& l : layers(small(true), k))
        EXPECT_EQ(l.kernels.gathers_input_bn_sums, depthwise(l) && l.input_bn_prologue && l.kernels.dw_fused_bwd)
            << l.name;
    for (const model::LayerUse& l : layers(small(false), k)) EXPECT_FALSE(l.kernels.gathers_input_bn_sums) << l.name;
}

// Each switch alone against the plain step: the bytes it takes off, counted here from the marked layers'
// shapes; the FLOPs moved between passes, not lost (pw_bn_bwd forms dx in two kernels: its FLOPs once more).
void expect_saving(const char* what, const model::NetShape& s, const kern::ConvPolicy& k,
                   const std::function<double(const model::LayerUse& l, const model::LayerUse* prev)>& saved,
                   const std::function<double(const model::LayerUse& l)>& extra_flops = nullptr) {
    SCOPED_TRACE(what);
    const std::vector<StepModelRow> plain = tools::step_model(s), fused = tools::step_model(s, {}, &k);
    ASSERT_EQ(plain.size(), fused.size());
    const std::vector<model::LayerUse> ls = layers(s, k);
    double expect = 0, more_flops = 0;
    for (size_t i = 0; i < ls.size(); ++i) {
        expect += saved(ls[i], i > 0 ? &ls[i - 1] : nullptr);
        if (extra_flops) more_flops += extra_flops(ls[i]);
    }
    EXPECT_GT(expect, 0);
    EXPECT_NEAR(bytes(plain) - bytes(fused), expect, 1e-9 * bytes(plain));
    EXPECT_NEAR(flops(fused) - flops(plain), more_flops, 1e-9 * flops(plain));
    for (const StepModelRow& r : fused)
        for (int q = 0; q < kParts; ++q) {
            EXPECT_GE(r.part[q].bytes, 0) << r.name << " " << tools::step_part_name(static_cast<StepPart>(q));
            EXPECT_GE(r.part[q].simt_flops, 0) << r.name;
        }
}

TEST(StepModelKernels, EachSwitchTakesOffTheBytesOfThePassesItRemoves) {
    const model::NetShape s = small();
    kern::ConvPolicy k;
    // The statistics pass's read of the conv output.
    k.dw_stats = true;
    expect_saving("dw_stats", s, k, [](const model::LayerUse& l, const model::LayerUse*) {
        return l.kernels.stats_in_conv ? out_bytes(l) : 0.0;
    });
    k = {};
    k.pw_custom = k.pw_stats = true;
    expect_saving("pw_stats", s, k, [](const model::LayerUse& l, const model::LayerUse*) {
        return l.kernels.stats_in_conv ? out_bytes(l) : 0.0;
    });
    // One of the two reads of the output's gradient.
    k = {};
    k.dw_fused_bwd = true;
    expect_saving("dw_fused_bwd", s, k, [](const model::LayerUse& l, const model::LayerUse*) {
        return l.kernels.dw_fused_bwd ? out_bytes(l) : 0.0;
    });
    // The dx pass (x, dy read, dx written) less the fused kernel's second input (the BN's dy and x for dx).
    kern::ConvPolicy base;
    base.dw_fused_bwd = true;
    k = base;
    k.dw_fused_bn_bwd = true;
    {
        SCOPED_TRACE("dw_fused_bn_bwd against dw_fused_bwd");
        const std::vector<StepModelRow> a = tools::step_model(s, {}, &base), b = tools::step_model(s, {}, &k);
        double expect = 0;
        for (const model::LayerUse& l : layers(s, k)) expect += l.kernels.bn_dx_in_conv ? 2 * out_bytes(l) : 0.0;
        EXPECT_GT(expect, 0);
        EXPECT_NEAR(bytes(a) - bytes(b), expect, 1e-9 * bytes(a));
        EXPECT_NEAR(flops(a), flops(b), 1e-9 * flops(a));
    }
    // The 1x1 dgrad and wgrad each read the BN's dy and x for its dx (one tensor more each, and its
    // per-channel coefficients): 3 tensors less, 2 more.
    k = {};
    k.pw_custom = k.pw_bn_bwd = true;
    expect_saving(
        "pw_bn_bwd", s, k,
        [](const model::LayerUse& l, const model::LayerUse*) {
            return l.kernels.bn_dx_in_conv ? out_bytes(l) - 4.0 * l.shape.cout * 4 : 0.0;
        },
        [](const model::LayerUse& l) {
            return l.kernels.bn_dx_in_conv
                       ? tools::bn_act_backward_dx_cost(l.shape.out().pixels(), l.shape.cout, l.act).simt_flops
                       : 0.0;
        });
    // The fused 1x1 dgrad + wgrad: the wgrad's read of the output's gradient.
    k = {};
    k.pw_custom = k.pw_fused_bwd = true;
    expect_saving("pw_fused_bwd", s, k, [](const model::LayerUse& l, const model::LayerUse*) {
        return l.kernels.pw_fused_bwd ? out_bytes(l) : 0.0;
    });
    // With the BN's dx formed on load: the wgrad's reads of the BN's dy and input, and its forming of dx (done
    // once for both GEMMs).
    base = {};
    base.pw_custom = base.pw_bn_bwd = true;
    k = base;
    k.pw_fused_bwd = true;
    {
        SCOPED_TRACE("pw_fused_bwd against pw_bn_bwd");
        const std::vector<StepModelRow> a = tools::step_model(s, {}, &base), b = tools::step_model(s, {}, &k);
        double expect = 0, less_flops = 0;
        for (const model::LayerUse& l : layers(s, k)) {
            if (!l.kernels.pw_fused_bwd) continue;
            EXPECT_TRUE(l.kernels.bn_dx_in_conv) << l.name;
            expect += 2 * out_bytes(l);
            less_flops += tools::bn_act_backward_dx_cost(l.shape.out().pixels(), l.shape.cout, l.act).simt_flops;
        }
        EXPECT_GT(expect, 0);
        EXPECT_NEAR(bytes(a) - bytes(b), expect, 1e-9 * bytes(a));
        EXPECT_NEAR(flops(a) - flops(b), less_flops, 1e-9 * flops(a));
    }
    // With the producer's reductions in the dgrad's epilogue: the fused pass still takes off the wgrad's read of
    // the output's gradient; with that BN as the conv's input prologue (fuse_dw_pw) the epilogue's read of the
    // producer's x is the rows the pass has just staged for its wgrad (an L2 hit): that read goes too.
    for (const bool dw_pw : {false, true}) {
        SCOPED_TRACE(dw_pw ? "pw_fused_bwd against pw_bn_grad, fuse_dw_pw" : "pw_fused_bwd against pw_bn_grad");
        model::NetShape sh = small();
        sh.fuse_dw_pw = dw_pw;
        base = {};
        base.pw_custom = base.pw_bn_grad = true;
        k = base;
        k.pw_fused_bwd = true;
        const std::vector<StepModelRow> a = tools::step_model(sh, {}, &base), b = tools::step_model(sh, {}, &k);
        const std::vector<model::LayerUse> ls = layers(sh, k);
        double expect = 0;
        int gatherers = 0;
        for (size_t i = 0; i < ls.size(); ++i) {
            if (!ls[i].kernels.pw_fused_bwd) continue;
            expect += out_bytes(ls[i]);
            if (ls[i].kernels.gathers_input_bn_sums) {
                ++gatherers;
                EXPECT_EQ(ls[i].input_bn_prologue, dw_pw) << ls[i].name;
                if (dw_pw) expect += out_bytes(ls[i - 1]);
            }
        }
        EXPECT_GT(gatherers, 10);
        EXPECT_NEAR(bytes(a) - bytes(b), expect, 1e-9 * bytes(a));
        EXPECT_NEAR(flops(a), flops(b), 1e-9 * flops(a));
    }
    // The producer's reduction pass (x, dy read) less the 1x1 dgrad's read of the producer's x.
    k = {};
    k.pw_custom = k.pw_bn_grad = true;
    expect_saving("pw_bn_grad", s, k, [](const model::LayerUse& l, const model::LayerUse* prev) {
        return l.kernels.gathers_input_bn_sums ? out_bytes(*prev) : 0.0;
    });
    // In the fused LiteBlock the fused depthwise backward reads the expand's x anyway: both reads go.
    const model::NetShape f = small(true);
    base = {};
    base.dw_fused_bwd = true;
    k = base;
    k.dw_fused_bn_grad = true;
    {
        SCOPED_TRACE("dw_fused_bn_grad against dw_fused_bwd, fused LiteBlock");
        const std::vector<StepModelRow> a = tools::step_model(f, {}, &base), b = tools::step_model(f, {}, &k);
        const std::vector<model::LayerUse> ls = layers(f, k);
        double expect = 0;
        for (size_t i = 1; i < ls.size(); ++i)
            expect += ls[i].kernels.gathers_input_bn_sums ? 2 * out_bytes(ls[i - 1]) : 0.0;
        EXPECT_GT(expect, 0);
        EXPECT_NEAR(bytes(a) - bytes(b), expect, 1e-9 * bytes(a));
        EXPECT_NEAR(flops(a), flops(b), 1e-9 * flops(a));
    }
}

// A depthwise layer with every switch that touches it, by hand (stage2.branch_1_4.0.dw_conv: (2,32,64,64),
// n = 262144 elements; its consumer, the project conv, gathers its reductions): its BN forward keeps no pass
// over the tensor, its BN backward none either, the fused backward reads dy once, and the BN's dy and x.
TEST(StepModelKernels, HandCountedDepthwiseRowWithEverySwitch) {
    kern::ConvPolicy k;
    k.dw_stats = k.dw_fused_bwd = k.dw_fused_bn_bwd = true;
    k.pw_custom = k.pw_bn_grad = true;
    const std::vector<StepModelRow> plain = tools::step_model(small()), rows = tools::step_model(small(), {}, &k);
    const std::string name = "stage2.branch_1_4.0.dw_conv";
    const StepModelRow* p = nullptr;
    const StepModelRow* r = nullptr;
    for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].name == name) {
            p = &plain[i];
            r = &rows[i];
        }
    ASSERT_NE(r, nullptr);
    const double n = 262144 * 2.0;
    EXPECT_DOUBLE_EQ(r->at(StepPart::NormFwd).bytes, 2 * n + 8 * 64 * 4);  // apply only: x read, y written
    EXPECT_DOUBLE_EQ(r->at(StepPart::NormBwd).bytes, 0);                   // no pass left
    EXPECT_DOUBLE_EQ(r->at(StepPart::ConvDgrad).bytes, p->at(StepPart::ConvDgrad).bytes + n + 4 * 64 * 4);
    EXPECT_DOUBLE_EQ(r->at(StepPart::ConvWgrad).bytes, p->at(StepPart::ConvWgrad).bytes - n);
    EXPECT_DOUBLE_EQ(r->at(StepPart::ConvFwd).bytes, p->at(StepPart::ConvFwd).bytes);
}

// kern::ConvPolicy::head_bn_grad (with fuse_head_bn): exactly the heads' conv2 gather their conv1 BN's reductions, and
// the step loses that BN's statistics pass (its x and dy read; bn_act_backward_reduce_cost), the merged conv1's over
// 256 channels or each head's conv1's over 64, its FLOPs moved into the conv2 backwards; without fuse_head_bn nothing
// changes (there is no prologue to gather in).
TEST(StepModelKernels, HeadBnGradTakesOffTheHeadsConv1StatisticsPass) {
    const kern::ConvPolicy none;
    kern::ConvPolicy k;
    k.head_bn_grad = true;
    for (const bool merged : {false, true}) {
        SCOPED_TRACE(merged ? "merged heads" : "four heads");
        model::NetShape s = small();
        s.merge_heads = merged;
        EXPECT_EQ(bytes(tools::step_model(s, {}, &k)), bytes(tools::step_model(s, {}, &none)));
        for (const model::LayerUse& l : layers(s, k)) EXPECT_FALSE(l.kernels.gathers_input_bn_sums) << l.name;
        s.fuse_head_bn = true;
        const std::vector<model::LayerUse> ls = layers(s, k);
        int gathering = 0, producers = 0;
        double expect = 0;
        for (const model::LayerUse& l : ls) {
            const bool head_conv2 = !l.batchnorm && l.input_bn_prologue;
            EXPECT_EQ(l.kernels.gathers_input_bn_sums, head_conv2) << l.name;
            gathering += l.kernels.gathers_input_bn_sums;
            if (l.batchnorm && l.bn_applied_by_consumer && l.name.rfind("dual_head.", 0) == 0) {
                ++producers;
                EXPECT_EQ(l.act, kern::Act::Relu) << l.name;
                expect += tools::bn_act_backward_reduce_cost(l.shape.out().pixels(), l.shape.cout, l.act).bytes;
            }
        }
        EXPECT_EQ(gathering, 4);
        EXPECT_EQ(producers, merged ? 1 : 4);
        const std::vector<StepModelRow> a = tools::step_model(s, {}, &none), b = tools::step_model(s, {}, &k);
        // By hand: at 128x256 a head's conv1 output is 2 x 32 x 64 rows of 64 channels a head, bf16.
        EXPECT_DOUBLE_EQ(expect, 4 * (2 * (4096.0 * 64 * 2) + 4 * 64 * 4));
        EXPECT_NEAR(bytes(a) - bytes(b), expect, 1e-9 * bytes(a));
        EXPECT_NEAR(flops(a), flops(b), 1e-9 * flops(a));
    }
}

// kern::ConvPolicy::head_bn_dx (with head_bn_grad and fuse_head_bn): exactly the heads' conv2 store no dx, and the
// step loses that tensor's write and read (rows x 64 bf16 a head) for a read of each head's fp32 logits' gradient
// (rows x cout) in the conv1 BN's dx pass, with the dy's dot products (2 * cout FLOPs an element) added there;
// without head_bn_grad nothing changes (the switch needs the sums gathered without the stored dx).
TEST(StepModelKernels, HeadBnDxTakesOffTheHeadsDx) {
    kern::ConvPolicy sums, dx_alone, both;
    sums.head_bn_grad = both.head_bn_grad = true;
    dx_alone.head_bn_dx = both.head_bn_dx = true;
    for (const bool merged : {false, true}) {
        SCOPED_TRACE(merged ? "merged heads" : "four heads");
        model::NetShape s = small();
        s.merge_heads = merged;
        s.fuse_head_bn = true;
        const kern::ConvPolicy none;
        EXPECT_EQ(bytes(tools::step_model(s, {}, &dx_alone)), bytes(tools::step_model(s, {}, &none)));
        for (const model::LayerUse& l : layers(s, dx_alone)) EXPECT_FALSE(l.kernels.input_grad_recomputed) << l.name;
        int marked = 0;
        double logits = 0, flops_added = 0;
        for (const model::LayerUse& l : layers(s, both)) {
            const bool head_conv2 = !l.batchnorm && l.input_bn_prologue;
            EXPECT_EQ(l.kernels.input_grad_recomputed, head_conv2) << l.name;
            if (!head_conv2) continue;
            ++marked;
            logits += static_cast<double>(l.shape.out().numel()) * 4;
            flops_added += 2.0 * static_cast<double>(l.shape.in().numel()) * l.shape.cout;
        }
        EXPECT_EQ(marked, 4);
        const std::vector<StepModelRow> a = tools::step_model(s, {}, &sums), b = tools::step_model(s, {}, &both);
        // By hand: 4096 rows of a head's 64 channels (bf16) written and read, for 4096 x (1 + 1 + 4 + 2) fp32 read.
        EXPECT_DOUBLE_EQ(logits, 4096.0 * 8 * 4);
        EXPECT_NEAR(bytes(a) - bytes(b), 4 * 2 * (4096.0 * 64 * 2) - logits, 1e-9 * bytes(a));
        EXPECT_NEAR(flops(b) - flops(a), flops_added, 1e-9 * flops(a));
        EXPECT_DOUBLE_EQ(flops_added, 2.0 * 4096 * 64 * 8);
    }
}

TEST(StepModelKernels, PlanFlagsTheSwitchesAndItsRooflineCharges) {
    bool help = false;
    const std::vector<std::string> common = {"--roofline", "--batch", "4",          "--height",  "128",
                                             "--width",    "256",     "--up-order", "conv_first"};
    tools::PlanArgs a = tools::parse_plan_args(common, &help);
    EXPECT_FALSE(a.any_kernel_switch());
    const nlohmann::json plain = tools::plan_roofline_json(a);
    std::vector<std::string> all = common;
    for (const char* f : {"--dw-fused-bwd-bn", "--dw-fused-bn-grad", "--dw-stats", "--pw-stats", "--pw-bn-grad",
                          "--pw-bn-bwd", "--pw-fused-bwd", "--head-bn-dx"})
        all.push_back(f);
    a = tools::parse_plan_args(all, &help);
    EXPECT_TRUE(a.kernels.dw_fused_bwd && a.kernels.pw_custom && a.fuse_expand_dw && a.fuse_head_bn &&
                a.kernels.head_bn_grad);  // bench step's implications
    EXPECT_EQ(tools::kernel_switch_flags(a.kernels),
              (std::vector<std::string>{"--dw-fused-bwd", "--dw-fused-bwd-bn", "--dw-fused-bn-grad", "--dw-stats",
                                        "--pw-stats", "--pw-bn-grad", "--pw-bn-bwd", "--pw-fused-bwd", "--head-bn-grad",
                                        "--head-bn-dx"}));
    const nlohmann::json r = tools::plan_roofline_json(a);
    EXPECT_EQ(r["kernel_switches"].size(), 10u);
    // Every row of the model per sample: their bytes add up to the step's, each row's passes to the row.
    double row_sum = 0;
    for (const nlohmann::json& row : r["rows_per_sample"]) {
        double pass_sum = 0;
        for (const auto& [name, pass] : row["passes"].items()) pass_sum += pass["bytes"].get<double>();
        EXPECT_NEAR(pass_sum, row["bytes"].get<double>(), 1e-9 * row["bytes"].get<double>() + 1e-9)
            << row["name"].get<std::string>();
        row_sum += row["bytes"].get<double>();
    }
    EXPECT_GT(r["rows_per_sample"].size(), 100u);
    EXPECT_NEAR(row_sum, r["per_sample"]["bytes"].get<double>(), 1e-9 * row_sum);
    EXPECT_LT(r["per_sample"]["bytes"].get<double>(), 0.9 * plain["per_sample"]["bytes"].get<double>());
    EXPECT_LT(r["floor_ms"].get<double>(), plain["floor_ms"].get<double>());
    const std::string t = tools::plan_roofline_text(r);
    EXPECT_NE(t.find("with the kernel switches --dw-fused-bwd --dw-fused-bwd-bn"), std::string::npos) << t;
    const nlohmann::json doc = tools::plan_json(a);
    EXPECT_EQ(doc["shape"]["kernel_switches"].size(), 10u);
    EXPECT_NE(tools::plan_text(doc).find("kernel switches: --dw-fused-bwd"), std::string::npos);
    SF_EXPECT_ERROR(tools::parse_plan_args({"--backend", "cpu", "--dw-stats"}, &help), "--backend cpu",
                    "kernel switches");
}

}  // namespace
