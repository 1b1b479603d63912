#!/usr/bin/env python3
"""A/B of `slidefuse bench step` records: each OTHER record against BASE, batch size by batch size.

    python3 tools/bench_ab.py BASE.json OTHER.json [OTHER.json ...] [--md OUT.md] [--json OUT.json] [--drift FIRST AGAIN]

For every batch size timed in both records (graph or eager runs of status "ok"): the median step time
of each, its p10-p90 spread, the difference in ms and percent, samples/s, and a verdict: "faster" or
"slower" when the two p10-p90 intervals do not overlap, else "within noise"; with --drift FIRST AGAIN (a
configuration and its second run after the others, `bench step --configs`' BASE.json and BASE_again.json),
"within drift" where the difference is no larger than that configuration's own change between its runs. The switches that
differ between the runs (their `extra`: bn_row_batch, bn_min_blocks, pdl, dw_variants, fusion_up_order,
fuse_expand_dw, ...) name what the A/B measures; the captured micro-step's kernel nodes and
programmatic edges are shown where they differ. Warnings: another GPU or driver, another commit,
mean SM clocks more than 2% apart (a throttled run is not an A/B), a batch size in one record only,
a run that did not finish (its error). A record of `bench step --dw-fused-bwd` (its `extra.dw_fused`
lines) also gets a table per depthwise shape: the fused backward's plan-time ms against the separate
dgrad (the chosen variant, in the same mode) + wgrad (the chosen variant) of the same line.
Reads .json or .json.gz (schema slidefuse.bench/1).
Exit status 0, or 2 for a file that is not a bench record.
"""
import argparse
import gzip
import json
import os
import re
import sys

SCHEMA = "slidefuse.bench/1"
# extra keys that describe a run's outcome, not its configuration
OUTCOME_KEYS = {"plan_bytes", "activation_bytes", "workspace_bytes", "workspace_bytes_planned", "plan_seconds",
                "graph_nodes", "allreduce", "dw_fused", "config"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError("%s: not a `slidefuse bench step --json` record (schema %r, want %r)" %
                         (path, doc.get("schema") if isinstance(doc, dict) else None, SCHEMA))
    return doc


def runs_by_batch(doc):
    return {r["batch"]: r for r in doc.get("runs", [])}


def switches(run):
    extra = run.get("extra") or {}
    return {k: v for k, v in extra.items() if k not in OUTCOME_KEYS}


def clock(run):
    nv = run.get("nvml") or {}
    return nv.get("sm_clock_mhz_mean") if nv.get("available") else None


def micro_nodes(run):
    g = ((run.get("extra") or {}).get("graph_nodes") or {}).get("micro_step") or {}
    return {k: g[k] for k in ("kernels", "edges", "programmatic_edges") if k in g}


def _chosen_ms(line, key):
    """ms of the chosen variant of `key` ('dgrad', 'dgrad overwrite', 'wgrad') in a variants line, or None."""
    m = re.search(r"(?:^|, )%s (\d+) \([^)]*\) of \[([^\]]*)\] ms" % re.escape(key), line)
    if not m:
        return None
    times = m.group(2).split()
    i = int(m.group(1))
    return float(times[i]) if i < len(times) and times[i] != "-" else None


def fused_rows(run):
    """Per shape and dgrad mode of a --dw-fused-bwd run: fused ms against dgrad + wgrad ms (plan-time timing)."""
    rows = []
    for line in (run.get("extra") or {}).get("dw_fused") or []:
        shape = line.split(":", 1)[0]
        wgrad = _chosen_ms(line, "wgrad")
        for mode, dkey, fkey in (("accumulate", "dgrad", r"runs, fused ([0-9.]+) ms"),
                                 ("overwrite", "dgrad overwrite", r", fused overwrite ([0-9.]+) ms")):
            f = re.search(fkey, line)
            d = _chosen_ms(line, dkey)
            if not f or d is None or wgrad is None:
                continue
            fused = float(f.group(1))
            rows.append({"shape": shape, "mode": mode, "separate_ms": d + wgrad, "dgrad_ms": d, "wgrad_ms": wgrad,
                         "fused_ms": fused, "saved_ms": d + wgrad - fused})
    return rows


def verdict(a, b):
    if b["p90_ms"] < a["p10_ms"]:
        return "faster"
    if b["p10_ms"] > a["p90_ms"]:
        return "slower"
    return "within noise"


def drift_by_batch(base, again):
    """Per batch size, the base's second run's median minus its first's (ms): the GPU's drift over the runs
    between them (`bench step --configs` times the base first and again last)."""
    ra, rb = runs_by_batch(base), runs_by_batch(again)
    return {b: rb[b]["median_ms"] - ra[b]["median_ms"] for b in ra
            if b in rb and ra[b].get("status") == "ok" and rb[b].get("status") == "ok"}


def compare(base, base_name, other, other_name, drift=None):
    """One A/B: {'rows': [...], 'warnings': [...], 'switches': {...}}. drift: drift_by_batch of a configuration
    timed first and again after the others: a difference no larger than it is "within drift", whatever the
    spreads."""
    out = {"base": base_name, "other": other_name, "rows": [], "warnings": [], "switches": {}}
    da, db = base.get("device") or {}, other.get("device") or {}
    if da.get("name") != db.get("name"):
        out["warnings"].append("another GPU: %s against %s" % (db.get("name"), da.get("name")))
    if da.get("driver") != db.get("driver"):
        out["warnings"].append("another driver: %s against %s" % (db.get("driver"), da.get("driver")))
    if base.get("commit") != other.get("commit"):
        out["warnings"].append("another commit: %s against %s" % (str(other.get("commit"))[:12],
                                                                 str(base.get("commit"))[:12]))
    ra, rb = runs_by_batch(base), runs_by_batch(other)
    for batch in sorted(set(ra) | set(rb)):
        a, b = ra.get(batch), rb.get(batch)
        if a is None or b is None:
            out["warnings"].append("batch %d timed in %s only" % (batch, base_name if b is None else other_name))
            continue
        bad = [(n, r) for n, r in ((base_name, a), (other_name, b)) if r.get("status") != "ok"]
        if bad:
            for n, r in bad:
                out["warnings"].append("batch %d in %s: %s (%s)" % (batch, n, r.get("status"), r.get("error", "")))
            continue
        if a.get("mode") != b.get("mode"):
            out["warnings"].append("batch %d: %s run against a %s run" % (batch, b.get("mode"), a.get("mode")))
        sa, sb = switches(a), switches(b)
        diff = {k: [sa.get(k), sb.get(k)] for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)}
        out["switches"].update(diff)
        ca, cb = clock(a), clock(b)
        if ca and cb and abs(cb - ca) > 0.02 * ca:
            out["warnings"].append("batch %d: mean SM clock %.0f MHz against %.0f MHz" % (batch, cb, ca))
        na, nb = micro_nodes(a), micro_nodes(b)
        delta = b["median_ms"] - a["median_ms"]
        v = verdict(a, b)
        d = (drift or {}).get(batch)
        if d is not None and v != "within noise" and abs(delta) <= abs(d):
            v = "within drift"
        out["rows"].append({
            "batch": batch, "mode": b.get("mode"),
            "base_ms": a["median_ms"], "base_p10": a["p10_ms"], "base_p90": a["p90_ms"],
            "other_ms": b["median_ms"], "other_p10": b["p10_ms"], "other_p90": b["p90_ms"],
            "delta_ms": delta, "delta_pct": 100.0 * delta / a["median_ms"],
            "base_sps": a["samples_per_s"], "other_sps": b["samples_per_s"],
            "verdict": v, "drift_ms": d,
            "nodes": None if na == nb else {"base": na, "other": nb},
        })
        if fused_rows(b):
            out.setdefault("fused", {})[str(batch)] = fused_rows(b)
    return out


