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
    python3 tools/compare.py --from-json a.json b.json    # table + chart from existing reports

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
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "baselines"))
import bench_schema  # noqa: E402

RUNNERS = ("slidefuse", "eager_fp32", "eager_bf16_cl", "compile_max_autotune", "libtorch")
TORCH_MODES = ("eager_fp32", "eager_bf16_cl", "compile_max_autotune")
COMPARE_SCHEMA = "slidefuse.compare/1"


# ------------------------------------------------------------------------------------------------
# Table and speedup arithmetic (pure functions; tests/baselines/test_baselines.py checks them)
# ------------------------------------------------------------------------------------------------
def is_slidefuse(tool):
    return tool == "slidefuse" or tool.startswith("slidefuse-")


def collect_rows(reports):
    """Flat rows (one per tool x run) from bench reports: dict(tool, mode, batch, samples_per_s,
    median_ms, p10_ms, p90_ms, peak_gib, status, error)."""
    rows = []
    for rep in reports:
        for r in rep.get("runs", []):
            peak = r.get("peak_mem_bytes")
            rows.append(dict(tool=rep["tool"], mode=r.get("mode", ""), batch=r["batch"], samples_per_s=r.get("samples_per_s"),
                             median_ms=r.get("median_ms"), p10_ms=r.get("p10_ms"), p90_ms=r.get("p90_ms"),
                             peak_gib=None if peak is None else peak / 2.0 ** 30, status=r.get("status", "error"),
                             error=r.get("error")))
    return rows


def speedups(rows):
    """{(baseline tool, batch): slidefuse samples/s / baseline samples/s} for every batch size where
    both have an "ok" run (the first slidefuse report's run is the reference)."""
    ref = {}
    for r in rows:
        if is_slidefuse(r["tool"]) and r["status"] == "ok" and r["samples_per_s"] and r["batch"] not in ref:
            ref[r["batch"]] = r["samples_per_s"]
    out = {}
    for r in rows:
        if is_slidefuse(r["tool"]) or r["status"] != "ok" or not r["samples_per_s"]:
            continue
        if r["batch"] in ref:
            out[(r["tool"], r["batch"])] = ref[r["batch"]] / r["samples_per_s"]
    return out


def _fmt(v, spec, none="—"):
    return none if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _status_text(r):
    if r["status"] == "ok":
        return "ok"
    err = (r.get("error") or "").strip()
    if err.startswith("skipped: "):
        return "skipped (%s)" % err[len("skipped: "):]
    return "%s: %s" % (r["status"], err[:120]) if err else r["status"]


