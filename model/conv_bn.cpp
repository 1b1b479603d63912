// ConvBN (model/layers.h): declare, forward and backward on both backends, and what it hands the kernels
// that fuse its BatchNorm (the prologue a consumer applies, the BN-backward epilogue a consumer gathers).
#include <algorithm>

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/bn_act_cuda.h"
#include "kernels/dwconv_cuda.h"
#include "kernels/eltwise.h"
#include "kernels/eltwise_cuda.h"
#include "kernels/pwconv_cuda.h"
#include "model/gpu_ops.h"
#include "model/layer_ops.h"
#include "model/layers.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace model {

template <class T>
void ConvBN<T>::declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int k, int stride,
                        int groups, kern::Act a, bool with_bias) {
    cs = kern::ConvShape{in.n, in.h, in.w, in.c, cout, k, stride, (k - 1) / 2, groups, with_bias};
    cs.validate();
    SF_CHECK(upsample >= 1, "%s: upsample factor %d must be >= 1", name.c_str(), upsample);
    SF_CHECK(upsample == 1 || (!with_bias && k == 1),
             "%s: an upsampled conv output must come from a 1x1 conv without bias (the order swap is exact only then)",
             name.c_str());
    act = a;
    // A conv bias folds into the BN (eval_mean; ConvBN::forward).
    SF_CHECK(!apply_in_consumer || (!kIsCpu<T> && upsample == 1 && sum_into == nullptr),
             "%s: only a CUDA layer without upsample or sum can leave its BN to its consumer", name.c_str());
    // A prologue runs on the project's kernels: a depthwise 3x3 conv (kernels/dwconv_cuda.h) or a 1x1 conv
    // (kernels/pwconv_cuda.h, at most kPwMaxPrologueK input channels), never upsampled.
    const bool prologue_kernel =
        kern::dwconv3x3_supported(cs) || (kern::pwconv_supported(cs) && cs.cin <= kern::kPwMaxPrologueK);
    SF_CHECK(!prologue || (!kIsCpu<T> && prologue->apply_in_consumer && prologue_kernel && upsample == 1 &&
                           prologue->conv.shape == in),
             "%s: a BN prologue needs a CUDA depthwise 3x3 or 1x1 conv the project's kernels support (%s), not "
             "upsampled, reading the conv output of a layer that leaves its BN to it",
             name.c_str(), cs.describe().c_str());
    fwd_scope = name + " fwd";
    bwd_scope = name + " bwd";
    // NetShape::fuse_up_bn (CUDA): the BN passes form the upsampled conv output on load from conv_lo
    // (kern::BnUpsampled), so only its gradient is stored.
    if constexpr (!kIsCpu<T>) up_in_bn = upsample > 1 && p.fuse_up_bn();
    LayerUse use{name, cs, true, a, input_grad, upsample, sum_into != nullptr};
    use.up_in_bn = up_in_bn;
    use.bn_applied_by_consumer = apply_in_consumer;
    use.input_bn_prologue = prologue != nullptr;
    p.layer(use);
    SF_CHECK(!external_params || !kIsCpu<T>, "%s: only a CUDA layer takes its parameters from its caller",
             name.c_str());
    if (!external_params) {
        weight = p.param(name + ".conv.weight", {cout, in.c / groups, k, k}, true);
        if (with_bias) bias = p.param(name + ".conv.bias", {cout}, false);
        gamma = p.param(name + ".bn.weight", {cout}, false);
        beta = p.param(name + ".bn.bias", {cout}, false);
        running_mean = p.buffer(name + ".bn.running_mean", {cout});
        running_var = p.buffer(name + ".bn.running_var", {cout});
        num_batches_tracked = p.counter(name + ".bn.num_batches_tracked");
    }
    save_mean = p.scratch(static_cast<size_t>(cout), "bn mean");
    save_invstd = p.scratch(static_cast<size_t>(cout), "bn invstd");
    if (apply_in_consumer && with_bias) eval_mean = p.scratch(static_cast<size_t>(cout), "bn eval mean (bias folded)");
    // conv.g lives only inside backward() (BN backward writes it, the conv's backward reads it);
    // the planner's liveness plan gives it that lifetime like every other gradient.
    // With upsample > 1 the same holds for conv_lo.g (the upsample's backward writes it).
    kern::Shape4 bn_shape = cs.out();
    if (upsample > 1) {
        conv_lo = p.act<T>(cs.out(), "conv (before upsample)");
        bn_shape.h *= upsample;
        bn_shape.w *= upsample;
    }
    conv = up_in_bn ? p.grad_only<T>(bn_shape, "conv upsampled (formed in the BN's loads)")
                    : p.act<T>(bn_shape, upsample > 1 ? "conv upsampled" : "conv");
    sums = sum_into != nullptr;
    if (sums) {
        const kern::Shape4& t = sum_into->shape;
        SF_CHECK(t.n == bn_shape.n && t.h == bn_shape.h && t.w == bn_shape.w && t.c == bn_shape.c,
                 "%s: its output (%d,%d,%d,%d) cannot be added into a sum of shape (%d,%d,%d,%d)", name.c_str(),
                 bn_shape.n, bn_shape.h, bn_shape.w, bn_shape.c, t.n, t.h, t.w, t.c);
        sum = *sum_into;
    }
    if constexpr (kIsCpu<T>) {
        bn = p.act<T>(bn_shape, "bn");
        out = act == kern::Act::None ? bn : p.act<T>(bn_shape, "act");
    } else {
        if (apply_in_consumer)
            out = p.grad_only<T>(bn_shape, "bn+act (applied by its consumer)");
        else
            out = sums ? sum : p.act<T>(bn_shape, "bn+act");  // fused: BN output is never stored (nor, summing, out)
        bn = out;
        const size_t rows = bn_shape.pixels();
        ws_floats = kern::bn_act_workspace_floats(rows, cout);
        if (with_bias) ws_floats = std::max(ws_floats, kern::column_sum_workspace_floats(rows, cout));
        if (prologue)  // the prologue wgrad's partials (the custom kernel, whatever GpuOps picks for the shape)
            ws_floats = std::max(
                ws_floats, cs.k == 1 ? kern::pwconv_wgrad_workspace_floats(cs) : kern::dwconv3x3_workspace_floats(cs));
        ops = p.gpu_ops();
        // A stride-1 depthwise ConvBN whose BN backward may fold into the fused conv backward: the BN's
        // workspace (its coefficients stay there) followed by the fused kernel's partials.
        fused_bn = p.dw_fused_bn() && input_grad && upsample == 1 && !with_bias && kern::dwconv3x3_fused_supported(cs);
        // A consumer gathering its producer's BN backward reductions: the epilogue's partials.
        const bool bn_grad = grad_sums_of != nullptr;
        if (fused_bn) ws_floats = std::max(ws_floats, GpuOps::dw_fused_bn_workspace_floats(cs, bn_grad));
        if (bn_grad && cs.k == 1 && kern::pwconv_supported(cs))
            ws_floats = std::max(ws_floats, kern::pwconv_dgrad_workspace_floats(cs));
        if (grad_sums_by || sums_by_head) bn_coef = p.scratch(2 * static_cast<size_t>(cout), "bn grad coef");
        if (sums_by_head) {  // the heads' conv2 gather this BN's reductions (kern::HeadBnGrad)
            SF_CHECK(apply_in_consumer && input_grad && upsample == 1,
                     "%s: only a layer whose consumers apply its BN (the heads' conv1) leaves its BN's backward "
                     "reductions to them",
                     name.c_str());
            bn_part = p.scratch(kern::head_conv_bn_grad_floats(rows, cout), "bn grad partials (the heads')");
        }
        pw_stats = p.pw_stats() && upsample == 1 && !with_bias && kern::pwconv_supported(cs) &&
                   (!prologue || cs.cin <= kern::kPwMaxPrologueK);
        if (pw_stats) ws_floats = std::max(ws_floats, kern::pwconv_workspace_floats(cs));
        dw_stats = p.dw_stats() && upsample == 1 && !with_bias && kern::dwconv3x3_supported(cs);
        if (dw_stats) ws_floats = std::max(ws_floats, kern::dwconv3x3_stats_workspace_floats(cs));
        // A consumer of its producer's grad sums (pw_bn_grad) runs the dgrad with both the prologue and that
        // epilogue, whose partials then share the wgrad's place in the workspace.
        pw_fused_bn = p.pw_bn_bwd() && input_grad && upsample == 1 && !with_bias && kern::pwconv_supported(cs) &&
                      cs.cout <= kern::kPwMaxPrologueK && (!prologue || cs.cin <= kern::kPwMaxPrologueK);
        if (pw_fused_bn)
            ws_floats = std::max(ws_floats, GpuOps::pw_fused_bn_workspace_floats(cs, bn_grad, p.pw_fused_bwd()));
        // The kernel fusions this layer takes, for the step's cost model (LayerUse): GpuOps applies the same
        // rules at run time (a 1x1 conv's where the project's kernel runs the shape).
        // The fused 1x1 backward's rule: the activations of the input prologue, of the BN-backward prologue (the
        // layer's own BN, pw_fused_bn) and of the producer's BN whose reductions the dgrad gathers (grad_sums_of).
        kern::DwPrologue pro_act;
        pro_act.act = prologue ? prologue->act : kern::Act::None;
        kern::DwBnBackward bnb_act;
        bnb_act.act = act;
        kern::BnGradSums bng_act;
        bng_act.act = bn_grad ? grad_sums_of->act : kern::Act::None;
        pw_fused_bwd =
            p.pw_fused_bwd() && input_grad && cs.k == 1 && upsample == 1 && !with_bias &&
            kern::pwconv_backward_fused_supported(cs, prologue ? &pro_act : nullptr, pw_fused_bn ? &bnb_act : nullptr,
                                                  bn_grad ? &bng_act : nullptr);
        LayerKernels lk;
        lk.stats_in_conv = pw_stats || dw_stats;
        lk.pw_fused_bwd = pw_fused_bwd;
        lk.dw_fused_bwd = p.dw_fused_bwd() && input_grad && kern::dwconv3x3_fused_supported(cs);
        lk.bn_dx_in_conv = pw_fused_bn || (fused_bn && lk.dw_fused_bwd);
        lk.gathers_input_bn_sums = bn_grad && input_grad && (cs.k == 1 ? kern::pwconv_supported(cs) : lk.dw_fused_bwd);
        p.layer_kernels(name, lk);
        ws = p.workspace(ws_floats);
        p.conv(cs, input_grad, prologue != nullptr, prologue ? prologue->act : kern::Act::None);
        if (pw_stats || dw_stats || (bn_grad && cs.k == 1))
            p.conv_epilogues(cs, pw_stats || dw_stats, bn_grad && cs.k == 1,
                             grad_sums_of ? grad_sums_of->act : kern::Act::None);
        if (pw_fused_bn) p.conv_bn_backward(cs, act);
        if (pw_fused_bwd) p.conv_pw_fused_backward(cs);
    }
}

