// The fusion up paths' two orders (model/up_order.h): UpsampleFirst is the original's (MODEL_SPEC
// §1.2: Up(x) -> 1x1 ConvBN), ConvFirst runs the 1x1 conv at the source resolution and upsamples its
// output inside the ConvBN. The two are the same function in exact arithmetic, so on the fp32 CPU
// reference one micro-step and one AdamW step of each, from the same weights on the same batch, must
// agree to fp32 rounding: loss terms, logits, every parameter gradient, the BN running statistics and
// the updated weights. An order swap that were not exact (a bias, a corner rule, a wrong factor)
// would differ by O(1). Also: the plans (same parameters, fewer activation bytes and MACs, the up
// layers' conv shapes at the source resolution), the liveness plan's invariants in the new order,
// and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "data/fixed_batch.h"
#include "model/init.h"
#include "model/net.h"
#include "model/train_step.h"
#include "tests/support/compare.h"

namespace {

model::NetShape small_shape(model::UpOrder order) {
    model::NetShape s{2, 2, 64, 128};  // batch, channels, height, width
    s.up_order = order;
    return s;
}

struct Result {
    model::LossTerms loss;
    std::vector<float> logits;  // gap, slider, offset, angle concatenated
    std::vector<float> grad;    // the flat gradient after the micro-step
    std::vector<float> master;  // after the AdamW step
    std::vector<float> buffers;
};

// One micro-step and one AdamW step. poison: the activation-gradient region filled with NaN first.
Result run(model::UpOrder order, model::GradLayout layout = model::GradLayout::Shared, bool poison = false) {
    const model::NetShape s = small_shape(order);
    model::SiderNet net(s, rt::MemKind::Host, layout);
    const model::Planner& p = net.plan();
    model::init_parameters(net.table(), 7, p.master(), p.buffers(), p.counters());
    const data::FixedSamples d = data::make_fixed_samples(11, s.batch, s.channels, s.height, s.width);
    std::copy(d.input.begin(), d.input.end(), net.input());
    if (poison)
        std::fill_n(static_cast<float*>(p.act_grad_base()), p.act_grad_bytes() / sizeof(float),
                    std::numeric_limits<float>::quiet_NaN());
    model::TrainStep step(net, model::LossConfig{}, model::OptimConfig{});
    Result r;
    r.loss = step.micro_step(rt::Exec::cpu(), d.labels.data(), 1.0);
    const model::HeadLogits<float> l = net.logits();
    const size_t cells = static_cast<size_t>(l.n) * l.h * l.w;
    for (const auto& [ptr, c] : {std::pair{l.gap, 1}, {l.slider, 1}, {l.offset, 4}, {l.angle, 2}})
        r.logits.insert(r.logits.end(), ptr, ptr + cells * c);
    const size_t n = net.table().flat_size;
    r.grad.assign(p.grad(), p.grad() + n);
    step.optimizer_step(rt::Exec::cpu(), 1e-3);
    r.master.assign(p.master(), p.master() + n);
    r.buffers.assign(p.buffers(), p.buffers() + net.table().buffer_floats);
    return r;
}

std::vector<double> slice(const std::vector<float>& v, const model::ParamInfo& p) {
    return sftest::to_double(v.data() + p.offset, p.numel);
}

bool is_up_path(const std::string& name) { return name.find(".up_") != std::string::npos; }

TEST(UpOrder, ConvFirstIsTheSameFunctionToFp32Rounding) {
    const Result a = run(model::UpOrder::UpsampleFirst);
    const Result b = run(model::UpOrder::ConvFirst);
    ASSERT_TRUE(std::isfinite(a.loss.total));
    EXPECT_NEAR(b.loss.total, a.loss.total, 1e-6 * std::fabs(a.loss.total));
    for (const auto& [x, y] : {std::pair{a.loss.focal_gap, b.loss.focal_gap},
                               {a.loss.focal_slider, b.loss.focal_slider},
                               {a.loss.offset, b.loss.offset},
                               {a.loss.hard_negative, b.loss.hard_negative},
                               {a.loss.angle, b.loss.angle},
                               {a.loss.padding_bce, b.loss.padding_bce},
                               {a.loss.y_axis, b.loss.y_axis}})
        EXPECT_NEAR(y, x, 1e-6 * std::max(1.0, std::fabs(x)));
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(b.logits), sftest::to_double(a.logits), 1e-5, "logits"));

    const model::SiderNet probe(small_shape(model::UpOrder::UpsampleFirst), model::DryRun{});
    double total = 0;
    for (float g : a.grad) total += static_cast<double>(g) * g;
    total = std::sqrt(total);
    ASSERT_GT(total, 0.0);
    double worst = 0, worst_up = 0;
    std::string worst_name;
    size_t up_params = 0;
    for (const model::ParamInfo& p : probe.table().params) {
        const std::vector<double> ga = slice(a.grad, p), gb = slice(b.grad, p);
        double norm = 0, diff = 0;
        for (size_t i = 0; i < ga.size(); ++i) norm += ga[i] * ga[i], diff += (gb[i] - ga[i]) * (gb[i] - ga[i]);
        norm = std::sqrt(norm);
        diff = std::sqrt(diff);
        // The heads' conv1 biases feed a train-mode BatchNorm: their gradient is zero by construction
        // and holds rounding noise only, so the bound has a term scaled to the whole gradient's norm.
        EXPECT_LE(diff, 1e-4 * norm + 1e-6 * total) << p.name << ": |g| " << norm << ", whole gradient " << total;
        const double e = norm > 1e-6 * total ? diff / norm : 0;
        if (is_up_path(p.name)) {
            ++up_params;
            worst_up = std::max(worst_up, e);
        }
        if (e > worst) worst = e, worst_name = p.name;
    }
    EXPECT_GE(up_params, 3u * 10u);  // weight, gamma, beta of every up path (1 + 3 + 6 paths)
    std::printf(
        "[up order] fp32 CPU, batch 2 at 64x128: loss %.9g vs %.9g; gradients: worst relative L2 %.2e (%s), "
        "up paths %.2e\n",
        a.loss.total, b.loss.total, worst, worst_name.c_str(), worst_up);
    // AdamW's first update is lr * g / (|g| + eps) per element: a sign for every gradient element
    // above eps, also for the zero-by-construction ones, whose rounding noise then moves whole lr
    // steps; the whole vector still agrees to about 1e-6.
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(b.master), sftest::to_double(a.master), 1e-5, "weights"));
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(b.buffers), sftest::to_double(a.buffers), 1e-5, "BN buffers"));
}

