#!/usr/bin/env python3
"""Each step A/B of a device session against the prediction written down before it (configs/bench/
predictions.tsv, docs/perf/OPTIMIZATION_LOG.md).

For every prediction whose two records are in DIR (NAME.json or NAME.json.gz, as `bench step --configs`
writes them): the A/B of tools/bench_ab.py at the batch size (its verdict from the p10-p90 spreads, and
"within drift" against the base's second run when --drift names it), the milliseconds saved, and where
that falls against the predicted range: "in range", "above" (more saved than predicted), "below" (less
saved), "slower" (the step slowed where a gain was predicted), or "none measurable" (within noise or
drift: in range only where the range holds 0). Writes a Markdown table (--md: every prediction, those
without both records noted), a JSON list (--json), and on stdout one line per A/B judged and a count.

usage: ab_predictions.py PREDICTIONS_TSV DIR [--batch 128] [--drift BASE AGAIN] [--md OUT] [--json OUT]
       ab_predictions.py PREDICTIONS_TSV --pairs FIRST   (the chained pairs: "base:record" for each
                                                          prediction whose base is not FIRST)
exit status 0; 2 on an unreadable predictions file.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ab  # noqa: E402


def read_predictions(path):
    """[{record, base, entry, low, high, what}] in the file's order; ValueError naming a bad line."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 6:
                raise ValueError("%s:%d: %d tab-separated fields, want 6 (record, base, entry, low, high, what)" %
                                 (path, n, len(cols)))
            low, high = float(cols[3]), float(cols[4])
            if low > high:
                raise ValueError("%s:%d: low %g above high %g" % (path, n, low, high))
            out.append({"record": cols[0], "base": cols[1], "entry": cols[2], "low": low, "high": high,
                        "what": cols[5]})
    return out


def find(directory, name):
    for ext in (".json", ".json.gz"):
        p = os.path.join(directory, name + ext)
        if os.path.exists(p):
            return p
    return None


def judge(saved, verdict, low, high):
    """Where `saved` ms (positive: the record's step is shorter) falls against [low, high]."""
    if verdict in ("within noise", "within drift"):
        return "none measurable, in range" if low <= 0 <= high else "none measurable"
    if low <= saved <= high:
        return "in range"
    if saved > high:
        return "above"
    return "slower" if saved < 0 < low else "below"


def evaluate(predictions, directory, batch=128, drift=None):
    rows = []
    for p in predictions:
        a, b = find(directory, p["base"]), find(directory, p["record"])
        row = dict(p, measured=None, verdict=None, against=None, note=None)
        if not a or not b:
            row["note"] = "not run (%s missing)" % ", ".join(n for n, f in ((p["base"], a), (p["record"], b)) if not f)
            rows.append(row)
            continue
        cmp = bench_ab.compare(bench_ab.load(a), p["base"], bench_ab.load(b), p["record"], drift)
        x = next((r for r in cmp["rows"] if r["batch"] == batch), None)
        if x is None:
            row["note"] = "no batch %d in both records (%s)" % (batch, "; ".join(cmp["warnings"]) or "none")
            rows.append(row)
            continue
        row["measured"] = 0.0 - x["delta_ms"]  # 0.0 - 0.0 is +0.0, never "-0.000"
        row["verdict"] = x["verdict"]
        row["against"] = judge(row["measured"], x["verdict"], p["low"], p["high"])
        row["base_ms"], row["record_ms"] = x["base_ms"], x["other_ms"]
        if cmp["warnings"]:
            row["note"] = "; ".join(cmp["warnings"])
        rows.append(row)
    return rows


def markdown(rows, batch):
    lines = ["| record | base | entry | predicted ms saved | measured ms saved | A/B | against the prediction | note |",
             "|---|---|---|---:|---:|---|---|---|"]
    for r in rows:
        m = "" if r["measured"] is None else "%+.3f (%.3f -> %.3f)" % (r["measured"], r["base_ms"], r["record_ms"])
        lines.append("| %s | %s | %s | %g to %g | %s | %s | %s | %s |" % (
            r["record"], r["base"], r["entry"], r["low"], r["high"], m, r["verdict"] or "", r["against"] or "",
            r["note"] or ""))
    return ("Each A/B at batch %d against the prediction written before it (configs/bench/predictions.tsv); "
            "ms saved = the base's median step minus the record's.\n\n" % batch) + "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions")
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--drift", nargs=2, metavar=("BASE", "AGAIN"))
    ap.add_argument("--md")
    ap.add_argument("--json")
    ap.add_argument("--pairs", metavar="FIRST")
    a = ap.parse_args(argv)
    try:
        preds = read_predictions(a.predictions)
    except (OSError, ValueError) as e:
        print("ab_predictions: %s" % e, file=sys.stderr)
        return 2
    if a.pairs:
        print(" ".join("%s:%s" % (p["base"], p["record"]) for p in preds if p["base"] != a.pairs))
        return 0
    if not a.dir:
        ap.error("DIR is needed unless --pairs")
    drift = None
    if a.drift:
        drift = bench_ab.drift_by_batch(bench_ab.load(a.drift[0]), bench_ab.load(a.drift[1]))
    rows = evaluate(preds, a.dir, a.batch, drift)
    judged = [r for r in rows if r["measured"] is not None]
    for r in judged:
        print("prediction: %s against %s (entry %s): predicted %g to %g ms saved, measured %+.3f (%s): %s" % (
            r["record"], r["base"], r["entry"], r["low"], r["high"], r["measured"], r["verdict"], r["against"]))
    counts = {}
    for r in judged:
        counts[r["against"]] = counts.get(r["against"], 0) + 1
    print("predictions: %d judged (%s); %d without both records here" % (
        len(judged), ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items())) or "none",
        len(rows) - len(judged)))
    if a.md:
        with open(a.md, "w") as f:
            f.write(markdown(rows, a.batch))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "slidefuse.ab_predictions/1", "batch": a.batch, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