def markdown(results):
    lines = []
    for r in results:
        sw = ", ".join("%s %s -> %s" % (k, json.dumps(v[0]), json.dumps(v[1])) for k, v in r["switches"].items())
        lines.append("### %s against %s%s" % (r["other"], r["base"], (": " + sw) if sw else ""))
        lines.append("")
        lines.append("| batch | base ms (p10-p90) | other ms (p10-p90) | difference | samples/s | verdict |")
        lines.append("|---:|---|---|---:|---|---|")
        for x in r["rows"]:
            lines.append("| %d | %.3f (%.3f-%.3f) | %.3f (%.3f-%.3f) | %+.3f ms (%+.1f%%) | %.1f -> %.1f | %s |" % (
                x["batch"], x["base_ms"], x["base_p10"], x["base_p90"], x["other_ms"], x["other_p10"],
                x["other_p90"], x["delta_ms"], x["delta_pct"], x["base_sps"], x["other_sps"], x["verdict"]))
        for x in r["rows"]:
            if x["nodes"]:
                lines.append("")
                lines.append("batch %d micro-step graph: %s -> %s" % (
                    x["batch"], json.dumps(x["nodes"]["base"], sort_keys=True),
                    json.dumps(x["nodes"]["other"], sort_keys=True)))
        for batch, rows in sorted((r.get("fused") or {}).items(), key=lambda kv: int(kv[0])):
            lines.append("")
            lines.append("batch %s, the fused depthwise backward per shape (%s's plan-time timing, ms per call):" %
                         (batch, r["other"]))
            lines.append("")
            lines.append("| shape | mode | dgrad + wgrad | fused | saved |")
            lines.append("|---|---|---:|---:|---:|")
            for x in rows:
                lines.append("| %s | %s | %.4f + %.4f = %.4f | %.4f | %+.4f |" % (
                    x["shape"], x["mode"], x["dgrad_ms"], x["wgrad_ms"], x["separate_ms"], x["fused_ms"],
                    x["saved_ms"]))
        for x in r["rows"]:
            if x.get("drift_ms") is not None:
                lines.append("")
                lines.append("batch %d: the GPU drifted %+.3f ms over the runs (--drift)" %
                             (x["batch"], x["drift_ms"]))
        for w in r["warnings"]:
            lines.append("")
            lines.append("warning: " + w)
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="A/B of slidefuse bench step records against a base record.")
    ap.add_argument("base", help="the base record (.json or .json.gz)")
    ap.add_argument("others", nargs="+", help="records compared with the base")
    ap.add_argument("--md", help="write the Markdown here instead of stdout")
    ap.add_argument("--json", help="also write the comparison as JSON here")
    ap.add_argument("--drift", nargs=2, metavar=("FIRST", "AGAIN"),
                    help="a record and the same configuration timed again after the others (`bench step --configs`' "
                         "BASE.json and BASE_again.json): a difference no larger than the change between the two is "
                         "\"within drift\"")
    a = ap.parse_args(argv)
    try:
        base = load(a.base)
        drift = drift_by_batch(load(a.drift[0]), load(a.drift[1])) if a.drift else None
        name = os.path.basename
        results = [compare(base, name(a.base), load(o), name(o), drift) for o in a.others]
    except (OSError, ValueError) as e:
        print("bench_ab: %s" % e, file=sys.stderr)
        return 2
    except KeyError as e:
        print("bench_ab: a run lacks the field %s (not a complete bench step record)" % e, file=sys.stderr)
        return 2
    md = markdown(results)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "slidefuse.bench_ab/1", "comparisons": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
