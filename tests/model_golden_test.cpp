// The whole CPU training step against the PyTorch reference (tools/reference, float64):
// initial weights (bit for bit), forward activations and logits, every loss term, every
// parameter gradient, and the parameters and BN statistics after 3 AdamW steps.
// Tolerance: relative L2 <= 1e-4 per tensor (DESIGN §2), for both loss variants, for everything
// of step 0 (forward, loss, gradients) and for the first AdamW update (on our step-0 gradients). After 3 steps the
// recipe's trajectory is ill-conditioned (saturated heads, AdamW normalising tiny gradients): the golden carries, per
// quantity, the deviation of an fp64 run whose gradients get additive noise of 3e-5 x their RMS per tensor at every
// step (sens.*), the error fp32 arithmetic leaves in them; there the bound is max(1e-4, 3 x that deviation). The whole
// parameter vector after 3 steps is held to 1e-4. docs/MODEL.md "Goldens" explains and quantifies the conditioning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>

#include "model/init.h"
#include "model/net.h"
#include "model/train_step.h"
#include "runtime/safetensors.h"
#include "tests/support/compare.h"

namespace {

constexpr double kTol = 1e-4;
constexpr int kSteps = 3;

struct Golden {
    rt::SafeTensors st;
    std::vector<double> get(const std::string& k) const { return st.get(k).to_double(); }
    double scalar(const std::string& k) const { return st.get(k).to_double().at(0); }
};

// Sample indices of docs/MODEL.md: S = min(64, numel), idx_k = floor(k*numel/S).
std::vector<size_t> sample_indices(size_t numel) {
    const size_t s = std::min<size_t>(64, numel);
    std::vector<size_t> idx(s);
    for (size_t k = 0; k < s; ++k) idx[k] = k * numel / s;
    return idx;
}

std::vector<double> nhwc_from_nchw(const std::vector<double>& t, int n, int c, int h, int w) {
    std::vector<double> out(t.size());
    for (int i = 0; i < n; ++i)
        for (int ch = 0; ch < c; ++ch)
            for (int y = 0; y < h; ++y)
                for (int x = 0; x < w; ++x)
                    out[((static_cast<size_t>(i) * h + y) * w + x) * c + ch] =
                        t[((static_cast<size_t>(i) * c + ch) * h + y) * w + x];
    return out;
}

std::vector<data::Label> golden_labels(const Golden& g, int n) {
    const auto gap = g.get("labels.gap"), slider = g.get("labels.slider"), angle = g.get("labels.angle"),
               fakes = g.get("labels.fakes"), nf = g.get("labels.num_fakes");
    std::vector<data::Label> labels(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        data::Label& l = labels[static_cast<size_t>(i)];
        l.gap_x = static_cast<float>(gap[2 * i]);
        l.gap_y = static_cast<float>(gap[2 * i + 1]);
        l.slider_x = static_cast<float>(slider[2 * i]);
        l.slider_y = static_cast<float>(slider[2 * i + 1]);
        l.angle_rad = static_cast<float>(angle[i]);
        l.num_fakes = static_cast<int32_t>(nf[i]);
        for (int k = 0; k < data::kMaxFakeGaps; ++k) {
            l.fake_x[k] = static_cast<float>(fakes[(i * data::kMaxFakeGaps + k) * 2]);
            l.fake_y[k] = static_cast<float>(fakes[(i * data::kMaxFakeGaps + k) * 2 + 1]);
        }
    }
    return labels;
}

// Largest error seen per category, printed at the end of each test (the measured figures).
struct Worst {
    std::map<std::string, std::pair<double, std::string>> by_kind;
    void note(const std::string& kind, double err, const std::string& what) {
        auto& w = by_kind[kind];
        if (err >= w.first) w = {err, what};
    }
    void print(const std::string& title) const {
        std::cout << "[golden " << title << "] max relative L2 error per kind:\n";
        for (const auto& kv : by_kind)
            std::cout << "  " << kv.first << ": " << kv.second.first << " (" << kv.second.second << ")\n";
    }
};

class GoldenStep : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenStep, MatchesPyTorchReference) {
    const std::string variant = GetParam();
    Golden g{rt::SafeTensors::load(std::string(SF_TEST_DATA_DIR) + "/golden_" + variant + ".safetensors")};
    const rt::TensorData& in = g.st.get("input");
    ASSERT_EQ(in.shape.size(), 4u);
    model::NetShape shape;
    shape.batch = static_cast<int>(in.shape[0]);
    shape.channels = static_cast<int>(in.shape[1]);
    shape.height = static_cast<int>(in.shape[2]);
    shape.width = static_cast<int>(in.shape[3]);
    model::SiderNet net(shape, rt::MemKind::Host);
    const model::Planner& p = net.plan();
    const model::ParamTable& table = net.table();
    const uint64_t seed = std::stoull(g.st.metadata().at("init_seed"));
    model::init_parameters(table, seed, p.master(), p.buffers(), p.counters());
    Worst worst;

