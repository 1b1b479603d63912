#!/usr/bin/env python3
"""Data-parallel scaling model of slidefuse: what one gradient allreduce per step costs.

slidefuse reduces the whole flat fp32 gradient buffer with ONE ncclAllReduce after the backward
(no buckets, no overlap; docs/DISTRIBUTED.md). This prints, per world size and link class, the
predicted allreduce time t(N), the step time T + t(N) and the efficiency T / (T + t(N)) for a
measured single-GPU step time T, and the same with ideal overlap (max(T, t)) as an upper bound.

The allreduce time is the alpha-beta model of NCCL's ring (the one NCCL 2.28 itself uses to pick
an algorithm, src/graph/tuning.cc):
    t(N) = 2(N-1)/N * bytes / busbw  +  latency(N)
    latency(N) = base + (2(N-1) - s) * alpha_intra + s * alpha_net,   s = 2(nodes-1)
                 (x 1.4 on more than one node: NCCL's "plateau effect of ring" on sm_80+)
With one node, latency(N) = base + 2(N-1) * alpha. busbw is the per-rank bus bandwidth of the
slowest link of the ring (nccl-tests doc/PERFORMANCE.md). Every constant is cited in LINKS /
NCCL_RING_SIMPLE and docs/DISTRIBUTED.md. No figure here was measured by slidefuse.

Python 3 standard library only.
  python3 tools/scaling_model.py --step-ms 100 [--world 2,8,16,64] [--dtype fp32|bf16] [--json]
  python3 tools/scaling_model.py --from-bench bench.json [--batch 128] [--mode graph]
  python3 tools/scaling_model.py --table
  python3 tools/scaling_model.py --self-test
"""
import argparse
import json
import math
import os
import sys

SCHEMA = "slidefuse.scaling_model/1"
BENCH_SCHEMA = "slidefuse.bench/1"  # tools/bench_report.h kBenchSchema, docs/BENCH.md

# The model's trainable parameters (MODEL_SPEC, README) and the floats of the flat gradient range:
# every parameter starts at a multiple of kParamAlign = 16 floats (model/params.h), so the range is
# sum(round_up(numel, 16)) over the 435 parameters of tests/data/sider_state_dict.tsv. The same
# figure is `slidefuse plan`'s regions.parameter_grads.bytes / 4 (13,137,664 bytes).
PARAMETERS = 3284270
PARAM_ALIGN = 16
GRAD_FLOATS = 3284416
DTYPE_BYTES = {"fp32": 4, "bf16": 2}  # bf16 is a what-if: slidefuse reduces fp32 only

TUNING_CC = "https://github.com/NVIDIA/nccl/blob/v2.28.9-1/src/graph/tuning.cc"
TOPO = "https://github.com/NVIDIA/nccl/blob/v2.28.9-1/src/graph/topo.h, topo.cc"

# NCCL 2.28.9 tuning model, AllReduce, Ring algorithm, Simple protocol (the protocol for MB-sized
# messages), microseconds: baseLatencies[Ring][Simple]; hwLatencies[NVLINK|PCI|NET][Ring][Simple];
# on several nodes the intra-node step costs at least 3 x the network post overhead (1 us on
# Intel, 2 us on AMD CPUs; 1 us assumed), and the whole latency is multiplied by 1.4 (sm_80+).
NCCL_RING_SIMPLE = {"base_us": 8.4, "nvlink_us": 3.4, "pci_us": 5.7, "net_us": 14.0, "net_overhead_us": 1.0,
                    "multinode_factor": 1.4, "source": TUNING_CC}

