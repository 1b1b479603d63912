#!/usr/bin/env python3
"""Checks a `slidefuse export` weight file against the PyTorch reference model (sider_ref.py).

usage: check_export.py --weights W.safetensors --io IO.safetensors [--tol 1e-4]

1. Builds sider_ref.SiderModel for the file's input channels and loads the file with
   load_state_dict(strict=True): every state_dict key present with its shape, nothing extra.
2. Runs the model in eval mode (BatchNorm running statistics), float32, on IO's `input`
   (N, C, H, W) and compares each head's logits with IO's `logits.<head>` (heatmap_gap,
   heatmap_piece, offset, angle; N, c, H/4, W/4), which slidefuse computed from the same weights:
   relative L2 error <= tol per head (DESIGN §2: a whole forward, fp32, within 1e-4).
Prints one line per head; exit status 0 when everything holds, 1 otherwise (with the reason).
Run by tests/tools_train_signals_test.cpp when /usr/bin/python3 has torch; needs torch and numpy.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sider_ref as R  # noqa: E402
from make_goldens import read_safetensors  # noqa: E402

HEADS = ("heatmap_gap", "heatmap_piece", "offset", "angle")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True, help="file written by `slidefuse export`")
    ap.add_argument("--io", required=True, help="input and slidefuse's logits (safetensors)")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative L2 bound per head")
    args = ap.parse_args()

    weights, meta = read_safetensors(args.weights)
    if any(k.startswith("optimizer.") for k in weights):
        print("FAIL: %s holds optimizer state (not an exported weight file)" % args.weights)
        return 1
    channels = int(weights["stem.conv1.conv.weight"].shape[1])
    model = R.build_model(input_channels=channels)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.items()}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        print("FAIL: load_state_dict(strict=True): %s" % e)
        return 1
    print("loaded %d tensors strictly (%s, format %s)" % (len(state), meta.get("slidefuse.kind", "?"),
                                                         meta.get("format", "?")))

    io, _ = read_safetensors(args.io)
    x = torch.from_numpy(io["input"].astype(np.float32))
    model.float().eval()
    with torch.no_grad():
        logits, _ = model(x)
    ok = True
    for h in HEADS:
        got = io["logits." + h].astype(np.float64)
        ref = logits[h].double().numpy()
        if got.shape != ref.shape:
            print("FAIL %s: shape %s, reference %s" % (h, got.shape, ref.shape))
            ok = False
            continue
        rel = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
        good = bool(np.isfinite(rel) and rel <= args.tol)
        print("%s %s: relative L2 %.3e (max abs %.3e) bound %.0e" % ("ok  " if good else "FAIL", h, rel,
                                                                    np.abs(got - ref).max(), args.tol))
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