    // 1. Initial weights: bit-identical samples, sums to double precision.
    std::vector<float> init_master(p.master(), p.master() + table.flat_size);
    for (const auto& info : table.params) {
        const auto want = g.get("init.sample/" + info.name);
        const auto idx = sample_indices(info.numel);
        ASSERT_EQ(want.size(), idx.size()) << info.name;
        for (size_t k = 0; k < idx.size(); ++k)
            ASSERT_EQ(p.master()[info.offset + model::storage_index(info, idx[k])], static_cast<float>(want[k]))
                << "init of " << info.name << " element " << idx[k];
        double s = 0, ss = 0;
        for (size_t i = 0; i < info.numel; ++i) {
            const double v = p.master()[info.offset + i];
            s += v;
            ss += v * v;
        }
        EXPECT_NEAR(s, g.scalar("init.sum/" + info.name), 1e-9 * std::max(1.0, std::sqrt(ss * info.numel)))
            << info.name;
        EXPECT_NEAR(ss, g.scalar("init.sumsq/" + info.name), 1e-9 * std::max(1.0, ss)) << info.name;
    }

    // 2. Forward, loss and gradients of step 0.
    const auto input = nhwc_from_nchw(in.to_double(), shape.batch, shape.channels, shape.height, shape.width);
    std::copy(input.begin(), input.end(), net.input());
    const auto labels = golden_labels(g, shape.batch);
    model::LossConfig lc;
    lc.variant = model::parse_loss_variant(variant);
    model::OptimConfig oc;  // AdamW(3e-4, (0.9, 0.999), 1e-8, 0.05), clip 1.0: the golden's settings
    model::TrainStep step(net, lc, oc);
    const model::LossTerms t = step.micro_step(rt::Exec::cpu(), labels.data(), 1.0);

    const int gh = net.grid_h(), gw = net.grid_w();
    const model::HeadLogits<float> lg = net.logits();
    const std::pair<const char*, std::pair<const float*, int>> heads[4] = {{"heatmap_gap", {lg.gap, 1}},
                                                                           {"heatmap_piece", {lg.slider, 1}},
                                                                           {"offset", {lg.offset, 4}},
                                                                           {"angle", {lg.angle, 2}}};
    for (const auto& h : heads) {
        const auto want = nhwc_from_nchw(g.get(std::string("logits.") + h.first), shape.batch, h.second.second, gh, gw);
        const auto got = sftest::to_double(h.second.first, want.size());
        const double e = sftest::rel_l2(got, want);
        worst.note("logits", e, h.first);
        EXPECT_TRUE(sftest::close_rel_l2(got, want, kTol, std::string("logits.") + h.first));
    }
    for (const char* name : {"stem", "stage2.0", "stage2.1", "stage3.2", "stage4.3", "fpn"}) {
        const std::string key = std::string("act.") + name;
        if (!g.st.has(key)) continue;
        const model::Act& a = net.activation(name);
        const auto want = nhwc_from_nchw(g.get(key), a.shape.n, a.shape.c, a.shape.h, a.shape.w);
        const double e = sftest::rel_l2(sftest::to_double(a.v, a.numel()), want);
        worst.note("activations", e, name);
        EXPECT_LE(e, kTol) << key;
    }
    const std::pair<const char*, double> terms[] = {{"focal_gap", t.focal_gap}, {"focal_slider", t.focal_slider},
                                                    {"offset", t.offset},       {"hard_negative", t.hard_negative},
                                                    {"angle", t.angle},         {"padding_bce", t.padding_bce},
                                                    {"y_axis", t.y_axis},       {"total", t.total}};
    for (const auto& term : terms) {
        const double want = g.scalar(std::string("loss.") + term.first);
        const double e = std::fabs(term.second - want) / std::max(std::fabs(want), 1e-12);
        worst.note("loss terms", e, term.first);
        EXPECT_LE(e, kTol) << "loss." << term.first << ": got " << term.second << " want " << want;
    }

