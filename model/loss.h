// The training loss of MODEL_SPEC §2, computed from the heads' last-conv outputs (logits) with
// the heads' activations applied inside (sigmoid, tanh*0.5, L2-normalise), as the fused GPU loss
// will. Targets (Gaussian heatmaps, offsets, rows) are rendered from the labels, never loaded.
// Two variants (docs/LOSS.md): `sider` reproduces the original including its quirks;
// `corrected` fixes each quirk of MODEL_SPEC §7 item 5.
// Layouts: every head tensor is NHWC on the output grid (N, h, w, c) with c = 1 (gap heatmap),
// 1 (slider heatmap), 4 (offset: du_gap, dv_gap, du_slider, dv_slider), 2 (angle: sin, cos).
#pragma once
#include <string>

#include "data/label.h"

namespace model {

enum class LossVariant { Sider, Corrected };
const char* loss_variant_name(LossVariant v);
LossVariant parse_loss_variant(const std::string& s);  // "sider" | "corrected"; throws otherwise

struct LossConfig {
    LossVariant variant = LossVariant::Sider;
    // Term weights (config/loss.yaml of 1.1.x).
    double w_heatmap = 1.0, w_offset = 1.0, w_hard_negative = 1.5, w_angle = 0.5, w_padding_bce = 0.3, w_y_axis = 0.8;
    // Focal (CenterNet variant).
    double focal_alpha = 1.5, focal_beta = 4.0, focal_pos_threshold = 0.8, focal_eps = 1e-8;
    double offset_beta = 1.0;  // SmoothL1 beta
    double hn_margin = 0.5;    // hard-negative margin
    double angle_pos_threshold = 0.7;
    double angle_eps = 1e-8;
    double pad_max_loss = 10.0;  // per-cell cap of the padding BCE
    double y_tau = 1.0, y_eps = 1e-8, y_row_ce_weight = 1.0, y_emd_weight = 0.3;
    double sigma = 1.5;  // Gaussian target sigma, grid cells
    int stride = 4;      // input pixels per grid cell
};

// Loss terms, unweighted, as the original logs them; total is the weighted sum of §2.1.
struct LossTerms {
    double focal_gap = 0, focal_slider = 0, offset = 0, hard_negative = 0, angle = 0, padding_bce = 0, y_axis = 0;
    double total = 0;
    bool angle_used = false;  // the angle term entered the total (a rotated sample and L_ang > 0)
    int dropped_terms = 0;    // terms dropped from the total for being NaN/Inf
};

template <class T>
struct HeadLogits {
    int n = 0, h = 0, w = 0;    // output grid
    const T* gap = nullptr;     // (N,h,w,1)
    const T* slider = nullptr;  // (N,h,w,1)
    const T* offset = nullptr;  // (N,h,w,4)
    const T* angle = nullptr;   // (N,h,w,2)
};

template <class T>
struct HeadGrads {  // d total / d logits, overwritten
    T* gap = nullptr;
    T* slider = nullptr;
    T* offset = nullptr;
    T* angle = nullptr;
};

// valid: (N,h,w) soft valid mask M = 4x4 average pool of the input's mask channel.
// labels: N records. grads may be null (forward only).
template <class T>
LossTerms loss_forward_backward_ref(const LossConfig& cfg, const HeadLogits<T>& logits, const T* valid,
                                    const data::Label* labels, const HeadGrads<T>* grads);

// Targets for one object on an (h, w) grid (MODEL_SPEC §3.2-3.3): cell u = int(x/stride),
// v = int(y/stride); heat (h,w) = exp(-((i-v)^2+(j-u)^2)/(2 sigma^2)) inside |i-v|,|j-u| <= int(3 sigma),
// else 0; offset (du, dv) = (x/stride - u - 0.5, y/stride - v - 0.5).
template <class T>
void render_heatmap_target(int h, int w, double x, double y, double sigma, int stride, T* heat);

// Grid masks from the input's mask channel. input (N,H,W,C) NHWC, mask in channel `mask_c`.
// avg: mean over each stride x stride cell (the loss's M); min: minimum (decode's validity).
template <class T>
void mask_grid_avg_ref(int n, int H, int W, int C, int mask_c, int stride, const float* input, T* out);
void mask_grid_min_ref(int n, int H, int W, int C, int mask_c, int stride, const float* input, float* out);

}  // namespace model
