#!/usr/bin/env python3
"""PyTorch baselines of the slidefuse training step: the reference model (tools/reference/sider_ref.py)
trained with the original's recipe, timed like `slidefuse bench step`, JSON in the shared schema
(tools/baselines/bench_schema.py).

Modes
  eager_fp32            eager, float32, NCHW, cudnn.benchmark off (PyTorch defaults otherwise,
                        i.e. cuDNN may use TF32 for convolutions as torch allows by default)
  eager_bf16_cl         the original's setup: bf16 autocast (no GradScaler), channels_last,
                        cudnn.benchmark on
  compile_max_autotune  eager_bf16_cl + torch.compile(mode="max-autotune", dynamic=False) of the
                        model and of the loss (skipped, with the reason, where torch.compile is absent)

The optimizer is AdamW with torch's fused kernels wherever torch has them for the parameters
(`fused=True`: CUDA, torch >= 2.0), its default implementation elsewhere (the CPU cross-checks);
each run records which one ran ("extra": {"optimizer": ...}). The compiled mode also records the
wall time of every warm-up step (the first one compiles and autotunes; each is printed as it ends,
so a run cut at its time limit still shows how far it got) and dynamo's / inductor's counters:
graph breaks (with their reasons), graphs compiled, recompilations and CUDA-graph skips, which say
whether the timed step is one captured graph or pieces of eager code between several.

One timed step = preprocessing of a device-resident uint8 batch ([pixels/255, mask] as
kernels/preprocess.cu) -> forward -> loss (tools/baselines/loss_vec.py, fp32) -> zero_grad ->
backward -> clip_grad_norm_(1.0) -> AdamW(lr 3e-4, betas (0.9, 0.999), eps 1e-8, wd 0.05).
No host synchronisation inside the step. Batches cycle through a pool (--pool) staged on the
device before timing, so disk and host->device copies are excluded (slidefuse overlaps them).
Timing: --warmup steps untimed, then --steps steps, each bracketed by CUDA events (perf_counter
on the CPU); median / p10 / p90 of the per-step times; peak memory = torch.cuda.max_memory_allocated
over the timed steps (reset after the warm-up; everything still allocated counts: model, AdamW
state, the data pool, activations). Each batch size gets a fresh model and optimizer.

    python3 tools/baselines/torch_baseline.py --mode eager_bf16_cl --batch-sizes 64,128,256 \
        --data data/processed/train --json out.json
    /usr/bin/python3 tools/baselines/torch_baseline.py --mode eager_fp32 --device cpu --batch-sizes 2 \
        --height 64 --width 128 --steps 3 --warmup 1 --synthetic --json /tmp/x.json
"""
import argparse
import gc
import inspect
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_REPO, "tools", "reference"))

import bench_schema  # noqa: E402
import loss_vec  # noqa: E402
import shards  # noqa: E402
import sider_ref  # noqa: E402

MODES = {
    "eager_fp32": dict(amp=False, channels_last=False, cudnn_benchmark=False, compile=False),
    "eager_bf16_cl": dict(amp=True, channels_last=True, cudnn_benchmark=True, compile=False),
    "compile_max_autotune": dict(amp=True, channels_last=True, cudnn_benchmark=True, compile=True),
}
RECIPE = dict(lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05, clip=1.0)


# ------------------------------------------------------------------------------------------------
# Model, data, step
# ------------------------------------------------------------------------------------------------
def compile_unavailable_reason():
    """None when torch.compile can be used here, else why not."""
    if not hasattr(torch, "compile"):
        return "torch.compile is not available in torch %s (needs >= 2.0)" % torch.__version__
    return None


_INIT_CACHE = {}


def initial_state(seed, input_channels=2):
    """state_dict (CPU, float32) of the reference model after init_weights(seed): the counter-based
    initialisation that slidefuse's model/init.cpp reproduces bit for bit."""
    key = (seed, input_channels)
    if key not in _INIT_CACHE:
        m = sider_ref.build_model(input_channels)
        sider_ref.init_weights(m, seed)
        _INIT_CACHE[key] = {k: v.clone() for k, v in m.state_dict().items()}
    return _INIT_CACHE[key]


