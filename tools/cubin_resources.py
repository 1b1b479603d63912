#!/usr/bin/env python3
"""Each kernel's registers, shared memory, stack and launch bound, read from the cubins inside object
files, static libraries or executables (no GPU, no cuobjdump), and the largest block each can launch.

A launch whose block needs more registers than a block may hold, or more threads than the kernel's
__launch_bounds__, fails on the GPU with cudaErrorLaunchOutOfResources ("too many resources requested
for launch"). The CPU emulation runs every kernel with any block size; with this table
(`--tsv`, built into build/tests/emu/sm90_kernels.tsv) it refuses such launches as the GPU would
(docs/EMULATION.md, "Launch resources").

    python3 tools/cubin_resources.py build/libsf_kernels.a [build/libsf_model.a ...] [--arch 90]
        [--filter SUBSTRING] [--json | --tsv OUT | --against OTHER_BUILD/libsf_kernels.a ...]

Per kernel: regs (per thread), smem (static shared bytes per block, without the 1 KiB the driver
reserves on sm_80+), stack (the per-thread stack frame: local arrays and spills), bound (the
__launch_bounds__ maximum, 0 for none) and max_threads: the largest block that fits, the smaller of
1024, the bound and the register limit. The register limit is the hardware's per-block check as
CUDA's occupancy calculator models it (cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit): registers
are allocated per warp in units of 256, and the check assumes the block's warps rounded up to a
multiple of the SM's 4 sub-partitions: ceil256(regs * 32) * roundup4(warps) <= 65536.

`--against` compares each kernel's SASS (its .text bytes) with another build's: a change claimed to leave
some kernels alone can show it.

The format (read from the files, checked against `ptxas -v` by tests/tools/test_cubin_resources.py):
the host ELF's .nv_fatbin section holds fatbin containers (magic 0xBA55ED50) of entries (kind 2 =
cubin, the SM version at byte 28 of the entry header, the flags at byte 40: compressed when 0x2000
or 0x8000 is set or the inflated size at byte 56 is not 0: those are reported, not read); a cubin is an ELF whose kernels are the functions with st_other 0x10; the
.nv.info section's EIATTR_REGCOUNT (0x2f) gives (symbol, registers) and EIATTR_FRAME_SIZE (0x11)
(symbol, stack bytes); a kernel's .nv.info.<name> has EIATTR_MAX_THREADS (0x05) from its launch
bounds; its .nv.shared.<name> section's size is its static shared memory (plus the reserved 1 KiB
where the cubin has .nv.shared.reserved.0).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_CUBIN = 2
FLAG_COMPRESSED = 0x2000 | 0x8000  # LZ4, ZSTD
STO_CUDA_ENTRY = 0x10
EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
RESERVED_SMEM = 1024

REGS_PER_BLOCK = 65536
REG_UNIT = 256  # registers are allocated per warp in units of 256
SUB_PARTITIONS = 4
MAX_BLOCK = 1024
MAX_REGS_PER_THREAD = 255


class FormatError(Exception):
    pass


def max_threads(regs, bound=0):
    """The largest block (a multiple of 32, at most 1024) a kernel with `regs` registers per thread
    and launch bound `bound` (0: none) can launch."""
    if regs > MAX_REGS_PER_THREAD:
        return 0
    per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    best = 0
    for threads in range(32, MAX_BLOCK + 1, 32):
        warps = threads // 32
        if per_warp * (-(-warps // SUB_PARTITIONS) * SUB_PARTITIONS) <= REGS_PER_BLOCK:
            best = threads
    if bound:
        best = min(best, bound)
    return best


def block_fits(regs, bound, threads):
    """Why a block of `threads` threads cannot launch ('' when it can)."""
    if bound and threads > bound:
        return "more than its __launch_bounds__ maximum of %d threads" % bound
    if threads > max_threads(regs):
        return "%d registers per thread: at most %d threads per block fit in %d registers" % (
            regs, max_threads(regs), REGS_PER_BLOCK)
    return ""


def normalize(mangled):
    """The kernel's name with nvcc's per-file anonymous-namespace name (`<n>_GLOBAL__N__<hash>...`)
    replaced by the host compilers' (`12_GLOBAL__N_1`), so both builds' symbols compare equal."""
    out, i = [], 0
    for m in re.finditer(r"(\d+)_GLOBAL__N_", mangled):
        if m.start() < i:
            continue
        n = int(m.group(1))
        start = m.start(1) + len(m.group(1))
        out.append(mangled[i:m.start()])
        out.append("12_GLOBAL__N_1")
        i = start + n
    out.append(mangled[i:])
    return "".join(out)


def _elf_sections(data):
    """[(name, type, offset, size, link, info)] of a 64-bit little-endian ELF image."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise FormatError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    stroff = raw[shstrndx][4]
    out = []
    for name, typ, _flags, _addr, off, size, link, info, _align, _entsize in raw:
        end = data.index(b"\0", stroff + name)
        out.append((data[stroff + name:end].decode(), typ, off, size, link, info))
    return out


