// The training step on the CPU reference backend:
//   zero activation grads -> forward (train) -> loss + d loss/d logits -> backward
//   [x gradient_accumulation_steps] -> global grad norm -> clip -> AdamW -> zero param grads.
// Parameter gradients are left zeroed after each optimizer step (ready for the next one).
// A non-finite loss or gradient norm skips the update and is counted. A skipped step changes
// nothing: weights, optimizer state, BN running statistics and num_batches_tracked (the forwards
// of the step's micro-batches updated them; they are restored from a copy taken before the first).
#pragma once
#include <cstdint>
#include <vector>

#include "data/label.h"
#include "kernels/adamw.h"
#include "model/loss.h"
#include "model/net.h"
#include "runtime/dist.h"

namespace model {

struct OptimConfig {
    kern::AdamWHyper adamw;
    double clip_grad_norm = 1.0;  // 0 = no clipping
};

struct StepStats {
    LossTerms loss;        // of the last micro-batch
    double mean_loss = 0;  // mean total over the micro-batches
    double grad_norm = 0;  // global L2 norm before clipping
    double clip_scale = 1;
    double lr = 0;
    bool skipped = false;  // non-finite: update not applied
};

class TrainStep {
public:
    TrainStep(SiderNet& net, const LossConfig& loss, const OptimConfig& optim);

    // Forward + loss + backward for the batch already in net.input(); parameter grads accumulate,
    // scaled by grad_scale (1/accumulation steps).
    LossTerms micro_step(const rt::Exec& ex, const data::Label* labels, double grad_scale);
    // Clip + AdamW at learning rate lr, over the grads accumulated since the last call.
    StepStats optimizer_step(const rt::Exec& ex, double lr);
    // Data parallel (docs/DISTRIBUTED.md): before the update, the parameter gradients are summed over
    // the ranks of `comm` (each rank scales its micro-steps by 1/(accum * world), so the sum is the
    // mean over every rank's samples), and so are the mean loss and the non-finite flag: every rank
    // computes the same update and skips the same steps. nullptr or a world of 1: a single process.
    void set_comm(rt::Comm* comm) { comm_ = comm; }
    // One micro-batch and one update.
    StepStats step(const rt::Exec& ex, const data::Label* labels, double lr);
    // Forward in eval or train mode and the loss value, no gradients.
    LossTerms evaluate(const rt::Exec& ex, const data::Label* labels, bool train_mode_bn);

    int64_t steps_done() const { return step_; }
    int64_t skipped_steps() const { return skipped_; }
    void set_steps_done(int64_t s) { step_ = s; }

private:
    void compute_valid_mask();

    SiderNet& net_;
    LossConfig loss_;
    OptimConfig optim_;
    std::vector<float> valid_;  // (N, h, w) soft valid mask
    int64_t step_ = 0, skipped_ = 0;
    int micro_ = 0;
    double loss_sum_ = 0;
    rt::Comm* comm_ = nullptr;
    LossTerms last_;
    bool nonfinite_ = false;
    std::vector<float> saved_buffers_;     // BN running stats before this step's first micro-batch
    std::vector<int64_t> saved_counters_;  // num_batches_tracked, likewise
};

}  // namespace model
