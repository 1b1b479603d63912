#!/usr/bin/env python3
"""Plot a slidefuse run's metrics.jsonl: training loss, learning rate and validation accuracy.

usage: python3 tools/plot_metrics.py RUN_DIR|metrics.jsonl [-o OUT.png] [--title TEXT]

metrics.jsonl holds one JSON object per line (tools/train.cpp):
  training records    {"step", "epoch", "loss", "loss_mean_window", "lr", "grad_norm", ...}
  validation records  {"validation": true, "step", "epoch", "mae_px", "rmse_px", "hit_le_2px",
                       "hit_le_5px", "gap_mae", "slider_mae", "samples"}
The figure has three panels against the optimizer step: loss (log scale when it spans more than
a factor 100), learning rate (log scale), and validation hit@2px / hit@5px (%) with MAE px on a
second axis (each its own line style and marker, so that equal values stay visible). `slidefuse
train` runs this script at the end of a run when matplotlib is present (logging.plot). The default output is
<RUN_DIR>/metrics.png. Needs matplotlib (pip install matplotlib); everything else is stdlib.
A partly written last line (a run still in progress) is skipped with a note.
"""
import argparse
import json
import math
import os
import sys


class MetricsError(Exception):
    """A metrics file that cannot be read; the message names the file and line."""


def metrics_path(arg):
    """RUN_DIR or a metrics.jsonl path -> the metrics.jsonl path."""
    return os.path.join(arg, "metrics.jsonl") if os.path.isdir(arg) else arg


def load_metrics(path):
    """Returns (train, val): lists of records in file order. Raises MetricsError."""
    if not os.path.isfile(path):
        raise MetricsError(f"{path}: no such file (expected a run folder or its metrics.jsonl)")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    # A file that does not end in a newline may have a partly written last line.
    unterminated = len(lines) > 0 and lines[-1] != ""
    train, val = [], []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if unterminated and i == len(lines):
                print(f"plot_metrics: {path}:{i}: skipping a partly written last line", file=sys.stderr)
                continue
            raise MetricsError(f"{path}:{i}: not a JSON record ({e.msg})") from None
        if not isinstance(rec, dict) or "step" not in rec:
            raise MetricsError(f"{path}:{i}: expected an object with a 'step' field")
        (val if rec.get("validation") is True else train).append(rec)
    if not train and not val:
        raise MetricsError(f"{path}: holds no records")
    return train, val


def series(records, key):
    """(steps, values) of the records that have a finite number under key."""
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


# Validation lines: equal values (both hit rates at 100%, say) must not hide each other, so each
# has its own line style and marker: hit@5px dashed with large open squares, hit@2px solid with
# small filled circles drawn on top, MAE dotted with triangles.
ACC_STYLES = {
    "hit_le_5px": dict(color="tab:red", linestyle="--", linewidth=2.0, marker="s", markersize=9,
                       markerfacecolor="none", markeredgewidth=1.5, zorder=2),
    "hit_le_2px": dict(color="tab:orange", linestyle="-", linewidth=1.2, marker="o", markersize=4, zorder=3),
    "mae_px": dict(color="tab:blue", linestyle=":", linewidth=1.2, marker="^", markersize=5),
}


def plot(train, val, out, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MetricsError("matplotlib is not installed; install it with: pip install matplotlib") from None

    fig, (ax_loss, ax_lr, ax_acc) = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    fig.suptitle(title)

    losses = []
    for key, style in (("loss", dict(alpha=0.35, lw=0.8)), ("loss_mean_window", dict(lw=1.5))):
        xs, ys = series(train, key)
        if xs:
            ax_loss.plot(xs, ys, label=key, **style)
            losses += ys
    ax_loss.set_ylabel("loss")
    if losses:
        if min(losses) > 0 and max(losses) > 100 * min(losses):  # early losses dwarf the rest
            ax_loss.set_yscale("log")
        ax_loss.legend(loc="upper right")
    else:
        ax_loss.text(0.5, 0.5, "no training records", ha="center", va="center", transform=ax_loss.transAxes)

    xs, ys = series(train, "lr")
    if xs:
        ax_lr.plot(xs, ys, color="tab:green")
        if min(ys) > 0:
            ax_lr.set_yscale("log")
    else:
        ax_lr.text(0.5, 0.5, "no learning-rate records", ha="center", va="center", transform=ax_lr.transAxes)
    ax_lr.set_ylabel("learning rate")

    handles = []
    for key in ("hit_le_5px", "hit_le_2px"):  # 5px below: its larger open markers frame 2px's dots
        xs, ys = series(val, key)
        if xs:
            handles += ax_acc.plot(xs, ys, label=key.replace("hit_le_", "hit@") + " (%)", **ACC_STYLES[key])
    ax_acc.set_ylabel("hit rate (%)")
    ax_acc.set_ylim(-4, 104)  # lines at 0% or 100% stay off the frame
    xs, ys = series(val, "mae_px")
    if xs:
        ax_mae = ax_acc.twinx()
        handles += ax_mae.plot(xs, ys, label="MAE px", **ACC_STYLES["mae_px"])
        ax_mae.set_ylabel("MAE (px)")
    if handles:
        ax_acc.legend(handles=handles, loc="best")
    else:
        ax_acc.text(0.5, 0.5, "no validation records", ha="center", va="center", transform=ax_acc.transAxes)
    ax_acc.set_xlabel("optimizer step")

    for ax in (ax_loss, ax_lr, ax_acc):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot loss, learning rate and validation accuracy of a run.")
    ap.add_argument("run", help="run folder (holding metrics.jsonl) or a metrics.jsonl file")
    ap.add_argument("-o", "--out", help="output PNG (default: metrics.png beside metrics.jsonl)")
    ap.add_argument("--title", help="figure title (default: the run folder's name)")
    args = ap.parse_args(argv)
    path = metrics_path(args.run)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(path)), "metrics.png")
    title = args.title or os.path.basename(os.path.dirname(os.path.abspath(path)))
    try:
        train, val = load_metrics(path)
        plot(train, val, out, title)
    except MetricsError as e:
        print(f"plot_metrics: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"plot_metrics: error: {e}", file=sys.stderr)
        return 1
    print(f"plot_metrics: {len(train)} training and {len(val)} validation records -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
