#!/usr/bin/env python3
"""The Sider loss (MODEL_SPEC §2-§3, variants `sider` and `corrected` of docs/LOSS.md) written
with batched tensor ops only, for the PyTorch baselines on the GPU.

Why not tools/reference/sider_loss.py: that reference builds its targets with per-pixel Python
loops into CPU tensors (a CUDA batch fails with a device mismatch), creates its guard constants
on the CPU, and branches on `float(tensor)` (a host sync per term). This port computes the same
values on whatever device and dtype the logits have, with every guard done by torch.where on
device scalars: no host sync, no data-dependent shapes (so torch.compile can trace it whole).
tests/baselines/test_baselines.py checks it against the reference in float64 (values and
gradients) on batches that hit every guard.

Inputs: logits dict (heatmap_gap, heatmap_piece [N,1,h,w], offset [N,4,h,w], angle [N,2,h,w]),
the model input [N,C,H,W] (mask = last channel), labels dict of device tensors: gap (N,2),
slider (N,2), angle (N,), fakes (N,4,2), num_fakes (N,) int. Returns an OrderedDict of the seven
unweighted terms and "total", all 0-dim tensors.

Differences from the reference that only matter in pathological cases:
  - a NaN/Inf term is dropped from the total as in the reference, but its backward may still
    carry NaN into the gradient (torch.where passes 0 * NaN); slidefuse and the original skip or
    diverge on such steps anyway;
  - terms are summed in a vectorised order (float rounding differs at ~1 ulp of the sums).
"""
from collections import OrderedDict

import torch
import torch.nn.functional as F

STRIDE = 4
SIGMA = 1.5
RADIUS = 4  # int(3 * SIGMA)
WEIGHTS = OrderedDict(heatmap=1.0, offset=1.0, hard_negative=1.5, angle=0.5, padding_bce=0.3, y_axis=0.8)
TERMS = ("focal_gap", "focal_slider", "offset", "hard_negative", "angle", "padding_bce", "y_axis")


def _gauss_lut(dtype, device):
    """exp(-d2 / (2 sigma^2)) for d2 = 0..2*RADIUS^2, computed in float64 then rounded to dtype
    (as the reference stores math.exp values into its target tensor). Made on the device: a
    host->device copy inside the step would synchronise the host with the GPU."""
    d2 = torch.arange(2 * RADIUS * RADIUS + 1, dtype=torch.float64, device=device)
    return torch.exp(-d2 / (2 * SIGMA * SIGMA)).to(dtype)


def _cells(xy, gw, gh):
    """Integer grid cell int(x/s), int(y/s) (truncation; labels are >= 0), clamped into the grid."""
    u = torch.clamp(torch.trunc(xy[:, 0] / STRIDE), 0, gw - 1).long()
    v = torch.clamp(torch.trunc(xy[:, 1] / STRIDE), 0, gh - 1).long()
    return u, v


def build_targets(xy, n, gh, gw, dtype):
    """Gaussian target Y [N,1,h,w], the peak one-hot [N,1,h,w], offset targets (du, dv) [N] and
    the peak cell (u, v) [N]."""
    dev = xy.device
    u, v = _cells(xy, gw, gh)
    dr = torch.arange(gh, device=dev)[None, :] - v[:, None]  # [N, h]
    dc = torch.arange(gw, device=dev)[None, :] - u[:, None]  # [N, w]
    inwin = (dr.abs() <= RADIUS)[:, :, None] & (dc.abs() <= RADIUS)[:, None, :]
    d2 = (dr * dr)[:, :, None] + (dc * dc)[:, None, :]
    lut = _gauss_lut(dtype, dev)
    Y = torch.where(inwin, lut[torch.clamp(d2, max=lut.numel() - 1)], torch.zeros((), dtype=dtype, device=dev))
    peak = ((dr == 0)[:, :, None] & (dc == 0)[:, None, :]).to(dtype)
    xyd = xy.to(dtype)
    du = xyd[:, 0] / STRIDE - u.to(dtype) - 0.5
    dv = xyd[:, 1] / STRIDE - v.to(dtype) - 0.5
    return Y[:, None], peak[:, None], du, dv, u, v


