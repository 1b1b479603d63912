// Decoding (MODEL_SPEC §1.7, §8) on hand-placed peaks, and the §3.5 validation metrics on
// hand-made decodes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/decode.h"
#include "runtime/error.h"

namespace {

constexpr int kS = 4;  // stride

// Heads after activation for n samples on an (h, w) grid; background heat 0.01, offsets 0, all valid.
struct Maps {
    int n, h, w;
    std::vector<float> gap, slider, off, valid;
    Maps(int n_, int h_, int w_) : n(n_), h(h_), w(w_) {
        gap.assign(cells(), 0.01f);
        slider.assign(cells(), 0.01f);
        off.assign(4 * cells(), 0.0f);
        valid.assign(cells(), 1.0f);
    }
    size_t cells() const { return static_cast<size_t>(n) * h * w; }
    size_t at(int b, int i, int j) const { return (static_cast<size_t>(b) * h + i) * w + j; }
    void offset(int b, int i, int j, int ch, float du, float dv) {
        off[4 * at(b, i, j) + ch] = du;
        off[4 * at(b, i, j) + ch + 1] = dv;
    }
    std::vector<model::Decoded> decode(bool masked = true) const {
        std::vector<model::Decoded> d(n);
        model::decode_ref(n, h, w, kS, gap.data(), slider.data(), off.data(), masked ? valid.data() : nullptr,
                          d.data());
        return d;
    }
};

TEST(ModelDecode, PeaksAndOffsets) {
    Maps m(1, 4, 8);
    m.gap[m.at(0, 2, 5)] = 0.9f;
    m.slider[m.at(0, 2, 1)] = 0.8f;
    m.offset(0, 2, 5, 0, 0.2f, -0.1f);
    m.offset(0, 2, 1, 2, 0.1f, 0.3f);
    for (bool masked : {true, false}) {
        const model::Decoded d = m.decode(masked)[0];
        EXPECT_FLOAT_EQ(d.gap_x, (5 + 0.5f + 0.2f) * 4);
        EXPECT_FLOAT_EQ(d.gap_y, (2 + 0.5f - 0.1f) * 4);
        EXPECT_FLOAT_EQ(d.slider_x, (1 + 0.5f + 0.1f) * 4);
        EXPECT_FLOAT_EQ(d.slider_y, (2 + 0.5f + 0.3f) * 4);
        EXPECT_EQ(d.gap_score, 0.9f);
        EXPECT_EQ(d.slider_score, 0.8f);
    }
}

TEST(ModelDecode, MaskedCellsAreExcluded) {
    Maps m(2, 4, 8);
    m.gap[m.at(0, 1, 1)] = 0.99f;  // global max, but in the padding
    m.valid[m.at(0, 1, 1)] = 0.0f;
    m.gap[m.at(0, 3, 6)] = 0.7f;
    m.slider[m.at(0, 3, 2)] = 0.5f;
    // Sample 1 is entirely padding: argmax of all -inf is the first cell, and its offsets are
    // multiplied by the mask (0) although the offset head says 0.4.
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 8; ++j) m.valid[m.at(1, i, j)] = 0.0f;
    m.offset(1, 0, 0, 0, 0.4f, 0.4f);
    m.offset(1, 0, 0, 2, 0.4f, 0.4f);
    const std::vector<model::Decoded> d = m.decode();
    EXPECT_FLOAT_EQ(d[0].gap_x, 6.5f * 4);
    EXPECT_FLOAT_EQ(d[0].gap_y, 3.5f * 4);
    EXPECT_EQ(d[0].gap_score, 0.7f);
    EXPECT_FLOAT_EQ(d[0].slider_x, 2.5f * 4);
    EXPECT_FLOAT_EQ(d[0].slider_y, 3.5f * 4);
    EXPECT_EQ(d[1].gap_score, -INFINITY);
    EXPECT_EQ(d[1].slider_score, -INFINITY);
    EXPECT_EQ(d[1].gap_x, 2.0f);
    EXPECT_EQ(d[1].gap_y, 2.0f);
    EXPECT_EQ(d[1].slider_x, 2.0f);
    EXPECT_EQ(d[1].slider_y, 2.0f);
    // Without the mask the padded peak wins.
    EXPECT_EQ(m.decode(false)[0].gap_score, 0.99f);
}

