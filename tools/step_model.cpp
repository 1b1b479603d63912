// The training step's modelled work op by op (tools/step_model.h).
#include "tools/step_model.h"

#include <cmath>
#include <limits>

#include "runtime/error.h"

namespace tools {

namespace {

constexpr int kParts = static_cast<int>(StepPart::kCount);

double dbl(size_t v) { return static_cast<double>(v); }

const char* conv_kind(const model::LayerUse& l) {
    if (!l.batchnorm) return "head 1x1 (fp32 logits)";
    if (l.upsample > 1 || l.name.find(".up_") != std::string::npos) return "conv 1x1 up path";
    SF_CHECK(l.shape.k == 1 || l.shape.k == 3, "step model: layer %s has a %dx%d convolution; the model knows 1x1 "
             "and 3x3", l.name.c_str(), l.shape.k, l.shape.k);
    if (l.shape.groups > 1) return "conv 3x3 depthwise";
    return l.shape.k == 1 ? "conv 1x1" : "conv 3x3 dense";
}

// The BN + activation applied on load when l.input_bn_prologue: its FLOPs on every input element, in the
// forward and again in the backward-filter. producer: the layer whose BN that is.
void add_prologue_flops(StepModelRow& r, const model::LayerUse& l, const model::LayerUse* producer) {
    if (!l.input_bn_prologue) return;
    SF_CHECK(producer && producer->bn_applied_by_consumer,
             "step model: layer %s applies its producer's BN on load, but no layer before it leaves its BN to it",
             l.name.c_str());
    const double extra = dbl(l.shape.in().numel()) * bn_apply_flops(producer->act);
    r.at(StepPart::ConvFwd).simt_flops += extra;
    r.at(StepPart::ConvWgrad).simt_flops += extra;
}

// producer: the last layer before l that leaves its BN to its consumer (the layer before l in a fused
// LiteBlock or DSConv; a head's conv1, or the merged heads' conv1, for a head's conv2), whose BN + activation
// l applies on load when l.input_bn_prologue.
StepModelRow layer_row_model(const model::LayerUse& l, const model::LayerUse* producer, const Precision& p) {
    const kern::ConvShape& s = l.shape;
    StepModelRow r;
    r.name = l.name;
    r.kind = conv_kind(l);
    r.fwd_scope = l.name + " fwd";
    r.bwd_scope = l.name + " bwd";
    if (!l.batchnorm) {  // the heads' last 1x1: fp32 logits written, their fp32 gradients read twice
        r.at(StepPart::ConvFwd) = conv_forward_cost(s, p);
        if (l.input_grad) r.at(StepPart::ConvDgrad) = conv_backward_data_cost(s, l.input_grad_accumulates, p);
        r.at(StepPart::ConvWgrad) = conv_backward_filter_cost(s, true, p);
        const double extra = dbl(s.out().numel()) * (4 - p.act);
        r.at(StepPart::ConvFwd).bytes += extra;
        if (l.input_grad) r.at(StepPart::ConvDgrad).bytes += extra;
        r.at(StepPart::ConvWgrad).bytes += extra;
        add_prologue_flops(r, l, producer);
        return r;
    }
    // With upsample > 1 the upsample's backward is the only write of conv_lo.g: no read of it.
    const ConvBnParts c = conv_bn_act_parts(s, l.act, l.input_grad, l.input_grad_accumulates, l.upsample, false,
                                            l.residual, p, l.up_in_bn);
    r.at(StepPart::ConvFwd) = c.conv_fwd;
    r.at(StepPart::ConvDgrad) = c.conv_dgrad;
    r.at(StepPart::ConvWgrad) = c.conv_wgrad;
    r.at(StepPart::NormFwd) = c.norm_fwd;
    r.at(StepPart::NormBwd) = c.norm_bwd;
    r.at(StepPart::OtherFwd) = c.resample_fwd;
    r.at(StepPart::OtherBwd) = c.resample_bwd;
    // The fused LiteBlock: the producer's BN keeps only its statistics pass (its output is never
    // written nor read back); its consumer reads the pre-BN tensor (the same bytes) and applies BN +
    // activation to every input element it loads, in the forward and again in the backward-filter.
    if (l.bn_applied_by_consumer) r.at(StepPart::NormFwd) = bn_stats_forward_cost(s.out().pixels(), s.cout, p);
    add_prologue_flops(r, l, producer);
    return r;
}

StepModelRow op_row_model(const model::OpUse& o, const Precision& p) {
    const size_t n = o.in.numel();
    const int acc = o.grad_accumulates;
    StepModelRow r;
    r.name = o.name;
    r.bwd_scope = o.name + " bwd";
    switch (o.kind) {
        case model::OpUse::Kind::Upsample:
            r.kind = "upsample";
            r.fwd_scope = o.name + " fwd";
            r.at(StepPart::OtherFwd) = upsample_forward_cost(n, o.factor, p.act);
            r.at(StepPart::OtherBwd) = upsample_backward_cost(n, o.factor, p.act, acc > 0);
            break;
        case model::OpUse::Kind::WeightedFuse:
            // y = wa*a + wb*b (3 FLOPs); backward: reads a, b, dy, writes da and db (each read first when
            // it accumulates) and reduces dwa = sum(dy*a), dwb = sum(dy*b) (2 x 2 FLOPs, 2 for da, db).
            r.kind = "weighted fuse";
            r.fwd_scope = o.name + " fwd";
            r.at(StepPart::OtherFwd) = eltwise_cost(n, 2, 1, 3, p.act);
            r.at(StepPart::OtherBwd) = eltwise_cost(n, 3 + acc, 2, 6, p.act);
            break;
        case model::OpUse::Kind::GradSum:  // x.g (+)= sum.g: a copy when it is the first contribution
            r.kind = "gradient sum";
            r.at(StepPart::OtherBwd) = eltwise_cost(n, 1 + (acc > 0 ? 1 : 0), 1, acc > 0 ? 1 : 0, p.act);
            break;
    }
    return r;
}

StepModelRow step_row(const char* name, const char* kind, const OpCost& c) {
    StepModelRow r;
    r.name = name;
    r.kind = kind;
    r.fwd_scope = name;
    r.at(StepPart::Step) = c;
    return r;
}

}  // namespace

const char* step_part_name(StepPart p) {
    switch (p) {
        case StepPart::ConvFwd: return "conv fwd";
        case StepPart::ConvDgrad: return "conv dgrad";
        case StepPart::ConvWgrad: return "conv wgrad";
        case StepPart::NormFwd: return "bn+act fwd";
        case StepPart::NormBwd: return "bn+act bwd";
        case StepPart::OtherFwd: return "resample/eltwise fwd";
        case StepPart::OtherBwd: return "resample/eltwise bwd";
        case StepPart::Step: return "loss/optimizer/input";
        case StepPart::kCount: break;
    }
    return "?";
}

OpCost StepModelRow::fwd() const {
    return at(StepPart::ConvFwd) + at(StepPart::NormFwd) + at(StepPart::OtherFwd) + at(StepPart::Step);
}

OpCost StepModelRow::bwd() const {
    return at(StepPart::ConvDgrad) + at(StepPart::ConvWgrad) + at(StepPart::NormBwd) + at(StepPart::OtherBwd);
}

const std::vector<std::string>& step_kinds() {
    static const std::vector<std::string> kinds = {
        "conv 3x3 dense", "conv 3x3 depthwise", "conv 1x1",     "conv 1x1 up path", "head 1x1 (fp32 logits)",
        "upsample",       "weighted fuse",      "gradient sum", "loss",             "optimizer",
        "data"};
    return kinds;
}

std::vector<StepModelRow> step_model(const model::Planner& plan, const model::NetShape& shape, const Precision& p) {
    std::vector<StepModelRow> rows;
    const std::vector<model::LayerUse>& layers = plan.layers();
    const model::LayerUse* producer = nullptr;  // the last layer so far that leaves its BN to its consumer
    for (const model::LayerUse& l : layers) {
        rows.push_back(layer_row_model(l, producer, p));
        if (l.bn_applied_by_consumer) producer = &l;
    }
    for (const model::OpUse& o : plan.op_uses()) rows.push_back(op_row_model(o, p));
    const size_t n = plan.table().flat_size;
    rows.push_back(step_row("loss", "loss", loss_cost(shape.batch, shape.height / 4, shape.width / 4)));
    rows.push_back(step_row("optimizer", "optimizer", grad_norm_cost(n) + adamw_cost(n)));
    // The input's preprocessing: one byte per pixel read, `channels` bytes written per pixel (as the
    // per-layer table has always charged it; the bf16 copy is counted in elements of one byte).
    rows.push_back(step_row("data: preprocess", "data",
                            eltwise_cost(static_cast<size_t>(shape.batch) * shape.height * shape.width, 1,
                                         shape.channels, 2, 1)));
    return rows;
}

std::vector<StepModelRow> step_model(const model::NetShape& shape, const Precision& p) {
    const model::SiderNetT<kern::bf16> net(shape, model::DryRun{});
    return step_model(net.plan(), shape, p);
}

StepFloor step_floor(const std::vector<StepModelRow>& rows, const DevicePeaks& peaks) {
    StepFloor f;
    const std::vector<std::string>& kinds = step_kinds();
    std::vector<StepFloor::Group> by_kind(kinds.size());
    for (size_t k = 0; k < kinds.size(); ++k) by_kind[k].name = kinds[k];
    f.by_part.resize(kParts);
    for (int q = 0; q < kParts; ++q) f.by_part[static_cast<size_t>(q)].name = step_part_name(static_cast<StepPart>(q));
    for (const StepModelRow& r : rows) {
        size_t k = 0;
        while (k < kinds.size() && kinds[k] != r.kind) ++k;
        SF_CHECK(k < kinds.size(), "step model: row %s has an unknown class '%s'", r.name.c_str(), r.kind.c_str());
        StepFloor::Group& g = by_kind[k];
        ++g.rows;
        for (int q = 0; q < kParts; ++q) {
            const OpCost& c = r.part[q];
            if (c.bytes == 0 && c.flops() == 0) continue;
            const Roofline rl = roofline(c, 0, peaks);
            g.cost += c;
            g.floor_ms += rl.floor_ms;
            StepFloor::Group& pg = f.by_part[static_cast<size_t>(q)];
            pg.cost += c;
            pg.floor_ms += rl.floor_ms;
            ++pg.rows;
            f.cost += c;
            f.floor_ms += rl.floor_ms;
        }
    }
    for (StepFloor::Group& g : by_kind)
        if (g.rows > 0) f.by_kind.push_back(g);
    const Roofline whole = roofline(f.cost, 0, peaks);
    f.memory_ms = whole.memory_ms;
    f.compute_ms = whole.compute_ms;
    return f;
}

}  // namespace tools