def _safe(den, ok):
    return torch.where(ok, den, torch.ones_like(den))


def _c(v, like):
    return torch.full((), float(v), dtype=like.dtype, device=like.device)


def _focal(P, Y, M, variant):
    Pc = torch.clamp(P, 1e-8, 1 - 1e-8)
    pos = (Y >= 0.8).to(P.dtype)
    ell = pos * (1 - Pc) ** 1.5 * (-torch.log(Pc)) + \
        (1 - pos) * (1 - Y) ** 4 * Pc ** 1.5 * (-torch.log(torch.clamp(1 - Pc, min=1e-8)))
    if variant == "sider":
        den = (pos * M).sum()
        ok = den != 0
        out = torch.where(ok, (ell * M).sum() / _safe(den, ok), _c(0.01, P))
    else:
        num = (ell * M).sum(dim=(1, 2, 3))
        den = (pos * M).sum(dim=(1, 2, 3))
        keep = den > 0
        cnt = keep.sum().to(P.dtype)
        per = torch.where(keep, num / _safe(den, keep), torch.zeros_like(num))
        out = torch.where(cnt > 0, per.sum() / torch.clamp(cnt, min=1), _c(0.01, P))
    return torch.where(torch.isnan(out), _c(1.0, P), out)


def _sl1(d):
    a = d.abs()
    return torch.where(a < 1.0, 0.5 * d * d, a - 0.5)


def _offset(off, tg, ts, M, variant):
    """tg / ts: (Y, peak, du, dv, u, v) of gap / slider."""
    if variant == "sider":
        vals, oks = [], []
        for ch, (Y, peak, du, dv, _, _) in ((0, tg), (2, ts)):
            w = Y * M
            tx = peak * du[:, None, None, None]
            ty = peak * dv[:, None, None, None]
            ell = _sl1(off[:, ch:ch + 1] - tx) + _sl1(off[:, ch + 1:ch + 2] - ty)
            ws = w.sum()
            ok = ws >= 1e-6
            vals.append((w * ell).sum() / _safe(ws, ok))
            oks.append(ok)
        lg, ls = vals
        # MODEL_SPEC §2.3: gap without weight -> 0.01 for the whole term; slider without -> L_gap + 0.01.
        return torch.where(oks[0], torch.where(oks[1], lg + ls, lg + 0.01), _c(0.01, off))
    n = off.shape[0]
    ar = torch.arange(n, device=off.device)
    total = None
    for ch, (_, _, du, dv, u, v) in ((0, tg), (2, ts)):
        Mp = M[ar, 0, v, u]
        keep = Mp >= 1e-6
        d0 = off[ar, ch, v, u] - du
        d1 = off[ar, ch + 1, v, u] - dv
        val = (Mp * (_sl1(d0) + _sl1(d1))) / _safe(Mp, keep)
        cnt = keep.sum().to(off.dtype)
        lk = torch.where(cnt > 0, torch.where(keep, val, torch.zeros_like(val)).sum() / torch.clamp(cnt, min=1),
                         _c(0.01, off))
        total = lk if total is None else total + lk
    return total


def bilinear_zero(P, u, v):
    """P [N,h,w]; u (column), v (row) [N] continuous grid indices -> [N]: bilinear sample with zero
    padding (= grid_sample(align_corners=True, padding_mode='zeros') at 2u/(w-1)-1)."""
    n, gh, gw = P.shape
    ar = torch.arange(n, device=P.device)
    x0 = torch.floor(u)
    y0 = torch.floor(v)
    fx, fy = u - x0, v - y0
    x0l, y0l = x0.long(), y0.long()
    out = torch.zeros(n, dtype=P.dtype, device=P.device)
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            yy, xx = y0l + dy, x0l + dx
            ok = (yy >= 0) & (yy < gh) & (xx >= 0) & (xx < gw)
            val = P[ar, yy.clamp(0, gh - 1), xx.clamp(0, gw - 1)]
            out = out + torch.where(ok, val * (wy * wx), torch.zeros_like(val))
    return out


