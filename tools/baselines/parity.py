#!/usr/bin/env python3
"""Convergence parity: the PyTorch baseline (default eager_bf16_cl, the original's setup) trained
from the same initial weights on the same batches, in the same order, with the same per-step
learning rate as a slidefuse run; loss curves overlaid in a PNG; final losses compared (pass when
they differ by <= 5%).

What the slidefuse side must provide (one `slidefuse train` run):
  - metrics.jsonl of the run with one record per optimizer step: `logging.log_interval=1`
    (records {"step": k, "loss": ..., "lr": ...}, k from 1; validation records are ignored), with
    `train.gradient_accumulation_steps=1` and no skipped (non-finite) steps;
  - its initial weights: either `--init FILE.safetensors` (`slidefuse export` of the step-0
    weights: state_dict names, PyTorch layout, buffers included) or `--init-seed S` = the run's
    `train.seed` (model/init.cpp and sider_ref.init_weights are bit-identical);
  - its data: `--data DIR` = the run's data.processed_dir/train and `--seed` = its train.seed. The
    batches are rebuilt as data::Loader makes them (shards sorted by path, global file order,
    data::epoch_order shuffle per epoch, drop_last). Or `--batch-order FILE`: one line per step,
    either JSON {"step": k, "ids": [...]} or whitespace/comma-separated global sample ids.

    python3 tools/baselines/parity.py --slidefuse-metrics runs/p/metrics.jsonl \\
        --data data/processed/train --seed 42 --batch 128 --steps 300 --out-dir docs/perf/parity

Outputs in --out-dir: parity.json (summary + both curves), torch_losses.jsonl, parity.png
(matplotlib permitting). Exit code 0 = pass (or no slidefuse metrics given), 1 = final losses
differ by more than --tolerance, 2 = error.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import shards  # noqa: E402
import torch_baseline as tb  # noqa: E402

# ------------------------------------------------------------------------------------------------
# safetensors (the `safetensors` package when installed, else this reader of the documented
# format: u64 little-endian header length, JSON header {name: {dtype, shape, data_offsets}}, data)
# ------------------------------------------------------------------------------------------------
_NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1",
       "BOOL": "?"}


def read_safetensors(path):
    """{name: torch.Tensor} of a safetensors file (CPU)."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: truncated (no header length)" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d exceeds the file" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        shape = tuple(meta["shape"])
        if not 0 <= b <= e <= len(data):
            raise ValueError("%s: %s: data offsets [%d, %d) outside the data" % (path, name, b, e))
        if meta["dtype"] == "BF16":
            v = np.frombuffer(data[b:e], "<u2").astype(np.uint32) << 16
            arr = v.view(np.float32).reshape(shape)
            out[name] = torch.from_numpy(arr.copy()).to(torch.bfloat16)
            continue
        if meta["dtype"] not in _NP:
            raise ValueError("%s: %s: unsupported dtype %s" % (path, name, meta["dtype"]))
        arr = np.frombuffer(data[b:e], _NP[meta["dtype"]])
        if arr.size != int(np.prod(shape)):
            raise ValueError("%s: %s: %d bytes do not hold shape %s" % (path, name, e - b, shape))
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out


