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
#include "tests/support/compare.h"

namespace {

using model::LossConfig;
using model::LossTerms;
using model::LossVariant;

constexpr int kS = 4;  // stride
using Cells = std::vector<std::pair<int, int>>;

// One batch of head logits (NHWC, double), soft valid mask M and labels. Defaults: heatmap and
// offset logits 0, angle logits (0, 1), M = 1.
struct Batch {
    int n, h, w;
    std::vector<double> zg, zs, zo, za, m;
    std::vector<data::Label> labels;
    Batch(int n_, int h_, int w_)
        : n(n_), h(h_), w(w_), zg(cells()), zs(cells()), zo(4 * cells()), za(2 * cells()), m(cells(), 1), labels(n_) {
        for (size_t k = 0; k < cells(); ++k) za[2 * k + 1] = 1.0;
    }
    size_t cells() const { return static_cast<size_t>(n) * h * w; }
    size_t at(int b, int i, int j) const { return (static_cast<size_t>(b) * h + i) * w + j; }
    // All logits as one vector [zg | zs | zo | za] (8 values per cell), and back.
    std::vector<double> params() const {
        std::vector<double> x(zg);
        x.insert(x.end(), zs.begin(), zs.end());
        x.insert(x.end(), zo.begin(), zo.end());
        x.insert(x.end(), za.begin(), za.end());
        return x;
    }
    void set_params(const std::vector<double>& x) {
        const size_t c = cells();
        std::copy(x.begin(), x.begin() + c, zg.begin());
        std::copy(x.begin() + c, x.begin() + 2 * c, zs.begin());
        std::copy(x.begin() + 2 * c, x.begin() + 6 * c, zo.begin());
        std::copy(x.begin() + 6 * c, x.end(), za.begin());
    }
};

data::Label label(float gx, float gy, float sx, float sy, float angle = 0,
                  std::vector<std::pair<float, float>> fakes = {}) {
    data::Label l;
    l.gap_x = gx, l.gap_y = gy, l.slider_x = sx, l.slider_y = sy, l.angle_rad = angle;
    l.num_fakes = static_cast<int>(fakes.size());
    for (size_t k = 0; k < fakes.size(); ++k) l.fake_x[k] = fakes[k].first, l.fake_y[k] = fakes[k].second;
    return l;
}

LossConfig config(LossVariant v) {
    LossConfig c;
    c.variant = v;
    return c;
}

// Runs the double reference; grad (if given) receives d total / d params() in the same layout.
LossTerms run(const LossConfig& cfg, const Batch& b, std::vector<double>* grad = nullptr) {
    const model::HeadLogits<double> z{b.n, b.h, b.w, b.zg.data(), b.zs.data(), b.zo.data(), b.za.data()};
    if (!grad) return model::loss_forward_backward_ref<double>(cfg, z, b.m.data(), b.labels.data(), nullptr);
    const size_t c = b.cells();
    grad->assign(8 * c, NAN);  // must be overwritten everywhere
    const model::HeadGrads<double> g{grad->data(), grad->data() + c, grad->data() + 2 * c, grad->data() + 6 * c};
    return model::loss_forward_backward_ref(cfg, z, b.m.data(), b.labels.data(), &g);
}

double expected_total(const LossTerms& t, const LossConfig& c) {
    return c.w_heatmap * (t.focal_gap + t.focal_slider) + c.w_offset * t.offset + c.w_hard_negative * t.hard_negative +
           (t.angle_used ? c.w_angle * t.angle : 0.0) + c.w_padding_bce * t.padding_bce + c.w_y_axis * t.y_axis;
}

// ---- independent formulas (written from MODEL_SPEC §2, not from the implementation) ----
double sigm(double z) { return 1 / (1 + std::exp(-z)); }
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
// Bilinear sample with zero padding written as a sum of tent weights over the grid.
double tent_sample(const Batch& bt, int b, double gx, double gy) {
    double s = 0;
    for (int i = 0; i < bt.h; ++i)
        for (int j = 0; j < bt.w; ++j)
            s += std::max(0.0, 1 - std::fabs(gx - j)) * std::max(0.0, 1 - std::fabs(gy - i)) *
                 sigm(bt.zg[bt.at(b, i, j)]);
    return s;
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
