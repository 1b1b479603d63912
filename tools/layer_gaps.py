#!/usr/bin/env python3
"""Where a measured step stands against its floor, layer class by layer class, from a bench record.

Input: the JSON `slidefuse bench step --layers --json FILE` writes (schema slidefuse.bench/1, its
"layers" block: per-layer rows with forward and backward ms, bytes and the row's roofline floor, and
the conv plans as `describe()` lines), optionally gzip-compressed. Output (Markdown on stdout or --md,
JSON with --json):

- the step: graph-replay ms per step and samples/s (the first run), the per-layer table's total and
  its floor;
- the eager per-layer time summed by layer class (depthwise ConvBN, 1x1 expand / project / down-path,
  3x3 smooth, head and stem conv1, fusion up paths, FPN laterals, the rest) and by resolution, each
  with its floor, the gap (ms - floor), the achieved GB/s and its share of the whole gap, largest
  gap first: "what stands between, layer by layer" (issue 11);
- the custom depthwise kernels' variants per shape (the `dwconv variants:` lines): the variant each
  pass runs, its time against variant 0's, and the fastest direct and the fastest staged gather
  variant (docs/KERNELS_DWCONV.md; docs/perf/OPTIMIZATION_LOG.md entries 6-8).

With --against BASE (another `--layers` record, e.g. the session's base beside `bench_all`): each class's and
resolution's eager ms in both, what this record saves, and how much of it in the forward and the backward.

Exit status: 0 written; 1 unreadable input or no layer rows; 2 usage.
"""
import argparse
import gzip
import json
import re
import sys

# (class, predicate on the row name), first match wins; the order is the table's.
CLASSES = [
    ("depthwise ConvBN (dw_conv)", lambda n: n.endswith(".dw_conv")),
    ("1x1 expand ConvBN (pw_expand)", lambda n: n.endswith(".pw_expand")),
    ("1x1 project ConvBN (pw_project)", lambda n: n.endswith(".pw_project")),
    ("1x1 down-path ConvBN (pw_conv)", lambda n: n.endswith(".pw_conv")),
    ("3x3 smooth ConvBN", lambda n: "smooth" in n.rsplit(".", 1)[-1] or n.endswith(".smooth")),
    ("3x3 head conv1 and stem.conv1", lambda n: n == "stem.conv1" or (n.startswith("dual_head.") and n.endswith(".conv1"))),
    ("fusion up paths", lambda n: ".up_" in n),
    ("FPN laterals (1x1)", lambda n: ".lateral_" in n),
]
OTHER = "everything else (stem.conv2, head conv2, transitions, sums, upsampling, loss, optimizer, data)"


def layer_class(name):
    for cls, pred in CLASSES:
        if pred(name):
            return cls
    return OTHER


def resolution(name):
    """'1/4', '1/8', '1/16', '1/32' from the name (a path's destination: the last 1_k in it), 'heads
    (1/4)' for the dual head, 'stem' for the stem, else 'loss, optimizer, data'."""
    found = re.findall(r"1_(4|8|16|32)(?!\d)", name)
    if found:
        return "1/" + found[-1]
    if name.startswith("dual_head."):
        return "heads (1/4)"
    if name.startswith("stem."):
        return "stem (1/2, 1/4)"
    if name.startswith("stage") or name.startswith("lite_fpn."):
        return "other layers"
    return "loss, optimizer, data"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def summarise(rows, key):
    groups = {}
    for r in rows:
        g = groups.setdefault(key(r["name"]), {"rows": 0, "ms": 0.0, "floor_ms": 0.0, "gb": 0.0})
        g["rows"] += 1
        g["ms"] += float(r["ms"])
        g["floor_ms"] += float(r["floor_ms"])
        g["gb"] += float(r["gb"])
    total_gap = sum(g["ms"] - g["floor_ms"] for g in groups.values())
    out = []
    for name, g in groups.items():
        gap = g["ms"] - g["floor_ms"]
        out.append({
            "group": name, "rows": g["rows"], "ms": g["ms"], "floor_ms": g["floor_ms"], "gap_ms": gap,
            "gbps": g["gb"] / (g["ms"] / 1e3) if g["ms"] > 0 else 0.0,
            "gap_share": gap / total_gap if total_gap > 0 else 0.0,
        })
    out.sort(key=lambda g: -g["gap_ms"])
    return out


