// CUDA training loss (model/loss.cu): the fused loss of MODEL_SPEC §2 / docs/LOSS.md on the heads'
// fp32 logits, both variants, with the heads' activations (sigmoid, 0.5*tanh, L2-normalise) applied
// inside and the Gaussian / offset targets rendered on the device from the label records (data/label.h,
// copied to the device as-is). Writes d total / d logits in the same launch sequence. Declared without
// CUDA types so g++ code (the training step, tests) can call it. Design: docs/LOSS.md "GPU loss kernel".
//
// Launch sequence of loss_forward_backward_cuda (every launch on ex.stream, nothing allocated, nothing
// synchronised, every per-step value in device memory: CUDA-graph capturable):
//   1. rows   grid n*h, one block per grid row: the per-cell terms summed over the row's w cells
//             (14 partial sums per row, fixed-order block reduction).
//   2. sample grid n, one block per sample: the row partials summed in row order, the Y-axis row
//             distributions (softmax, CE, EMD and their row gradients), the hard-negative samples, the
//             corrected variant's peak-cell offsets.
//   3. batch  one block: batch sums / supports in a fixed order, the guards and the NaN rule of the
//             total, DeviceLossTerms, *loss_sum += total, and the per-term / per-sample gradient
//             coefficients.
//   4. grad   one thread per cell (only when grads is given): every term's d / d activations, chained
//             through the activations into the fp32 logit gradients (overwritten).
// Three reductions must finish before the first gradient is known (a cell's focal gradient depends
// on the whole batch's positive count in `sider`), hence 3 + 1 launches. No atomics on floating-point
// values anywhere; two runs give bitwise-identical results.
//
// Numerics: every per-cell quantity is computed in double from the fp32 logits, exactly as the
// double CPU reference (model/loss.cpp) does, so both agree to rounding (the guards of the original,
// e.g. clamp(P, 1e-8, 1 - 1e-8), do not exist in fp32: 1 - 1e-8 rounds to 1.0f). Only the summation
// order differs. Gradients are rounded to fp32 once, at the end.
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/label.h"
#include "kernels/bf16.h"
#include "model/loss.h"
#include "runtime/exec.h"

