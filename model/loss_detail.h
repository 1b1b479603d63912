// Internals of the CPU reference loss (model/loss.cpp, model/loss_terms.cpp, model/targets.cpp):
// the activated heads and rendered targets of one batch in double, and one function per loss
// term. Not part of the public API; the GPU loss and the trainer use model/loss.h only.
// Layouts: NHWC on the (h, w) output grid, as in model/loss.h.
#pragma once
#include <vector>

#include "data/label.h"
#include "model/loss.h"

namespace model::detail {

// Target cell and sub-cell offset of one object (MODEL_SPEC §3.1): u = int(x/stride),
// v = int(y/stride) (truncation), clamped into the grid when a coordinate sits on the far edge;
// (du, dv) = (x/stride - u - 0.5, y/stride - v - 0.5).
struct ObjectCell {
    int u = 0, v = 0;
    double du = 0, dv = 0;
};
ObjectCell object_cell(double x, double y, int h, int w, int stride);

// Everything the terms read, in double. Built once per call by loss.cpp.
struct LossInputs {
    const LossConfig* cfg = nullptr;
    const data::Label* labels = nullptr;  // N records
    int n = 0, h = 0, w = 0;
    std::vector<double> pg, ps;           // (N,h,w) sigmoid of the heatmap logits
    std::vector<double> off;              // (N,h,w,4) 0.5*tanh of the offset logits
    std::vector<double> ang;              // (N,h,w,2) normalize(normalize(z)), eps 1e-12
    std::vector<double> m;                // (N,h,w) soft valid mask M
    std::vector<double> yg, ys;           // (N,h,w) Gaussian targets
    std::vector<ObjectCell> gap, slider;  // per sample
    int hw() const { return h * w; }
};

// d (scale * term) / d activations, accumulated (+=); same layouts as LossInputs.
struct ActGrads {
    std::vector<double> pg, ps, off, ang;
};

// Each term returns its unweighted value; when g is not null it also adds scale * d value / d act
// into g. Constant guard values (0.01, 1.0, 0) carry no gradient.
double focal_term(const LossInputs& in, bool slider, double scale, ActGrads* g);
double offset_term(const LossInputs& in, double scale, ActGrads* g);
double hard_negative_term(const LossInputs& in, double scale, ActGrads* g);
double angle_term(const LossInputs& in, double scale, ActGrads* g);  // caller checks "a sample is rotated"
double padding_bce_term(const LossInputs& in, double scale, ActGrads* g);
double y_axis_term(const LossInputs& in, double scale, ActGrads* g);

// Grid coordinates (continuous cells) at which fake gap k of label l is sampled: the corrected
// variant uses (x/s, y/s); `sider` uses the preprocessor's integer cell divided by s again.
void fake_grid_coords(LossVariant v, const data::Label& l, int k, int stride, double* gx, double* gy);

// Y-axis target row of an object at pixel y: `sider` floor(y/s/4), corrected floor(y/s); clamped.
int y_axis_target_row(LossVariant v, double y, int stride, int h);

}  // namespace model::detail