def render_markdown(combined):
    """The .md text for a combined result (see build_combined)."""
    reports = [x["report"] for x in combined["runners"] if x.get("report")]
    rows = collect_rows(reports)
    sp = speedups(rows)
    cfg = combined.get("config", {})
    dev = combined.get("device") or {}
    lines = ["# slidefuse vs baselines — %s, %s" % (combined.get("gpu", "unknown GPU"), combined.get("date", "")[:10]), ""]
    facts = ["commit `%s`" % combined.get("commit", "unknown")]
    for k, label in (("driver", "driver"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("torch", "torch")):
        if dev.get(k):
            facts.append("%s %s" % (label, dev[k]))
    if cfg:
        facts.append("input %sx%sx2, loss `%s`" % (cfg.get("height"), cfg.get("width"), cfg.get("loss_variant", "sider")))
        clock = "wall-clock" if str(cfg.get("device", "cuda")).startswith("cpu") else "CUDA-event"
        facts.append("%s timed steps after %s warm-up steps (median of per-step %s times)"
                     % (cfg.get("steps"), cfg.get("warmup"), clock))
        facts.append("data: %s" % cfg.get("data_desc", "?"))
    lines += [", ".join(facts) + ".", ""]
    orders = sorted({r.get("extra", {}).get("fusion_up_order") for rep in reports if is_slidefuse(rep.get("tool", ""))
                     for r in rep.get("runs", [])} - {None})
    if orders:
        lines += ["slidefuse ran the fusion up paths in %s order (docs/MODEL.md: `conv_first` is the 1x1 conv before "
                  "the upsample, the same function and parameters as the original's `upsample_first`, which the "
                  "baselines run)." % " and ".join("`%s`" % o for o in orders), ""]
    lines += ["| tool | mode | batch | samples/s | ms/step median (p10–p90) | peak memory GiB | slidefuse speedup | status |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["batch"], not is_slidefuse(r["tool"]), r["tool"])):
        ms = "—" if r["median_ms"] is None else "%.3f (%.3f–%.3f)" % (r["median_ms"], r["p10_ms"], r["p90_ms"])
        s = sp.get((r["tool"], r["batch"]))
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s |" % (
            r["tool"], r["mode"], r["batch"], _fmt(r["samples_per_s"], ",.1f"), ms, _fmt(r["peak_gib"], ".2f"),
            "—" if s is None else "%.2fx" % s, _status_text(r)))
    baselines = sorted({t for (t, _) in sp})
    if baselines:
        batches = sorted({b for (_, b) in sp})
        lines += ["", "## Speedup of slidefuse (samples/s ratio, same batch size)", "",
                  "| batch | " + " | ".join("vs %s" % t for t in baselines) + " |",
                  "|---:|" + "---:|" * len(baselines)]
        for b in batches:
            lines.append("| %d | " % b + " | ".join(_fmt(sp.get((t, b)), ".2f") + ("x" if (t, b) in sp else "")
                                                   for t in baselines) + " |")
    problems = [x for x in combined["runners"] if x.get("status") != "ok"]
    if problems:
        lines += ["", "## Runners that did not produce a report", ""]
        for x in problems:
            lines.append("- `%s`: %s — %s" % (x["runner"], x["status"], (x.get("error") or "").replace("\n", " ")[:300]))
    if combined.get("chart"):
        lines += ["", "![samples/s by batch size](%s)" % os.path.basename(combined["chart"])]
    return "\n".join(lines) + "\n"


