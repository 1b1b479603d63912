#!/usr/bin/env python3
"""The report side of tools/compare.py: rows and speedups from bench reports ("slidefuse.bench/1"),
the combined result ("slidefuse.compare/1"), its markdown table and its bar chart. Pure functions
on dicts (standard library; matplotlib only for the chart, optional); tests/baselines/test_compare.py
checks them on canned reports.
"""
import json
import math
import os
import shlex
import socket
import sys

import bench_schema

COMPARE_SCHEMA = "slidefuse.compare/1"


# ------------------------------------------------------------------------------------------------
# Table and speedup arithmetic
# ------------------------------------------------------------------------------------------------
def is_slidefuse(tool):
    return tool == "slidefuse" or tool.startswith("slidefuse-")


def collect_rows(reports):
    """Flat rows (one per tool x run) from bench reports: dict(tool, mode, batch, samples_per_s,
    median_ms, p10_ms, p90_ms, peak_gib, status, error)."""
    rows = []
    for rep in reports:
        for r in rep.get("runs", []):
            peak = r.get("peak_mem_bytes")
            rows.append(dict(tool=rep["tool"], mode=r.get("mode", ""), batch=r["batch"], samples_per_s=r.get("samples_per_s"),
                             median_ms=r.get("median_ms"), p10_ms=r.get("p10_ms"), p90_ms=r.get("p90_ms"),
                             peak_gib=None if peak is None else peak / 2.0 ** 30, status=r.get("status", "error"),
                             error=r.get("error")))
    return rows


def speedups(rows):
    """{(baseline tool, batch): slidefuse samples/s / baseline samples/s} for every batch size where
    both have an "ok" run (the first slidefuse report's run is the reference)."""
    ref = {}
    for r in rows:
        if is_slidefuse(r["tool"]) and r["status"] == "ok" and r["samples_per_s"] and r["batch"] not in ref:
            ref[r["batch"]] = r["samples_per_s"]
    out = {}
    for r in rows:
        if is_slidefuse(r["tool"]) or r["status"] != "ok" or not r["samples_per_s"]:
            continue
        if r["batch"] in ref:
            out[(r["tool"], r["batch"])] = ref[r["batch"]] / r["samples_per_s"]
    return out


def _fmt(v, spec, none="—"):
    return none if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _status_text(r):
    if r["status"] == "ok":
        return "ok"
    err = (r.get("error") or "").strip()
    if err.startswith("skipped: "):
        return "skipped (%s)" % err[len("skipped: "):]
    return "%s: %s" % (r["status"], err[:120]) if err else r["status"]


def run_notes(reports):
    """One line per baseline run that recorded its own facts ("extra"): the optimizer implementation
    and, for torch.compile, the warm-up (compile) time and what dynamo / inductor made of the step."""
    out = []
    for rep in reports:
        if is_slidefuse(rep.get("tool", "")):
            continue
        for r in rep.get("runs", []):
            x = r.get("extra")
            if not isinstance(x, dict) or not x:
                continue
            parts = []
            if x.get("optimizer"):
                parts.append(str(x["optimizer"]))
            w = x.get("warmup_s")
            if isinstance(w, list) and w:
                parts.append("warm-up steps %s s (%d of %s done; the first compiles and autotunes)"
                             % (" + ".join("%.1f" % v for v in w[:3]) + (" + ..." if len(w) > 3 else ""), len(w),
                                r.get("warmup_steps", "?")))
            if "graphs" in x:
                parts.append("%d graph(s), %d graph break(s), %d CUDA-graph skip(s), %d frame(s) compiled"
                             % (x.get("graphs", 0), x.get("graph_breaks", 0), x.get("cudagraph_skips", 0),
                                x.get("frames", 0)))
            for reason in (x.get("graph_break_reasons") or [])[:3]:
                parts.append("break: " + str(reason).replace("\n", " ")[:160])
            if parts:
                out.append("`%s` batch %s: %s" % (rep.get("tool", "?"), r.get("batch", "?"), "; ".join(parts)))
    return out


