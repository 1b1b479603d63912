#!/usr/bin/env bash
# GPU verification in stages, each well inside one 10-minute device command, writing what
# docs/GPU_VERIFICATION.md records into OUT (default $OUT or ./gpu-verify). Runs from a build folder
# carried from the build machine (nothing is built here; cuDNN/cuBLAS are found as gpu_test.sh does).
#   first    the one command to run first on a new device (about 8 minutes at most, each part under
#            its own `timeout`): environment report (GPU, driver, CUDA, the cuDNN library loaded,
#            ldd, the device's cuDNN property JSON), every cuDNN plan of the step built from that
#            JSON without the handle (`slidefuse plan --cudnn-device`), the suite runner's probe (a
#            real illegal address must cost only its test), every gpu test through tools/suite_runner.py
#            (a test that loses the CUDA context, crashes or hangs fails alone, the rest run on in a new
#            process; one JSON whatever happens; the tests the last GPU record lacks first: SF_TESTS_SEEN,
#            the H200's gpu_tests.json, "" for gtest's order), `slidefuse check` (CUDA vs CPU per layer), a
#            compute-sanitizer memcheck of one step, the measured ceilings (copy GB/s, bf16 GEMM
#            TFLOP/s: `bench ceilings`), a deterministic single-batch bench; then a
#            short table. At most 8 files, flat, in OUT: env.txt gpu_tests.json gpu_tests.log
#            check.json memcheck.log bench.json run.log summary.txt.
#   tests    every gpu test (or SF_GTEST_FILTER's: a rerun of the failed ones, which tests.md lists as a
#            filter) through tools/suite_runner.py (gpu_tests.json whatever happens) + compute-sanitizer
#            memcheck of one step
#   bench    slidefuse bench ceilings (ceilings.json), the step's modelled floor at those ceilings
#            (plan --roofline: plan_roofline_128.json), then bench step: batch sizes 64..512 at 256x512,
#            160x320, batch search, per-layer table
#   uporder  bench step at batch 128, 256x512, in both fusion up-path orders (model.fusion_up_order:
#            upsample_first, conv_first), each with its per-layer table: the A/B of
#            docs/perf/OPTIMIZATION_LOG.md entry 1 (bench_up_<order>.json, uporder.log)
#   fused    which cuDNN BatchNorm fusion graphs have plans through the GPU's handle, and the ones the
#            step would use executed, timed against the plain conv + the step's BN kernels and checked
#            (plan --fusion-graphs --time: fusion_graphs.json), then bench step at batch 128, 256x512, without and
#            with the fused LiteBlock (model.fuse_expand_dw), each with its per-layer table: the A/B of
#            OPTIMIZATION_LOG.md entry 4 (bench_fuse_off.json, bench_fuse_on.json, fused.log)
#   sanitize compute-sanitizer racecheck and synccheck over the custom-kernel gpu tests (the suites
#            tests/gpu/sanitize_suites.txt names), each tool through tools/suite_runner.py under
#            SF_T_SANITIZE seconds (270 by default; one test SF_T_SANITIZE_TEST, 60), the tests no
#            sanitizer has seen on a GPU first (SF_SANITIZE_SEEN, the H200's racecheck log), each report
#            under its test (tools/sanitizer_log.py): racecheck.{log,json}, synccheck.{log,json},
#            sanitize.txt, sanitize.md (the per-test record); exit 1 when a tool reports an error or a test fails ("part": the limit left
#            tests not run, nothing found in the rest), SKIP where the sanitizer refuses the device
#   compare  tools/compare.py: slidefuse vs PyTorch eager fp32 / bf16+channels_last / torch.compile / LibTorch
#   train    configs/gpu_quick.yaml: generate the synthetic data, train, validate (hit@5px); stops
#            with a checkpoint after SF_T_TRAIN seconds (500) and resumes on the next call; the best
#            and the last checkpoints' weights come back (best_weights.safetensors,
#            last_weights.safetensors, train_config.resolved.yaml)
#   e2e      one epoch of gpu_quick's data at batch 128 logged every 20 steps, then bench step at the
#            same batch and size, and tools/e2e_check.py: train samples/s within 5% of the bench,
#            with the loader's wait share (e2e.json). SF_CUDA="cuda.KEY=VALUE ..." (the config's cuda
#            section, docs/CONFIG.md): the training's overrides and the bench's same switches
#   bnstats  after `train`: `slidefuse eval` (CUDA) of the run's best and last checkpoints on the run's
#            own validation split, each with the running BatchNorm statistics (eval mode, as the
#            training log validates) and with each batch's own (`--bn-stats batch`, batches of 128 as
#            trained): whether a validation drop lies in the weights or in the running statistics
#            (bnstats.md, bnstats_{best,last}_{running,batch}.json, bnstats.log)
#   evalcmp  after `train`: `slidefuse eval` (CUDA, CPU reference, and the CPU reference's bf16 floor:
#            `--bf16-floor`) of the run's best checkpoint on a held-out generated set (2,000 samples,
#            seed 7: its val split) and `predict` on 6 generated images, compared by
#            tools/backend_compare.py against the floor (evalcmp.json, evalcmp.log, eval_cuda.json,
#            eval_{cuda,cpu,floor}.csv)
#   profile  ncu over every kernel of one eager training step (step 6 of a short gpu_quick run on
#            generated data, batch 128), summarised per kernel and per class against the measured copy
#            ceiling by tools/ncu_summary.py (ncu_summary.md/.json, ncu_raw.csv.gz, profile.log)
# usage: scripts/gpu_verify.sh STAGE [build-dir]
# Exit status: 0 every part passed; 1 a part failed (the table says which); 2 no GPU; 64 usage.
# Per-part limits of `first` (seconds; 200 + 60 + 120 + 75 by default, about 8 minutes with the
# kill grace; plans 2 x 30, ceilings 30: 545 s at most) can be changed: SF_T_TESTS, SF_T_CHECK, SF_T_MEMCHECK, SF_T_BENCH,
# SF_T_PLANS, SF_T_CEILINGS; SF_T_TEST_EACH (90: one test of the main part); SF_SANITIZER=none
# skips the memcheck (or names the compute-sanitizer to use).
set -uo pipefail
cd "$(dirname "$0")/.."
export SF_SOURCE_DIR=${SF_SOURCE_DIR:-$PWD}  # the tests find configs/ here, not at the build machine's path
usage="usage: scripts/gpu_verify.sh first|tests|bench|uporder|fused|sanitize|compare|train|e2e|evalcmp|bnstats|profile [build-dir]"
STAGE=${1:-}
case "$STAGE" in
  first|tests|bench|uporder|fused|sanitize|compare|train|e2e|evalcmp|bnstats|profile) ;;
  -h|--help) echo "$usage"; exit 0 ;;
  *) echo "gpu_verify: unknown stage '$STAGE'; $usage" >&2; exit 64 ;;
