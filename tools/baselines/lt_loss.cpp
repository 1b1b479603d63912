// The LibTorch baseline's loss (lt_loss.h).
#include <cstdint>

#include "lt_loss.h"

namespace ltb {

// ------------------------------------------------------------------------------------------------
// Loss: tools/baselines/loss_vec.py op for op (see its docstring for the semantics).
// ------------------------------------------------------------------------------------------------
namespace {

constexpr double kStride = 4.0;
constexpr int64_t kRadius = 4;
const double kW[] = {1.0, 1.0, 1.0, 1.5, 0.5, 0.3, 0.8};  // focal x2, offset, hn, angle, pad, y

struct Targets {
    Tensor Y, peak, du, dv, u, v;
};

Tensor cst(double v, const Tensor& like) { return torch::scalar_tensor(v, like.options()); }
Tensor safe(const Tensor& den, const Tensor& ok) { return torch::where(ok, den, torch::ones_like(den)); }

Targets build_targets(const Tensor& xy, int64_t gh, int64_t gw, torch::ScalarType dt) {
    const auto dev = xy.device();
    Tensor u = torch::clamp(torch::trunc(xy.select(1, 0) / kStride), 0, gw - 1).to(torch::kLong);
    Tensor v = torch::clamp(torch::trunc(xy.select(1, 1) / kStride), 0, gh - 1).to(torch::kLong);
    auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev);
    Tensor dr = torch::arange(gh, lopt).unsqueeze(0) - v.unsqueeze(1);
    Tensor dc = torch::arange(gw, lopt).unsqueeze(0) - u.unsqueeze(1);
    Tensor inwin = (dr.abs() <= kRadius).unsqueeze(2).logical_and((dc.abs() <= kRadius).unsqueeze(1));
    Tensor d2 = (dr * dr).unsqueeze(2) + (dc * dc).unsqueeze(1);
    // exp(-d2 / (2 sigma^2)) for d2 = 0..32 in float64, rounded to dt; made on the device (no copy).
    Tensor lut = torch::exp(-torch::arange(2 * kRadius * kRadius + 1, torch::TensorOptions().dtype(torch::kFloat64).device(dev)) /
                            (2 * 1.5 * 1.5))
                     .to(dt);
    Tensor Y = torch::where(inwin, lut.index({torch::clamp_max(d2, lut.numel() - 1)}),
                            torch::zeros({}, torch::TensorOptions().dtype(dt).device(dev)));
    Tensor peak = (dr == 0).unsqueeze(2).logical_and((dc == 0).unsqueeze(1)).to(dt);
    Tensor xyd = xy.to(dt);
    Tensor du = xyd.select(1, 0) / kStride - u.to(dt) - 0.5;
    Tensor dv = xyd.select(1, 1) / kStride - v.to(dt) - 0.5;
    return {Y.unsqueeze(1), peak.unsqueeze(1), du, dv, u, v};
}

Tensor focal(const Tensor& P, const Tensor& Y, const Tensor& M, bool sider) {
    Tensor Pc = torch::clamp(P, 1e-8, 1 - 1e-8);
    Tensor pos = (Y >= 0.8).to(P.scalar_type());
    Tensor ell = pos * (1 - Pc).pow(1.5) * (-torch::log(Pc)) +
                 (1 - pos) * (1 - Y).pow(4) * Pc.pow(1.5) * (-torch::log(torch::clamp_min(1 - Pc, 1e-8)));
    Tensor out;
    if (sider) {
        Tensor den = (pos * M).sum();
        Tensor ok = den != 0;
        out = torch::where(ok, (ell * M).sum() / safe(den, ok), cst(0.01, P));
    } else {
        Tensor num = (ell * M).sum({1, 2, 3}), den = (pos * M).sum({1, 2, 3});
        Tensor keep = den > 0;
        Tensor cnt = keep.sum().to(P.scalar_type());
        Tensor per = torch::where(keep, num / safe(den, keep), torch::zeros_like(num));
        out = torch::where(cnt > 0, per.sum() / torch::clamp_min(cnt, 1), cst(0.01, P));
    }
    return torch::where(torch::isnan(out), cst(1.0, P), out);
}

Tensor sl1(const Tensor& d) {
    Tensor a = d.abs();
    return torch::where(a < 1.0, 0.5 * d * d, a - 0.5);
}

Tensor offset_term(const Tensor& off, const Targets& tg, const Targets& ts, const Tensor& M, bool sider) {
    if (sider) {
        std::vector<Tensor> vals, oks;
        int ch = 0;
        for (const Targets* t : {&tg, &ts}) {
            Tensor w = t->Y * M;
            Tensor tx = t->peak * t->du.view({-1, 1, 1, 1});
            Tensor ty = t->peak * t->dv.view({-1, 1, 1, 1});
            Tensor ell = sl1(off.index({Slice(), Slice(ch, ch + 1)}) - tx) +
                         sl1(off.index({Slice(), Slice(ch + 1, ch + 2)}) - ty);
            Tensor ws = w.sum();
            Tensor ok = ws >= 1e-6;
            vals.push_back((w * ell).sum() / safe(ws, ok));
            oks.push_back(ok);
            ch += 2;
        }
        return torch::where(oks[0], torch::where(oks[1], vals[0] + vals[1], vals[0] + 0.01), cst(0.01, off));
    }
    const int64_t n = off.size(0);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(off.device()));
    Tensor total;
    int64_t ch = 0;
    for (const Targets* t : {&tg, &ts}) {
        Tensor Mp = M.index({ar, 0, t->v, t->u});
        Tensor keep = Mp >= 1e-6;
        Tensor d0 = off.index({ar, ch, t->v, t->u}) - t->du;
        Tensor d1 = off.index({ar, ch + 1, t->v, t->u}) - t->dv;
        Tensor val = (Mp * (sl1(d0) + sl1(d1))) / safe(Mp, keep);
        Tensor cnt = keep.sum().to(off.scalar_type());
        Tensor lk = torch::where(cnt > 0, torch::where(keep, val, torch::zeros_like(val)).sum() / torch::clamp_min(cnt, 1),
                                 cst(0.01, off));
        total = total.defined() ? total + lk : lk;
        ch += 2;
    }
    return total;
}

