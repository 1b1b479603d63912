#include "model/layers.h"

#include "kernels/activation.h"
#include "kernels/batchnorm.h"
#include "kernels/eltwise.h"
#include "kernels/upsample.h"
#include "runtime/error.h"

namespace model {

std::string scale_name(int level) { return "1_" + std::to_string(4 << level); }

// ---- ConvBN ----

void ConvBN::declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int k, int stride,
                     int groups, kern::Act a, bool with_bias) {
    cs = kern::ConvShape{in.n, in.h, in.w, in.c, cout, k, stride, (k - 1) / 2, groups, with_bias};
    cs.validate();
    act = a;
    weight = p.param(name + ".conv.weight", {cout, in.c / groups, k, k}, true);
    if (with_bias) bias = p.param(name + ".conv.bias", {cout}, false);
    gamma = p.param(name + ".bn.weight", {cout}, false);
    beta = p.param(name + ".bn.bias", {cout}, false);
    running_mean = p.buffer(name + ".bn.running_mean", {cout});
    running_var = p.buffer(name + ".bn.running_var", {cout});
    num_batches_tracked = p.counter(name + ".bn.num_batches_tracked");
    save_mean = p.scratch(static_cast<size_t>(cout), "bn mean");
    save_invstd = p.scratch(static_cast<size_t>(cout), "bn invstd");
    conv = p.act(cs.out(), "conv");
    bn = p.act(cs.out(), "bn");
    out = act == kern::Act::None ? bn : p.act(cs.out(), "act");
}

void ConvBN::forward(const rt::Exec& ex, const Act& x, bool train) const {
    kern::conv_forward(ex, cs, x.v, weight.w, bias.w, conv.v);
    const size_t rows = conv.shape.pixels();
    if (train) {
        kern::batchnorm_forward_train(ex, rows, cs.cout, conv.v, gamma.w, beta.w, bn.v, save_mean, save_invstd,
                                      running_mean, running_var, kBnMomentum, kBnEps);
        ++*num_batches_tracked;  // host-side counter on the CPU backend
    } else {
        kern::batchnorm_forward_eval(ex, rows, cs.cout, conv.v, gamma.w, beta.w, running_mean, running_var, kBnEps,
                                     bn.v);
    }
    if (act != kern::Act::None) kern::act_forward(ex, act, bn.numel(), bn.v, out.v);
}

void ConvBN::backward(const rt::Exec& ex, const Act& x) const {
    if (act != kern::Act::None) kern::act_backward(ex, act, bn.numel(), bn.v, out.g, bn.g);
    kern::batchnorm_backward(ex, conv.shape.pixels(), cs.cout, conv.v, bn.g, gamma.w, save_mean, save_invstd, conv.g,
                             gamma.g, beta.g);
    if (x.g) kern::conv_backward_data(ex, cs, conv.g, weight.w, x.g);
    kern::conv_backward_filter(ex, cs, x.v, conv.g, weight.g, bias.g);
}

// ---- Conv ----

void Conv::declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout) {
    cs = kern::ConvShape{in.n, in.h, in.w, in.c, cout, 1, 1, 0, 1, true};
    cs.validate();
    weight = p.param(name + ".weight", {cout, in.c, 1, 1}, true);
    bias = p.param(name + ".bias", {cout}, false);
    out = p.act(cs.out(), "head logits");
}

void Conv::forward(const rt::Exec& ex, const Act& x) const { kern::conv_forward(ex, cs, x.v, weight.w, bias.w, out.v); }

void Conv::backward(const rt::Exec& ex, const Act& x) const {
    kern::conv_backward_data(ex, cs, out.g, weight.w, x.g);
    kern::conv_backward_filter(ex, cs, x.v, out.g, weight.g, bias.g);
}

// ---- LiteBlock ----

void LiteBlock::declare(Planner& p, const std::string& name, const kern::Shape4& in) {
    const int c = in.c, hidden = 2 * in.c;
    expand.declare(p, name + ".pw_expand", in, hidden, 1, 1, 1, kern::Act::Silu);
    dw.declare(p, name + ".dw_conv", expand.out.shape, hidden, 3, 1, hidden, kern::Act::Silu);
    project.declare(p, name + ".pw_project", dw.out.shape, c, 1, 1, 1, kern::Act::None);
    out = p.act(in, "liteblock out");
}

void LiteBlock::forward(const rt::Exec& ex, const Act& x, bool train) const {
    expand.forward(ex, x, train);
    dw.forward(ex, expand.out, train);
    project.forward(ex, dw.out, train);
    kern::add(ex, out.numel(), x.v, project.out.v, out.v);
}

void LiteBlock::backward(const rt::Exec& ex, const Act& x) const {
    kern::accumulate(ex, out.numel(), out.g, project.out.g);
    project.backward(ex, dw.out);
    dw.backward(ex, expand.out);
    expand.backward(ex, x);
    kern::accumulate(ex, out.numel(), out.g, x.g);
}