esac
[ $# -le 2 ] || { echo "gpu_verify: too many arguments; $usage" >&2; exit 64; }
BUILD_DIR=${2:-build}
OUT_DIR=${OUT:-$PWD/gpu-verify}
mkdir -p "$OUT_DIR" || exit 1
SF="$BUILD_DIR/slidefuse"
[ -x "$SF" ] || { echo "gpu_verify: no $SF (build first, or pass the carried build folder)" >&2; exit 1; }
# cuDNN / cuBLAS from a Python environment when the toolkit lacks them, libgomp from the pack.
. scripts/cuda_libs.sh
sf_python_cuda_libs
sf_packed_libs "$BUILD_DIR" "$SF"

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# ---- first ----
rows=()        # "part|status|seconds|note"
failed=0
row() { rows+=("$1|$2|$3|$4"); [ "$2" = FAIL ] && failed=1; return 0; }
# run_part NAME LIMIT LOG CMD...: runs CMD under `timeout`, output appended to LOG; sets rc, secs.
run_part() {
  local name=$1 limit=$2 log=$3; shift 3
  echo "== $name (limit ${limit}s): $*" | tee -a "$log"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  secs=$((SECONDS - t0))
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== $name: timed out after ${limit}s" | tee -a "$log"
  return 0
}
summary() {
  { printf '%-10s %-6s %6s  %s\n' part status sec note
    for r in "${rows[@]}"; do IFS='|' read -r a b c d <<<"$r"; printf '%-10s %-6s %6s  %s\n' "$a" "$b" "$c" "$d"; done
  } | tee "$OUT_DIR/summary.txt"
}

env_report() {
  local f="$OUT_DIR/env.txt"
  { echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"
    echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}"
    echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi: not available"
    echo "== gpu"; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    echo "== slidefuse version"; "$SF" version 2>&1
    for bin in "$SF" "$BUILD_DIR/tests/sf_gpu_tests"; do
      echo "== ldd $bin"; ldd "$bin" 2>&1 | grep -Ei 'cudnn|cublas|cudart|cuda|nccl|nvidia-ml|not found' || true
    done
    local cudnn; cudnn=$(ldd "$SF" 2>/dev/null | awk '/libcudnn\.so/ {print $3; exit}')
    echo "== cuDNN resolved: ${cudnn:-none} -> $( [ -n "$cudnn" ] && readlink -f "$cudnn" )"
    echo "== compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo none)"
  } >"$f" 2>&1
}

