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

    def test_a_difference_within_the_bases_drift_is_not_a_verdict(self):
        # The base timed again at the end of a --configs list moved by 0.4 ms: a 0.3 ms A/B with tight spreads
        # is "within drift", a 1.1 ms one keeps its verdict.
        base = record([run(128, 60.1, spread=0.05)])
        again = record([run(128, 60.5, spread=0.05)])
        drift = bench_ab.drift_by_batch(base, again)
        self.assertAlmostEqual(drift[128], 0.4)
        near = bench_ab.compare(base, "base", record([run(128, 59.8, spread=0.05, pdl=True)]), "pdl", drift)
        self.assertEqual(near["rows"][0]["verdict"], "within drift")
        self.assertAlmostEqual(near["rows"][0]["drift_ms"], 0.4)
        far = bench_ab.compare(base, "base", record([run(128, 59.0, spread=0.05, pdl=True)]), "pdl", drift)
        self.assertEqual(far["rows"][0]["verdict"], "faster")
        self.assertEqual(bench_ab.compare(base, "base", record([run(128, 59.8, spread=0.05)]), "x")["rows"][0]["verdict"],
                         "faster", "without the drift the spreads decide")
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for n, doc in (("base", base), ("again", again), ("pdl", record([run(128, 59.8, spread=0.05, pdl=True)]))):
                paths.append(os.path.join(d, n + ".json"))
                with open(paths[-1], "w") as f:
                    json.dump(doc, f)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(bench_ab.main([paths[0], paths[2], "--drift", paths[0], paths[1]]), 0)
            self.assertIn("within drift", out.getvalue())
            self.assertIn("batch 128: the GPU drifted +0.400 ms over the runs", out.getvalue())

    def test_configuration_name_is_not_a_switch(self):
        # `bench step --configs` names each record's configuration in extra.config: the A/B's switches are
        # still only what the two steps run differently.
        base = record([run(128, 60.1, config="bench_variants")])
        other = record([run(128, 59.0, config="bench_pdl", pdl=True)])
        r = bench_ab.compare(base, "bench_variants", other, "bench_pdl")
        self.assertEqual(r["switches"], {"pdl": [False, True]})
        again = record([run(128, 60.2, config="bench_variants")])
        self.assertEqual(bench_ab.compare(base, "bench_variants", again, "bench_variants_again")["switches"], {})

    def test_fused_backward_table_per_shape(self):
        # `bench step --dw-fused-bwd` records the variants line of each fused shape (GpuOps::describe()).
        lines = [
            "n128 64x128 c64->64 k3 s1 g64: dwconv variants: fwd 7 (4ch 2x4 s8x32) of [0.2398 0.1075] ms, "
            "dgrad overwrite 1 (8ch 1x4) of [0.1500 0.1200] ms, wgrad 0 (8ch 1x4 w1) of [0.2804 0.3000] ms, "
            "fused backward runs, fused overwrite 0.1800 ms",
            "n128 32x64 c128->128 k3 s1 g128: dwconv variants: fwd 0 (8ch 2x4) of [0.0609] ms, "
            "dgrad 0 (8ch 2x4) of [0.0989] ms, dgrad overwrite 0 (8ch 2x4) of [0.0900] ms, "
            "wgrad 1 (4ch 1x4 w2) of [- 0.1471] ms, fused backward runs, fused 0.1000 ms, fused overwrite 0.0950 ms",
            "n128 8x16 c512->512 k3 s1 g512: dwconv variants: fwd 0 (8ch 2x4) ms, dgrad overwrite 0 (8ch 2x4) ms, "
            "wgrad 0 (8ch 1x4 w1) ms, fused backward runs",  # deterministic: nothing timed, no row
        ]
        base = record([run(128, 60.1)])
        other = record([run(128, 57.0, dw_fused_bwd=True, dw_fused=lines)])
        r = bench_ab.compare(base, "base", other, "fused")
        self.assertEqual(r["switches"], {"dw_fused_bwd": [None, True]})  # dw_fused is an outcome, not a switch
        rows = r["fused"]["128"]
        self.assertEqual([(x["shape"].split()[1], x["mode"]) for x in rows],
                         [("64x128", "overwrite"), ("32x64", "accumulate"), ("32x64", "overwrite")])
        self.assertAlmostEqual(rows[0]["separate_ms"], 0.1200 + 0.2804)
        self.assertAlmostEqual(rows[0]["saved_ms"], 0.1200 + 0.2804 - 0.18)
        self.assertAlmostEqual(rows[1]["separate_ms"], 0.0989 + 0.1471)
        self.assertAlmostEqual(rows[2]["fused_ms"], 0.0950)
        md = bench_ab.markdown([r])
        self.assertIn("the fused depthwise backward per shape", md)
        self.assertIn("| n128 64x128 c64->64 k3 s1 g64 | overwrite | 0.1200 + 0.2804 = 0.4004 | 0.1800 | +0.2204 |", md)
        self.assertNotIn("fused", bench_ab.compare(base, "a", base, "b"))

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