// ---- DSConv ----

void DSConv::declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int stride) {
    dw.declare(p, name + ".dw_conv", in, in.c, 3, stride, in.c, kern::Act::Silu);
    pw.declare(p, name + ".pw_conv", dw.out.shape, cout, 1, 1, 1, kern::Act::Silu);
}

void DSConv::forward(const rt::Exec& ex, const Act& x, bool train) const {
    dw.forward(ex, x, train);
    pw.forward(ex, dw.out, train);
}

void DSConv::backward(const rt::Exec& ex, const Act& x) const {
    pw.backward(ex, dw.out);
    dw.backward(ex, x);
}

// ---- FusePath ----

void FusePath::declare(Planner& p, const std::string& name, const kern::Shape4& src, int src_level, int dst_level,
                       int dst_channels) {
    SF_CHECK(src_level != dst_level, "fusion path from level %d to itself", src_level);
    const std::string base =
        name + (src_level > dst_level ? ".up_" : ".down_") + scale_name(src_level) + "_to_" + scale_name(dst_level);
    up = src_level > dst_level;
    if (up) {
        factor = 1 << (src_level - dst_level);
        upsampled = p.act({src.n, src.h * factor, src.w * factor, src.c}, "upsampled");
        cb.declare(p, base + ".1", upsampled.shape, dst_channels, 1, 1, 1, kern::Act::None);  // .0 is the Upsample
        return;
    }
    const int steps = dst_level - src_level;
    down.resize(static_cast<size_t>(steps));
    kern::Shape4 s = src;
    for (int k = 0; k < steps; ++k) {
        const bool last = k == steps - 1;
        const std::string n = steps == 1 ? base : base + "." + std::to_string(k);
        down[static_cast<size_t>(k)].declare(p, n, s, last ? dst_channels : src.c, 2);
        s = down[static_cast<size_t>(k)].out().shape;
    }
}

void FusePath::forward(const rt::Exec& ex, const Act& x, bool train) const {
    if (up) {
        kern::upsample_bilinear_forward(ex, x.shape, factor, x.v, upsampled.v);
        cb.forward(ex, upsampled, train);
        return;
    }
    const Act* in = &x;
    for (const DSConv& d : down) {
        d.forward(ex, *in, train);
        in = &d.out();
    }
}

void FusePath::backward(const rt::Exec& ex, const Act& x) const {
    if (up) {
        cb.backward(ex, upsampled);
        kern::upsample_bilinear_backward(ex, x.shape, factor, upsampled.g, x.g);
        return;
    }
    for (size_t k = down.size(); k-- > 0;) down[k].backward(ex, k == 0 ? x : down[k - 1].out());
}

// ---- Fusion ----

void Fusion::declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in) {
    const int nb = static_cast<int>(in.size());
    paths.resize(in.size());
    sum.resize(in.size());
    smooth.resize(in.size());
    for (int i = 0; i < nb; ++i) {
        paths[static_cast<size_t>(i)].resize(in.size());
        for (int j = 0; j < nb; ++j)
            if (j != i)
                paths[static_cast<size_t>(i)][static_cast<size_t>(j)].declare(p, name, in[static_cast<size_t>(j)], j, i,
                                                                              in[static_cast<size_t>(i)].c);
        sum[static_cast<size_t>(i)] = p.act(in[static_cast<size_t>(i)], "fusion sum");
        smooth[static_cast<size_t>(i)].declare(p, name + ".smooth_" + scale_name(i), in[static_cast<size_t>(i)],
                                               in[static_cast<size_t>(i)].c, 3, 1, 1, kern::Act::Silu);
    }
}

void Fusion::forward(const rt::Exec& ex, const std::vector<const Act*>& x, bool train) const {
    const size_t nb = sum.size();
    for (size_t i = 0; i < nb; ++i) {
        const Act& s = sum[i];
        bool first = true;
        for (size_t j = 0; j < nb; ++j) {
            if (j == i) continue;
            const FusePath& fp = paths[i][j];
            fp.forward(ex, *x[j], train);
            kern::add(ex, s.numel(), first ? x[i]->v : s.v, fp.out().v, s.v);
            first = false;
        }
        smooth[i].forward(ex, s, train);
    }
}

void Fusion::backward(const rt::Exec& ex, const std::vector<const Act*>& x) const {
    const size_t nb = sum.size();
    for (size_t i = nb; i-- > 0;) {
        const Act& s = sum[i];
        smooth[i].backward(ex, s);
        kern::accumulate(ex, s.numel(), s.g, x[i]->g);
        for (size_t j = nb; j-- > 0;) {
            if (j == i) continue;
            const FusePath& fp = paths[i][j];
            kern::accumulate(ex, s.numel(), s.g, fp.out().g);
            fp.backward(ex, *x[j]);
        }
    }
}

}  // namespace model
