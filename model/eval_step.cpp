#include "model/eval_step.h"

#include "kernels/activation.h"

namespace model {

EvalStep::EvalStep(SiderNet& net, bool batch_stats) : net_(net), batch_stats_(batch_stats) {
    if (batch_stats_) net.shape().validate_for_training();
    const size_t cells = static_cast<size_t>(net.shape().batch) * net.grid_h() * net.grid_w();
    heat_gap_.resize(cells);
    heat_slider_.resize(cells);
    offset_.resize(cells * 4);
    valid_min_.resize(cells);
}

void EvalStep::run(const rt::Exec& ex, std::vector<Decoded>& out) {
    const NetShape& s = net_.shape();
    net_.forward(ex, batch_stats_);
    const HeadLogits<float> l = net_.logits();
    kern::sigmoid_forward(ex, heat_gap_.size(), l.gap, heat_gap_.data());
    kern::sigmoid_forward(ex, heat_slider_.size(), l.slider, heat_slider_.data());
    kern::tanh_half_forward(ex, offset_.size(), l.offset, offset_.data());
    mask_grid_min_ref(s.batch, s.height, s.width, s.channels, s.channels - 1, 4, net_.input(), valid_min_.data());
    out.resize(static_cast<size_t>(s.batch));
    decode_ref(s.batch, net_.grid_h(), net_.grid_w(), 4, heat_gap_.data(), heat_slider_.data(), offset_.data(),
               valid_min_.data(), out.data());
}

}  // namespace model
