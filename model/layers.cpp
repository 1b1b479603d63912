// The composite layers (model/layers.h): LiteBlock, DSConv, FusePath and Fusion, each built of ConvBNs
// (model/conv_bn.cpp) and the element-wise ops of model/layer_ops.h.
#include "model/layers.h"

#include "model/gpu_ops.h"
#include "model/layer_ops.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace model {

std::string scale_name(int level) { return "1_" + std::to_string(4 << level); }

// ---- LiteBlock ----

template <class T>
void LiteBlock<T>::declare(Planner& p, const std::string& name, const kern::Shape4& in, bool fuse_expand_dw) {
    const int c = in.c, hidden = 2 * in.c;
    const bool fused = fuse_expand_dw && !kIsCpu<T>;
    expand.apply_in_consumer = fused;
    dw.prologue = fused ? &expand : nullptr;
    if (fused && p.dw_bn_grad()) link_grad_sums(expand, dw);  // GpuOps::dw_bn_grad
    if (p.pw_bn_grad()) link_grad_sums(dw, project);        // GpuOps::pw_bn_grad
    dw.apply_in_consumer = p.fuse_dw_pw();  // NetShape::fuse_dw_pw: the project conv applies dw's BN + SiLU
    project.prologue = p.fuse_dw_pw() ? &dw : nullptr;
    expand.declare(p, name + ".pw_expand", in, hidden, 1, 1, 1, kern::Act::Silu);
    dw.declare(p, name + ".dw_conv", expand.out.shape, hidden, 3, 1, hidden, kern::Act::Silu);
    out = p.act<T>(in, "liteblock out");
    project.sum_into = &out;  // out = x + project's output, written by the project layer
    project.declare(p, name + ".pw_project", dw.out.shape, c, 1, 1, 1, kern::Act::None);
    sum_bwd_scope = name + ".residual bwd";
    p.op_use({name + ".residual", OpUse::Kind::GradSum, in});
}

template <class T>
void LiteBlock<T>::forward(const rt::Exec& ex, const ActT<T>& x, bool train) const {
    expand.forward(ex, x, train);
    dw.forward(ex, expand.out, train);
    project.forward(ex, dw.out, train, x.v);
}

template <class T>
void LiteBlock<T>::backward(const rt::Exec& ex, const ActT<T>& x) const {
    project.backward(ex, dw.out);  // reads out.g: the gradient of project's output, as out = x + it
    dw.backward(ex, expand.out);
    expand.backward(ex, x);
    const rt::Scope scope(ex, sum_bwd_scope);
    ops::accumulate(ex, out.numel(), out.g, x.g);
}

// ---- DSConv ----

template <class T>
void DSConv<T>::declare(Planner& p, const std::string& name, const kern::Shape4& in, int cout, int stride) {
    dw.apply_in_consumer = p.fuse_dw_pw();  // NetShape::fuse_dw_pw: the pointwise conv applies dw's BN + SiLU
    pw.prologue = p.fuse_dw_pw() ? &dw : nullptr;
    if (p.pw_bn_grad()) link_grad_sums(dw, pw);  // GpuOps::pw_bn_grad: pw's dgrad gathers dw's BN reductions
    dw.declare(p, name + ".dw_conv", in, in.c, 3, stride, in.c, kern::Act::Silu);
    pw.declare(p, name + ".pw_conv", dw.out.shape, cout, 1, 1, 1, kern::Act::Silu);
}

template <class T>
void DSConv<T>::forward(const rt::Exec& ex, const ActT<T>& x, bool train, const T* residual) const {
    dw.forward(ex, x, train);
    pw.forward(ex, dw.out, train, residual);
}

template <class T>
void DSConv<T>::backward(const rt::Exec& ex, const ActT<T>& x) const {
    pw.backward(ex, dw.out);
    dw.backward(ex, x);
}

// ---- FusePath ----

template <class T>
void FusePath<T>::declare(Planner& p, const std::string& name, const kern::Shape4& src, int src_level, int dst_level,
                          int dst_channels, UpOrder order, const ActT<T>* sum) {
    SF_CHECK(src_level != dst_level, "fusion path from level %d to itself", src_level);
    const std::string base =
        name + (src_level > dst_level ? ".up_" : ".down_") + scale_name(src_level) + "_to_" + scale_name(dst_level);
    up = src_level > dst_level;
    if (up) {
        factor = 1 << (src_level - dst_level);
        cb.sum_into = sum;
        if (order == UpOrder::ConvFirst) {  // 1x1 conv at the source resolution, then the upsample
            cb.upsample = factor;
            cb.declare(p, base + ".1", src, dst_channels, 1, 1, 1, kern::Act::None);
            return;
        }
        upsampled = p.act<T>({src.n, src.h * factor, src.w * factor, src.c}, "upsampled");
        up_fwd_scope = base + ".0 fwd";  // .0 is the Upsample
        up_bwd_scope = base + ".0 bwd";
        p.op_use({base + ".0", OpUse::Kind::Upsample, src, factor});
        cb.declare(p, base + ".1", upsampled.shape, dst_channels, 1, 1, 1, kern::Act::None);
        return;
    }
    const int steps = dst_level - src_level;
    down.resize(static_cast<size_t>(steps));
    kern::Shape4 s = src;
    for (int k = 0; k < steps; ++k) {
        const bool last = k == steps - 1;
        const std::string n = steps == 1 ? base : base + "." + std::to_string(k);
        down[static_cast<size_t>(k)].pw.sum_into = last ? sum : nullptr;
        down[static_cast<size_t>(k)].declare(p, n, s, last ? dst_channels : src.c, 2);
        s = down[static_cast<size_t>(k)].out().shape;
    }
}