_PASS_RE = {
    p: re.compile(r"\b%s (\d+) \(([^)]*)\)(?: of \[([^\]]*)\] ms)?" % p) for p in ("fwd", "dgrad", "wgrad")
}
# The dgrad in overwrite mode, timed and chosen on its own since 2026-11-27 ("dgrad" is the accumulating
# mode; records before then timed that mode only).
_PASS_RE["dgrad overwrite"] = re.compile(r"\bdgrad overwrite (\d+) \(([^)]*)\)(?: of \[([^\]]*)\] ms)?")
# The forward with the producer's BN prologue (the fused LiteBlock's shapes: "fwd with BN prologue 6 (...)").
_PASS_RE["fwd+prologue"] = re.compile(r"\bfwd with BN prologue (\d+) \(([^)]*)\)(?: of \[([^\]]*)\] ms)?")
_PASSES = ("fwd", "dgrad", "dgrad overwrite", "wgrad", "fwd+prologue")


def parse_variants(line):
    """{pass: {"chosen": i, "name": str, "ms": [float or None]}} of one 'dwconv variants:' line."""
    out = {}
    for p, rx in _PASS_RE.items():
        m = rx.search(line)
        if not m:
            continue
        ms = None
        if m.group(3) is not None:
            ms = [None if t == "-" else float(t) for t in m.group(3).split()]
        out[p] = {"chosen": int(m.group(1)), "name": m.group(2), "ms": ms}
    return out


def staged(name):
    return re.search(r" s\d+x\d+$", name) is not None


def hoisted(name):
    return name.endswith(" hoist") or name.endswith(" prefetch")


def variant_report(conv_plans, fwd_names=None, wgrad_names=None):
    """Per depthwise shape with a variants line: each pass's choice against variant 0, and (when the
    names are known from the lines) the fastest of each kind: direct and staged variants of the gather
    passes, per-pixel and hoisted-load variants of the wgrad."""
    out = []
    shape = None
    for line in conv_plans:
        text = line.strip()
        if text.startswith("dwconv variants:"):
            if shape is None:
                continue
            entry = {"shape": shape, "passes": {}}
            for p, v in parse_variants(text).items():
                d = {"chosen": v["chosen"], "name": v["name"]}
                ms = v["ms"]
                if ms and 0 <= v["chosen"] < len(ms) and ms[v["chosen"]] is not None:
                    d["ms"] = ms[v["chosen"]]
                    d["variant0_ms"] = ms[0]
                    if ms[0]:
                        d["saved_pct"] = 100.0 * (ms[0] - d["ms"]) / ms[0]
                    names = wgrad_names if p == "wgrad" else fwd_names
                    kinds = (("per_pixel", lambda n: not hoisted(n)), ("hoisted", hoisted)) if p == "wgrad" else \
                        (("direct", lambda n: not staged(n)), ("staged", staged))
                    for kind, pick in kinds if names else ():
                        cand = [(t, i) for i, t in enumerate(ms) if t is not None and i < len(names) and pick(names[i])]
                        if cand:
                            t, i = min(cand)
                            d["best_" + kind] = {"variant": i, "name": names[i], "ms": t}
                entry["passes"][p] = d
            out.append(entry)
        elif ": " in text and not text.startswith("cudnn plan") and not text.startswith("dwconv variant names"):
            shape = text.split(": ", 1)[0]
    return out


def wgrad_names(conv_plans):
    """Variant index -> name of the wgrad variants, from the 'dwconv variant names: ... wgrad [0 name |
    ...]' line (None without one)."""
    for line in conv_plans:
        m = re.search(r"dwconv variant names: .*wgrad \[([^\]]*)\]", line)
        if m:
            names = {}
            for item in m.group(1).split(" | "):
                idx, _, name = item.strip().partition(" ")
                names[int(idx)] = name
            return [names.get(i, "variant %d" % i) for i in range(max(names) + 1)]
    return None


