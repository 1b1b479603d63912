#!/usr/bin/env python3
"""End-to-end training throughput against the step benchmark (issue: the loader is never the
bottleneck). Reads a `slidefuse train` run's metrics.jsonl and a `slidefuse bench step` record
(schema slidefuse.bench/1) of the same batch and input size, and reports:

  - train samples/s: the median of the log intervals' `samples_per_s` after the first
    --skip-intervals (graph capture, autotuning and loader warm-up), validation and checkpoint
    time excluded (tools/train.cpp);
  - bench samples/s: the bench run's `samples_per_s` at --batch (mode "graph");
  - their ratio, and the mean `loader_wait_fraction` of the same intervals (the share of training
    time the step loop waited for the loader: ~0 when the loader keeps up).

Exit 0 when ratio >= --min-ratio (default 0.95), 1 when not, 2 for unusable input.

  python3 tools/e2e_check.py --metrics RUN/metrics.jsonl --bench bench.json --batch 128 [--json e2e.json]
"""
import argparse
import json
import statistics
import sys


def train_intervals(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})")
            if "grad_norm" in r and r.get("samples_per_s") is not None:  # a training log point
                rows.append(r)
    return rows


def bench_rate(path, batch):
    with open(path) as f:
        doc = json.load(f)
    runs = [r for r in doc.get("runs", []) if r.get("batch") == batch and r.get("status") == "ok"
            and r.get("mode", "graph") == "graph" and r.get("samples_per_s")]
    if not runs:
        raise ValueError(f"{path}: no successful graph-mode run at batch {batch}")
    return max(r["samples_per_s"] for r in runs), runs[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--skip-intervals", type=int, default=2)
    ap.add_argument("--min-ratio", type=float, default=0.95)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    try:
        rows = train_intervals(a.metrics)
        used = rows[a.skip_intervals:]
        if not used:
            raise ValueError(f"{a.metrics}: {len(rows)} training log points, none left after skipping "
                             f"{a.skip_intervals}: train longer or log more often (logging.log_interval)")
        bench, run = bench_rate(a.bench, a.batch)
    except (OSError, ValueError) as e:
        print(f"e2e_check: {e}", file=sys.stderr)
        return 2
    train = statistics.median(r["samples_per_s"] for r in used)
    waits = [r["loader_wait_fraction"] for r in used if r.get("loader_wait_fraction") is not None]
    wait = statistics.fmean(waits) if waits else None
    ratio = train / bench
    ok = ratio >= a.min_ratio
    out = {"batch": a.batch, "intervals": len(used), "skipped_intervals": a.skip_intervals,
           "train_samples_per_s": train, "bench_samples_per_s": bench, "ratio": ratio,
           "min_ratio": a.min_ratio, "loader_wait_fraction": wait, "pass": ok,
           "bench_size": [run.get("height"), run.get("width")]}
    wait_text = "n/a" if wait is None else f"{100 * wait:.2f}%"
    print(f"train {train:.1f} samples/s (median of {len(used)} intervals) vs bench step {bench:.1f} at batch "
          f"{a.batch}: {100 * ratio:.1f}% (need {100 * a.min_ratio:.0f}%); loader wait {wait_text} of training time"
          f" -> {'PASS' if ok else 'FAIL'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
