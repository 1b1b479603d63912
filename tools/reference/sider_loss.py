#!/usr/bin/env python3
"""Loss (MODEL_SPEC §2-§3, variants 'sider' and 'corrected' of docs/LOSS.md), decoding (§1.7, §8)
and metrics (§3.5) of the PyTorch reference. Re-exported by sider_ref, which holds the model."""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

from sider_ref import STRIDE, activate  # noqa: F401  (sider_ref imports this module at its end)

# ------------------------------------------------------------------------------------------------
# Targets (MODEL_SPEC §3.1-§3.3) and the soft valid mask
# ------------------------------------------------------------------------------------------------
SIGMA = 1.5
RADIUS = int(3 * SIGMA)  # 4
WEIGHTS = OrderedDict(heatmap=1.0, offset=1.0, hard_negative=1.5, angle=0.5, padding_bce=0.3, y_axis=0.8)
TERMS = ("focal_gap", "focal_slider", "offset", "hard_negative", "angle", "padding_bce", "y_axis")


def _cell(x, y, gw, gh):
    """Integer grid cell int(x/s), int(y/s) (truncation), clamped into the grid."""
    u = min(max(int(x / STRIDE), 0), gw - 1)
    v = min(max(int(y / STRIDE), 0), gh - 1)
    return u, v


def build_targets(labels, n, gh, gw, dtype=torch.float64):
    """Gaussian heatmaps Y (peak 1 on the integer cell, sigma 1.5, 9x9 window clipped at the
    border), offset targets (4 ch, non-zero only at the peak cells) and the peak cells."""
    Y = {k: torch.zeros(n, 1, gh, gw, dtype=dtype) for k in ("gap", "slider")}
    off = torch.zeros(n, 4, gh, gw, dtype=dtype)
    peaks = {k: [] for k in ("gap", "slider")}
    for k, ch in (("gap", 0), ("slider", 2)):
        xy = labels[k]
        for i in range(n):
            x, y = float(xy[i, 0]), float(xy[i, 1])
            u, v = _cell(x, y, gw, gh)
            peaks[k].append((u, v))
            for r in range(max(0, v - RADIUS), min(gh, v + RADIUS + 1)):
                for c in range(max(0, u - RADIUS), min(gw, u + RADIUS + 1)):
                    Y[k][i, 0, r, c] = math.exp(-((r - v) ** 2 + (c - u) ** 2) / (2 * SIGMA * SIGMA))
            off[i, ch, v, u] = x / STRIDE - u - 0.5
            off[i, ch + 1, v, u] = y / STRIDE - v - 0.5
    return Y, off, peaks


def soft_mask(inp):
    """M = 4x4 average pool of the mask channel (the input's last channel): [N,1,h,w]."""
    return F.avg_pool2d(inp[:, -1:], STRIDE, STRIDE)


def bilinear_zero(P, u, v):
    """Bilinear sample of P[h,w] at continuous grid-index coordinates (u = column, v = row),
    zero outside, = grid_sample(align_corners=True, padding_mode='zeros') at 2u/(w-1)-1."""
    gh, gw = P.shape
    x0, y0 = math.floor(u), math.floor(v)
    fx, fy = u - x0, v - y0
    out = P.new_zeros(())
    for yy, wy in ((y0, 1.0 - fy), (y0 + 1, fy)):
        for xx, wx in ((x0, 1.0 - fx), (x0 + 1, fx)):
            if 0 <= yy < gh and 0 <= xx < gw:
                out = out + P[yy, xx] * (wy * wx)
    return out


def grid_sample_point(P, u, v):
    """The same sample via F.grid_sample (used to cross-check bilinear_zero)."""
    gh, gw = P.shape
    g = torch.tensor([[[[2.0 * u / (gw - 1) - 1.0, 2.0 * v / (gh - 1) - 1.0]]]], dtype=P.dtype)
    return F.grid_sample(P[None, None], g, mode="bilinear", padding_mode="zeros",
                         align_corners=True)[0, 0, 0, 0]


# ------------------------------------------------------------------------------------------------
# Loss terms (MODEL_SPEC §2, docs/LOSS.md)
# ------------------------------------------------------------------------------------------------
def _const(v, like):
    return torch.tensor(float(v), dtype=like.dtype)