def gather_names(conv_plans):
    """Variant index -> name of the gather passes: from the 'dwconv variant names: gather [0 name | 1
    name | ...]' line, else from the chosen variants the lines name (others then 'variant i')."""
    names = {}
    for line in conv_plans:
        m = re.search(r"dwconv variant names: gather \[([^\]]*)\]", line)
        if m:
            for item in m.group(1).split(" | "):
                idx, _, name = item.strip().partition(" ")
                names[int(idx)] = name
            break
    else:
        for line in conv_plans:
            for p in ("fwd", "dgrad"):
                for m in re.finditer(r"\b%s (\d+) \(([^)]*)\)" % p, line):
                    names[int(m.group(1))] = m.group(2)
    if not names:
        return None
    return [names.get(i, "variant %d" % i) for i in range(max(names) + 1)]


def report(d):
    layers = d.get("layers")
    if not isinstance(layers, dict) or not layers.get("rows"):
        raise ValueError("no per-layer rows: run `slidefuse bench step --layers --json FILE`")
    rows = layers["rows"]
    run = (d.get("runs") or [{}])[0]
    total = layers.get("total", {})
    plans = layers.get("conv_plans", [])
    return {
        "device": (d.get("device") or {}).get("name"),
        "commit": d.get("commit"),
        "command": d.get("command"),
        "step": {
            "batch": run.get("batch"), "ms_per_step": run.get("ms_per_step"), "samples_per_s": run.get("samples_per_s"),
            "layers_ms": sum(float(r["ms"]) for r in rows), "floor_ms": sum(float(r["floor_ms"]) for r in rows),
            "table_total_ms": total.get("ms"),
        },
        "by_class": summarise(rows, layer_class),
        "by_resolution": summarise(rows, resolution),
        "depthwise_variants": variant_report(plans, gather_names(plans), wgrad_names(plans)),
    }


def against(rows, base_rows, key):
    """Per group (key of the row name): the base's and this record's eager ms, forward and backward, and
    what this record saves; largest saving first. Groups of either record (a fusion may rename or merge
    rows: their row counts say so)."""
    def sums(rs):
        out = {}
        for r in rs:
            g = out.setdefault(key(r["name"]), {"rows": 0, "ms": 0.0, "fwd_ms": 0.0, "bwd_ms": 0.0})
            g["rows"] += 1
            g["ms"] += float(r["ms"])
            g["fwd_ms"] += float(r.get("fwd_ms", 0.0))
            g["bwd_ms"] += float(r.get("bwd_ms", 0.0))
        return out
    a, b = sums(base_rows), sums(rows)
    zero = {"rows": 0, "ms": 0.0, "fwd_ms": 0.0, "bwd_ms": 0.0}
    out = []
    for name in set(a) | set(b):
        x, y = a.get(name, zero), b.get(name, zero)
        out.append({"group": name, "base_rows": x["rows"], "rows": y["rows"], "base_ms": x["ms"], "ms": y["ms"],
                    "saved_ms": x["ms"] - y["ms"], "fwd_saved_ms": x["fwd_ms"] - y["fwd_ms"],
                    "bwd_saved_ms": x["bwd_ms"] - y["bwd_ms"]})
    out.sort(key=lambda g: -g["saved_ms"])
    return out


def against_report(d, base):
    """This record's per-layer rows against a base record's (both `bench step --layers`)."""
    rows, base_rows = d["layers"]["rows"], base["layers"]["rows"]
    run, brun = (d.get("runs") or [{}])[0], (base.get("runs") or [{}])[0]
    return {"base_command": base.get("command"), "step_ms": run.get("ms_per_step"), "base_step_ms": brun.get("ms_per_step"),
            "layers_ms": sum(float(r["ms"]) for r in rows), "base_layers_ms": sum(float(r["ms"]) for r in base_rows),
            "by_class": against(rows, base_rows, layer_class), "by_resolution": against(rows, base_rows, resolution)}


