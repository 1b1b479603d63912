"""tools/gpu_tests_table.py: the per-test record of a GPU run, from the runner's merged JSON."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "gpu_tests_table.py")


def t(name, result="COMPLETED", failures=None, **extra):
    e = {"name": name, "status": "RUN", "result": result, "time": "0.5s"}
    if failures:
        e["failures"] = [{"failure": f, "type": ""} for f in failures]
    e.update(extra)
    return e


class GpuTestsTableTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu_tests_table.")

    def write(self, name, obj):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        return path

    def test_record_of_a_run_with_every_state(self):
        doc = {"testsuites": [
            {"name": "A", "testsuite": [t("Ok"), t("Bad", failures=["tests/gpu/a.cpp:12\nExpected equality | of x"]),
                                        t("Skip", "SKIPPED")]},
            {"name": "B", "testsuite": [t("Lost", failures=["the CUDA context is lost after this test (x)"]),
                                        t("Left", "NOT_RUN", not_run="the suite's limit of 190 s ran out")]}],
            "parts": [{"runner": {"processes": [{"outcome": "context lost in B.Lost"}, {"outcome": "finished"}]}}]}
        earlier = {"testsuites": [{"name": "A", "testsuite": [t("Ok")]}]}
        listing = "GPU 0: a line\nA.\n  Ok\n  Bad\n  Skip\nB.\n  Lost\n  Left\nC.\n  New\n"
        env = "commit: abc123\n== gpu\nname, compute_cap\nNVIDIA H200, 9.0\ncudnn runtime: [i] CUDA backend: cuDNN 9.19\n"
        r = subprocess.run([sys.executable, TOOL, self.write("g.json", doc), "--list", self.write("l.txt", listing),
                            "--since", self.write("e.json", earlier), "--env", self.write("env.txt", env)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("- gpu: NVIDIA H200, 9.0, commit: abc123, cudnn: cuDNN 9.19", out)
        self.assertIn("**5 tests: 1 passed, 2 failed, 1 skipped, 1 not run.**", out)
        self.assertIn("- context lost in B.Lost", out)
        self.assertIn("| `A.Bad` | Expected equality \\| of x |", out)  # the message, not the file:line
        self.assertIn("| `B.Lost` | the CUDA context is lost after this test (x) |", out)
        self.assertIn("- `B.Left`: the suite's limit of 190 s ran out", out)
        self.assertIn("`SF_GTEST_FILTER='A.Bad:B.Lost:B.Left' scripts/gpu_verify.sh tests .gpu`", out)
        self.assertIn("| A | 1 | 1 | 1 | 0 |", out)
        self.assertIn("## First run on a GPU (2)\n\n- `A.Bad`: failed\n- `B.Lost`: failed", out)
        self.assertIn("## Listed but not run here (2 of 6)\n\n- `B.Left`\n- `C.New`", out)
        self.assertIn("| `A.Ok` | 0.5 |\n| all 1 passed tests | 0.5 |", out)

    def test_unreadable_input(self):
        r = subprocess.run([sys.executable, TOOL, self.write("bad.json", "{")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("gpu_tests_table:", r.stderr)


if __name__ == "__main__":
    unittest.main()
