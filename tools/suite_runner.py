#!/usr/bin/env python3
"""Runs a gtest suite so that one bad test costs only itself (docs/GPU_VERIFICATION.md, "A suite that
survives its failures").

A never-run CUDA kernel that stores to an illegal address loses the process's CUDA context: every later
CUDA call fails with the same sticky error, so every later test of the process fails too, and a crash
or a hang ends the process before gtest writes its JSON. This runner lists the suite, runs it with
SF_TEST_RECORD set (tests/support/test_record.h: one JSON line per test start and end, flushed at once,
and exit status 3 right after a test that lost the context), and when the process ends early it records
the culprit (the test that lost the context, crashed, or ran over --test-limit) as failed and runs the
tests left in a new process, until all have run, --limit is spent or --max-processes have run. The
result is one gtest-style JSON (--json): every listed test with its result (COMPLETED, SKIPPED, or for a
test that never ran, NOT_RUN), plus a "runner" object with each process's outcome.

Ended by SIGTERM (an outer `timeout`), the runner ends the test process, records the test it was in as
interrupted and the rest as not run, and still writes its JSON.

--seen FILE names the tests that have run before (a log with gtest's `[ RUN      ] Suite.Test` lines, a
gtest or runner JSON, or one Suite.Test per line): the listed tests it does not name run first, in
processes of their own, then the others. So when the limit cuts a run, what it leaves is what ran before
(the sanitizer stage: the kernels no sanitizer has seen on a GPU go first).

A binary without the record (built before it existed) still works: a process that finishes writes
gtest's JSON, which is then the source of its results.

usage: suite_runner.py --json OUT [--filter F] [--limit S] [--test-limit S] [--max-processes N]
                       [--seen FILE] [--log FILE] [--work DIR] -- COMMAND [ARGS...]
COMMAND runs the gtest binary (e.g. `scripts/gpu_test.sh build` or the binary itself); the runner
appends --gtest_list_tests / --gtest_filter / --gtest_output to it.
exit status: 0 when every listed test ran and none failed, 1 otherwise, 2 when the suite cannot be listed.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SUITE_RE = re.compile(r"^([A-Za-z_][\w/]*)\.(\s+#.*)?$")
TEST_RE = re.compile(r"^  ([\w/]+)(\s+#.*)?$")


def parse_list(text):
    """Test names (Suite.Test) in gtest's --gtest_list_tests order; other lines (a wrapper's) ignored."""
    names, suite = [], None
    for line in text.splitlines():
        m = SUITE_RE.match(line)
        if m:
            suite = m.group(1)
            continue
        m = TEST_RE.match(line)
        if m and suite:
            names.append(suite + "." + m.group(1))
        elif line and not line.startswith(" "):
            suite = None
    return names


def read_records(path):
    """The record's events in order; a torn last line (the process died while writing it) is dropped."""
    events = []
    try:
        with open(path, errors="replace") as f:  # a failure message may hold any bytes
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return events


RUN_RE = re.compile(r"\[ RUN +\] ([A-Za-z_][\w/]*\.[\w/]+)")
NAME_RE = re.compile(r"^([A-Za-z_][\w/]*\.[\w/]+)$")


def seen_names(path):
    """The tests FILE names as having run: a gtest (or runner) JSON's entries that ran, else the
    `[ RUN      ] Suite.Test` lines of a log, else lines holding one Suite.Test each. Raises OSError."""
    with open(path, errors="replace") as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        return {s["name"] + "." + t["name"] for s in doc.get("testsuites", []) for t in s.get("testsuite", [])
                if t.get("result") != "NOT_RUN" and t.get("status", "RUN") == "RUN"}
    ran = set(RUN_RE.findall(text))
    if ran:
        return ran
    return {m.group(1) for m in (NAME_RE.match(line.strip()) for line in text.splitlines()) if m}


def gtest_entries(path):
    """{Suite.Test: gtest's own entry} from a gtest JSON file, {} when absent or unreadable."""
    try:
        with open(path, errors="replace") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            out[suite["name"] + "." + t["name"]] = t
    return out