def _focal_map(P, Y):
    Pc = torch.clamp(P, 1e-8, 1 - 1e-8)
    pos = (Y >= 0.8).to(P.dtype)
    lpos = pos * (1 - Pc) ** 1.5 * (-torch.log(Pc))
    lneg = (1 - pos) * (1 - Y) ** 4 * Pc ** 1.5 * (-torch.log(torch.clamp(1 - Pc, min=1e-8)))
    return lpos + lneg, pos


def focal_loss(P, Y, M, variant):
    ell, pos = _focal_map(P, Y)
    if variant == "sider":
        den = (pos * M).sum()
        if float(den) == 0.0:
            return _const(0.01, P)
        out = (ell * M).sum() / den
    else:
        num = (ell * M).sum(dim=(1, 2, 3))
        den = (pos * M).sum(dim=(1, 2, 3))
        keep = den > 0
        if not bool(keep.any()):
            return _const(0.01, P)
        out = (num[keep] / den[keep]).mean()
    if math.isnan(float(out)):
        return _const(1.0, P)
    return out


def _sl1(d):
    a = d.abs()
    return torch.where(a < 1.0, 0.5 * d * d, a - 0.5)


def offset_loss(off_pred, off_tgt, Y, M, peaks, variant):
    n = off_pred.shape[0]
    if variant == "sider":
        total = None
        for k, ch in (("gap", 0), ("slider", 2)):
            w = Y[k] * M
            ell = _sl1(off_pred[:, ch:ch + 1] - off_tgt[:, ch:ch + 1]) + \
                _sl1(off_pred[:, ch + 1:ch + 2] - off_tgt[:, ch + 1:ch + 2])
            ws = w.sum()
            if float(ws) < 1e-6:
                # MODEL_SPEC §2.3: gap without weight -> the whole term is 0.01;
                # slider without weight -> L_gap + 0.01.
                return _const(0.01, off_pred) if k == "gap" else total + 0.01
            lk = (w * ell).sum() / ws
            total = lk if total is None else total + lk
        return total
    # corrected: weight = M at the peak cell only; per sample, averaged over supported samples.
    total = None
    for k, ch in (("gap", 0), ("slider", 2)):
        vals = []
        for i in range(n):
            u, v = peaks[k][i]
            w = M[i, 0, v, u]
            if float(w) < 1e-6:
                continue
            d = off_pred[i, ch:ch + 2, v, u] - off_tgt[i, ch:ch + 2, v, u]
            vals.append((w * _sl1(d).sum()) / w)
        lk = torch.stack(vals).mean() if vals else _const(0.01, off_pred)
        total = lk if total is None else total + lk
    return total


def hard_negative_loss(Pg, labels, variant, margin=0.5):
    n = Pg.shape[0]
    nf = [int(v) for v in labels["num_fakes"]]
    if max(nf) == 0:
        return _const(0.0, Pg)
    K = max(nf)
    per = []
    for i in range(n):
        P = Pg[i, 0]
        sp = bilinear_zero(P, float(labels["gap"][i, 0]) / STRIDE, float(labels["gap"][i, 1]) / STRIDE)
        if variant == "sider":
            terms = []
            for k in range(K):
                if nf[i] == 0:
                    fu, fv = 0.0, 0.0
                else:
                    fx, fy = (float(c) for c in labels["fakes"][i, min(k, nf[i] - 1)])
                    # quirk: the stored integer grid cell is divided by the stride again
                    fu, fv = int(fx / STRIDE) / STRIDE, int(fy / STRIDE) / STRIDE
                terms.append(torch.clamp(margin - sp + bilinear_zero(P, fu, fv), min=0.0))
            per.append(torch.stack(terms).sum() / K)
        else:
            if nf[i] == 0:
                continue
            terms = []
            for k in range(nf[i]):
                fx, fy = (float(c) for c in labels["fakes"][i, k])
                terms.append(torch.clamp(margin - sp + bilinear_zero(P, fx / STRIDE, fy / STRIDE), min=0.0))
            per.append(torch.stack(terms).mean())
    return torch.stack(per).mean()


def angle_loss(z_ang, Y_gap, M, angles, variant):
    a = F.normalize(F.normalize(z_ang, p=2, dim=1, eps=1e-12), p=2, dim=1, eps=1e-12)
    th = torch.as_tensor(angles, dtype=z_ang.dtype)
    s, c = torch.sin(th)[:, None, None, None], torch.cos(th)[:, None, None, None]
    dot = a[:, 0:1] * s + a[:, 1:2] * c
    w = (Y_gap > 0.7).to(z_ang.dtype) * M
    if variant == "sider":
        return ((1 - dot) * w).sum() / (w.sum() + 1e-8)
    num = ((1 - dot) * w).sum(dim=(1, 2, 3))
    den = w.sum(dim=(1, 2, 3))
    keep = den > 0
    if not bool(keep.any()):
        return _const(0.0, z_ang)
    return (num[keep] / (den[keep] + 1e-8)).mean()