    // Gradients. Head conv1 biases sit before a train-mode BatchNorm, so their gradient is zero
    // by construction; there the check is that ours is negligible against the largest gradient.
    std::map<std::string, std::vector<double>> our_grad_samples;
    double max_norm = 0;
    for (const auto& info : table.params) max_norm = std::max(max_norm, g.scalar("grad.norm/" + info.name));
    for (const auto& info : table.params) {
        const double want_norm = g.scalar("grad.norm/" + info.name);
        double got_sq = 0;
        for (size_t i = 0; i < info.numel; ++i) got_sq += std::pow(static_cast<double>(p.grad()[info.offset + i]), 2);
        const double got_norm = std::sqrt(got_sq);
        if (want_norm <= 1e-9 * max_norm) {
            EXPECT_LE(got_norm, 1e-5 * max_norm) << "zero-by-construction gradient of " << info.name;
            continue;
        }
        const auto want = g.get("grad.sample/" + info.name);
        const auto idx = sample_indices(info.numel);
        std::vector<double> got(idx.size());
        for (size_t k = 0; k < idx.size(); ++k) got[k] = p.grad()[info.offset + model::storage_index(info, idx[k])];
        our_grad_samples[info.name] = got;
        const double e = sftest::rel_l2(got, want);
        const double en = std::fabs(got_norm - want_norm) / want_norm;
        worst.note("gradient samples", e, info.name);
        worst.note("gradient norms", en, info.name);
        EXPECT_LE(e, kTol) << "grad of " << info.name;
        EXPECT_LE(en, kTol) << "grad norm of " << info.name;
    }

    // 3. The first AdamW update is PyTorch's, applied to our step-0 gradients (they match the
    //    golden's above): p1 = p0 (1 - lr wd) - lr g_s / (|g_s| + eps), g_s = g * clip, evaluated
    //    here in double and rounded to the fp32 master weight. (The update of an element whose
    //    g_s is near eps inherits that element's gradient error, so the golden's gradients would
    //    test the gradient twice, not the optimizer.)
    const model::StepStats s0 = step.optimizer_step(rt::Exec::cpu(), oc.adamw.lr);
    ASSERT_FALSE(s0.skipped);
    for (const auto& info : table.params) {
        if (!our_grad_samples.count(info.name)) continue;
        const auto& gs = our_grad_samples[info.name];
        const auto idx = sample_indices(info.numel);
        std::vector<double> got(idx.size()), want(idx.size());
        for (size_t k = 0; k < idx.size(); ++k) {
            const size_t j = info.offset + model::storage_index(info, idx[k]);
            const double gk = gs[k] * s0.clip_scale, p0 = init_master[j];
            const double p1 =
                p0 * (1 - oc.adamw.lr * oc.adamw.weight_decay) - oc.adamw.lr * gk / (std::fabs(gk) + oc.adamw.eps);
            want[k] = static_cast<double>(static_cast<float>(p1)) - p0;
            got[k] = static_cast<double>(p.master()[j]) - p0;
        }
        const double e = sftest::rel_l2(got, want);
        worst.note("first AdamW update", e, info.name);
        EXPECT_LE(e, kTol) << "first update of " << info.name;
    }
    EXPECT_NEAR(s0.clip_scale, 1.0 / (g.scalar("step0.grad_norm") + 1e-6), kTol * s0.clip_scale);

