"""Data-parallel training on the CPU backend under mpirun (docs/DISTRIBUTED.md), end to end.

Two ranks of batch b against one process of batch b with gradient accumulation 2 over the same
samples; weights identical across ranks; a resume of a 2-rank run against an uninterrupted one; a
stop signal on one rank; a rank that is killed, raises, hangs or diverges. Needs SLIDEFUSE_BIN (the
executable, with libslidefuse_mpi.so next to it), SF_SOURCE_DIR and Open MPI's mpirun on PATH.
Checkpoints are read with the standard library (safetensors: 8-byte header length, JSON, raw data).
"""
import array
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest

BIN = os.environ.get("SLIDEFUSE_BIN", "")
SRC = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SMOKE = os.path.join(SRC, "configs", "cpu_smoke.yaml")

# 8 fixed samples, batch 2: one process with accumulation 2 and two ranks both take 2 steps per
# epoch; 3 epochs; a checkpoint every epoch; validation at the end only (4 val samples per rank pair).
COMMON = ["data.num_samples=8", "sched.epochs=3", "train.max_steps=6", "checkpoints.save_interval=1",
          "checkpoints.keep_last=10", "eval.eval_interval=3"]


def mpirun(n):
    cmd = ["mpirun", "-np", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        arr = array.array("f" if t["dtype"] == "F32" else "q")
        arr.frombytes(data[a:b])
        tensors[name] = arr
    return meta, tensors


def is_buffer(name):
    return name.endswith(("running_mean", "running_var", "num_batches_tracked"))


def rel_l2(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(x * x for x in a)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "validation" not in j:
                out[j["step"]] = j
    return out


@unittest.skipUnless(BIN and os.path.exists(BIN), "SLIDEFUSE_BIN not set")
@unittest.skipUnless(shutil.which("mpirun"), "mpirun not on PATH")
class DataParallelCpu(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sf_dist_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def train(self, name, ranks, extra=(), env=None, resume=False, timeout=300):
        out = os.path.join(self.dir, name)
        cmd = (mpirun(ranks) if ranks > 1 else []) + [BIN, "train", "--config", SMOKE, "--out", out]
        if resume:
            cmd += ["--resume", "auto"]
        cmd += COMMON + list(extra)
        e = dict(os.environ)
        e.update(env or {})
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
        return p, time.monotonic() - t0, out

    def ckpt(self, out, step):
        return os.path.join(out, "checkpoints", "ckpt-%08d.safetensors" % step)

    def assert_ok(self, p):
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])

    def test_two_ranks_match_one_process_with_accumulation_2(self):
        p2, _, out2 = self.train("w2", 2)
        self.assert_ok(p2)
        p1, _, out1 = self.train("w1", 1, ["train.gradient_accumulation_steps=2"])
        self.assert_ok(p1)
        _, t2 = read_safetensors(self.ckpt(out2, 6))
        _, t1 = read_safetensors(self.ckpt(out1, 6))
        self.assertEqual(sorted(t1), sorted(t2))
        worst, bitwise = 0.0, True
        for name in t1:
            if is_buffer(name):  # BN running statistics: rank 0's batches only (as DDP), not comparable
                continue
            bitwise = bitwise and t1[name] == t2[name]
            worst = max(worst, rel_l2(t1[name], t2[name]))
        print("\n2 ranks x batch 2 vs 1 process x batch 2 x accumulation 2, 6 steps: weights and AdamW state "
              "max relative L2 difference %.3g, bitwise equal: %s" % (worst, bitwise))
        self.assertLessEqual(worst, 1e-6)
        l1, l2 = losses(out1), losses(out2)
        self.assertEqual(sorted(l1), list(range(1, 7)))
        for step in l1:  # the mean loss over the same 4 samples; grad norm of the same mean gradient
            self.assertAlmostEqual(l1[step]["loss"], l2[step]["loss"], delta=1e-9 * abs(l1[step]["loss"]))
            self.assertAlmostEqual(l1[step]["grad_norm"], l2[step]["grad_norm"],
                                   delta=1e-6 * l1[step]["grad_norm"])
        # A perturbed run really differs: the comparison can fail.
        p3, _, out3 = self.train("w1_lr", 1, ["train.gradient_accumulation_steps=2", "optimizer.lr=0.0011"])
        self.assert_ok(p3)
        _, t3 = read_safetensors(self.ckpt(out3, 6))
        self.assertGreater(max(rel_l2(t1[n], t3[n]) for n in t1 if not is_buffer(n)), 1e-6)

    def compare_final_weights(self, name, ranks, dist_extra, single_extra, steps=6):
        """Max relative L2 difference per tensor, and over all tensors together, of the weights and
        AdamW state after `steps` steps (BN running statistics excluded: rank 0's batches only)."""
        limit = ["train.max_steps=%d" % steps]
        p, _, out_w = self.train(name + "_w", ranks, list(dist_extra) + limit)
        self.assert_ok(p)
        p, _, out_1 = self.train(name + "_1", 1, list(single_extra) + limit)
        self.assert_ok(p)
        _, tw = read_safetensors(self.ckpt(out_w, steps))
        _, t1 = read_safetensors(self.ckpt(out_1, steps))
        names = [n for n in t1 if not is_buffer(n)]
        worst = max(rel_l2(t1[n], tw[n]) for n in names)
        num = sum(sum((x - y) ** 2 for x, y in zip(t1[n], tw[n])) for n in names)
        den = sum(sum(x * x for x in t1[n]) for n in names)
        bitwise = all(t1[n] == tw[n] for n in names)
        print("\n%s, %d step(s): max relative L2 difference per tensor %.3g, over all tensors %.3g, bitwise "
              "equal: %s" % (name, steps, worst, math.sqrt(num / den), bitwise))
        return worst, math.sqrt(num / den)

    def test_three_ranks_and_accumulation_within_ranks(self):
        # 3 ranks x batch 2 (12 samples: 2 steps per epoch) against 1 process with accumulation 3:
        # the allreduce adds g0 + g1 + g2 in the order the single process accumulates them
        worst, _ = self.compare_final_weights("3 ranks x batch 2 vs 1 process x accumulation 3", 3,
                                              ["data.num_samples=12"],
                                              ["data.num_samples=12", "train.gradient_accumulation_steps=3"])
        self.assertLessEqual(worst, 1e-6)
        # 2 ranks x batch 2 x accumulation 2 against 1 process with accumulation 4: the sum order
        # differs ((g0 + g2) + (g1 + g3) against ((g0 + g1) + g2) + g3), so the gradients agree to fp32
        # rounding, and after one step so do the weights. Over more steps the runs drift apart
        # (docs/DISTRIBUTED.md: Adam turns the rounding noise of gradients that are zero in exact
        # arithmetic, e.g. conv biases before BatchNorm, into full-size steps).
        _, overall = self.compare_final_weights("2 ranks x batch 2 x accumulation 2 vs 1 process x accumulation 4", 2,
                                                ["sched.epochs=6", "train.gradient_accumulation_steps=2"],
                                                ["sched.epochs=6", "train.gradient_accumulation_steps=4"], steps=1)
        self.assertLessEqual(overall, 1e-6)

    def test_every_rank_holds_the_same_weights_and_a_diverged_rank_stops_the_job(self):
        p, _, out = self.train("agree", 2)
        self.assert_ok(p)
        agree = [l for l in p.stderr.splitlines() if "ranks agree after step" in l]
        self.assertEqual(len(agree), 3, p.stderr)  # one check per checkpoint: steps 2, 4, 6
        self.assertTrue(all("identical on all 2 ranks" in l for l in agree))
        # rank 1 perturbs one weight before step 3: the check at the next checkpoint (step 4) catches it
        p, _, out = self.train("diverge", 2, env={"SF_FAULT": "diverge@1:3"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("the ranks disagree on the weights after step 4", p.stderr)
        self.assertFalse(os.path.exists(self.ckpt(out, 4)))
        self.assertTrue(os.path.exists(self.ckpt(out, 2)))

    def test_stop_signal_on_one_rank_and_resume_is_bitwise(self):
        p, _, full = self.train("full", 2)
        self.assert_ok(p)
        # SIGTERM to rank 1 alone, before step 3: every rank stops after step 3, one checkpoint, exit 0
        p, _, part = self.train("part", 2, env={"SF_FAULT": "signal@1:3"})
        self.assert_ok(p)
        self.assertIn("stopped by SIGTERM on another rank after step 3", p.stdout)
        ckpts = sorted(os.listdir(os.path.join(part, "checkpoints")))
        self.assertEqual([c for c in ckpts if c.startswith("ckpt-")],
                         ["ckpt-00000002.safetensors", "ckpt-00000003.safetensors"])
        p, _, part = self.train("part", 2, resume=True)
        self.assert_ok(p)
        self.assertIn("resumed from", p.stderr)
        m_full, t_full = read_safetensors(self.ckpt(full, 6))
        m_part, t_part = read_safetensors(self.ckpt(part, 6))
        for name in t_full:  # everything, BN statistics and counters included
            self.assertEqual(t_full[name], t_part[name], name)
        self.assertEqual(m_full["run.world_size"], "2")
        lf, lp = losses(full), losses(part)
        self.assertEqual(sorted(lf), sorted(lp))
        for step in lf:
            for k in ("loss", "grad_norm", "lr"):
                self.assertEqual(lf[step][k], lp[step][k], (step, k))
        # the 2-rank checkpoint refuses a 1-process resume
        p, _, _ = self.train("part", 1, resume=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("run of 2 rank(s), this one has 1", p.stderr)

    def test_sigusr1_to_mpirun_stops_every_rank_with_one_checkpoint(self):
        # A real signal from outside: mpirun forwards SIGUSR1 to every rank.
        out = os.path.join(self.dir, "usr1")
        cmd = mpirun(2) + [BIN, "train", "--config", SMOKE, "--out", out] + COMMON + [
            "sched.epochs=100", "train.max_steps=200", "checkpoints.save_interval=1000"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        metrics = os.path.join(out, "metrics.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if os.path.exists(metrics):
                with open(metrics) as f:
                    if sum(1 for _ in f) >= 2:
                        break
            time.sleep(0.05)
        p.send_signal(signal.SIGUSR1)
        stdout, stderr = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, stdout[-2000:] + stderr[-2000:])
        self.assertIn("stopped by SIGUSR1 after step", stdout)
        step = int(stdout.split("stopped by SIGUSR1 after step ")[1].split(":")[0])
        self.assertGreaterEqual(step, 2)
        self.assertLess(step, 200)
        ckpts = [f for f in os.listdir(os.path.join(out, "checkpoints")) if f.startswith("ckpt-")]
        self.assertEqual(ckpts, ["ckpt-%08d.safetensors" % step])  # one checkpoint, by rank 0

    def check_failed_job(self, fault, limit_s, expect, env=None):
        e = {"SF_FAULT": fault}
        e.update(env or {})
        failed, wall, out = self.train("fail", 2, env=e, timeout=120)
        print("\n%s: exit %d after %.1f s" % (fault, failed.returncode, wall))
        self.assertNotEqual(failed.returncode, 0)
        self.assertLess(wall, limit_s)
        self.assertIn(expect, failed.stdout + failed.stderr)
        # the checkpoint of step 2 (epoch 1) is intact: a 2-rank resume loads it and finishes the run
        self.assertTrue(os.path.exists(self.ckpt(out, 2)))
        p, _, _ = self.train("fail", 2, resume=True)
        self.assert_ok(p)
        self.assertIn("resumed from", p.stderr)
        self.assertTrue(os.path.exists(self.ckpt(out, 6)))
        return failed

    def test_a_killed_rank_ends_the_job_in_seconds(self):
        self.check_failed_job("kill@1:4", 20, "rank 1")

    def test_a_rank_that_raises_ends_the_job_naming_it(self):
        self.check_failed_job("raise@1:4", 20, "[rank 1/2] SF_FAULT: an error injected before step 4")

    def test_a_hanging_rank_is_caught_by_the_watchdog(self):
        # rank 0 waits in the gradient allreduce (collective guard), rank 1 sleeps (heartbeat): either
        # watchdog may fire first
        p = self.check_failed_job("hang@1:4", 30, "SF_DIST_TIMEOUT=3 s", env={"SF_DIST_TIMEOUT": "3"})
        self.assertTrue("has waited" in p.stderr or "no training step completed" in p.stderr, p.stderr[-2000:])

    def test_single_process_commands_refuse_an_mpi_launch(self):
        p = subprocess.run(mpirun(2) + [BIN, "plan", "--height", "64", "--width", "128", "--batch", "2"],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("'slidefuse plan' runs as one process", p.stderr)
        p = subprocess.run([BIN, "plan", "--height", "64", "--width", "128", "--batch", "2"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])  # the same command without mpirun runs

    def test_ranks_share_the_cores(self):
        def threads(extra_env):
            e = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
            e.update(extra_env)
            e["SF_LOG_LEVEL"] = "info"
            p = subprocess.run(mpirun(2) + [BIN, "version"], capture_output=True, text=True, env=e, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            counts = [int(l.split("; ")[-1].split()[0]) for l in p.stderr.splitlines() if "OpenMP threads per rank" in l]
            self.assertEqual(len(counts), 2, p.stderr)
            return counts
        for n in threads({}):  # each rank a share of the node's cores (its affinity mask), at least 1
            self.assertGreaterEqual(n, 1)
            self.assertLessEqual(n, max(1, len(os.sched_getaffinity(0)) // 2))
        self.assertEqual(threads({"OMP_NUM_THREADS": "3"}), [3, 3])  # the user's setting wins

    def test_missing_plugin_is_a_clear_error(self):
        p, wall, _ = self.train("noplugin", 2, env={"SF_MPI_PLUGIN": "/nonexistent/libslidefuse_mpi.so"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("the MPI plugin could not be loaded", p.stderr)


if __name__ == "__main__":
    unittest.main()
