#!/usr/bin/env python3
"""Summarise an Nsight Compute CSV (ncu --csv --page raw --print-units base) of one training step.

Input: the raw page of `ncu --csv --page raw --print-units base --metrics <METRICS>` (one row per
kernel launch, a header row, optionally a units row). `scripts/gpu_verify.sh profile` writes it for
the kernels of one eager step (docs/PROFILING.md). Output: per kernel (name with its template
arguments, without the parameter list) the launches, total and mean time, share of the profiled
time, DRAM bytes and achieved GB/s (and its share of the measured copy ceiling when --ceilings
names a `slidefuse bench ceilings` JSON: its copy.gbps), ncu's DRAM and SM throughput, achieved occupancy,
registers per thread and L1/L2 hit rates; then the same time summed by class (cuDNN/cuBLAS
library kernels vs each of slidefuse's kernel families). Markdown on stdout or --md, JSON with --json.
The CSV may be gzip-compressed (.gz). With --step-ms (or --bench, a `slidefuse bench step` record whose
first run gives ms_per_step) the kernel time is set against the graph-replayed step of the same batch
and size: what is left is spent between kernels (launch latency, dependencies, idle SMs at kernel
boundaries), per launch.

Exit status: 0 written; 1 unreadable input or no kernel rows; 2 usage.
"""
import argparse
import csv
import gzip
import json
import re
import sys

METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
]

# Base units ncu prints with --print-units base; anything else is scaled here (SI and binary prefixes).
_SCALE = {
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "kibyte": 1024.0, "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3,
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
}


class SummaryError(Exception):
    pass


def short_name(name):
    """'void ns::k<1, 8>(A, B)' -> 'ns::k<1, 8>': drop the return type and the parameter list."""
    anon = "(anonymous namespace)"
    n = name.strip().replace(anon, "\x00")  # part of the qualified name, not a parameter list
    if n.startswith("void "):
        n = n[5:]
    depth = 0
    for i, ch in enumerate(n):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            n = n[:i]
            break
    return n.replace("\x00", anon)


def kernel_class(name):
    """The family a kernel belongs to: a slidefuse kernel's base name, or the library."""
    base = re.sub(r"<.*", "", name)
    base = base.replace("(anonymous namespace)::", "")
    if base.startswith("kern::") or base.startswith("model::") or base.startswith("data::"):
        fam = base.split("::")[-1]
        fam = re.sub(r"_kernel$", "", fam)
        return fam
    low = name.lower()
    if "cudnn" in low or "xmma" in low or "cutlass" in low or "conv" in low:
        return "cuDNN"
    if "gemm" in low or "cublas" in low:
        return "cuBLAS"
    return "other"


