// Evaluation on the CPU backend: forward with BN running statistics (or, on request, each batch's
// own statistics, as in training), the heads' activations, the masked decode of MODEL_SPEC §1.7
// (min-pooled valid mask, argmax + offset, row alignment).
#pragma once
#include <vector>

#include "model/decode.h"
#include "model/net.h"

namespace model {

class EvalStep {
public:
    // batch_stats: every BatchNorm normalizes with the batch's own mean and biased variance (the
    // train-mode forward; the network's running statistics are updated as a side effect and never
    // read), so each sample's result depends on the batch it is in. Default: the running statistics.
    explicit EvalStep(SiderNet& net, bool batch_stats = false);
    // Decodes the batch in net.input(); out gets net.shape().batch entries.
    void run(const rt::Exec& ex, std::vector<Decoded>& out);

private:
    SiderNet& net_;
    bool batch_stats_;
    std::vector<float> heat_gap_, heat_slider_, offset_, valid_min_;
};

}  // namespace model
