#include "model/train_step.h"

#include <algorithm>
#include <cmath>

#include "kernels/eltwise.h"
#include "runtime/error.h"

namespace model {

TrainStep::TrainStep(SiderNet& net, const LossConfig& loss, const OptimConfig& optim)
    : net_(net), loss_(loss), optim_(optim) {
    net.shape().validate_for_training();
    valid_.resize(static_cast<size_t>(net.shape().batch) * net.grid_h() * net.grid_w());
}

void TrainStep::compute_valid_mask() {
    const NetShape& s = net_.shape();
    mask_grid_avg_ref<float>(s.batch, s.height, s.width, s.channels, s.channels - 1, loss_.stride, net_.input(),
                             valid_.data());
}

LossTerms TrainStep::micro_step(const rt::Exec& ex, const data::Label* labels, double grad_scale) {
    if (micro_ == 0) {  // the step's first forward is about to move the running statistics
        const Planner& p = net_.plan();
        saved_buffers_.assign(p.buffers(), p.buffers() + p.table().buffer_floats);
        saved_counters_.assign(p.counters(), p.counters() + p.table().counters);
    }
    compute_valid_mask();
    net_.zero_activation_grads(ex);
    net_.forward(ex, true);
    HeadGrads<float> g = net_.logit_grads();
    const LossTerms t = loss_forward_backward_ref<float>(loss_, net_.logits(), valid_.data(), labels, &g);
    if (!std::isfinite(t.total)) nonfinite_ = true;
    if (grad_scale != 1.0) {
        const HeadLogits<float> l = net_.logits();
        const size_t cells = static_cast<size_t>(l.n) * l.h * l.w;
        float* grads[4] = {g.gap, g.slider, g.offset, g.angle};
        const int channels[4] = {1, 1, 4, 2};
        for (int k = 0; k < 4; ++k)
            for (size_t i = 0; i < cells * channels[k]; ++i) grads[k][i] = static_cast<float>(grads[k][i] * grad_scale);
    }
    net_.backward(ex);
    ++micro_;
    loss_sum_ += t.total;
    last_ = t;
    return t;
}

StepStats TrainStep::optimizer_step(const rt::Exec& ex, double lr) {
    SF_CHECK(micro_ > 0, "optimizer_step() without a micro_step() since the last update");
    const Planner& p = net_.plan();
    const size_t n = p.table().flat_size;
    StepStats s;
    s.loss = last_;
    s.mean_loss = loss_sum_ / micro_;
    s.lr = lr;
    if (comm_ && comm_->world() > 1) {
        // The mean of the ranks' mean losses (every rank the same micro-steps) and "any rank
        // non-finite"; then the gradient sum.
        double shared[2] = {s.mean_loss, nonfinite_ ? 1.0 : 0.0};
        comm_->allreduce(shared, 2, rt::ReduceOp::Sum);
        s.mean_loss = shared[0] / comm_->world();
        nonfinite_ = shared[1] > 0;
        comm_->allreduce(p.grad(), n, rt::ReduceOp::Sum);
    }
    s.grad_norm = kern::grad_norm(ex, n, p.grad());
    if (nonfinite_ || !std::isfinite(s.grad_norm)) {
        s.skipped = true;
        ++skipped_;
        std::copy(saved_buffers_.begin(), saved_buffers_.end(), p.buffers());
        std::copy(saved_counters_.begin(), saved_counters_.end(), p.counters());
    } else {
        s.clip_scale = kern::clip_factor(s.grad_norm, optim_.clip_grad_norm);
        kern::AdamWHyper h = optim_.adamw;
        h.lr = lr;
        ++step_;
        kern::adamw_step(ex, n, p.master(), p.grad(), p.adam_m(), p.adam_v(), h, step_, s.clip_scale);
    }
    kern::fill(ex, n, 0.0f, p.grad());
    micro_ = 0;
    loss_sum_ = 0;
    nonfinite_ = false;
    return s;
}

StepStats TrainStep::step(const rt::Exec& ex, const data::Label* labels, double lr) {
    micro_step(ex, labels, 1.0);
    return optimizer_step(ex, lr);
}

LossTerms TrainStep::evaluate(const rt::Exec& ex, const data::Label* labels, bool train_mode_bn) {
    compute_valid_mask();
    net_.forward(ex, train_mode_bn);
    return loss_forward_backward_ref<float>(loss_, net_.logits(), valid_.data(), labels, nullptr);
}

}  // namespace model
