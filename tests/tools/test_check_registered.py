"""tests/emu/check_registered.py against a fake gtest binary: the registered list must be exactly the
binary's tests (none missing, none invented, none twice). The real registration is checked by ctest
emu.step_tests_registered."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tests", "emu", "check_registered.py")

FAKE = r'''#!/usr/bin/env python3
import sys
assert sys.argv[1:] == ["--gtest_list_tests"], sys.argv
print("a line the binary prints first")
print("CudaStep.")
print("  OneMicroStep")
print("  GraphReplay  # a comment")
print("Param/Suite.")
print("  Case/0  # GetParam() = 1")
'''


class CheckRegisteredTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fake = os.path.join(self.tmp.name, "fake_tests")
        with open(self.fake, "w") as f:
            f.write(FAKE)
        os.chmod(self.fake, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def run_check(self, names):
        listed = os.path.join(self.tmp.name, "registered.txt")
        with open(listed, "w") as f:
            f.write("".join(n + "\n" for n in names))
        return subprocess.run([sys.executable, SCRIPT, listed, "emu.", self.fake], capture_output=True, text=True)

    def test_exact_list_passes(self):
        r = self.run_check(["emu.CudaStep.OneMicroStep", "emu.CudaStep.GraphReplay", "emu.Param/Suite.Case/0"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("3 tests in", r.stdout)

    def test_missing_test_fails(self):
        r = self.run_check(["emu.CudaStep.OneMicroStep", "emu.Param/Suite.Case/0"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("not registered: CudaStep.GraphReplay", r.stdout)

    def test_invented_name_fails(self):
        r = self.run_check(["emu.CudaStep.OneMicroStep", "emu.CudaStep.GraphReplay", "emu.Param/Suite.Case/0",
                            "emu.CudaStep.GraphReplayTypo"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("registered, not in the executable: CudaStep.GraphReplayTypo", r.stdout)

    def test_twice_fails(self):
        r = self.run_check(["emu.CudaStep.OneMicroStep", "emu.CudaStep.GraphReplay", "emu.Param/Suite.Case/0",
                            "emu.CudaStep.GraphReplay"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("1 names registered twice", r.stdout)

    def test_bad_usage(self):
        r = subprocess.run([sys.executable, SCRIPT, "only-one"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