def write_safetensors(path, tensors):
    """Minimal writer (tests): {name: tensor} as F32/F64/I64 little-endian."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        b = t.detach().cpu().contiguous().numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_initial_state(path, input_channels=2):
    """State dict for the reference model from an exported weight file or checkpoint (optimizer
    state and unknown keys are refused, except "optimizer.*", which checkpoints carry)."""
    t = {k: v for k, v in read_safetensors(path).items() if not k.startswith("optimizer.")}
    ref = tb.sider_ref.build_model(input_channels).state_dict()
    missing = [k for k in ref if k not in t]
    extra = [k for k in t if k not in ref]
    if missing or extra:
        raise ValueError("%s: does not match the reference state_dict: missing %s; unexpected %s"
                         % (path, missing[:5], extra[:5]))
    out = {}
    for k, v in ref.items():
        if tuple(t[k].shape) != tuple(v.shape):
            raise ValueError("%s: %s has shape %s, expected %s" % (path, k, tuple(t[k].shape), tuple(v.shape)))
        out[k] = t[k].to(v.dtype)
    return out


# ------------------------------------------------------------------------------------------------
# slidefuse metrics, batch order
# ------------------------------------------------------------------------------------------------
def read_metrics(path, steps):
    """[(step, loss, lr)] for steps 1..steps from a slidefuse metrics.jsonl (log_interval 1)."""
    recs = {}
    skipped = 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            if j.get("validation"):
                continue
            if "step" not in j or "loss" not in j:
                raise ValueError("%s:%d: a step record needs 'step' and 'loss'" % (path, n))
            recs[int(j["step"])] = (float(j["loss"]), float(j["lr"]) if "lr" in j else None)
            skipped = max(skipped, int(j.get("skipped_steps", 0)))
    have = sorted(recs)
    if not have:
        raise ValueError("%s: no step records" % path)
    if have[0] != 1 or any(b - a != 1 for a, b in zip(have, have[1:])):
        gaps = have[1] - have[0] if len(have) > 1 else have[0]
        raise ValueError("%s: step records are not 1, 2, 3, ... (every %d steps?): run slidefuse with "
                         "logging.log_interval=1" % (path, gaps))
    if have[-1] < steps:
        raise ValueError("%s: %d steps recorded, %d requested" % (path, have[-1], steps))
    if skipped:
        print("parity: warning: the slidefuse run skipped %d non-finite steps; curves may not align" % skipped,
              file=sys.stderr)
    return [(k, recs[k][0], recs[k][1]) for k in range(1, steps + 1)]


def read_batch_order(path, steps):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                out.append([int(v) for v in json.loads(line)["ids"]])
            else:
                out.append([int(v) for v in line.replace(",", " ").split()])
    if len(out) < steps:
        raise ValueError("%s: %d steps listed, %d requested" % (path, len(out), steps))
    return out[:steps]


# ------------------------------------------------------------------------------------------------
# Comparison and plot
# ------------------------------------------------------------------------------------------------
def compare_curves(sf, pt, window=10, tolerance=0.05):
    """Summary of two equally long loss lists: final = mean of the last `window` steps of each,
    rel_diff = |final_sf - final_pt| / |final_pt|, pass when <= tolerance."""
    n = min(len(sf), len(pt))
    w = max(1, min(window, n))
    fs, fp = float(np.mean(sf[n - w:n])), float(np.mean(pt[n - w:n]))
    rel = abs(fs - fp) / max(abs(fp), 1e-12)
    per = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(sf[:n], pt[:n])]
    return {"steps": n, "final_window": w, "final_loss_slidefuse": fs, "final_loss_pytorch": fp, "rel_diff": rel,
            "tolerance": tolerance, "pass": bool(rel <= tolerance), "first_step_rel_diff": per[0] if per else None,
            "median_step_rel_diff": float(np.median(per)) if per else None,
            "max_step_rel_diff": float(np.max(per)) if per else None}


def plot(path, sf, pt, summary, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no PNG written"
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    steps = np.arange(1, len(pt) + 1)
    if sf is not None:
        a1.plot(steps[:len(sf)], sf, label="slidefuse", lw=1.2)
    a1.plot(steps, pt, label="PyTorch baseline", lw=1.2, alpha=0.85)
    a1.set_yscale("log")
    a1.set_ylabel("loss (total)")
    a1.legend()
    a1.set_title(title, fontsize=10)
    if sf is not None:
        n = min(len(sf), len(pt))
        a2.plot(steps[:n], [(a - b) / abs(b) for a, b in zip(sf[:n], pt[:n])], lw=0.8)
        a2.axhline(0, color="k", lw=0.5)
        a2.set_ylabel("(sf - pt) / pt")
        if summary:
            a2.set_title("final (mean of last %d): %.4g vs %.4g, diff %.2f%% -> %s" % (
                summary["final_window"], summary["final_loss_slidefuse"], summary["final_loss_pytorch"],
                100 * summary["rel_diff"], "PASS" if summary["pass"] else "FAIL"), fontsize=9)
    a2.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# ------------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slidefuse-metrics", help="metrics.jsonl of the slidefuse run (log_interval 1)")
    ap.add_argument("--data", required=True, help="the run's data.processed_dir/train (a folder of *.sfshard)")
    ap.add_argument("--batch-order", help="per-step sample ids instead of rebuilding the loader's order")
    ap.add_argument("--seed", type=int, default=42, help="the run's train.seed (loader order; init seed default)")
    init = ap.add_mutually_exclusive_group()
    init.add_argument("--init", help="initial weights (.safetensors from `slidefuse export`)")
    init.add_argument("--init-seed", type=int, default=None, help="counter-based init seed (default: --seed)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--mode", default="eager_bf16_cl", choices=sorted(tb.MODES))
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    ap.add_argument("--loss-variant", default="sider", choices=("sider", "corrected"))
    ap.add_argument("--lr", type=float, default=None,
                    help="constant learning rate (default: each step's lr from the slidefuse metrics, else 3e-4)")
    ap.add_argument("--weight-decay", type=float, default=tb.RECIPE["weight_decay"])
    ap.add_argument("--clip", type=float, default=tb.RECIPE["clip"])
    ap.add_argument("--loss-dtype", default="float32", choices=("float32", "float64"),
                    help="float64 matches slidefuse's CPU backend (its loss is in double): for CPU cross-checks")
    ap.add_argument("--final-window", type=int, default=10, help="final loss = mean of the last N steps")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--out-dir", default="parity-out")
    args = ap.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        sf = read_metrics(args.slidefuse_metrics, args.steps) if args.slidefuse_metrics else None
        ds = shards.Dataset(args.data)
        order = read_batch_order(args.batch_order, args.steps) if args.batch_order else None
        orders = None if order else shards.EpochOrders(ds.count, args.batch, args.seed)
        state = load_initial_state(args.init, ds.channels + 1) if args.init else \
            tb.initial_state(args.seed if args.init_seed is None else args.init_seed, ds.channels + 1)
    except (OSError, ValueError, shards.ShardError) as e:
        print("parity: error: %s" % e, file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    cfg = tb.MODES[args.mode]
    if device.startswith("cuda"):
        torch.backends.cudnn.benchmark = cfg["cudnn_benchmark"]
    model = tb.build_model(device, cfg["channels_last"], state_dict=state, input_channels=ds.channels + 1)
    opt = tb.make_optimizer(model, weight_decay=args.weight_decay)
    trainer = tb.Trainer(model, args.mode, device, variant=args.loss_variant, clip=args.clip, optimizer=opt,
                         loss_dtype=getattr(torch, args.loss_dtype))

    pt, rows = [], []
    t0 = time.time()
    with open(os.path.join(args.out_dir, "torch_losses.jsonl"), "w") as log:
        for k in range(args.steps):
            ids = order[k] if order else orders.ids(k)
            pix, lab = ds.batch(ids, verify=True)
            lr = args.lr if args.lr is not None else (sf[k][2] if sf and sf[k][2] is not None else tb.RECIPE["lr"])
            trainer.set_lr(lr)
            terms = trainer.step(tb.device_batch(pix, lab, device))
            rec = {"step": k + 1, "loss": float(terms["total"]), "lr": lr}
            rec.update({t: float(terms[t]) for t in terms if t != "total"})
            pt.append(rec["loss"])
            rows.append(rec)
            log.write(json.dumps(rec) + "\n")
            if (k + 1) % max(1, args.steps // 10) == 0 or k == 0:
                extra = "" if sf is None else ", slidefuse %.4f" % sf[k][1]
                print("parity: step %d/%d loss %.4f%s (%.1f s)" % (k + 1, args.steps, rec["loss"], extra, time.time() - t0),
                      flush=True)
    sf_losses = [v for _, v, _ in sf] if sf else None
    summary = compare_curves(sf_losses, pt, args.final_window, args.tolerance) if sf else None
    title = "parity: slidefuse vs PyTorch %s (%s, batch %d, %d steps)" % (args.mode, device, args.batch, args.steps)
    png = os.path.join(args.out_dir, "parity.png")
    why = plot(png, sf_losses, pt, summary, title)
    if why:
        print("parity: " + why, file=sys.stderr)
    out = {"mode": args.mode, "device": str(device), "torch": torch.__version__, "batch": args.batch, "steps": args.steps,
           "seed": args.seed, "init": args.init or "init_weights(seed=%d)" % (
               args.seed if args.init_seed is None else args.init_seed),
           "data": os.path.abspath(args.data), "loss_variant": args.loss_variant, "summary": summary,
           "pytorch_losses": pt, "slidefuse_losses": sf_losses, "chart": None if why else png}
    with open(os.path.join(args.out_dir, "parity.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    if summary:
        print("parity: final loss (mean of last %d steps) slidefuse %.5g, PyTorch %.5g: %.2f%% apart (tolerance "
              "%.0f%%) -> %s; step-1 difference %.2e" % (
                  summary["final_window"], summary["final_loss_slidefuse"], summary["final_loss_pytorch"],
                  100 * summary["rel_diff"], 100 * args.tolerance, "PASS" if summary["pass"] else "FAIL",
                  summary["first_step_rel_diff"]))
        return 0 if summary["pass"] else 1
    print("parity: no --slidefuse-metrics: wrote the PyTorch curve only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
