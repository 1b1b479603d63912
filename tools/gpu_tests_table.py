#!/usr/bin/env python3
"""The per-test record of a GPU run as Markdown, for docs/gpu/<date>-<gpu>/ and docs/GPU_VERIFICATION.md.

Reads the gpu suite's JSON as scripts/gpu_verify.sh writes it (gpu_tests.json: tools/suite_runner.py's
records of the two parts merged; a plain gtest JSON works too) and, with --list, the suite's test list
(`sf_gpu_tests --gtest_list_tests`, which runs without a GPU), and writes: the counts, each failed test
with its first failure line, the tests not run and why, the processes that ended early, a per-suite
table, and every listed test the run does not hold (so "never run on a GPU" is computed, not
remembered). --since JSON (an earlier run's gpu_tests.json) adds which tests ran for the first time.

usage: gpu_tests_table.py GPU_TESTS_JSON [--list LIST_TXT] [--since EARLIER_JSON ...] [--env ENV_TXT]
                          [--title TEXT] [--out FILE]
exit status 0 (the table is a record, not a verdict), 2 on unreadable input.
"""
import argparse
import json
import re
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from suite_runner import parse_list  # noqa: E402


def load_results(path):
    """{Suite.Test: (state, first failure line or reason)} and the document."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = suite["name"] + "." + t["name"]
            failures = [f.get("failure", "") for f in t.get("failures", []) or []]
            if t.get("result") == "NOT_RUN":
                out[name] = ("not run", t.get("not_run", ""))
            elif failures:
                # gtest's failure text starts with "file:line" then the message: keep the message's first line.
                lines = [ln for ln in failures[0].splitlines() if ln.strip()]
                first = lines[1] if len(lines) > 1 and re.match(r"^\S+:\d+$", lines[0]) else (lines or [""])[0]
                out[name] = ("failed", first.strip())
            elif t.get("result") == "SKIPPED":
                out[name] = ("skipped", "")
            else:
                out[name] = ("passed", t.get("time", ""))
    return out, doc


def env_fields(path):
    """GPU, driver, commit and cuDNN lines from gpu_verify.sh's env.txt."""
    fields = {}
    try:
        text = open(path).read()
    except OSError:
        return fields
    m = re.search(r"^commit: (\S+)", text, re.M)
    if m:
        fields["commit"] = m.group(1)
    m = re.search(r"^== gpu\n[^\n]*\n([^\n]+)", text, re.M)
    if m:
        fields["gpu"] = m.group(1).strip()
    m = re.search(r"^cudnn runtime: (?:.*CUDA backend: )?(.+)$", text, re.M)
    if m:
        fields["cudnn"] = m.group(1).strip()
    return fields


def render(results, doc, listed=None, earlier=None, env=None, title=None):
    n = {s: sum(1 for v in results.values() if v[0] == s) for s in ("passed", "failed", "skipped", "not run")}
    lines = ["# " + (title or "GPU suite record"), ""]
    if env:
        lines += ["- " + ", ".join("%s: %s" % (k, env[k]) for k in ("gpu", "commit", "cudnn") if k in env), ""]
    lines.append("**%d tests: %d passed, %d failed, %d skipped, %d not run.**" % (
        len(results), n["passed"], n["failed"], n["skipped"], n["not run"]))
    ends = []
    for part in doc.get("parts", []) or [{"runner": doc.get("runner", {})}]:
        for p in (part.get("runner") or {}).get("processes", []):
            if p["outcome"] != "finished":
                ends.append(p["outcome"])
    if ends:
        lines += ["", "Processes that ended early (tools/suite_runner.py ran the tests left in a new one):", ""]
        lines += ["- " + e for e in ends]
    failed = sorted(k for k, v in results.items() if v[0] == "failed")
    if failed:
        lines += ["", "## Failed", "", "| test | first failure line |", "|---|---|"]
        lines += ["| `%s` | %s |" % (k, results[k][1].replace("|", "\\|")[:200]) for k in failed]
        lines += ["", "Rerun them (with the not-run ones) once fixed: `SF_GTEST_FILTER='%s' scripts/gpu_verify.sh tests "
                  ".gpu`" % ":".join(failed + sorted(k for k, v in results.items() if v[0] == "not run"))]
    not_run = sorted(k for k, v in results.items() if v[0] == "not run")
    if not_run:
        lines += ["", "## Not run", ""]
        lines += ["- `%s`: %s" % (k, results[k][1]) for k in not_run]
    suites = {}
    for k, (state, _) in results.items():
        suites.setdefault(k.split(".", 1)[0], {"passed": 0, "failed": 0, "skipped": 0, "not run": 0})[state] += 1
    lines += ["", "## By suite", "", "| suite | passed | failed | skipped | not run |", "|---|---:|---:|---:|---:|"]
    for s in sorted(suites):
        c = suites[s]
        lines.append("| %s | %d | %d | %d | %d |" % (s, c["passed"], c["failed"], c["skipped"], c["not run"]))
    timed = sorted(((float(str(v[1]).rstrip("s")), k) for k, v in results.items()
                    if v[0] == "passed" and re.match(r"^[0-9.]+s$", str(v[1]))), reverse=True)
    if timed:
        lines += ["", "## Slowest passed tests (what sizes the suite's limits)", "", "| test | seconds |", "|---|---:|"]
        lines += ["| `%s` | %.1f |" % (k, sec) for sec, k in timed[:10]]
        lines.append("| all %d passed tests | %.1f |" % (len(timed), sum(sec for sec, _ in timed)))
    if earlier is not None:
        ran_before = {k for k, v in earlier.items() if v[0] in ("passed", "failed", "skipped")}
        first = sorted(k for k, v in results.items() if v[0] in ("passed", "failed") and k not in ran_before)
        lines += ["", "## First run on a GPU (%d)" % len(first), ""]
        lines += ["- `%s`: %s" % (k, results[k][0]) for k in first] or ["(none)"]
    if listed is not None:
        never = [k for k in listed if results.get(k, ("absent",))[0] not in ("passed", "failed", "skipped")]
        lines += ["", "## Listed but not run here (%d of %d)" % (len(never), len(listed)), ""]
        lines += ["- `%s`" % k for k in never] or ["(none: every listed test ran)"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--list", help="the suite's --gtest_list_tests output")
    ap.add_argument("--since", action="append", default=[], help="an earlier run's gpu_tests.json (repeatable)")
    ap.add_argument("--env", help="gpu_verify.sh's env.txt")
    ap.add_argument("--title")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    try:
        results, doc = load_results(args.json)
        listed = parse_list(open(args.list).read()) if args.list else None
        earlier = None
        for path in args.since:
            earlier = dict(earlier or {}, **load_results(path)[0])
    except (OSError, ValueError, KeyError) as e:
        print("gpu_tests_table: %s" % e, file=sys.stderr)
        return 2
    text = render(results, doc, listed, earlier, env_fields(args.env) if args.env else None, args.title)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
