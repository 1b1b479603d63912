// The CPU reference loss (model/loss.h, docs/LOSS.md): each term against a value computed here
// independently on tiny grids, the documented differences between `sider` and `corrected`, the
// guards, the total's NaN rule, and d total / d logits against central finite differences in fp64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/loss.h"
#include "runtime/error.h"
#include "tests/model_loss_test_util.h"
#include "tests/support/compare.h"

namespace {

using namespace loss_test;

// ---- independent formulas (written from MODEL_SPEC §2, not from the implementation) ----
double logit(double p) { return std::log(p / (1 - p)); }
double gauss(int i, int j, int v, int u) {  // sigma 1.5, window radius 4
    if (std::abs(i - v) > 4 || std::abs(j - u) > 4) return 0;
    return std::exp(-((i - v) * (i - v) + (j - u) * (j - u)) / 4.5);
}
// Sum over the cells of sample b of M * focal(P, Y) and of M * [Y >= 0.8], object at pixel (x, y).
std::pair<double, double> focal_sums(const Batch& bt, const std::vector<double>& z, int b, double x, double y) {
    const int u = int(x / kS), v = int(y / kS);
    double num = 0, den = 0;
    for (int i = 0; i < bt.h; ++i)
        for (int j = 0; j < bt.w; ++j) {
            const double p = sigm(z[bt.at(b, i, j)]), yy = gauss(i, j, v, u), m = bt.m[bt.at(b, i, j)];
            const double l = yy >= 0.8 ? std::pow(1 - p, 1.5) * -std::log(p)
                                       : std::pow(1 - yy, 4) * std::pow(p, 1.5) * -std::log(1 - p);
            num += m * l;
            den += m * (yy >= 0.8);
        }
    return {num, den};
}

TEST(ModelLoss, VariantNames) {
    EXPECT_STREQ(model::loss_variant_name(LossVariant::Sider), "sider");
    EXPECT_STREQ(model::loss_variant_name(LossVariant::Corrected), "corrected");
    EXPECT_EQ(model::parse_loss_variant("sider"), LossVariant::Sider);
    EXPECT_EQ(model::parse_loss_variant("corrected"), LossVariant::Corrected);
    EXPECT_THROW(model::parse_loss_variant("Sider"), rt::Error);
}

TEST(ModelLoss, FocalHandComputedWithMaskAndBorder) {
    Batch b(1, 4, 8);
    b.labels[0] = label(10, 6, 26, 14);  // gap cell (u 2, v 1); slider cell (6, 3): bottom neighbour off-grid
    for (int i = 0; i < 4; ++i) b.m[b.at(0, i, 7)] = 0.5;
    b.zg[b.at(0, 1, 2)] = logit(0.9);
    for (int j = 0; j < 8; ++j) b.zs[b.at(0, 2, j)] = -1.0;
    const auto g = focal_sums(b, b.zg, 0, 10, 6), s = focal_sums(b, b.zs, 0, 26, 14);
    EXPECT_EQ(g.second, 5.0);
    EXPECT_EQ(s.second, 3.5);  // 4 positives, one of them in the M = 0.5 column
    for (LossVariant v : {LossVariant::Sider, LossVariant::Corrected}) {  // one sample: identical
        const LossTerms t = run(config(v), b);
        EXPECT_NEAR(t.focal_gap, g.first / g.second, 1e-12);
        EXPECT_NEAR(t.focal_slider, s.first / s.second, 1e-12);
    }
}

TEST(ModelLoss, FocalBatchVersusPerSampleNormalisation) {
    Batch b(2, 4, 8);
    b.labels[0] = label(10, 6, 26, 6);
    b.labels[1] = label(14, 10, 6, 10);
    for (int i = 0; i < 4; ++i) b.m[b.at(1, i, 3)] = 0;  // sample 1 loses 3 gap positives
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 8; ++j) b.zg[b.at(1, i, j)] = 1.0;
    const auto a0 = focal_sums(b, b.zg, 0, 10, 6), a1 = focal_sums(b, b.zg, 1, 14, 10);
    const double sider = (a0.first + a1.first) / (a0.second + a1.second);
    const double corr = 0.5 * (a0.first / a0.second + a1.first / a1.second);
    EXPECT_NEAR(run(config(LossVariant::Sider), b).focal_gap, sider, 1e-12);
    EXPECT_NEAR(run(config(LossVariant::Corrected), b).focal_gap, corr, 1e-12);
    EXPECT_GT(std::fabs(sider - corr), 0.1);
}