def padding_bce_loss(Pg, Ps, M, variant):
    if variant == "sider":
        Pg, Ps = torch.sigmoid(Pg), torch.sigmoid(Ps)  # quirk: second sigmoid
    lg = torch.clamp(-torch.log1p(-torch.clamp(Pg, 1e-4, 1 - 1e-4)), max=10.0)
    ls = torch.clamp(-torch.log1p(-torch.clamp(Ps, 1e-4, 1 - 1e-4)), max=10.0)
    pad = 1 - M
    if variant == "sider":
        den = pad.sum()
        if float(den) < 1e-8:
            return _const(0.0, Pg)
        return ((lg + ls) * pad).sum() / den
    num = ((lg + ls) * pad).sum(dim=(1, 2, 3))
    den = pad.sum(dim=(1, 2, 3))
    keep = den >= 1e-8
    if not bool(keep.any()):
        return _const(0.0, Pg)
    return (num[keep] / den[keep]).mean()


def y_axis_loss(Pg, Ps, labels, variant, tau=1.0):
    gh = Pg.shape[2]
    n = Pg.shape[0]

    def dist(P):
        e = P[:, 0].mean(dim=2)  # [N, h]
        return torch.softmax(torch.log(e + 1e-8) / tau, dim=1)

    dg, ds = dist(Pg), dist(Ps)

    def row(y):
        t = math.floor(y / STRIDE / 4) if variant == "sider" else math.floor(y / STRIDE)
        return min(max(t, 0), gh - 1)

    tg = [row(float(labels["gap"][i, 1])) for i in range(n)]
    ts = [row(float(labels["slider"][i, 1])) for i in range(n)]
    ar = torch.arange(n)
    ce = (-torch.log(dg[ar, tg] + 1e-8) - torch.log(ds[ar, ts] + 1e-8)).mean()
    emd = (torch.cumsum(dg, 1) - torch.cumsum(ds, 1)).abs().mean()
    return 1.0 * ce + 0.3 * emd


def loss(logits, inp, labels, variant="sider"):
    """Returns an OrderedDict of the unweighted terms (TERMS) and 'total'.

    logits: dict of the heads' last-conv outputs [N,c,h,w]; inp: model input [N,C,H,W] (mask =
    last channel); labels: dict gap (N,2), slider (N,2), angle (N,), fakes (N,K,2), num_fakes (N,)
    in letterbox pixels / radians."""
    assert variant in ("sider", "corrected")
    zg, zs = logits["heatmap_gap"], logits["heatmap_piece"]
    n, _, gh, gw = zg.shape
    dt = zg.dtype
    Pg, Ps = torch.sigmoid(zg), torch.sigmoid(zs)
    off = 0.5 * torch.tanh(logits["offset"])
    M = soft_mask(inp.to(dt))
    Y, off_t, peaks = build_targets(labels, n, gh, gw, dt)

    t = OrderedDict()
    t["focal_gap"] = focal_loss(Pg, Y["gap"], M, variant)
    t["focal_slider"] = focal_loss(Ps, Y["slider"], M, variant)
    t["offset"] = offset_loss(off, off_t, Y, M, peaks, variant)
    t["hard_negative"] = hard_negative_loss(Pg, labels, variant)
    use_angle = any(float(a) != 0.0 for a in labels["angle"])
    t["angle"] = angle_loss(logits["angle"], Y["gap"], M, labels["angle"], variant) if use_angle \
        else _const(0.0, zg)
    t["padding_bce"] = padding_bce_loss(Pg, Ps, M, variant)
    t["y_axis"] = y_axis_loss(Pg, Ps, labels, variant)

    weighted = [(WEIGHTS["heatmap"], t["focal_gap"]), (WEIGHTS["heatmap"], t["focal_slider"]),
                (WEIGHTS["offset"], t["offset"]), (WEIGHTS["hard_negative"], t["hard_negative"])]
    if use_angle and float(t["angle"]) > 0:
        weighted.append((WEIGHTS["angle"], t["angle"]))
    weighted += [(WEIGHTS["padding_bce"], t["padding_bce"]), (WEIGHTS["y_axis"], t["y_axis"])]
    total, valid = None, 0
    for w, v in weighted:
        if not math.isfinite(float(v)):
            continue  # non-finite terms are dropped
        valid += 1
        total = w * v if total is None else total + w * v
    t["total"] = total if valid else _const(1.0, zg)
    return t


