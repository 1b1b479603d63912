#!/usr/bin/env python3
"""Write tests/data/golden_sider.safetensors and tests/data/golden_corrected.safetensors.

Reference model in float64 (init seed 1234, values rounded to float32 by init_weights and then
widened), batch N=2, input 2x64x128, train mode, 3 AdamW steps on the same batch. The keys are
exactly those of docs/MODEL.md, with one size-driven exception: the `act.*` tensors (identical for
both variants, since the step-0 forward does not depend on the loss) are stored only in
golden_sider.safetensors and as F32 (float64 values rounded to nearest float32). The safetensors
files are written and read back by the code in this file (no dependency on `safetensors`).

Usage:  /usr/bin/python3 tools/reference/make_goldens.py [--out-dir tests/data] [--acts sider|both|none]
"""
import argparse
import json
import math
import os
import struct
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sider_ref as R  # noqa: E402

SEED = 1234
N, C, H, W = 2, 2, 64, 128
INPUT_RNG_SEED = 7
STEPS = 3
ADAMW = dict(lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
CLIP = 1.0
MAX_FAKES = 4

# ------------------------------------------------------------------------------------------------
# safetensors (8-byte LE header length, JSON header, raw little-endian data)
# ------------------------------------------------------------------------------------------------
_DT = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8")}
_NP2DT = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64"}


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = OrderedDict(), [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = _NP2DT[arr.dtype]
        raw = arr.astype(_DT[dt], copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((-len(hj)) % 8)  # pad the header to 8-byte alignment (safetensors convention)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen].decode("utf-8"), object_pairs_hook=OrderedDict)
    meta = header.pop("__metadata__", {})
    body = memoryview(data)[8 + hlen:]
    out = OrderedDict()
    end_max = 0
    for name, h in header.items():
        b, e = h["data_offsets"]
        dt = _DT[h["dtype"]]
        n = int(np.prod(h["shape"])) if h["shape"] else 1
        assert e - b == n * dt.itemsize, name
        out[name] = np.frombuffer(body[b:e], dtype=dt).reshape(h["shape"]).copy()
        end_max = max(end_max, e)
    assert end_max == len(body), "trailing bytes"
    return out, meta


# ------------------------------------------------------------------------------------------------
# The batch
# ------------------------------------------------------------------------------------------------
def make_batch():
    """Input [N,2,64,128] float32: gray = k/255 (k integer, smooth field + noise from
    numpy default_rng(7), padding filled white = 255), mask = 1 inside the letterbox rectangle.
    Sample 0: valid rows 6..57 (inclusive), all columns. Sample 1: valid columns 0..121, all rows.
    Neither border is a multiple of 4, so the 4x4-average mask M is fractional (0.5) there."""
    rng = np.random.default_rng(INPUT_RNG_SEED)
    gray = np.zeros((N, H, W))
    for i in range(N):
        coarse = rng.random((H // 8 + 1, W // 8 + 1))
        yy = np.linspace(0, H // 8, H)
        xx = np.linspace(0, W // 8, W)
        rows = np.array([np.interp(xx, np.arange(coarse.shape[1]), coarse[r]) for r in range(coarse.shape[0])])
        field = np.array([np.interp(yy, np.arange(coarse.shape[0]), rows[:, c]) for c in range(W)]).T
        gray[i] = field + 0.08 * rng.standard_normal((H, W))
    k = np.clip(np.rint(gray * 255.0), 0, 255)
    mask = np.zeros((N, H, W))
    mask[0, 6:58, :] = 1.0
    mask[1, :, 0:122] = 1.0
    k[mask == 0] = 255.0
    inp = np.stack([k / 255.0, mask], axis=1).astype(np.float32)
    labels = {
        "gap": np.array([[90.3, 30.7], [70.9, 22.4]]),
        "slider": np.array([[14.6, 31.2], [12.2, 23.0]]),
        "angle": np.array([0.02, 0.0]),
        "fakes": np.zeros((N, MAX_FAKES, 2)),
        "num_fakes": np.array([2, 1], dtype=np.int64),
    }
    labels["fakes"][0, 0] = (60.2, 20.9)
    labels["fakes"][0, 1] = (100.8, 44.1)
    labels["fakes"][1, 0] = (40.5, 40.5)
    return inp, labels


def sample_idx(numel):
    s = min(64, numel)
    return np.array([k * numel // s for k in range(s)], dtype=np.int64)


def f64(t):
    return t.detach().double().cpu().numpy().copy()


# Sensitivity run (see README "conditioning"): every gradient tensor gets additive noise of this
# size relative to its RMS at every step, the error fp32 arithmetic leaves in a gradient
# (measured against these goldens: <= 3e-5 relative L2 per tensor). Additive, not relative per
# element: rounding errors scale with the tensor, so small elements carry large relative errors.
GRAD_NOISE = 3e-5


def perturbed_trajectory(variant, inp_np, labels_np):
    """The same 3 steps with GRAD_NOISE * rms(g) * N(0,1) added to every gradient before clipping.

    The recipe's first steps are ill-conditioned (saturated heads, AdamW normalising tiny
    gradients): an implementation whose gradients carry fp32-level relative errors ends
    somewhere else after 3 steps even when every op is right. The deviation of this run from the
    exact one measures, per tensor, how far such an implementation may legitimately land.
    """
    torch.set_default_dtype(torch.float64)
    model = R.build_model(C)
    R.init_weights(model, SEED)
    model.double().train()
    inp = torch.from_numpy(inp_np).double()
    labels = {k: torch.from_numpy(v) for k, v in labels_np.items()}
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    gen = torch.Generator().manual_seed(2024)
    steps = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits, _ = model(inp)
        terms = R.loss(logits, inp, labels, variant)
        terms["total"].backward()
        with torch.no_grad():
            for p in model.parameters():
                rms = float(p.grad.pow(2).mean().sqrt())
                p.grad.add_(GRAD_NOISE * rms * torch.randn(p.grad.shape, generator=gen, dtype=torch.float64))
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        steps.append((float(terms["total"]), float(gn)))
        opt.step()
    params = OrderedDict((n, p.detach().clone()) for n, p in model.named_parameters())
    bns = OrderedDict((n, (m.running_mean.clone(), m.running_var.clone()))
                      for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d))
    torch.set_default_dtype(torch.float32)
    return steps, params, bns


def rel(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    d = float(torch.linalg.vector_norm(b))
    return float(torch.linalg.vector_norm(a - b)) / (d if d > 0 else 1.0)


def make(variant, inp_np, labels_np, with_acts=True):
    torch.set_default_dtype(torch.float64)
    model = R.build_model(C)
    R.init_weights(model, SEED)
    init_vals = OrderedDict((n, p.detach().float().numpy().reshape(-1).copy())
                            for n, p in model.named_parameters())
    model.double().train()
    inp = torch.from_numpy(inp_np).double()
    labels = {k: torch.from_numpy(v) for k, v in labels_np.items()}

    T = OrderedDict()
    T["input"] = inp_np
    T["labels.gap"] = labels_np["gap"]
    T["labels.slider"] = labels_np["slider"]
    T["labels.angle"] = labels_np["angle"]
    T["labels.fakes"] = labels_np["fakes"]
    T["labels.num_fakes"] = labels_np["num_fakes"]
    for n, v in init_vals.items():
        d = v.astype(np.float64)
        T["init.sum/" + n] = np.array([d.sum()])
        T["init.sumsq/" + n] = np.array([(d * d).sum()])
    for n, v in init_vals.items():
        T["init.sample/" + n] = v[sample_idx(v.size)].astype(np.float32)

    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    params = list(model.named_parameters())
    losses = None
    steps = []
    for k in range(STEPS):
        opt.zero_grad()
        if k == 0:
            logits, outs, acts = model(inp, return_acts=True)
        else:
            logits, outs = model(inp)
        terms = R.loss(logits, inp, labels, variant)
        terms["total"].backward()
        raw_grads = [p.grad.detach().reshape(-1).clone() for _, p in params] if k == 0 else None
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        # clip_grad_norm_ returns the global norm before clipping
        if k == 0:
            losses = OrderedDict((t, float(v)) for t, v in terms.items())
            for h in ("heatmap_gap", "heatmap_piece", "offset", "angle"):
                T["logits." + h] = f64(logits[h])
            for h in ("heatmap_gap", "heatmap_piece", "offset", "angle"):
                T["out." + h] = f64(outs[h])
            if with_acts:
                # act.* are float64 computations stored rounded to float32 (size budget; they are
                # variant-independent, so only golden_sider carries them)
                for a, v in acts.items():
                    T["act." + a] = f64(v).astype(np.float32)
            for t in R.TERMS + ("total",):
                T["loss." + t] = np.array([float(terms[t])])
            # gradients before clipping
            for (n, _), g in zip(params, raw_grads):
                T["grad.norm/" + n] = np.array([float(g.norm())])
            for (n, _), g in zip(params, raw_grads):
                T["grad.sample/" + n] = g.numpy()[sample_idx(g.numel())].copy()
        steps.append((float(terms["total"]), float(gn)))
        opt.step()
    for k, (l, g) in enumerate(steps):
        T["step%d.loss" % k] = np.array([l])
        T["step%d.grad_norm" % k] = np.array([g])
    for n, p in params:
        v = p.detach().reshape(-1).numpy()
        T["final.sample/" + n] = v[sample_idx(v.size)].copy()
    for n, p in params:
        v = p.detach().reshape(-1).numpy()
        T["final.norm_delta/" + n] = np.array([float(np.linalg.norm(v - init_vals[n].astype(np.float64)))])
    for name, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            T["final.running_mean/" + name] = f64(m.running_mean)
            T["final.running_var/" + name] = f64(m.running_var)
    p_steps, p_params, p_bns = perturbed_trajectory(variant, inp_np, labels_np)
    for k, ((l, g), (pl, pg)) in enumerate(zip(steps, p_steps)):
        T["sens.step%d.loss" % k] = np.array([abs(pl - l) / abs(l)])
        T["sens.step%d.grad_norm" % k] = np.array([abs(pg - g) / abs(g)])
    for n, p in params:
        T["sens.final/" + n] = np.array([rel(p_params[n], p.detach())])
    for name, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            T["sens.running_mean/" + name] = np.array([rel(p_bns[name][0], m.running_mean)])
            T["sens.running_var/" + name] = np.array([rel(p_bns[name][1], m.running_var)])
    torch.set_default_dtype(torch.float32)
    return T, losses, steps


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "..", "tests", "data"))
    ap.add_argument("--acts", choices=("sider", "both", "none"), default="sider",
                    help="which golden files carry act.* (default: golden_sider only)")
    args = ap.parse_args()
    out_dir = os.path.normpath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)

    inp, labels = make_batch()
    total = 0
    for variant in ("sider", "corrected"):
        T, losses, steps = make(variant, inp, labels, with_acts=(args.acts == "both" or args.acts == variant))
        meta = OrderedDict(
            format="slidefuse golden v1", variant=variant, init_seed=str(SEED),
            input="N=2 C=2 H=64 W=128; gray=k/255 from numpy default_rng(7); "
                  "mask: s0 rows 6..57, s1 cols 0..121",
            model_dtype="float64", mode="train", steps=str(STEPS),
            optimizer="AdamW lr=3e-4 betas=(0.9,0.999) eps=1e-8 wd=0.05; clip_grad_norm_ 1.0",
            sensitivity_grad_noise=str(GRAD_NOISE) + " x rms per tensor, additive",
            torch=torch.__version__, numpy=np.__version__,
            command="/usr/bin/python3 tools/reference/make_goldens.py",
            act="act.* (float64 values rounded to F32): %s" % (
                "present" if (args.acts == "both" or args.acts == variant) else "absent"),
        )
        path = os.path.join(out_dir, "golden_%s.safetensors" % variant)
        write_safetensors(path, T, meta)
        back, bmeta = read_safetensors(path)
        assert list(back.keys()) == list(T.keys())
        for k, v in T.items():
            a = np.ascontiguousarray(v)
            assert back[k].dtype == a.dtype and back[k].shape == a.shape, k
            assert np.array_equal(back[k], a, equal_nan=True), k
        assert bmeta == meta
        size = os.path.getsize(path)
        total += size
        print("== %s: %s (%d tensors, %.1f KiB)" % (variant, path, len(T), size / 1024))
        for t, v in losses.items():
            print("   loss.%-14s %.12g" % (t, v))
        for k, (l, g) in enumerate(steps):
            print("   step%d loss %.12g grad_norm %.12g" % (k, l, g))
    print("total golden size: %d bytes (%.2f MiB)" % (total, total / 2 ** 20))


if __name__ == "__main__":
    main()