def against_markdown(a, base_name):
    lines = ["## Against %s (eager per-layer rows)" % base_name, ""]
    step = ""
    if a.get("step_ms") and a.get("base_step_ms"):
        step = "graph step %.2f ms against %.2f ms (%.2f ms saved); " % (
            a["step_ms"], a["base_step_ms"], a["base_step_ms"] - a["step_ms"])
    lines += [step + "eager per-layer rows %.2f ms against %.2f ms (%.2f ms saved)." % (
        a["layers_ms"], a["base_layers_ms"], a["base_layers_ms"] - a["layers_ms"]), ""]
    for title, key in (("by layer class", "by_class"), ("by resolution", "by_resolution")):
        lines += ["### " + title, "", "| group | rows (base) | base ms | ms | saved ms | of it forward | of it backward |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for g in a[key]:
            lines.append("| %s | %d (%d) | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
                g["group"], g["rows"], g["base_rows"], g["base_ms"], g["ms"], g["saved_ms"], g["fwd_saved_ms"],
                g["bwd_saved_ms"]))
        lines.append("")
    return "\n".join(lines)


def markdown(rep):
    s = rep["step"]
    lines = ["# Layer gaps: %s (commit %s)" % (rep["device"] or "?", (rep["commit"] or "?")[:12]), ""]
    if rep.get("command"):
        lines += ["`%s`" % rep["command"], ""]
    step = "graph step %.2f ms, %.1f samples/s at batch %s; " % (s["ms_per_step"], s["samples_per_s"], s["batch"]) \
        if s.get("ms_per_step") else ""
    lines += ["%seager per-layer rows %.2f ms against a floor of %.2f ms (gap %.2f ms, %.2fx)." % (
        step, s["layers_ms"], s["floor_ms"], s["layers_ms"] - s["floor_ms"],
        s["layers_ms"] / s["floor_ms"] if s["floor_ms"] else 0.0), ""]
    for title, key in (("By layer class", "by_class"), ("By resolution", "by_resolution")):
        lines += ["## " + title, "", "| group | rows | ms | floor ms | gap ms | share of gap | GB/s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for g in rep[key]:
            lines.append("| %s | %d | %.2f | %.2f | %.2f | %.1f%% | %.0f |" % (
                g["group"], g["rows"], g["ms"], g["floor_ms"], g["gap_ms"], 100 * g["gap_share"], g["gbps"]))
        lines.append("")
    if rep["depthwise_variants"]:
        lines += ["## Depthwise variants (ms per call)", "",
                  "| shape | pass | runs | ms | variant 0 ms | saved | fastest direct (wgrad: per-pixel loads) |"
                  " fastest staged (wgrad: hoisted loads) |",
                  "|---|---|---|---:|---:|---:|---|---|"]
        for e in rep["depthwise_variants"]:
            for p in _PASSES:
                d = e["passes"].get(p)
                if not d:
                    continue

                def best(k):
                    b = d.get(k)
                    return "%d (%s) %.4f" % (b["variant"], b["name"], b["ms"]) if b else "-"

                lines.append("| %s | %s | %d (%s) | %s | %s | %s | %s | %s |" % (
                    e["shape"], p, d["chosen"], d["name"], "%.4f" % d["ms"] if "ms" in d else "-",
                    "%.4f" % d["variant0_ms"] if d.get("variant0_ms") is not None else "-",
                    "%.1f%%" % d["saved_pct"] if "saved_pct" in d else "-",
                    best("best_per_pixel" if p == "wgrad" else "best_direct"),
                    best("best_hoisted" if p == "wgrad" else "best_staged")))
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json", help="slidefuse bench step --layers --json output (.json or .json.gz)")
    ap.add_argument("--md", help="write the Markdown here instead of stdout")
    ap.add_argument("--json", help="also write the summary as JSON here")
    ap.add_argument("--against", metavar="BASE_JSON",
                    help="also compare the per-layer rows with another --layers record's, class by class")
    args = ap.parse_args(argv)
    try:
        d = load(args.bench_json)
        rep = report(d)
        if args.against:
            base = load(args.against)
            report(base)  # the same checks: a record with per-layer rows
            rep["against"] = against_report(d, base)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("layer_gaps: %s: %s" % (args.against if args.against and "rep" in locals() else args.bench_json, e),
              file=sys.stderr)
        return 1
    md = markdown(rep)
    if args.against:
        md += "\n" + against_markdown(rep["against"], args.against.rsplit("/", 1)[-1])
    if args.md:
        with open(args.md, "w") as f:
            f.write(md + "\n")
    else:
        print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
