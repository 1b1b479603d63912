#!/usr/bin/env python3
"""Tests of tools/compare.py and its report side (tools/baselines/compare_report.py) on canned
reports and fake runners: rows, speedups, the markdown table and "How the baselines ran", the
--from-json command line, the runners' order and the deadline's time limits. Standard library only.

    python3 -m unittest tests/baselines/test_compare.py -v
"""
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(REPO, "tools", "baselines")
sys.path.insert(0, BASE)
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_schema  # noqa: E402
import compare  # noqa: E402
import compare_report  # noqa: E402
from canned import canned_report  # noqa: E402


class CompareTest(unittest.TestCase):
    """compare.py's arithmetic on canned reports (no torch involved)."""

    def setUp(self):
        # slidefuse: 10 ms at batch 128 (12,800 samples/s), 18 ms at 256.
        self.sf = canned_report("slidefuse", {128: [10.0, 10.0, 10.0], 256: [18.0, 20.0, 19.0]}, mode="graph")
        # eager bf16: 25 ms (5,120/s) and 50 ms (5,120/s); compile: 12.5 ms and OOM at 256.
        self.eager = canned_report("pytorch-eager_bf16_cl", {128: [25.0, 25.0], 256: [50.0, 50.0, 40.0, 60.0]},
                                   mode="eager_bf16_cl")
        self.comp = canned_report("pytorch-compile_max_autotune", {128: [12.5], 256: None}, mode="compile_max_autotune")

    def test_speedups(self):
        rows = compare_report.collect_rows([self.sf, self.eager, self.comp])
        sp = compare_report.speedups(rows)
        self.assertAlmostEqual(sp[("pytorch-eager_bf16_cl", 128)], 2.5)
        self.assertAlmostEqual(sp[("pytorch-eager_bf16_cl", 256)], 50.0 / 19.0)
        self.assertAlmostEqual(sp[("pytorch-compile_max_autotune", 128)], 1.25)
        self.assertNotIn(("pytorch-compile_max_autotune", 256), sp)  # OOM: no ratio
        self.assertFalse(any(compare_report.is_slidefuse(t) for t, _ in sp))

    def test_markdown_rows(self):
        combined = compare_report.build_combined(
            [{"runner": "slidefuse", "status": "ok", "report": self.sf},
             {"runner": "eager_bf16_cl", "status": "ok", "report": self.eager},
             {"runner": "compile_max_autotune", "status": "ok", "report": self.comp},
             {"runner": "libtorch", "status": "failed", "error": "building libtorch_baseline failed (rc 1)"}],
            {"height": 256, "width": 512, "steps": 50, "warmup": 10, "device": "cuda", "data_desc": "shards"},
            date="2026-11-21T10:00:00Z", commit="abc123")
        md = compare_report.render_markdown(combined)
        self.assertIn("| slidefuse | graph | 128 | 12,800.0 | 10.000 (10.000–10.000) | 1.00 | — | ok |", md)
        self.assertIn("| pytorch-eager_bf16_cl | eager_bf16_cl | 128 | 5,120.0 | 25.000 (25.000–25.000) | 1.00 | 2.50x | ok |",
                      md)
        self.assertIn("| pytorch-compile_max_autotune | compile_max_autotune | 256 | — | — | — | — | "
                      "oom: CUDA out of memory |", md)
        self.assertIn("| 128 | 1.25x | 2.50x |", md)  # speedup matrix, baselines sorted by name
        self.assertIn("| 256 | — | 2.63x |", md)
        self.assertIn("`libtorch`: failed — building libtorch_baseline failed (rc 1)", md)
        self.assertIn("NVIDIA H100 80GB HBM3", md)
        self.assertEqual(combined["gpu"], "NVIDIA H100 80GB HBM3")
        self.assertIn("CUDA-event", md)
        self.assertNotIn("fusion up paths", md)  # reports without the record say nothing of it
        for r in self.sf["runs"]:
            r.setdefault("extra", {})["fusion_up_order"] = "conv_first"
        self.assertIn("slidefuse ran the fusion up paths in `conv_first` order", compare_report.render_markdown(combined))

    def test_speed_targets(self):
        rows = compare_report.collect_rows([self.sf, self.eager, self.comp])
        cfg = {"height": 256, "width": 512}
        self.assertEqual(compare_report.target_lines(rows, cfg), [
            "slidefuse 12,800.0 samples/s: target 5,000 samples/s, met (256% of it)",
            "1.25x torch.compile(max-autotune): target 2.0x, not met",
            "2.50x PyTorch eager bf16 + channels_last: target 3.0x, not met"])
        self.assertEqual(compare_report.target_lines(rows, {"height": 160, "width": 320}), [])  # another size
        rows = compare_report.collect_rows([canned_report("slidefuse", {128: [64.0]}, mode="graph")])
        self.assertEqual(compare_report.target_lines(rows, cfg), [
            "slidefuse 2,000.0 samples/s: target 5,000 samples/s, not met (40% of it)",
            "2.0x torch.compile(max-autotune): not measured in this run",
            "3.0x PyTorch eager bf16 + channels_last: not measured in this run"])
        combined = compare_report.build_combined(
            [{"runner": "slidefuse", "status": "ok", "report": self.sf}], dict(cfg, steps=50, warmup=10),
            date="2026-11-21T10:00:00Z", commit="abc123")
        self.assertIn("## Against the speed targets (256x512, batch 128)\n\n- slidefuse 12,800.0 samples/s",
                      compare_report.render_markdown(combined))

    def test_how_the_baselines_ran(self):
        self.eager["runs"][0]["extra"] = {"optimizer": "AdamW fused"}
        self.comp["runs"][0]["extra"] = {
            "optimizer": "AdamW fused", "warmup_s": [312.25, 4.5, 0.2, 0.1], "graph_breaks": 1, "graphs": 3,
            "frames": 3, "cudagraph_skips": 1, "graph_break_reasons": ["Unsupported: data-dependent\nbranch"]}
        self.sf["runs"][0]["extra"] = {"optimizer": "never listed"}
        notes = compare_report.run_notes([self.sf, self.eager, self.comp])
        self.assertEqual(notes, [
            "`pytorch-eager_bf16_cl` batch 128: AdamW fused",
            "`pytorch-compile_max_autotune` batch 128: AdamW fused; warm-up steps 312.2 + 4.5 + 0.2 + ... s "
            "(4 of 10 done; the first compiles and autotunes); 3 graph(s), 1 graph break(s), "
            "1 CUDA-graph skip(s), 3 frame(s) compiled; break: Unsupported: data-dependent branch"])
        combined = compare_report.build_combined([{"runner": "eager_bf16_cl", "status": "ok", "report": self.eager}], {},
                                          date="2026-11-21T10:00:00Z", commit="abc123")
        self.assertIn("## How the baselines ran\n\n- `pytorch-eager_bf16_cl` batch 128: AdamW fused\n",
                      compare_report.render_markdown(combined))
        self.assertEqual(bench_schema.validate(self.comp), [])
        self.comp["runs"][0]["extra"] = ["not", "an", "object"]
        self.assertIn("runs[0]: 'extra' must be an object", bench_schema.validate(self.comp))

    def test_from_json_command_line_records_failures(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, rep in (("sf", self.sf), ("eager", self.eager)):
                p = os.path.join(d, name + ".json")
                with open(p, "w") as f:
                    json.dump(rep, f)
                paths.append(p)
            broken = os.path.join(d, "broken.json")
            with open(broken, "w") as f:
                json.dump({"schema": "slidefuse.bench/1", "tool": "x"}, f)
            out = os.path.join(d, "out")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rc = compare.main(["--from-json"] + paths + [broken, "--out-dir", out, "--date", "2026-11-21"])
            self.assertEqual(rc, 0)
            stem = os.path.join(out, "2026-11-21-nvidia-h100-80gb-hbm3")
            with open(stem + ".json") as f:
                combined = json.load(f)
            self.assertEqual(combined["schema"], "slidefuse.compare/1")
            self.assertEqual([x["status"] for x in combined["runners"]], ["ok", "ok", "failed"])
            self.assertIn("missing top-level key 'device'", combined["runners"][2]["error"])
            with open(stem + ".md") as f:
                self.assertIn("2.50x", f.read())
            try:
                import matplotlib  # noqa: F401
                self.assertTrue(os.path.getsize(stem + ".png") > 1000)
            except ImportError:
                self.assertFalse(os.path.exists(stem + ".png"))
                self.assertIsNone(combined["chart"])

    def test_budget_cuts_runner_timeouts_at_the_deadline(self):
        now = [100.0]
        b = compare.Budget(420, deadline=600, start=100.0, clock=lambda: now[0])
        self.assertEqual(b.next_timeout(), 420)  # --timeout binds first
        now[0] += 300  # 300 s left: minus the reserve for the outputs
        self.assertEqual(b.next_timeout(), 300 - compare.DEADLINE_RESERVE_S)
        now[0] += 600 - 300 - compare.DEADLINE_RESERVE_S - compare.MIN_RUNNER_S
        self.assertEqual(b.next_timeout(), compare.MIN_RUNNER_S)
        now[0] += 1
        self.assertIsNone(b.next_timeout())  # too little left: not started
        self.assertEqual(compare.Budget(420).next_timeout(), 420)  # no deadline
        self.assertIsNone(compare.Budget(420).left())

    def test_runners_order_and_deadline_on_the_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "slidefuse")  # writes a canned report where --json says
            with open(fake, "w") as f:
                f.write("#!%s\nimport json, sys\nsys.path.insert(0, %r)\nimport bench_schema\n"
                        "rep = bench_schema.make_report('slidefuse', {'name': 'Fake GPU', 'driver': None, "
                        "'cuda': None, 'cudnn': None}, [bench_schema.make_run(128, 256, 512, 2, 'graph', 1, "
                        "[10.0], None)], commit='abc')\n"
                        "json.dump(rep, open(sys.argv[sys.argv.index('--json') + 1], 'w'))\n"
                        % (sys.executable, BASE))
            os.chmod(fake, 0o755)
            out = os.path.join(d, "out")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rc = compare.main(["--slidefuse", fake, "--no-build", "--synthetic", "--runners", "slidefuse",
                                   "--skip", "libtorch", "--deadline", "300", "--out-dir", out, "--date",
                                   "2026-11-28", "--work-dir", os.path.join(d, "work")])
            self.assertEqual(rc, 0)
            with open(os.path.join(out, "2026-11-28-fake-gpu.json")) as f:
                combined = json.load(f)
            got = [(x["runner"], x["status"], x.get("error")) for x in combined["runners"]]
            self.assertEqual(got, [("slidefuse", "ok", None), ("eager_fp32", "skipped", "not in --runners"),
                                   ("eager_bf16_cl", "skipped", "not in --runners"),
                                   ("compile_max_autotune", "skipped", "not in --runners"),
                                   ("libtorch", "skipped", "--skip")])
            self.assertEqual((combined["config"]["runners"], combined["config"]["deadline"]), (["slidefuse"], 300))
        for bad, msg in ((["--runners", "slidefuse,nope"], "--runners: each of"),
                         (["--runners", "slidefuse,slidefuse"], "--runners: each of"),
                         (["--deadline", "20"], "--deadline: at least 45 s")):
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit):
                compare.main(bad)
            self.assertIn(msg, err.getvalue())

    def test_a_runner_killed_at_its_limit_says_so(self):
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
            cmd = [sys.executable, "-c", "import time; print('compiling', flush=True); time.sleep(20)"]
            res = compare.run_one("compile_max_autotune", cmd, argparse.Namespace(timeout=600), d, timeout=1)
        self.assertEqual((res["status"], res["returncode"]), ("failed", 124))
        self.assertTrue(res["error"].startswith("killed at its time limit (1 s), no report; log tail: compiling"),
                        res["error"])

    def test_unknown_skip_is_an_error(self):
        with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit):
            compare.main(["--skip", "nonsense"])
        self.assertIn("unknown runner(s) nonsense", err.getvalue())


if __name__ == "__main__":
    unittest.main()