    // 4. Two more steps on the same batch; the trajectory against the golden, within its conditioning.
    auto bound = [&](const std::string& sens_key) { return std::max(kTol, 3.0 * g.scalar(sens_key)); };
    for (int k = 0; k < kSteps; ++k) {
        const model::StepStats s = k == 0 ? s0 : step.step(rt::Exec::cpu(), labels.data(), oc.adamw.lr);
        ASSERT_FALSE(s.skipped);
        const std::string key = "step" + std::to_string(k);
        const double el = std::fabs(s.mean_loss - g.scalar(key + ".loss")) / std::fabs(g.scalar(key + ".loss"));
        const double en = std::fabs(s.grad_norm - g.scalar(key + ".grad_norm")) / g.scalar(key + ".grad_norm");
        worst.note("step losses", el, key);
        worst.note("step grad norms", en, key);
        EXPECT_LE(el, bound("sens." + key + ".loss")) << "loss at step " << k;
        EXPECT_LE(en, bound("sens." + key + ".grad_norm")) << "grad norm at step " << k;
    }
    std::vector<double> all_got, all_want;
    for (const auto& info : table.params) {
        const auto want = g.get("final.sample/" + info.name);
        const auto idx = sample_indices(info.numel);
        std::vector<double> got(idx.size());
        for (size_t k = 0; k < idx.size(); ++k) got[k] = p.master()[info.offset + model::storage_index(info, idx[k])];
        if (g.scalar("grad.norm/" + info.name) <= 1e-9 * max_norm) {
            // Zero gradient by construction: fp32 rounding noise is all AdamW sees, and it moves
            // such a parameter by at most lr per step (the fp64 golden stays at 0).
            for (double v : got) EXPECT_LE(std::fabs(v), kSteps * oc.adamw.lr * 1.001) << info.name;
            continue;
        }
        all_got.insert(all_got.end(), got.begin(), got.end());
        all_want.insert(all_want.end(), want.begin(), want.end());
        const double e = sftest::rel_l2(got, want);
        worst.note("params after 3 steps", e, info.name);
        worst.note("params after 3 steps / bound", e / bound("sens.final/" + info.name), info.name);
        EXPECT_LE(e, bound("sens.final/" + info.name)) << "parameter " << info.name << " after " << kSteps << " steps";
    }
    const double e_all = sftest::rel_l2(all_got, all_want);
    worst.note("all params after 3 steps (one vector)", e_all, "all");
    EXPECT_LE(e_all, kTol) << "the whole parameter vector after " << kSteps << " steps";
    for (const auto& b : table.buffers) {
        if (b.counter) {
            EXPECT_EQ(p.counters()[b.offset], kSteps) << b.name;
            continue;
        }
        const std::string kind = b.name.find("running_mean") != std::string::npos ? "running_mean" : "running_var";
        const std::string bn = b.name.substr(0, b.name.rfind('.'));
        const auto want = g.get("final." + kind + "/" + bn);
        const double e = sftest::rel_l2(sftest::to_double(p.buffers() + b.offset, b.numel), want);
        worst.note("BN running stats", e, b.name);
        worst.note("BN running stats / bound", e / bound("sens." + kind + "/" + bn), b.name);
        EXPECT_LE(e, bound("sens." + kind + "/" + bn)) << b.name;
    }
    worst.print(variant);
}

INSTANTIATE_TEST_SUITE_P(BothVariants, GoldenStep, ::testing::Values("sider", "corrected"));

}  // namespace
