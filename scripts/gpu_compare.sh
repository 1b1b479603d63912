#!/usr/bin/env bash
# Issue "GPU speed", step 2, in ONE device command: slidefuse against torch.compile(mode=
# "max-autotune") and the other baselines on the same GPU in one tools/compare.py run, bounded by a
# deadline so that the command ends inside its lease with whatever finished written down.
#   - runners in the order of what the comparison needs most (SF_RUNNERS): slidefuse, then
#     torch.compile (never measured; its compile and autotuning take minutes), then PyTorch eager
#     bf16 + channels_last, eager fp32, LibTorch; compare.py --deadline gives each what is left and
#     records the ones it cannot start as skipped
#   - torch.compile's caches (inductor's FX graph and autotuning caches, Triton's kernels) live in
#     one folder; when the compiled runner did not finish, that folder comes back in <= 3 parts of
#     15 MiB ($OUT/inductor_cache.tgz.partNN) for the next lease to carry (into the build folder,
#     see docs/GPU_VERIFICATION.md): that run then starts from the compiled kernels and tuned
#     choices instead of from nothing. Parts found in the build folder are unpacked first.
# Everything lands in $OUT: compare's <date>-<gpu>.json/.md/.png, compare.log, env.txt.
# usage: scripts/gpu_compare.sh [build-dir (default .gpu)]
#   SF_DEADLINE   seconds from the start by which everything has ended (default 570)
#   SF_RUNNERS    compare.py --runners (default slidefuse,compile_max_autotune,eager_bf16_cl,eager_fp32,libtorch)
#   SF_BATCH      batch sizes (default 128)
#   SF_SLIDEFUSE_EXTRA  more `slidefuse bench step` arguments (compare.py --slidefuse-extra), e.g.
#                 switches a step-level A/B has shown faster before they become the default
#   SF_COMPARE_EXTRA  more compare.py arguments (a dry run on a CPU: "--device cpu --synthetic
#                 --height 64 --width 128 --steps 2 --warmup 1"; SF_PYTHON a Python with torch >= 2)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-.gpu}
FINAL=${OUT:-$PWD/gpu-compare}
mkdir -p "$FINAL"
DEADLINE=${SF_DEADLINE:-570}
RUNNERS=${SF_RUNNERS:-slidefuse,compile_max_autotune,eager_bf16_cl,eager_fp32,libtorch}
BATCH=${SF_BATCH:-128}
PY=${SF_PYTHON:-python3}
T0=$(date +%s)
now() { echo $(( $(date +%s) - T0 )); }
say() { echo "[compare $(now)s] $*" | tee -a "$FINAL/compare.log"; }
: >"$FINAL/compare.log"

if [ ! -x "$B/slidefuse" ]; then
  say "no $B/slidefuse: build and pack it first (BUILD_DIR=build scripts/gpu_pack.sh)"; exit 2
fi
# ---- torch.compile's caches: one folder, from an earlier lease's parts when carried ----
CACHE=${SF_INDUCTOR_CACHE:-/tmp/sf_inductor_cache}
mkdir -p "$CACHE"
if ls "$B"/inductor_cache.tgz.part* >/dev/null 2>&1; then
  if cat "$B"/inductor_cache.tgz.part* | tar xzf - -C "$CACHE"; then
    say "inductor cache: unpacked $(du -sh "$CACHE" | cut -f1) from $(ls "$B"/inductor_cache.tgz.part* | wc -l) carried part(s)"
  else
    say "inductor cache: the carried parts do not unpack (ignored; compiling from nothing)"
  fi
fi
export TORCHINDUCTOR_CACHE_DIR="$CACHE" TRITON_CACHE_DIR="$CACHE/triton" PYTHONUNBUFFERED=1

{ echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "commit: $(cat "$B/commit.txt" 2>/dev/null || git rev-parse HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader 2>&1
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "triton", triton.__version__)' 2>&1
  echo "nproc: $(nproc)"; } >"$FINAL/env.txt"
say "$(tr '\n' ' ' <"$FINAL/env.txt")"

# ---- the comparison: the deadline minus the packing reserve ----
reserve=25
say "compare: runners $RUNNERS, batch $BATCH, deadline $(( DEADLINE - reserve - $(now) ))s"
"$PY" tools/compare.py --slidefuse "$B/slidefuse" --no-build --batch-sizes "$BATCH" --runners "$RUNNERS" \
  --deadline $(( DEADLINE - reserve - $(now) )) --out-dir "$FINAL" --work-dir "$(mktemp -d)/work" \
  ${SF_SLIDEFUSE_EXTRA:+--slidefuse-extra "$SF_SLIDEFUSE_EXTRA"} ${SF_COMPARE_EXTRA:-} 2>&1 |
  tee -a "$FINAL/compare.log"
rc=${PIPESTATUS[0]}
say "compare: rc $rc"

# ---- did the compiled runner produce a report? if not, send its caches back for the next lease ----
status=$("$PY" - "$FINAL" <<'EOF' 2>/dev/null
import glob, json, os, sys
js = sorted(glob.glob(os.path.join(sys.argv[1], "*.json")), key=os.path.getmtime)
st = "none"
for p in js[-1:]:
    for r in json.load(open(p)).get("runners", []):
        if r.get("runner") == "compile_max_autotune":
            st = r.get("status", "none")
print(st)
EOF
)
say "torch.compile runner: ${status:-unknown}"
case ",$RUNNERS," in *,compile_max_autotune,*) want=1 ;; *) want=0 ;; esac
if [ "$want" = 1 ] && [ "$status" != "ok" ]; then
  tar czf /tmp/sf_inductor_cache.tgz -C "$CACHE" . 2>/dev/null
  size=$(stat -c %s /tmp/sf_inductor_cache.tgz 2>/dev/null || echo 0)
  if [ "$size" -gt 0 ] && [ "$size" -le $(( 45 * 1024 * 1024 )) ]; then
    split -b 15m -d -a 2 /tmp/sf_inductor_cache.tgz "$FINAL/inductor_cache.tgz.part"
    say "inductor cache: $(( size / 1048576 )) MiB in $(ls "$FINAL"/inductor_cache.tgz.part* | wc -l) part(s) for the next lease"
  else
    say "inductor cache: $(( size / 1048576 )) MiB, over the 45 MiB that can come back: not returned"
  fi
fi
say "done"
exit "$rc"
