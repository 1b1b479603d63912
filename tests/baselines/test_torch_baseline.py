#!/usr/bin/env python3
"""Tests of tools/baselines/torch_baseline.py (stdlib unittest; pytest also collects them): tiny CPU
runs of every mode (schema-valid JSON, the record of which optimizer ran and, for torch.compile, of
its warm-up and graph counters), one recipe step against the reference by hand, the optimizer
choice, the CUDA-graph skip log. Needs torch and numpy (skipped without); torch.compile needs
torch >= 2.0 (the compiled mode's run is then checked as "skipped").

    /usr/bin/python3 -m unittest tests/baselines/test_torch_baseline.py -v
"""
import json
import logging
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_support import BASE, ENV1, HAVE_TORCH, needs_torch, shards, torch  # noqa: E402

import bench_schema  # noqa: E402


@needs_torch
class TorchBaselineTest(unittest.TestCase):
    def _run(self, mode, extra, d):
        out = os.path.join(d, mode + ".json")
        cmd = [sys.executable, os.path.join(BASE, "torch_baseline.py"), "--mode", mode, "--device", "cpu",
               "--batch-sizes", "2", "--height", "32", "--width", "64", "--steps", "2", "--warmup", "1",
               "--pool", "2", "--json", out] + extra
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV1)
        return r, out

    def test_every_mode_writes_schema_valid_json(self):
        import torch_baseline as tb
        with tempfile.TemporaryDirectory() as d:
            data = os.path.join(d, "data")
            os.mkdir(data)
            pix, lab = shards.synthetic_batch(3, 32, 64, 1, seed=9)
            shards.write_shard(os.path.join(data, "s.sfshard"), pix, lab)
            for mode, extra in (("eager_fp32", ["--data", data]), ("eager_bf16_cl", ["--synthetic"]),
                                ("compile_max_autotune", ["--data", data])):
                with self.subTest(mode=mode):
                    r, out = self._run(mode, extra, d)
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    with open(out) as f:
                        rep = json.load(f)
                    self.assertEqual(bench_schema.validate(rep), [])
                    self.assertEqual(rep["tool"], "pytorch-" + mode)
                    run = rep["runs"][0]
                    self.assertEqual((run["batch"], run["height"], run["width"], run["channels"], run["mode"]),
                                     (2, 32, 64, 2, mode))
                    if mode == "compile_max_autotune" and tb.compile_unavailable_reason():
                        self.assertEqual(run["status"], "error")
                        self.assertTrue(run["error"].startswith("skipped: torch.compile is not available"))
                    else:
                        self.assertEqual(run["status"], "ok", run.get("error"))
                        self.assertEqual(run["timed_steps"], 2)
                        self.assertIsNone(run["peak_mem_bytes"])  # CPU
                        self.assertEqual(run["extra"]["optimizer"], "AdamW for-loop")  # CPU: torch's default
                    if mode == "compile_max_autotune" and run["status"] == "ok":
                        # the whole step compiled: model and loss one graph each, nothing recompiled
                        x = run["extra"]
                        self.assertEqual((x["graph_breaks"], x["graphs"], x["frames"]), (0, 2, 2), x)
                        self.assertEqual(len(x["warmup_s"]), 1)
                        self.assertIn("warm-up step 1/1 took", r.stderr)
            r, out = self._run("eager_fp32", ["--data", data, "--height", "64"], d)
            with open(out) as f:
                run = json.load(f)["runs"][0]
            self.assertEqual(run["status"], "error")
            self.assertIn("shards are 32x64, the benchmark input is 64x64", run["error"])
            self.assertEqual(r.returncode, 1)

    def test_trainer_step_equals_reference_loss_and_adamw(self):
        import sider_ref
        import torch_baseline as tb
        pix, lab = shards.synthetic_batch(2, 32, 64, 1, seed=2)
        b = tb.device_batch(pix, lab, "cpu")
        model = tb.build_model("cpu", channels_last=False, seed=3)
        tr = tb.Trainer(model, "eager_fp32", "cpu", loss_dtype=torch.float64)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        terms = tr.step(b)
        # the same forward and the reference loss by hand
        ref_model = sider_ref.build_model(2)
        ref_model.load_state_dict(before)
        x = tb.preprocess(b["pixels"], b["rect"], channels_last=False)
        logits, _ = ref_model.train()(x)
        ref = sider_ref.loss({k: v.double() for k, v in logits.items()}, x.double(), shards.label_arrays(lab), "sider")
        self.assertAlmostEqual(float(terms["total"]), float(ref["total"]), delta=1e-9 * abs(float(ref["total"])))
        ref["total"].backward()
        opt = torch.optim.AdamW(ref_model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
        torch.nn.utils.clip_grad_norm_(ref_model.parameters(), 1.0)
        opt.step()
        got = model.state_dict()
        for k, v in ref_model.state_dict().items():
            if v.is_floating_point():
                want, have = (v - before[k]).double(), (got[k] - before[k]).double()  # the step's update
                self.assertLessEqual(float((want - have).norm()), 1e-4 * float(want.norm()) + 1e-12, k)
            else:
                self.assertTrue(torch.equal(v, got[k]), k)
        self.assertGreater(float((got["stem.conv1.conv.weight"] - before["stem.conv1.conv.weight"]).norm()), 0)


@needs_torch
class OptimizerChoiceTest(unittest.TestCase):
    def test_cpu_parameters_keep_the_default_and_fused_can_be_forced(self):
        import torch_baseline as tb
        model = torch.nn.Linear(3, 2)
        self.assertFalse(tb.fused_adamw_available(model.parameters()))
        opt = tb.make_optimizer(model)
        self.assertFalse(opt.defaults.get("fused"))
        self.assertEqual(tb.optimizer_name(opt), "AdamW for-loop")
        self.assertEqual(tb.optimizer_name(torch.optim.AdamW(model.parameters(), foreach=True)), "AdamW foreach")
        g = opt.param_groups[0]
        self.assertEqual((g["lr"], g["betas"], g["eps"], g["weight_decay"]), (3e-4, (0.9, 0.999), 1e-8, 0.05))
        try:  # torch's fused AdamW on the CPU needs torch >= 2.4
            forced = tb.make_optimizer(model, fused=True)
        except (RuntimeError, TypeError, ValueError):
            return
        self.assertEqual(tb.optimizer_name(forced), "AdamW fused")

    @unittest.skipUnless(HAVE_TORCH and torch.cuda.is_available(), "needs a CUDA device")
    def test_cuda_parameters_get_the_fused_kernels(self):  # pragma: no cover (no GPU in CI)
        import torch_baseline as tb
        model = torch.nn.Linear(3, 2).cuda()
        self.assertTrue(tb.fused_adamw_available(model.parameters()))
        self.assertEqual(tb.optimizer_name(tb.make_optimizer(model)), "AdamW fused")


@needs_torch
class CudagraphSkipLogTest(unittest.TestCase):
    def test_collects_inductors_skip_warnings_only_while_installed(self):
        import torch_baseline as tb
        log = logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs")
        h = tb.CudagraphSkipLog()
        with h:
            log.warning("skipping cudagraphs due to mutated inputs (2 instances)")
            log.warning("skipping cudagraphs due to mutated inputs (2 instances)")  # once
            log.warning("something else")
            logging.getLogger("torch._inductor").warning("skipping cudagraphs due to %s", "cpu device")
        log.warning("skipping cudagraphs due to after removal")
        self.assertEqual(h.reasons, ["skipping cudagraphs due to mutated inputs (2 instances)",
                                     "skipping cudagraphs due to cpu device"])


if __name__ == "__main__":
    unittest.main()
