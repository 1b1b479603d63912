#!/usr/bin/env bash
# GPU verification in stages, each well inside one 10-minute device command, writing what
# docs/GPU_VERIFICATION.md records into OUT (default $OUT or ./gpu-verify):
#   tests    scripts/gpu_test.sh: every gpu test (JSON report) + compute-sanitizer memcheck of one step
#   bench    slidefuse bench step: batch sizes 64..512 at 256x512, 160x320, batch search, per-layer table
#   compare  tools/compare.py: slidefuse vs PyTorch eager fp32 / bf16+channels_last / torch.compile / LibTorch
#   train    configs/gpu_quick.yaml: generate the synthetic data, train, validate (hit@5px)
# usage: scripts/gpu_verify.sh STAGE [build-dir]     (the build folder is carried from the build machine)
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:?usage: scripts/gpu_verify.sh tests|bench|compare|train [build-dir]}
BUILD_DIR=${2:-build}
OUT_DIR=${OUT:-$PWD/gpu-verify}
mkdir -p "$OUT_DIR"
SF="$BUILD_DIR/slidefuse"
[ -x "$SF" ] || { echo "gpu_verify: no $SF (build first)" >&2; exit 1; }
# cuDNN / cuBLAS from a Python environment's nvidia/*/lib when the toolkit lacks them (as gpu_test.sh).
for py in python3 /usr/bin/python3; do
  site=$($py -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) || continue
  for s in $site; do for lib in "$s"/nvidia/*/lib; do [ -d "$lib" ] && LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"; done; done
done
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT_DIR/commit.txt" || true
case "$STAGE" in
  tests)
    scripts/gpu_test.sh "$BUILD_DIR" --gtest_output="json:$OUT_DIR/gpu_tests.json" 2>&1 | tee "$OUT_DIR/gpu_tests.log" ;;
  bench)
    "$SF" bench step --batch-sizes 64,128,256,512 --size 256x512 --search --layers --layers-batch 128 \
      --json "$OUT_DIR/bench_256x512.json" 2>&1 | tee "$OUT_DIR/bench.log"
    "$SF" bench step --batch-sizes 128,256 --size 160x320 --json "$OUT_DIR/bench_160x320.json" 2>&1 | tee -a "$OUT_DIR/bench.log" ;;
  compare)
    python3 tools/compare.py --slidefuse "$SF" --no-build --batch-sizes 64,128,256 --out-dir "$OUT_DIR" \
      --work-dir "$OUT_DIR/compare-work" 2>&1 | tee "$OUT_DIR/compare.log" ;;
  train)
    "$SF" train --config configs/gpu_quick.yaml --out "$OUT_DIR/run" 2>&1 | tee "$OUT_DIR/train.log"
    cp "$OUT_DIR/run/metrics.jsonl" "$OUT_DIR/train_metrics.jsonl" ;;
  *) echo "gpu_verify: unknown stage '$STAGE' (tests, bench, compare, train)" >&2; exit 2 ;;
esac