def kill_group(proc):
    """Ends the process and everything it started (a wrapper script's children too)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


_children = []  # the processes running now, ended with the runner when it is ended (timeout's SIGTERM)
_stopped = []  # the signal that stopped the runner: it then records what ran and writes its JSON


def _on_term(signum, _frame):
    _stopped.append(signum)
    for proc in list(_children):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def describe_exit(rc):
    return "signal %d" % -rc if rc < 0 else "exit status %d" % rc


class Process:
    """One run of the binary over `tests` (None: the original filter) with the record."""

    def __init__(self, index, cmd, filt, work, log, env):
        self.index = index
        self.record = os.path.join(work, "record_%d.jsonl" % index)
        self.gtest_json = os.path.join(work, "gtest_%d.json" % index)
        for p in (self.record, self.gtest_json):
            if os.path.exists(p):
                os.remove(p)
        env = dict(env, SF_TEST_RECORD=self.record)
        self.argv = cmd + ["--gtest_filter=" + filt, "--gtest_output=json:" + self.gtest_json]
        self.filter = filt
        log.write("== suite_runner: process %d: %d-character filter\n" % (index, len(filt)))
        log.flush()
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        _children.append(self.proc)
        self.killed = None  # "test-limit" or "limit" when the runner ended it

    def watch(self, deadline, test_limit):
        """Waits for the process; ends it at the deadline or when one test runs longer than test_limit."""
        current, since, seen = None, None, 0
        self.test_since = self.t0  # when the last test that started began (the culprit's time, if it is one)
        while self.proc.poll() is None:
            events = read_records(self.record)
            for e in events[seen:]:
                if e.get("event") == "start":
                    current, since = e.get("test"), time.monotonic()
                    self.test_since = since
                elif e.get("event") == "end":
                    current = None
            seen = len(events)
            now = time.monotonic()
            if _stopped:
                self.killed = "stopped"
            elif now >= deadline:
                self.killed = "limit"
            elif test_limit and current is not None and now - since > test_limit:
                self.killed = "test-limit"
            if self.killed:
                kill_group(self.proc)
                break
            time.sleep(0.1)
        self.proc.wait()
        if _stopped and not self.killed:  # the signal handler ended it between two looks
            self.killed = "stopped"
        self.seconds = time.monotonic() - self.t0
        return self.proc.returncode


def entry(name, result, ms, failures, extra=None):
    suite, test = name.split(".", 1)
    e = {"name": test, "classname": suite, "status": "RUN" if result != "NOT_RUN" else "NOTRUN",
         "result": result, "time": "%.3fs" % (ms / 1000.0),
         "failures": [{"failure": f, "type": ""} for f in failures]}
    if extra:
        e.update(extra)
    return e


def run(args, cmd):
    log = open(args.log, "a") if args.log else sys.stdout
    work = args.work or tempfile.mkdtemp(prefix="suite_runner.")
    os.makedirs(work, exist_ok=True)
    t_start = time.monotonic()
    deadline = t_start + args.limit
    env = dict(os.environ)

    lister = subprocess.Popen(cmd + ["--gtest_list_tests", "--gtest_filter=" + args.filter], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    _children.append(lister)
    try:
        text, _ = lister.communicate(timeout=max(1.0, min(120.0, args.limit)))
        listed = parse_list(text)
        if lister.returncode != 0 or not listed:
            log.write(text)
            return None, lister.returncode or 2, "the suite could not be listed (%s, %d tests)" % (
                describe_exit(lister.returncode), len(listed))
    except subprocess.TimeoutExpired:
        kill_group(lister)
        return None, 124, "listing the suite took longer than %g s" % max(1.0, min(120.0, args.limit))
    if _stopped:
        return None, 128 + _stopped[0], "stopped by signal %d while listing the suite" % _stopped[0]

    # The groups run in order, each in processes of its own: the tests --seen does not name, then the others.
    groups, unseen = [listed], None
    if args.seen:
        try:
            seen = seen_names(args.seen)
        except OSError as e:
            return None, 2, "--seen %s: %s" % (args.seen, e.strerror or e)
        unseen = [t for t in listed if t not in seen]
        groups = [g for g in (unseen, [t for t in listed if t in seen]) if g]
        log.write("== suite_runner: %d of the %d tests not in %s run first\n" % (len(unseen), len(listed), args.seen))
    results = {}  # name -> gtest-style entry
    failed = set()
    processes = []
    pending = list(listed)  # every test without a result yet
    group = 0
    todo = list(groups[0])  # the current group's tests without a result yet
    if len(groups) == 1:
        filt, filt_said = args.filter, args.filter
    else:
        filt, filt_said = ":".join(todo), "the %d tests not in --seen" % len(todo)
    stop = None  # why tests are left, if any are
    exit_problems = []  # processes that ran all their tests and then crashed or exited oddly
    while pending:
        if _stopped:
            stop = "the runner was stopped (signal %d)" % _stopped[0]
            break
        if time.monotonic() >= deadline:
            stop = "the suite's limit of %g s ran out" % args.limit
            break
        if len(processes) >= args.max_processes:
            stop = "%d processes ran (--max-processes)" % len(processes)
            break
        p = Process(len(processes) + 1, cmd, filt, work, log, env)
        rc = p.watch(deadline, args.test_limit)
        events = read_records(p.record)
        own = gtest_entries(p.gtest_json)
        ended, started, lost, finished = {}, [], None, False
        for e in events:
            if e.get("event") == "start":
                started.append(e["test"])
            elif e.get("event") == "end":
                ended[e["test"]] = e
                if e.get("context_lost"):
                    lost = e["test"]
            elif e.get("event") == "program_end":
                finished = True
        if not events and own and rc in (0, 1):
            finished = True  # a binary without the record: gtest's JSON holds the results
        for name, e in ended.items():
            if name in own and not e.get("context_lost"):
                results[name] = own[name]
            else:
                results[name] = entry(name, {"passed": "COMPLETED", "failed": "COMPLETED",
                                             "skipped": "SKIPPED"}[e["result"]], e.get("ms", 0),
                                      e.get("failures", []),
                                      {"context_lost": e["context_lost"]} if e.get("context_lost") else None)
            if e["result"] == "failed":
                failed.add(name)
        if not events:
            for name, e in own.items():
                if name in pending:
                    results[name] = e
                    if e.get("failures"):
                        failed.add(name)
        culprit = next((t for t in reversed(started) if t not in ended), None)
        if finished and rc not in (0, 1):  # every test ended, then the process did not exit cleanly
            outcome = "finished, then %s at exit" % describe_exit(rc)
            exit_problems.append(outcome)
        elif finished:
            outcome = "finished"
        elif lost:
            outcome = "context lost in " + lost
        elif culprit and p.killed == "test-limit":
            outcome = "over the per-test limit (%g s) in %s" % (args.test_limit, culprit)
        elif culprit and p.killed == "stopped":
            outcome = "stopped (signal %d) in %s" % (_stopped[0], culprit)
        elif culprit and p.killed == "limit":
            outcome = "cut at the suite's limit in %s" % culprit
        elif p.killed == "limit":
            outcome = "cut at the suite's limit before a test started"
        elif p.killed == "stopped":
            outcome = "stopped (signal %d) before a test started" % _stopped[0]
        elif culprit:
            outcome = "died in %s (%s)" % (culprit, describe_exit(rc))
        else:
            outcome = "died outside any test (%s)" % describe_exit(rc)
        if culprit and not finished:
            why = {"test-limit": "ran longer than the per-test limit of %g s and was stopped" % (args.test_limit or 0),
                   "limit": "was still running when the suite's limit of %g s ran out" % args.limit,
                   "stopped": "was still running when the runner was stopped (signal %d)" % (_stopped or [0])[0]}.get(
                       p.killed, "the process died in this test (%s)" % describe_exit(rc))
            results[culprit] = entry(culprit, "COMPLETED", (p.t0 + p.seconds - p.test_since) * 1000.0, [why],
                                     {"interrupted": p.killed or "crashed"})
            failed.add(culprit)
        before = len(pending)
        pending = [t for t in pending if t not in results]
        todo = [t for t in todo if t not in results]
        processes.append({"process": p.index, "rc": rc, "outcome": outcome, "tests_ended": len(ended),
                          "seconds": round(p.seconds, 1), "filter": filt_said})
        log.write("== suite_runner: process %d: %s; %d tests ended, %d left\n" % (p.index, outcome, len(ended),
                                                                               len(pending)))
        log.flush()
        if finished and todo:
            stop = "the process finished without running them (a filter the listing does not share?)"
            break
        if p.killed == "limit":
            stop = "the suite's limit of %g s ran out" % args.limit
            break
        if _stopped:
            stop = "the runner was stopped (signal %d)" % _stopped[0]
            break
        if len(pending) == before:
            stop = "the last process (%s) ran none of them" % outcome
            break
        if not todo:  # the group is done: the next one with tests left
            while not todo and group + 1 < len(groups):
                group += 1
                todo = [t for t in groups[group] if t not in results]
            if not todo:
                break
            filt, filt_said = ":".join(todo), "the %d tests --seen names" % len(todo)
        else:
            filt, filt_said = ":".join(todo), "the %d tests left" % len(todo)

    reason = stop or ""
    for name in pending:
        results[name] = entry(name, "NOT_RUN", 0, [], {"not_run": reason})

    suites = {}
    for name in listed:
        suites.setdefault(name.split(".", 1)[0], []).append(results[name])
    doc = {"name": "AllTests", "tests": len(listed), "failures": len(failed), "disabled": 0, "errors": 0,
           "not_run": len(pending), "time": "%.3fs" % (time.monotonic() - t_start),
           "testsuites": [{"name": s, "tests": len(v), "failures": sum(1 for e in v if e.get("failures")),
                           "testsuite": v} for s, v in suites.items()]}
    skipped = sum(1 for n in listed if results[n].get("result") == "SKIPPED")
    doc["runner"] = {"listed": len(listed), "passed": len(listed) - len(failed) - skipped - len(pending),
                     "failed": sorted(failed), "skipped": skipped, "not_run": pending,
                     "not_run_reason": reason if pending else None, "processes": processes,
                     "exit_problems": exit_problems}
    if unseen is not None:
        doc["runner"]["seen"] = {"file": args.seen, "unseen_first": len(unseen)}
    rc = 0 if not failed and not pending and not exit_problems else 1
    return doc, rc, None


def summary_line(doc):
    r = doc["runner"]
    ends = "; ".join("%d: %s" % (p["process"], p["outcome"]) for p in r["processes"] if p["outcome"] != "finished")
    return ("suite_runner: %d tests: %d passed, %d failed, %d skipped, %d not run; %d process%s%s" %
            (r["listed"], r["passed"], len(r["failed"]), r["skipped"], len(r["not_run"]), len(r["processes"]),
             "" if len(r["processes"]) == 1 else "es", " (" + ends + ")" if ends else ""))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("suite_runner: the command to run follows '--'", file=sys.stderr)
        return 2
    i = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="the merged gtest-style JSON")
    ap.add_argument("--filter", default="*", help="gtest filter of the whole run (default: every test)")
    ap.add_argument("--limit", type=float, default=3600.0, help="seconds for the whole run, listing included")
    ap.add_argument("--test-limit", type=float, default=None, help="seconds one test may run before it is stopped")
    ap.add_argument("--max-processes", type=int, default=20, help="processes at most (one plus the restarts)")
    ap.add_argument("--seen", help="a log, JSON or list naming the tests that ran before: the others run first")
    ap.add_argument("--log", help="append the processes' output here (default: stdout)")
    ap.add_argument("--work", help="folder for the records (default: a new temporary one)")
    args = ap.parse_args(argv[:i])
    cmd = argv[i + 1:]
    if not cmd:
        ap.error("no command after '--'")
    if args.limit <= 0 or (args.test_limit is not None and args.test_limit <= 0) or args.max_processes < 1:
        ap.error("--limit and --test-limit must be positive, --max-processes at least 1")
    signal.signal(signal.SIGTERM, _on_term)
    doc, rc, error = run(args, cmd)
    if doc is None:
        doc = {"name": "AllTests", "tests": 0, "failures": 0, "disabled": 0, "errors": 1, "testsuites": [],
               "runner": {"error": error}}
        line = "suite_runner: " + error
    else:
        line = summary_line(doc)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=2)
    print(line)
    if args.log:
        with open(args.log, "a") as f:
            f.write(line + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