def _ar_members(data):
    """The member files of a Unix ar archive."""
    i, out = 8, []
    while i + 60 <= len(data):
        size = int(data[i + 48:i + 58].decode().strip())
        if data[i + 58:i + 60] != b"`\n":
            raise FormatError("bad ar member header at byte %d" % i)
        out.append(data[i + 60:i + 60 + size])
        i += 60 + size + (size & 1)
    return out


def fatbin_sections(data):
    """The .nv_fatbin section contents of an ELF file or of each ELF member of an ar archive."""
    if data[:8] == b"!<arch>\n":
        return [s for m in _ar_members(data) if m[:4] == b"\x7fELF" for s in fatbin_sections(m)]
    return [data[off:off + size] for name, typ, off, size, _l, _i in _elf_sections(data)
            if name == ".nv_fatbin" and typ != 8]  # 8: SHT_NOBITS


def cubins(fatbin):
    """[(sm, compressed, image)] of the cubin entries of the fatbin containers in a section."""
    out, off = [], 0
    while off + 16 <= len(fatbin):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", fatbin, off)
        if magic != FATBIN_MAGIC:
            if not any(fatbin[off:off + 16]):  # padding between containers
                off += 16
                continue
            raise FormatError("no fatbin container at byte %d" % off)
        p, end = off + hsize, off + hsize + fsize
        while p < end:
            kind, _ev, ehsize, size = struct.unpack_from("<HHIQ", fatbin, p)
            sm, = struct.unpack_from("<I", fatbin, p + 28)
            flags, = struct.unpack_from("<Q", fatbin, p + 40)
            inflated = struct.unpack_from("<Q", fatbin, p + 56)[0] if ehsize >= 64 else 0
            if kind == KIND_CUBIN:
                out.append((sm, bool(flags & FLAG_COMPRESSED) or inflated != 0, fatbin[p + ehsize:p + ehsize + size]))
            p += ehsize + size
        off = end
    return out


def _nv_info(data):
    """[(attribute, value bytes or int)] of a .nv.info section."""
    i, out = 0, []
    while i + 4 <= len(data):
        fmt, attr, val = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
        if fmt == 4:  # EIFMT_SVAL: a size, then that many bytes
            out.append((attr, data[i + 4:i + 4 + val]))
            i += 4 + val
        elif fmt in (1, 2, 3):  # no value, a byte, a half word: four bytes in all
            out.append((attr, val))
            i += 4
        else:
            raise FormatError("unknown .nv.info record format %d" % fmt)
    if i != len(data):
        raise FormatError(".nv.info ends inside a record")
    return out