Tensor bilinear_zero(const Tensor& P, const Tensor& u, const Tensor& v) {
    const int64_t n = P.size(0), gh = P.size(1), gw = P.size(2);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(P.device()));
    Tensor x0 = torch::floor(u), y0 = torch::floor(v);
    Tensor fx = u - x0, fy = v - y0;
    Tensor x0l = x0.to(torch::kLong), y0l = y0.to(torch::kLong);
    Tensor out = torch::zeros({n}, P.options());
    for (int dy = 0; dy < 2; ++dy) {
        Tensor wy = dy ? fy : 1.0 - fy;
        for (int dx = 0; dx < 2; ++dx) {
            Tensor wx = dx ? fx : 1.0 - fx;
            Tensor yy = y0l + dy, xx = x0l + dx;
            Tensor ok = (yy >= 0).logical_and(yy < gh).logical_and(xx >= 0).logical_and(xx < gw);
            Tensor val = P.index({ar, yy.clamp(0, gh - 1), xx.clamp(0, gw - 1)});
            out = out + torch::where(ok, val * (wy * wx), torch::zeros_like(val));
        }
    }
    return out;
}

Tensor hard_negative(const Tensor& Pg, const Batch& b, bool sider, double margin = 0.5) {
    Tensor P = Pg.select(1, 0);
    const auto dt = P.scalar_type();
    Tensor nf = b.num_fakes.to(torch::kLong);
    Tensor K = nf.max();
    Tensor gap = b.gap.to(dt), fakes = b.fakes.to(dt);
    const int64_t n = P.size(0);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(P.device()));
    Tensor sp = bilinear_zero(P, gap.select(1, 0) / kStride, gap.select(1, 1) / kStride);
    Tensor acc = torch::zeros({n}, P.options());
    for (int64_t k = 0; k < fakes.size(1); ++k) {
        Tensor fu, fv, active;
        if (sider) {
            Tensor idx = torch::clamp_min(torch::minimum(torch::full_like(nf, k), nf - 1), 0);
            Tensor f = fakes.index({ar, idx});
            fu = torch::where(nf > 0, torch::trunc(f.select(1, 0) / kStride) / kStride, torch::zeros_like(f.select(1, 0)));
            fv = torch::where(nf > 0, torch::trunc(f.select(1, 1) / kStride) / kStride, torch::zeros_like(f.select(1, 1)));
            active = K > k;
        } else {
            fu = fakes.index({Slice(), k, 0}) / kStride;
            fv = fakes.index({Slice(), k, 1}) / kStride;
            active = nf > k;
        }
        Tensor t = torch::clamp_min(margin - sp + bilinear_zero(P, fu, fv), 0.0);
        acc = acc + torch::where(active, t, torch::zeros_like(t));
    }
    Tensor val;
    if (sider) {
        val = (acc / torch::clamp_min(K, 1).to(dt)).mean();
    } else {
        Tensor has = nf > 0;
        Tensor per = torch::where(has, acc / torch::clamp_min(nf, 1).to(dt), torch::zeros_like(acc));
        val = per.sum() / torch::clamp_min(has.sum(), 1).to(dt);
    }
    return torch::where(K > 0, val, cst(0.0, P));
}

Tensor angle_term(const Tensor& za, const Tensor& Yg, const Tensor& M, const Tensor& angle, bool sider) {
    auto opt = F::NormalizeFuncOptions().p(2).dim(1).eps(1e-12);
    Tensor a = F::normalize(F::normalize(za, opt), opt);
    Tensor th = angle.to(za.scalar_type());
    Tensor s = torch::sin(th).view({-1, 1, 1, 1}), c = torch::cos(th).view({-1, 1, 1, 1});
    Tensor dot = a.index({Slice(), Slice(0, 1)}) * s + a.index({Slice(), Slice(1, 2)}) * c;
    Tensor w = (Yg > 0.7).to(za.scalar_type()) * M;
    if (sider) return ((1 - dot) * w).sum() / (w.sum() + 1e-8);
    Tensor num = ((1 - dot) * w).sum({1, 2, 3}), den = w.sum({1, 2, 3});
    Tensor keep = den > 0;
    Tensor cnt = keep.sum().to(za.scalar_type());
    Tensor per = torch::where(keep, num / (den + 1e-8), torch::zeros_like(num));
    return torch::where(cnt > 0, per.sum() / torch::clamp_min(cnt, 1), cst(0.0, za));
}

