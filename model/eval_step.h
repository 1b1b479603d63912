// Evaluation on the CPU backend: forward with BN running statistics, the heads' activations,
// the masked decode of MODEL_SPEC §1.7 (min-pooled valid mask, argmax + offset, row alignment).
#pragma once
#include <vector>

#include "model/decode.h"
#include "model/net.h"

namespace model {

class EvalStep {
public:
    explicit EvalStep(SiderNet& net);
    // Decodes the batch in net.input(); out gets net.shape().batch entries.
    void run(const rt::Exec& ex, std::vector<Decoded>& out);

private:
    SiderNet& net_;
    std::vector<float> heat_gap_, heat_slider_, offset_, valid_min_;
};

}  // namespace model