stage_first() {
  local log="$OUT_DIR/run.log"; : >"$log"
  env_report
  if ! have_gpu; then
    echo "gpu_verify: no GPU (nvidia-smi lists none): nothing to verify here" | tee -a "$log"
    for p in plans tests check memcheck ceilings bench; do row "$p" SKIP 0 "no GPU"; done
    summary; return 2
  fi
  row env ok 0 "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

  # The device's own cuDNN property JSON (into env.txt: configs/devices/ keeps a recorded copy), then
  # every cuDNN plan of the step at the gpu_quick size built from it without the handle, as the CPU
  # machines do: the same plans here as there shows the offline planning is faithful.
  if "$SF" devices --help 2>&1 | grep -q -- --cudnn-json; then
    local dj; dj="$(mktemp -d)/cudnn_device.json"
    if "$SF" devices --cudnn-json "$dj" >>"$log" 2>&1 && [ -s "$dj" ]; then
      { echo "== cudnn device properties (slidefuse devices --cudnn-json)"; cat "$dj"; } >>"$OUT_DIR/env.txt"
      local pd; pd=$(dirname "$dj")
      run_part plans "${SF_T_PLANS:-30}" "$log" "$SF" plan --batch 128 --height 256 --width 512 --cudnn-device "$dj" \
        --json "$pd/offline.json"
      local rc_off=$rc secs_off=$secs
      run_part plans "${SF_T_PLANS:-30}" "$log" "$SF" plan --batch 128 --height 256 --width 512 --cudnn-device gpu \
        --json "$pd/handle.json"
      # The same plan (variant and engine configuration) from the JSON as from the handle, key by key.
      local same; same=$(python3 - "$pd/offline.json" "$pd/handle.json" 2>&1 <<'PY'
import json, sys
a, b = (json.load(open(f))["cudnn"]["plans"] for f in sys.argv[1:3])
pick = lambda p: (p.get("variant"), p.get("engine"))
hb = {p["key"]: pick(p) for p in b}
same = sum(1 for p in a if p["ok"] and hb.get(p["key"]) == pick(p))
print(f"{sum(p['ok'] for p in a)}/{len(a)} keys planned from the JSON, {sum(p['ok'] for p in b)}/{len(b)} from the handle, "
      f"same plan for {same}")
PY
)
      local ok=FAIL; [ $rc_off -eq 0 ] && [ $rc -eq 0 ] && ok=ok
      echo "== plans: $same" >>"$log"
      row plans "$ok" "$((secs_off + secs))" "rc $rc_off/$rc; $same"
    else
      row plans FAIL 0 "slidefuse devices --cudnn-json failed (see run.log)"
    fi
  else
    row plans SKIP 0 "no 'devices --cudnn-json' in this build"
  fi

  # The runner's own check on this GPU first (a few seconds): a real kernel's illegal address between two
  # passing probe tests must cost only its test (tests/tools/suite_probe_check.py --gpu; into run.log).
  if [ -x "$BUILD_DIR/tests/sf_suite_probe" ]; then
    run_part probe 60 "$log" python3 tests/tools/suite_probe_check.py "$BUILD_DIR/tests/sf_suite_probe" --gpu
    row probe "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$secs" \
      "$([ $rc -eq 0 ] && echo "an illegal address costs only its test" || echo "rc $rc: the runner's check failed (run.log)")"
  else
    row probe SKIP 0 "no tests/sf_suite_probe in $BUILD_DIR"
  fi

  # The suite as two parts at once: the CPU-reference oracles (CPU micro-steps of the reference model:
  # minutes of CPU work beside an idle GPU) and everything else (GPU work), each through
  # tools/suite_runner.py (docs/GPU_VERIFICATION.md, "A suite that survives its failures"): a test that
  # loses the CUDA context, crashes or runs over SF_T_TEST_EACH seconds fails alone and the tests left run
  # in a new process; each part's JSON is written whatever happens, and the two are merged into
  # gpu_tests.json. The reference part's log follows the other's in gpu_tests.log.
  local ref_filter='CudaStep.*CpuReference*:CudaStep.FiftyStep*' tdir t0=$SECONDS lim=${SF_T_TESTS:-200}
  local inner=$((lim > 20 ? lim - 10 : lim))
  tdir=$(mktemp -d)
  local tcmd=(env SF_SKIP_SANITIZER=1 scripts/gpu_test.sh "$BUILD_DIR")
  ( timeout --kill-after=10 "$lim" python3 tools/suite_runner.py --json "$tdir/reference.json" --filter "$ref_filter" \
      --limit "$inner" --work "$tdir/reference" -- "${tcmd[@]}" >"$tdir/reference.log" 2>&1
    echo $? >"$tdir/reference.rc" ) &
  local ref_pid=$!
  # The tests the last GPU record does not hold run first (--seen): a cut at the limit leaves ones that passed there.
  local tseen=${SF_TESTS_SEEN-docs/gpu/2026-11-27-h200/1-session/first/gpu_tests.json} seen_arg=()
  [ -n "$tseen" ] && [ -f "$tseen" ] && seen_arg=(--seen "$tseen")
  run_part tests "$lim" "$OUT_DIR/gpu_tests.log" python3 tools/suite_runner.py --json "$tdir/main.json" \
    --filter="-$ref_filter" --limit "$inner" --test-limit "${SF_T_TEST_EACH:-90}" --work "$tdir/main" \
    ${seen_arg[@]+"${seen_arg[@]}"} -- "${tcmd[@]}"
  local rc_main=$rc rc_ref
  wait "$ref_pid"
  rc_ref=$(cat "$tdir/reference.rc" 2>/dev/null || echo 1)
  secs=$((SECONDS - t0))
  { echo "== the CPU-reference tests (--gtest_filter=$ref_filter), run beside the others: rc $rc_ref"
    cat "$tdir/reference.log"; } >>"$OUT_DIR/gpu_tests.log"
  local counts; counts=$(python3 - "$OUT_DIR/gpu_tests.json" "$tdir/main.json" "$ref_filter" "$tdir/reference.json" \
    2>>"$OUT_DIR/gpu_tests.log" <<'PY'
import json, os, sys
out, main, ref_filter, ref = sys.argv[1:5]
merged = {"name": "AllTests", "tests": 0, "failures": 0, "disabled": 0, "errors": 0, "not_run": 0, "testsuites": [],
          "parts": []}
notes = []
for name, path, filt in (("main", main, "-" + ref_filter), ("reference", ref, ref_filter)):
    doc = None
    if os.path.exists(path):
        try:
            doc = json.load(open(path))
        except ValueError:
            pass
    r = (doc or {}).get("runner", {})
    if doc is None:
        record = "missing: the part's runner did not finish (cut at its limit); its log has what ran"
    elif "error" in r:
        record = "missing: " + r["error"]
    else:
        record = "complete"
    merged["parts"].append({"gtest_filter": filt, "record": record, "runner": r})
    for k in ("tests", "failures", "disabled", "errors", "not_run"):
        merged[k] += int((doc or {}).get(k, 0))
    merged["testsuites"] += (doc or {}).get("testsuites", [])
    if record != "complete":
        notes.append("%s: no record" % name)
    else:
        ends = [p["outcome"] for p in r["processes"] if not p["outcome"].startswith("finished")]
        notes.append("%s: %d passed, %d failed, %d skipped, %d not run%s%s" % (
            name, r["passed"], len(r["failed"]), r["skipped"], len(r["not_run"]),
            " (%d restarts)" % len(ends) if ends else "",
            "".join("; " + e for e in r.get("exit_problems", []))))
json.dump(merged, open(out, "w"), indent=2)
print("; ".join(notes))
PY
)
  echo "== gpu_tests.json: $counts" >>"$OUT_DIR/gpu_tests.log"
  rm -rf "$tdir"
  rc=$rc_main; [ "$rc" -eq 0 ] && rc=$rc_ref
  row tests "$([ "$rc_main" -eq 0 ] && [ "$rc_ref" -eq 0 ] && echo ok || echo FAIL)" "$secs" \
    "rc $rc_main/$rc_ref; ${counts:-no record}"

  if "$SF" --help 2>&1 | grep -Eq '^ +check +'; then
    run_part check "${SF_T_CHECK:-60}" "$log" "$SF" check --batch 4 --height 128 --width 256 --seed 1 --deterministic \
      --json "$OUT_DIR/check.json"
    case $rc in
      0) row check ok "$secs" "every layer within tolerance" ;;
      3) row check FAIL "$secs" "a layer beyond tolerance: $(grep -m1 -iE 'first|beyond' "$log" | cut -c1-80)" ;;
      *) row check FAIL "$secs" "rc $rc (see run.log)" ;;
    esac
  else
    echo "== check: this slidefuse has no 'check' command; skipped" | tee -a "$log"
    row check SKIP 0 "no 'slidefuse check' in this build"
  fi

  local san=${SF_SANITIZER-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)}
  if [ -n "$san" ] && [ "$san" != none ]; then
    : >"$OUT_DIR/memcheck.log"
    run_part memcheck "${SF_T_MEMCHECK:-120}" "$OUT_DIR/memcheck.log" "$san" --tool memcheck --error-exitcode 86 \
      --leak-check full "$BUILD_DIR/tests/sf_gpu_tests" --gtest_filter=CudaStep.OneStepForSanitizer
    if [ $rc -ne 0 ] && grep -q 'Device not supported' "$OUT_DIR/memcheck.log"; then
      # gVisor machines: compute-sanitizer refuses the device (/work/.library/device/KINDS.md).
      row memcheck SKIP "$secs" "compute-sanitizer does not support this machine ('Device not supported')"
    else
      row memcheck "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$secs" \
        "rc $rc; $(grep -m1 -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$OUT_DIR/memcheck.log" || echo 'no summary')"
    fi
  else
    row memcheck SKIP 0 "no compute-sanitizer (or SF_SANITIZER=none)"
  fi

  if "$SF" bench --help 2>&1 | grep -q ceilings; then
    run_part ceilings "${SF_T_CEILINGS:-30}" "$log" "$SF" bench ceilings
    row ceilings "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$secs" \
      "$(grep -Eo '[0-9.]+ (GB/s|TFLOP/s)' "$log" | tail -2 | paste -sd, - || echo "rc $rc")"
  else
    row ceilings SKIP 0 "no 'bench ceilings' in this build"
  fi

  run_part bench "${SF_T_BENCH:-75}" "$log" "$SF" bench step --batch-sizes 16 --size 256x512 --deterministic \
    --steps 50 --warmup 5 --json "$OUT_DIR/bench.json"
  row bench "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$secs" \
    "$(grep -m1 -E 'batch +16:' "$log" | sed 's/^ *//' | cut -c1-90)"
  grep -m1 'CUDA backend:' "$log" "$OUT_DIR/gpu_tests.log" 2>/dev/null | sed 's/^[^:]*:/cudnn runtime: /' >>"$OUT_DIR/env.txt"
  summary
  return $failed
}