TEST(ModelLoss, FocalGuardWithoutPositivesHasNoGradient) {
    Batch b(1, 4, 8);
    b.labels[0] = label(10, 6, 26, 6);
    for (auto [i, j] : Cells{{1, 2}, {0, 2}, {2, 2}, {1, 1}, {1, 3}}) b.m[b.at(0, i, j)] = 0;
    LossConfig c = config(LossVariant::Sider);
    c.w_offset = c.w_hard_negative = c.w_padding_bce = c.w_y_axis = 0;
    for (LossVariant v : {LossVariant::Sider, LossVariant::Corrected}) {
        c.variant = v;
        std::vector<double> grad;
        const LossTerms t = run(c, b, &grad);
        EXPECT_EQ(t.focal_gap, 0.01);
        for (size_t k = 0; k < b.cells(); ++k) EXPECT_EQ(grad[k], 0.0) << k;  // d / d gap logits
        EXPECT_NE(grad[b.cells() + b.at(0, 1, 6)], 0.0);                      // the slider still trains
    }
}

// Quirk 4: `sider` weights the whole window by Y*M with target 0 off the peak; corrected uses
// the peak cell only. Quirk 5: batch sums versus per-sample means.
TEST(ModelLoss, OffsetWindowVersusPeak) {
    Batch b(2, 4, 8);
    b.labels[0] = label(10.6f, 7.0f, 25.0f, 13.0f);  // gap (2,1) du .15 dv .25; slider (6,3) du dv -.25
    b.labels[1] = label(18.0f, 9.0f, 5.0f, 3.0f);    // gap (4,2) du 0 dv -.25; slider (1,0) du dv -.25
    for (int i = 0; i < 4; ++i) b.m[b.at(0, i, 0)] = 0.25;
    const double og[2] = {0.1, -0.2}, os[2] = {0.3, 0.05};  // predicted offsets, everywhere
    for (size_t k = 0; k < b.cells(); ++k)
        for (int c = 0; c < 2; ++c) {
            b.zo[4 * k + c] = std::atanh(2 * og[c]);
            b.zo[4 * k + 2 + c] = std::atanh(2 * os[c]);
        }
    auto sl1 = [](double d) { return 0.5 * d * d; };  // |d| < 1 always
    double sider = 0, corr = 0;
    for (int obj = 0; obj < 2; ++obj) {
        const double* o = obj ? os : og;
        double num = 0, den = 0;
        for (int bi = 0; bi < 2; ++bi) {
            const data::Label& l = b.labels[bi];
            const double x = obj ? l.slider_x : l.gap_x, y = obj ? l.slider_y : l.gap_y;
            const int u = int(x / kS), v = int(y / kS);
            const double du = x / kS - u - 0.5, dv = y / kS - v - 0.5;
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 8; ++j) {
                    const bool peak = i == v && j == u;
                    const double wt = gauss(i, j, v, u) * b.m[b.at(bi, i, j)];
                    num += wt * (sl1(o[0] - (peak ? du : 0)) + sl1(o[1] - (peak ? dv : 0)));
                    den += wt;
                }
            corr += 0.5 * (sl1(o[0] - du) + sl1(o[1] - dv));
        }
        sider += num / den;
    }
    EXPECT_NEAR(run(config(LossVariant::Sider), b).offset, sider, 1e-12);
    EXPECT_NEAR(run(config(LossVariant::Corrected), b).offset, corr, 1e-12);
    EXPECT_GT(std::fabs(sider - corr), 1e-3);
}

