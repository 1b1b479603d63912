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
    SF_CHECK(l.shape.k == 1 || l.shape.k == 3,
             "step model: layer %s has a %dx%d convolution; the model knows 1x1 "
             "and 3x3",
             l.name.c_str(), l.shape.k, l.shape.k);
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

// The kernel fusions l takes (LayerUse: kern::ConvPolicy's switches), each removing a BatchNorm pass's bytes
// and moving its FLOPs into the convolution kernel that now does its work:
//   stats_in_conv  the statistics pass's read of the conv output (its FLOPs in the forward's epilogue)
//   bn_dx_in_conv  the dx pass (x and dy read, dx written); the kernels that read dx read the BN's dy and x
//                  instead: one tensor more for the fused depthwise backward (charged to its dgrad part), one
//                  more for each of the 1x1 dgrad and wgrad, which both form dx (its FLOPs in each)
//   dw_fused_bwd   the wgrad's second read of the output's gradient (one kernel reads it once for both)
// The producer's reduction pass a consumer gathers (gathers_input_bn_sums) is moved by step_model itself.
void add_kernel_fusions(StepModelRow& r, const model::LayerUse& l, const Precision& p) {
    if (!l.kernels.stats_in_conv && !l.kernels.bn_dx_in_conv && !l.kernels.dw_fused_bwd && !l.kernels.pw_fused_bwd)
        return;
    const kern::ConvShape& s = l.shape;
    SF_CHECK(l.batchnorm && l.upsample == 1 && !s.bias,
             "step model: layer %s takes a kernel fusion, which only a ConvBN without upsample or bias can",
             l.name.c_str());
    const size_t rows = s.out().pixels();
    const double n = dbl(s.out().numel()) * p.act;  // the BN tensor's bytes
    if (l.kernels.stats_in_conv) {
        const double flops = bn_stats_forward_cost(rows, s.cout, p).simt_flops;
        r.at(StepPart::NormFwd).bytes -= n;
        r.at(StepPart::NormFwd).simt_flops -= flops;
        r.at(StepPart::ConvFwd).simt_flops += flops;
    }
    if (l.kernels.dw_fused_bwd) {
        SF_CHECK(s.groups > 1 && l.input_grad,
                 "step model: layer %s is no depthwise conv with an input gradient, "
                 "so its backward cannot run fused",
                 l.name.c_str());
        r.at(StepPart::ConvWgrad).bytes -= n;
    }
    if (l.kernels.bn_dx_in_conv) {
        SF_CHECK(l.input_grad && (s.k == 1 || l.kernels.dw_fused_bwd),
                 "step model: layer %s forms its BN's dx in a conv "
                 "backward it does not run (a 1x1 dgrad and wgrad, or the fused depthwise backward)",
                 l.name.c_str());
        const OpCost dx = bn_act_backward_dx_cost(rows, s.cout, l.act, p);
        r.at(StepPart::NormBwd).bytes -= dx.bytes;
        r.at(StepPart::NormBwd).simt_flops -= dx.simt_flops;
        const double vectors = dx.bytes - 3 * n;  // its per-channel coefficients, read where dx is formed
        r.at(StepPart::ConvDgrad).bytes += n + vectors;
        r.at(StepPart::ConvDgrad).simt_flops += dx.simt_flops;
        if (s.k == 1) {
            r.at(StepPart::ConvWgrad).bytes += n + vectors;
            r.at(StepPart::ConvWgrad).simt_flops += dx.simt_flops;
        }
    }
    if (l.kernels.pw_fused_bwd) {
        SF_CHECK(s.k == 1 && l.input_grad,
                 "step model: layer %s is no 1x1 conv with an input gradient, so its backward cannot run fused",
                 l.name.c_str());
        // The wgrad's second read of the output's gradient is gone (with the BN's dx formed on load: of the BN's
        // dy and its input); the dx formed once serves both GEMMs, so its FLOPs are counted once.
        r.at(StepPart::ConvWgrad).bytes -= n;
        if (l.kernels.bn_dx_in_conv) {
            const OpCost dx = bn_act_backward_dx_cost(rows, s.cout, l.act, p);
            r.at(StepPart::ConvWgrad).bytes -= n;
            r.at(StepPart::ConvWgrad).simt_flops -= dx.simt_flops;
        }
    }
}