# The project's speed targets at 256x512, batch 128 (docs/perf/OPTIMIZATION_LOG.md, entry 0): slidefuse's
# samples/s, and its speedup over each named baseline in the same run.
TARGET_BATCH = 128
TARGET_SAMPLES_PER_S = 5000.0
TARGET_SPEEDUPS = (("pytorch-compile_max_autotune", "torch.compile(max-autotune)", 2.0),
                   ("pytorch-eager_bf16_cl", "PyTorch eager bf16 + channels_last", 3.0))


def target_lines(rows, config):
    """Each target met or not, with the figure, when the run is at 256x512 and has batch 128 (else
    []): slidefuse's samples/s against TARGET_SAMPLES_PER_S, its speedups against TARGET_SPEEDUPS
    (a baseline without an "ok" run at that batch is reported as not measured)."""
    if (config.get("height"), config.get("width")) != (256, 512):
        return []
    sf = [r for r in rows if is_slidefuse(r["tool"]) and r["batch"] == TARGET_BATCH and r["status"] == "ok"]
    if not sf or not sf[0]["samples_per_s"]:
        return []
    sps = sf[0]["samples_per_s"]
    out = ["slidefuse %s samples/s: target %s samples/s, %s (%.0f%% of it)"
           % (format(sps, ",.1f"), format(TARGET_SAMPLES_PER_S, ",.0f"),
              "met" if sps >= TARGET_SAMPLES_PER_S else "not met", 100.0 * sps / TARGET_SAMPLES_PER_S)]
    sp = speedups(rows)
    for tool, label, want in TARGET_SPEEDUPS:
        got = sp.get((tool, TARGET_BATCH))
        if got is None:
            out.append("%.1fx %s: not measured in this run" % (want, label))
        else:
            out.append("%.2fx %s: target %.1fx, %s" % (got, label, want, "met" if got >= want else "not met"))
    return out


def render_markdown(combined):
    """The .md text for a combined result (see build_combined)."""
    reports = [x["report"] for x in combined["runners"] if x.get("report")]
    rows = collect_rows(reports)
    sp = speedups(rows)
    cfg = combined.get("config", {})
    dev = combined.get("device") or {}
    lines = ["# slidefuse vs baselines — %s, %s" % (combined.get("gpu", "unknown GPU"), combined.get("date", "")[:10]), ""]
    facts = ["commit `%s`" % combined.get("commit", "unknown")]
    for k, label in (("driver", "driver"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("torch", "torch")):
        if dev.get(k):
            facts.append("%s %s" % (label, dev[k]))
    if cfg:
        facts.append("input %sx%sx2, loss `%s`" % (cfg.get("height"), cfg.get("width"), cfg.get("loss_variant", "sider")))
        clock = "wall-clock" if str(cfg.get("device", "cuda")).startswith("cpu") else "CUDA-event"
        facts.append("%s timed steps after %s warm-up steps (median of per-step %s times)"
                     % (cfg.get("steps"), cfg.get("warmup"), clock))
        facts.append("data: %s" % cfg.get("data_desc", "?"))
    lines += [", ".join(facts) + ".", ""]
    orders = sorted({r.get("extra", {}).get("fusion_up_order") for rep in reports if is_slidefuse(rep.get("tool", ""))
                     for r in rep.get("runs", [])} - {None})
    if orders:
        lines += ["slidefuse ran the fusion up paths in %s order (docs/MODEL.md: `conv_first` is the 1x1 conv before "
                  "the upsample, the same function and parameters as the original's `upsample_first`, which the "
                  "baselines run)." % " and ".join("`%s`" % o for o in orders), ""]
    lines += ["| tool | mode | batch | samples/s | ms/step median (p10–p90) | peak memory GiB | slidefuse speedup | status |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["batch"], not is_slidefuse(r["tool"]), r["tool"])):
        ms = "—" if r["median_ms"] is None else "%.3f (%.3f–%.3f)" % (r["median_ms"], r["p10_ms"], r["p90_ms"])
        s = sp.get((r["tool"], r["batch"]))
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s |" % (
            r["tool"], r["mode"], r["batch"], _fmt(r["samples_per_s"], ",.1f"), ms, _fmt(r["peak_gib"], ".2f"),
            "—" if s is None else "%.2fx" % s, _status_text(r)))
    baselines = sorted({t for (t, _) in sp})
    if baselines:
        batches = sorted({b for (_, b) in sp})
        lines += ["", "## Speedup of slidefuse (samples/s ratio, same batch size)", "",
                  "| batch | " + " | ".join("vs %s" % t for t in baselines) + " |",
                  "|---:|" + "---:|" * len(baselines)]
        for b in batches:
            lines.append("| %d | " % b + " | ".join(_fmt(sp.get((t, b)), ".2f") + ("x" if (t, b) in sp else "")
                                                   for t in baselines) + " |")
    targets = target_lines(rows, cfg)
    if targets:
        lines += ["", "## Against the speed targets (256x512, batch %d)" % TARGET_BATCH, ""] + ["- " + t for t in targets]
    notes = run_notes(reports)
    if notes:
        lines += ["", "## How the baselines ran", ""] + ["- " + n for n in notes]
    problems = [x for x in combined["runners"] if x.get("status") != "ok"]
    if problems:
        lines += ["", "## Runners that did not produce a report", ""]
        for x in problems:
            lines.append("- `%s`: %s — %s" % (x["runner"], x["status"], (x.get("error") or "").replace("\n", " ")[:300]))
    if combined.get("chart"):
        lines += ["", "![samples/s by batch size](%s)" % os.path.basename(combined["chart"])]
    return "\n".join(lines) + "\n"