template <class T>
void ConvBN<T>::forward(const rt::Exec& ex, const ActT<T>& x, bool train, const T* residual) const {
    const rt::Scope scope(ex, fwd_scope);
    const size_t rows = conv.shape.pixels();
    SF_CHECK(!sums || residual, "%s: a layer that adds into a sum needs the residual",
             fwd_scope.substr(0, fwd_scope.size() - 4).c_str());
    if (!sums) residual = nullptr;
    if constexpr (kIsCpu<T>) {
        kern::conv_forward(ex, cs, x.v, weight.w, bias.w, conv_out().v);
        if (upsample > 1) ops::upsample_forward(ex, conv_lo.shape, upsample, conv_lo.v, conv.v);
        if (train) {
            kern::batchnorm_forward_train(ex, rows, cs.cout, conv.v, gamma.w, beta.w, bn.v, save_mean, save_invstd,
                                          running_mean, running_var, kBnMomentum, kBnEps);
            ++*num_batches_tracked;  // host-side counter on the CPU backend
        } else {
            kern::batchnorm_forward_eval(ex, rows, cs.cout, conv.v, gamma.w, beta.w, running_mean, running_var, kBnEps,
                                         bn.v);
        }
        if (act != kern::Act::None) kern::act_forward(ex, act, bn.numel(), bn.v, out.v);
        if (sums) ops::add(ex, sum.numel(), residual, out.v, sum.v);
    } else {
        // A conv with its producer's BN prologue runs the project's kernel, so its statistics epilogue always
        // can (a 1x1 conv with GpuOps::pw_stats, a depthwise one with GpuOps::dw_stats); without a prologue
        // where GpuOps picked that kernel (conv_forward_stats_runs).
        if (train && (pw_stats || dw_stats) && (prologue || ops->conv_forward_stats_runs(cs))) {
            // The BN statistics from the conv's epilogue: then only the apply pass.
            kern::BnStatsOut st;
            st.save_mean = save_mean;
            st.save_invstd = save_invstd;
            st.running_mean = running_mean;
            st.running_var = running_var;
            st.momentum = kBnMomentum;
            st.eps = kBnEps;
            if (prologue)
                ops->conv_forward_prologue(ex, cs, prologue->conv.v, weight.h, conv.v, prologue->dw_prologue(true), &st,
                                           ws, ws_floats);
            else
                ops->conv_forward_stats(ex, cs, x.v, weight.h, conv.v, st, ws, ws_floats);
            if (!apply_in_consumer)
                kern::bn_act_apply_train(ex, act, rows, cs.cout, conv.v, gamma.w, beta.w, save_mean, save_invstd, out.v,
                                         residual, ops->bn_row_batch());
            return;
        }
        if (prologue) {
            const kern::DwPrologue pro = prologue->dw_prologue(train);
            ops->conv_forward_prologue(ex, cs, prologue->conv.v, weight.h, conv.v, pro);
        } else {
            ops->conv_forward(ex, cs, x.v, weight.h, conv_out().v);
        }
        if (apply_in_consumer) {  // the consumer applies BN + activation: only the statistics here
            // With a conv bias (the heads' conv1, NetShape::fuse_head_bn) the conv wrote y without it, and the
            // bias folds into the BN: in train mode BN(y + b) = BN(y) (the batch mean takes b along, the
            // variance is y's), and the running mean, the mean of y + b, is the plain update plus momentum * b;
            // in eval mode BN(y + b) is BN(y) with running_mean - b as its mean (eval_mean, which dw_prologue
            // hands the consumer).
            if (train) {
                kern::bn_stats_train(ex, rows, cs.cout, conv.v, save_mean, save_invstd, running_mean, running_var,
                                     kBnMomentum, kBnEps, ws, ws_floats, ops->bn_row_batch());
                if (cs.bias)
                    kern::axpy_f32_cuda(ex, static_cast<size_t>(cs.cout), running_mean, static_cast<float>(kBnMomentum),
                                        bias.w, running_mean);
            } else if (cs.bias) {
                kern::axpy_f32_cuda(ex, static_cast<size_t>(cs.cout), running_mean, -1.0f, bias.w, eval_mean);
            }
            return;
        }
        if (cs.bias) kern::bias_add_bf16_cuda(ex, rows, cs.cout, bias.w, conv.v);  // never with upsample > 1
        // fuse_up_bn: the BN passes upsample conv_lo as they load it (conv holds no values).
        const kern::BnUpsampled up = upsampled();
        if (upsample > 1 && !up_in_bn) ops::upsample_forward(ex, conv_lo.shape, upsample, conv_lo.v, conv.v);
        // num_batches_tracked: every counter of the network is advanced by one launch per
        // train forward (SiderNetT::forward), not per layer.
        // With sum_into, out is the sum: out = residual + act(bn(conv)) in the same pass.
        if (train)
            kern::bn_act_forward_train(ex, act, rows, cs.cout, conv.v, gamma.w, beta.w, out.v, save_mean, save_invstd,
                                       running_mean, running_var, kBnMomentum, kBnEps, ws, ws_floats, residual,
                                       ops->bn_row_batch(), up_in_bn ? &up : nullptr);
        else
            kern::bn_act_forward_eval(ex, act, rows, cs.cout, conv.v, gamma.w, beta.w, running_mean, running_var,
                                      kBnEps, out.v, residual, ops->bn_row_batch(), up_in_bn ? &up : nullptr);
    }
}

