"""Tests of tools/e2e_check.py on synthetic metrics.jsonl and bench records: the median after the
skipped intervals, the bench run chosen, pass/fail at the ratio, the loader wait, bad input.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import e2e_check  # noqa: E402


class E2eCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.metrics = os.path.join(self.tmp, "metrics.jsonl")
        self.bench = os.path.join(self.tmp, "bench.json")
        rates = [100, 200, 5000, 5100, 4900, 5050]  # two warm-up intervals, then steady
        with open(self.metrics, "w") as f:
            for i, r in enumerate(rates):
                f.write(json.dumps({"step": 20 * (i + 1), "loss": 1.0, "grad_norm": 2.0, "samples_per_s": r,
                                    "loader_wait_fraction": 0.01 if i >= 2 else 0.5}) + "\n")
                if i == 3:
                    f.write(json.dumps({"step": 80, "validation": True, "samples": 100}) + "\n")
        doc = {"runs": [{"batch": 128, "mode": "graph", "status": "ok", "samples_per_s": 5200.0,
                         "height": 256, "width": 512},
                        {"batch": 256, "mode": "graph", "status": "ok", "samples_per_s": 6000.0},
                        {"batch": 128, "mode": "eager", "status": "ok", "samples_per_s": 9000.0}]}
        with open(self.bench, "w") as f:
            json.dump(doc, f)

    def run_check(self, *extra):
        out = os.path.join(self.tmp, "e2e.json")
        rc = e2e_check.main(["--metrics", self.metrics, "--bench", self.bench, "--batch", "128", "--json", out,
                             *extra])
        res = json.load(open(out)) if os.path.exists(out) else None
        return rc, res

    def test_pass_and_figures(self):
        rc, r = self.run_check()
        self.assertEqual(rc, 0)
        self.assertEqual(r["intervals"], 4)
        self.assertAlmostEqual(r["train_samples_per_s"], 5025.0)  # median of 5000, 5100, 4900, 5050
        self.assertEqual(r["bench_samples_per_s"], 5200.0)  # batch 128, graph mode (not eager's)
        self.assertAlmostEqual(r["ratio"], 5025.0 / 5200.0)
        self.assertAlmostEqual(r["loader_wait_fraction"], 0.01)
        self.assertTrue(r["pass"])

    def test_fail_below_the_ratio(self):
        rc, r = self.run_check("--min-ratio", "0.99")
        self.assertEqual(rc, 1)
        self.assertFalse(r["pass"])

    def test_unusable_input(self):
        self.assertEqual(e2e_check.main(["--metrics", self.metrics, "--bench", self.bench, "--batch", "64"]), 2)
        self.assertEqual(e2e_check.main(["--metrics", self.metrics, "--bench", self.bench, "--batch", "128",
                                         "--skip-intervals", "6"]), 2)
        self.assertEqual(e2e_check.main(["--metrics", os.path.join(self.tmp, "none"), "--bench", self.bench,
                                         "--batch", "128"]), 2)


if __name__ == "__main__":
    unittest.main()