def write_chart(combined, path):
    """Grouped bar chart of samples/s per batch size and tool. Returns None on success, else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no PNG chart written"
    reports = [x["report"] for x in combined["runners"] if x.get("report")]
    rows = [r for r in collect_rows(reports) if r["status"] == "ok" and r["samples_per_s"]]
    if not rows:
        return "no successful run to plot"
    tools = []
    for r in sorted(rows, key=lambda r: (not is_slidefuse(r["tool"]), r["tool"])):
        if r["tool"] not in tools:
            tools.append(r["tool"])
    batches = sorted({r["batch"] for r in rows})
    val = {(r["tool"], r["batch"]): r["samples_per_s"] for r in rows}
    sp = speedups(rows)
    width = 0.8 / len(tools)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(batches) * max(1, len(tools)) / 2), 4.5))
    for k, t in enumerate(tools):
        xs = [i + (k - (len(tools) - 1) / 2) * width for i in range(len(batches))]
        ys = [val.get((t, b), 0.0) for b in batches]
        bars = ax.bar(xs, ys, width * 0.95, label=t)
        for bar, b in zip(bars, batches):
            s = sp.get((t, b))
            if s is not None:
                ax.annotate("%.2fx" % s, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=7)
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels(["batch %d" % b for b in batches])
    ax.set_ylabel("samples/s (median step)")
    ax.set_title("%s — %s (labels: slidefuse speedup)" % (combined.get("gpu", ""), combined.get("date", "")[:10]),
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def build_combined(runner_results, config, date=None, commit=None):
    """The .json content: runner results (each with its bench report or an error) and context."""
    reports = [x["report"] for x in runner_results if x.get("report")]
    device = {}
    for rep in reports:  # the GPU facts, preferably from a GPU report
        d = rep.get("device") or {}
        if d.get("cuda") or not device:
            device = d
    return {"schema": COMPARE_SCHEMA, "date": date or bench_schema.utc_now(), "commit": commit or bench_schema.read_commit(),
            "host": socket.gethostname(), "gpu": device.get("name") or "unknown", "device": device,
            "config": config, "command": " ".join(shlex.quote(a) for a in sys.argv), "runners": runner_results}


def write_outputs(combined, out_dir, stem):
    """Writes stem.json, stem.md and (matplotlib permitting) stem.png; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, stem)
    png = base + ".png"
    why = write_chart(combined, png)
    combined["chart"] = None if why else png
    if why:
        print("compare: " + why, file=sys.stderr)
    with open(base + ".json", "w") as f:
        json.dump(combined, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(render_markdown(combined))
    return [p for p in (base + ".json", base + ".md", png) if os.path.exists(p)]


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
    newest_src = max(os.path.getmtime(os.path.join(src, f)) for f in ("libtorch_baseline.cpp", "CMakeLists.txt"))
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


def run_one(name, cmd, args, work, env=None):
    out = os.path.join(work, name + ".json")
    if os.path.exists(out):
        os.remove(out)
    cmd = cmd + ["--json", out]
    log = os.path.join(work, name + ".log")
    rc, secs = run_cmd(cmd, log, args.timeout, env=env)
    res = {"runner": name, "command": " ".join(shlex.quote(c) for c in cmd), "returncode": rc, "seconds": round(secs, 1)}
    if os.path.exists(out):
        try:
            res["report"] = load_report(out)
            res["status"] = "ok"
            return res
        except (ValueError, json.JSONDecodeError) as e:
            res.update(status="failed", error=str(e))
            return res
    res.update(status="failed", error="exit code %d, no report; log tail: %s" % (rc, tail(log, 600).strip()))
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
        slidefuse, why_sf = None, "--skip"
        if "slidefuse" not in skip or not (args.data or args.synthetic):
            slidefuse, why_sf = locate_slidefuse(args.slidefuse, args.build_dir,
                                                 "slidefuse" not in skip and not args.no_build, args.timeout, work)
        data, data_desc = prepare_data(args, slidefuse, work)
        base_extra = ["--pool", str(args.pool), "--loss-variant", args.loss_variant, "--device", args.device]
        base_extra += ["--data", data] if data else ["--synthetic"]
        commit = bench_schema.read_commit()
        for name in RUNNERS:
            if name in skip:
                results.append({"runner": name, "status": "skipped", "error": "--skip"})
                continue
            if name == "slidefuse":
                if not slidefuse:
                    results.append({"runner": name, "status": "failed", "error": why_sf})
                    continue
                cmd = [slidefuse, "bench", "step"] + common + shlex.split(args.slidefuse_extra)
                results.append(run_one(name, cmd, args, work))
            elif name in TORCH_MODES:
                cmd = [args.python, os.path.join(HERE, "baselines", "torch_baseline.py"), "--mode", name,
                       "--commit", commit] + common + base_extra
                results.append(run_one(name, cmd, args, work))
            else:
                exe, why = locate_libtorch(args, work)
                if not exe:
                    results.append({"runner": name, "status": "failed", "error": why})
                    continue
                cmd = [exe, "--mode", "bf16_cl", "--commit", commit] + common + base_extra
                results.append(run_one(name, cmd, args, work))
        config = dict(batch_sizes=args.batch_sizes, height=args.height, width=args.width, steps=args.steps,
                      warmup=args.warmup, pool=args.pool, loss_variant=args.loss_variant, device=args.device,
                      data=data, data_desc=data_desc, work_dir=work)
    combined = build_combined(results, config, date=date)
    slug = args.gpu_slug or bench_schema.gpu_slug(combined["gpu"])
    paths = write_outputs(combined, args.out_dir, "%s-%s" % (date, slug))
    print("compare: wrote " + ", ".join(paths))
    print(render_markdown(combined))
    return 0 if any(x.get("status") == "ok" for x in results) else 1


if __name__ == "__main__":
    sys.exit(main())
