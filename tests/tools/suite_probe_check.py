#!/usr/bin/env python3
"""Checks tools/suite_runner.py end to end on the probe binary (tests/probe/suite_probe_test.cu).

--all (the emulated probe, ctest emu.suite_runner_probe): a lost context, a crash, a hang and a plain
failure, each between passing tests. Expected: the four bad tests failed with their own reason, every
passing test passed, four processes (the last one finished).
--gpu (a real GPU, gpu_verify.sh's `tests` stage): the first three tests, a real kernel's illegal address
between two passing ones. Expected: the middle one failed with the context lost, the third passed in a
second process.

usage: suite_probe_check.py PROBE_BINARY (--all | --gpu) [--json OUT] [--log FILE]
exit status 0 when the outcome is the expected one; the mismatches are printed otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "..", "..", "tools", "suite_runner.py")

EXPECTED_ALL = {
    "SuiteProbe.APasses": ("passed", None),
    "SuiteProbe.BLosesTheContext": ("failed", "the CUDA context is lost after this test (cudaErrorIllegalAddress"),
    "SuiteProbe.CPassesInAFreshProcess": ("passed", None),
    "SuiteProbe.DCrashes": ("failed", "the process died in this test (signal 6)"),
    "SuiteProbe.EPasses": ("passed", None),
    "SuiteProbe.FHangs": ("failed", "ran longer than the per-test limit of 5 s"),
    "SuiteProbe.GFailsAndTheProcessGoesOn": ("failed", "a plain failure: the process goes on"),
    "SuiteProbe.HPasses": ("passed", None),
}
OUTCOMES_ALL = ["context lost in SuiteProbe.BLosesTheContext", "died in SuiteProbe.DCrashes (signal 6)",
                "over the per-test limit (5 s) in SuiteProbe.FHangs", "finished"]
GPU_TESTS = ["SuiteProbe.APasses", "SuiteProbe.BLosesTheContext", "SuiteProbe.CPassesInAFreshProcess"]


def check(doc, expected, outcomes):
    """The mismatches between the runner's JSON and the expected results, as lines."""
    bad = []
    got = {}
    for suite in doc.get("testsuites", []):
        for t in suite["testsuite"]:
            got[suite["name"] + "." + t["name"]] = t
    if sorted(got) != sorted(expected):
        bad.append("tests: got %s, expected %s" % (sorted(got), sorted(expected)))
    for name, (result, message) in expected.items():
        t = got.get(name)
        if t is None:
            continue
        failures = [f["failure"] for f in t.get("failures", [])]
        state = "failed" if failures else {"SKIPPED": "skipped", "NOT_RUN": "not run"}.get(t.get("result"), "passed")
        if state != result:
            bad.append("%s: %s, expected %s (%s)" % (name, state, result, failures))
        elif message and not any(message in f for f in failures):
            bad.append("%s: no failure mentions %r: %s" % (name, message, failures))
    got_outcomes = [p["outcome"] for p in doc.get("runner", {}).get("processes", [])]
    if got_outcomes != outcomes:
        bad.append("processes: %s, expected %s" % (got_outcomes, outcomes))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--all", action="store_true")
    mode.add_argument("--gpu", action="store_true")
    ap.add_argument("--json", help="keep the runner's JSON here")
    ap.add_argument("--log", help="keep the runner's log here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="suite_probe.")
    out = args.json or os.path.join(work, "probe.json")
    log = args.log or os.path.join(work, "probe.log")
    if args.all:
        filt, expected, outcomes = "SuiteProbe.*", EXPECTED_ALL, OUTCOMES_ALL
    else:
        filt = ":".join(GPU_TESTS)
        expected = {n: EXPECTED_ALL[n] for n in GPU_TESTS}
        # Whichever sticky error the GPU reports for the store (an illegal address, normally).
        expected["SuiteProbe.BLosesTheContext"] = ("failed", "the CUDA context is lost after this test (cudaError")
        outcomes = ["context lost in SuiteProbe.BLosesTheContext", "finished"]
    env = dict(os.environ, SF_SUITE_PROBE="1", ASAN_OPTIONS="detect_leaks=0")
    r = subprocess.run([sys.executable, RUNNER, "--json", out, "--filter", filt, "--test-limit", "5", "--limit", "240",
                        "--log", log, "--work", os.path.join(work, "records"), "--", args.probe],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout.strip())
    try:
        with open(out) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("suite_probe_check: no runner JSON (%s); the runner's log:" % e)
        print(open(log).read() if os.path.exists(log) else "(none)")
        return 1
    bad = check(doc, expected, outcomes)
    if r.returncode != 1:
        bad.append("runner exit status %d, expected 1 (tests failed)" % r.returncode)
    if bad:
        print("suite_probe_check: FAIL")
        for b in bad:
            print("  " + b)
        print("-- the runner's log --")
        print(open(log).read() if os.path.exists(log) else "(none)")
        return 1
    print("suite_probe_check: ok (%s)" % ("every case" if args.all else "a real kernel's illegal address"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
