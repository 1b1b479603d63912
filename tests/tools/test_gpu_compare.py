"""Tests of scripts/gpu_compare.sh on a machine without a GPU, against fakes: a slidefuse whose
`bench step` writes a valid bench report, and a stand-in for the baselines' Python (compare.py
--python) that fills torch.compile's cache folder and exits without a report, as a compiled runner
cut at its limit does. Checked: what lands in OUT (at most 8 files, flat), the runners' order and
statuses in compare's JSON, the cache returned in parts when the compiled runner did not finish,
and those parts unpacked by the next run when they are in the build folder.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_compare.sh")

FAKE_SF = """#!%s
import json, sys
sys.path.insert(0, %r)
import bench_schema
if sys.argv[1:3] != ["bench", "step"]:
    sys.exit(1)
run = bench_schema.make_run(128, 256, 512, 2, "graph", 10, [60.0] * 50, 19 * 2 ** 30)
rep = bench_schema.make_report("slidefuse", {"name": "Fake GPU", "driver": "1", "cuda": "13.0", "cudnn": "91900"},
                               [run], commit="c0ffee")
json.dump(rep, open(sys.argv[sys.argv.index("--json") + 1], "w"))
print("  batch  128:   2133.3 samples/s    60.000 ms/step")
""" % (sys.executable, os.path.join(ROOT, "tools", "baselines"))

# The baselines' Python: leaves a file in the cache folder (saying whether it found the earlier
# run's), then fails without writing its report.
FAKE_PY = """#!/bin/sh
mkdir -p "$TORCHINDUCTOR_CACHE_DIR/fxgraph"
if [ -f "$TORCHINDUCTOR_CACHE_DIR/fxgraph/entry" ]; then echo "fake baseline: cache entry found"; fi
echo "compiled kernels" > "$TORCHINDUCTOR_CACHE_DIR/fxgraph/entry"
echo "pytorch-compile_max_autotune batch 128: warm-up step 1/10 started"
exit 1
"""


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class GpuCompareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.build = os.path.join(self.tmp, "build")
        os.makedirs(self.build)
        write_exe(os.path.join(self.build, "slidefuse"), FAKE_SF)
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        write_exe(os.path.join(self.bin, "nvidia-smi"), "#!/bin/sh\necho 'Fake GPU, 1.0, 1980 MHz, 81559 MiB'\n")
        self.fake_py = os.path.join(self.tmp, "fakepy")
        write_exe(self.fake_py, FAKE_PY)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_script(self, out, cache, runners, **env):
        e = dict(os.environ, PATH=self.bin + ":" + os.environ["PATH"], OUT=out, SF_INDUCTOR_CACHE=cache,
                 SF_RUNNERS=runners, SF_DEADLINE="200", SF_PYTHON=sys.executable,
                 SF_COMPARE_EXTRA="--synthetic --python " + self.fake_py)
        e.update(env)
        return subprocess.run(["bash", SCRIPT, self.build], capture_output=True, text=True, env=e, timeout=180)

    def combined(self, out):
        (path,) = glob.glob(os.path.join(out, "*-fake-gpu.json"))
        with open(path) as f:
            return json.load(f)

    def test_cut_compile_returns_its_cache_and_the_next_run_starts_from_it(self):
        out1 = os.path.join(self.tmp, "out1")
        r = self.run_script(out1, os.path.join(self.tmp, "cache1"), "slidefuse,compile_max_autotune")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)  # slidefuse's report makes the run a success
        runs = [(x["runner"], x["status"]) for x in self.combined(out1)["runners"]]
        self.assertEqual(runs[:2], [("slidefuse", "ok"), ("compile_max_autotune", "failed")])
        self.assertEqual(sorted(s for n, s in runs[2:]), ["skipped"] * 3)
        files = sorted(os.listdir(out1))
        self.assertLessEqual(len(files), 8, files)  # the lease returns at most 8 files
        self.assertTrue(all(os.path.isfile(os.path.join(out1, f)) for f in files), files)
        parts = [f for f in files if f.startswith("inductor_cache.tgz.part")]
        self.assertEqual(parts, ["inductor_cache.tgz.part00"])
        for f in ("compare.log", "env.txt"):
            self.assertIn(f, files)
        with open(os.path.join(out1, "compare.log")) as f:
            log = f.read()
        self.assertIn("torch.compile runner: failed", log)
        self.assertIn("for the next lease", log)
        self.assertNotIn("cache entry found", log)
        with open(os.path.join(out1, "env.txt")) as f:
            self.assertIn("Fake GPU, 1.0", f.read())

        # the next lease: the parts in the build folder are unpacked before compare runs
        shutil.copy(os.path.join(out1, parts[0]), self.build)
        out2 = os.path.join(self.tmp, "out2")
        r = self.run_script(out2, os.path.join(self.tmp, "cache2"), "compile_max_autotune")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # nothing produced a report
        with open(os.path.join(out2, "compare.log")) as f:
            log = f.read()
        self.assertIn("inductor cache: unpacked", log)
        self.assertIn("fake baseline: cache entry found", log)

    def test_no_cache_returned_when_compile_is_not_run(self):
        out = os.path.join(self.tmp, "out")
        r = self.run_script(out, os.path.join(self.tmp, "cache"), "slidefuse",
                            SF_SLIDEFUSE_EXTRA="--pdl --bn-row-batch 4")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(glob.glob(os.path.join(out, "inductor_cache*")))
        with open(os.path.join(out, "compare.log")) as f:
            self.assertIn("bench step --batch-sizes 128 --height 256 --width 512 --steps 50 --warmup 10 --pdl "
                          "--bn-row-batch 4 --json", f.read())
        c = self.combined(out)
        self.assertEqual(c["config"]["runners"], ["slidefuse"])
        self.assertLessEqual(c["config"]["deadline"], 200 - 25)
        md = glob.glob(os.path.join(out, "*-fake-gpu.md"))
        self.assertEqual(len(md), 1)

    def test_missing_binary(self):
        os.remove(os.path.join(self.build, "slidefuse"))
        out = os.path.join(self.tmp, "out")
        r = self.run_script(out, os.path.join(self.tmp, "cache"), "slidefuse")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no %s/slidefuse" % self.build, r.stdout)


if __name__ == "__main__":
    unittest.main()