// Guards: `sider` as the original (no gap weight -> 0.01 for the whole term, no slider weight ->
// L_gap + 0.01); corrected per object (0.01 in place of the object's own loss).
TEST(ModelLoss, OffsetGuards) {
    // Gap cell (2, 1), slider cell (20, 1), all target offsets 0; predicted gap du and slider dv
    // are off everywhere.
    Batch b(1, 4, 24);
    b.labels[0] = label(10, 6, 82, 6);
    for (size_t k = 0; k < b.cells(); ++k) b.zo[4 * k] = 0.4, b.zo[4 * k + 3] = -0.3;
    Batch no_slider = b, no_gap = b;  // one object's window (cols 0..11 or 12..23) in the padding
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 12; ++j) no_slider.m[b.at(0, i, j + 12)] = no_gap.m[b.at(0, i, j)] = 0;
    Batch gap_exact = b, slider_exact = b;  // one object's loss made 0
    for (size_t k = 0; k < b.cells(); ++k) gap_exact.zo[4 * k] = slider_exact.zo[4 * k + 3] = 0;
    for (LossVariant v : {LossVariant::Sider, LossVariant::Corrected}) {
        const double gap_part = run(config(v), slider_exact).offset;
        const double slider_part = run(config(v), gap_exact).offset;
        EXPECT_GT(gap_part, 1e-3);
        EXPECT_GT(slider_part, 1e-3);
        EXPECT_NEAR(run(config(v), b).offset, gap_part + slider_part, 1e-12);
        EXPECT_NEAR(run(config(v), no_slider).offset, gap_part + 0.01, 1e-12);
        EXPECT_NEAR(run(config(v), no_gap).offset, v == LossVariant::Sider ? 0.01 : 0.01 + slider_part, 1e-12);
    }
}

// Quirk 2 (fake coordinates), quirk 5 (padding to K fakes, (0,0) for samples without), zero padding.
TEST(ModelLoss, HardNegativeFakeCoordinatesAndPadding) {
    Batch b(3, 4, 8);
    for (int bi = 0; bi < 3; ++bi)
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 8; ++j) b.zg[b.at(bi, i, j)] = logit(0.05 + 0.9 * (i * 8 + j) / 32.0);
    b.labels[0] = label(10, 6, 20, 6, 0, {{26, 10}, {6, 2}});
    b.labels[1] = label(10, 6, 20, 6, 0, {{26, 10}});
    b.labels[2] = label(10, 6, 20, 6, 0, {});
    auto h = [](double a) { return std::max(a, 0.0); };
    const double sp = tent_sample(b, 0, 2.5, 1.5);
    // sider: (int(x/4)/4, int(y/4)/4); corrected: (x/4, y/4).
    const double s0 = tent_sample(b, 0, 6 / 4.0, 2 / 4.0), s1 = tent_sample(b, 0, 1 / 4.0, 0 / 4.0);
    const double c0 = tent_sample(b, 0, 6.5, 2.5), c1 = tent_sample(b, 0, 1.5, 0.5);
    const double p00 = sigm(b.zg[0]);
    const double sider = (0.5 * (h(0.5 - sp + s0) + h(0.5 - sp + s1)) + h(0.5 - sp + s0) + h(0.5 - sp + p00)) / 3;
    const double corr = 0.5 * (0.5 * (h(0.5 - sp + c0) + h(0.5 - sp + c1)) + h(0.5 - sp + c0));
    EXPECT_NEAR(run(config(LossVariant::Sider), b).hard_negative, sider, 1e-12);
    EXPECT_NEAR(run(config(LossVariant::Corrected), b).hard_negative, corr, 1e-12);
    EXPECT_GT(std::fabs(sider - corr), 0.1);

    // Near the far corner only one bilinear corner is inside the grid (zero padding).
    Batch e(1, 4, 8);
    e.zg = std::vector<double>(b.zg.begin(), b.zg.begin() + 32);
    e.labels[0] = label(10, 6, 20, 6, 0, {{30, 14}});  // corrected (7.5, 3.5)
    const double p37 = sigm(e.zg[e.at(0, 3, 7)]);
    EXPECT_NEAR(run(config(LossVariant::Corrected), e).hard_negative, h(0.5 - sp + 0.25 * p37), 1e-12);

    // No fakes anywhere -> 0.
    for (auto& l : b.labels) l.num_fakes = 0;
    EXPECT_EQ(run(config(LossVariant::Sider), b).hard_negative, 0.0);
    EXPECT_EQ(run(config(LossVariant::Corrected), b).hard_negative, 0.0);
}