TEST(ModelDecode, RowAlignmentResearchesTheWeakerObject) {
    Maps m(1, 6, 8);
    m.slider[m.at(0, 2, 5)] = 0.95f;  // reference: y = 10 -> r = round(2.0) = 2, rows 1..3
    m.gap[m.at(0, 5, 2)] = 0.7f;      // the gap's global peak, outside the band
    m.gap[m.at(0, 0, 6)] = 0.68f;     // outside the band
    m.gap[m.at(0, 3, 4)] = 0.65f;     // best inside the band
    m.offset(0, 3, 4, 0, 0.25f, -0.25f);
    const model::Decoded d = m.decode()[0];
    EXPECT_FLOAT_EQ(d.gap_x, (4 + 0.5f + 0.25f) * 4);
    EXPECT_FLOAT_EQ(d.gap_y, (3 + 0.5f - 0.25f) * 4);
    EXPECT_EQ(d.gap_score, 0.7f);  // the score stays the original peak
    EXPECT_FLOAT_EQ(d.slider_x, 5.5f * 4);
    EXPECT_FLOAT_EQ(d.slider_y, 2.5f * 4);
}

TEST(ModelDecode, EqualScoresMakeTheSliderTheReference) {
    Maps m(1, 6, 8);
    m.gap[m.at(0, 0, 1)] = 0.8f;
    m.slider[m.at(0, 3, 6)] = 0.8f;  // reference on the tie: rows 2..4
    m.gap[m.at(0, 4, 0)] = 0.5f;     // the gap moves here
    m.slider[m.at(0, 1, 3)] = 0.6f;  // where the slider would move if the gap were the reference
    const model::Decoded d = m.decode()[0];
    EXPECT_FLOAT_EQ(d.gap_x, 0.5f * 4);
    EXPECT_FLOAT_EQ(d.gap_y, 4.5f * 4);
    EXPECT_FLOAT_EQ(d.slider_x, 6.5f * 4);
    EXPECT_FLOAT_EQ(d.slider_y, 3.5f * 4);
    EXPECT_EQ(d.gap_score, 0.8f);
}

TEST(ModelDecode, ReferenceRowRoundsHalfToEven) {
    Maps m(2, 6, 8);
    // Sample 0: y_ref/4 - 0.5 = 2.5 -> row 2 (rows 1..3), not 3 (rows 2..4).
    m.slider[m.at(0, 2, 3)] = 0.9f;
    m.offset(0, 2, 3, 2, 0.0f, 0.5f);
    m.gap[m.at(0, 5, 0)] = 0.6f;
    m.gap[m.at(0, 1, 7)] = 0.5f;
    m.gap[m.at(0, 4, 7)] = 0.55f;
    // Sample 1: 3.5 -> row 4 (rows 3..5), not 3 (rows 2..4).
    m.slider[m.at(1, 3, 3)] = 0.9f;
    m.offset(1, 3, 3, 2, 0.0f, 0.5f);
    m.gap[m.at(1, 0, 0)] = 0.6f;
    m.gap[m.at(1, 2, 7)] = 0.5f;
    m.gap[m.at(1, 5, 7)] = 0.45f;
    const std::vector<model::Decoded> d = m.decode();
    EXPECT_FLOAT_EQ(d[0].gap_y, 1.5f * 4);
    EXPECT_FLOAT_EQ(d[1].gap_y, 5.5f * 4);
    EXPECT_FLOAT_EQ(d[0].gap_x, 7.5f * 4);
}

TEST(ModelDecode, FirstMaximumWinsAndCoordinatesAreClamped) {
    Maps m(2, 4, 8);
    m.gap[m.at(0, 2, 1)] = 0.9f;  // equal peaks: the first in row-major order, (1, 6), wins
    m.gap[m.at(0, 1, 6)] = 0.9f;
    m.slider[m.at(0, 1, 2)] = 0.3f;
    EXPECT_FLOAT_EQ(m.decode()[0].gap_x, 6.5f * 4);
    EXPECT_FLOAT_EQ(m.decode()[0].gap_y, 1.5f * 4);

    m.gap[m.at(1, 3, 7)] = 0.9f;
    m.offset(1, 3, 7, 0, 0.9f, 0.9f);  // (8.4, 4.4) * 4 -> clamped to (32, 16)
    m.slider[m.at(1, 3, 0)] = 0.5f;
    m.offset(1, 3, 0, 2, -0.8f, 0.9f);  // x (-0.3) * 4 -> 0
    const model::Decoded d = m.decode()[1];
    EXPECT_EQ(d.gap_x, 32.0f);
    EXPECT_EQ(d.gap_y, 16.0f);
    EXPECT_EQ(d.slider_x, 0.0f);
    EXPECT_EQ(d.slider_y, 16.0f);
}

