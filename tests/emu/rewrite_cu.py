#!/usr/bin/env python3
"""Rewrites one CUDA source (.cu / .cuh) into C++ for the CPU emulation build (docs/EMULATION.md).

Two mechanical rewrites, each kept on the lines it came from so compiler and sanitizer reports
point at the original file and line (the output starts with `#line 1 "<source>"`):

  kernel<T><<<grid, block, smem, stream>>>(a, b)
      -> ::sfemu::launch("kernel<T>", ::sfemu::config(grid, block, smem, stream), kernel<T>, a, b)
  __shared__ __align__(16) float xs[N], ys[M];
      -> one block-private, poisoned allocation per name from ::sfemu::shared<float[N]>(tag, 16)

Quoted includes of other .cuh files are redirected to their rewritten copies under the output root.
Anything the script does not understand (a `__shared__` it cannot parse, `extern __shared__`, an
unbalanced launch) is an error naming file and line: the emulation never guesses.

usage: rewrite_cu.py SOURCE_ROOT OUTPUT_ROOT INPUT
writes OUTPUT_ROOT/<INPUT relative to SOURCE_ROOT>.cpp (.cu) or .h (.cuh)
"""
import os
import re
import sys


def mask_comments_and_strings(src):
    """src with every comment and string/char literal replaced by spaces (newlines kept)."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


class RewriteError(Exception):
    pass


def match_close(text, pos, open_c, close_c, step):
    """Index of the bracket matching text[pos] walking in direction step (+1 / -1)."""
    depth = 0
    i = pos
    while 0 <= i < len(text):
        if text[i] == open_c:
            depth += 1
        elif text[i] == close_c:
            depth -= 1
            if depth == 0:
                return i
        i += step
    raise RewriteError("unbalanced '%s'" % text[pos])


def split_top_level(s):
    """Splits s on commas outside (), [], <> and {}."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def rewrite_launches(src, masked, path):
    edits = []  # (start, end, replacement)
    for m in re.finditer(r"<<<", masked):
        start_cfg = m.end()
        end_cfg = masked.find(">>>", start_cfg)
        if end_cfg < 0:
            raise RewriteError("%s:%d: '<<<' without '>>>'" % (path, line_of(src, m.start())))
        # The kernel expression: an identifier, optionally qualified, optionally with <template args>.
        k = m.start() - 1
        while k >= 0 and masked[k].isspace():
            k -= 1
        if masked[k] == ">":
            k = match_close(masked, k, ">", "<", -1) - 1
        while k >= 0 and (masked[k].isalnum() or masked[k] in "_:"):
            k -= 1
        kstart = k + 1
        kernel = src[kstart:m.start()].strip()
        if not re.match(r"^[A-Za-z_][\w:]*(\s*<.*>)?$", kernel, re.S):
            raise RewriteError("%s:%d: cannot parse the kernel of this launch" % (path, line_of(src, m.start())))
        p = end_cfg + 3
        while masked[p].isspace():
            p += 1
        if masked[p] != "(":
            raise RewriteError("%s:%d: launch without an argument list" % (path, line_of(src, m.start())))
        close = match_close(masked, p, "(", ")", 1)
        cfg = src[start_cfg:end_cfg]
        args = src[p + 1:close]
        name = " ".join(kernel.split())
        # The text between the kernel and '<<<' (a line break in the source) is kept as is.
        gap = src[kstart + len(src[kstart:m.start()].rstrip()):m.start()]
        call = '::sfemu::launch("%s", ::sfemu::config(%s),%s%s%s)' % (
            name, cfg, gap if "\n" in gap else " ", kernel, ", " + args if args.strip() else "")
        edits.append((kstart, close + 1, call))
    return edits


SHARED_RE = re.compile(r"\b__shared__\b")
DECL_RE = re.compile(r"^\s*([A-Za-z_]\w*)\s*((?:\[[^\]]+\]\s*)*)$", re.S)


def rewrite_shared(src, masked, path):
    edits = []
    for m in SHARED_RE.finditer(masked):
        where = "%s:%d" % (path, line_of(src, m.start()))
        before = masked[max(0, m.start() - 16):m.start()]
        if re.search(r"\bextern\s*$", before):
            raise RewriteError("%s: extern (dynamic) __shared__ is not emulated" % where)
        end = masked.find(";", m.end())
        stmt = src[m.end():end]
        align = "0"
        am = re.match(r"\s*__align__\s*\(\s*([^)]+)\)", stmt)
        if am:
            align = am.group(1).strip()
            stmt = stmt[am.end():]
        tm = re.match(r"\s*((?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^;]*?>)?)\s+", stmt)
        if not tm:
            raise RewriteError("%s: cannot parse the type of this __shared__ declaration" % where)
        typ = tm.group(1)
        out = []
        for decl in split_top_level(stmt[tm.end():]):
            dm = DECL_RE.match(decl)
            if not dm:
                raise RewriteError("%s: cannot parse '__shared__ %s %s'" % (where, typ, decl.strip()))
            name, dims = dm.group(1), "".join(dm.group(2).split())
            tag = "sfemu_tag_" + name
            full = "%s%s" % (typ, dims)
            ref = "%s (&%s)%s" % (typ, name, dims) if dims else "%s& %s" % (typ, name)
            out.append("static const char %s = 0; %s = ::sfemu::shared<%s>(&%s, %s)" % (tag, ref, full, tag, align))
        # Newlines inside the declaration are kept so the following lines keep their numbers.
        edits.append((m.start(), end, "; ".join(out) + "\n" * stmt.count("\n")))
    return edits


def rewrite_includes(src, masked, out_root):
    edits = []
    for m in re.finditer(r'#\s*include\s*"([^"]+\.cuh)"', src):
        if masked[m.start()] != "#":
            continue
        target = os.path.join(out_root, m.group(1)) + ".h"
        edits.append((m.start(), m.end(), '#include "%s"' % target))
    return edits


def rewrite(src, path, out_root):
    masked = mask_comments_and_strings(src)
    edits = rewrite_launches(src, masked, path) + rewrite_shared(src, masked, path) + \
        rewrite_includes(src, masked, out_root)
    edits.sort()
    for a, b in zip(edits, edits[1:]):
        if a[1] > b[0]:
            raise RewriteError("%s:%d: overlapping rewrites" % (path, line_of(src, b[0])))
    out = []
    last = 0
    for start, end, text in edits:
        out.append(src[last:start])
        out.append(text)
        last = end
    out.append(src[last:])
    return "".join(out)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src_root, out_root, inp = sys.argv[1:]
    rel = os.path.relpath(inp, src_root)
    outp = os.path.join(out_root, rel) + (".h" if inp.endswith(".cuh") else ".cpp")
    with open(inp, encoding="utf-8") as f:
        src = f.read()
    try:
        body = rewrite(src, rel, out_root)
    except RewriteError as e:
        sys.exit("rewrite_cu.py: error: %s" % e)
    head = '// Generated by tests/emu/rewrite_cu.py from %s: do not edit.\n' % rel
    if inp.endswith(".cuh"):
        head += "#pragma once\n"
    head += '#include "tests/emu/cuda_emu.h"\n#line 1 "%s"\n' % os.path.abspath(inp)
    os.makedirs(os.path.dirname(outp), exist_ok=True)
    tmp = outp + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(head + body)
    os.replace(tmp, outp)


if __name__ == "__main__":
    main()
