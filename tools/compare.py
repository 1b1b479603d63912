#!/usr/bin/env python3
"""One command that benchmarks slidefuse against its baselines on the same GPU and writes
docs/perf/<date>-<gpu-slug>.json (every runner's report, schema "slidefuse.bench/1"), a markdown
table (<...>.md: samples/s, ms/step, peak memory, speedup of slidefuse over each baseline) and a
bar chart (<...>.png, needs matplotlib; skipped with a message without it).

Runners, in this order (each in its own process; a failing runner is recorded, never fatal):
  slidefuse             `slidefuse bench step --batch-sizes .. --height .. --width .. --steps ..
                        --warmup .. --json PATH` (the binary is located, or built with CMake)
  eager_fp32            tools/baselines/torch_baseline.py --mode eager_fp32
  eager_bf16_cl         tools/baselines/torch_baseline.py --mode eager_bf16_cl (the original's setup)
  compile_max_autotune  tools/baselines/torch_baseline.py --mode compile_max_autotune
  libtorch              tools/baselines/libtorch_baseline (built with CMake against the LibTorch of
                        --python's torch: torch.utils.cmake_prefix_path), --mode bf16_cl

    python3 tools/compare.py                              # everything, default sizes, on cuda
    python3 tools/compare.py --skip libtorch,compile_max_autotune --batch-sizes 128
    python3 tools/compare.py --runners slidefuse,compile_max_autotune,eager_bf16_cl --deadline 570
    python3 tools/compare.py --from-json a.json b.json    # table + chart from existing reports

--runners sets which runners run and in what order (default: the order above). --deadline S
bounds the whole comparison to S seconds from its start: each runner (and build, and the data
generation) gets at most the time left minus a reserve for writing the outputs (and never more than
--timeout); a runner with less than 30 s left is not started and is recorded as skipped, so a
command with a hard limit (a GPU lease) still writes its .json/.md with whatever finished.

Data: --data DIR (a folder of *.sfshard) is given to every baseline; without it, compare.py makes
one with `slidefuse generate` (256x512) so that all baselines train on the same samples, or falls
back to --synthetic batches. slidefuse's own bench gets --slidefuse-extra (e.g. "--data DIR").
This script needs only the Python standard library (torch is used by the runners it starts).
"""
import argparse
import datetime
import glob
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "baselines"))
import bench_schema  # noqa: E402
from compare_report import build_combined, render_markdown, write_outputs  # noqa: E402

RUNNERS = ("slidefuse", "eager_fp32", "eager_bf16_cl", "compile_max_autotune", "libtorch")
TORCH_MODES = ("eager_fp32", "eager_bf16_cl", "compile_max_autotune")