// Angle: cells with Y_gap > 0.7 (the 5 positives), every sample of a batch that has a rotated one
// (unrotated ones target (0, 1)); `sider` normalises over the batch, corrected per sample.
TEST(ModelLoss, AngleTermAndItsGate) {
    Batch b(2, 4, 8);
    b.labels[0] = label(10, 6, 26, 6, 0.02f);
    b.labels[1] = label(18, 10, 6, 10, 0.0f);
    const double za[2][2] = {{0.3, 2.0}, {-1.5, 1.0}};
    for (int bi = 0; bi < 2; ++bi)
        for (int k = 0; k < 32; ++k) b.za[2 * (bi * 32 + k)] = za[bi][0], b.za[2 * (bi * 32 + k) + 1] = za[bi][1];
    b.m[b.at(0, 0, 2)] = b.m[b.at(0, 1, 1)] = b.m[b.at(0, 1, 3)] = 0.5;  // sample 0: sum M_ang*M = 3.5
    const double th0 = double(0.02f);
    const double l0 = 1 - std::cos(std::atan2(0.3, 2.0) - th0), l1 = 1 - std::cos(std::atan2(-1.5, 1.0));
    const double sider = (l0 * 3.5 + l1 * 5) / (8.5 + 1e-8);
    const double corr = 0.5 * (l0 * 3.5 / (3.5 + 1e-8) + l1 * 5 / (5 + 1e-8));
    for (LossVariant v : {LossVariant::Sider, LossVariant::Corrected}) {
        const LossConfig c = config(v);
        const LossTerms t = run(c, b);
        EXPECT_NEAR(t.angle, v == LossVariant::Sider ? sider : corr, 1e-12);
        EXPECT_TRUE(t.angle_used);
        EXPECT_NEAR(t.total, expected_total(t, c), 1e-12);
    }
    EXPECT_GT(std::fabs(sider - corr), 1e-2);

    // No rotated sample: the term is absent, adds nothing and has no gradient.
    b.labels[0].angle_rad = 0;
    std::vector<double> grad;
    const LossTerms t = run(config(LossVariant::Sider), b, &grad);
    EXPECT_FALSE(t.angle_used);
    EXPECT_EQ(t.angle, 0.0);
    EXPECT_NEAR(t.total, expected_total(t, config(LossVariant::Sider)), 1e-12);
    for (size_t k = 6 * b.cells(); k < grad.size(); ++k) EXPECT_EQ(grad[k], 0.0) << k;
}

// Quirk 1: `sider` takes sigmoid(P) (floor log 2 per map and cell); quirk 5: batch sums.
TEST(ModelLoss, PaddingBceDoubleSigmoidAndNormalisation) {
    Batch b(2, 4, 8);
    b.labels[0] = label(14, 6, 26, 6);
    b.labels[1] = label(14, 6, 26, 6);
    for (int i = 0; i < 4; ++i) {
        b.m[b.at(0, i, 0)] = b.m[b.at(1, i, 0)] = 0;
        b.m[b.at(1, i, 1)] = 0.5;
    }
    for (int k = 32; k < 64; ++k) b.zg[k] = b.zs[k] = -1.0;  // sample 1: P = sigmoid(-1)
    auto bce = [](double p) { return -std::log(1 - p); };
    const double p0 = 0.5, p1 = sigm(-1.0);
    const double sider = (4 * 2 * bce(sigm(p0)) + 6 * 2 * bce(sigm(p1))) / 10;
    const double corr = 0.5 * (2 * bce(p0) + 2 * bce(p1));
    EXPECT_NEAR(run(config(LossVariant::Sider), b).padding_bce, sider, 1e-12);
    EXPECT_NEAR(run(config(LossVariant::Corrected), b).padding_bce, corr, 1e-12);

    // Confident zeros in the padding: `sider` stays at its floor 2 log 2, corrected goes to the clamp.
    for (double& z : b.zg) z = -30;
    for (double& z : b.zs) z = -30;
    EXPECT_NEAR(run(config(LossVariant::Sider), b).padding_bce, 2 * std::log(2.0), 1e-9);
    EXPECT_NEAR(run(config(LossVariant::Corrected), b).padding_bce, 2 * -std::log1p(-1e-4), 1e-12);

    b.m.assign(b.cells(), 1.0);  // no padding -> 0
    EXPECT_EQ(run(config(LossVariant::Sider), b).padding_bce, 0.0);
    EXPECT_EQ(run(config(LossVariant::Corrected), b).padding_bce, 0.0);
}