template <class T>
void FusePath<T>::forward(const rt::Exec& ex, const ActT<T>& x, bool train, const T* residual) const {
    if (upsample_first()) {
        {
            const rt::Scope scope(ex, up_fwd_scope);
            ops::upsample_forward(ex, x.shape, factor, x.v, upsampled.v);
        }
        cb.forward(ex, upsampled, train, residual);
        return;
    }
    if (up) {  // ConvFirst: the ConvBN upsamples its conv output
        cb.forward(ex, x, train, residual);
        return;
    }
    const ActT<T>* in = &x;
    for (size_t k = 0; k < down.size(); ++k) {
        down[k].forward(ex, *in, train, k + 1 == down.size() ? residual : nullptr);
        in = &down[k].out();
    }
}

template <class T>
void FusePath<T>::backward(const rt::Exec& ex, const ActT<T>& x) const {
    if (upsample_first()) {
        cb.backward(ex, upsampled);
        const rt::Scope scope(ex, up_bwd_scope);
        ops::upsample_backward(ex, x.shape, factor, upsampled.g, x.g, cb.ops && cb.ops->upsample_row_loads());
        return;
    }
    if (up) {
        cb.backward(ex, x);
        return;
    }
    for (size_t k = down.size(); k-- > 0;) down[k].backward(ex, k == 0 ? x : down[k - 1].out());
}

// ---- Fusion ----

template <class T>
void Fusion<T>::declare(Planner& p, const std::string& name, const std::vector<kern::Shape4>& in, UpOrder up_order) {
    const int nb = static_cast<int>(in.size());
    paths.resize(in.size());
    sum.resize(in.size());
    smooth.resize(in.size());
    sum_bwd_scope.resize(in.size());
    for (int i = 0; i < nb; ++i) {
        const size_t ui = static_cast<size_t>(i);
        paths[ui].resize(in.size());
        sum[ui] = p.act<T>(in[ui], "fusion sum");  // each path's last layer adds into it
        for (int j = 0; j < nb; ++j)
            if (j != i)
                paths[ui][static_cast<size_t>(j)].declare(p, name, in[static_cast<size_t>(j)], j, i, in[ui].c,
                                                          up_order, &sum[ui]);
        smooth[ui].declare(p, name + ".smooth_" + scale_name(i), in[ui], in[ui].c, 3, 1, 1, kern::Act::Silu);
        sum_bwd_scope[ui] = name + ".sum_" + scale_name(i) + " bwd";
        p.op_use({name + ".sum_" + scale_name(i), OpUse::Kind::GradSum, in[ui]});
    }
}

template <class T>
void Fusion<T>::forward(const rt::Exec& ex, const std::vector<const ActT<T>*>& x, bool train) const {
    const size_t nb = sum.size();
    for (size_t i = 0; i < nb; ++i) {
        const ActT<T>& s = sum[i];
        bool first = true;
        for (size_t j = 0; j < nb; ++j) {
            if (j == i) continue;
            paths[i][j].forward(ex, *x[j], train, first ? x[i]->v : s.v);  // s = x_i + path, then s += path
            first = false;
        }
        smooth[i].forward(ex, s, train);
    }
}

template <class T>
void Fusion<T>::backward(const rt::Exec& ex, const std::vector<const ActT<T>*>& x) const {
    const size_t nb = sum.size();
    for (size_t i = nb; i-- > 0;) {
        const ActT<T>& s = sum[i];
        smooth[i].backward(ex, s);
        {
            const rt::Scope scope(ex, sum_bwd_scope[i]);
            ops::accumulate(ex, s.numel(), s.g, x[i]->g);
        }
        for (size_t j = nb; j-- > 0;) {
            if (j == i) continue;
            paths[i][j].backward(ex, *x[j]);  // its last layer reads s.g: s = x_i + sum_j path_j(x_j)
        }
    }
}

#define SF_INSTANTIATE_LAYERS(T)  \
    template struct LiteBlock<T>; \
    template struct DSConv<T>;    \
    template struct FusePath<T>;  \
    template struct Fusion<T>;
SF_INSTANTIATE_LAYERS(float)
SF_INSTANTIATE_LAYERS(kern::bf16)
#undef SF_INSTANTIATE_LAYERS

}  // namespace model