def build_model(device, channels_last, state_dict=None, seed=42, input_channels=2):
    """The reference model (float32 parameters: sider_ref has no dtype switch; nn defaults to
    float32) with the given state or init_weights(seed), on device, train mode."""
    m = sider_ref.build_model(input_channels)
    m.load_state_dict(state_dict if state_dict is not None else initial_state(seed, input_channels), strict=True)
    m = m.to(device)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    return m.train()


def fused_adamw_available(params):
    """True when torch's AdamW has a fused implementation for these parameters: a `fused` argument
    (torch >= 2.0) and every parameter a floating-point CUDA tensor. The CPU keeps the default
    implementation: the cross-checks against slidefuse's CPU backend compare its arithmetic."""
    params = list(params)
    if not params or "fused" not in inspect.signature(torch.optim.AdamW.__init__).parameters:
        return False
    return all(p.is_cuda and p.is_floating_point() for p in params)


def make_optimizer(model, lr=RECIPE["lr"], betas=RECIPE["betas"], eps=RECIPE["eps"],
                   weight_decay=RECIPE["weight_decay"], fused=None):
    """AdamW of the recipe; fused=None: fused where fused_adamw_available, True/False to force."""
    params = list(model.parameters())
    if fused is None:
        fused = fused_adamw_available(params)
    kw = {"fused": True} if fused else {}
    return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **kw)


def optimizer_name(opt):
    """"AdamW fused" | "AdamW foreach" | "AdamW for-loop": the implementation opt.step() runs."""
    d = opt.defaults
    if d.get("fused"):
        return "AdamW fused"
    foreach = d.get("foreach")
    if foreach is None:  # torch's default: foreach for CUDA tensors, the per-parameter loop otherwise
        ps = [p for g in opt.param_groups for p in g["params"]]
        foreach = bool(ps) and all(p.is_cuda for p in ps)
    return "AdamW foreach" if foreach else "AdamW for-loop"


_LUT = {}


def _lut(device):
    # v / 255 in IEEE float32 division, as kern::preprocess (CUDA scalar division in torch would
    # multiply by the reciprocal instead, which differs in the last bit for some v).
    key = str(device)
    if key not in _LUT:
        _LUT[key] = torch.from_numpy(np.arange(256, dtype=np.float32) / np.float32(255.0)).to(device)
    return _LUT[key]


def preprocess(pixels, rect, channels_last=True):
    """uint8 (N, H, W, Cp) + rect (N, 4) = x0, y0, x1, y1 -> float32 (N, Cp+1, H, W):
    [pixels/255 ..., mask], mask 1 where x0 <= x < x1 and y0 <= y < y1 (integer x, y)."""
    n, h, w, _ = pixels.shape
    dev = pixels.device
    img = _lut(dev)[pixels.long()]
    xs = torch.arange(w, device=dev, dtype=torch.float32)
    ys = torch.arange(h, device=dev, dtype=torch.float32)
    col = (rect[:, 0:1] <= xs) & (xs < rect[:, 2:3])  # [N, W]
    row = (rect[:, 1:2] <= ys) & (ys < rect[:, 3:4])  # [N, H]
    mask = (row[:, :, None] & col[:, None, :]).to(torch.float32)
    x = torch.cat([img, mask[..., None]], dim=-1).permute(0, 3, 1, 2)  # NHWC memory = channels_last
    return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def device_batch(pix, lab, device):
    """numpy uint8 pixels (N,H,W,C) + label records -> dict of device tensors."""
    a = shards.label_arrays(lab)
    b = {k: torch.from_numpy(v).to(device) for k, v in a.items()}
    b["pixels"] = torch.from_numpy(np.ascontiguousarray(pix)).to(device)
    return b