# Link classes. busbw_gbps: the per-rank bus bandwidth the model uses (GB/s, 1e9 bytes/s, one
# direction), taken from NCCL's own topology model; peak: the datasheet figure it comes from.
# kind "intra": one node, at most gpus_per_node ranks. kind "net": nodes of gpus_per_node GPUs
# on NVLink 4, joined by NICs; a ring's busbw is then the node's total NIC bandwidth, capped by
# the intra-node busbw. latency "nvls": NCCL's NVLink SHARP algorithm, latency = its hwLatency.
LINKS = {
    "nvlink4": {"kind": "intra", "busbw_gbps": 18 * 20.6, "alpha": "nvlink_us",
                "what": "H100 SXM, NVLink 4 through NVSwitch, one node",
                "peak": "900 GB/s bidirectional = 18 links x 25 GB/s per direction (NVIDIA H100 datasheet)",
                "basis": "18 links x SM90_NVLINK_BW 20.6 GB/s (NCCL topo.h)"},
    "nvlink4-nvls": {"kind": "intra", "busbw_gbps": 476.0, "latency": "nvls", "nvls_us": 25.0,
                     "what": "same node, NCCL's NVLS (NVLink SHARP) algorithm",
                     "peak": "as nvlink4",
                     "basis": "476 GB/s 8xH100 allreduce busbw, 'in the expected range' (NVIDIA, nccl-tests#290)"},
    "pcie5": {"kind": "intra", "busbw_gbps": 16 * 240 / 80.0, "alpha": "pci_us",
              "what": "GPUs talking over PCIe Gen5 x16, one node",
              "peak": "32 GT/s x16 = 63 GB/s per direction (128 GB/s bidirectional, H100 PCIe datasheet)",
              "basis": "width x speed / 80 = 16 x 240 / 80 = 48 GB/s (NCCL topo.cc)"},
    "pcie4": {"kind": "intra", "busbw_gbps": 16 * 120 / 80.0, "alpha": "pci_us",
              "what": "GPUs talking over PCIe Gen4 x16, one node",
              "peak": "16 GT/s x16 = 31.5 GB/s per direction",
              "basis": "16 x 120 / 80 = 24 GB/s (NCCL topo.cc)"},
    "ib-ndr": {"kind": "net", "nic_gbps": 400 / 8.0, "nics_per_node": 8,
               "what": "8 H100/node on NVLink 4, one InfiniBand NDR 400 Gb/s NIC per GPU",
               "peak": "400 Gb/s = 50 GB/s per NIC; 46-48 GB/s seen in practice (NVIDIA, nccl-tests#290)",
               "basis": "Mb/s / 8000 = 50 GB/s per NIC (NCCL topo.cc)"},
    "ib-hdr": {"kind": "net", "nic_gbps": 200 / 8.0, "nics_per_node": 8,
               "what": "8 GPUs/node on NVLink 4, one InfiniBand HDR 200 Gb/s NIC per GPU",
               "peak": "200 Gb/s = 25 GB/s per NIC; ~24 GB/s on good setups (NVIDIA, nccl-tests#160)",
               "basis": "25 GB/s per NIC (NCCL topo.cc)"},
    "eth100": {"kind": "net", "nic_gbps": 100 / 8.0, "nics_per_node": 1,
               "what": "8 GPUs/node on NVLink 4, one 100 GbE NIC per node",
               "peak": "100 Gb/s = 12.5 GB/s",
               "basis": "12.5 GB/s per NIC (NCCL topo.cc); TCP latency is above NCCL's NET constant"},
}


class ModelError(Exception):
    """A bad input: main() prints it as one line and exits 1."""


# ---- the model ----


def grad_bytes(dtype, floats=GRAD_FLOATS):
    return floats * DTYPE_BYTES[dtype]