namespace model {

// Device-resident result of one loss evaluation (one micro-batch). The terms are the unweighted
// values of LossTerms; angle_used and dropped_terms as there; nonfinite = the total is not finite
// (what TrainStep skips an update on). pad is 0.
struct DeviceLossTerms {
    double focal_gap, focal_slider, offset, hard_negative, angle, padding_bce, y_axis, total;
    int32_t angle_used;
    int32_t dropped_terms;
    int32_t nonfinite;
    int32_t pad;
};
static_assert(sizeof(DeviceLossTerms) == 8 * 8 + 4 * 4, "DeviceLossTerms is copied to the host as-is");

// Host: the LossTerms a DeviceLossTerms copied back stands for.
inline LossTerms to_loss_terms(const DeviceLossTerms& d) {
    LossTerms t;
    t.focal_gap = d.focal_gap, t.focal_slider = d.focal_slider, t.offset = d.offset;
    t.hard_negative = d.hard_negative, t.angle = d.angle, t.padding_bce = d.padding_bce, t.y_axis = d.y_axis;
    t.total = d.total;
    t.angle_used = d.angle_used != 0;
    t.dropped_terms = d.dropped_terms;
    return t;
}

// ---- launch arithmetic (shared by the launchers and the CPU tests) ----
constexpr int kLossRowMaxThreads = 256;  // block of the rows kernel: w rounded up to a warp, at most this
constexpr int kLossSampleThreads = 128;  // block of the sample kernel (threads over grid rows)
constexpr int kLossBatchThreads = 256;   // block of the batch kernel (threads over samples)
constexpr int kLossGradThreads = 256;    // block of the grad kernel (one thread per cell)
constexpr int kLossMaxRows = 256;        // h limit: the sample kernel keeps 6 doubles per row in shared memory
constexpr int kMaskGridThreads = 256;    // block of the mask-pooling kernel (one thread per grid cell)

// Doubles per record in the workspace.
constexpr int kLossRowSlots = 14;         // per (sample, row): partial sums of the row's cells
constexpr int kLossYRowSlots = 2;         // per (sample, row): Y-axis gradient of the row energy, gap / slider
constexpr int kLossSampleSlots = 32;      // per sample: row sums and per-sample term parts (25 used)
constexpr int kLossCoefSlots = 16;        // per sample: gradient coefficients (9 used)
constexpr int kLossBatchSlots = 16;       // per batch: gradient scales of the terms (10 used)
constexpr size_t kLossRegionAlign = 256;  // bytes: every workspace region starts at this alignment

constexpr int loss_row_threads(int w) {
    const int t = (w + 31) / 32 * 32;
    return t > kLossRowMaxThreads ? kLossRowMaxThreads : t;
}
constexpr size_t loss_region_bytes(size_t doubles) {
    return (doubles * sizeof(double) + kLossRegionAlign - 1) / kLossRegionAlign * kLossRegionAlign;
}

// Launch geometry and workspace layout of one loss evaluation; a pure function of (n, h, w).
struct LossPlan {
    int n = 0, h = 0, w = 0;
    size_t cells = 0;       // n * h * w
    int row_blocks = 0;     // n * h blocks of row_threads
    int row_threads = 0;    // loss_row_threads(w)
    int sample_blocks = 0;  // n blocks of kLossSampleThreads
    int grad_blocks = 0;    // ceil(cells / kLossGradThreads)
    // Byte offsets of the workspace regions, each kLossRegionAlign-aligned.
    size_t off_rows = 0;     // n*h*kLossRowSlots doubles
    size_t off_yrow = 0;     // n*h*kLossYRowSlots doubles
    size_t off_samples = 0;  // n*kLossSampleSlots doubles
    size_t off_coefs = 0;    // n*kLossCoefSlots doubles
    size_t off_batch = 0;    // kLossBatchSlots doubles
    size_t workspace_bytes = 0;
};

// Throws rt::Error naming the value for n < 1, h < 1, w < 1, h > kLossMaxRows, or n*h*w >= 2^31.
LossPlan loss_plan(int n, int h, int w);

// Device workspace loss_forward_backward_cuda needs for (n, h, w): loss_plan(n, h, w).workspace_bytes.
// Throws as loss_plan, and for a bad config (stride, sigma, tau). Contents need no initialisation.
size_t loss_workspace_bytes(const LossConfig& cfg, int n, int h, int w);

// Launch geometry of mask_grid_cuda: one thread per grid cell.
constexpr size_t mask_grid_blocks(size_t cells) { return (cells + kMaskGridThreads - 1) / kMaskGridThreads; }

// ---- launchers: enqueue on ex.stream, never allocate or synchronise ----

// Soft valid mask (N,h,w) = stride x stride average of the input's mask channel (the loss's M, as
// mask_grid_avg_ref), and the min-pooled mask for decode (as mask_grid_min_ref), from the bf16 NHWC
// network input (N,H,W,C), mask channel mask_c; h = H/stride, w = W/stride. Either output may be
// null (not both). Bitwise equal to the references on the same (bf16-valued) input. One launch.
void mask_grid_cuda(const rt::Exec& ex, int n, int H, int W, int C, int mask_c, int stride, const kern::bf16* input,
                    float* valid_avg, float* valid_min);

// logits: device fp32 head outputs (HeadLogits<float>: n, h, w and the four NHWC tensors; offset
// 16-byte aligned, angle 8-byte aligned). valid_avg: (N,h,w) device soft valid mask. labels: n
// device records. grads: device tensors of the logits' shapes (same alignment), overwritten with
// grad_scale * d total / d logits; null = forward only (launches 1-3). out: one device record,
// overwritten. loss_sum (nullable): one device double, *loss_sum += total (the step's sum over its micro-batches).
// workspace: loss_workspace_bytes(cfg, n, h, w) bytes of device memory, 256-byte aligned.
// Labels are not validated on the device: num_fakes is clamped into 0..kMaxFakeGaps and non-finite
// coordinates give NaN terms (dropped by the NaN rule), where loss_forward_backward_ref throws.
void loss_forward_backward_cuda(const rt::Exec& ex, const LossConfig& cfg, const HeadLogits<float>& logits,
                                const float* valid_avg, const data::Label* labels, const HeadGrads<float>* grads,
                                double grad_scale, DeviceLossTerms* out, double* loss_sum, void* workspace,
                                size_t workspace_bytes);

}  // namespace model
