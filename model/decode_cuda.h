// CUDA decoding and validation metrics (model/decode.cu): decode_ref (MODEL_SPEC §1.7) and the metric
// sums of model::Metrics (§3.5) on the device, so validation needs no host round trip per batch.
// Declared without CUDA types so g++ code (the trainer, tests) can call it.
//
//   decode_cuda              one block per sample: masked argmax of gap and slider (torch.argmax order:
//                            first maximum, NaN first), offsets, then the row-alignment re-search.
//                            Works from the heads' LOGITS: the heatmaps are sigmoid(z) and the offsets
//                            0.5*tanh(z), each computed in double and rounded to fp32 once (so the
//                            host can reproduce the exact fp32 values decode_ref sees).
//   metrics_accumulate_cuda  one block: per-sample errors (sample_error) in parallel, then one thread
//                            adds them in sample order to the running sums with the operations of
//                            Metrics::add (no fused multiply-add), so the sums equal a model::Metrics
//                            fed the same decodes in the same order bit for bit.
// Launchers enqueue on ex.stream, never allocate and never synchronise (CUDA-graph capturable).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "data/label.h"
#include "model/decode.h"
#include "runtime/exec.h"

namespace model {

constexpr int kDecodeThreads = 256;   // block of the decode kernel (threads over a sample's cells)
constexpr int kMetricsThreads = 256;  // block of the metrics kernel (threads over samples)

// Metric sums on the device, added over batches. Zero them (cudaMemsetAsync) to start a pass.
struct DeviceMetricSums {
    double sum, sum_sq, sum_gap, sum_slider;  // of combined, combined^2, err_gap, err_slider
    uint64_t n, hit2, hit5;                   // samples, combined <= 2 px, combined <= 5 px
};
static_assert(sizeof(DeviceMetricSums) == 7 * 8, "DeviceMetricSums is copied to the host as-is");

// Host view of a DeviceMetricSums copied back: the accessors of model::Metrics, same formulas
// (an empty accumulator reports 0 everywhere).
struct MetricSumsView {
    DeviceMetricSums s{};

    size_t count() const { return static_cast<size_t>(s.n); }
    double mae_px() const { return s.n ? s.sum / s.n : 0.0; }
    double rmse_px() const { return s.n ? std::sqrt(s.sum_sq / s.n) : 0.0; }
    double gap_mae() const { return s.n ? s.sum_gap / s.n : 0.0; }
    double slider_mae() const { return s.n ? s.sum_slider / s.n : 0.0; }
    double hit_le_2px() const { return s.n ? 100.0 * s.hit2 / s.n : 0.0; }
    double hit_le_5px() const { return s.n ? 100.0 * s.hit5 / s.n : 0.0; }
};

// logit_gap, logit_slider: (N,h,w) fp32; logit_offset: (N,h,w,4) fp32 (du_gap, dv_gap, du_slider,
// dv_slider); valid_min: (N,h,w) 0/1 min-pooled mask (mask_grid_cuda) or null;
// out: n device records, overwritten. Same results as decode_ref on sigmoid / 0.5*tanh of the logits
// rounded to fp32. One launch of n blocks. Throws for n, h, w, stride < 1 or null / misaligned pointers.
void decode_cuda(const rt::Exec& ex, int n, int h, int w, int stride, const float* logit_gap, const float* logit_slider,
                 const float* logit_offset, const float* valid_min, Decoded* out);

// Adds samples 0..n_real-1 (decoded[i] against labels[i]) to *acc, in sample order, as
// Metrics::add would. n_real >= 0 (0: nothing added; the launch still happens); device pointers.
void metrics_accumulate_cuda(const rt::Exec& ex, int n_real, const Decoded* decoded, const data::Label* labels,
                             DeviceMetricSums* acc);

}  // namespace model