def _hard_negative(Pg, lab, variant, margin=0.5):
    P = Pg[:, 0]
    dt = P.dtype
    nf = lab["num_fakes"].long()
    K = nf.max()
    gap = lab["gap"].to(dt)
    fakes = lab["fakes"].to(dt)
    n = P.shape[0]
    ar = torch.arange(n, device=P.device)
    sp = bilinear_zero(P, gap[:, 0] / STRIDE, gap[:, 1] / STRIDE)
    acc = torch.zeros(n, dtype=dt, device=P.device)
    slots = fakes.shape[1]
    for k in range(slots):
        if variant == "sider":
            # Samples are padded to K = max fakes by repeating their last fake; no fakes -> cell (0, 0).
            # Quirk: the fake's integer grid cell is divided by the stride again.
            idx = torch.clamp(torch.minimum(torch.full_like(nf, k), nf - 1), min=0)
            f = fakes[ar, idx]
            fu = torch.where(nf > 0, torch.trunc(f[:, 0] / STRIDE) / STRIDE, torch.zeros_like(f[:, 0]))
            fv = torch.where(nf > 0, torch.trunc(f[:, 1] / STRIDE) / STRIDE, torch.zeros_like(f[:, 1]))
            active = K > k
        else:
            fu, fv = fakes[:, k, 0] / STRIDE, fakes[:, k, 1] / STRIDE
            active = nf > k
        t = torch.clamp(margin - sp + bilinear_zero(P, fu, fv), min=0.0)
        acc = acc + torch.where(active, t, torch.zeros_like(t))
    if variant == "sider":
        per = acc / torch.clamp(K, min=1).to(dt)
        val = per.mean()
    else:
        has = nf > 0
        per = torch.where(has, acc / torch.clamp(nf, min=1).to(dt), torch.zeros_like(acc))
        val = per.sum() / torch.clamp(has.sum(), min=1).to(dt)
    return torch.where(K > 0, val, _c(0.0, P))


def _angle(za, Yg, M, angle, variant):
    a = F.normalize(F.normalize(za, p=2, dim=1, eps=1e-12), p=2, dim=1, eps=1e-12)
    th = angle.to(za.dtype)
    s, c = torch.sin(th)[:, None, None, None], torch.cos(th)[:, None, None, None]
    dot = a[:, 0:1] * s + a[:, 1:2] * c
    w = (Yg > 0.7).to(za.dtype) * M
    if variant == "sider":
        return ((1 - dot) * w).sum() / (w.sum() + 1e-8)
    num = ((1 - dot) * w).sum(dim=(1, 2, 3))
    den = w.sum(dim=(1, 2, 3))
    keep = den > 0
    cnt = keep.sum().to(za.dtype)
    per = torch.where(keep, num / (den + 1e-8), torch.zeros_like(num))
    return torch.where(cnt > 0, per.sum() / torch.clamp(cnt, min=1), _c(0.0, za))


def _padding_bce(Pg, Ps, M, variant):
    if variant == "sider":
        Pg, Ps = torch.sigmoid(Pg), torch.sigmoid(Ps)  # quirk: second sigmoid
    lg = torch.clamp(-torch.log1p(-torch.clamp(Pg, 1e-4, 1 - 1e-4)), max=10.0)
    ls = torch.clamp(-torch.log1p(-torch.clamp(Ps, 1e-4, 1 - 1e-4)), max=10.0)
    pad = 1 - M
    if variant == "sider":
        den = pad.sum()
        ok = den >= 1e-8
        return torch.where(ok, ((lg + ls) * pad).sum() / _safe(den, ok), _c(0.0, Pg))
    num = ((lg + ls) * pad).sum(dim=(1, 2, 3))
    den = pad.sum(dim=(1, 2, 3))
    keep = den >= 1e-8
    cnt = keep.sum().to(Pg.dtype)
    per = torch.where(keep, num / _safe(den, keep), torch.zeros_like(num))
    return torch.where(cnt > 0, per.sum() / torch.clamp(cnt, min=1), _c(0.0, Pg))