// Quirk 3: the row target is floor(y/16) in `sider`, floor(y/4) (the object's row) in corrected.
TEST(ModelLoss, YAxisRowTargets) {
    Batch b(2, 8, 4);
    b.labels[0] = label(6, 22, 6, 9);   // sider rows 1, 0; corrected rows 5, 2
    b.labels[1] = label(6, 30, 6, 17);  // sider rows 1, 1; corrected rows 7, 4
    for (int bi = 0; bi < 2; ++bi)
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 4; ++j) {
                b.zg[b.at(bi, i, j)] = logit(0.1 + 0.1 * i + 0.01 * (j - 1.5) + 0.02 * bi);
                b.zs[b.at(bi, i, j)] = logit(0.8 - 0.09 * i + 0.01 * (j - 1.5));
            }
    auto expected = [&](LossVariant v) {
        double ce = 0, emd = 0;
        for (int bi = 0; bi < 2; ++bi) {
            double dg[8], ds[8], zg = 0, zs = 0;
            for (int i = 0; i < 8; ++i) {  // softmax(log(e + eps)) = (e + eps) / sum(e + eps)
                dg[i] = ds[i] = 1e-8;
                for (int j = 0; j < 4; ++j)
                    dg[i] += sigm(b.zg[b.at(bi, i, j)]) / 4, ds[i] += sigm(b.zs[b.at(bi, i, j)]) / 4;
                zg += dg[i], zs += ds[i];
            }
            const double div = v == LossVariant::Sider ? 16 : 4;
            const int tg = int(b.labels[bi].gap_y / div), ts = int(b.labels[bi].slider_y / div);
            ce += -std::log(dg[tg] / zg + 1e-8) - std::log(ds[ts] / zs + 1e-8);
            double cg = 0, cs = 0;
            for (int i = 0; i < 8; ++i) emd += std::fabs((cg += dg[i] / zg) - (cs += ds[i] / zs));
        }
        return ce / 2 + 0.3 * emd / 16;
    };
    EXPECT_NEAR(run(config(LossVariant::Sider), b).y_axis, expected(LossVariant::Sider), 1e-12);
    EXPECT_NEAR(run(config(LossVariant::Corrected), b).y_axis, expected(LossVariant::Corrected), 1e-12);
    EXPECT_GT(std::fabs(expected(LossVariant::Sider) - expected(LossVariant::Corrected)), 0.1);
}

TEST(ModelLoss, NonFiniteTermsAreDropped) {
    Batch b(1, 4, 8);
    b.labels[0] = label(14, 6, 26, 6);
    for (int i = 0; i < 4; ++i) b.m[b.at(0, i, 0)] = 0;
    b.zs[b.at(0, 2, 0)] = NAN;  // in the padding: focal_slider -> 1.0 (its NaN guard), padding BCE and Y NaN
    const LossConfig c = config(LossVariant::Sider);
    std::vector<double> grad;
    const LossTerms t = run(c, b, &grad);
    EXPECT_EQ(t.focal_slider, 1.0);
    EXPECT_TRUE(std::isnan(t.padding_bce));
    EXPECT_TRUE(std::isnan(t.y_axis));
    EXPECT_EQ(t.dropped_terms, 2);
    EXPECT_NEAR(t.total, c.w_heatmap * (t.focal_gap + 1.0) + c.w_offset * t.offset, 1e-12);
    for (size_t k = 0; k < b.cells(); ++k) EXPECT_TRUE(std::isfinite(grad[k])) << k;  // gap logits
}

TEST(ModelLoss, AllTermsDroppedGivesOne) {
    // Contrived so that every term is non-finite: NaN gap logit at the true gap (focal_gap -> 1.0,
    // hard negative, padding BCE and Y NaN), NaN offset logit (offset NaN) and M = -1e308 on 48
    // negatives far from both windows (focal_slider -> -inf, so the heatmap term is -inf).
    Batch b(1, 4, 24);
    b.labels[0] = label(10, 6, 14, 6, 0, {{40, 6}});
    for (int i = 0; i < 4; ++i)
        for (int j = 12; j < 24; ++j) b.m[b.at(0, i, j)] = -1e308;
    b.zg[b.at(0, 1, 2)] = NAN;
    b.zo[4 * b.at(0, 1, 2)] = NAN;
    std::vector<double> grad;
    const LossTerms t = run(config(LossVariant::Sider), b, &grad);
    EXPECT_EQ(t.dropped_terms, 5);
    EXPECT_EQ(t.total, 1.0);
    for (double g : grad) EXPECT_EQ(g, 0.0);
}

TEST(ModelLoss, RejectsBadLabels) {
    Batch b(1, 4, 8);
    b.labels[0] = label(10, 6, 26, 6);
    b.labels[0].num_fakes = data::kMaxFakeGaps + 1;
    EXPECT_THROW(run(config(LossVariant::Sider), b), rt::Error);
    b.labels[0].num_fakes = 0;
    b.labels[0].gap_x = NAN;
    EXPECT_THROW(run(config(LossVariant::Sider), b), rt::Error);
}

}  // namespace
