#!/usr/bin/env python3
"""Tests of the LibTorch baseline (tools/baselines/libtorch_baseline.cpp and lt_*): built with CMake
against the LibTorch of the running Python's torch (cached under the temp folder, rebuilt when a
source is newer), then its --check-dir self-check against the Python model, loss and recipe steps
and its command line against the JSON schema. Skipped without torch, numpy or CMake.

    python3 -m unittest tests/baselines/test_libtorch_baseline.py -v
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_support import BASE, ENV1, HAVE_TORCH, needs_torch, np, read_text, shards, torch  # noqa: E402

import bench_schema  # noqa: E402


def _libtorch_binary():
    """A libtorch_baseline built from the current sources, or None (why printed by the caller)."""
    env = os.environ.get("LIBTORCH_BASELINE_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    if not HAVE_TORCH or not shutil.which("cmake"):
        return None
    build = os.path.join(tempfile.gettempdir(), "slidefuse_test_libtorch_baseline")
    exe = os.path.join(build, "libtorch_baseline")
    srcs = glob.glob(os.path.join(BASE, "*.cpp")) + glob.glob(os.path.join(BASE, "*.h")) + [os.path.join(BASE, "CMakeLists.txt")]
    if os.access(exe, os.X_OK) and os.path.getmtime(exe) >= max(map(os.path.getmtime, srcs)):
        return exe
    r = subprocess.run(["cmake", "-S", BASE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        "-DCMAKE_PREFIX_PATH=" + torch.utils.cmake_prefix_path], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    r = subprocess.run(["cmake", "--build", build, "-j", "2"], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("libtorch_baseline does not build:\n" + (r.stdout + r.stderr)[-3000:])
    return exe


@needs_torch
class LibTorchBaselineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exe = _libtorch_binary()
        if not cls.exe:
            raise unittest.SkipTest("no CMake / LibTorch to build tools/baselines/libtorch_baseline")

    def test_check_dir_matches_python_model_loss_and_steps(self):
        import loss_vec
        import sider_ref
        import torch_baseline as tb
        n, h, w, seed = 2, 32, 64, 7
        for variant in ("sider", "corrected"):
            with self.subTest(variant=variant), tempfile.TemporaryDirectory() as d:
                pix, lab = shards.synthetic_batch(n, h, w, 1, seed=3)
                b = tb.device_batch(pix, lab, "cpu")
                x = tb.preprocess(b["pixels"], b["rect"], channels_last=False)
                x.numpy().astype("<f4").tofile(os.path.join(d, "input.f32"))
                lab.tofile(os.path.join(d, "labels.bin"))
                pix.tofile(os.path.join(d, "pixels.u8"))
                r = subprocess.run([self.exe, "--check-dir", d, "--batch-sizes", str(n), "--height", str(h),
                                    "--width", str(w), "--seed", str(seed), "--loss-variant", variant],
                                   capture_output=True, text=True, env=ENV1)
                self.assertEqual(r.returncode, 0, r.stderr)
                # the C++ preprocessing of the same pixels and rectangles, bit for bit
                pre = np.fromfile(os.path.join(d, "preprocessed.f32"), "<f4").reshape(n, 2, h, w)
                np.testing.assert_array_equal(pre, x.numpy())
                # state_dict names, shapes, kinds and order (the tsv) and the initial values
                rows = [l.split("\t") for l in read_text(os.path.join(d, "params.tsv")).splitlines()]
                tsv = sider_ref.read_state_dict_tsv()
                if tsv is not None:
                    self.assertEqual([tuple(r_[:3]) for r_ in rows],
                                     [(nm, "scalar" if s == () else "x".join(map(str, s)), k) for nm, s, k in tsv])
                m = sider_ref.build_model(2)
                sider_ref.init_weights(m, seed)
                sd = m.state_dict()
                self.assertEqual([r_[0] for r_ in rows], list(sd))
                for r_ in rows:
                    t = sd[r_[0]].double()
                    self.assertAlmostEqual(float(r_[3]), float(t.sum()), delta=1e-12 * max(1.0, float(t.abs().sum())))
                    self.assertAlmostEqual(float(r_[4]), float((t * t).sum()), delta=1e-12 * max(1.0, float((t * t).sum())))
                # fp32 forward (one thread each: the same kernels give the same bits)
                m.train()
                logits, _ = m(x)
                for k, v in logits.items():
                    c = torch.from_numpy(np.fromfile(os.path.join(d, "logits_%s.f32" % k), "<f4")).reshape(v.shape)
                    self.assertLess(float((c - v).norm() / v.norm()), 1e-6, k)
                terms = loss_vec.loss(logits, x, b, variant)
                cl = dict(l.split("\t") for l in read_text(os.path.join(d, "loss.tsv")).splitlines())
                for k in terms:
                    self.assertLess(abs(float(cl[k]) - float(terms[k])), 1e-5 * max(1.0, abs(float(terms[k]))), k)
                terms["total"].backward()
                params = dict(m.named_parameters())
                total = math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in params.values()))
                for line in read_text(os.path.join(d, "grads.tsv")).splitlines():
                    name, _, norm = line.split("\t")
                    g = float(params[name].grad.double().norm())
                    # biases feeding a BatchNorm have a zero gradient up to rounding: absolute floor
                    self.assertLess(abs(float(norm) - g), 1e-4 * g + 1e-9 * total, name)
                # three recipe steps on this batch, fp32 and bf16 autocast + channels_last
                steps = [l.split("\t") for l in read_text(os.path.join(d, "steps.tsv")).splitlines()]
                for mode, cpp_mode, tol in (("eager_fp32", "fp32", 1e-4), ("eager_bf16_cl", "bf16_cl", 5e-2)):
                    mm = tb.build_model("cpu", tb.MODES[mode]["channels_last"], seed=seed)
                    tr = tb.Trainer(mm, mode, "cpu", variant)
                    want = [float(s[2]) for s in steps if s[0] == cpp_mode]
                    for i in range(3):
                        xi = x.contiguous(memory_format=torch.channels_last) if tb.MODES[mode]["channels_last"] else x
                        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=tb.MODES[mode]["amp"]):
                            li, _ = mm(xi)
                        t = loss_vec.loss({k: v.float() for k, v in li.items()}, xi, b, variant)
                        tr.opt.zero_grad(set_to_none=True)
                        t["total"].backward()
                        torch.nn.utils.clip_grad_norm_(tr.params, 1.0)
                        tr.opt.step()
                        self.assertLess(abs(float(t["total"]) - want[i]), tol * abs(want[i]), (mode, i))

    def test_cli_writes_schema_valid_json(self):
        with tempfile.TemporaryDirectory() as d:
            data = os.path.join(d, "data")
            os.mkdir(data)
            pix, lab = shards.synthetic_batch(3, 32, 64, 1, seed=9)
            shards.write_shard(os.path.join(data, "s.sfshard"), pix, lab, quant4=True)
            for mode, src in (("bf16_cl", ["--synthetic"]), ("fp32", ["--data", data])):
                out = os.path.join(d, mode + ".json")
                r = subprocess.run([self.exe, "--mode", mode, "--device", "cpu", "--batch-sizes", "2,3", "--height", "32",
                                    "--width", "64", "--steps", "2", "--warmup", "1", "--pool", "2", "--json", out,
                                    "--commit", "abc"] + src, capture_output=True, text=True, env=ENV1)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                with open(out) as f:
                    rep = json.load(f)
                self.assertEqual(bench_schema.validate(rep), [])
                self.assertEqual((rep["tool"], rep["commit"]), ("libtorch-" + mode, "abc"))
                self.assertEqual([x["batch"] for x in rep["runs"]], [2, 3])
                self.assertTrue(all(x["status"] == "ok" for x in rep["runs"]))
            r = subprocess.run([self.exe, "--mode", "nope"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("--mode: bf16_cl or fp32, got 'nope'", r.stderr)


if __name__ == "__main__":
    unittest.main()