# ------------------------------------------------------------------------------------------------
# Decoding (§1.7, §8) and metrics (§3.5)
# ------------------------------------------------------------------------------------------------
@torch.no_grad()
def decode(outputs, inp=None):
    """outputs: heatmap_gap, heatmap_piece [N,1,h,w] probabilities, and offset [N,4,h,w] (or
    offset_gap / offset_slider [N,2,h,w]). inp: model input (mask = last channel) or None.
    Returns dict of numpy arrays: gap (N,2), slider (N,2), gap_score (N,), slider_score (N,)."""
    hg = outputs["heatmap_gap"][:, 0].double().cpu().numpy().copy()
    hs = outputs["heatmap_piece"][:, 0].double().cpu().numpy().copy()
    if "offset" in outputs:
        og = outputs["offset"][:, 0:2].double().cpu().numpy().copy()
        os_ = outputs["offset"][:, 2:4].double().cpu().numpy().copy()
    else:
        og = outputs["offset_gap"].double().cpu().numpy().copy()
        os_ = outputs["offset_slider"].double().cpu().numpy().copy()
    n, gh, gw = hg.shape
    if inp is not None:
        valid = (-F.max_pool2d(-inp[:, -1:].double(), STRIDE, STRIDE))[:, 0].cpu().numpy()
        inval = valid < 0.5  # min-pool of a binary mask: 0 where the cell holds any padding
        hg[inval] = -np.inf
        hs[inval] = -np.inf
        og *= valid[:, None]
        os_ *= valid[:, None]
    W, H = gw * STRIDE, gh * STRIDE

    def coords(off, i, r, c):
        x = (c + 0.5 + off[i, 0, r, c]) * STRIDE
        y = (r + 0.5 + off[i, 1, r, c]) * STRIDE
        return min(max(x, 0.0), W), min(max(y, 0.0), H)

    res = {k: np.zeros((n, 2)) for k in ("gap", "slider")}
    res.update({k: np.zeros(n) for k in ("gap_score", "slider_score")})
    for i in range(n):
        pk = {}
        for name, hm, off in (("gap", hg, og), ("slider", hs, os_)):
            idx = int(np.argmax(hm[i]))  # first maximum in row-major order
            r, c = divmod(idx, gw)
            pk[name] = (r, c, hm[i, r, c])
            res[name][i] = coords(off, i, r, c)
            res[name + "_score"][i] = hm[i, r, c]
        # y alignment: the higher-scoring object is the reference (slider on ties)
        ref, other = ("gap", "slider") if pk["gap"][2] > pk["slider"][2] else ("slider", "gap")
        rr = min(max(int(round(res[ref][i, 1] / STRIDE - 0.5)), 0), gh - 1)
        lo, hi = max(rr - 1, 0), min(rr + 1, gh - 1)
        hm, off = (hg, og) if other == "gap" else (hs, os_)
        band = hm[i, lo:hi + 1]
        idx = int(np.argmax(band))
        r, c = divmod(idx, gw)
        res[other][i] = coords(off, i, lo + r, c)  # score is not updated
    return res


def metrics(pred, gt_gap, gt_slider):
    """§3.5: per-object err = mean(|dx|,|dy|) in letterbox px; combined = mean of the two."""
    gt_gap, gt_slider = np.asarray(gt_gap, float), np.asarray(gt_slider, float)
    eg = np.abs(pred["gap"] - gt_gap).mean(axis=1)
    es = np.abs(pred["slider"] - gt_slider).mean(axis=1)
    comb = (eg + es) / 2
    return OrderedDict(mae_px=float(comb.mean()), rmse_px=float(np.sqrt((comb ** 2).mean())),
                       gap_mae=float(eg.mean()), slider_mae=float(es.mean()),
                       hit_le_2px=float(100.0 * (comb <= 2).mean()),
                       hit_le_5px=float(100.0 * (comb <= 5).mean()))


if __name__ == "__main__":
    for ch in (2, 4):
        m = build_model(ch)
        print("input_channels=%d params=%d" % (ch, count_params(m)))
    print("state_dict matches tsv:", check_against_tsv(build_model(2)))