# ------------------------------------------------------------------------------------------------
# Running things
# ------------------------------------------------------------------------------------------------
def run_cmd(cmd, log_path, timeout, cwd=REPO, env=None):
    """Runs cmd with stdout+stderr to log_path (echoed as it comes), killed after `timeout` s.
    Returns (returncode, seconds); 124 on timeout, 127 when it cannot be started."""
    t0 = time.time()
    print("compare: $ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    with open(log_path, "w") as log:
        try:
            p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        except OSError as e:
            log.write(str(e))
            return 127, time.time() - t0

        def pump():
            for line in p.stdout:
                log.write(line)
                log.flush()
                sys.stdout.write("  " + line)
                sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = 124
        reader.join(timeout=10)
        if rc == 124:
            log.write("\n[compare: killed after %d s]\n" % timeout)
    return rc, time.time() - t0


DEADLINE_RESERVE_S = 15  # kept back from the last runner for writing the outputs
MIN_RUNNER_S = 30  # a runner is not started with less than this left before the deadline


class Budget:
    """Per-runner time limits: --timeout each, and with --deadline never past the deadline."""

    def __init__(self, timeout, deadline=None, start=None, clock=time.time):
        self.timeout, self.deadline, self.clock = timeout, deadline, clock
        self.start = clock() if start is None else start

    def left(self):
        return None if self.deadline is None else self.deadline - (self.clock() - self.start)

    def next_timeout(self):
        """Seconds the next runner may take, or None when too little is left to start it."""
        left = self.left()
        if left is None:
            return self.timeout
        t = int(min(self.timeout, left - DEADLINE_RESERVE_S))
        return t if t >= MIN_RUNNER_S else None


def tail(path, n=2000):
    try:
        with open(path) as f:
            return f.read()[-n:]
    except OSError:
        return ""


def locate_slidefuse(explicit, build_dir, allow_build, timeout, work):
    """Path of the slidefuse binary: --slidefuse, $SLIDEFUSE_BIN, build folders of the repo
    (newest first), else a CMake build into build_dir. Returns (path or None, why not)."""
    for cand in (explicit, os.environ.get("SLIDEFUSE_BIN")):
        if cand:
            return (cand, None) if os.access(cand, os.X_OK) else (None, "%s is not an executable" % cand)
    found = [p for p in glob.glob(os.path.join(REPO, "build*", "slidefuse")) if os.access(p, os.X_OK)]
    if found:
        return max(found, key=os.path.getmtime), None
    if not allow_build:
        return None, "no slidefuse binary found under %s/build*/ (pass --slidefuse PATH or drop --no-build)" % REPO
    log = os.path.join(work, "build_slidefuse.log")
    rc, _ = run_cmd(["cmake", "-S", REPO, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"], log, timeout)
    if rc == 0:
        rc, _ = run_cmd(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 4), "--target", "slidefuse"],
                        log + ".build", timeout)
    exe = os.path.join(build_dir, "slidefuse")
    if rc != 0 or not os.access(exe, os.X_OK):
        return None, "building slidefuse failed (rc %d): %s" % (rc, tail(log + ".build") or tail(log))
    return exe, None


def locate_libtorch(args, work):
    """Builds (or reuses) tools/baselines/libtorch_baseline. Returns (path or None, why not)."""
    src = os.path.join(HERE, "baselines")
    exe = os.path.join(args.libtorch_build, "libtorch_baseline")
    newest_src = max(os.path.getmtime(f) for f in glob.glob(os.path.join(src, "*.cpp")) + glob.glob(os.path.join(src, "*.h"))
                     + [os.path.join(src, "CMakeLists.txt")])
    if os.access(exe, os.X_OK) and os.path.getmtime(exe) >= newest_src:
        return exe, None
    if not shutil.which("cmake"):
        return None, "cmake not found"
    prefix = subprocess.run([args.python, "-c", "import torch; print(torch.utils.cmake_prefix_path)"],
                            capture_output=True, text=True)
    if prefix.returncode != 0:
        return None, "%s cannot import torch: %s" % (args.python, prefix.stderr.strip()[-300:])
    log = os.path.join(work, "build_libtorch.log")
    rc, _ = run_cmd(["cmake", "-S", src, "-B", args.libtorch_build, "-DCMAKE_BUILD_TYPE=Release",
                     "-DCMAKE_PREFIX_PATH=" + prefix.stdout.strip()], log, args.timeout)
    if rc == 0:
        rc, _ = run_cmd(["cmake", "--build", args.libtorch_build, "-j", str(os.cpu_count() or 4)], log + ".build",
                        args.timeout)
    if rc != 0 or not os.access(exe, os.X_OK):
        return None, "building libtorch_baseline failed (rc %d): %s" % (rc, tail(log + ".build") or tail(log))
    return exe, None


def prepare_data(args, slidefuse, work):
    """(data folder or None for --synthetic, description)."""
    if args.data:
        return args.data, "shards in %s" % args.data
    if args.synthetic:
        return None, "synthetic random batches (each runner its own generator)"
    if (args.height, args.width) != (256, 512) or not slidefuse:
        return None, "synthetic random batches (no slidefuse generate for %dx%d)" % (args.height, args.width)
    need = args.pool * max(args.batch_sizes)
    count = int(math.ceil(need / 0.8)) + 200  # the train split gets 80% of the backgrounds
    out = os.path.join(work, "data")
    if os.path.isdir(os.path.join(out, "train")):
        shutil.rmtree(out)
    rc, _ = run_cmd([slidefuse, "generate", "--out", out, "--count", str(count), "--seed", "1"],
                    os.path.join(work, "generate.log"), args.timeout)
    if rc != 0:
        return None, "synthetic random batches (slidefuse generate failed: %s)" % tail(os.path.join(work, "generate.log"), 300)
    return os.path.join(out, "train"), "`slidefuse generate --count %d --seed 1`, train split (same samples for all baselines)" % count


def load_report(path):
    with open(path) as f:
        rep = json.load(f)
    problems = bench_schema.validate(rep)
    if problems:
        raise ValueError("%s does not follow %s: %s" % (path, bench_schema.SCHEMA, "; ".join(problems[:5])))
    return rep


def run_one(name, cmd, args, work, env=None, timeout=None):
    out = os.path.join(work, name + ".json")
    if os.path.exists(out):
        os.remove(out)
    cmd = cmd + ["--json", out]
    log = os.path.join(work, name + ".log")
    rc, secs = run_cmd(cmd, log, args.timeout if timeout is None else timeout, env=env)
    res = {"runner": name, "command": " ".join(shlex.quote(c) for c in cmd), "returncode": rc, "seconds": round(secs, 1)}
    if os.path.exists(out):
        try:
            res["report"] = load_report(out)
            res["status"] = "ok"
            return res
        except (ValueError, json.JSONDecodeError) as e:
            res.update(status="failed", error=str(e))
            return res
    if rc == 124:
        why = "killed at its time limit (%d s), no report; log tail: %s" % (
            args.timeout if timeout is None else timeout,
            re.sub(r"\[compare: killed after \d+ s\]", "", tail(log, 600)).strip())
    else:
        why = "exit code %d, no report; log tail: %s" % (rc, tail(log, 600).strip())
    res.update(status="failed", error=why)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-sizes", default="64,128,256")
    ap.add_argument("--height", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--pool", type=int, default=4, help="distinct batches each baseline cycles through")
    ap.add_argument("--loss-variant", default="sider", choices=("sider", "corrected"))
    ap.add_argument("--device", default="cuda", help="device for the baselines (cuda, cuda:N, cpu)")
    ap.add_argument("--data", help="folder of *.sfshard for the baselines (default: generated)")
    ap.add_argument("--synthetic", action="store_true", help="baselines use random batches")
    ap.add_argument("--skip", default="", help="comma-separated runners to skip: " + ",".join(RUNNERS))
    ap.add_argument("--runners", default=",".join(RUNNERS),
                    help="comma-separated runners to run, in this order (default: %(default)s)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds for the whole comparison: later runners get what is left (see above)")
    ap.add_argument("--slidefuse", help="slidefuse binary (default: found under build*/ or built)")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build-compare"), help="where to build slidefuse if needed")
    ap.add_argument("--no-build", action="store_true", help="never run CMake")
    ap.add_argument("--slidefuse-extra", default="", help="extra arguments for `slidefuse bench step`")
    ap.add_argument("--python", default=sys.executable, help="Python with torch for the PyTorch baselines")
    ap.add_argument("--libtorch-build", default=os.path.join(REPO, "build-libtorch"))
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per runner (and per build)")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "docs", "perf"))
    ap.add_argument("--date", default=None, help="YYYY-MM-DD for the file names (default: today, UTC)")
    ap.add_argument("--gpu-slug", default=None, help="file-name slug of the GPU (default: from the device name)")
    ap.add_argument("--work-dir", default=None, help="runner logs and raw reports (default: a temp folder)")
    ap.add_argument("--from-json", nargs="+", metavar="REPORT", help="only tabulate existing bench reports")
    args = ap.parse_args(argv)
    try:
        args.batch_sizes = [int(v) for v in args.batch_sizes.split(",") if v.strip()]
        assert args.batch_sizes and min(args.batch_sizes) > 0
    except (ValueError, AssertionError):
        ap.error("--batch-sizes: comma-separated positive integers")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(RUNNERS)
    if unknown:
        ap.error("--skip: unknown runner(s) %s (known: %s)" % (", ".join(sorted(unknown)), ", ".join(RUNNERS)))
    order = [s.strip() for s in args.runners.split(",") if s.strip()]
    unknown = [r for r in order if r not in RUNNERS]
    if unknown or not order or len(set(order)) != len(order):
        ap.error("--runners: each of %s at most once, got %r" % (", ".join(RUNNERS), args.runners))
    if args.deadline is not None and args.deadline < MIN_RUNNER_S + DEADLINE_RESERVE_S:
        ap.error("--deadline: at least %d s" % (MIN_RUNNER_S + DEADLINE_RESERVE_S))
    explicit_skip = set(skip)
    skip |= {r for r in RUNNERS if r not in order}
    budget = Budget(args.timeout, args.deadline)
    date = args.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")

    if args.from_json:
        results = []
        for p in args.from_json:
            try:
                rep = load_report(p)
                results.append({"runner": rep["tool"], "command": "(from %s)" % p, "status": "ok", "report": rep})
            except (OSError, ValueError, json.JSONDecodeError) as e:
                results.append({"runner": os.path.basename(p), "command": "(from %s)" % p, "status": "failed",
                                "error": str(e)})
        config = {}
    else:
        work = args.work_dir or tempfile.mkdtemp(prefix="slidefuse-compare-")
        os.makedirs(work, exist_ok=True)
        results = []
        bs = ",".join(str(b) for b in args.batch_sizes)
        common = ["--batch-sizes", bs, "--height", str(args.height), "--width", str(args.width),
                  "--steps", str(args.steps), "--warmup", str(args.warmup)]
        # slidefuse is needed to run it, or (found, not built) to generate the shared data.
        def within_budget():  # args with --timeout cut to what the deadline leaves
            return argparse.Namespace(**dict(vars(args), timeout=budget.next_timeout() or MIN_RUNNER_S))

        slidefuse, why_sf = None, "--skip"
        if "slidefuse" not in skip or not (args.data or args.synthetic):
            slidefuse, why_sf = locate_slidefuse(args.slidefuse, args.build_dir,
                                                 "slidefuse" not in skip and not args.no_build,
                                                 within_budget().timeout, work)
        data, data_desc = prepare_data(within_budget(), slidefuse, work)
        base_extra = ["--pool", str(args.pool), "--loss-variant", args.loss_variant, "--device", args.device]
        base_extra += ["--data", data] if data else ["--synthetic"]
        commit = bench_schema.read_commit()
        for name in [r for r in order if r not in skip] + [r for r in RUNNERS if r in skip]:
            if name in skip:
                why = "--skip" if name in explicit_skip else "not in --runners"
                results.append({"runner": name, "status": "skipped", "error": why})
                continue
            timeout = budget.next_timeout()
            if timeout is None:
                results.append({"runner": name, "status": "skipped",
                                "error": "--deadline: %.0f s of %.0f s left, too little to start it"
                                         % (max(0.0, budget.left()), args.deadline)})
                print("compare: %s not started: %s" % (name, results[-1]["error"]), flush=True)
                continue
            if name == "slidefuse":
                if not slidefuse:
                    results.append({"runner": name, "status": "failed", "error": why_sf})
                    continue
                cmd = [slidefuse, "bench", "step"] + common + shlex.split(args.slidefuse_extra)
                results.append(run_one(name, cmd, args, work, timeout=timeout))
            elif name in TORCH_MODES:
                cmd = [args.python, os.path.join(HERE, "baselines", "torch_baseline.py"), "--mode", name,
                       "--commit", commit] + common + base_extra
                results.append(run_one(name, cmd, args, work, timeout=timeout))
            else:
                exe, why = locate_libtorch(within_budget(), work)
                if not exe:
                    results.append({"runner": name, "status": "failed", "error": why})
                    continue
                timeout = budget.next_timeout()
                if timeout is None:
                    results.append({"runner": name, "status": "skipped",
                                    "error": "--deadline: too little left after building it"})
                    continue
                cmd = [exe, "--mode", "bf16_cl", "--commit", commit] + common + base_extra
                results.append(run_one(name, cmd, args, work, timeout=timeout))
        config = dict(batch_sizes=args.batch_sizes, height=args.height, width=args.width, steps=args.steps,
                      warmup=args.warmup, pool=args.pool, loss_variant=args.loss_variant, device=args.device,
                      data=data, data_desc=data_desc, work_dir=work, runners=order, deadline=args.deadline)
    combined = build_combined(results, config, date=date)
    slug = args.gpu_slug or bench_schema.gpu_slug(combined["gpu"])
    paths = write_outputs(combined, args.out_dir, "%s-%s" % (date, slug))
    print("compare: wrote " + ", ".join(paths))
    print(render_markdown(combined))
    return 0 if any(x.get("status") == "ok" for x in results) else 1


if __name__ == "__main__":
    sys.exit(main())