def _y_axis(Pg, Ps, lab, variant, tau=1.0):
    n, _, gh, _ = Pg.shape
    ar = torch.arange(n, device=Pg.device)

    def dist(P):
        e = P[:, 0].mean(dim=2)  # [N, h]
        return torch.softmax(torch.log(e + 1e-8) / tau, dim=1)

    dg, ds = dist(Pg), dist(Ps)

    def row(y):
        y = y.to(Pg.dtype)
        t = torch.floor(y / STRIDE / 4) if variant == "sider" else torch.floor(y / STRIDE)
        return torch.clamp(t, 0, gh - 1).long()

    tg, ts = row(lab["gap"][:, 1]), row(lab["slider"][:, 1])
    ce = (-torch.log(dg[ar, tg] + 1e-8) - torch.log(ds[ar, ts] + 1e-8)).mean()
    emd = (torch.cumsum(dg, 1) - torch.cumsum(ds, 1)).abs().mean()
    return 1.0 * ce + 0.3 * emd


def loss(logits, inp, lab, variant="sider", dtype=torch.float32):
    """The loss of one batch in `dtype` (logits are cast to it). See the module docstring."""
    assert variant in ("sider", "corrected"), variant
    zg = logits["heatmap_gap"].to(dtype)
    zs = logits["heatmap_piece"].to(dtype)
    zo = logits["offset"].to(dtype)
    za = logits["angle"].to(dtype)
    n, _, gh, gw = zg.shape
    Pg, Ps = torch.sigmoid(zg), torch.sigmoid(zs)
    off = 0.5 * torch.tanh(zo)
    M = F.avg_pool2d(inp[:, -1:].to(dtype), STRIDE, STRIDE)
    tg = build_targets(lab["gap"], n, gh, gw, dtype)
    ts = build_targets(lab["slider"], n, gh, gw, dtype)

    t = OrderedDict()
    t["focal_gap"] = _focal(Pg, tg[0], M, variant)
    t["focal_slider"] = _focal(Ps, ts[0], M, variant)
    t["offset"] = _offset(off, tg, ts, M, variant)
    t["hard_negative"] = _hard_negative(Pg, lab, variant)
    use_angle = (lab["angle"] != 0).any()
    ang = _angle(za, tg[0], M, lab["angle"], variant)
    t["angle"] = torch.where(use_angle, ang, _c(0.0, ang))
    t["padding_bce"] = _padding_bce(Pg, Ps, M, variant)
    t["y_axis"] = _y_axis(Pg, Ps, lab, variant)

    zero = _c(0.0, zg)
    true = torch.ones((), dtype=torch.bool, device=zg.device)
    weighted = [(WEIGHTS["heatmap"], t["focal_gap"], true), (WEIGHTS["heatmap"], t["focal_slider"], true),
                (WEIGHTS["offset"], t["offset"], true), (WEIGHTS["hard_negative"], t["hard_negative"], true),
                (WEIGHTS["angle"], ang, use_angle & (ang > 0)),
                (WEIGHTS["padding_bce"], t["padding_bce"], true), (WEIGHTS["y_axis"], t["y_axis"], true)]
    total, valid = zero, torch.zeros((), dtype=torch.long, device=zg.device)
    for w, v, inc in weighted:
        use = inc & torch.isfinite(v)  # non-finite terms are dropped
        total = total + torch.where(use, w * v, zero)
        valid = valid + use.long()
    t["total"] = torch.where(valid > 0, total, _c(1.0, zg))
    return t
