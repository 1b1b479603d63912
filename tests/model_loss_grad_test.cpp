// The CPU reference loss: d total / d logits (and each term's gradient alone) against central
// finite differences in fp64, both variants, on a batch that exercises every term.
#include "tests/model_loss_test_util.h"

namespace {

using namespace loss_test;

// ---- gradients against central finite differences ----

// Three samples on a 5x9 grid: padding (fractional M) in samples 1 and 2, 2 / 1 / 0 fake gaps,
// rotation in samples 0 and 2, sample 2's slider peak in the padding; so every corrected term
// averages over fewer samples than the batch. Sample 0's gap is made confident and its fakes' cells cold so that
// some hard-negative pairs sit on the flat side of the hinge.
Batch random_batch() {
    Batch b(3, 5, 9);
    const auto x = sftest::random_uniform(8 * b.cells(), 1234, -2.5, 2.5);
    b.set_params(x);
    const int H = 20, W = 36;
    std::vector<float> input(3 * H * W);
    for (int bi = 0; bi < 3; ++bi)
        for (int y = 0; y < H; ++y)
            for (int xx = 0; xx < W; ++xx) {
                const bool valid = bi == 0 || (bi == 1 && xx >= 6 && y < 18) || (bi == 2 && xx < 30 && y >= 3);
                input[(bi * H + y) * W + xx] = valid ? 1.0f : 0.0f;
            }
    model::mask_grid_avg_ref(3, H, W, 1, 0, kS, input.data(), b.m.data());
    b.labels[0] = label(13.3f, 9.7f, 25.1f, 6.2f, 0.021f, {{30.5f, 14.2f}, {5.7f, 15.9f}});
    b.labels[1] = label(21.9f, 13.1f, 9.4f, 5.5f, 0.0f, {{17.2f, 3.3f}});
    b.labels[2] = label(6.6f, 12.4f, 33.3f, 16.7f, -0.03f, {});  // slider peak cell fully padded
    // s+ of sample 0 at (3.325, 2.425); its fakes at (1.75, 0.75), (0.25, 0.75) (sider) and
    // (7.625, 3.55), (1.425, 3.975) (corrected).
    for (auto [i, j] : Cells{{2, 3}, {2, 4}, {3, 3}, {3, 4}}) b.zg[b.at(0, i, j)] = 2.9;
    const Cells sider_fakes = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}};
    const Cells corrected_fakes = {{3, 7}, {3, 8}, {4, 7}, {4, 8}, {3, 1}, {3, 2}, {4, 1}, {4, 2}};
    for (const Cells& cells : {sider_fakes, corrected_fakes})
        for (auto [i, j] : cells) b.zg[b.at(0, i, j)] = -2.9;
    return b;
}

// The hinge arguments 0.5 - s+ + s- of every pair the variant scores, from the independent sampler.
std::vector<double> hinge_args(const Batch& b, LossVariant v) {
    std::vector<double> a;
    int kmax = 0;
    for (const auto& l : b.labels) kmax = std::max(kmax, int(l.num_fakes));
    for (int bi = 0; bi < b.n; ++bi) {
        const data::Label& l = b.labels[bi];
        const double sp = tent_sample(b, bi, l.gap_x / kS, l.gap_y / kS);
        const int pairs = v == LossVariant::Sider ? kmax : l.num_fakes;
        for (int k = 0; k < pairs; ++k) {
            const int f = std::min(k, l.num_fakes - 1);
            double fx = 0, fy = 0;
            if (f >= 0 && v == LossVariant::Sider) fx = int(l.fake_x[f] / kS) / 4.0, fy = int(l.fake_y[f] / kS) / 4.0;
            if (f >= 0 && v == LossVariant::Corrected) fx = l.fake_x[f] / kS, fy = l.fake_y[f] / kS;
            a.push_back(0.5 - sp + tent_sample(b, bi, fx, fy));
        }
    }
    return a;
}

void check_gradient(LossVariant v, const char* term) {
    LossConfig c = config(v);
    const std::string t(term);
    if (t != "all") {
        c.w_heatmap = t == "heatmap" ? 1.0 : 0.0;
        c.w_offset = t == "offset" ? 1.0 : 0.0;
        c.w_hard_negative = t == "hard_negative" ? 1.5 : 0.0;
        c.w_angle = t == "angle" ? 0.5 : 0.0;
        c.w_padding_bce = t == "padding_bce" ? 0.3 : 0.0;
        c.w_y_axis = t == "y_axis" ? 0.8 : 0.0;
    }
    Batch b = random_batch();
    std::vector<double> grad;
    const LossTerms terms = run(c, b, &grad);
    // Every term is active and away from its guards; the hinge has pairs on both sides, none near 0.
    ASSERT_TRUE(terms.angle_used);
    ASSERT_GT(terms.hard_negative, 0.0);
    ASSERT_GT(terms.padding_bce, 0.0);
    ASSERT_EQ(terms.dropped_terms, 0);
    int active = 0, inactive = 0;
    for (double a : hinge_args(b, v)) {
        ASSERT_GT(std::fabs(a), 1e-3);
        (a > 0 ? active : inactive)++;
    }
    ASSERT_GT(active, 0);
    ASSERT_GT(inactive, 0);
    const auto f = [&](const std::vector<double>& x) {
        Batch p = b;
        p.set_params(x);
        return run(c, p).total;
    };
    const std::vector<double> num = sftest::numeric_gradient(f, b.params(), 1e-5);
    EXPECT_TRUE(sftest::close_elementwise(grad, num, 2e-8, 1e-5, std::string(model::loss_variant_name(v)) + " " + t));
    double norm = 0;
    for (double g : grad) norm += g * g;
    EXPECT_GT(norm, 1e-6) << t;  // the probe is not trivially zero
}

const char* const kTerms[] = {"all", "heatmap", "offset", "hard_negative", "angle", "padding_bce", "y_axis"};

TEST(ModelLoss, GradientMatchesFiniteDifferencesSider) {
    for (const char* t : kTerms) check_gradient(LossVariant::Sider, t);
}

TEST(ModelLoss, GradientMatchesFiniteDifferencesCorrected) {
    for (const char* t : kTerms) check_gradient(LossVariant::Corrected, t);
}

TEST(ModelLoss, FloatInstantiationMatchesDouble) {
    const Batch b = random_batch();
    const LossConfig c = config(LossVariant::Sider);
    std::vector<double> gd;
    const LossTerms td = run(c, b, &gd);
    const std::vector<double> xd = b.params();
    const std::vector<float> x(xd.begin(), xd.end()), m(b.m.begin(), b.m.end());
    const size_t n = b.cells();
    std::vector<float> gf(8 * n);
    const model::HeadLogits<float> z{b.n, b.h, b.w, x.data(), x.data() + n, x.data() + 2 * n, x.data() + 6 * n};
    const model::HeadGrads<float> g{gf.data(), gf.data() + n, gf.data() + 2 * n, gf.data() + 6 * n};
    const LossTerms tf = model::loss_forward_backward_ref(c, z, m.data(), b.labels.data(), &g);
    EXPECT_NEAR(tf.total, td.total, 1e-5 * td.total);
    EXPECT_TRUE(sftest::close_rel_l2(sftest::to_double(gf), gd, 1e-5, "float grads"));
}

}  // namespace
