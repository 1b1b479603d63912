#!/usr/bin/env python3
"""The benchmark JSON schema "slidefuse.bench/1", shared by `slidefuse bench step --json`, the
PyTorch baselines (torch_baseline.py), the LibTorch baseline (libtorch_baseline.cpp) and
tools/compare.py. Pure Python (no torch, no numpy), so compare.py and the tests can use it anywhere.

    {"schema": "slidefuse.bench/1", "tool": "pytorch-eager_bf16_cl" | "libtorch-bf16_cl" | "slidefuse" | ...,
     "commit": str, "date": ISO8601 (UTC, "2026-11-21T09:30:00Z"),
     "device": {"name", "driver", "cuda", "cudnn", "torch"?},
     "runs": [{"batch", "height", "width", "channels", "mode", "warmup_steps", "timed_steps",
               "timings_ms": [...], "median_ms", "p10_ms", "p90_ms", "samples_per_s",
               "peak_mem_bytes", "status": "ok" | "oom" | "error", "error"?: str, "extra"?: {...}}],
     "nvml": {...}?}

Statistics: percentiles by linear interpolation between the sorted timings (numpy's default
"linear" method: position q*(n-1)); median = 50th percentile; samples_per_s = batch / median.
The same rule is implemented in libtorch_baseline.cpp (percentile_linear).
"""
import datetime
import math
import os
import re

SCHEMA = "slidefuse.bench/1"
STATUSES = ("ok", "oom", "error")
TOP_KEYS = ("schema", "tool", "commit", "date", "device", "runs")  # + optional "nvml"
DEVICE_KEYS = ("name", "driver", "cuda", "cudnn")  # + optional "torch"
RUN_KEYS = ("batch", "height", "width", "channels", "mode", "warmup_steps", "timed_steps", "timings_ms",
            "median_ms", "p10_ms", "p90_ms", "samples_per_s", "peak_mem_bytes", "status")  # + "error"
ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")


def percentile(sorted_vals, q):
    """Linear interpolation at position q*(n-1) of an ascending list (q in [0, 1])."""
    n = len(sorted_vals)
    if n == 0:
        return None
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_commit(repo=None):
    """The checked-out commit, read from .git files (HEAD, the ref file or packed-refs); no git
    process is started. "unknown" when the folder is not a git checkout. SLIDEFUSE_COMMIT overrides."""
    env = os.environ.get("SLIDEFUSE_COMMIT")
    if env:
        return env
    git = os.path.join(repo or repo_root(), ".git")
    try:
        if os.path.isfile(git):  # worktree / submodule: "gitdir: PATH"
            with open(git) as f:
                line = f.read().strip()
            if line.startswith("gitdir:"):
                git = os.path.join(os.path.dirname(git), line.split(":", 1)[1].strip())
        with open(os.path.join(git, "HEAD")) as f:
            head = f.read().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        path = os.path.join(git, ref)
        if os.path.isfile(path):
            with open(path) as f:
                return f.read().strip()
        packed = os.path.join(git, "packed-refs")
        if os.path.isfile(packed):
            with open(packed) as f:
                for line in f:
                    parts = line.strip().split(" ")
                    if len(parts) == 2 and parts[1] == ref:
                        return parts[0]
    except OSError:
        pass
    return "unknown"


def make_run(batch, height, width, channels, mode, warmup_steps, timings_ms, peak_mem_bytes, status="ok",
             error=None, extra=None):
    """One "runs" entry from raw per-step timings (ms). Statistics are None when nothing was timed.
    extra: the runner's own facts about the run (an object; e.g. which optimizer implementation ran)."""
    t = [float(v) for v in timings_ms]
    s = sorted(t)
    med = percentile(s, 0.5)
    run = {
        "batch": int(batch), "height": int(height), "width": int(width), "channels": int(channels),
        "mode": str(mode), "warmup_steps": int(warmup_steps), "timed_steps": len(t), "timings_ms": t,
        "median_ms": med, "p10_ms": percentile(s, 0.1), "p90_ms": percentile(s, 0.9),
        "samples_per_s": (batch * 1000.0 / med) if med and med > 0 else None,
        "peak_mem_bytes": None if peak_mem_bytes is None else int(peak_mem_bytes),
        "status": status,
    }
    if error is not None:
        run["error"] = str(error)
    if extra is not None:
        run["extra"] = dict(extra)
    return run


