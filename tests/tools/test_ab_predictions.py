"""tools/ab_predictions.py: each A/B judged against its written prediction, and configs/bench/predictions.tsv
kept in step with the session's list (configs/bench/session_ab.txt)."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
import ab_predictions  # noqa: E402
from test_bench_ab import record, run  # noqa: E402
from test_gpu_verify import session_configs  # noqa: E402

TSV = os.path.join(ROOT, "configs", "bench", "predictions.tsv")


class AbPredictionsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ab_predictions.")

    def put(self, name, ms, spread=0.05, gz=False):
        doc = record([run(128, ms, spread)])
        if gz:
            with gzip.open(os.path.join(self.dir, name + ".json.gz"), "wt") as f:
                json.dump(doc, f)
        else:
            with open(os.path.join(self.dir, name + ".json"), "w") as f:
                json.dump(doc, f)

    def test_the_predictions_cover_the_session_list(self):
        preds = ab_predictions.read_predictions(TSV)
        listed = session_configs()
        self.assertEqual(sorted(p["record"] for p in preds), sorted(listed[1:]))  # every A/B, the base excepted
        for p in preds:
            self.assertIn(p["base"], listed, p)
            self.assertLess(listed.index(p["base"]), listed.index(p["record"]), "a base runs before its A/B: %s" % p)

    def test_each_outcome_against_its_range(self):
        tsv = os.path.join(self.dir, "p.tsv")
        with open(tsv, "w") as f:
            f.write("# comment\n"
                    "in\tbase\t1\t1\t2\tx\nabove\tbase\t2\t1\t2\tx\nbelow\tbase\t3\t1\t2\tx\n"
                    "slower\tbase\t4\t1\t2\tx\nnoise\tbase\t5\t1\t2\tx\nnoise0\tbase\t6\t0\t1\tx\n"
                    "neg\tbase\t7\t-5\t-3.4\tx\nchained\tin\t8\t0.5\t1\tx\nmissing\tbase\t9\t1\t2\tx\n")
        self.put("base", 60.0)
        self.put("in", 58.5, gz=True)
        self.put("above", 55.0)
        self.put("below", 59.5)
        self.put("slower", 61.0)
        self.put("noise", 59.98)
        self.put("noise0", 60.02)
        self.put("neg", 64.0)
        self.put("chained", 57.8)
        rows = {r["record"]: r for r in ab_predictions.evaluate(ab_predictions.read_predictions(tsv), self.dir)}
        self.assertEqual(rows["in"]["against"], "in range")
        self.assertAlmostEqual(rows["in"]["measured"], 1.5)
        self.assertEqual(rows["above"]["against"], "above")
        self.assertEqual(rows["below"]["against"], "below")
        self.assertEqual(rows["slower"]["against"], "slower")
        self.assertEqual(rows["noise"]["against"], "none measurable")
        self.assertEqual(rows["noise0"]["against"], "none measurable, in range")
        self.assertEqual(rows["neg"]["against"], "in range")
        self.assertAlmostEqual(rows["chained"]["measured"], 0.7)  # against its own base
        self.assertEqual(rows["chained"]["against"], "in range")
        self.assertEqual(rows["missing"]["note"], "not run (missing missing)")
        md = os.path.join(self.dir, "p.md")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "ab_predictions.py"), tsv, self.dir, "--md", md],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("prediction: in against base (entry 1): predicted 1 to 2 ms saved, measured +1.500 (faster): "
                      "in range", r.stdout)
        self.assertIn("predictions: 8 judged (1 above, 1 below, 3 in range, 1 none measurable, 1 none measurable, in "
                      "range, 1 slower); 1 without both records here", r.stdout)
        self.assertNotIn("prediction: missing", r.stdout)  # in the table only
        with open(md) as f:
            self.assertIn("| slower | base | 4 | 1 to 2 | -1.000 (60.000 -> 61.000) | slower | slower |", f.read())
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "ab_predictions.py"), tsv, "--pairs", "base"],
                           stdout=subprocess.PIPE, text=True)
        self.assertEqual(r.stdout.split(), ["in:chained"])

    def test_a_bad_line_is_named(self):
        tsv = os.path.join(self.dir, "bad.tsv")
        with open(tsv, "w") as f:
            f.write("a\tb\t1\t2\n")
        with self.assertRaisesRegex(ValueError, "bad.tsv:1: 4 tab-separated fields"):
            ab_predictions.read_predictions(tsv)
        with open(tsv, "w") as f:
            f.write("a\tb\t1\t3\t2\tx\n")
        with self.assertRaisesRegex(ValueError, "low 3 above high 2"):
            ab_predictions.read_predictions(tsv)


if __name__ == "__main__":
    unittest.main()