def _number(text):
    t = (text or "").strip().replace(",", "")
    if t in ("", "n/a", "N/A", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def read_rows(path):
    """The kernel rows of an ncu raw CSV as dicts of floats (metrics in base units) + name fields."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", newline="", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith('"')]  # ncu may print ==PROF== lines around the CSV
    except OSError as e:
        raise SummaryError(f"cannot read {path}: {e.strerror}")
    reader = csv.reader(lines)
    header = next(reader, None)
    if not header or "Kernel Name" not in header:
        raise SummaryError(f"{path}: no ncu CSV header with a 'Kernel Name' column")
    col = {h: i for i, h in enumerate(header)}
    units = {}
    rows = []
    for rec in reader:
        if len(rec) != len(header):
            continue
        if rec[col["ID"]].strip() == "" if "ID" in col else False:
            units = {h: rec[i].strip().lower() for h, i in col.items()}
            continue
        r = {"name": short_name(rec[col["Kernel Name"]])}
        for m in METRICS:
            if m not in col:
                r[m] = None
                continue
            v = _number(rec[col[m]])
            if v is not None:
                v *= _SCALE.get(units.get(m, ""), 1.0)
            r[m] = v
        rows.append(r)
    if not rows:
        raise SummaryError(f"{path}: no kernel rows (did ncu profile anything? --profile-from-start off needs "
                           "the trainer's --profile-steps range)")
    if all(r["gpu__time_duration.sum"] is None for r in rows):
        raise SummaryError(f"{path}: no gpu__time_duration.sum values")
    return rows


def summarise(rows, copy_gbps=None):
    kernels = {}
    for r in rows:
        k = kernels.setdefault(r["name"], {"name": r["name"], "class": kernel_class(r["name"]), "launches": 0,
                                           "ns": 0.0, "bytes": 0.0, "w": {}})
        k["launches"] += 1
        ns = r["gpu__time_duration.sum"] or 0.0
        k["ns"] += ns
        k["bytes"] += (r["dram__bytes_read.sum"] or 0.0) + (r["dram__bytes_write.sum"] or 0.0)
        for m in METRICS[3:]:  # time-weighted means of the rate metrics
            if r[m] is not None:
                s = k["w"].setdefault(m, [0.0, 0.0])
                s[0] += r[m] * ns
                s[1] += ns
    total_ns = sum(k["ns"] for k in kernels.values())
    out = []
    for k in kernels.values():
        e = {
            "name": k["name"], "class": k["class"], "launches": k["launches"],
            "total_ms": k["ns"] / 1e6, "mean_us": k["ns"] / k["launches"] / 1e3,
            "share_pct": 100.0 * k["ns"] / total_ns if total_ns > 0 else 0.0,
            "dram_mb": k["bytes"] / 1e6,
            "gbps": k["bytes"] / k["ns"] if k["ns"] > 0 else 0.0,  # bytes per ns = GB/s
        }
        if copy_gbps:
            e["pct_of_copy"] = 100.0 * e["gbps"] / copy_gbps
        for m, (num, den) in k["w"].items():
            e[m] = num / den if den > 0 else None
        out.append(e)
    out.sort(key=lambda e: -e["total_ms"])
    classes = {}
    for e in out:
        c = classes.setdefault(e["class"], {"class": e["class"], "launches": 0, "total_ms": 0.0, "dram_mb": 0.0})
        c["launches"] += e["launches"]
        c["total_ms"] += e["total_ms"]
        c["dram_mb"] += e["dram_mb"]
    cls = sorted(classes.values(), key=lambda c: -c["total_ms"])
    for c in cls:
        c["share_pct"] = 100.0 * c["total_ms"] * 1e6 / total_ns if total_ns > 0 else 0.0
        c["gbps"] = c["dram_mb"] * 1e6 / (c["total_ms"] * 1e6) if c["total_ms"] > 0 else 0.0
    return {"schema": "slidefuse.ncu_summary/1", "launches": len(rows), "total_ms": total_ns / 1e6,
            "copy_gbps": copy_gbps, "kernels": out, "classes": cls}


def add_step(s, step_ms):
    """The graph step's time against the kernels': step_ms, between_kernels_ms, per launch (us)."""
    s["step_ms"] = step_ms
    s["between_kernels_ms"] = step_ms - s["total_ms"]
    s["between_kernels_pct"] = 100.0 * s["between_kernels_ms"] / step_ms if step_ms > 0 else 0.0
    s["between_kernels_us_per_launch"] = 1e3 * s["between_kernels_ms"] / s["launches"] if s["launches"] else 0.0
    return s


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def markdown(s, top):
    lines = [f"ncu: {s['launches']} kernel launches, {s['total_ms']:.3f} ms of kernel time"
             + (f"; copy ceiling {s['copy_gbps']:.1f} GB/s" if s["copy_gbps"] else ""), ""]
    if s.get("step_ms") is not None:
        lines[-1:-1] = [f"graph step {s['step_ms']:.3f} ms: kernels {s['total_ms']:.3f} ms, "
                        f"{s['between_kernels_ms']:.3f} ms ({s['between_kernels_pct']:.1f}%) between kernels, "
                        f"{s['between_kernels_us_per_launch']:.2f} us per launch"]
    copy = s["copy_gbps"] is not None
    lines.append("| kernel | launches | ms | share | mean us | DRAM MB | GB/s |" + (" % copy |" if copy else "")
                 + " dram % | sm % | occupancy % | regs | L1 hit % | L2 hit % |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if copy else "") + "---:|---:|---:|---:|---:|---:|")
    for e in s["kernels"][:top]:
        lines.append(
            f"| `{e['name']}` | {e['launches']} | {e['total_ms']:.3f} | {e['share_pct']:.1f}% | {e['mean_us']:.1f} "
            f"| {e['dram_mb']:.1f} | {e['gbps']:.0f} |" + (f" {e['pct_of_copy']:.0f}% |" if copy else "")
            + f" {_f(e.get(METRICS[3]), '.0f')} | {_f(e.get(METRICS[4]), '.0f')} | {_f(e.get(METRICS[5]), '.0f')} "
            f"| {_f(e.get(METRICS[6]), '.0f')} | {_f(e.get(METRICS[7]), '.0f')} | {_f(e.get(METRICS[8]), '.0f')} |")
    if len(s["kernels"]) > top:
        rest = s["kernels"][top:]
        lines.append(f"| ({len(rest)} more) | {sum(e['launches'] for e in rest)} | "
                     f"{sum(e['total_ms'] for e in rest):.3f} | {sum(e['share_pct'] for e in rest):.1f}% | | | |"
                     + (" |" if copy else "") + " | | | | | |")
    lines += ["", "| class | launches | ms | share | DRAM MB | GB/s |", "|---|---:|---:|---:|---:|---:|"]
    for c in s["classes"]:
        lines.append(f"| {c['class']} | {c['launches']} | {c['total_ms']:.3f} | {c['share_pct']:.1f}% "
                     f"| {c['dram_mb']:.1f} | {c['gbps']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="?", help="ncu --csv --page raw --print-units base output")
    ap.add_argument("--ceilings", help="slidefuse bench ceilings JSON (its copy GB/s)")
    ap.add_argument("--top", type=int, default=40, help="kernels listed (default 40)")
    ap.add_argument("--md", help="write the markdown here (default stdout)")
    ap.add_argument("--json", help="write the summary JSON here")
    ap.add_argument("--print-metrics", action="store_true", help="print the --metrics list ncu needs and exit")
    ap.add_argument("--step-ms", type=float, help="the graph-replayed step's ms at the profiled batch and size")
    ap.add_argument("--bench", help="a slidefuse bench step JSON: its first run's ms_per_step as --step-ms")
    a = ap.parse_args(argv)
    if a.print_metrics:
        print(",".join(METRICS))
        return 0
    if a.csv is None:
        ap.error("the ncu CSV is required")
    if a.top < 1:
        ap.error("--top must be at least 1")
    if a.step_ms is not None and a.bench:
        ap.error("give --step-ms or --bench, not both")
    if a.step_ms is not None and not a.step_ms > 0:
        ap.error("--step-ms must be positive")
    try:
        copy = None
        if a.ceilings:
            try:
                with open(a.ceilings, encoding="utf-8") as f:
                    copy = float(json.load(f)["copy"]["gbps"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise SummaryError(f"{a.ceilings}: no copy.gbps ({type(e).__name__}: {e})")
        s = summarise(read_rows(a.csv), copy)
        step_ms = a.step_ms
        if a.bench:
            try:
                opener = gzip.open if a.bench.endswith(".gz") else open
                with opener(a.bench, "rt", encoding="utf-8") as f:
                    step_ms = float(json.load(f)["runs"][0]["ms_per_step"])
            except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
                raise SummaryError(f"{a.bench}: no runs[0].ms_per_step ({type(e).__name__}: {e})")
            if not step_ms > 0:
                raise SummaryError(f"{a.bench}: runs[0].ms_per_step is {step_ms}")
        if step_ms is not None:
            add_step(s, step_ms)
    except SummaryError as e:
        print(f"ncu_summary: {e}", file=sys.stderr)
        return 1
    md = markdown(s, a.top)
    if a.md:
        with open(a.md, "w", encoding="utf-8") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
