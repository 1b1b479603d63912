#!/usr/bin/env python3
"""How many dependent memory round trips a kernel's loops make, read from its SASS (no GPU needed).

A kernel that loads a value and uses it before issuing its next load waits one memory latency per
load; one that issues its loads together waits once for all of them. For each function of a
`cuobjdump -sass` listing this reports, for its largest loop (the body of the backward branch that
spans the most instructions; the whole function when it has none):

  loads    global loads (LDG) in the loop body
  batches  dependent load batches: a batch is a run of loads issued before any instruction reads a
           register one of them writes; the next load after such a read starts a new batch
  per      loads per batch (1-2: loads issued one at a time, about one round trip each; the tile's
           whole load count: one round trip per iteration)
  ffma     FFMA instructions in the loop body

This is a static count over the code, not a trace: a predicated-off load still counts, and the
batches a GPU really waits on also depend on occupancy and on the latency each load sees. It is a
question the SASS can answer without a device (docs/KERNELS_DWCONV.md, "Why the per-pixel wgrad
waits"), not a timing.

    cuobjdump -sass build/CMakeFiles/sf_kernels.dir/kernels/dwconv_wgrad.cu.o > wgrad.sass
    python3 tools/sass_loads.py wgrad.sass [--filter wgrad] [--json]

cuobjdump is part of the CUDA toolkit; where the toolkit lacks it, `pip install
nvidia-cuda-cuobjdump` into a virtual environment provides it (nvidia/cu13/bin/cuobjdump).
"""
import argparse
import json
import re
import sys

_FUNC = re.compile(r"Function : (\S+)")
_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_REG = re.compile(r"\bR(\d+)\b")
_BRA = re.compile(r"\bBRA\s+(?:`?\(?)(0x[0-9a-f]+)")


def parse(text):
    """[(function name, [(address, instruction text)])] in listing order."""
    out, cur = [], None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            cur = (m.group(1), [])
            out.append(cur)
            continue
        m = _INSN.match(line)
        if m and cur is not None:
            out[-1][1].append((int(m.group(1), 16), m.group(2)))
    return out


def _opcode(ins):
    parts = ins.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def _operands(ins):
    op = _opcode(ins)
    return ins[ins.index(op) + len(op):]


def _width(op):
    return 4 if ".128" in op else 2 if ".64" in op else 1


def batches(body):
    """Sizes of the dependent global-load batches of a list of instructions, in order."""
    sizes, pending, cur = [], set(), 0
    for _, ins in body:
        op = _opcode(ins)
        operands = [o.strip() for o in _operands(ins).split(",")]
        stores = op.startswith(("ST", "RED", "BRA", "EXIT"))  # every operand is read
        reads = set()
        for o in operands if stores else operands[1:]:
            reads |= {int(r) for r in _REG.findall(o)}
        if op.startswith("LDG"):
            if reads & pending:
                sizes.append(cur)
                cur, pending = 0, set()
            dst = _REG.findall(operands[0]) if operands else []
            if dst:
                base = int(dst[0])
                pending |= set(range(base, base + _width(op)))
            cur += 1
            continue
        if reads & pending:
            if cur:
                sizes.append(cur)
            cur, pending = 0, set()
        # A register overwritten before it is read no longer waits on a load.
        for r in _REG.findall(operands[0]) if operands and not stores else []:
            pending.discard(int(r))
    if cur:
        sizes.append(cur)
    return sizes


def largest_loop(body):
    """The instructions of the largest loop (backward branch target .. branch), or the whole body."""
    best = None
    for i, (addr, ins) in enumerate(body):
        if "BRA" not in _opcode(ins):
            continue
        m = _BRA.search(ins)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        start = next((k for k, (a, _) in enumerate(body) if a >= target), i)
        if best is None or i - start > best[1] - best[0]:
            best = (start, i)
    if best is None:
        return body, False
    return body[best[0]:best[1] + 1], True


def report(text, name_filter=""):
    rows = []
    for name, body in parse(text):
        if name_filter and name_filter not in name:
            continue
        loop, is_loop = largest_loop(body)
        b = batches(loop)
        loads = sum(b)
        rows.append({
            "function": name,
            "loop": is_loop,
            "loads": loads,
            "batches": len(b),
            "loads_per_batch": round(loads / len(b), 2) if b else 0.0,
            "ffma": sum(1 for _, ins in loop if _opcode(ins).startswith("FFMA")),
        })
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass", help="cuobjdump -sass output ('-' for stdin)")
    ap.add_argument("--filter", default="", help="only functions whose mangled name contains this")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    a = ap.parse_args(argv)
    if a.sass == "-":
        text = sys.stdin.read()
    else:
        with open(a.sass, encoding="utf-8", errors="replace") as f:
            text = f.read()
    rows = report(text, a.filter)
    if not rows:
        print("sass_loads: no function%s in %s" % (" matching " + repr(a.filter) if a.filter else "", a.sass),
              file=sys.stderr)
        return 1
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print("%-6s %5s %7s %5s %5s  %s" % ("scope", "loads", "batches", "per", "ffma", "function"))
    for r in rows:
        print("%-6s %5d %7d %5.1f %5d  %s" % ("loop" if r["loop"] else "whole", r["loads"], r["batches"],
                                             r["loads_per_batch"], r["ffma"], r["function"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