TEST(ModelDecode, RejectsBadShapes) {
    Maps m(1, 4, 8);
    model::Decoded d;
    EXPECT_THROW(model::decode_ref(1, 0, 8, kS, m.gap.data(), m.slider.data(), m.off.data(), nullptr, &d), rt::Error);
    EXPECT_THROW(model::decode_ref(1, 4, 8, kS, nullptr, m.slider.data(), m.off.data(), nullptr, &d), rt::Error);
}

model::Decoded decoded(float gx, float gy, float sx, float sy) {
    model::Decoded d;
    d.gap_x = gx, d.gap_y = gy, d.slider_x = sx, d.slider_y = sy;
    return d;
}

data::Label truth(float gx, float gy, float sx, float sy) {
    data::Label l;
    l.gap_x = gx, l.gap_y = gy, l.slider_x = sx, l.slider_y = sy;
    return l;
}

TEST(ModelDecode, SampleErrorIsL1AveragedOverAxes) {
    const model::SampleError e = model::sample_error(decoded(100, 50, 20, 50), truth(101, 52, 26, 50));
    EXPECT_DOUBLE_EQ(e.gap, 1.5);
    EXPECT_DOUBLE_EQ(e.slider, 3.0);
    EXPECT_DOUBLE_EQ(e.combined, 2.25);
}

TEST(ModelDecode, MetricsOnHandMadeDecodes) {
    // combined errors 0.75, 3, 8, 1 and exactly 5 (counts for hit@5: <=).
    const std::vector<std::pair<model::Decoded, data::Label>> s = {
        {decoded(100, 50, 20, 50), truth(101, 52, 20, 50)},   // gap 1.5, slider 0
        {decoded(100, 50, 20, 50), truth(96, 48, 26, 50)},    // gap 3, slider 3
        {decoded(100, 50, 20, 50), truth(110, 56, 28, 58)},   // gap 8, slider 8
        {decoded(100, 50, 20, 50), truth(102, 52, 20, 50)},   // gap 2, slider 0
        {decoded(100, 50, 20, 50), truth(105, 55, 25, 55)}};  // gap 5, slider 5
    const double comb[5] = {0.75, 3, 8, 1, 5}, gap[5] = {1.5, 3, 8, 2, 5}, sl[5] = {0, 3, 8, 0, 5};
    model::Metrics all, first, second;
    for (size_t i = 0; i < s.size(); ++i) {
        all.add(s[i].first, s[i].second);
        (i < 2 ? first : second).add(s[i].first, s[i].second);
        EXPECT_DOUBLE_EQ(model::sample_error(s[i].first, s[i].second).combined, comb[i]) << i;
    }
    double mae = 0, sq = 0, gm = 0, sm = 0;
    for (int i = 0; i < 5; ++i) mae += comb[i] / 5, sq += comb[i] * comb[i] / 5, gm += gap[i] / 5, sm += sl[i] / 5;
    first.merge(second);
    for (const model::Metrics* m : {&all, &first}) {
        EXPECT_EQ(m->count(), 5u);
        EXPECT_DOUBLE_EQ(m->mae_px(), mae);
        EXPECT_DOUBLE_EQ(m->rmse_px(), std::sqrt(sq));
        EXPECT_DOUBLE_EQ(m->gap_mae(), gm);
        EXPECT_DOUBLE_EQ(m->slider_mae(), sm);
        EXPECT_DOUBLE_EQ(m->hit_le_2px(), 40.0);  // 0.75, 1
        EXPECT_DOUBLE_EQ(m->hit_le_5px(), 80.0);  // 0.75, 3, 1, 5
    }
    model::Metrics boundary;
    boundary.add(decoded(0, 0, 0, 0), truth(2, 2, 2, 2));  // combined exactly 2
    EXPECT_DOUBLE_EQ(boundary.hit_le_2px(), 100.0);
    EXPECT_EQ(model::Metrics().count(), 0u);
    EXPECT_EQ(model::Metrics().mae_px(), 0.0);
}

}  // namespace