def write_chart(combined, path):
    """Grouped bar chart of samples/s per batch size and tool. Returns None on success, else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no PNG chart written"
    reports = [x["report"] for x in combined["runners"] if x.get("report")]
    rows = [r for r in collect_rows(reports) if r["status"] == "ok" and r["samples_per_s"]]
    if not rows:
        return "no successful run to plot"
    tools = []
    for r in sorted(rows, key=lambda r: (not is_slidefuse(r["tool"]), r["tool"])):
        if r["tool"] not in tools:
            tools.append(r["tool"])
    batches = sorted({r["batch"] for r in rows})
    val = {(r["tool"], r["batch"]): r["samples_per_s"] for r in rows}
    sp = speedups(rows)
    width = 0.8 / len(tools)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(batches) * max(1, len(tools)) / 2), 4.5))
    for k, t in enumerate(tools):
        xs = [i + (k - (len(tools) - 1) / 2) * width for i in range(len(batches))]
        ys = [val.get((t, b), 0.0) for b in batches]
        bars = ax.bar(xs, ys, width * 0.95, label=t)
        for bar, b in zip(bars, batches):
            s = sp.get((t, b))
            if s is not None:
                ax.annotate("%.2fx" % s, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=7)
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels(["batch %d" % b for b in batches])
    ax.set_ylabel("samples/s (median step)")
    ax.set_title("%s — %s (labels: slidefuse speedup)" % (combined.get("gpu", ""), combined.get("date", "")[:10]),
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def build_combined(runner_results, config, date=None, commit=None):
    """The .json content: runner results (each with its bench report or an error) and context."""
    reports = [x["report"] for x in runner_results if x.get("report")]
    device = {}
    for rep in reports:  # the GPU facts, preferably from a GPU report
        d = rep.get("device") or {}
        if d.get("cuda") or not device:
            device = d
    return {"schema": COMPARE_SCHEMA, "date": date or bench_schema.utc_now(), "commit": commit or bench_schema.read_commit(),
            "host": socket.gethostname(), "gpu": device.get("name") or "unknown", "device": device,
            "config": config, "command": " ".join(shlex.quote(a) for a in sys.argv), "runners": runner_results}


def write_outputs(combined, out_dir, stem):
    """Writes stem.json, stem.md and (matplotlib permitting) stem.png; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, stem)
    png = base + ".png"
    why = write_chart(combined, png)
    combined["chart"] = None if why else png
    if why:
        print("compare: " + why, file=sys.stderr)
    with open(base + ".json", "w") as f:
        json.dump(combined, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(render_markdown(combined))
    return [p for p in (base + ".json", base + ".md", png) if os.path.exists(p)]
