"""Tests of tools/scaling_model.py (stdlib only): the formula against hand-computed cases, the
gradient size against the state_dict, --from-bench on bench records, and the bad-input errors.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "scaling_model.py")
TSV = os.path.join(ROOT, "tests", "data", "sider_state_dict.tsv")

_spec = importlib.util.spec_from_file_location("scaling_model", SCRIPT)
sm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sm)


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def bench_run(batch, median, mode="graph", status="ok"):
    # The fields tools/bench_report.cpp run_json() writes that the model reads.
    return {"batch": batch, "height": 256, "width": 512, "channels": 2, "mode": mode, "warmup_steps": 10,
            "timed_steps": 50, "timings_ms": [median] * 50, "median_ms": median if status == "ok" else None,
            "status": status, "samples_per_s": batch * 1000.0 / median}


def bench_doc(runs):
    return {"schema": "slidefuse.bench/1", "tool": "slidefuse", "commit": "unknown", "date": "2026-11-24T00:00:00Z",
            "device": {"name": "NVIDIA H100 80GB HBM3", "driver": None, "cuda": None, "cudnn": None}, "runs": runs}


class Formula(unittest.TestCase):
    def test_self_test_passes(self):
        rc, out, err = run("--self-test")
        self.assertEqual(rc, 0, err)
        self.assertIn("self-test: ok", out)

    def test_self_test_catches_a_wrong_constant(self):
        saved = copy.deepcopy(sm.NCCL_RING_SIMPLE)
        try:
            sm.NCCL_RING_SIMPLE["base_us"] = 9.4  # one microsecond off
            self.assertTrue(sm.self_test())
        finally:
            sm.NCCL_RING_SIMPLE.clear()
            sm.NCCL_RING_SIMPLE.update(saved)
        self.assertEqual(sm.self_test(), [])

    def test_one_node_reduces_to_two_n_minus_one_alphas(self):
        # 8 ranks, 1e9 bytes at 100 GB/s: 2*7/8 * 1e9 / 1e5 = 17500 us; latency 8.4 + 14 * 3.4 = 56 us.
        self.assertAlmostEqual(sm.allreduce_us(1e9, 8, 100.0, sm.ring_latency_us(8, 1, 3.4)), 17556.0, places=6)

    def test_multi_node_latency(self):
        # 64 ranks on 8 nodes: 126 steps, 14 of them between nodes: 1.4 * (8.4 + 112*3.4 + 14*14).
        self.assertAlmostEqual(sm.ring_latency_us(64, 8, 3.4), 1.4 * (8.4 + 112 * 3.4 + 14 * 14.0), places=9)

    def test_gradient_size_matches_state_dict(self):
        self.assertEqual(sm.padded_floats_from_tsv(TSV), sm.GRAD_FLOATS)
        self.assertEqual(sm.grad_bytes("fp32"), 13137664)
        self.assertEqual(sm.grad_bytes("bf16"), 13137664 // 2)

    def test_json_efficiency_is_t_over_t_plus_allreduce(self):
        rc, out, err = run("--step-ms", "40", "--world", "8,64", "--links", "nvlink4,eth100", "--json")
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["grad_bytes"], 13137664)
        rows = [c for c in doc["cases"] if c["applicable"]]
        self.assertEqual({(c["link"], c["world"]) for c in rows}, {("nvlink4", 8), ("eth100", 8), ("eth100", 64)})
        for c in rows:
            self.assertAlmostEqual(c["efficiency_no_overlap"], 40.0 / (40.0 + c["allreduce_ms"]), places=12)
            self.assertEqual(c["efficiency_ideal_overlap"], 1.0)  # t < T in every row here
        na = [c for c in doc["cases"] if not c["applicable"]]
        self.assertEqual([(c["link"], c["world"]) for c in na], [("nvlink4", 64)])

    def test_bf16_halves_the_bandwidth_term_only(self):
        a = sm.link_case("eth100", 64, 8)
        t32 = sm.allreduce_us(sm.grad_bytes("fp32"), 64, a[1], a[2])
        t16 = sm.allreduce_us(sm.grad_bytes("bf16"), 64, a[1], a[2])
        self.assertAlmostEqual(t32 - a[2], 2 * (t16 - a[2]), places=6)


class FromBench(unittest.TestCase):
    def write(self, doc):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def test_single_run(self):
        path = self.write(bench_doc([bench_run(128, 87.5), bench_run(512, 1.0, status="oom")]))
        ms, src = sm.step_ms_from_bench(path)
        self.assertEqual(ms, 87.5)
        self.assertEqual((src["batch"], src["mode"], src["device"]), (128, "graph", "NVIDIA H100 80GB HBM3"))
        rc, out, err = run("--from-bench", path, "--json")
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["step_times_ms"], [87.5])
        self.assertIn("measured", doc["step_source"])

    def test_several_runs_need_batch(self):
        path = self.write(bench_doc([bench_run(64, 40.0), bench_run(128, 80.0), bench_run(128, 95.0, mode="eager")]))
        rc, _, err = run("--from-bench", path)
        self.assertEqual(rc, 1)
        self.assertIn("3 successful runs match", err)
        self.assertIn("batch 64 graph", err)
        self.assertEqual(sm.step_ms_from_bench(path, batch=64)[0], 40.0)
        self.assertEqual(sm.step_ms_from_bench(path, batch=128, mode="graph")[0], 80.0)
        with self.assertRaisesRegex(sm.ModelError, "no successful run matches"):
            sm.step_ms_from_bench(path, batch=256)

    def test_bad_records(self):
        cases = [("not json", "not JSON"), (json.dumps({"schema": "other"}), "schema is 'other'"),
                 (json.dumps({"schema": "slidefuse.bench/1", "runs": {}}), "runs: expected an array"),
                 (json.dumps(bench_doc([bench_run(8, 1.0, status="error")])), "no successful run matches")]
        for text, msg in cases:
            with self.subTest(msg=msg):
                rc, _, err = run("--from-bench", self.write(text))
                self.assertEqual(rc, 1)
                self.assertIn(msg, err)
                self.assertEqual(len(err.strip().splitlines()), 1)
        bad = bench_doc([bench_run(8, 1.0)])
        bad["runs"][0]["median_ms"] = -3
        with self.assertRaisesRegex(sm.ModelError, "median_ms is -3"):
            sm.step_ms_from_bench(self.write(bad))
        rc, _, err = run("--from-bench", os.path.join(tempfile.mkdtemp(), "missing.json"))
        self.assertEqual(rc, 1)
        self.assertIn("cannot read", err)


class BadInputs(unittest.TestCase):
    def test_errors_name_the_option(self):
        cases = [(["--step-ms", "0"], "--step-ms"), (["--step-ms", "abc"], "--step-ms"),
                 (["--step-ms", "10", "--world", "1"], "--world"),
                 (["--step-ms", "10", "--links", "nvlink9"], "nvlink9"),
                 (["--step-ms", "10", "--grad-bytes", "0"], "--grad-bytes"),
                 (["--step-ms", "10", "--batch", "8"], "--from-bench"),
                 (["--step-ms", "10", "--gpus-per-node", "0"], "--gpus-per-node"),
                 ([], "give --step-ms")]
        for args, msg in cases:
            with self.subTest(args=args):
                rc, _, err = run(*args)
                self.assertEqual(rc, 1)
                self.assertIn(msg, err)


if __name__ == "__main__":
    unittest.main()