class Trainer:
    """One training step of the recipe in a given mode. step() returns the loss terms as device
    tensors (nothing is synchronised)."""

    def __init__(self, model, mode, device, variant="sider", clip=RECIPE["clip"], optimizer=None,
                 loss_dtype=torch.float32):
        cfg = MODES[mode]
        self.model, self.mode, self.cfg, self.device = model, mode, cfg, torch.device(device)
        self.variant, self.clip, self.loss_dtype = variant, clip, loss_dtype
        self.opt = optimizer if optimizer is not None else make_optimizer(model)
        self.params = [p for p in model.parameters()]
        self.forward = model
        self.loss = loss_vec.loss
        if cfg["compile"]:
            why = compile_unavailable_reason()
            if why:
                raise RuntimeError("skipped: " + why)
            self.forward = torch.compile(model, mode="max-autotune", dynamic=False)
            self.loss = torch.compile(loss_vec.loss, mode="max-autotune", dynamic=False)

    def set_lr(self, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self, batch):
        mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
        if self.cfg["compile"] and mark is not None:
            mark()
        x = preprocess(batch["pixels"], batch["rect"], self.cfg["channels_last"])
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.cfg["amp"]):
            logits, _ = self.forward(x)
        # The loss runs in float32 outside autocast (slidefuse: fp32 after the heads' last conv);
        # float64 only for cross-checks against slidefuse's CPU backend, whose loss is in double.
        terms = self.loss({k: v.to(self.loss_dtype) for k, v in logits.items()}, x, batch, self.variant,
                          self.loss_dtype)
        self.opt.zero_grad(set_to_none=True)
        terms["total"].backward()
        if self.clip and self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()
        return terms


# ------------------------------------------------------------------------------------------------
# Device description
# ------------------------------------------------------------------------------------------------
def _nvidia_smi(field):
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=" + field, "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        line = out.stdout.strip().splitlines()
        return line[0].strip() if out.returncode == 0 and line else None
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device):
    device = torch.device(device)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return {"name": torch.cuda.get_device_name(idx), "driver": _nvidia_smi("driver_version"),
                "cuda": torch.version.cuda, "cudnn": str(torch.backends.cudnn.version()),
                "torch": torch.__version__}
    return {"name": "CPU: " + _cpu_name(), "driver": None, "cuda": None, "cudnn": None, "torch": torch.__version__}


# ------------------------------------------------------------------------------------------------
# Benchmark
# ------------------------------------------------------------------------------------------------
def load_pool(args, batch, input_channels):
    """`pool` batches of `batch` samples as numpy arrays: shards (samples 0.. in file order,
    wrapping around a small dataset) or synthetic."""
    n = batch * args.pool
    if args.data:
        ds = shards.Dataset(args.data)
        if (ds.height, ds.width) != (args.height, args.width):
            raise ValueError("%s: shards are %dx%d, the benchmark input is %dx%d (--height/--width)"
                             % (args.data, ds.height, ds.width, args.height, args.width))
        if ds.channels + 1 != input_channels:
            raise ValueError("%s: shards hold %d pixel channel(s), the model takes %d input channels"
                             % (args.data, ds.channels, input_channels))
        pix, lab = ds.batch([i % ds.count for i in range(n)], verify=False)
    else:
        pix, lab = shards.synthetic_batch(n, args.height, args.width, input_channels - 1, seed=args.seed)
    return [(pix[k * batch:(k + 1) * batch], lab[k * batch:(k + 1) * batch]) for k in range(args.pool)]