if [ "$STAGE" = first ]; then
  stage_first
  exit $?
fi

set -e
have_gpu || { echo "gpu_verify: no GPU (nvidia-smi lists none)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT_DIR/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT_DIR/commit.txt" || true
case "$STAGE" in
  tests)
    # Every gpu test through the runner (a lost context, a crash or a test over SF_T_TEST_EACH seconds
    # costs only its test), then memcheck of one step as gpu_test.sh runs it.
    st=0
    python3 tools/suite_runner.py --json "$OUT_DIR/gpu_tests.json" --test-limit "${SF_T_TEST_EACH:-300}" \
      --filter="${SF_GTEST_FILTER:-*}" --work "$(mktemp -d)" -- env SF_SKIP_SANITIZER=1 scripts/gpu_test.sh "$BUILD_DIR" 2>&1 | tee "$OUT_DIR/gpu_tests.log" ||
      st=$?
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
    if [ -n "$san" ]; then
      "$san" --tool memcheck --error-exitcode 86 --leak-check full "$BUILD_DIR/tests/sf_gpu_tests" \
        --gtest_filter=CudaStep.OneStepForSanitizer 2>&1 | tee -a "$OUT_DIR/gpu_tests.log" || st=$?
    fi
    exit $st ;;
  bench)
    "$SF" bench ceilings --json "$OUT_DIR/ceilings.json" 2>&1 | tee "$OUT_DIR/bench.log"
    # The step's modelled floor at those measured ceilings (no GPU work; docs/BENCH.md), to read the
    # per-layer table and the samples/s against.
    "$SF" plan --batch 128 --roofline --ceilings "$OUT_DIR/ceilings.json" --json "$OUT_DIR/plan_roofline_128.json" \
      2>&1 | tee -a "$OUT_DIR/bench.log"
    "$SF" bench step --batch-sizes 64,128,256,512 --size 256x512 --search --layers --layers-batch 128 \
      --ceilings "$OUT_DIR/ceilings.json" \
      --json "$OUT_DIR/bench_256x512.json" 2>&1 | tee -a "$OUT_DIR/bench.log"
    "$SF" bench step --batch-sizes 128,256 --size 160x320 --json "$OUT_DIR/bench_160x320.json" 2>&1 | tee -a "$OUT_DIR/bench.log" ;;
  uporder)
    for order in upsample_first conv_first; do
      "$SF" bench step --batch-sizes 128 --size 256x512 --up-order "$order" --layers --layers-batch 128 \
        --json "$OUT_DIR/bench_up_$order.json" 2>&1 | tee -a "$OUT_DIR/uporder.log"
    done ;;
  fused)
    "$SF" plan --batch 128 --cudnn-device gpu --fusion-graphs --time --json "$OUT_DIR/fusion_graphs.json" 2>&1 |
      tee -a "$OUT_DIR/fused.log"
    for v in off on; do
      flag=(); [ "$v" = on ] && flag=(--fuse-expand-dw)
      "$SF" bench step --batch-sizes 128 --size 256x512 "${flag[@]}" --layers --layers-batch 128 \
        --json "$OUT_DIR/bench_fuse_$v.json" 2>&1 | tee -a "$OUT_DIR/fused.log"
    done ;;
  sanitize)
    # The custom kernels' own tests (shared-memory tiles, warp reductions, block barriers): where a
    # race or a misplaced __syncthreads would live; tests/gpu/sanitize_suites.txt names the suites (cuDNN's,
    # cuBLAS's and the whole steps' are out: their kernels are not ours, or they take minutes under a
    # sanitizer). Each tool runs them through tools/suite_runner.py (a test that loses the context, crashes
    # or runs over SF_T_SANITIZE_TEST seconds fails alone; the JSON says what ran), the tests no sanitizer
    # has seen on a GPU first (--seen: the H200's racecheck log), and tools/sanitizer_log.py puts each
    # report under the test that printed it ($tool.json).
    san=${SF_SANITIZER-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)}
    [ -n "$san" ] && [ "$san" != none ] || { echo "gpu_verify: no compute-sanitizer" | tee "$OUT_DIR/sanitize.txt"; exit 1; }
    filter=$(awk '$1 == "in" { printf "%s%s.*", sep, $2; sep = ":" }' tests/gpu/sanitize_suites.txt)
    seen=${SF_SANITIZE_SEEN-docs/gpu/2026-11-27-h200/2-racecheck/racecheck.log}
    seen_arg=(); [ -n "$seen" ] && [ -f "$seen" ] && seen_arg=(--seen "$seen")
    lim=${SF_T_SANITIZE:-270}
    bad=0
    set +e  # a tool's failure is its row, not the end of the stage
    for tool in racecheck synccheck; do
      : >"$OUT_DIR/$tool.log"
      timeout -k 10 "$((lim + 20))" python3 tools/suite_runner.py --json "$OUT_DIR/$tool.json" --filter "$filter" \
        --limit "$lim" --test-limit "${SF_T_SANITIZE_TEST:-60}" --log "$OUT_DIR/$tool.log" --work "$(mktemp -d)" \
        ${seen_arg[@]+"${seen_arg[@]}"} -- "$san" --tool "$tool" --error-exitcode 86 "$BUILD_DIR/tests/sf_gpu_tests" \
        >/dev/null 2>>"$OUT_DIR/$tool.log"
      rc=$?
      if grep -q 'Device not supported' "$OUT_DIR/$tool.log"; then
        printf '%-10s SKIP  rc %s; compute-sanitizer does not support this device\n' "$tool" "$rc" | tee -a "$OUT_DIR/sanitize.txt"
        continue
      fi
      # ok / part / FAIL with the runner's counts and the reports by test (tools/sanitizer_log.py says which).
      python3 tools/sanitizer_log.py --tool "$tool" --log "$OUT_DIR/$tool.log" --json "$OUT_DIR/$tool.json" \
        --runner-rc "$rc" | tee -a "$OUT_DIR/sanitize.txt"
      st=${PIPESTATUS[0]}
      [ "$st" -eq 0 ] || [ "$st" -eq 3 ] || bad=1  # 3: part
    done
    set -e
    # The per-test record for docs/gpu/ (reports by test, not run, first run under each tool).
    recs=(); for tool in racecheck synccheck; do [ -s "$OUT_DIR/$tool.json" ] && recs+=("$OUT_DIR/$tool.json"); done
    [ ${#recs[@]} -gt 0 ] && python3 tools/sanitizer_log.py --table "$OUT_DIR/sanitize.md" "${recs[@]}" || true
    exit $bad ;;
  compare)
    python3 tools/compare.py --slidefuse "$SF" --no-build --batch-sizes 64,128,256 --out-dir "$OUT_DIR" \
      --work-dir "$(mktemp -d)/compare-work" 2>&1 | tee "$OUT_DIR/compare.log" ;;
  train)
    # The run folder (checkpoints: tens of MB) stays out of OUT, in runs/ (ignored by git, so a warm
    # device keeps it between calls); its metrics and curves come back. SIGTERM before the command's
    # limit makes the trainer finish the step and write a checkpoint (exit 0), and the next
    # `gpu_verify.sh train` resumes it: a run longer than one command still completes.
    run_dir=runs/gpu_verify_train
    timeout --preserve-status -s TERM -k 30 "${SF_T_TRAIN:-500}" \
      "$SF" train --config configs/gpu_quick.yaml --out "$run_dir" --resume auto 2>&1 | tee -a "$OUT_DIR/train.log"
    cp "$run_dir/metrics.jsonl" "$OUT_DIR/train_metrics.jsonl"
    if [ -f "$run_dir/metrics.png" ]; then cp "$run_dir/metrics.png" "$OUT_DIR/train_curves.png"; fi
    # The best and the last checkpoints' weights (about 13 MB each: parameters and BatchNorm buffers,
    # no optimizer state) come back, so that eval questions about this run can be answered on a CPU
    # machine (the last: where the run ended, e.g. after a validation drop the best one predates).
    last=$(ls -1 "$run_dir"/checkpoints/ckpt-*.safetensors 2>/dev/null | tail -1 || true)
    for which in best last; do
      ck="$run_dir/checkpoints/best.safetensors"; [ "$which" = last ] && ck=$last
      [ -n "$ck" ] && [ -f "$ck" ] || continue
      "$SF" export --checkpoint "$ck" --out "$OUT_DIR/${which}_weights.safetensors" 2>&1 | tail -1 | tee -a "$OUT_DIR/train.log" ||
        echo "gpu_verify: export of the $which checkpoint ($ck) failed" | tee -a "$OUT_DIR/train.log"
    done
    if ls "$OUT_DIR"/*_weights.safetensors >/dev/null 2>&1; then
      cp "$run_dir/config.resolved.yaml" "$OUT_DIR/train_config.resolved.yaml" || true
    fi ;;
  e2e)
    run_dir="$(mktemp -d)/e2e-run"
    # The same kernels in both: SF_CUDA's config overrides for the training, their bench step flags.
    cuda_overrides=(); bench_flags=()
    for kv in ${SF_CUDA:-}; do
      cuda_overrides+=("$kv")
      case "$kv" in
        cuda.pdl=true) bench_flags+=(--pdl) ;;
        cuda.dw_variants=false) bench_flags+=(--no-dw-variants) ;;
        cuda.bn_row_batch=*) bench_flags+=(--bn-row-batch "${kv#*=}") ;;
        cuda.bn_min_blocks=*) bench_flags+=(--bn-min-blocks "${kv#*=}") ;;
        cuda.upsample_row_loads=true) bench_flags+=(--upsample-row-loads) ;;
        cuda.dw_fused_bwd=true) bench_flags+=(--dw-fused-bwd) ;;
        cuda.dw_fused_bn_bwd=true) bench_flags+=(--dw-fused-bwd-bn) ;;
        cuda.dw_fused_bn_grad=true) bench_flags+=(--dw-fused-bn-grad) ;;
        cuda.pw_custom=true) bench_flags+=(--pw-custom) ;;
        cuda.pw_stats=true) bench_flags+=(--pw-stats) ;;
        cuda.pw_bn_grad=true) bench_flags+=(--pw-bn-grad) ;;
        cuda.pw_bn_bwd=true) bench_flags+=(--pw-bn-bwd) ;;
        cuda.pw_fused_bwd=true) bench_flags+=(--pw-fused-bwd) ;;
        cuda.head_bn_grad=true) bench_flags+=(--head-bn-grad) ;;
        cuda.head_bn_dx=true) bench_flags+=(--head-bn-dx) ;;
        cuda.dw_stats=true) bench_flags+=(--dw-stats) ;;
        cuda.branch_lanes=true) bench_flags+=(--branch-lanes) ;;
        model.fuse_*=true|model.merge_heads=true) f=${kv#model.}; f=${f%=true}; bench_flags+=("--${f//_/-}") ;;
        *) echo "gpu_verify: SF_CUDA: '$kv' is not a cuda.KEY=true (or model fusion) switch bench step has" >&2; exit 64 ;;
      esac
    done
    "$SF" train --config configs/gpu_quick.yaml --out "$run_dir" sched.epochs=1 data.num_samples=30000 \
      data.processed_dir=data/gpu_e2e logging.log_interval=20 logging.plot=false ${cuda_overrides[@]+"${cuda_overrides[@]}"} \
      2>&1 | tee "$OUT_DIR/e2e.log"
    cp "$run_dir/metrics.jsonl" "$OUT_DIR/e2e_metrics.jsonl"
    "$SF" bench step --batch-sizes 128 --size 256x512 ${bench_flags[@]+"${bench_flags[@]}"} --json "$OUT_DIR/e2e_bench.json" \
      2>&1 | tee -a "$OUT_DIR/e2e.log"
    python3 tools/e2e_check.py --metrics "$OUT_DIR/e2e_metrics.jsonl" --bench "$OUT_DIR/e2e_bench.json" \
      --batch 128 --json "$OUT_DIR/e2e.json" 2>&1 | tee -a "$OUT_DIR/e2e.log" ;;
  bnstats)
    run_dir=runs/gpu_verify_train
    log="$OUT_DIR/bnstats.log"; : > "$log"
    last=$(ls -1 "$run_dir"/checkpoints/ckpt-*.safetensors 2>/dev/null | tail -1 || true)
    [ -n "$last" ] || { echo "gpu_verify: no checkpoint in $run_dir/checkpoints (run the train stage first)" | tee -a "$log" >&2; exit 1; }
    bad=0
    for which in best last; do
      ck="$run_dir/checkpoints/best.safetensors"; [ "$which" = last ] && ck=$last
      [ -f "$ck" ] || { echo "gpu_verify: no $which checkpoint" | tee -a "$log"; continue; }
      echo "$which: $ck" | tee -a "$log"
      for m in running batch; do
        "$SF" eval --checkpoint "$ck" --split val --bn-stats "$m" --out "$OUT_DIR/bnstats_${which}_$m.json" \
          train.backend=cuda 2>&1 | tail -9 | tee -a "$log" || bad=1
      done
    done
    python3 - "$OUT_DIR" <<'PY' | tee "$OUT_DIR/bnstats.md" | tee -a "$log"
import glob, json, os, sys
rows = []
for which in ("best", "last"):
    for m in ("running", "batch"):
        p = os.path.join(sys.argv[1], "bnstats_%s_%s.json" % (which, m))
        if os.path.exists(p):
            j = json.load(open(p))
            rows.append("| %s | %s | %s | %s | %s | %.3f | %.2f%% | %.2f%% | %.3f | %.3f | %s |" % (
                which, j.get("checkpoint_epoch"), j.get("checkpoint_step"), m, j.get("batch_size"), j["mae_px"],
                j["hit_le_2px"], j["hit_le_5px"], j["gap_mae"], j["slider_mae"], j["samples"]))
print("| checkpoint | epoch | step | BatchNorm | batch | MAE px | hit@2px | hit@5px | gap MAE | slider MAE | samples |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
print("\n".join(rows))
PY
    exit $bad ;;
  evalcmp)
    run_dir=runs/gpu_verify_train
    ckpt="$run_dir/checkpoints/best.safetensors"
    [ -f "$ckpt" ] || ckpt=$(ls -1 "$run_dir"/checkpoints/ckpt-*.safetensors 2>/dev/null | tail -1 || true)
    [ -n "$ckpt" ] && [ -f "$ckpt" ] || { echo "gpu_verify: no checkpoint in $run_dir/checkpoints (run the train stage first)" >&2; exit 1; }
    work="$(mktemp -d)/evalcmp"
    log="$OUT_DIR/evalcmp.log"
    echo "checkpoint: $ckpt" | tee "$log"
    "$SF" generate --out "$work/data" --count 2000 --seed 7 2>&1 | tail -2 | tee -a "$log"
    for b in cuda cpu; do
      "$SF" eval --checkpoint "$ckpt" --data "$work/data" --split val --out "$work/eval_$b.json" \
        --csv "$work/eval_$b.csv" train.backend=$b 2>&1 | tee -a "$log"
    done
    # The bf16 floor: the CPU reference with bf16-rounded conv weights and input, i.e. how many samples
    # rounding alone moves (tools/backend_compare.py --floor-csv judges CUDA against it).
    "$SF" eval --checkpoint "$ckpt" --data "$work/data" --split val --out "$work/eval_floor.json" \
      --csv "$work/eval_floor.csv" --bf16-floor train.backend=cpu 2>&1 | tee -a "$log"
    cp "$work/eval_cuda.json" "$OUT_DIR/eval_cuda.json"
    # The per-sample CSVs come back too, so that a disagreement can be studied without the device.
    for b in cuda cpu floor; do cp "$work/eval_$b.csv" "$OUT_DIR/eval_$b.csv"; done
    imgs=()
    for i in 1 2 3 4 5 6; do
      "$SF" generate --preview "$work/img$i.png" --preview-count 1 --seed "$((100 + i))" >>"$log" 2>&1
      imgs+=("$work/img$i.png")
    done
    for b in cuda cpu; do
      "$SF" predict --checkpoint "$ckpt" --json "$work/predict_$b.json" train.backend=$b "${imgs[@]}" 2>&1 | tee -a "$log"
    done
    python3 tools/backend_compare.py --eval-csv "$work/eval_cuda.csv" "$work/eval_cpu.csv" \
      --eval-json "$work/eval_cuda.json" "$work/eval_cpu.json" --floor-csv "$work/eval_floor.csv" \
      --predict "$work/predict_cuda.json" \
      "$work/predict_cpu.json" --json "$OUT_DIR/evalcmp.json" 2>&1 | tee -a "$log" ;;
  profile)
    ncu=${SF_NCU-$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)}
    [ -n "$ncu" ] || { echo "gpu_verify: no ncu" | tee "$OUT_DIR/profile.log"; exit 1; }
    log="$OUT_DIR/profile.log"
    [ -f "$OUT_DIR/ceilings.json" ] || "$SF" bench ceilings --json "$OUT_DIR/ceilings.json" 2>&1 | tee "$log"
    run_dir="$(mktemp -d)/profile-run"
    raw="$(dirname "$run_dir")/ncu_raw.csv"
    # Eager calls (--no-graph: ncu profiles kernels, not graph launches), steps before 6 warm up
    # (cuDNN plans, caches); only step 6's kernels are profiled (--profile-from-start off).
    timeout -k 10 "${SF_T_PROFILE:-480}" "$ncu" --profile-from-start off --csv --page raw --print-units base \
      --metrics "$(python3 tools/ncu_summary.py --print-metrics)" --log-file "$raw" \
      "$SF" train --config configs/gpu_quick.yaml --out "$run_dir" --no-graph --profile-steps 6:6 \
      sched.epochs=1 data.num_samples=2000 data.processed_dir=data/gpu_profile logging.plot=false 2>&1 | tail -20 | tee -a "$log"
    gzip -c "$raw" > "$OUT_DIR/ncu_raw.csv.gz"
    python3 tools/ncu_summary.py "$raw" --ceilings "$OUT_DIR/ceilings.json" --md "$OUT_DIR/ncu_summary.md" \
      --json "$OUT_DIR/ncu_summary.json" 2>&1 | tee -a "$log"
    cat "$OUT_DIR/ncu_summary.md" ;;
esac
