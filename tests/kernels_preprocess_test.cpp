// preprocess_ref (kernels/preprocess_ref.cpp) against hand-computed outputs: values k/255 in the
// NHWC layout [pixels..., mask], and the mask's rectangle edges (inclusive start, exclusive end,
// compared with integer pixel indices, fractional edges included), for gray and RGB.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "data/label.h"
#include "kernels/preprocess.h"
#include "runtime/error.h"

namespace {

data::Label rect(float x0, float y0, float x1, float y1) {
    data::Label l;
    l.rect_x0 = x0, l.rect_y0 = y0, l.rect_x1 = x1, l.rect_y1 = y1;
    return l;
}

TEST(PreprocessRef, GrayValuesAndMaskEdges) {
    // One 2x4 gray sample; valid rectangle x in [1, 3), y in [0, 1): pixels (1,0) and (2,0).
    const uint8_t px[8] = {0, 51, 255, 102, 1, 2, 3, 4};
    const data::Label l = rect(1, 0, 3, 1);
    std::vector<float> out(16, -1.0f);
    kern::preprocess_ref(1, 2, 4, 1, px, &l, out.data());
    const float want[16] = {0.0f,         0,  // (x0, y0)
                            51 / 255.0f,  1,  //
                            1.0f,         1,  //
                            102 / 255.0f, 0,  // x = 3 = rect_x1: outside
                            1 / 255.0f,   0,  // y = 1 = rect_y1: outside
                            2 / 255.0f,   0,  //
                            3 / 255.0f,   0,  //
                            4 / 255.0f,   0};
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;
    EXPECT_EQ(out[2], 0.2f);  // 51/255 is exactly the float nearest 0.2
}

TEST(PreprocessRef, FractionalEdgesCompareWithPixelIndices) {
    // Width 5, height 1: rectangle [0.5, 3.0) x [-1, 0.5) -> x = 1, 2 valid (0 < 0.5, 3 not < 3).
    const uint8_t px[5] = {10, 20, 30, 40, 50};
    const data::Label l = rect(0.5f, -1.0f, 3.0f, 0.5f);
    std::vector<float> out(10);
    kern::preprocess_ref(1, 1, 5, 1, px, &l, out.data());
    const float mask[5] = {0, 1, 1, 0, 0};
    for (int x = 0; x < 5; ++x) {
        EXPECT_EQ(out[2 * x], px[x] / 255.0f);
        EXPECT_EQ(out[2 * x + 1], mask[x]) << "x = " << x;
    }
}

TEST(PreprocessRef, RgbSamplesUseTheirOwnRectangles) {
    // Two 1x2 RGB samples: the first fully valid, the second valid only at x = 1.
    const uint8_t px[12] = {255, 0, 51, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    const data::Label l[2] = {rect(0, 0, 2, 1), rect(1, 0, 2, 1)};
    std::vector<float> out(16);
    kern::preprocess_ref(2, 1, 2, 3, px, l, out.data());
    const float want[16] = {1.0f,       0.0f,       0.2f,       1,  //
                            1 / 255.0f, 2 / 255.0f, 3 / 255.0f, 1,  //
                            4 / 255.0f, 5 / 255.0f, 6 / 255.0f, 0,  //
                            7 / 255.0f, 8 / 255.0f, 9 / 255.0f, 1};
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], want[i]) << "element " << i;
}

TEST(PreprocessRef, RefusesUnsupportedChannels) {
    const uint8_t px[2] = {0, 0};
    const data::Label l = rect(0, 0, 1, 1);
    float out[6];
    EXPECT_THROW(kern::preprocess_ref(1, 1, 1, 2, px, &l, out), rt::Error);
}

}  // namespace