def padded_floats_from_tsv(path):
    """sum(round_up(numel, 16)) over the 'param' rows of a state_dict TSV (name, AxBx.., kind)."""
    total = 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 3:
                raise ModelError("%s:%d: expected 3 tab-separated columns, got %d" % (path, n, len(cols)))
            if cols[2] != "param":
                continue
            numel = 1
            for d in filter(None, cols[1].split("x")):
                numel *= int(d)
            total += -(-numel // PARAM_ALIGN) * PARAM_ALIGN
    return total


def ring_latency_us(world, nodes, alpha_intra_us, c=NCCL_RING_SIMPLE):
    """NCCL's ring AllReduce latency (us): base + per-step latencies, 2(N-1) steps in all."""
    steps = 2 * (world - 1)
    inter = 2 * (nodes - 1) if nodes > 1 else 0
    intra = max(alpha_intra_us, 3 * c["net_overhead_us"]) if nodes > 1 else alpha_intra_us
    lat = c["base_us"] + (steps - inter) * intra + inter * c["net_us"]
    return lat * c["multinode_factor"] if nodes > 1 else lat


def allreduce_us(nbytes, world, busbw_gbps, latency_us):
    """t = 2(N-1)/N * bytes / busbw + latency; busbw in GB/s = 1e3 bytes/us."""
    return 2.0 * (world - 1) / world * nbytes / (busbw_gbps * 1e3) + latency_us


def link_case(name, world, gpus_per_node, nics_per_node=None):
    """(nodes, busbw GB/s, latency us) of one link class at one world size; None if not applicable."""
    link = LINKS[name]
    if link["kind"] == "intra":
        if world > gpus_per_node:
            return None  # one node holds at most gpus_per_node ranks
        if link.get("latency") == "nvls":
            return 1, link["busbw_gbps"], link["nvls_us"]
        return 1, link["busbw_gbps"], ring_latency_us(world, 1, NCCL_RING_SIMPLE[link["alpha"]])
    nodes = -(-world // gpus_per_node)
    intra = LINKS["nvlink4"]["busbw_gbps"]
    nics = link["nics_per_node"] if nics_per_node is None else nics_per_node
    busbw = intra if nodes == 1 else min(intra, nics * link["nic_gbps"])
    return nodes, busbw, ring_latency_us(world, nodes, NCCL_RING_SIMPLE["nvlink_us"])


def predict(step_ms, nbytes, world, busbw_gbps, latency_us):
    """Allreduce time and step time / efficiency without and with ideal overlap."""
    t_ms = allreduce_us(nbytes, world, busbw_gbps, latency_us) / 1e3
    serial = step_ms + t_ms
    overlap = max(step_ms, t_ms)
    return {"allreduce_ms": t_ms, "step_ms_no_overlap": serial, "efficiency_no_overlap": step_ms / serial,
            "step_ms_ideal_overlap": overlap, "efficiency_ideal_overlap": step_ms / overlap,
            "speedup_no_overlap": world * step_ms / serial, "step_ms_for_95pct": 19.0 * t_ms}


def cases(step_times, worlds, links, nbytes, gpus_per_node, nics_per_node):
    out = []
    for step_ms in step_times:
        for name in links:
            for world in worlds:
                c = link_case(name, world, gpus_per_node, nics_per_node)
                row = {"step_ms": step_ms, "link": name, "world": world}
                if c is None:
                    row.update({"nodes": None, "applicable": False})
                else:
                    nodes, busbw, lat = c
                    row.update({"nodes": nodes, "applicable": True, "busbw_gbps": busbw, "latency_us": lat})
                    row.update(predict(step_ms, nbytes, world, busbw, lat))
                out.append(row)
    return out


# ---- inputs ----


def step_ms_from_bench(path, batch=None, mode=None):
    """Median step time of one successful run of a `slidefuse bench step --json` record."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ModelError("%s: cannot read: %s" % (path, e.strerror))
    except ValueError as e:
        raise ModelError("%s: not JSON: %s" % (path, e))
    if not isinstance(doc, dict) or doc.get("schema") != BENCH_SCHEMA:
        raise ModelError("%s: schema is %r, expected %r (docs/BENCH.md)" % (
            path, doc.get("schema") if isinstance(doc, dict) else None, BENCH_SCHEMA))
    runs = doc.get("runs")
    if not isinstance(runs, list):
        raise ModelError("%s: runs: expected an array" % path)
    ok = [r for r in runs if isinstance(r, dict) and r.get("status") == "ok" and r.get("median_ms") is not None]
    picked = [r for r in ok if (batch is None or r.get("batch") == batch) and (mode is None or r.get("mode") == mode)]
    have = ", ".join("batch %s %s" % (r.get("batch"), r.get("mode")) for r in ok) or "none"
    if len(picked) != 1:
        what = "no successful run matches" if not picked else "%d successful runs match" % len(picked)
        raise ModelError("%s: %s (batch %s, mode %s); successful runs: %s; pick one with --batch B [--mode M]" % (
            path, what, batch if batch is not None else "any", mode or "any", have))
    r = picked[0]
    ms = r["median_ms"]
    if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms <= 0:
        raise ModelError("%s: runs[batch %s].median_ms is %r, expected a number > 0" % (path, r.get("batch"), ms))
    device = (doc.get("device") or {}).get("name")
    source = {"file": path, "tool": doc.get("tool"), "commit": doc.get("commit"), "date": doc.get("date"),
              "device": device, "batch": r.get("batch"), "mode": r.get("mode"), "median_ms": ms}
    return float(ms), source


def positive_list(text, kind, key):
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ModelError("%s: %r is not a comma-separated list of %s" % (key, text, kind.__name__))
    if not values or any(not (v > 0) or (isinstance(v, float) and not math.isfinite(v)) for v in values):
        raise ModelError("%s: %r: every value must be > 0" % (key, text))
    return values


# ---- output ----


def text_report(doc):
    lines = ["gradient allreduce: %s bytes (%s) per step" % (format(doc["grad_bytes"], ","), doc["bytes_note"]),
             "model: %s" % doc["model"]]
    for step_ms in doc["step_times_ms"]:
        lines += ["", "step time T = %g ms (%s)" % (step_ms, doc["step_source"]),
                  "%-13s %5s %5s %7s %9s | %10s %7s %7s | %10s %7s | %9s" % (
                      "link", "world", "nodes", "busbw", "allreduce", "T+t", "eff", "speedup",
                      "max(T,t)", "eff", "T for 95%")]
        for c in doc["cases"]:
            if c["step_ms"] != step_ms:
                continue
            if not c["applicable"]:
                lines.append("%-13s %5d %5s  (single-node link: world > --gpus-per-node)" % (
                    c["link"], c["world"], "-"))
                continue
            lines.append("%-13s %5d %5d %7.1f %6.3f ms | %7.3f ms %6.2f%% %7.2f | %7.3f ms %6.2f%% | %6.2f ms" % (
                c["link"], c["world"], c["nodes"], c["busbw_gbps"], c["allreduce_ms"], c["step_ms_no_overlap"],
                100 * c["efficiency_no_overlap"], c["speedup_no_overlap"], c["step_ms_ideal_overlap"],
                100 * c["efficiency_ideal_overlap"], c["step_ms_for_95pct"]))
    return "\n".join(lines)


def compact_report(doc):
    """One Markdown row per (link, world): allreduce time, then efficiency T/(T+t) per step time.
    Network links on one node are left out (their ring stays on NVLink 4: the nvlink4 rows)."""
    steps = doc["step_times_ms"]
    head = "| link | world | nodes | busbw GB/s | allreduce ms | " + " | ".join(
        "eff. at T=%g ms" % t for t in steps) + " | T for 95%, ms |"
    lines = [head, "|" + "---|" * (6 + len(steps))]
    seen = {}
    for c in doc["cases"]:
        if c["applicable"] and not (LINKS[c["link"]]["kind"] == "net" and c["nodes"] == 1):
            seen.setdefault((c["link"], c["world"]), []).append(c)
    for (link, world), row in seen.items():
        c = row[0]
        effs = " | ".join("%.2f%%" % (100 * r["efficiency_no_overlap"]) for r in row)
        lines.append("| %s | %d | %d | %.1f | %.3f | %s | %.1f |" % (
            link, world, c["nodes"], c["busbw_gbps"], c["allreduce_ms"], effs, c["step_ms_for_95pct"]))
    return "\n".join(lines)


def link_table():
    lines = ["link classes (busbw: per-rank bus bandwidth the model uses, GB/s = 1e9 bytes/s, one direction)"]
    for name, l in LINKS.items():
        bw = ("%.1f GB/s" % l["busbw_gbps"] if "busbw_gbps" in l else
              "%d x %.1f GB/s NICs per node" % (l["nics_per_node"], l["nic_gbps"]))
        lines.append("%-13s %s: %s" % (name, bw, l["what"]))
        lines.append("%-13s busbw from: %s" % ("", l["basis"]))
        lines.append("%-13s peak: %s" % ("", l["peak"]))
    c = NCCL_RING_SIMPLE
    lines.append("ring latency (us): base %g, per step NVLink %g, PCIe %g, network %g; x%g on >1 node (%s)" % (
        c["base_us"], c["nvlink_us"], c["pci_us"], c["net_us"], c["multinode_factor"], c["source"]))
    lines.append("network links: busbw = min(NVLink 4 busbw, NICs per node x NIC rate) on more than one node")
    return "\n".join(lines)


# ---- self-test ----


def self_test():
    """Check the formula against hand-computed cases; returns a list of failures."""
    fails = []

    def near(what, got, want, tol=1e-9):
        if abs(got - want) > tol * max(1.0, abs(want)):
            fails.append("%s: got %.12g, want %.12g" % (what, got, want))

    flat = {"base_us": 0.0, "nvlink_us": 5.0, "pci_us": 5.0, "net_us": 5.0, "net_overhead_us": 0.0,
            "multinode_factor": 1.0}
    # 2 ranks, 1e8 bytes at 100 GB/s: 2*1/2 * 1e8 B / 1e5 B/us = 1000 us, + 2*(2-1)*5 us = 1010 us.
    near("2 ranks, one node", allreduce_us(1e8, 2, 100.0, ring_latency_us(2, 1, 5.0, flat)), 1010.0)
    # 16 ranks on 2 nodes, 8e8 bytes at 50 GB/s: 2*15/16 * 8e8 / 5e4 = 30000 us; 30 steps, 2 of them
    # between nodes: 1.4 * (8.4 + 28*3.4 + 2*14) = 1.4 * 131.6 = 184.24 us.
    near("16 ranks, 2 nodes", allreduce_us(8e8, 16, 50.0, ring_latency_us(16, 2, 3.4)), 30184.24)
    # 8 ranks, one node: 8.4 + 14*3.4 = 56 us of latency.
    near("8 ranks, NVLink latency", ring_latency_us(8, 1, 3.4), 56.0)
    # Efficiency: T = 100 ms, t = 25 ms -> 0.8 without overlap, 1.0 with; 95% needs T = 19 t.
    p = predict(100.0, 25e3 * 370.8e3 * 8 / 14, 8, 370.8, 0.0)
    near("allreduce 25 ms", p["allreduce_ms"], 25.0)
    near("efficiency", p["efficiency_no_overlap"], 0.8)
    near("overlap efficiency", p["efficiency_ideal_overlap"], 1.0)
    near("speedup", p["speedup_no_overlap"], 6.4)
    near("T for 95%", p["step_ms_for_95pct"], 475.0)
    # Network links: 2 nodes of 8 on NDR (8 x 50 GB/s) stay capped at NVLink's 370.8 GB/s;
    # one 100 GbE NIC per node gives 12.5 GB/s.
    near("ib-ndr busbw", link_case("ib-ndr", 16, 8)[1], 370.8)
    near("eth100 busbw", link_case("eth100", 64, 8)[1], 12.5)
    if link_case("nvlink4", 16, 8) is not None:
        fails.append("nvlink4 at 16 ranks with 8 GPUs per node must be not applicable")
    tsv = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data",
                       "sider_state_dict.tsv")
    if os.path.exists(tsv):
        near("padded gradient floats (%s)" % tsv, padded_floats_from_tsv(tsv), GRAD_FLOATS)
    return fails


# ---- command line ----


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="docs/DISTRIBUTED.md explains the model and cites every constant.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--step-ms", help="single-GPU step time(s) in ms at the per-rank batch, e.g. 100 or 50,100,200")
    src.add_argument("--from-bench", metavar="FILE",
                     help="take runs[].median_ms from a `slidefuse bench step --json` record")
    src.add_argument("--table", action="store_true", help="print the link table and the gradient size only")
    src.add_argument("--self-test", action="store_true", help="check the formula against hand-computed cases")
    p.add_argument("--batch", type=int, help="with --from-bench: the run's batch")
    p.add_argument("--mode", help="with --from-bench: the run's mode (graph or eager)")
    p.add_argument("--world", default="2,8,16,64", help="world sizes (ranks = GPUs), default 2,8,16,64")
    p.add_argument("--gpus-per-node", type=int, default=8, help="ranks per node (default 8)")
    p.add_argument("--nics-per-node", type=int, help="override the network links' NICs per node")
    p.add_argument("--links", default=",".join(LINKS), help="link classes, default all: " + ",".join(LINKS))
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="fp32",
                   help="gradient element type (bf16: what-if, not implemented in slidefuse)")
    p.add_argument("--grad-bytes", type=int, help="override the bytes reduced per step")
    p.add_argument("--compact", action="store_true", help="one Markdown row per link and world size")
    p.add_argument("--json", metavar="OUT", nargs="?", const="-", help="write JSON to OUT (default stdout)")
    return p.parse_args(argv)


def build(a):
    if a.gpus_per_node < 1 or (a.nics_per_node is not None and a.nics_per_node < 1):
        raise ModelError("--gpus-per-node and --nics-per-node must be >= 1")
    worlds = positive_list(a.world, int, "--world")
    if any(w < 2 for w in worlds):
        raise ModelError("--world %r: a world size must be >= 2" % a.world)
    links = [l.strip() for l in a.links.split(",") if l.strip()]
    bad = [l for l in links if l not in LINKS]
    if bad or not links:
        raise ModelError("--links: unknown link class %s (known: %s)" % (",".join(bad) or "none", ",".join(LINKS)))
    if a.grad_bytes is not None and a.grad_bytes <= 0:
        raise ModelError("--grad-bytes %d: must be > 0" % a.grad_bytes)
    nbytes = a.grad_bytes if a.grad_bytes is not None else grad_bytes(a.dtype)
    note = ("--grad-bytes override" if a.grad_bytes is not None else
            "%s, %s floats = %s parameters padded to multiples of %d%s" % (
                a.dtype, format(GRAD_FLOATS, ","), format(PARAMETERS, ","), PARAM_ALIGN,
                "; bf16 allreduce is not implemented" if a.dtype == "bf16" else ""))
    bench = None
    if a.from_bench:
        step_ms, bench = step_ms_from_bench(a.from_bench, a.batch, a.mode)
        step_times = [step_ms]
        source = "measured: %s, batch %s, %s, %s" % (a.from_bench, bench["batch"], bench["mode"], bench["device"])
    else:
        if a.batch is not None or a.mode is not None:
            raise ModelError("--batch and --mode select a run of --from-bench; give --from-bench FILE")
        step_times = positive_list(a.step_ms, float, "--step-ms")
        source = "assumed input, not measured"
    return {"schema": SCHEMA, "grad_bytes": nbytes, "dtype": a.dtype, "bytes_note": note,
            "model": "NCCL ring alpha-beta: t = 2(N-1)/N * bytes / busbw + latency (NCCL 2.28 tuning.cc)",
            "step_times_ms": step_times, "step_source": source, "bench": bench,
            "gpus_per_node": a.gpus_per_node, "links": {l: LINKS[l] for l in links},
            "cases": cases(step_times, worlds, links, nbytes, a.gpus_per_node, a.nics_per_node)}


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.self_test:
        fails = self_test()
        for f in fails:
            print("self-test FAILED: " + f, file=sys.stderr)
        print("self-test: %s" % ("FAILED" if fails else "ok"))
        return 1 if fails else 0
    if a.table:
        print("gradient allreduce per step: fp32 %s bytes, bf16 %s bytes (%s floats)" % (
            format(grad_bytes("fp32"), ","), format(grad_bytes("bf16"), ","), format(GRAD_FLOATS, ",")))
        print(link_table())
        return 0
    try:
        if not a.step_ms and not a.from_bench:
            raise ModelError("give --step-ms T (ms), --from-bench FILE, --table or --self-test")
        doc = build(a)
    except ModelError as e:
        print("scaling_model: error: %s" % e, file=sys.stderr)
        return 1
    report = compact_report(doc) if a.compact else text_report(doc)
    if a.json is None:
        print(report)
    elif a.json == "-":
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        print(report)
        print("wrote %s" % a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
