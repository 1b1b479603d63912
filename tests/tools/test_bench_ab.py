"""Tests of tools/bench_ab.py on synthetic `bench step --json` records (no GPU): the verdicts (faster,
slower, within noise), the switches that differ, the graph's node and edge counts, the warnings
(another GPU, commit, clock, a batch in one record only, a failed run), .json.gz input and the
refusal of a file that is not a bench record.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import copy
import gzip
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_ab  # noqa: E402


def run(batch, ms, spread=0.05, **extra):
    e = {"plan_seconds": 5.0, "fusion_up_order": "conv_first", "bn_row_batch": 1, "pdl": False,
         "graph_nodes": {"micro_step": {"kernels": 1589, "edges": 1709, "programmatic_edges": 0, "total": 1710},
                         "optimizer": {"kernels": 5, "total": 5}}}
    e.update(extra)
    return {"batch": batch, "mode": "graph", "status": "ok", "median_ms": ms, "p10_ms": ms - spread,
            "p90_ms": ms + spread, "samples_per_s": batch / ms * 1000.0, "extra": e,
            "nvml": {"available": True, "sm_clock_mhz_mean": 1980.0}}


def record(runs, name="NVIDIA H200", commit="abc123"):
    return {"schema": "slidefuse.bench/1", "commit": commit, "device": {"name": name, "driver": "580.159.04"},
            "runs": runs}


class TestBenchAb(unittest.TestCase):
    def test_verdicts_and_switches(self):
        base = record([run(64, 32.0), run(128, 60.1)])
        faster = record([run(64, 31.9), run(128, 59.0, pdl=True)])
        r = bench_ab.compare(base, "base", faster, "pdl")
        self.assertEqual([x["verdict"] for x in r["rows"]], ["within noise", "faster"])
        self.assertEqual(r["switches"], {"pdl": [False, True]})
        self.assertAlmostEqual(r["rows"][1]["delta_ms"], -1.1)
        self.assertAlmostEqual(r["rows"][1]["delta_pct"], -110.0 / 60.1)
        self.assertEqual(r["warnings"], [])
        slower = record([run(128, 60.3)])
        r = bench_ab.compare(base, "base", slower, "slow")
        self.assertEqual([x["verdict"] for x in r["rows"]], ["slower"])
        self.assertEqual(r["warnings"], ["batch 64 timed in base only"])

    def test_graph_counts_shown_where_they_differ(self):
        base = record([run(128, 60.1)])
        other = copy.deepcopy(base)
        other["runs"][0]["extra"]["graph_nodes"]["micro_step"]["programmatic_edges"] = 1100
        r = bench_ab.compare(base, "a", other, "b")
        self.assertEqual(r["rows"][0]["nodes"]["other"]["programmatic_edges"], 1100)
        self.assertIn('"programmatic_edges": 1100', bench_ab.markdown([r]))
        self.assertIsNone(bench_ab.compare(base, "a", copy.deepcopy(base), "c")["rows"][0]["nodes"])

    def test_warnings(self):
        base = record([run(128, 60.1)])
        other = record([run(128, 59.0)], name="NVIDIA H100 80GB HBM3", commit="def456")
        other["runs"][0]["nvml"]["sm_clock_mhz_mean"] = 1700.0
        r = bench_ab.compare(base, "a", other, "b")
        self.assertEqual(len(r["warnings"]), 3, r["warnings"])
        self.assertIn("another GPU: NVIDIA H100 80GB HBM3 against NVIDIA H200", r["warnings"])
        self.assertIn("another commit: def456 against abc123", r["warnings"])
        self.assertIn("batch 128: mean SM clock 1700 MHz against 1980 MHz", r["warnings"])
        failed = record([{"batch": 128, "status": "error", "error": "capture failed"}])
        r = bench_ab.compare(base, "a", failed, "f")
        self.assertEqual(r["rows"], [])
        self.assertEqual(r["warnings"], ["batch 128 in f: error (capture failed)"])

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "bench_variants.json.gz"), os.path.join(d, "bench_pdl.json")
            with gzip.open(a, "wt") as f:
                json.dump(record([run(128, 60.1)]), f)
            with open(b, "w") as f:
                json.dump(record([run(128, 59.0, pdl=True)]), f)
            out, md, js = io.StringIO(), os.path.join(d, "ab.md"), os.path.join(d, "ab.json")
            with redirect_stdout(out):
                self.assertEqual(bench_ab.main([a, b]), 0)
            self.assertIn("### bench_pdl.json against bench_variants.json.gz: pdl false -> true", out.getvalue())
            self.assertIn("| 128 | 60.100 (60.050-60.150) | 59.000 (58.950-59.050) | -1.100 ms (-1.8%) |",
                          out.getvalue())
            self.assertEqual(bench_ab.main([a, b, "--md", md, "--json", js]), 0)
            with open(js) as f:
                doc = json.load(f)
            self.assertEqual(doc["schema"], "slidefuse.bench_ab/1")
            self.assertEqual(doc["comparisons"][0]["rows"][0]["verdict"], "faster")
            bad = os.path.join(d, "other.json")
            with open(bad, "w") as f:
                json.dump({"schema": "slidefuse.compare/1"}, f)
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(bench_ab.main([a, bad]), 2)
            self.assertIn("not a `slidefuse bench step --json` record", err.getvalue())


if __name__ == "__main__":
    unittest.main()