class CudagraphSkipLog(logging.Handler):
    """Collects inductor's "skipping cudagraphs due to ..." warnings (the counter alone does not say
    why). torch's logging gives "torch", "torch._inductor" and "torch._dynamo" handlers of their own
    and stops propagation there, so the handler sits on all three. Installed around a whole run."""

    LOGGERS = ("torch", "torch._inductor", "torch._dynamo")

    def __init__(self):
        super().__init__(logging.WARNING)
        self.reasons = []

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 (a malformed record must not break the benchmark)
            return
        if "skipping cudagraphs" in msg and msg[:300] not in self.reasons:
            self.reasons.append(msg[:300])

    def install(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def remove(self):
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.remove()
        return False


def reset_compile_counters():
    """Clears dynamo's and inductor's counters (compile_counters reads them after the timed steps)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover (no torch.compile: the mode is skipped before this)
        return
    counters.clear()


def compile_counters():
    """What torch.compile did since reset_compile_counters: graph breaks (count and up to 8 reasons),
    graphs compiled, frames dynamo converted (more than the two compiled functions: recompilations
    or resumed frames after breaks), AOT-autograd graphs and CUDA-graph skips (inductor then runs
    that graph without a CUDA graph). A whole-graph compile of this step shows 0 breaks, 2 graphs
    (model, loss), 2 frames, 0 skips."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover
        return {}
    breaks = counters.get("graph_break", {})
    out = {"graph_breaks": int(sum(breaks.values())),
           "graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
           "frames": int(counters.get("frames", {}).get("ok", 0)),
           "aot_autograd_graphs": int(counters.get("aot_autograd", {}).get("ok", 0)),
           "cudagraph_skips": int(counters.get("inductor", {}).get("cudagraph_skips", 0))}
    if breaks:
        out["graph_break_reasons"] = [str(k)[:300] for k, _ in breaks.most_common(8)]
    return out


def _is_oom(e):
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom_type is not None and isinstance(e, oom_type)) or "out of memory" in str(e).lower()


def bench_one(args, mode, batch, device):
    """One batch size -> one run record."""
    cfg = MODES[mode]
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    run = dict(batch=batch, height=args.height, width=args.width, channels=args.input_channels, mode=mode,
               warmup_steps=args.warmup)
    why = compile_unavailable_reason() if cfg["compile"] else None
    if why:
        return bench_schema.make_run(timings_ms=[], peak_mem_bytes=None, status="error", error="skipped: " + why,
                                     **run)
    trainer = pool = None
    skip_log = CudagraphSkipLog().install()  # removed in `finally`
    try:
        if cuda:
            torch.backends.cudnn.benchmark = cfg["cudnn_benchmark"]
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        if cfg["compile"] and hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
        pool = [device_batch(p, l, dev) for p, l in load_pool(args, batch, args.input_channels)]
        model = build_model(dev, cfg["channels_last"], seed=args.seed, input_channels=args.input_channels)
        trainer = Trainer(model, mode, dev, variant=args.loss_variant)
        extra = run["extra"] = {"optimizer": optimizer_name(trainer.opt)}
        warmup_s = []
        if cfg["compile"]:
            reset_compile_counters()
            extra["warmup_s"] = warmup_s  # filled as the steps end: kept by a run that fails in them
            extra["cudagraph_skip_reasons"] = skip_log.reasons
        if cfg["compile"] and args.warmup > 0:
            print("pytorch-%s batch %d: warm-up step 1/%d started: torch.compile traces, compiles and autotunes "
                  "here" % (mode, batch, args.warmup), file=sys.stderr, flush=True)
        for i in range(args.warmup):
            t0 = time.perf_counter()
            trainer.step(pool[i % len(pool)])
            if cfg["compile"]:  # untimed: a sync per warm-up step shows where the compile time goes
                if cuda:
                    torch.cuda.synchronize(dev)
                warmup_s.append(round(time.perf_counter() - t0, 3))
                print("pytorch-%s batch %d: warm-up step %d/%d took %.1f s" % (mode, batch, i + 1, args.warmup,
                                                                           warmup_s[-1]), file=sys.stderr, flush=True)
        if cuda:
            torch.cuda.synchronize(dev)
            # Peak over the timed steps: what a training step needs (model, optimizer state, data
            # pool, activations), not cuDNN / torch.compile autotuning scratch of the warm-up.
            torch.cuda.reset_peak_memory_stats(dev)
        timings = []
        if cuda:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
            for i in range(args.steps):
                ev[i][0].record()
                terms = trainer.step(pool[(args.warmup + i) % len(pool)])
                ev[i][1].record()
            torch.cuda.synchronize(dev)
            timings = [a.elapsed_time(b) for a, b in ev]
            peak = torch.cuda.max_memory_allocated(dev)
        else:
            for i in range(args.steps):
                t0 = time.perf_counter()
                terms = trainer.step(pool[(args.warmup + i) % len(pool)])
                timings.append((time.perf_counter() - t0) * 1000.0)
            peak = None
        if cfg["compile"]:  # after the timed steps too: a recompilation there would show as frames > 2
            extra.update(compile_counters())
        last = float(terms["total"].detach()) if args.steps > 0 else float("nan")
        if args.steps > 0 and not np.isfinite(last):
            return bench_schema.make_run(timings_ms=timings, peak_mem_bytes=peak, status="error",
                                         error="non-finite loss %r after the timed steps" % last, **run)
        return bench_schema.make_run(timings_ms=timings, peak_mem_bytes=peak, **run)
    except Exception as e:  # recorded in the JSON, the other batch sizes still run
        msg = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        status = "oom" if cuda and _is_oom(e) else "error"
        if str(e).startswith("skipped: "):
            msg = str(e)
        elif cfg["compile"] and "extra" in run:
            run["extra"].update(compile_counters())
        return bench_schema.make_run(timings_ms=[], peak_mem_bytes=None, status=status, error=msg, **run)
    finally:
        skip_log.remove()
        trainer = pool = None  # noqa: F841
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