// A consumer c whose backward-data gathers its producer's BN backward reductions (LayerUse::gathers_input_bn_sums;
// the producer: the layer just before it, whose output it reads, row `prod`): the producer's reduction pass
// (its x and dy read) is gone; its FLOPs move into c's dgrad, which reads the producer's x for them where it
// did not already (a 1x1 dgrad does not; the fused depthwise backward reads it for its wgrad anyway, and so
// does the fused 1x1 backward with that BN as its input prologue: the epilogue's read of the rows the pass
// has just staged for its wgrad is an L2 hit).
void move_reduction_to_consumer(StepModelRow& prod, const model::LayerUse& pl, StepModelRow& c,
                                const model::LayerUse& cl, const Precision& p) {
    const kern::Shape4 out = pl.shape.out(), in = cl.shape.in();
    SF_CHECK(pl.batchnorm && pl.upsample == 1 && !pl.shape.bias && out.n == in.n && out.h == in.h && out.w == in.w &&
                 out.c == in.c && cl.input_grad,
             "step model: layer %s gathers the BN reductions of the layer before it, %s, which is not its producer",
             cl.name.c_str(), pl.name.c_str());
    const OpCost red = bn_act_backward_reduce_cost(out.pixels(), out.c, pl.act, p);
    prod.at(StepPart::NormBwd).bytes -= red.bytes;
    prod.at(StepPart::NormBwd).simt_flops -= red.simt_flops;
    const double x = dbl(out.numel()) * p.act;
    const bool reads_x = cl.shape.k == 1 && !(cl.kernels.pw_fused_bwd && cl.input_bn_prologue);
    c.at(StepPart::ConvDgrad).bytes += red.bytes - 2 * x + (reads_x ? x : 0);
    c.at(StepPart::ConvDgrad).simt_flops += red.simt_flops;
}

// A head's conv2 (no BN of its own) gathering its slice of its producer's BN backward reductions (kern::HeadBnGrad,
// kern::ConvPolicy::head_bn_grad; the producer: the heads' conv1, or the merged heads' conv1, whose BN the conv2
// applies on load): the producer's reduction pass over those channels (their x and dy read) is gone; its FLOPs move
// into c's backward, which reads x for its prologue anyway and sums the dy it stores: no bytes added.
void move_head_reduction(StepModelRow& prod, const model::LayerUse& pl, StepModelRow& c, const model::LayerUse& cl,
                         const Precision& p) {
    const kern::Shape4 out = pl.shape.out(), in = cl.shape.in();
    SF_CHECK(pl.batchnorm && pl.bn_applied_by_consumer && pl.upsample == 1 && cl.input_bn_prologue && !cl.batchnorm &&
                 cl.input_grad && out.n == in.n && out.h == in.h && out.w == in.w && in.c <= out.c,
             "step model: layer %s gathers the BN reductions of %s, whose BN it does not apply on load",
             cl.name.c_str(), pl.name.c_str());
    const OpCost red = bn_act_backward_reduce_cost(out.pixels(), out.c, pl.act, p);
    const double share = dbl(in.c) / dbl(out.c);
    prod.at(StepPart::NormBwd).bytes -= red.bytes * share;
    prod.at(StepPart::NormBwd).simt_flops -= red.simt_flops * share;
    c.at(StepPart::ConvDgrad).simt_flops += red.simt_flops * share;
}

