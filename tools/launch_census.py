#!/usr/bin/env python3
"""Summarize the CPU emulation's launch censuses (SF_EMU_LAUNCH_CENSUS, docs/EMULATION.md): per kernel
family (the kernel's name without its template arguments), the instances and block sizes launched, the
launches, the sm_90 registers and stack, and the theoretical occupancy (the share of an SM's 64 warps
the resident blocks hold, and what limits them), lowest occupancy first.

    SF_EMU_LAUNCH_CENSUS=/tmp/census.tsv build/tests/emu/sf_emu_step_tests --gtest_filter='CudaStep.*'
    python3 tools/launch_census.py /tmp/census*.tsv [--json]

Several files (test shards) are merged: launches of the same kernel and block size add up. The
occupancy is the sm_90 build's theoretical one (registers, shared memory, warps, blocks per SM as
cuda_occupancy.h computes them), not a measurement: `ncu`'s achieved occupancy is the GPU's answer.
"""
import argparse
import json
import re
import sys

COLUMNS = ["threads", "launches", "regs", "smem", "stack", "bound", "blocks_per_sm", "occupancy", "limit", "kernel"]


def family(kernel):
    """`ns::(anonymous namespace)::name<...>(args)` -> `name`."""
    name = re.sub(r"\(anonymous namespace\)::", "", kernel)
    if name.startswith("void "):
        name = name[5:]
    depth, out = 0, []
    for ch in name:  # drop template arguments and the parameter list
        if ch in "<(":
            if ch == "(" and depth == 0:
                break
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1]


def read(paths):
    """{(kernel, threads): row} merged over the files."""
    rows = {}
    for path in paths:
        with open(path) as f:
            lines = [line.rstrip("\n") for line in f if not line.startswith("#")]
        if not lines or lines[0].split("\t") != COLUMNS:
            raise ValueError("%s: not a launch census (expected the header %s)" % (path, "\t".join(COLUMNS)))
        for line in lines[1:]:
            cells = line.split("\t")
            if len(cells) != len(COLUMNS):
                raise ValueError("%s: malformed row: %s" % (path, line))
            r = dict(zip(COLUMNS, cells))
            key = (r["kernel"], int(r["threads"]))
            if key in rows:
                rows[key]["launches"] += int(r["launches"])
                continue
            rec = {"kernel": r["kernel"], "threads": int(r["threads"]), "launches": int(r["launches"])}
            if r["regs"] != "-":
                rec.update(regs=int(r["regs"]), stack=int(r["stack"]), smem=int(r["smem"]),
                           occupancy=float(r["occupancy"]), limit=r["limit"])
            rows[key] = rec
    return rows


def summarize(rows):
    """[family record], lowest minimum occupancy first."""
    fams = {}
    for r in rows.values():
        if "regs" not in r:
            continue
        f = fams.setdefault(family(r["kernel"]), {"family": family(r["kernel"]), "instances": set(), "threads": set(),
                                                  "launches": 0, "regs": [], "stack": 0, "occupancy": [],
                                                  "limits": set()})
        f["instances"].add(r["kernel"])
        f["threads"].add(r["threads"])
        f["launches"] += r["launches"]
        f["regs"].append(r["regs"])
        f["stack"] = max(f["stack"], r["stack"])
        f["occupancy"].append(r["occupancy"])
        f["limits"].add(r["limit"])
    out = []
    for f in fams.values():
        out.append({"family": f["family"], "instances": len(f["instances"]), "threads": sorted(f["threads"]),
                    "launches": f["launches"], "regs": [min(f["regs"]), max(f["regs"])], "max_stack": f["stack"],
                    "occupancy": [min(f["occupancy"]), max(f["occupancy"])], "limits": sorted(f["limits"])})
    out.sort(key=lambda f: (f["occupancy"][0], f["family"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="census TSVs (SF_EMU_LAUNCH_CENSUS)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        rows = read(args.files)
    except (OSError, ValueError) as e:
        print("launch_census: %s" % e, file=sys.stderr)
        return 2
    fams = summarize(rows)
    unknown = sorted({r["kernel"] for r in rows.values() if "regs" not in r})
    if args.json:
        json.dump({"schema": "slidefuse.launch_census/1", "families": fams, "unchecked": unknown}, sys.stdout, indent=1)
        print()
        return 0
    print("%-40s %4s %9s %8s %9s %6s %13s  %s" % ("family", "inst", "launches", "threads", "regs", "stack",
                                                 "occupancy", "limited by"))
    for f in fams:
        th = "/".join(str(t) for t in f["threads"])
        print("%-40s %4d %9d %8s %4d-%-4d %6d %5.3f-%-5.3f  %s" % (
            f["family"], f["instances"], f["launches"], th, f["regs"][0], f["regs"][1], f["max_stack"],
            f["occupancy"][0], f["occupancy"][1], ", ".join(f["limits"])))
    if unknown:
        print("%d kernels without an sm_90 record (emulation only): %s" % (len(unknown), ", ".join(unknown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
