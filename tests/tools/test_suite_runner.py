"""tools/suite_runner.py against a fake gtest binary: listing, the record, each way a process can end
(a lost context, a crash, a hang, the suite's limit), the restarts with the tests left, and a binary
without the record (gtest's JSON only). The real listener and the probe under the emulation are
checked by ctest emu.suite_runner_probe (tests/tools/suite_probe_check.py)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import suite_runner  # noqa: E402

# A gtest look-alike: FAKE_TESTS lists "Suite.Test=behaviour" (pass, fail, skip, lost, crash, hang; race and
# warn pass, printing a sanitizer's error or warning report);
# FAKE_NO_RECORD=1 makes it ignore SF_TEST_RECORD, as a binary built before the listener would.
FAKE = r'''#!/usr/bin/env python3
import fnmatch, json, os, sys, time
tests = [t.split("=") for t in os.environ["FAKE_TESTS"].split(",")]
filt, out = "*", None
for a in sys.argv[1:]:
    if a.startswith("--gtest_filter="): filt = a.split("=", 1)[1]
    if a.startswith("--gtest_output=json:"): out = a.split(":", 1)[1]
pos, _, neg = filt.partition("-")
sel = [(n, b) for n, b in tests if any(fnmatch.fnmatchcase(n, p) for p in pos.split(":") if p)
       and not any(fnmatch.fnmatchcase(n, p) for p in neg.split(":") if p)]
if "--gtest_list_tests" in sys.argv:
    print("GPU 0: a wrapper's line.")
    suite = None
    for n, _ in sel:
        s, t = n.split(".")
        if s != suite:
            print(s + "."); suite = s
        print("  " + t + ("  # GetParam() = 1" if t.endswith("/0") else ""))
    sys.exit(0)
rec = None if os.environ.get("FAKE_NO_RECORD") else os.environ.get("SF_TEST_RECORD")
def w(d):
    if rec:
        with open(rec, "a") as f: f.write(json.dumps(d) + "\n")
with open(os.environ["FAKE_RUNS"], "a") as f: f.write(filt + "\n")
doc = {"testsuites": []}
failed = 0
for n, b in sel:
    w({"event": "start", "test": n})
    print("[ RUN      ] " + n, flush=True)
    if b == "crash": os.abort()
    if b == "hang": time.sleep(60)
    if b == "race":  # what compute-sanitizer prints for a kernel of this test (its fake re-prints it)
        print("========= Error: Race reported between Write access at 0x10 in k.cu:5:kern\n"
              "=========     and Read access at 0x20 in k.cu:7:kern [4 hazards]\n=========", flush=True)
    if b == "warn":
        print("========= Warning: Race reported between Read access at 0x10 in k.cu:9:kern", flush=True)
    fails = ["boom"] if b in ("fail", "lost") else []
    e = {"event": "end", "test": n, "result": {"fail": "failed", "lost": "failed", "skip": "skipped"}.get(b, "passed"),
         "ms": 1.0, "failures": fails}
    if b == "lost": e["context_lost"] = "cudaErrorIllegalAddress: an illegal memory access was encountered"
    if b == "bytes" and rec:  # a failure message that is not UTF-8 (gtest prints a std::string's bytes as they are)
        with open(rec, "ab") as f:
            f.write(b'{"event": "end", "test": "' + n.encode() + b'", "result": "failed", "ms": 1.0, '
                    b'"failures": ["got \xff\xfe"]}\n')
        fails = ["bytes"]
    else:
        w(e)
    if b == "lost": sys.exit(3)
    failed += bool(fails)
    s, t = n.split(".")
    if not doc["testsuites"] or doc["testsuites"][-1]["name"] != s:
        doc["testsuites"].append({"name": s, "testsuite": []})
    g = {"name": t, "status": "RUN", "result": "SKIPPED" if b == "skip" else "COMPLETED", "time": "0.001s", "own": 1}
    if fails: g["failures"] = [{"failure": "boom", "type": ""}]
    doc["testsuites"][-1]["testsuite"].append(g)
w({"event": "program_end", "failed": failed})
if out:
    with open(out, "w") as f: json.dump(doc, f)
if os.environ.get("FAKE_CRASH_AT_EXIT"): os.abort()
sys.exit(1 if failed else 0)
'''


class SuiteRunnerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="suite_runner_test.")
        self.fake = os.path.join(self.dir, "fake_gtest")
        with open(self.fake, "w") as f:
            f.write(FAKE)
        os.chmod(self.fake, 0o755)
        self.runs = os.path.join(self.dir, "runs.txt")

    def run_suite(self, tests, *opts, **env):
        out = os.path.join(self.dir, "out.json")
        e = dict(os.environ, FAKE_TESTS=",".join(tests), FAKE_RUNS=self.runs)
        e.update(env)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "suite_runner.py"), "--json", out,
                            "--log", os.path.join(self.dir, "log.txt"), "--work", os.path.join(self.dir, "w"),
                            *opts, "--", self.fake], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        with open(out) as f:
            return r, json.load(f)

    @staticmethod
    def by_name(doc):
        return {s["name"] + "." + t["name"]: t for s in doc["testsuites"] for t in s["testsuite"]}

    def processes(self):
        with open(self.runs) as f:
            return f.read().splitlines()

    def test_list_parsing_ignores_a_wrappers_lines(self):
        text = ("NVIDIA H200, 580.159.04, 143771 MiB\nA.\n  One\n  Two/0  # GetParam() = 1\nTyped/0.  # TypeParam = int\n"
                "  Three\nother line.\n")
        self.assertEqual(suite_runner.parse_list(text), ["A.One", "A.Two/0", "Typed/0.Three"])

    def test_a_clean_suite_is_one_process(self):
        r, doc = self.run_suite(["A.One=pass", "A.Two=skip", "B.Three=pass"])
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(len(self.processes()), 1)
        self.assertEqual(doc["tests"], 3)
        self.assertEqual(doc["failures"], 0)
        self.assertIn("suite_runner: 3 tests: 2 passed, 0 failed, 1 skipped, 0 not run; 1 process", r.stdout)
        t = self.by_name(doc)
        self.assertEqual(t["A.One"].get("own"), 1)  # gtest's own entry where it has one
        self.assertEqual(t["A.Two"]["result"], "SKIPPED")

    def test_each_bad_end_costs_only_its_test(self):
        r, doc = self.run_suite(["A.One=pass", "A.Lost=lost", "A.Two=pass", "B.Crash=crash", "B.Three=pass",
                                 "B.Hang=hang", "C.Fail=fail", "C.Four=pass"], "--test-limit", "2")
        self.assertEqual(r.returncode, 1)
        t = self.by_name(doc)
        for n in ("A.One", "A.Two", "B.Three", "C.Four"):
            self.assertFalse(t[n].get("failures"), n)
            self.assertEqual(t[n]["result"], "COMPLETED")
        self.assertIn("context", json.dumps(t["A.Lost"]))
        self.assertIn("the process died in this test (signal 6)", t["B.Crash"]["failures"][0]["failure"])
        self.assertIn("ran longer than the per-test limit of 2 s", t["B.Hang"]["failures"][0]["failure"])
        self.assertEqual(t["C.Fail"]["failures"][0]["failure"], "boom")
        self.assertEqual(doc["failures"], 4)
        self.assertEqual(doc["runner"]["failed"], ["A.Lost", "B.Crash", "B.Hang", "C.Fail"])
        self.assertEqual([p["outcome"] for p in doc["runner"]["processes"]],
                         ["context lost in A.Lost", "died in B.Crash (signal 6)",
                          "over the per-test limit (2 s) in B.Hang", "finished"])
        runs = self.processes()
        self.assertEqual(runs[0], "*")  # the first process runs the original filter
        self.assertEqual(runs[1], "A.Two:B.Crash:B.Three:B.Hang:C.Fail:C.Four")  # then exactly the tests left
        self.assertEqual(runs[3], "C.Fail:C.Four")
        self.assertIn("4 processes (1: context lost in A.Lost; 2: died in B.Crash (signal 6); 3: over the per-test "
                      "limit (2 s) in B.Hang)", r.stdout)

    def test_a_crash_after_the_last_test_fails_the_run(self):
        # Every test passed, then the process died at exit (a destructor, the CUDA teardown): not a clean run.
        r, doc = self.run_suite(["A.One=pass", "A.Two=pass"], FAKE_CRASH_AT_EXIT="1")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(doc["runner"]["failed"], [])
        self.assertEqual(doc["runner"]["exit_problems"], ["finished, then signal 6 at exit"])
        self.assertIn("1 process (1: finished, then signal 6 at exit)", r.stdout)

    def test_a_record_that_is_not_utf8_is_read(self):
        # The listener writes a failure message's bytes as they are: the runner reads past them.
        r, doc = self.run_suite(["A.Bytes=bytes", "A.One=pass"])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertEqual(doc["runner"]["failed"], ["A.Bytes"])
        self.assertFalse(self.by_name(doc)["A.One"].get("failures"))

    def test_the_suites_limit_leaves_the_rest_not_run(self):
        r, doc = self.run_suite(["A.One=pass", "A.Hang=hang", "A.Two=pass"], "--limit", "3")
        self.assertEqual(r.returncode, 1)
        t = self.by_name(doc)
        self.assertFalse(t["A.One"].get("failures"))
        self.assertIn("still running when the suite's limit of 3 s ran out", t["A.Hang"]["failures"][0]["failure"])
        self.assertEqual(t["A.Two"]["result"], "NOT_RUN")
        self.assertEqual(doc["runner"]["not_run"], ["A.Two"])
        self.assertIn("limit of 3 s ran out", doc["runner"]["not_run_reason"])
        self.assertEqual(len(self.processes()), 1)

    def test_sigterm_still_writes_the_record(self):
        # An outer `timeout` ends the runner: the test process goes with it, the JSON says what ran.
        out = os.path.join(self.dir, "out.json")
        e = dict(os.environ, FAKE_TESTS="A.One=pass,A.Hang=hang,A.Two=pass", FAKE_RUNS=self.runs)
        p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "suite_runner.py"), "--json", out,
                              "--log", os.path.join(self.dir, "log.txt"), "--", self.fake], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(100):  # until the hanging test has started
            time.sleep(0.1)
            if os.path.exists(self.runs):
                with open(os.path.join(self.dir, "log.txt")) as f:
                    if "A.Hang" in f.read():
                        break
        p.terminate()
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, 1)
        with open(out) as f:
            doc = json.load(f)
        t = self.by_name(doc)
        self.assertFalse(t["A.One"].get("failures"))
        self.assertIn("still running when the runner was stopped (signal 15)", t["A.Hang"]["failures"][0]["failure"])
        self.assertEqual(doc["runner"]["not_run"], ["A.Two"])
        self.assertEqual(doc["runner"]["not_run_reason"], "the runner was stopped (signal 15)")
        self.assertEqual([q["outcome"] for q in doc["runner"]["processes"]], ["stopped (signal 15) in A.Hang"])

    def test_max_processes_and_no_progress_stop_the_restarts(self):
        r, doc = self.run_suite(["A.L1=lost", "A.L2=lost", "A.One=pass"], "--max-processes", "2")
        self.assertEqual(doc["runner"]["not_run"], ["A.One"])
        self.assertIn("2 processes ran", doc["runner"]["not_run_reason"])
        # A process that dies before its first test makes no progress: no endless restarts.
        r, doc = self.run_suite(["A.One=pass"], FAKE_RUNS="/nonexistent/dir/runs.txt")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(doc["runner"]["not_run"], ["A.One"])
        self.assertEqual(len(doc["runner"]["processes"]), 1)
        self.assertIn("died outside any test", doc["runner"]["processes"][0]["outcome"])

    def test_a_binary_without_the_record_uses_gtests_json(self):
        r, doc = self.run_suite(["A.One=pass", "A.Fail=fail"], FAKE_NO_RECORD="1")
        self.assertEqual(r.returncode, 1)
        t = self.by_name(doc)
        self.assertEqual(t["A.One"].get("own"), 1)
        self.assertEqual(doc["runner"]["failed"], ["A.Fail"])
        self.assertEqual([p["outcome"] for p in doc["runner"]["processes"]], ["finished"])

    def test_the_tests_seen_before_run_last(self):
        seen = os.path.join(self.dir, "seen.log")
        with open(seen, "w") as f:  # a sanitizer log of an earlier run: gtest's RUN lines among others
            f.write("========= COMPUTE-SANITIZER\n[ RUN      ] A.One\n[       OK ] A.One (5 ms)\n"
                    "[ RUN      ] C.Old\n[ RUN      ] Gone.Test\n")
        tests = ["A.One=pass", "A.New=lost", "B.New=pass", "C.Old=pass", "C.New2=pass"]
        r, doc = self.run_suite(tests, "--seen", seen)
        self.assertEqual(r.returncode, 1, r.stdout)
        # The unseen first (a lost context restarts within them), then the seen ones in a process of their own.
        self.assertEqual(self.processes(), ["A.New:B.New:C.New2", "B.New:C.New2", "A.One:C.Old"])
        self.assertEqual([p["filter"] for p in doc["runner"]["processes"]],
                         ["the 3 tests not in --seen", "the 2 tests left", "the 2 tests --seen names"])
        self.assertEqual(doc["runner"]["failed"], ["A.New"])
        self.assertEqual(doc["runner"]["seen"], {"file": seen, "unseen_first": 3})
        t = self.by_name(doc)
        self.assertEqual([n for n in t], ["A.One", "A.New", "B.New", "C.Old", "C.New2"])  # the listing's order
        self.assertTrue(all(t[n]["result"] == "COMPLETED" for n in t))
        with open(os.path.join(self.dir, "log.txt")) as f:
            self.assertIn("3 of the 5 tests not in " + seen + " run first", f.read())
        # The limit cuts the seen ones, not the new ones; a JSON record and a plain list are read too.
        os.remove(self.runs)
        prior = os.path.join(self.dir, "prior.json")
        with open(prior, "w") as f:
            json.dump({"testsuites": [{"name": "A", "testsuite": [
                {"name": "One", "status": "RUN", "result": "COMPLETED"},
                {"name": "Hang", "status": "RUN", "result": "COMPLETED"},
                {"name": "Two", "status": "NOTRUN", "result": "NOT_RUN"}]}]}, f)
        r, doc = self.run_suite(["A.One=pass", "A.Hang=hang", "A.Two=pass"], "--seen", prior, "--limit", "4")
        self.assertEqual(self.processes(), ["A.Two", "A.One:A.Hang"])
        self.assertEqual(doc["runner"]["not_run"], [])
        self.assertIn("still running when the suite's limit", self.by_name(doc)["A.Hang"]["failures"][0]["failure"])
        self.assertFalse(self.by_name(doc)["A.Two"].get("failures"))
        names = os.path.join(self.dir, "names.txt")
        with open(names, "w") as f:
            f.write("A.One\nA.Two\n")
        os.remove(self.runs)
        r, doc = self.run_suite(["A.One=pass", "A.Two=pass", "A.Three=pass"], "--seen", names)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(self.processes(), ["A.Three", "A.One:A.Two"])
        # Every test seen: one group, the original filter.
        os.remove(self.runs)
        r, doc = self.run_suite(["A.One=pass", "A.Two=pass"], "--seen", names)
        self.assertEqual(self.processes(), ["*"])
        self.assertEqual(doc["runner"]["seen"]["unseen_first"], 0)
        r, doc = self.run_suite(["A.One=pass"], "--seen", os.path.join(self.dir, "absent.log"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("--seen", doc["runner"]["error"])

    def test_a_suite_that_cannot_be_listed(self):
        r, doc = self.run_suite(["A.One=pass"], "--filter", "Nothing.*")
        self.assertEqual(r.returncode, 2)
        self.assertIn("could not be listed", doc["runner"]["error"])
        self.assertEqual(doc["tests"], 0)


if __name__ == "__main__":
    unittest.main()