template <class T>
void ConvBN<T>::backward(const rt::Exec& ex, const ActT<T>& x) const {
    const rt::Scope scope(ex, bwd_scope);
    const size_t rows = conv.shape.pixels();
    const T* dy = result().g;  // with sum_into, the sum's gradient: the output's, as the sum is out + residual
    // model/layer_ops.h: each op reports the gradients it reads and writes to the backward's tape.
    if constexpr (kIsCpu<T>) {
        const T* dbn = dy;  // the BN output's gradient: dy itself without an activation (bn == out)
        if (act != kern::Act::None) {
            ops::act_backward(ex, act, bn.numel(), bn.v, dy, bn.g);
            dbn = bn.g;
        }
        ops::batchnorm_backward(ex, rows, cs.cout, conv.v, dbn, gamma.w, save_mean, save_invstd, conv.g, gamma.g,
                                beta.g);
        if (upsample > 1) ops::upsample_backward(ex, conv_lo.shape, upsample, conv.g, conv_lo.g);
        if (x.g) ops::conv_backward_data(ex, cs, conv_out().g, weight.w, x.g);
        ops::conv_backward_filter(ex, cs, x.v, conv_out().g, weight.g, bias.g);
    } else {
        // The planner traces the backward on a CPU Exec before GpuOps is prepared. The fused conv backward
        // reports the same reads and writes as the two passes it replaces. With the BN's dx inside it, the
        // BN's dy is read while x.g is written, which the trace must see (so that the planner never gives
        // them the same memory): a layer declared for it traces that op, and at run time the separate
        // passes (GpuOps chose cuDNN for the shape) write the same gradients in the same order.
        const bool fused = x.g && ex.is_cuda() && ops->dw_fused_backward(cs);
        // The fused LiteBlock's fused backward reads the expand's pre-BN output through its BN + activation,
        // and under GpuOps::dw_bn_grad gathers that BN's backward reductions from the x.g it stores.
        const kern::DwPrologue pro = prologue ? prologue->dw_prologue(true) : kern::DwPrologue{};
        const kern::DwPrologue* fused_pro = prologue ? &pro : nullptr;
        const T* fused_x = prologue ? prologue->conv.v : x.v;
        // The producer's BN reductions this layer's backward-data gathers (grad_sums_of): in the fused
        // depthwise kernel (the fused LiteBlock's expand), or in the project's 1x1 dgrad.
        kern::BnGradSums sums_of_producer;
        const kern::BnGradSums* bng = nullptr;
        if (x.g && gathers_grad_sums(ex)) {
            sums_of_producer = grad_sums_of->bn_grad_sums();
            bng = &sums_of_producer;
        }
        const bool sums_ran = grad_sums_ran(ex);  // this layer's own reductions, gathered by its consumer
        if (fused_bn && x.g && (!ex.is_cuda() || fused)) {
            ops::bn_dw_backward_fused(ops, ex, act, cs, conv.v, dy, gamma.w, beta.w, save_mean, save_invstd, gamma.g,
                                      beta.g, conv.g, fused_x, weight.h, x.g, weight.g, ws, ws_floats, fused_pro, bng,
                                      sums_ran ? bn_coef : nullptr);
            return;
        }
        // A 1x1 ConvBN with its BN's dx formed in the project's dgrad and wgrad loads (GpuOps::pw_bn_bwd): traced
        // as that op wherever it is declared; at run time the separate passes where cuDNN runs the shape.
        if (pw_fused_bn && x.g && (!ex.is_cuda() || ops->pw_fused_bn_runs(cs))) {
            ops::bn_pw_backward_fused(ops, ex, act, cs, conv.v, dy, gamma.w, beta.w, save_mean, save_invstd, gamma.g,
                                      beta.g, conv.g, fused_x, weight.h, x.g, weight.g, ws, ws_floats, fused_pro,
                                      sums_ran ? bn_coef : nullptr, bng);
            return;
        }
        if (n_dx_heads > 0) {  // kern::ConvPolicy::head_bn_dx: the dx pass forming dy from the heads' logits' gradient
            SF_CHECK(sums_by_head && (sums_ran || !ex.is_cuda()),
                     "%s: the heads store no dx only where they gather its BN reductions", bwd_scope.c_str());
            kern::HeadDxSource src[4];
            for (int i = 0; i < n_dx_heads; ++i) {
                const HeadDxRef& h = dx_heads[i];
                SF_CHECK(h.logits && h.weight, "%s: head %d of %d not linked", bwd_scope.c_str(), i, n_dx_heads);
                src[i] = {h.channel, h.cin, h.cout, h.logits->g, h.weight->w};
            }
            ops::head_bn_dx(ex, act, rows, cs.cout, conv.v, dy, src, n_dx_heads, gamma.w, beta.w, save_mean,
                            save_invstd, bn_coef, conv.g);
        } else if (sums_ran) {  // the consumer's backward-data gathered the reductions: the dx pass only
            ops::bn_act_backward_dx(ops, ex, act, rows, cs.cout, conv.v, dy, gamma.w, beta.w, save_mean, save_invstd,
                                    bn_coef, conv.g);
        } else {
            const kern::BnUpsampled up = upsampled();
            ops::bn_act_backward(ops, ex, act, rows, cs.cout, conv.v, dy, gamma.w, beta.w, save_mean, save_invstd,
                                 conv.g, gamma.g, beta.g, ws, ws_floats, up_in_bn ? &up : nullptr);
        }
        if (cs.bias) ops::column_sum(ex, rows, cs.cout, conv.g, bias.g, ws, ws_floats);
        if (upsample > 1)
            ops::upsample_backward(ex, conv_lo.shape, upsample, conv.g, conv_lo.g, ops && ops->upsample_row_loads());
        if (fused) {
            ops::conv_backward_fused(ops, ex, cs, fused_x, conv_out().g, weight.h, x.g, weight.g, fused_pro, bng);
            return;
        }
        // The fused 1x1 dgrad + wgrad (GpuOps::pw_fused_backward; with bng, the producer's reductions in its
        // epilogue): reported as the two passes below.
        if (pw_fused_bwd && x.g && ex.is_cuda() && ops->pw_fused_backward(cs, fused_pro, bng)) {
            ops::conv_backward_fused(ops, ex, cs, fused_x, conv_out().g, weight.h, x.g, weight.g, fused_pro, bng);
            return;
        }
        if (x.g && bng)
            ops::conv_backward_data_bn_grad(ops, ex, cs, conv_out().g, weight.h, x.g, *bng, ws, ws_floats);
        else if (x.g)
            ops::conv_backward_data(ops, ex, cs, conv_out().g, weight.h, x.g);
        if (prologue) {
            ops::conv_backward_filter_prologue(ex, cs, prologue->conv.v, conv.g, weight.g, ws, ws_floats, pro);
        } else {
            ops::conv_backward_filter(ops, ex, cs, x.v, conv_out().g, weight.g);
        }
    }
}

