#!/usr/bin/env python3
"""Which test each compute-sanitizer report belongs to (scripts/gpu_verify.sh sanitize).

The sanitizer stage runs the custom-kernel gpu tests under `compute-sanitizer --tool racecheck|synccheck`
through tools/suite_runner.py, whose --log holds everything the processes printed: gtest's
`[ RUN      ] Suite.Test` / `[       OK ] ...` lines and the sanitizer's `========= ` reports, in the
order they were written. A report is a line `========= <text>` whose text starts at once (its
continuation lines are indented further; the banner, the summaries and "Target application returned an
error" are not reports); it belongs to the test whose RUN line came last before it and whose end line
did not, or to no test ("outside any test": a process's start or end). gtest flushes each line as it
prints it and the sanitizer prints a kernel's reports when the kernel is checked, before the test ends.

Reads the runner's JSON (--json), adds to each test with reports `"sanitizer": {"errors": E,
"warnings": W, "reports": R, "first": [up to 3 report lines]}` and to the document `"sanitizer": {...}`
(tool, status, counts, the tests with reports, the tool's own summary lines), writes it back, and prints
the tool's row of sanitize.txt:

  racecheck  FAIL  rc 1; 60 tests: 59 passed, 1 failed, 0 skipped, 0 not run; 1 process (1: finished, then
  exit status 86 at exit); 2 errors, 0 warnings in 1 test (KernelsX.Y: 2), 0 outside any test; RACECHECK SUMMARY: ...

The status: ok (every test ran and passed, no error report), part (no failed test and no error report,
but the runner's limit left tests not run or interrupted one: nothing found in what ran, which is not a
clean bill), FAIL
(an error report, a failed test, a process that ended badly: the sanitizer's --error-exitcode at exit
is one, or no runner record).

usage: sanitizer_log.py --tool racecheck --log racecheck.log --json racecheck.json [--runner-rc RC]
exit status: 0 ok, 3 part, 1 FAIL, 2 unreadable input.

       sanitizer_log.py --table sanitize.md racecheck.json synccheck.json
the per-test record of the annotated JSONs for docs/gpu/: each tool's status and counts, every report by
test, the tests not run, and the tests that ran under the tool for the first time on a GPU (those its
--seen file does not name). Exit status 2 when a JSON cannot be read.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_runner  # noqa: E402

REPORT_RE = re.compile(r"^========= (\S.*)$")
RUN_RE = re.compile(r"^\[ RUN +\] ([A-Za-z_][\w/]*\.[\w/]+)")
END_RE = re.compile(r"^\[ +(OK|FAILED|SKIPPED) +\] ([A-Za-z_][\w/]*\.[\w/]+)")
NOT_REPORTS = ("COMPUTE-SANITIZER", "Target application returned an error")
OUTSIDE = "(outside any test)"


def kind(text):
    """warning (racecheck's "Warning: Race reported ...") or error (every other report: a race, a barrier
    error, an invalid access, "Program hit <a CUDA error> ... on CUDA API call to ...")."""
    return "warning" if text.startswith("Warning") else "error"


def attribute(lines):
    """({test or OUTSIDE: [report lines]}, [summary lines]) from the log's lines."""
    current = None
    reports, summaries = {}, []
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith("== suite_runner: process"):
            current = None
            continue
        m = RUN_RE.match(line)
        if m:
            current = m.group(1)
            continue
        m = END_RE.match(line)
        if m:
            if m.group(2) == current:
                current = None
            continue
        m = REPORT_RE.match(line)
        if not m:
            continue
        text = m.group(1)
        if "SUMMARY:" in text:
            summaries.append(text)
            continue
        if text.startswith(NOT_REPORTS):
            continue
        reports.setdefault(current or OUTSIDE, []).append(text)
    return reports, summaries