// The liveness plan's contract holds in the new order: the shared layout is bitwise the reference
// layout, also over a NaN-filled gradient region (the upsample's backward writes conv_lo.g first).
TEST(UpOrder, ConvFirstSharedGradientLayoutIsBitwiseTheReferenceOverNaN) {
    const Result ref = run(model::UpOrder::ConvFirst, model::GradLayout::Separate);
    const Result shared = run(model::UpOrder::ConvFirst, model::GradLayout::Shared, true);
    ASSERT_TRUE(std::all_of(shared.grad.begin(), shared.grad.end(), [](float g) { return std::isfinite(g); }));
    EXPECT_EQ(0, std::memcmp(shared.grad.data(), ref.grad.data(), ref.grad.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(shared.master.data(), ref.master.data(), ref.master.size() * sizeof(float)));
    EXPECT_EQ(shared.loss.total, ref.loss.total);
}

TEST(UpOrder, ConvFirstPlansFewerBytesAndMacsWithTheSameParameters) {
    model::NetShape s;  // 256x512
    s.batch = 8;
    const model::SiderNetCuda up(s, model::DryRun{});
    s.up_order = model::UpOrder::ConvFirst;
    const model::SiderNetCuda cf(s, model::DryRun{});
    // Same parameters, names and offsets: checkpoints move freely between the orders.
    ASSERT_EQ(up.table().params.size(), cf.table().params.size());
    for (size_t i = 0; i < up.table().params.size(); ++i) {
        EXPECT_EQ(up.table().params[i].name, cf.table().params[i].name);
        EXPECT_EQ(up.table().params[i].offset, cf.table().params[i].offset);
    }
    EXPECT_EQ(up.table().flat_size, cf.table().flat_size);
    // The layers: the same list; an up path's conv runs at its source resolution in ConvFirst.
    const std::vector<model::LayerUse>& lu = up.plan().layers();
    const std::vector<model::LayerUse>& lc = cf.plan().layers();
    ASSERT_EQ(lu.size(), lc.size());
    double macs_up = 0, macs_cf = 0;
    int up_layers = 0;
    for (size_t i = 0; i < lu.size(); ++i) {
        ASSERT_EQ(lu[i].name, lc[i].name);
        const double mu = static_cast<double>(lu[i].shape.out().numel()) * lu[i].shape.cin / lu[i].shape.groups *
                          lu[i].shape.k * lu[i].shape.k;
        const double mc = static_cast<double>(lc[i].shape.out().numel()) * lc[i].shape.cin / lc[i].shape.groups *
                          lc[i].shape.k * lc[i].shape.k;
        macs_up += mu;
        macs_cf += mc;
        EXPECT_EQ(lu[i].upsample, 1);
        if (!is_up_path(lu[i].name)) {
            EXPECT_EQ(lc[i].upsample, 1) << lc[i].name;
            EXPECT_TRUE(model::same_conv_shape(lu[i].shape, lc[i].shape)) << lc[i].name;
            continue;
        }
        ++up_layers;
        const int f = lc[i].upsample;
        ASSERT_TRUE(f == 2 || f == 4 || f == 8) << lc[i].name << ": factor " << f;
        EXPECT_EQ(lc[i].shape.h * f, lu[i].shape.h) << lc[i].name;
        EXPECT_EQ(lc[i].shape.w * f, lu[i].shape.w) << lc[i].name;
        EXPECT_EQ(lc[i].shape.cin, lu[i].shape.cin);
        EXPECT_EQ(lc[i].shape.cout, lu[i].shape.cout);
        EXPECT_EQ(mu, mc * f * f) << lc[i].name;
    }
    EXPECT_EQ(up_layers, 10);  // stage 2: 1, stage 3: 3, stage 4: 6
    const model::MemoryPlan mu = up.plan().memory(), mc = cf.plan().memory();
    std::printf(
        "[up order] bf16 batch 8 at 256x512: activations %.1f -> %.1f MB, forward %.3f -> %.3f GMAC per sample\n",
        mu.activations / 1e6, mc.activations / 1e6, macs_up / 8e9, macs_cf / 8e9);
    EXPECT_LT(mc.activations, mu.activations);
    EXPECT_LT(macs_cf, macs_up);
}

TEST(UpOrder, NamesParseAndAnUpsampledConvMustBeAPlain1x1) {
    model::UpOrder o = model::UpOrder::UpsampleFirst;
    ASSERT_TRUE(model::parse_up_order("conv_first", &o));
    EXPECT_EQ(o, model::UpOrder::ConvFirst);
    EXPECT_STREQ(model::up_order_name(o), "conv_first");
    ASSERT_TRUE(model::parse_up_order("upsample_first", &o));
    EXPECT_EQ(o, model::UpOrder::UpsampleFirst);
    EXPECT_STREQ(model::up_order_name(o), "upsample_first");
    EXPECT_FALSE(model::parse_up_order("ConvFirst", &o));
    EXPECT_FALSE(model::parse_up_order("", &o));

    const kern::Shape4 in{2, 8, 16, 64};
    auto declare = [&](int k, bool bias, int factor) {
        model::Planner p(rt::MemKind::Host, true);  // a dry run: declare() sizes, binds nothing
        model::ConvBN<float> cb;
        cb.upsample = factor;
        cb.declare(p, "probe", in, 32, k, 1, 1, kern::Act::None, bias);
        return cb.out.shape;
    };
    const kern::Shape4 out = declare(1, false, 4);
    EXPECT_EQ(out.h, 32);
    EXPECT_EQ(out.w, 64);
    EXPECT_EQ(out.c, 32);
    SF_EXPECT_ERROR(declare(3, false, 2), "1x1 conv without bias");
    SF_EXPECT_ERROR(declare(1, true, 2), "1x1 conv without bias");
    SF_EXPECT_ERROR(declare(1, false, 0), "upsample factor 0");
}

}  // namespace