def kernels(cubin):
    """{mangled name: {regs, smem, stack, bound}} of a cubin's kernels."""
    secs = _elf_sections(cubin)
    by_name = {s[0]: s for s in secs}
    symtab = next(s for s in secs if s[1] == 2)  # SHT_SYMTAB
    stroff = secs[symtab[4]][2]
    syms = []
    for k in range(symtab[3] // 24):
        name, _info, other, _shndx, _val, _size = struct.unpack_from("<IBBHQQ", cubin, symtab[2] + 24 * k)
        end = cubin.index(b"\0", stroff + name)
        syms.append((cubin[stroff + name:end].decode(), other))
    regs, stack = {}, {}
    if ".nv.info" in by_name:
        s = by_name[".nv.info"]
        for attr, val in _nv_info(cubin[s[2]:s[2] + s[3]]):
            if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and isinstance(val, bytes) and len(val) == 8:
                sym, v = struct.unpack("<II", val)
                (regs if attr == EIATTR_REGCOUNT else stack)[sym] = v
    reserved = RESERVED_SMEM if ".nv.shared.reserved.0" in by_name else 0
    out = {}
    for k, (name, other) in enumerate(syms):
        if not other & STO_CUDA_ENTRY or not name:
            continue
        if k not in regs:
            raise FormatError("kernel %s has no register count" % name)
        bound = 0
        info = by_name.get(".nv.info." + name)
        if info:
            for attr, val in _nv_info(cubin[info[2]:info[2] + info[3]]):
                if attr == EIATTR_MAX_THREADS and isinstance(val, bytes) and len(val) == 12:
                    x, y, z = struct.unpack("<III", val)
                    bound = x * y * z
        shared = by_name.get(".nv.shared." + name)
        smem = max(0, shared[3] - reserved) if shared else 0
        out[name] = {"regs": regs[k], "smem": smem, "stack": stack.get(k, 0), "bound": bound}
    return out


def read(paths, sm):
    """{mangled: record} over the files' sm_<sm> cubins; each record also names its file. Compressed
    cubins of that SM are an error (nothing could be checked); other SMs are skipped."""
    out, found = {}, 0
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        for section in fatbin_sections(data):
            for cubin_sm, compressed, image in cubins(section):
                if cubin_sm != sm:
                    continue
                if compressed:
                    raise FormatError("%s: the sm_%d cubin is compressed (build with -Xfatbin=-compress-all off)" % (
                        path, sm))
                found += 1
                for name, rec in kernels(image).items():
                    rec = dict(rec, file=path)
                    out.setdefault(name, rec)
    return out, found


def code(paths, sm):
    """{normalized kernel name: its .text bytes (the SASS)} over the files' sm_<sm> cubins."""
    out = {}
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        for section in fatbin_sections(data):
            for cubin_sm, compressed, image in cubins(section):
                if cubin_sm != sm or compressed:
                    continue
                for name, _typ, off, size, _l, _i in _elf_sections(image):
                    if name.startswith(".text."):
                        out[normalize(name[len(".text."):])] = image[off:off + size]
    return out


def compare_code(new, old):
    """(identical, changed, added, removed) kernel names between two code() maps."""
    same = sorted(k for k in new if k in old and new[k] == old[k])
    changed = sorted(k for k in new if k in old and new[k] != old[k])
    return same, changed, sorted(k for k in new if k not in old), sorted(k for k in old if k not in new)


def table(records):
    """{normalized name: merged record}: kernels whose names normalize alike (anonymous-namespace
    kernels of the same name and signature in two files) keep the tighter limits of each."""
    out = {}
    for name, rec in records.items():
        key = normalize(name)
        rec = dict(rec, max_threads=max_threads(rec["regs"], rec["bound"]))
        if key in out:
            old = out[key]
            bounds = [b for b in (old["bound"], rec["bound"]) if b]
            rec = dict(rec, regs=max(old["regs"], rec["regs"]), smem=max(old["smem"], rec["smem"]),
                       stack=max(old["stack"], rec["stack"]), bound=min(bounds) if bounds else 0)
            rec["max_threads"] = max_threads(rec["regs"], rec["bound"])
        out[key] = rec
    return out


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False)
    lines = res.stdout.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="object files, static libraries or executables")
    ap.add_argument("--arch", type=int, default=90, help="the SM whose cubins to read (default 90)")
    ap.add_argument("--filter", default="", help="only kernels whose demangled name contains this")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    ap.add_argument("--against", metavar="FILE", action="append", default=[],
                    help="another build's files (repeatable): say which kernels' SASS is byte for byte the same, "
                    "which changed, which are new and which are gone (with --filter: those kernels only)")
    ap.add_argument("--tsv", metavar="OUT", help="write the emulation's table (normalized name, regs, "
                    "smem, stack, bound, max_threads) to OUT")
    args = ap.parse_args(argv)
    try:
        records, found = read(args.files, args.arch)
    except (OSError, FormatError, ValueError, struct.error) as e:
        print("cubin_resources: %s" % e, file=sys.stderr)
        return 2
    if not found:
        print("cubin_resources: no sm_%d cubin in %s" % (args.arch, " ".join(args.files)), file=sys.stderr)
        return 2
    merged = table(records)
    if args.against:
        try:
            new, old = code(args.files, args.arch), code(args.against, args.arch)
        except (OSError, FormatError, ValueError, struct.error) as e:
            print("cubin_resources: %s" % e, file=sys.stderr)
            return 2
        keep = demangle(sorted(set(new) | set(old)))
        new = {k: v for k, v in new.items() if args.filter in keep[k]}
        old = {k: v for k, v in old.items() if args.filter in keep[k]}
        same, changed, added, removed = compare_code(new, old)
        for what, names in (("changed", changed), ("new", added), ("gone", removed)):
            for n in names:
                print("%-8s %s" % (what, keep[n]))
        print("%d kernels with the same code, %d changed, %d new, %d gone" % (
            len(same), len(changed), len(added), len(removed)))
        return 0
    if args.tsv:
        with open(args.tsv + ".tmp", "w") as f:
            f.write("# sm_%d kernels of %s: normalized mangled name, regs, smem, stack, bound, max_threads\n" % (
                args.arch, " ".join(args.files)))
            for key in sorted(merged):
                r = merged[key]
                f.write("%s\t%d\t%d\t%d\t%d\t%d\n" % (key, r["regs"], r["smem"], r["stack"], r["bound"],
                                                     r["max_threads"]))
        os.replace(args.tsv + ".tmp", args.tsv)
        print("cubin_resources: %d kernels from %d sm_%d cubins -> %s" % (len(merged), found, args.arch, args.tsv))
        return 0
    names = demangle(sorted(records))
    rows = [(names[n], n, r) for n, r in records.items() if args.filter in names[n]]
    rows.sort(key=lambda t: (-t[2]["regs"], t[0]))
    if args.json:
        json.dump({"schema": "slidefuse.cubin_resources/1", "arch": args.arch, "cubins": found,
                   "kernels": [dict(r, name=n, demangled=d, max_threads=max_threads(r["regs"], r["bound"]))
                               for d, n, r in rows]}, sys.stdout, indent=1)
        print()
        return 0
    print("%5s %6s %6s %6s %7s  %s" % ("regs", "smem", "stack", "bound", "max_thr", "kernel"))
    for d, _n, r in rows:
        print("%5d %6d %6d %6s %7d  %s" % (r["regs"], r["smem"], r["stack"], r["bound"] or "-",
                                          max_threads(r["regs"], r["bound"]), d))
    print("%d kernels, %d sm_%d cubins" % (len(rows), found, args.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