def table(docs):
    """Markdown of annotated runner JSONs [(path, doc)] (the --table mode)."""
    out = ["# Sanitizers over the custom-kernel gpu tests", "",
           "| tool | status | listed | passed | failed | skipped | not run | processes | errors | warnings "
           "| first run under it |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    reports, not_run, first = [], [], []
    for path, doc in docs:
        san = doc.get("sanitizer", {})
        tool = san.get("tool") or os.path.basename(path).split(".")[0]
        r = doc.get("runner", {})
        if "error" in r or "listed" not in r:
            out.append("| %s | %s | | | | | | | | | |" % (tool, "FAIL: " + r.get("error", "no runner record")))
            continue
        ran = [s["name"] + "." + t["name"] for s in doc.get("testsuites", []) for t in s.get("testsuite", [])
               if t.get("result") != "NOT_RUN"]
        new = ""
        seen_file = r.get("seen", {}).get("file")
        if seen_file and os.path.exists(seen_file):
            seen = suite_runner.seen_names(seen_file)
            fresh = [n for n in ran if n not in seen]
            new = str(len(fresh))
            if fresh:
                first.append("- %s (%d, against %s): %s" % (tool, len(fresh), seen_file, ", ".join(fresh)))
        out.append("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s |" % (
            tool, san.get("status", "?"), r["listed"], r["passed"], len(r["failed"]), r["skipped"], len(r["not_run"]),
            len(r["processes"]), san.get("errors", 0), san.get("warnings", 0), new))
        for s in doc.get("testsuites", []):
            for t in s.get("testsuite", []):
                info = t.get("sanitizer")
                if info:
                    reports.append("| %s | %s.%s | %d | %d | %s |" % (
                        tool, s["name"], t["name"], info["errors"], info["warnings"],
                        info["first"][0].replace("|", "\\|") if info["first"] else ""))
        outside = san.get("outside_tests")
        if outside:
            reports.append("| %s | %s | %d | %d | %s |" % (tool, OUTSIDE, outside["errors"], outside["warnings"],
                                                           outside["first"][0].replace("|", "\\|")))
        if r["not_run"]:
            not_run.append("- %s (%d; %s): %s" % (tool, len(r["not_run"]), r.get("not_run_reason") or "",
                                                  ", ".join(r["not_run"])))
        ends = [p["outcome"] for p in r["processes"] if p["outcome"] != "finished"]
        if ends:
            not_run.append("- %s: processes that ended early or badly: %s" % (tool, "; ".join(ends)))
    out += ["", "## Reports by test", ""]
    out += (["| tool | test | errors | warnings | first report |", "|---|---|---:|---:|---|"] + reports
            if reports else ["None."])
    out += ["", "## Not run, and processes that ended early", ""] + (not_run or ["None."])
    out += ["", "## First run under a sanitizer on a GPU", ""] + (first or ["None (or no --seen record to compare)."])
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool")
    ap.add_argument("--log", help="the runner's --log (the processes' output)")
    ap.add_argument("--json", help="the runner's JSON, annotated in place")
    ap.add_argument("--runner-rc", type=int, default=0, help="the runner's exit status (shown in the row)")
    ap.add_argument("--table", help="write the per-test record of the annotated JSONs given here (markdown)")
    ap.add_argument("records", nargs="*", help="with --table: the annotated JSONs")
    args = ap.parse_args(argv)
    if args.table:
        if not args.records:
            ap.error("--table needs the annotated JSONs")
        docs = []
        for path in args.records:
            try:
                with open(path) as f:
                    docs.append((path, json.load(f)))
            except (OSError, ValueError) as e:
                print("sanitizer_log: %s: %s" % (path, e), file=sys.stderr)
                return 2
        with open(args.table, "w") as f:
            f.write(table(docs))
        return 0
    if not (args.tool and args.log and args.json) or args.records:
        ap.error("give --tool, --log and --json (or --table with the JSONs)")
    try:
        with open(args.log, errors="replace") as f:
            reports, summaries = attribute(f)
        with open(args.json) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("%-10s FAIL  rc %d; no record: %s" % (args.tool, args.runner_rc, e))
        return 2
    errors = warnings = 0
    by_test = {}
    for name, texts in reports.items():
        e = sum(1 for t in texts if kind(t) == "error")
        w = len(texts) - e
        errors += e
        warnings += w
        by_test[name] = {"errors": e, "warnings": w, "reports": len(texts), "first": texts[:3]}
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            info = by_test.get(suite["name"] + "." + t["name"])
            if info:
                t["sanitizer"] = info
    outside = by_test.get(OUTSIDE, {"reports": 0})["reports"]
    in_tests = {n: v for n, v in by_test.items() if n != OUTSIDE}
    r = doc.get("runner", {})
    if "error" in r:
        status, counts = "FAIL", "no run: " + r["error"]
    else:
        counts = suite_runner.summary_line(doc)[len("suite_runner: "):]
        # A test the runner's limit (or its stopping) interrupted did not fail under the sanitizer: it was cut.
        entries = {s["name"] + "." + t["name"]: t for s in doc.get("testsuites", []) for t in s.get("testsuite", [])}
        cut = [n for n in r.get("failed", []) if entries.get(n, {}).get("interrupted") in ("limit", "stopped")]
        failed = [n for n in r.get("failed", []) if n not in cut]
        if cut:
            counts += " (of the failed, %d cut by the limit: %s)" % (len(cut), ", ".join(cut))
        if errors or failed or r.get("exit_problems"):
            status = "FAIL"
        elif r.get("not_run") or cut:
            status = "part"
        else:
            status = "ok"
    doc["sanitizer"] = {"tool": args.tool, "status": status, "errors": errors, "warnings": warnings,
                        "tests": sorted(in_tests), "outside_tests": by_test.get(OUTSIDE), "summaries": summaries}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=2)
    named = ", ".join("%s: %d" % (n, v["reports"]) for n, v in sorted(in_tests.items())[:5])
    more = " and %d more" % (len(in_tests) - 5) if len(in_tests) > 5 else ""
    print("%-10s %-5s rc %d; %s; %d error%s, %d warning%s in %d test%s%s, %d outside any test%s" % (
        args.tool, status, args.runner_rc, counts, errors, "" if errors == 1 else "s", warnings,
        "" if warnings == 1 else "s", len(in_tests), "" if len(in_tests) == 1 else "s",
        " (" + named + more + ")" if in_tests else "", outside,
        "; " + summaries[-1] + (" (the last of %d processes' summaries)" % len(summaries) if len(summaries) > 1 else "")
        if summaries else "; no summary"))
    return {"ok": 0, "part": 3, "FAIL": 1}[status]


if __name__ == "__main__":
    sys.exit(main())