template <class T>
kern::HeadBnGrad ConvBN<T>::head_bn_grad(int channel) const {
    SF_CHECK(sums_by_head, "%s: its BN's reductions are not gathered by the heads", bwd_scope.c_str());
    return kern::HeadBnGrad{bn_part, cs.cout, channel};
}

template <class T>
void ConvBN<T>::finalize_head_sums(const rt::Exec& ex) const {
    SF_CHECK(sums_by_head, "%s: its BN's reductions are not gathered by the heads", bwd_scope.c_str());
    if (!ex.is_cuda()) return;  // the traced backward launches nothing
    const size_t rows = conv.shape.pixels();
    kern::bn_act_backward_finalize(ex, rows, cs.cout, kern::head_conv_chunks(rows), bn_part, gamma.g, beta.g, bn_coef);
}

template <class T>
kern::BnUpsampled ConvBN<T>::upsampled() const {
    kern::BnUpsampled up;
    if constexpr (!kIsCpu<T>) {
        if (up_in_bn) {
            up.lo = conv_lo.v;
            up.lo_shape = conv_lo.shape;
            up.factor = upsample;
        }
    }
    return up;
}

template <class T>
kern::DwPrologue ConvBN<T>::dw_prologue(bool train) const {
    kern::DwPrologue pro;
    pro.act = act;
    pro.gamma = gamma.w;
    pro.beta = beta.w;
    pro.mean = train ? save_mean : eval_mean ? eval_mean : running_mean;  // eval_mean: the conv bias folded
    pro.invstd = train ? save_invstd : running_var;
    pro.eval = !train;
    pro.eps = kBnEps;
    return pro;
}

template <class T>
kern::BnGradSums ConvBN<T>::bn_grad_sums() const {
    kern::BnGradSums b;
    b.act = act;
    if constexpr (!kIsCpu<T>) b.x = conv.v;  // the CPU backend never fuses
    b.gamma = gamma.w;
    b.beta = beta.w;
    b.mean = save_mean;
    b.invstd = save_invstd;
    b.dgamma = gamma.g;
    b.dbeta = beta.g;
    b.coef = bn_coef;
    return b;
}

template <class T>
bool ConvBN<T>::gathers_grad_sums(const rt::Exec& ex) const {
    if (!grad_sums_of || !ex.is_cuda()) return false;
    return cs.k == 1 ? ops->dgrad_bn_grad_runs(cs) : ops->dw_fused_backward(cs);
}

template struct ConvBN<float>;
template struct ConvBN<kern::bf16>;

}  // namespace model
