"""scripts/run.sh's choice between the GPU preset and the CPU smoke, without the long run.

A fake slidefuse answers `devices` with each exit code the real one uses (0 usable, 2 no device,
3 unsupported); SF_RUN_DRY_RUN=1 makes run.sh print the command it chose. Where SLIDEFUSE_BIN
names the real binary and the machine has no GPU, the real `devices` answer is checked too.
The GPU run itself needs a device (scripts/gpu_verify.sh).
"""
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_SH = os.path.join(ROOT, "scripts", "run.sh")


def run_sh(binary, *args):
    env = dict(os.environ, SF_RUN_DRY_RUN="1", SF_RUN_SKIP_SETUP="1", SLIDEFUSE_BIN=binary)
    p = subprocess.run([RUN_SH, *args], env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout.strip().split("\n"), p.stderr


class RunShTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def fake(self, rc, text):
        path = os.path.join(self.tmp, f"slidefuse_{rc}")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n[ \"$1\" = devices ] || exit 99\n")
            f.write(f"printf '%s\\n' {' '.join(repr(t) for t in text)}\nexit {rc}\n")
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def test_usable_gpu_runs_the_quickstart(self):
        b = self.fake(0, ["GPU 0: NVIDIA GeForce RTX 4090, compute capability 8.9 (sm_89 code)"])
        rc, out, err = run_sh(b, "train.max_steps=5")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out), 2, out)
        self.assertIn("RTX 4090", out[0])
        self.assertEqual(out[1], f"[run] would run: {b} train --config configs/quickstart.yaml train.max_steps=5")

    def test_no_gpu_says_so_in_one_line_and_runs_the_cpu_smoke(self):
        b = self.fake(2, ["no usable CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected"])
        rc, out, err = run_sh(b, "optimizer.lr=5e-4")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out), 2, out)
        self.assertIn("no GPU run (no usable CUDA device: cudaErrorNoDevice", out[0])
        self.assertIn("CPU smoke", out[0])
        self.assertEqual(out[1], f"[run] would run: {b} train --config configs/cpu_smoke.yaml optimizer.lr=5e-4")

    def test_unsupported_gpu_names_the_reason(self):
        b = self.fake(3, ["GPU 0: NVIDIA GeForce RTX 3090, compute capability 8.6 (unsupported)",
                          "  not supported: this build carries sm_90, none of which runs on 8.6"])
        rc, out, _ = run_sh(b)
        self.assertEqual(rc, 0)
        self.assertEqual(len(out), 2, out)
        self.assertIn("GPU not supported by this build: this build carries sm_90", out[0])
        self.assertIn("configs/cpu_smoke.yaml", out[1])

    def test_full_recipe_is_one_argument_away(self):
        b = self.fake(0, ["GPU 0: H100"])
        _, out, _ = run_sh(b, "--config", "configs/default.yaml")
        self.assertTrue(out[1].endswith("--config configs/quickstart.yaml --config configs/default.yaml"), out)
        self.assertTrue(os.path.isfile(os.path.join(ROOT, "configs", "quickstart.yaml")))

    def test_real_binary_without_gpu(self):
        real = os.environ.get("SLIDEFUSE_BIN")
        if not real or not os.path.isfile(real):
            self.skipTest("SLIDEFUSE_BIN does not name the built slidefuse")
        if subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0:
            self.skipTest("this machine has a GPU")
        rc, out, err = run_sh(real)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out), 2, out)
        self.assertIn("no GPU run (no usable CUDA device", out[0])
        self.assertIn("--config configs/cpu_smoke.yaml", out[1])


if __name__ == "__main__":
    unittest.main()
