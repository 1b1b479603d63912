#!/usr/bin/env python3
"""Self-checks of the PyTorch reference (tools/reference/sider_ref.py).

  (a) parameter counts for 2 and 4 input channels, state_dict == tests/data/sider_state_dict.tsv,
      the counter-based generator, init statistics, KRSC <-> OIHW round trip
  (b) torch.autograd.gradcheck (float64) of every loss term w.r.t. the logits, both variants,
      on a tiny case (input 2x32x64, grid 8x16) with padding, fakes and a rotation; the manual
      bilinear sampler against F.grid_sample; the variants differing where they should
  (c) decode and metrics on a hand-made case (masking, y alignment, ties, clamping, rounding)
  (d) if the golden files exist: they read back and their loss/logit entries are reproduced

Usage: /usr/bin/python3 tools/reference/check_reference.py
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sider_ref as R  # noqa: E402

torch.set_default_dtype(torch.float64)
FAIL = []


def check(cond, msg):
    print(("  ok   " if cond else "  FAIL ") + msg)
    if not cond:
        FAIL.append(msg)


# ------------------------------------------------------------------------------------------------
def part_a():
    print("(a) model tree, parameter counts, init")
    m2 = R.SiderModel(2)
    m4 = R.SiderModel(4)
    check(R.count_params(m2) == 3284270, "2-channel params = %d (expect 3,284,270)" % R.count_params(m2))
    check(R.count_params(m4) == 3284846, "4-channel params = %d (expect 3,284,846)" % R.count_params(m4))
    check(R.check_against_tsv(m2), "state_dict keys/shapes/order == sider_state_dict.tsv (852 entries)")
    check(len(list(m2.named_parameters())) == 435, "435 parameters")
    check(sum(isinstance(x, nn.Conv2d) for x in m2.modules()) == 143, "143 conv layers")
    check(sum(isinstance(x, nn.BatchNorm2d) for x in m2.modules()) == 139, "139 BatchNorm layers")

    # generator: mix == splitmix64 output function (state 0 -> 0xE220A8397B1DCDAF)
    check(R.mix_int(0) == 0xE220A8397B1DCDAF, "mix(0) == splitmix64 reference value")
    j = np.arange(1000, dtype=np.uint64)
    base = R.mix_int(R.mix_int(1234) ^ 7)
    check(all(int(a) == R.h_int(1234, 7, int(b)) for a, b in zip(R.mix_np(np.uint64(base) ^ j), j)),
          "numpy mix == integer mix")
    z = R.normal_draws(1234, 7, 4)
    zz = []
    for i in range(4):
        u1 = ((R.h_int(1234, 7, 2 * i) >> 11) + 1) * 2.0 ** -53
        u2 = (R.h_int(1234, 7, 2 * i + 1) >> 11) * 2.0 ** -53
        zz.append(math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2))
    check(list(z) == zz, "normal_draws == scalar formula of docs/MODEL.md")

    R.init_weights(m2, 1234)
    w = m2.stage4.fusion.smooth_1_32.conv.weight  # 589,824 values, std sqrt(2/(256*9))
    std = math.sqrt(2.0 / (256 * 9))
    check(abs(float(w.mean())) < 0.01 * std and abs(float(w.std()) / std - 1) < 0.005,
          "init N(0, sqrt(2/fan_out)): mean %.2e std/expected %.5f" % (float(w.mean()), float(w.std()) / std))
    hw = m2.dual_head.heatmap_gap.conv2.weight
    t = [n for n, _ in m2.named_parameters()].index("dual_head.heatmap_gap.conv2.weight")
    check(np.array_equal(hw.detach().float().numpy().reshape(-1), R.conv_init_values(1234, t, (1, 64, 1, 1))),
          "head output conv uses std sqrt(2/1) and t = named_parameters index")
    check(all(float(p.detach().float().double().sub(p.detach()).abs().max()) == 0 for p in m2.parameters()),
          "init values are float32-representable")
    m2b = R.SiderModel(2)
    R.init_weights(m2b, 1234)
    check(all(torch.equal(a, b) for a, b in zip(m2.state_dict().values(), m2b.state_dict().values())),
          "init is deterministic")
    bn = m2.stem.conv1.bn
    check(float(bn.weight.min()) == 1 and float(bn.bias.abs().max()) == 0 and
          float(m2.lite_fpn.fuse_1_4.weight_a) == 1.0 and
          float(m2.dual_head.offset.conv1.conv.bias.abs().max()) == 0, "BN 1/0, fusion scalars 1, biases 0")

    # KRSC <-> OIHW
    x = torch.arange(2 * 3 * 4 * 5.0).reshape(5, 3, 2, 4)  # OIHW (5,3,2,4)
    k = R.oihw_to_krsc(x)
    check(tuple(k.shape) == (5, 2, 4, 3) and float(k[4, 1, 3, 2]) == float(x[4, 2, 1, 3]),
          "oihw_to_krsc indexing")
    check(torch.equal(R.krsc_to_oihw(k.reshape(-1), (5, 3, 2, 4)), x), "krsc_to_oihw(oihw_to_krsc(w)) == w")
    flat = R.params_to_flat(m2)
    m3 = R.SiderModel(2)
    R.flat_to_params(m3, flat)
    check(flat.numel() == 3284270 and all(torch.equal(a, b) for a, b in
                                          zip(m2.parameters(), m3.parameters())), "params_to_flat/flat_to_params round trip")


# ------------------------------------------------------------------------------------------------
def tiny_case(seed=0):
    g = torch.Generator().manual_seed(seed)
    N, H, W = 2, 32, 64
    gh, gw = H // 4, W // 4
    inp = torch.zeros(N, 2, H, W)
    inp[:, 0] = torch.rand(N, H, W, generator=g)
    inp[0, 1, 3:30, :] = 1.0   # rows 3..29 valid: fractional M in grid rows 0 and 7
    inp[1, 1, :, 0:58] = 1.0   # cols 0..57 valid: grid col 14 M = 0.5, col 15 M = 0
    labels = {
        "gap": torch.tensor([[40.3, 14.7], [30.9, 18.4]]),
        "slider": torch.tensor([[6.6, 15.2], [10.2, 17.0]]),
        "angle": torch.tensor([0.3, 0.0]),
        "fakes": torch.zeros(N, 4, 2),
        "num_fakes": torch.tensor([2, 1]),
    }
    labels["fakes"][0, 0] = torch.tensor([20.2, 10.9])
    labels["fakes"][0, 1] = torch.tensor([50.8, 24.1])
    labels["fakes"][1, 0] = torch.tensor([44.5, 9.5])
    logits = {
        "heatmap_gap": torch.randn(N, 1, gh, gw, generator=g),
        "heatmap_piece": torch.randn(N, 1, gh, gw, generator=g),
        "offset": torch.randn(N, 4, gh, gw, generator=g),
        "angle": torch.randn(N, 2, gh, gw, generator=g),
    }
    return logits, inp, labels


HEADS = ("heatmap_gap", "heatmap_piece", "offset", "angle")


def part_b():
    print("(b) loss: gradcheck w.r.t. logits (float64), bilinear sampler, variants")
    logits, inp, labels = tiny_case()
    for variant in ("sider", "corrected"):
        def f(*zs):
            t = R.loss(dict(zip(HEADS, zs)), inp, labels, variant)
            return torch.stack([t[k].reshape(()) for k in R.TERMS + ("total",)])

        zs = tuple(logits[h].clone().requires_grad_(True) for h in HEADS)
        t = R.loss(dict(zip(HEADS, zs)), inp, labels, variant)
        print("   %-9s " % variant + " ".join("%s=%.6g" % (k, float(v)) for k, v in t.items()))
        check(all(t[k].requires_grad for k in R.TERMS), "%s: every term depends on the logits" % variant)
        ok = torch.autograd.gradcheck(f, zs, eps=1e-6, atol=1e-6, rtol=1e-5)
        check(ok, "%s: gradcheck of all 7 terms + total" % variant)

    # manual bilinear == grid_sample(align_corners=True, zeros)
    P = torch.rand(8, 16)
    pts = [(0.0, 0.0), (3.25, 1.75), (15.0, 7.0), (15.4, 7.3), (-0.6, 2.2), (10.1, 7.9), (7.5, -0.25)]
    err = max(abs(float(R.bilinear_zero(P, u, v) - R.grid_sample_point(P, u, v))) for u, v in pts)
    check(err < 1e-14, "bilinear_zero == F.grid_sample(align_corners=True, zeros) (max err %.1e)" % err)

    # targets
    Y, off, peaks = R.build_targets(labels, 2, 8, 16)
    check(peaks["gap"][0] == (10, 3) and float(Y["gap"][0, 0, 3, 10]) == 1.0 and
          int((Y["gap"][0] >= 0.8).sum()) == 5, "Gaussian target: peak 1 on the integer cell, 5 positives")
    check(abs(float(off[0, 0, 3, 10]) - (40.3 / 4 - 10 - 0.5)) < 1e-15 and
          abs(float(off[0, 3, 3, 1]) - (15.2 / 4 - 3 - 0.5)) < 1e-15 and int((off != 0).sum()) == 8,
          "offset target only at the peak cells")
    M = R.soft_mask(inp)
    check(float(M[0, 0, 0, 0]) == 0.25 and float(M[1, 0, 2, 14]) == 0.5 and float(M[1, 0, 2, 15]) == 0.0,
          "M = 4x4 average pool of the mask channel")

    # corrected focal differs from sider focal when the samples' support differs
    lab2 = dict(labels)
    lab2["gap"] = torch.tensor([[40.3, 14.7], [57.0, 18.4]])  # sample 1 peak at grid col 14 (M=0.5)
    ts = R.loss(logits, inp, lab2, "sider")
    tc = R.loss(logits, inp, lab2, "corrected")
    check(abs(float(ts["focal_gap"]) - float(tc["focal_gap"])) > 1e-6,
          "focal: batch vs per-sample normalisation differ (%.6g vs %.6g)" % (ts["focal_gap"], tc["focal_gap"]))
    # hard negative: no fakes anywhere -> 0; y-axis rows
    lab3 = dict(labels)
    lab3["num_fakes"] = torch.tensor([0, 0])
    check(float(R.loss(logits, inp, lab3, "sider")["hard_negative"]) == 0.0, "hard negative = 0 without fakes")
    # sider hard negative by hand for sample 1 (K=2: sample 1 repeats its only fake)
    Pg = torch.sigmoid(logits["heatmap_gap"])
    hn = []
    for i in range(2):
        sp = R.grid_sample_point(Pg[i, 0], float(labels["gap"][i, 0]) / 4, float(labels["gap"][i, 1]) / 4)
        fk = [labels["fakes"][i, min(k, int(labels["num_fakes"][i]) - 1)] for k in range(2)]
        hn.append(sum(max(0.0, 0.5 - float(sp) + float(R.grid_sample_point(
            Pg[i, 0], int(float(f[0]) / 4) / 4, int(float(f[1]) / 4) / 4))) for f in fk) / 2)
    check(abs(float(R.loss(logits, inp, labels, "sider")["hard_negative"]) - sum(hn) / 2) < 1e-14,
          "sider hard negative == grid_sample recomputation")
    # angle is gated off when no sample is rotated
    lab4 = dict(labels)
    lab4["angle"] = torch.tensor([0.0, 0.0])
    t4 = R.loss(logits, inp, lab4, "sider")
    t0 = R.loss(logits, inp, labels, "sider")
    check(float(t4["angle"]) == 0.0 and abs(float(t0["total"]) - 0.5 * float(t0["angle"]) - float(t4["total"]))
          < 1e-12, "angle: used only when some sample is rotated, weight 0.5")
    # padding BCE floor: sider (double sigmoid) > log 2
    check(float(t0["padding_bce"]) > 2 * math.log(2), "sider padding BCE >= 2*ln2 floor (two maps)")
    # non-finite terms are dropped
    lg = dict(logits)
    lg["angle"] = logits["angle"].clone()
    lg["angle"][0, :, 3, 10] = float("nan")
    tn = R.loss(lg, inp, labels, "sider")
    check(math.isnan(float(tn["angle"])) and math.isfinite(float(tn["total"])) and
          abs(float(tn["total"]) - float(t4["total"])) < 1e-12, "NaN term dropped from the total")


# ------------------------------------------------------------------------------------------------
def part_c():
    print("(c) decode and metrics on a hand-made case")
    N, gh, gw = 2, 8, 16
    hg = torch.full((N, 1, gh, gw), 0.01)
    hs = torch.full((N, 1, gh, gw), 0.01)
    off = torch.zeros(N, 4, gh, gw)
    inp = torch.ones(N, 2, 4 * gh, 4 * gw)
    inp[0, 1, :, 62:] = 0.0  # sample 0: grid column 15 holds padding -> invalid
    # sample 0: gap peak 0.9 at (r3,c10) off (0.2,-0.1) -> (42.8, 13.6), gap is the reference.
    hg[0, 0, 3, 10] = 0.9
    off[0, 0:2, 3, 10] = torch.tensor([0.2, -0.1])
    hg[0, 0, 6, 15] = 0.99                             # in padding: masked away
    hs[0, 0, 3, 15] = 0.95                             # in padding: masked away
    hs[0, 0, 6, 2] = 0.7                               # global slider max, outside the band
    off[0, 2:4, 6, 2] = torch.tensor([0.1, 0.1])
    hs[0, 0, 4, 1] = 0.6                               # best in band rows 2..4
    off[0, 2:4, 4, 1] = torch.tensor([-0.3, 0.4])      # -> (4.8, 19.6)
    off[0, 2:4, 3, 15] = torch.tensor([0.4, 0.4])
    # sample 1: tie 0.5/0.5 -> slider is the reference. slider at (r2,c15) off (0.7, 0.5):
    # x = (15.5+0.7)*4 = 64.8 -> clamped to 64; y = (2.5+0.5)*4 = 12 -> y/4-0.5 = 2.5 and
    # round-half-even gives 2 -> band rows 1..3 (round-half-away would give rows 2..4).
    # Gap global max at (r6,c12) (outside the band); best gap cell in rows 1..3 at (r1,c8);
    # (r4,c4) would win under round-half-away.
    hs[1, 0, 2, 15] = 0.5
    off[1, 2:4, 2, 15] = torch.tensor([0.7, 0.5])
    hg[1, 0, 6, 12] = 0.5
    hg[1, 0, 1, 8] = 0.3
    off[1, 0:2, 1, 8] = torch.tensor([-0.25, 0.25])     # -> (33, 7)
    hg[1, 0, 4, 4] = 0.45
    outs = {"heatmap_gap": hg, "heatmap_piece": hs, "offset": off}
    d = R.decode(outs, inp)
    close = lambda a, b: np.allclose(np.asarray(a, float), np.asarray(b, float), atol=1e-12, rtol=0)
    check(close(d["gap"][0], [42.8, 13.6]) and close(d["gap_score"][0], 0.9),
          "sample 0 gap: argmax outside padding, offsets applied, score 0.9")
    check(close(d["slider"][0], [4.8, 19.6]) and close(d["slider_score"][0], 0.7),
          "sample 0 slider: re-searched in rows r-1..r+1 of the gap's row, score not updated")
    check(close(d["slider"][1], [64.0, 12.0]) and close(d["slider_score"][1], 0.5),
          "sample 1 slider: tie -> slider is the reference; x clamped to W")
    check(close(d["gap"][1], [33.0, 7.0]) and close(d["gap_score"][1], 0.5),
          "sample 1 gap: band from round-half-even(2.5)=2 -> rows 1..3, score not updated")
    d2 = R.decode({"heatmap_gap": hg, "heatmap_piece": hs, "offset_gap": off[:, 0:2],
                   "offset_slider": off[:, 2:4]}, None)
    check(close(d2["gap"][0], [(15.5) * 4, (6.5) * 4]) and close(d2["gap_score"][0], 0.99),
          "without input: no masking")
    m = R.metrics(d, [[42.8, 13.6], [33.0, 9.0]], [[4.8, 22.6], [60.0, 12.0]])
    # errs: gap (0, 1), slider (1.5, 2); combined (0.75, 1.5)
    check(close([m["gap_mae"], m["slider_mae"], m["mae_px"]], [0.5, 1.75, 1.125]) and
          close(m["rmse_px"], math.sqrt((0.75 ** 2 + 1.5 ** 2) / 2)) and m["hit_le_2px"] == 100.0 and
          m["hit_le_5px"] == 100.0, "metrics: L1 averaged over axes, combined, rmse, hits")


def numpy_sider_terms(T):
    """Third, plain-numpy computation of the `sider` loss terms from a golden's logits/labels."""
    inp = T["input"].astype(np.float64)
    N, _, H, W = inp.shape
    gh, gw = H // 4, W // 4
    M = inp[:, -1].reshape(N, gh, 4, gw, 4).mean(axis=(2, 4))
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    Pg, Ps = sig(T["logits.heatmap_gap"][:, 0]), sig(T["logits.heatmap_piece"][:, 0])
    r, c = np.arange(gh)[:, None], np.arange(gw)[None]

    def gauss(xy):
        Y = np.zeros((N, gh, gw))
        for i in range(N):
            u, v = int(xy[i, 0] // 4), int(xy[i, 1] // 4)
            g = np.exp(-((r - v) ** 2 + (c - u) ** 2) / 4.5)
            g[(abs(r - v) > 4) | (abs(c - u) > 4)] = 0
            Y[i] = g
        return Y

    Yg, Ys = gauss(T["labels.gap"]), gauss(T["labels.slider"])

    def focal(P, Y):
        P = np.clip(P, 1e-8, 1 - 1e-8)
        pos = Y >= 0.8
        ell = np.where(pos, (1 - P) ** 1.5 * -np.log(P), (1 - Y) ** 4 * P ** 1.5 * -np.log(np.maximum(1 - P, 1e-8)))
        return (ell * M).sum() / (pos * M).sum()

    def bce(P):
        return np.minimum(-np.log1p(-np.clip(sig(P), 1e-4, 1 - 1e-4)), 10)

    def dist(P):
        e = P.mean(2) + 1e-8
        return e / e.sum(1, keepdims=True)

    out = {"focal_gap": focal(Pg, Yg), "focal_slider": focal(Ps, Ys),
           "padding_bce": ((bce(Pg) + bce(Ps)) * (1 - M)).sum() / (1 - M).sum()}
    dg, ds = dist(Pg), dist(Ps)
    tg = np.clip(T["labels.gap"][:, 1] // 16, 0, gh - 1).astype(int)
    ts = np.clip(T["labels.slider"][:, 1] // 16, 0, gh - 1).astype(int)
    out["y_axis"] = np.mean(-np.log(dg[range(N), tg] + 1e-8) - np.log(ds[range(N), ts] + 1e-8)) + \
        0.3 * np.abs(np.cumsum(dg, 1) - np.cumsum(ds, 1)).mean()
    o = 0.5 * np.tanh(T["logits.offset"])
    out["offset"] = 0.0
    for k, Y, ch in (("gap", Yg, 0), ("slider", Ys, 2)):
        xy = T["labels." + k]
        tgt = np.zeros((N, 2, gh, gw))
        for i in range(N):
            u, v = int(xy[i, 0] // 4), int(xy[i, 1] // 4)
            tgt[i, :, v, u] = (xy[i, 0] / 4 - u - 0.5, xy[i, 1] / 4 - v - 0.5)
        dd = o[:, ch:ch + 2] - tgt
        ell = np.where(abs(dd) < 1, 0.5 * dd * dd, abs(dd) - 0.5).sum(1)
        out["offset"] += (Y * M * ell).sum() / (Y * M).sum()
    a = T["logits.angle"]
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    th = T["labels.angle"]
    dot = a[:, 0] * np.sin(th)[:, None, None] + a[:, 1] * np.cos(th)[:, None, None]
    w = (Yg > 0.7) * M
    out["angle"] = ((1 - dot) * w).sum() / (w.sum() + 1e-8)

    def bil(P, u, v):
        x0, y0 = int(np.floor(u)), int(np.floor(v))
        acc = 0.0
        for yy, wy in ((y0, 1 - (v - y0)), (y0 + 1, v - y0)):
            for xx, wx in ((x0, 1 - (u - x0)), (x0 + 1, u - x0)):
                if 0 <= yy < gh and 0 <= xx < gw:
                    acc += P[yy, xx] * wy * wx
        return acc

    nf = T["labels.num_fakes"]
    K = int(nf.max())
    hn = []
    for i in range(N):
        sp = bil(Pg[i], *(T["labels.gap"][i] / 4))
        acc = 0.0
        for k in range(K):
            f = T["labels.fakes"][i, min(k, nf[i] - 1)] if nf[i] > 0 else np.zeros(2)
            acc += max(0.0, 0.5 - sp + bil(Pg[i], (f[0] // 4) / 4, (f[1] // 4) / 4))
        hn.append(acc / K)
    out["hard_negative"] = np.mean(hn)
    return out


# ------------------------------------------------------------------------------------------------
def part_d():
    here = os.path.dirname(os.path.abspath(__file__))
    ddir = os.path.join(here, "..", "..", "tests", "data")
    paths = {v: os.path.join(ddir, "golden_%s.safetensors" % v) for v in ("sider", "corrected")}
    if not all(os.path.exists(p) for p in paths.values()):
        print("(d) goldens not present, skipped")
        return
    print("(d) goldens: read back, reproduce step-0 logits and loss")
    import make_goldens as G
    inp_np, labels_np = G.make_batch()
    model = R.build_model(2)
    R.init_weights(model, G.SEED)
    model.double().train()
    inp = torch.from_numpy(inp_np).double()
    with torch.no_grad():
        logits, outs = model(inp)
    labels = {k: torch.from_numpy(v) for k, v in labels_np.items()}
    for v, p in paths.items():
        T, meta = G.read_safetensors(p)
        check(np.array_equal(T["input"], inp_np), "%s: input matches make_batch()" % v)
        check(all(np.array_equal(T["logits." + h], logits[h].numpy()) for h in HEADS),
              "%s: logits reproduced bit-exactly" % v)
        t = R.loss(logits, inp, labels, v)
        check(all(float(T["loss." + k][0]) == float(t[k]) for k in R.TERMS + ("total",)),
              "%s: loss terms reproduced" % v)
        if v == "sider":
            ref = numpy_sider_terms(T)
            err = max(abs(ref[k] - float(T["loss." + k][0])) / abs(ref[k]) for k in ref)
            check(err < 1e-12, "sider: all 7 terms match an independent numpy computation (rel %.1e)" % err)
        n0 = "stem.conv1.conv.weight"
        vals = model.stem.conv1.conv.weight.detach().float().numpy().reshape(-1)
        check(np.array_equal(T["init.sample/" + n0], vals[G.sample_idx(vals.size)]), "%s: init.sample" % v)
        has_act = any(k.startswith("act.") for k in T)
        check(has_act == meta.get("act", "").endswith("present"),
              "%s: act.* %s, as its metadata says" % (v, "present" if has_act else "absent"))

if __name__ == "__main__":
    part_a()
    part_b()
    part_c()
    part_d()
    print("FAILED: %d" % len(FAIL) if FAIL else "all checks passed")
    sys.exit(1 if FAIL else 0)