def summary_line(tool, r):
    if r["status"] != "ok":
        return "%s batch %d: %s (%s)" % (tool, r["batch"], r["status"], r.get("error", ""))
    mem = "" if r["peak_mem_bytes"] is None else ", peak %.2f GiB" % (r["peak_mem_bytes"] / 2 ** 30)
    return "%s batch %d: %.3f ms/step median (p10 %.3f, p90 %.3f), %.1f samples/s%s" % (
        tool, r["batch"], r["median_ms"], r["p10_ms"], r["p90_ms"], r["samples_per_s"], mem)


def parse_batch_sizes(s):
    out = [int(v) for v in str(s).split(",") if v.strip()]
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("batch sizes must be positive integers, got %r" % s)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, choices=sorted(MODES))
    ap.add_argument("--device", default=None, help="cuda | cuda:N | cpu (default: cuda when available)")
    ap.add_argument("--batch-sizes", "--batch", dest="batch_sizes", type=parse_batch_sizes, default=[64, 128, 256])
    ap.add_argument("--height", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50, help="timed steps (the timing rule needs >= 50 on a GPU)")
    ap.add_argument("--warmup", type=int, default=10)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--data", help="folder of *.sfshard files (e.g. data/processed/train)")
    src.add_argument("--synthetic", action="store_true", help="random inputs and labels (the default)")
    ap.add_argument("--pool", type=int, default=4, help="distinct batches staged on the device (default 4)")
    ap.add_argument("--loss-variant", default="sider", choices=("sider", "corrected"))
    ap.add_argument("--input-channels", type=int, default=2, choices=(2, 4))
    ap.add_argument("--seed", type=int, default=42, help="init_weights seed (and synthetic data seed)")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--commit", default=None, help="commit to record (default: read from .git)")
    args = ap.parse_args(argv)
    if args.height % 32 or args.width % 32 or args.height < 32 or args.width < 32:
        ap.error("--height and --width must be positive multiples of 32")
    if args.steps < 1 or args.warmup < 0 or args.pool < 1:
        ap.error("--steps >= 1, --warmup >= 0, --pool >= 1")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        ap.error("--device %s: CUDA is not available to this torch (%s)" % (device, torch.__version__))
    if torch.device(device).type == "cuda" and args.steps < 50:
        print("warning: %d timed steps; the benchmark rule is a median of >= 50" % args.steps, file=sys.stderr)

    tool = "pytorch-" + args.mode
    runs = []
    for b in args.batch_sizes:
        r = bench_one(args, args.mode, b, device)
        print(summary_line(tool, r), flush=True)
        runs.append(r)
    rep = bench_schema.make_report(tool, device_info(device), runs, commit=args.commit)
    problems = bench_schema.validate(rep)
    if problems:
        print("internal error: report does not follow the schema: %s" % "; ".join(problems), file=sys.stderr)
        return 3
    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
            f.write("\n")
    failed = [r for r in runs if r["status"] == "error" and not r.get("error", "").startswith("skipped: ")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