def make_report(tool, device, runs, commit=None, date=None, nvml=None):
    rep = {"schema": SCHEMA, "tool": tool, "commit": commit or read_commit(), "date": date or utc_now(),
           "device": device, "runs": runs}
    if nvml is not None:
        rep["nvml"] = nvml
    return rep


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate(rep, min_timed_steps=1):
    """List of problems (empty when rep follows the schema). A run with status "ok" must have
    >= min_timed_steps finite positive timings and consistent statistics."""
    errs = []
    if not isinstance(rep, dict):
        return ["report is not a JSON object"]
    for k in TOP_KEYS:
        if k not in rep:
            errs.append("missing top-level key '%s'" % k)
    if errs:
        return errs
    if rep["schema"] != SCHEMA:
        errs.append("schema is %r, expected %r" % (rep["schema"], SCHEMA))
    for k in ("tool", "commit", "date"):
        if not isinstance(rep[k], str) or not rep[k]:
            errs.append("'%s' must be a non-empty string" % k)
    if isinstance(rep["date"], str) and not ISO_RE.match(rep["date"]):
        errs.append("date %r is not ISO 8601" % rep["date"])
    dev = rep["device"]
    if not isinstance(dev, dict):
        errs.append("'device' must be an object")
    else:
        for k in DEVICE_KEYS:
            if k not in dev:
                errs.append("device: missing '%s'" % k)
    if "nvml" in rep and not isinstance(rep["nvml"], (dict, type(None))):
        errs.append("'nvml' must be an object")
    if not isinstance(rep["runs"], list):
        return errs + ["'runs' must be a list"]
    for i, r in enumerate(rep["runs"]):
        where = "runs[%d]" % i
        if not isinstance(r, dict):
            errs.append(where + " is not an object")
            continue
        missing = [k for k in RUN_KEYS if k not in r]
        if missing:
            errs.append("%s: missing %s" % (where, ", ".join(missing)))
            continue
        if "extra" in r and not isinstance(r["extra"], dict):
            errs.append(where + ": 'extra' must be an object")
        if r["status"] not in STATUSES:
            errs.append("%s: status %r not one of %s" % (where, r["status"], "/".join(STATUSES)))
        for k in ("batch", "height", "width", "channels"):
            if not isinstance(r[k], int) or isinstance(r[k], bool) or r[k] < 1:
                errs.append("%s: '%s' must be a positive integer" % (where, k))
        if not isinstance(r["timings_ms"], list):
            errs.append(where + ": 'timings_ms' must be a list")
            continue
        if r["timed_steps"] != len(r["timings_ms"]):
            errs.append("%s: timed_steps %r != len(timings_ms) %d" % (where, r["timed_steps"], len(r["timings_ms"])))
        if r["status"] != "ok":
            if not isinstance(r.get("error"), str) or not r.get("error"):
                errs.append("%s: status %s needs an 'error' message" % (where, r["status"]))
            continue
        t = r["timings_ms"]
        if len(t) < min_timed_steps:
            errs.append("%s: %d timed steps, at least %d required" % (where, len(t), min_timed_steps))
        if not all(_num(v) and v > 0 for v in t):
            errs.append(where + ": timings must be finite and > 0")
            continue
        for k in ("median_ms", "p10_ms", "p90_ms", "samples_per_s"):
            if not _num(r[k]) or r[k] <= 0:
                errs.append("%s: '%s' must be a positive number" % (where, k))
        if errs:
            continue
        s = sorted(t)
        for k, q in (("median_ms", 0.5), ("p10_ms", 0.1), ("p90_ms", 0.9)):
            want = percentile(s, q)
            if abs(r[k] - want) > 1e-6 * max(1.0, abs(want)):
                errs.append("%s: %s = %r, the timings give %r" % (where, k, r[k], want))
        want_sps = r["batch"] * 1000.0 / r["median_ms"]
        if abs(r["samples_per_s"] - want_sps) > 1e-6 * want_sps:
            errs.append("%s: samples_per_s = %r, batch/median gives %r" % (where, r["samples_per_s"], want_sps))
        if r["peak_mem_bytes"] is not None and (not isinstance(r["peak_mem_bytes"], int) or r["peak_mem_bytes"] < 0):
            errs.append(where + ": peak_mem_bytes must be a non-negative integer or null")
    return errs


def gpu_slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (file-name safe)."""
    s = re.sub(r"[^a-z0-9]+", "-", (name or "unknown-gpu").lower()).strip("-")
    return s or "unknown-gpu"