// A head's conv2 storing no dx (LayerKernels::input_grad_recomputed; kern::ConvPolicy::head_bn_dx): its backward's
// write of dx (its slice of the producer BN's dy) is gone, and the producer's BN dx pass reads the conv2's fp32
// logits' gradient (rows x cout) instead of that slice; the dy FLOPs (a cout-term dot product per element) move there.
void move_head_dx(StepModelRow& prod, const model::LayerUse& pl, StepModelRow& c, const model::LayerUse& cl,
                  const Precision& p) {
    const kern::Shape4 out = pl.shape.out(), in = cl.shape.in();
    SF_CHECK(pl.batchnorm && pl.bn_applied_by_consumer && cl.input_bn_prologue && cl.kernels.gathers_input_bn_sums &&
                 !cl.batchnorm && cl.input_grad && !cl.input_grad_accumulates && out.n == in.n && out.h == in.h &&
                 out.w == in.w && in.c <= out.c,
             "step model: layer %s stores no dx for %s's BN, which does not gather its reductions from it",
             cl.name.c_str(), pl.name.c_str());
    const double dx = dbl(in.numel()) * p.act, logits = dbl(cl.shape.out().numel()) * 4;
    const double flops = 2.0 * dbl(in.numel()) * cl.shape.cout;
    c.at(StepPart::ConvDgrad).bytes -= dx;
    prod.at(StepPart::NormBwd).bytes += logits - dx;
    prod.at(StepPart::NormBwd).simt_flops += flops;
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
    add_kernel_fusions(r, l, p);
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
    static const std::vector<std::string> kinds = {"conv 3x3 dense",
                                                   "conv 3x3 depthwise",
                                                   "conv 1x1",
                                                   "conv 1x1 up path",
                                                   "head 1x1 (fp32 logits)",
                                                   "upsample",
                                                   "weighted fuse",
                                                   "gradient sum",
                                                   "loss",
                                                   "optimizer",
                                                   "data"};
    return kinds;
}

std::vector<StepModelRow> step_model(const model::Planner& plan, const model::NetShape& shape, const Precision& p) {
    std::vector<StepModelRow> rows;
    const std::vector<model::LayerUse>& layers = plan.layers();
    const model::LayerUse* producer = nullptr;  // the last layer so far that leaves its BN to its consumer
    size_t producer_row = 0;                    // and its row
    for (size_t i = 0; i < layers.size(); ++i) {
        const model::LayerUse& l = layers[i];
        rows.push_back(layer_row_model(l, producer, p));
        if (l.kernels.gathers_input_bn_sums) {
            SF_CHECK(i > 0, "step model: the first layer %s cannot gather a producer's BN reductions", l.name.c_str());
            if (l.batchnorm) {
                move_reduction_to_consumer(rows[rows.size() - 2], layers[i - 1], rows.back(), l, p);
            } else {
                SF_CHECK(producer, "step model: layer %s gathers BN reductions, but no layer leaves its BN to it",
                         l.name.c_str());
                move_head_reduction(rows[producer_row], *producer, rows.back(), l, p);
            }
        }
        if (l.kernels.input_grad_recomputed) {
            SF_CHECK(producer, "step model: layer %s stores no dx, but no layer leaves its BN to it", l.name.c_str());
            move_head_dx(rows[producer_row], *producer, rows.back(), l, p);
        }
        if (l.bn_applied_by_consumer) {
            producer = &l;
            producer_row = rows.size() - 1;
        }
    }
    for (const model::OpUse& o : plan.op_uses()) rows.push_back(op_row_model(o, p));
    const size_t n = plan.table().flat_size;
    rows.push_back(step_row("loss", "loss", loss_cost(shape.batch, shape.height / 4, shape.width / 4)));
    rows.push_back(step_row("optimizer", "optimizer", grad_norm_cost(n) + adamw_cost(n)));
    // The input's preprocessing: one byte per pixel read, `channels` bytes written per pixel (as the
    // per-layer table has always charged it; the bf16 copy is counted in elements of one byte).
    rows.push_back(
        step_row("data: preprocess", "data",
                 eltwise_cost(static_cast<size_t>(shape.batch) * shape.height * shape.width, 1, shape.channels, 2, 1)));
    return rows;
}

std::vector<StepModelRow> step_model(const model::NetShape& shape, const Precision& p,
                                     const kern::ConvPolicy* kernels) {
    const model::SiderNetT<kern::bf16> net(shape, model::DryRun{kernels});
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
