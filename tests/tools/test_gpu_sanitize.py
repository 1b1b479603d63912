"""Tests of the sanitizer stage of scripts/gpu_verify.sh (racecheck and synccheck through tools/suite_runner.py,
each report put under its test by tools/sanitizer_log.py) on a machine without a GPU, against the fakes of
test_gpu_verify.py, the suite runner's fake gtest binary and a fake compute-sanitizer; and the list of the suites
the stage runs (tests/gpu/sanitize_suites.txt) against the suites tests/gpu holds.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gpu_verify import ROOT, GpuScriptCase, write_exe  # noqa: E402
from test_suite_runner import FAKE  # noqa: E402

# The sanitizer stage's fakes: the suite runner's gtest look-alike (the record, RUN lines, a race report) and a
# compute-sanitizer that runs it and, as the real one does, ends with its summary and --error-exitcode when it
# saw an error report.
FAKE_SANITIZER = r'''#!/usr/bin/env python3
import subprocess, sys
tool, cmd = sys.argv[2], sys.argv[5:]
print("========= COMPUTE-SANITIZER", flush=True)
if "--gtest_list_tests" not in cmd:
    print("tool " + tool, flush=True)
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
errors = sum(1 for line in p.stdout.splitlines() if line.startswith("========= Error"))
sys.stdout.write(p.stdout)
print("========= %s SUMMARY: %d errors" % ("RACECHECK" if tool == "racecheck" else "ERROR", errors), flush=True)
sys.exit(86 if errors and p.returncode == 0 else p.returncode)
'''


class GpuSanitizeTest(GpuScriptCase):
    def test_sanitize_stage_runs_racecheck_and_synccheck(self):
        self.fake_gpu(True)
        write_exe(os.path.join(self.build, "tests", "sf_gpu_tests"), FAKE)
        san = os.path.join(self.bin, "compute-sanitizer")
        write_exe(san, FAKE_SANITIZER)
        seen = os.path.join(self.tmp, "seen.log")
        with open(seen, "w") as f:
            f.write("[ RUN      ] KernelsFillGpu.Old\n")
        runs = os.path.join(self.tmp, "runs.txt")
        tests = "KernelsFillGpu.Old=pass,KernelsConvCudnnGpu.NotOurs=pass,KernelsPwconvGpu.New=pass,CudaStep.Whole=pass"
        env = dict(SF_SANITIZER=san, SF_SANITIZE_SEEN=seen, FAKE_RUNS=runs)
        r = self.run_script("sanitize", self.build, FAKE_TESTS=tests, **env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sorted(os.listdir(self.out)), ["commit.txt", "gpu.txt", "racecheck.json", "racecheck.log",
                                                         "sanitize.md", "sanitize.txt", "synccheck.json",
                                                         "synccheck.log"])  # 8: a device command's limit
        with open(os.path.join(self.out, "sanitize.md")) as f:
            md = f.read()
        self.assertIn("| racecheck | ok | 2 | 2 | 0 | 0 | 0 | 2 | 0 | 0 | 1 |", md)
        self.assertIn("- synccheck (1, against %s): KernelsPwconvGpu.New" % seen, md)
        with open(runs) as f:  # per tool: the test no sanitizer has seen, then the one the seen log names
            self.assertEqual(f.read().splitlines(), ["KernelsPwconvGpu.New", "KernelsFillGpu.Old"] * 2)
        for tool in ("racecheck", "synccheck"):
            with open(os.path.join(self.out, tool + ".log")) as f:
                self.assertIn("tool " + tool, f.read())
            self.assertRegex(r.stdout, tool + r" +ok +rc 0; 2 tests: 2 passed, 0 failed, 0 skipped, 0 not run; "
                                              r"2 processes; 0 errors, 0 warnings in 0 tests, 0 outside any test; "
                                              r".*SUMMARY: 0 errors")
        # A race in one test: that test is named with its report, the process's exit status 86 fails the tool.
        os.remove(runs)
        tests = ("KernelsFillGpu.Old=pass,KernelsPwconvGpu.New=race,KernelsDwconvGpu.W=warn,"
                 "KernelsBnActGpu.Lost=lost,KernelsEltwiseGpu.After=pass")
        r = self.run_script("sanitize", self.build, FAKE_TESTS=tests, **env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"racecheck +FAIL +rc 1; 5 tests: 4 passed, 1 failed, 0 skipped, 0 not run; "
                                   r"3 processes \(1: context lost in KernelsBnActGpu.Lost\); 1 error, 1 warning in 2 tests \(KernelsDwconvGpu.W: 1, "
                                   r"KernelsPwconvGpu.New: 1\), 0 outside any test")
        with open(os.path.join(self.out, "racecheck.json")) as f:
            doc = json.load(f)
        t = {s["name"] + "." + e["name"]: e for s in doc["testsuites"] for e in s["testsuite"]}
        self.assertEqual(t["KernelsPwconvGpu.New"]["sanitizer"]["errors"], 1)
        self.assertIn("Race reported between Write access", t["KernelsPwconvGpu.New"]["sanitizer"]["first"][0])
        self.assertEqual(t["KernelsDwconvGpu.W"]["sanitizer"]["warnings"], 1)
        self.assertNotIn("sanitizer", t["KernelsEltwiseGpu.After"])
        self.assertEqual(doc["sanitizer"]["status"], "FAIL")
        self.assertEqual(doc["sanitizer"]["tests"], ["KernelsDwconvGpu.W", "KernelsPwconvGpu.New"])
        with open(os.path.join(self.out, "sanitize.md")) as f:
            md = f.read()
        self.assertIn("| racecheck | FAIL | 5 | 4 | 1 | 0 | 0 | 3 | 1 | 1 | 4 |", md)
        self.assertIn("| racecheck | KernelsPwconvGpu.New | 1 | 0 | Error: Race reported between Write access", md)
        self.assertIn("- racecheck: processes that ended early or badly: context lost in KernelsBnActGpu.Lost", md)
        # A race in a process that then finishes: the sanitizer's exit status 86 at exit is named too.
        os.remove(runs)
        r = self.run_script("sanitize", self.build, FAKE_TESTS="KernelsFillGpu.Old=pass,KernelsPwconvGpu.New=race", **env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"synccheck +FAIL +rc 1; 2 tests: 2 passed, 0 failed, 0 skipped, 0 not run; 2 "
                                   r"processes \(1: finished, then exit status 86 at exit\); 1 error, 0 warnings in 1 "
                                   r"test \(KernelsPwconvGpu.New: 1\)")
        # The limit cutting a test is no failure: part, exit 0.
        os.remove(runs)
        r = self.run_script("sanitize", self.build, FAKE_TESTS="KernelsFillGpu.Old=pass,KernelsPwconvGpu.New=hang",
                            SF_T_SANITIZE="3", **env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"racecheck +part +rc 1; .*0 passed, 1 failed, 0 skipped, 1 not run.*\(of the "
                                   r"failed, 1 cut by the limit: KernelsPwconvGpu.New\); 0 errors")
        with open(os.path.join(self.out, "sanitize.md")) as f:
            self.assertIn("- racecheck (1; the suite's limit of 3 s ran out): KernelsFillGpu.Old", f.read())
        write_exe(san, "#!/bin/sh\necho '========= Error: Device not supported'\nexit 1\n")
        r = self.run_script("sanitize", self.build, SF_SANITIZER=san)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"synccheck +SKIP")

    def test_sanitizer_log_refuses_bad_input(self):
        tool = os.path.join(ROOT, "tools", "sanitizer_log.py")
        run = lambda *a: subprocess.run([sys.executable, tool, *a], capture_output=True, text=True, timeout=60)
        r = run("--table", os.path.join(self.tmp, "t.md"), os.path.join(self.tmp, "absent.json"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("absent.json", r.stderr)
        self.assertEqual(run("--table", os.path.join(self.tmp, "t.md")).returncode, 2)  # no JSON named
        self.assertEqual(run("--tool", "racecheck").returncode, 2)  # no log, no JSON
        r = run("--tool", "racecheck", "--log", os.path.join(self.tmp, "absent.log"), "--json",
                os.path.join(self.tmp, "absent.json"), "--runner-rc", "124")
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stdout, r"racecheck +FAIL +rc 124; no record: ")

    def test_every_gpu_test_suite_is_in_or_out_of_the_sanitizers(self):
        # tests/gpu/sanitize_suites.txt classifies every TEST suite of tests/gpu: a new kernel's suite must be named.
        classified = {}
        with open(os.path.join(ROOT, "tests", "gpu", "sanitize_suites.txt")) as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if words:
                    self.assertIn(words[0], ("in", "out"), line)
                    self.assertNotIn(words[1], classified, "named twice: " + words[1])
                    if words[0] == "out":
                        self.assertGreater(len(words), 2, "an `out` suite says why: " + line)
                    classified[words[1]] = words[0]
        suites = set()
        gpu = os.path.join(ROOT, "tests", "gpu")
        for name in os.listdir(gpu):
            if name.endswith((".cpp", ".cu")):
                with open(os.path.join(gpu, name)) as f:
                    suites |= set(re.findall(r"^TEST(?:_F|_P)?\((\w+),", f.read(), re.M))
        self.assertGreater(len(suites), 20)
        self.assertEqual(sorted(suites - set(classified)), [], "suites neither in nor out of the sanitizers")
        self.assertEqual(sorted(set(classified) - suites), [], "named suites that no longer exist")
        self.assertIn("KernelsPwconvGpu", [s for s, v in classified.items() if v == "in"])


if __name__ == "__main__":
    unittest.main()
