"""Tests of tools/backend_compare.py (CUDA vs CPU eval/predict outputs) on hand-written files: the
agreement share and its tolerance boundary, the hit@5px check, predict disagreement, and the errors
(different sample sets, backends in the wrong order, missing columns).

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "backend_compare.py")


class BackendCompareTest(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.TemporaryDirectory()
        self.addCleanup(self.d.cleanup)

    def path(self, name):
        return os.path.join(self.d.name, name)

    def eval_files(self, tag, points, backend, hit5=99.0):
        csv_path, json_path = self.path(f"{tag}.csv"), self.path(f"{tag}.json")
        with open(csv_path, "w") as f:
            f.write("sample,pred_gap_x,pred_gap_y,pred_slider_x,pred_slider_y,combined_err\n")
            for i, p in enumerate(points):
                f.write(f"{i},{p[0]},{p[1]},{p[2]},{p[3]},0.5\n")
        with open(json_path, "w") as f:
            json.dump({"backend": backend, "mae_px": 1.0, "hit_le_5px": hit5}, f)
        return csv_path, json_path

    def predict_file(self, tag, gap_x):
        p = self.path(f"{tag}.pred.json")
        with open(p, "w") as f:
            json.dump({"predictions": [{"image": "a.png", "gap": {"x": gap_x, "y": 5}, "slider": {"x": 1, "y": 5}}]}, f)
        return p

    def run_tool(self, cuda, cpu, *extra):
        out = self.path("out.json")
        r = subprocess.run([sys.executable, TOOL, "--eval-csv", cuda[0], cpu[0], "--eval-json", cuda[1], cpu[1],
                            "--json", out, *extra], capture_output=True, text=True)
        doc = None
        if os.path.exists(out):
            with open(out) as f:
                doc = json.load(f)
            os.remove(out)
        return r, doc

    def test_agreement_and_tolerance(self):
        base = [[10.0, 20.0, 30.0, 40.0]] * 100
        cuda = self.eval_files("cuda", base, "cuda")
        near = [list(p) for p in base]
        near[0][0] += 1.0  # exactly the tolerance: agrees
        near[1][3] += 0.5
        r, doc = self.run_tool(cuda, self.eval_files("cpu", near, "cpu"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(doc["pass"])
        self.assertAlmostEqual(doc["eval"]["agree_pct"], 100.0)
        self.assertAlmostEqual(doc["eval"]["per_coord"]["pred_gap_x"]["max_abs"], 1.0)
        self.assertAlmostEqual(doc["eval"]["per_coord"]["pred_gap_x"]["mean_abs"], 0.01)
        # Three samples off by more than 1 px: 97% agree < 98% -> fail; --min-agree 97 passes.
        far = [list(p) for p in base]
        for i in range(3):
            far[i][2] += 1.01
        cpu = self.eval_files("cpu", far, "cpu")
        r, doc = self.run_tool(cuda, cpu)
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL (eval_agree)", r.stdout)
        self.assertEqual(doc["eval"]["worst_sample"], 0)
        r, doc = self.run_tool(cuda, cpu, "--min-agree", "97")
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_hit_rate_and_predict(self):
        pts = [[1.0, 2.0, 3.0, 4.0]] * 10
        cuda = self.eval_files("cuda", pts, "cuda", hit5=99.0)
        r, doc = self.run_tool(cuda, self.eval_files("cpu", pts, "cpu", hit5=97.5))
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL (hit_le_5px)", r.stdout)
        cpu = self.eval_files("cpu", pts, "cpu", hit5=99.0)
        r, doc = self.run_tool(cuda, cpu, "--predict", self.predict_file("c", 50.0), self.predict_file("p", 50.4))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(doc["checks"]["predict_agree"])
        r, doc = self.run_tool(cuda, cpu, "--predict", self.predict_file("c", 50.0), self.predict_file("p", 52.0))
        self.assertEqual(r.returncode, 1)
        self.assertIn("DIFFERS", r.stdout)
        self.assertFalse(doc["checks"]["predict_agree"])

    def test_bf16_floor_sets_the_bar(self):
        base = [[10.0, 20.0, 30.0, 40.0]] * 200
        cpu = self.eval_files("cpu", base, "cpu")

        def moved(k):  # the first k samples off by 4 px (a neighbouring heatmap cell)
            pts = [list(p) for p in base]
            for i in range(k):
                pts[i][1] += 4.0
            return pts
        cuda = self.eval_files("cuda", moved(8), "cuda")  # 4% disagree: beyond the plain 2% bar
        r, doc = self.run_tool(cuda, cpu)
        self.assertEqual(r.returncode, 1)
        self.assertAlmostEqual(doc["allowed_disagree_pct"], 2.0)
        # Rounding alone moves 3 of 200 (1.5%): CUDA may disagree on 3 x 1.5 = 4.5% -> 8 of 200 pass.
        floor_csv = self.eval_files("floor", moved(3), "cpu")[0]
        r, doc = self.run_tool(cuda, cpu, "--floor-csv", floor_csv)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertAlmostEqual(doc["floor"]["agree_pct"], 98.5)
        self.assertAlmostEqual(doc["allowed_disagree_pct"], 4.5)
        self.assertEqual(doc["floor_factor"], 3.0)
        self.assertIn("bf16 floor", r.stdout)
        # Against a floor of 2 of 200 (1%): 3% allowed, 8 of 200 fail; a larger factor is the user's call.
        floor_csv = self.eval_files("floor", moved(2), "cpu")[0]
        r, doc = self.run_tool(cuda, cpu, "--floor-csv", floor_csv)
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL (eval_agree)", r.stdout)
        r, doc = self.run_tool(cuda, cpu, "--floor-csv", floor_csv, "--floor-factor", "4")
        self.assertEqual(r.returncode, 0, r.stdout)
        # A floor that never disagrees leaves the plain bar.
        r, doc = self.run_tool(cuda, cpu, "--floor-csv", self.eval_files("floor", base, "cpu")[0])
        self.assertEqual(r.returncode, 1)
        self.assertAlmostEqual(doc["allowed_disagree_pct"], 2.0)
        # A floor over other samples is an error that names it.
        r, _ = self.run_tool(cuda, cpu, "--floor-csv", self.eval_files("floor", base[:5], "cpu")[0])
        self.assertEqual(r.returncode, 1)
        self.assertIn("floor: the two eval CSVs hold different samples", r.stderr)
        r, _ = self.run_tool(cuda, cpu, "--floor-csv", floor_csv, "--floor-factor", "0")
        self.assertEqual(r.returncode, 2)

    def test_errors(self):
        pts = [[1.0, 2.0, 3.0, 4.0]] * 3
        cuda = self.eval_files("cuda", pts, "cuda")
        r, _ = self.run_tool(cuda, self.eval_files("cpu", pts[:2], "cpu"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("different samples", r.stderr)
        r, _ = self.run_tool(self.eval_files("cpu2", pts, "cpu"), cuda)
        self.assertEqual(r.returncode, 1)
        self.assertIn("expected cuda then cpu", r.stderr)
        with open(self.path("bad.csv"), "w") as f:
            f.write("sample,pred_gap_x\n0,1\n")
        r, _ = self.run_tool((self.path("bad.csv"), cuda[1]), self.eval_files("cpu", pts, "cpu"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing columns", r.stderr)
        r, _ = self.run_tool(cuda, self.eval_files("cpu", pts, "cpu"), "--tol-px", "0")
        self.assertEqual(r.returncode, 2)  # argparse usage error


if __name__ == "__main__":
    unittest.main()