Tensor padding_bce(Tensor Pg, Tensor Ps, const Tensor& M, bool sider) {
    if (sider) Pg = torch::sigmoid(Pg), Ps = torch::sigmoid(Ps);  // quirk: second sigmoid
    Tensor lg = torch::clamp_max(-torch::log1p(-torch::clamp(Pg, 1e-4, 1 - 1e-4)), 10.0);
    Tensor ls = torch::clamp_max(-torch::log1p(-torch::clamp(Ps, 1e-4, 1 - 1e-4)), 10.0);
    Tensor pad = 1 - M;
    if (sider) {
        Tensor den = pad.sum();
        Tensor ok = den >= 1e-8;
        return torch::where(ok, ((lg + ls) * pad).sum() / safe(den, ok), cst(0.0, Pg));
    }
    Tensor num = ((lg + ls) * pad).sum({1, 2, 3}), den = pad.sum({1, 2, 3});
    Tensor keep = den >= 1e-8;
    Tensor cnt = keep.sum().to(Pg.scalar_type());
    Tensor per = torch::where(keep, num / safe(den, keep), torch::zeros_like(num));
    return torch::where(cnt > 0, per.sum() / torch::clamp_min(cnt, 1), cst(0.0, Pg));
}

Tensor y_axis(const Tensor& Pg, const Tensor& Ps, const Batch& b, bool sider, double tau = 1.0) {
    const int64_t n = Pg.size(0), gh = Pg.size(2);
    Tensor ar = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(Pg.device()));
    auto dist = [&](const Tensor& P) { return torch::softmax(torch::log(P.select(1, 0).mean(2) + 1e-8) / tau, 1); };
    Tensor dg = dist(Pg), ds = dist(Ps);
    auto row = [&](const Tensor& y0) {
        Tensor y = y0.to(Pg.scalar_type());
        Tensor t = sider ? torch::floor(y / kStride / 4) : torch::floor(y / kStride);
        return torch::clamp(t, 0, gh - 1).to(torch::kLong);
    };
    Tensor tg = row(b.gap.select(1, 1)), ts = row(b.slider.select(1, 1));
    Tensor ce = (-torch::log(dg.index({ar, tg}) + 1e-8) - torch::log(ds.index({ar, ts}) + 1e-8)).mean();
    Tensor emd = (torch::cumsum(dg, 1) - torch::cumsum(ds, 1)).abs().mean();
    return 1.0 * ce + 0.3 * emd;
}


}  // namespace

LossOut sider_loss(const Logits& lg, const Tensor& inp, const Batch& b, bool sider,
                   torch::ScalarType dt) {
    Tensor zg = lg.gap.to(dt), zs = lg.piece.to(dt), zo = lg.offset.to(dt), za = lg.angle.to(dt);
    const int64_t gh = zg.size(2), gw = zg.size(3);
    Tensor Pg = torch::sigmoid(zg), Ps = torch::sigmoid(zs);
    Tensor off = 0.5 * torch::tanh(zo);
    Tensor M = torch::avg_pool2d(inp.index({Slice(), Slice(inp.size(1) - 1, inp.size(1))}).to(dt), {4, 4}, {4, 4});
    Targets tg = build_targets(b.gap, gh, gw, dt), ts = build_targets(b.slider, gh, gw, dt);
    LossOut o;
    o.terms[0] = focal(Pg, tg.Y, M, sider);
    o.terms[1] = focal(Ps, ts.Y, M, sider);
    o.terms[2] = offset_term(off, tg, ts, M, sider);
    o.terms[3] = hard_negative(Pg, b, sider);
    Tensor use_angle = (b.angle != 0).any();
    Tensor ang = angle_term(za, tg.Y, M, b.angle, sider);
    o.terms[4] = torch::where(use_angle, ang, cst(0.0, ang));
    o.terms[5] = padding_bce(Pg, Ps, M, sider);
    o.terms[6] = y_axis(Pg, Ps, b, sider);
    Tensor zero = cst(0.0, zg), total = zero;
    Tensor valid = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(zg.device()));
    for (int i = 0; i < 7; ++i) {
        Tensor v = i == 4 ? ang : o.terms[i];
        Tensor use = torch::isfinite(v);
        if (i == 4) use = use.logical_and(use_angle).logical_and(ang > 0);
        total = total + torch::where(use, kW[i] * v, zero);
        valid = valid + use.to(torch::kLong);
    }
    o.total = torch::where(valid > 0, total, cst(1.0, zg));
    return o;
}

}  // namespace ltb
