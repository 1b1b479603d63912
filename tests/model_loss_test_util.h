// Shared by the loss test files: a batch of head logits on a tiny grid, label/config makers and
// a runner of the double reference that returns d total / d logits in one flat vector.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/loss.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace loss_test {

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

inline data::Label label(float gx, float gy, float sx, float sy, float angle = 0,
                         std::vector<std::pair<float, float>> fakes = {}) {
    data::Label l;
    l.gap_x = gx, l.gap_y = gy, l.slider_x = sx, l.slider_y = sy, l.angle_rad = angle;
    l.num_fakes = static_cast<int>(fakes.size());
    for (size_t k = 0; k < fakes.size(); ++k) l.fake_x[k] = fakes[k].first, l.fake_y[k] = fakes[k].second;
    return l;
}

inline LossConfig config(LossVariant v) {
    LossConfig c;
    c.variant = v;
    return c;
}

// Runs the double reference; grad (if given) receives d total / d params() in the same layout.
inline LossTerms run(const LossConfig& cfg, const Batch& b, std::vector<double>* grad = nullptr) {
    const model::HeadLogits<double> z{b.n, b.h, b.w, b.zg.data(), b.zs.data(), b.zo.data(), b.za.data()};
    if (!grad) return model::loss_forward_backward_ref<double>(cfg, z, b.m.data(), b.labels.data(), nullptr);
    const size_t c = b.cells();
    grad->assign(8 * c, NAN);  // must be overwritten everywhere
    const model::HeadGrads<double> g{grad->data(), grad->data() + c, grad->data() + 2 * c, grad->data() + 6 * c};
    return model::loss_forward_backward_ref(cfg, z, b.m.data(), b.labels.data(), &g);
}

inline double expected_total(const LossTerms& t, const LossConfig& c) {
    return c.w_heatmap * (t.focal_gap + t.focal_slider) + c.w_offset * t.offset + c.w_hard_negative * t.hard_negative +
           (t.angle_used ? c.w_angle * t.angle : 0.0) + c.w_padding_bce * t.padding_bce + c.w_y_axis * t.y_axis;
}

inline double sigm(double z) { return 1 / (1 + std::exp(-z)); }
// Bilinear sample with zero padding written as a sum of tent weights over the grid.
inline double tent_sample(const Batch& bt, int b, double gx, double gy) {
    double s = 0;
    for (int i = 0; i < bt.h; ++i)
        for (int j = 0; j < bt.w; ++j)
            s += std::max(0.0, 1 - std::fabs(gx - j)) * std::max(0.0, 1 - std::fabs(gy - i)) *
                 sigm(bt.zg[bt.at(b, i, j)]);
    return s;
}

}  // namespace loss_test
