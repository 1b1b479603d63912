// Decoding and validation metrics (MODEL_SPEC §1.7, §3.5).
// Inputs are the heads' outputs after their activations, NHWC on the (h, w) grid:
// heat_gap/heat_slider (N,h,w) probabilities, offset (N,h,w,4) in [-0.5, 0.5],
// valid_min (N,h,w) 0/1 min-pooled mask or null (no masking).
#pragma once
#include <array>
#include <cstddef>

#include "data/label.h"

namespace model {

struct Decoded {
    float gap_x = 0, gap_y = 0, slider_x = 0, slider_y = 0;  // letterbox pixels
    float gap_score = 0, slider_score = 0;                   // peak heatmap values (before re-search)
};

// Argmax + offset per object, masked cells excluded, then the row-alignment rule: the object with
// the higher peak (slider on ties) is the reference; the other is re-searched in rows r-1..r+1.
void decode_ref(int n, int h, int w, int stride, const float* heat_gap, const float* heat_slider, const float* offset,
                const float* valid_min, Decoded* out);

// Per-sample error of §3.5: err = mean(|dx|,|dy|) per object, combined = (err_gap + err_slider)/2.
struct SampleError {
    double gap = 0, slider = 0, combined = 0;
};
SampleError sample_error(const Decoded& d, const data::Label& l);

// Running validation metrics.
class Metrics {
public:
    void add(const Decoded& d, const data::Label& l);
    void merge(const Metrics& o);
    // From sums accumulated elsewhere (the CUDA decode's DeviceMetricSums): n samples, hit counts,
    // sums of combined, combined^2, gap and slider errors.
    static Metrics from_sums(size_t n, size_t hit2, size_t hit5, double sum, double sum_sq, double sum_gap,
                             double sum_slider);
    // The sums from_sums() takes, in its order (n, hit2, hit5, sum, sum_sq, sum_gap, sum_slider): what
    // the ranks of a data-parallel validation add up (counts are exact in a double below 2^53).
    std::array<double, 7> sums() const {
        return {static_cast<double>(n_), static_cast<double>(hit2_), static_cast<double>(hit5_), sum_, sum_sq_, sum_gap_,
                sum_slider_};
    }
    size_t count() const { return n_; }
    double mae_px() const;   // mean(combined)
    double rmse_px() const;  // sqrt(mean(combined^2))
    double gap_mae() const;
    double slider_mae() const;
    double hit_le_2px() const;  // percent of samples with combined <= 2
    double hit_le_5px() const;  // percent with combined <= 5

private:
    size_t n_ = 0, hit2_ = 0, hit5_ = 0;
    double sum_ = 0, sum_sq_ = 0, sum_gap_ = 0, sum_slider_ = 0;
};

}  // namespace model
