// A small deterministic set of slider-CAPTCHA-like samples made from a seed, for smoke runs and
// tests of the training loop before (and independently of) the full synthetic generator:
// a textured background, a letterbox band, a shaded square gap on the right, the matching
// piece at the left at the gap's height, and 1-2 fainter fake gaps.
// Input layout NHWC float: channel 0 (or 0..2 for RGB) = intensity/255, last channel = valid mask.
#pragma once
#include <cstdint>
#include <vector>

#include "data/label.h"

namespace data {

struct FixedSamples {
    int n = 0, h = 0, w = 0, c = 0;
    std::vector<float> input;   // (n, h, w, c)
    std::vector<Label> labels;  // n
};

FixedSamples make_fixed_samples(uint64_t seed, int n, int channels, int height, int width);

}  // namespace data
