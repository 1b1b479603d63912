"""Tests of scripts/gpu_session.sh (the first-GPU-run checks and the bench phase in one device command) on
a machine without a GPU, against the fakes of test_gpu_verify.py: every stage under one deadline and what
lands in OUT, the bench phase's one `bench step --configs` process (its log split per configuration, each
record against the base, the chains, the drift), the rerun of what a lost CUDA context left, and the list
of configurations no process started.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gpu_verify import ROOT, GpuScriptCase, session_configs  # noqa: E402


class GpuSessionTest(GpuScriptCase):
    def test_session_runs_every_stage_under_one_deadline(self):
        # scripts/gpu_session.sh: train in the background, first, sanitize, evalcmp, the per-layer bench
        # and the step A/Bs of configs/bench/session_ab.txt, everything packed into OUT (the weights beside the
        # archive).
        self.fake_gpu(True)
        run = os.path.join(ROOT, "runs", "gpu_verify_train")
        if os.path.exists(run):
            self.skipTest("runs/gpu_verify_train exists in this checkout; not touching it")
        try:
            e = dict(os.environ, PATH=self.bin + ":" + os.environ["PATH"], OUT=self.out, SF_SANITIZER="none",
                     SF_DEADLINE="100")
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_session.sh"), self.build],
                               capture_output=True, text=True, env=e, timeout=200)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(sorted(os.listdir(self.out)), ["best_weights.safetensors", "last_weights.safetensors",
                                                            "session.log", "session.tar.gz"])
            with tarfile.open(os.path.join(self.out, "session.tar.gz")) as t:
                names = {n[2:] if n.startswith("./") else n for n in t.getnames()}
            for want in ("first/summary.txt", "first/gpu_tests.json", "train/train_metrics.jsonl",
                         "evalcmp/evalcmp.json", "evalcmp/eval_floor.csv", "sanitize/sanitize.txt",
                         "bnstats/bnstats.md", "bnstats/bnstats_last_batch.json",
                         "bench_configs.log", "session.log", "tests.md", "first/list.txt", "predictions.md",
                         "layers_all.md"):
                self.assertIn(want, names)
            self.assertFalse([n for n in names if n.endswith(".safetensors")])
            with open(os.path.join(self.out, "session.log")) as f:
                log = f.read()
            self.assertRegex(log, r"first: rc 0")
            # The per-test record against the suite's list and the last GPU record (the fake's three tests,
            # the same names in both parts, all passed, none in the H200's record).
            self.assertRegex(log, r"tests: 3 tests: 3 passed, 0 failed, 0 skipped, 0 not run; First run on a "
                                  r"GPU \(3\); Listed but not run here \(0 of 3\)")
            self.assertRegex(log, r"train: rc 0")
            self.assertRegex(log, r"evalcmp: rc 0")
            self.assertRegex(log, r"bnstats: rc 0")
            self.assertRegex(log, r"bnstats: \| last \| 6 \| 2808 \| batch \| 128 ")
            self.assertRegex(log, r"sanitize: rc 1")  # SF_SANITIZER=none: no sanitizer to run
            self.assertIn("] done", log)
            # The per-layer run and every A/B of configs/bench/session_ab.txt in one `bench step --configs`
            # (the fake writes each record and its section of the log), each line in session.log, each
            # record against the per-layer run's step (bench_ab.md), the base's second run last.
            listed = session_configs()
            self.assertEqual(listed[0], "bench_variants")
            self.assertGreaterEqual(len(listed), 20)
            with tarfile.open(os.path.join(self.out, "session.tar.gz")) as t:
                head = t.extractfile("./bench_head.log").read().decode()
                dwfused = t.extractfile("./bench_dwfused.log").read().decode()
                ab_md = t.extractfile("./bench_ab.md").read().decode()
                chain_md = t.extractfile("./bench_ab_chain.md").read().decode()
            # The base's second run sets the drift of every comparison (bench_ab.py --drift).
            self.assertIn("batch 128: the GPU drifted +0.000 ms over the runs", ab_md)
            self.assertIn("batch 128: the GPU drifted +0.000 ms over the runs", chain_md)
            for opt in ("--configs configs/bench/session_ab.txt", "--layers", "--deadline-s", "--batch-sizes 128"):
                self.assertIn(opt, head)
            self.assertIn("fused backward runs", dwfused)
            self.assertNotIn("configuration bench_dwfusedbn", dwfused, "one configuration a log")
            for name in listed + ["bench_variants_again"]:
                self.assertIn(name + ".json", names)
                self.assertRegex(log, r"bench %s: batch +128: " % re.escape(name))
                if name != "bench_variants":
                    self.assertRegex(log, r"A/B: ### %s.json against bench_variants.json" % re.escape(name))
            self.assertIn("bench: base bench_variants: 10.000 ms per step first, 10.000 ms again at the end", log)
            self.assertRegex(log, r"bench: rc 0 -- %d configuration\(s\) started" % (len(listed) + 1))
            self.assertRegex(log, r"A/B chain: ### bench_all_lanes.json against bench_all.json")
            # bench_all's own per-layer table against the base's (the fake's: the one row 0.5 ms faster).
            self.assertIn("layers bench_all: | depthwise ConvBN (dw_conv) | 1 (1) | 2.00 | 1.50 | 0.50 | 0.10 | 0.40 |",
                          log)
            # Each A/B against its written prediction (the fake's bench_all is 1 ms faster: 16-22 predicted).
            self.assertIn("prediction: bench_all against bench_variants (entry 11-27): predicted 16 to 22 ms saved, "
                          "measured +1.000 (faster): below", log)
            self.assertIn("prediction: bench_lanes against bench_variants (entry 30): predicted 3 to 7 ms saved, "
                          "measured +0.000 (within noise): none measurable", log)
            self.assertRegex(log, r"A/B chain: ### bench_mergefusehead.json against bench_mergeheads.json")
            self.assertIn("bench --dw-fused-bwd: n128 64x128 c64->64 k3 s1 g64, fused backward runs, "
                          "fused overwrite 0.1500 ms", log)
            self.assertRegex(log, r"A/B chain: ### bench_pwstats.json against bench_pwcustom.json")
            self.assertRegex(log, r"A/B chain: ### bench_pwbngrad.json against bench_pwcustom.json")
            self.assertRegex(log, r"A/B chain: ### bench_pwbnbwd.json against bench_pwcustom.json")
            self.assertRegex(log, r"A/B chain: ### bench_pwbnboth.json against bench_pwbngrad.json")
            self.assertRegex(log, r"A/B chain: ### bench_fusedwpwst.json against bench_pwstats.json")
            # The chained A/Bs: each against the base its prediction names.
            self.assertIn("bench_ab_chain.md", names)
            self.assertRegex(log, r"A/B chain: ### bench_dwfusedbn.json against bench_dwfused.json")
            self.assertRegex(log, r"A/B chain: ### bench_fuseexp.json against bench_dwfused.json")
            self.assertRegex(log, r"A/B chain: ### bench_fuseexpbn.json against bench_dwfusedbn.json")
            self.assertRegex(log, r"A/B chain: ### bench_fuseexpbg.json against bench_fuseexpbn.json")
            # tools/bench_ab.py over the A/Bs against the per-layer run's step (--pdl: 9 ms in the fake)
            self.assertIn("bench_ab.md", names)
            self.assertRegex(log, r"A/B: \| 128 \| 10\.000 .* \| 9\.000 .* \| -1\.000 ms \(-10\.0%\) .* faster \|")
            self.assertRegex(log, r"A/B: ### bench_pdl.json against bench_variants.json")
            self.assertRegex(log, r"plan --fusion-graphs --time: limit \d+s")
            self.assertRegex(log, r"fusion graphs: rc 0 -- 0 done")
            self.assertIn("fusion_time.log", names)

            # A second command for the A/Bs a first one's deadline cut: the bench phase only, the chosen A/Bs.
            shutil.rmtree(self.out)
            e2 = dict(e, SF_SESSION_PHASES="bench", SF_AB_ONLY="bench_pwstats,bench_fusedwpwst")
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_session.sh"), self.build],
                               capture_output=True, text=True, env=e2, timeout=200)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(sorted(os.listdir(self.out)), ["session.log", "session.tar.gz"])
            with tarfile.open(os.path.join(self.out, "session.tar.gz")) as t:
                names = {n[2:] if n.startswith("./") else n for n in t.getnames()}
            self.assertEqual(sorted(n for n in names if n.startswith("bench_") and n.endswith(".json")),
                             ["bench_ab.json", "bench_fusedwpwst.json", "bench_pwstats.json", "bench_variants.json",
                              "bench_variants_again.json"])
            self.assertFalse([n for n in names if n.startswith(("first", "train", "sanitize", "evalcmp", "bnstats"))])
            with open(os.path.join(self.out, "session.log")) as f:
                log = f.read()
            self.assertIn("phases bench, A/Bs bench_pwstats,bench_fusedwpwst", log)
            self.assertNotIn("not run", log)
            self.assertNotRegex(log, r"first: |train: |sanitize: |evalcmp: ")
            self.assertRegex(log, r"A/B chain: ### bench_fusedwpwst.json against bench_pwstats.json")
            e3 = dict(e, SF_SESSION_PHASES="tests")
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_session.sh"), self.build],
                               capture_output=True, text=True, env=e3, timeout=60)
            self.assertEqual(r.returncode, 2)
            self.assertIn("SF_SESSION_PHASES is all or bench, got 'tests'", r.stderr)
        finally:
            shutil.rmtree(run, ignore_errors=True)

    def test_session_bench_reruns_what_a_lost_context_left(self):
        # A configuration that loses the CUDA context (exit status 3) ends its process; the script runs the
        # summary's "remaining" in a new one (retry1/), whose records but the base's join the others.
        self.fake_gpu(True)
        r = self.run_session(SF_SESSION_PHASES="bench", SF_FAKE_LOSE="bench_pdl")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with tarfile.open(os.path.join(self.out, "session.tar.gz")) as t:
            names = {n[2:] if n.startswith("./") else n for n in t.getnames()}
        with open(os.path.join(self.out, "session.log")) as f:
            log = f.read()
        listed = session_configs()
        after = listed[listed.index("bench_pdl") + 1:]
        self.assertIn("bench: rc 3 -- ", log)
        self.assertIn("bench: [", log)
        self.assertRegex(log, r"the CUDA context is lost after bench_pdl")
        self.assertIn("bench step --configs configs/bench/session_ab.txt --only %s: limit" % ",".join(after), log)
        self.assertIn("retry1/bench_configs.log", names)
        self.assertNotIn("bench_variants_again.json", names, "the retry's second base run is its own")
        self.assertIn("retry1/bench_variants_again.json", names)
        for name in listed:
            self.assertIn(name + ".json", names)
            if name != "bench_variants":
                self.assertRegex(log, r"A/B: ### %s.json against bench_variants.json" % re.escape(name))
        self.assertEqual(len(re.findall(r"\] bench bench_variants: batch", log)), 1,
                         "the retry's own base is not an A/B record")
        self.assertEqual(len(re.findall(r"\] bench bench_dw0: batch", log)), 1)
        self.assertNotIn("not run", log, "the retry ran everything the lost context left")

    def test_session_bench_names_what_the_deadline_left(self):
        # The configurations the deadline skipped are named for the next command's SF_AB_ONLY.
        self.fake_gpu(True)
        r = self.run_session(SF_SESSION_PHASES="bench", SF_FAKE_SKIP_AFTER="3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.out, "session.log")) as f:
            log = f.read()
        listed = session_configs()
        self.assertIn("bench: not run, the next command's SF_AB_ONLY: %s\n" % ",".join(listed[4:]), log)
        self.assertIn("bench: [", log)
        self.assertRegex(log, r"A/B: ### %s.json against bench_variants.json" % re.escape(listed[3]))
        self.assertNotRegex(log, r"A/B: ### %s.json" % re.escape(listed[4]))


if __name__ == "__main__":
    unittest.main()
