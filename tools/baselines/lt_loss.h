// The LibTorch baseline's loss: tools/baselines/loss_vec.py op for op (lt_loss.cpp).
#pragma once
#include "lt_common.h"
#include "lt_data.h"
#include "lt_model.h"

namespace ltb {

// The loss terms' names, in LossOut::terms order (focal x2, offset, hard negative, angle, padding, y).
inline const char* const kTerms[] = {"focal_gap", "focal_slider", "offset", "hard_negative", "angle", "padding_bce",
                                     "y_axis"};

struct LossOut {
    Tensor terms[7];
    Tensor total;
};

// The 7 terms and the total of the `sider` (sider = true) or `corrected` loss on the heads' logits,
// computed in dt; inp is the preprocessed input (its last channel is the mask).
LossOut sider_loss(const Logits& lg, const Tensor& inp, const Batch& b, bool sider,
                   torch::ScalarType dt = torch::kFloat32);

}  // namespace ltb
