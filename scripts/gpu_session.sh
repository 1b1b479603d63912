#!/usr/bin/env bash
# The first-GPU-run checks (issue "First GPU run") in ONE device command, for sessions whose whole
# device budget is about 15 minutes: the stages of scripts/gpu_verify.sh, overlapped where they do
# not time each other, under one deadline.
#   t=0       `train` (configs/gpu_quick.yaml to hit@5px) starts in the background: its data
#             generation is CPU work, and nothing in it is a timing that contention would falsify
#   t=0       `first` in the foreground: env + cuDNN runtime version, plans (device JSON vs handle),
#             every gpu test (gtest JSON), `check`, memcheck of one step, ceilings, a short bench
#             (the bench's figure is taken under the training's contention: not a speed result)
#             then the per-test record (tools/gpu_tests_table.py: tests.md, session.log's `tests:` line)
#   then      `sanitize`: racecheck + synccheck over the custom-kernel tests
#   then      wait for `train` (stopped with a checkpoint at its own limit), `evalcmp` on its checkpoint
#             (CUDA, CPU reference and the CPU reference's bf16 floor), `bnstats` (its best and last
#             checkpoints on its validation split with running and with batch BatchNorm statistics)
#   then      with the GPU to itself and the time left, in ONE process (`bench step --configs`,
#             tools/bench_configs.h): `bench step --layers` at batch 128 (the per-layer table and the
#             depthwise variants' times; issue "GPU speed"), then the step A/Bs of
#             configs/bench/session_ab.txt in its order (every switch at once, then each switch built
#             since the H200 run, each line naming its OPTIMIZATION_LOG entry and prediction), then the
#             per-layer run's step again (the drift over the list), each record compared with the
#             per-layer run's step by tools/bench_ab.py (bench_ab.md) and the chained ones with their own
#             base (bench_ab_chain.md), bench_all's per-layer table against the base's (layers_all.md), each
#             A/B against its written prediction (predictions.md); then, with the time left, `plan --fusion-graphs --time` (the cuDNN
#             BN-fusion graphs timed against the plain conv and our BN kernels; its graph lines are logged
#             as they finish, so a cut keeps those).
#             (`scripts/gpu_verify.sh fused` runs it on its own.)
# Everything lands in a work folder that is packed into $OUT/session.tar.gz after every phase (so
# a command killed at its limit still returns what finished), plus $OUT/session.log and the training
# run's best and last weights, $OUT/{best,last}_weights.safetensors (evalcmp and bnstats questions can
# then be studied on a CPU).
# usage: scripts/gpu_session.sh [build-dir (default .gpu)]
#   SF_DEADLINE        seconds from the start by which every part has ended (default 540)
#   SF_SESSION_PHASES  all (default), or bench: only the bench phase (the per-layer run, the A/Bs, the
#                      fusion-graph timing) with the whole deadline: a second command for the A/Bs the
#                      first one's deadline cut
#   SF_AB_ONLY         comma-separated A/B names (bench_bn4,bench_pdl,...: configs/bench/session_ab.txt's
#                      names) to run after the base, in the list's order; default all
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-.gpu}
FINAL=${OUT:-$PWD/gpu-session}
mkdir -p "$FINAL"
W="$(mktemp -d)/session"; mkdir -p "$W"
DEADLINE=${SF_DEADLINE:-540}
PHASES=${SF_SESSION_PHASES:-all}
case "$PHASES" in all|bench) ;; *) echo "gpu_session.sh: SF_SESSION_PHASES is all or bench, got '$PHASES'" >&2; exit 2;; esac
T0=$(date +%s)
now() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(now) )); }
say() { echo "[session $(now)s] $*" | tee -a "$W/session.log"; }
# The exported weights (13 MB) travel beside the archive, never in it: one file may be 16 MiB at most.
pack() { tar czf "$FINAL/session.tar.gz.tmp" --exclude='*.safetensors' -C "$W" . &&
         mv "$FINAL/session.tar.gz.tmp" "$FINAL/session.tar.gz"; cp "$W/session.log" "$FINAL/session.log"; }
# clamp LIMIT to the time left minus RESERVE (never below 5 s)
budget() { local want=$1 reserve=$2 l; l=$(( $(left) - reserve )); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 5 ] && want=5; echo "$want"; }

say "build folder $B, commit $(cat "$B/commit.txt" 2>/dev/null || git rev-parse HEAD), deadline ${DEADLINE}s, phases $PHASES${SF_AB_ONLY:+, A/Bs $SF_AB_ONLY}"
git rev-parse HEAD >"$W/commit.txt" 2>/dev/null || true

if [ "$PHASES" = all ]; then

# ---- train in the background (checkpoint + exit 0 at its limit; resumable) ----
train_limit=$(budget 330 210)
say "train: background, limit ${train_limit}s"
( OUT="$W/train" SF_T_TRAIN="$train_limit" scripts/gpu_verify.sh train "$B" >"$W/train.out" 2>&1
  echo $? >"$W/train.rc" ) &
train_pid=$!

# ---- first: env, plans, every gpu test, check, memcheck, ceilings, bench (contended) ----
say "first: foreground"
OUT="$W/first" SF_T_TESTS=$(budget 320 220) scripts/gpu_verify.sh first "$B" >"$W/first.out" 2>&1
say "first: rc $? -- $(grep -E '^tests' "$W/first/summary.txt" 2>/dev/null)"
# The per-test record (tools/gpu_tests_table.py): failures, what ran for the first time against the last
# GPU record, what the suite lists that still has not run (tests.md, for docs/gpu/).
if [ -s "$W/first/gpu_tests.json" ]; then
  SF_SKIP_SANITIZER=1 scripts/gpu_test.sh "$B" --gtest_list_tests >"$W/first/list.txt" 2>/dev/null
  python3 tools/gpu_tests_table.py "$W/first/gpu_tests.json" --list "$W/first/list.txt" --env "$W/first/env.txt" \
    --since docs/gpu/2026-11-27-h200/1-session/first/gpu_tests.json --title "gpu suite, $(date -u +%F)" \
    --out "$W/tests.md" 2>>"$W/session.log" &&
    say "tests: $(grep -E '^\*\*[0-9]+ tests' "$W/tests.md" | tr -d '*' | sed 's/\.$//'); $(grep -Eo 'First run on a GPU \([0-9]+\)' "$W/tests.md"); $(grep -Eo 'Listed but not run here \([0-9]+ of [0-9]+\)' "$W/tests.md")"
fi
pack

# ---- sanitize: racecheck + synccheck over the custom-kernel tests ----
san_each=$(( ($(left) - 150) / 2 )); [ $san_each -gt 120 ] && san_each=120; [ $san_each -lt 30 ] && san_each=30
say "sanitize: ${san_each}s per tool"
OUT="$W/sanitize" SF_T_SANITIZE=$san_each scripts/gpu_verify.sh sanitize "$B" >"$W/sanitize.out" 2>&1
say "sanitize: rc $? -- $(tr '\n' ';' <"$W/sanitize/sanitize.txt" 2>/dev/null)"
pack

# ---- wait for train, then evalcmp ----
wait "$train_pid"
say "train: rc $(cat "$W/train.rc" 2>/dev/null) -- $(grep -E '^validation after' "$W/train/train.log" 2>/dev/null | tail -1 | cut -c1-200)"
for w in best last; do
  [ -f "$W/train/${w}_weights.safetensors" ] && cp "$W/train/${w}_weights.safetensors" "$FINAL/${w}_weights.safetensors"
done
pack
ev=$(budget 110 60)
say "evalcmp: limit ${ev}s"
OUT="$W/evalcmp" timeout -k 10 "$ev" scripts/gpu_verify.sh evalcmp "$B" >"$W/evalcmp.out" 2>&1
say "evalcmp: rc $?"
pack
bs=$(budget 60 60)
say "bnstats: limit ${bs}s"
OUT="$W/bnstats" timeout -k 10 "$bs" scripts/gpu_verify.sh bnstats "$B" >"$W/bnstats.out" 2>&1
say "bnstats: rc $?"
grep -E '^\| (best|last) ' "$W/bnstats/bnstats.md" 2>/dev/null | while IFS= read -r l; do say "bnstats: $l"; done
pack
fi  # PHASES = all

# ---- the GPU to itself: the per-layer bench and the step A/Bs in one process, then the fusion graphs ----
if [ "$(left)" -gt 60 ]; then
  . scripts/cuda_libs.sh
  sf_python_cuda_libs
  sf_packed_libs "$B" "$B/slidefuse"
  # The per-layer run (the base, configs/bench/session_ab.txt's first line) and every A/B of the list in
  # ONE process (`bench step --configs`, tools/bench_configs.h): cuDNN's plans autotuned once, every
  # configuration on the same engines, each record written as it ends; its deadline stops it starting
  # what would not end in time (listed as skipped in configs_summary.json). The combined log is split
  # into one NAME.log per configuration (the lines after its "configuration NAME" line).
  LIST=configs/bench/session_ab.txt
  BASE=$(awk '{ sub(/#.*/, "") } NF { print $1; exit }' "$LIST")
  # Packed every 30 s meanwhile: a command killed at its own limit still returns the records so far.
  # (The loop ends itself at the stop file, never killed in the middle of a pack.)
  ( n=0; while [ ! -e "$W.stop" ]; do sleep 1; n=$((n + 1)); [ $((n % 30)) -eq 0 ] && pack 2>/dev/null; done ) &
  packer=$!
  # A configuration whose failure loses the CUDA context (exit status 3: a sticky error, e.g. an illegal
  # address in a kernel never run before) ends its process; the configurations it did not run go to a
  # new one (configs_summary.json's "remaining"), in $W/retryN, whose records but the base's join $W.
  jd=$W only=${SF_AB_ONLY:-} layers="--layers --layers-batch 128" attempt=0 dirs=$W
  while :; do
    bl=$(budget 420 15)
    say "bench step --configs $LIST${only:+ --only $only}: limit ${bl}s"
    mkdir -p "$jd"
    timeout -k 5 "$bl" "$B/slidefuse" bench step --batch-sizes 128 --size 256x512 $layers \
      --configs "$LIST" --json-dir "$jd" --deadline-s $((bl - 10)) ${only:+--only "$only"} >"$jd/bench_configs.log" 2>&1
    rc=$?
    say "bench: rc $rc -- $(grep -c '^\[[0-9]* s\] configuration ' "$jd/bench_configs.log") configuration(s) started"
    awk -v dir="$jd" '/^\[[0-9]+ s\] configuration /{ name = $4; sub(/:$/, "", name) }
                     { print > (dir "/" (name == "" ? "bench_head" : name) ".log") }' "$jd/bench_configs.log"
    grep -E '^\[[0-9]+ s\] (skipped|the base|the CUDA context)|^base .* again at the end|^per-layer run' \
      "$jd/bench_configs.log" | while IFS= read -r l; do say "bench: $l"; done
    [ "$rc" -eq 3 ] || break
    only=$(python3 -c 'import json, sys; print(",".join(json.load(open(sys.argv[1])).get("remaining", [])))' \
      "$jd/configs_summary.json" 2>/dev/null)
    [ -n "$only" ] && [ "$(left)" -gt 60 ] || break
    attempt=$((attempt + 1)); jd=$W/retry$attempt; layers=; dirs="$dirs $jd"
  done
  touch "$W.stop"; wait "$packer" 2>/dev/null
  # The configurations in run order (a retry's base and its second run left out), their records in $W.
  RAN=()
  for d in $dirs; do
    for l in $(grep -o '^\[[0-9]* s\] configuration [^ :]*' "$d/bench_configs.log" | awk '{print $4}'); do
      if [ "$d" != "$W" ]; then
        { [ "$l" = "$BASE" ] || [ "$l" = "${BASE}_again" ]; } && continue
        cp "$d/$l.json" "$d/$l.log" "$W/" 2>/dev/null
      fi
      RAN+=("$l")
      say "bench $l: $(grep -m1 -E 'batch +128:' "$W/$l.log" 2>/dev/null | sed 's/^ *//' | cut -c1-120)"
    done
  done
  # What no process started (the deadline's skips, a lost context's remainder, a run cut at its limit):
  # the next command's SF_AB_ONLY.
  notrun=
  for l in $(awk '{ sub(/#.*/, "") } NF { print $1 }' "$LIST" | tail -n +2); do
    [ -z "${SF_AB_ONLY:-}" ] || [[ ",$SF_AB_ONLY," == *",$l,"* ]] || continue
    [[ " ${RAN[*]} " == *" $l "* ]] || notrun="$notrun${notrun:+,}$l"
  done
  [ -n "$notrun" ] && say "bench: not run, the next command's SF_AB_ONLY: $notrun"
  if [ -s "$W/bench_dwfused.log" ]; then
    grep -E 'fused backward runs' "$W/bench_dwfused.log" | sed -E 's/^ *([^:]*): .*(, fused backward runs.*)$/\1\2/' |
      head -12 | while IFS= read -r l; do say "bench --dw-fused-bwd: $l"; done
  fi
  [ -s "$W/bench_pdl.log" ] && say "bench --pdl: $(grep -m1 -E '^ *graphs:' "$W/bench_pdl.log" | sed 's/^ *//' | cut -c1-160)"
  [ -s "$W/bench_pwcustom.log" ] &&
    say "bench --pw-custom: $(grep -c 'custom-pointwise' "$W/bench_pwcustom.log") log lines name custom-pointwise"
  pack
  # Each A/B against the per-layer run's step (tools/bench_ab.py: verdict from the p10-p90 spreads).
  ab=()
  for f in "${RAN[@]}"; do
    [ "$f" != "$BASE" ] && [ -s "$W/$f.json" ] && ab+=("$W/$f.json")
  done
  # The base's second run (the list's end) sets the drift below which no difference is a verdict.
  again=(); [ -s "$W/${BASE}_again.json" ] && again=(--drift "$W/$BASE.json" "$W/${BASE}_again.json")
  if [ -s "$W/$BASE.json" ] && [ ${#ab[@]} -gt 0 ]; then
    python3 tools/bench_ab.py "$W/$BASE.json" "${ab[@]}" ${again[@]+"${again[@]}"} --md "$W/bench_ab.md" \
      --json "$W/bench_ab.json" >"$W/bench_ab.log" 2>&1
    say "A/B: rc $?"
    grep -E '^###|^\| *128 |^warning' "$W/bench_ab.md" 2>/dev/null | while IFS= read -r l; do say "A/B: $l"; done
  fi
  # The A/Bs whose predictions name another base than the per-layer run (configs/bench/predictions.tsv):
  # each OTHER against its BASE, one after another into bench_ab_chain.md.
  : >"$W/bench_ab_chain.md"
  for pair in $(python3 tools/ab_predictions.py configs/bench/predictions.tsv --pairs "$BASE"); do
    base=${pair%%:*} other=${pair##*:}
    [ -s "$W/$base.json" ] && [ -s "$W/$other.json" ] || continue
    python3 tools/bench_ab.py "$W/$base.json" "$W/$other.json" ${again[@]+"${again[@]}"} --md "$W/ab_pair.md" \
      >>"$W/bench_ab.log" 2>&1 &&
      cat "$W/ab_pair.md" >>"$W/bench_ab_chain.md"
    grep -E '^###|^\| *128 ' "$W/ab_pair.md" 2>/dev/null | while IFS= read -r l; do say "A/B chain: $l"; done
  done
  rm -f "$W/ab_pair.md"
  # bench_all's own per-layer table against the base's, class by class (layers_all.md): what every switch at
  # once changed and what is left; the four largest savings in session.log.
  if [ -s "$W/bench_all.json" ] && grep -q '"layers"' "$W/bench_all.json" && [ -s "$W/$BASE.json" ]; then
    python3 tools/layer_gaps.py "$W/bench_all.json" --against "$W/$BASE.json" --md "$W/layers_all.md" \
      >/dev/null 2>>"$W/bench_ab.log" &&
      awk '/^### by layer class/ { f = 1; next } f && /^\|---/ { g = 1; next } g && /^\|/ { print; if (++n == 4) exit }' \
        "$W/layers_all.md" | while IFS= read -r l; do say "layers bench_all: $l"; done
  fi
  # Every A/B against the prediction written down before it (predictions.md; session.log's `prediction:` lines).
  python3 tools/ab_predictions.py configs/bench/predictions.tsv "$W" ${again[@]+"${again[@]}"} --md "$W/predictions.md" \
    --json "$W/predictions.json" 2>>"$W/bench_ab.log" | while IFS= read -r l; do say "$l"; done
  pack
  # With the time left: what each cuDNN BatchNorm-fusion graph costs against the plain conv + our BN
  # kernels (OPTIMIZATION_LOG entry 0). Runtime compilation makes it a minute or more; each graph's
  # lines reach the log as it finishes, so a cut still reports the graphs done.
  if [ "$(left)" -gt 45 ]; then
    ft=$(budget 150 5)
    say "plan --fusion-graphs --time: limit ${ft}s"
    timeout -k 5 "$ft" "$B/slidefuse" plan --batch 128 --cudnn-device gpu --fusion-graphs --time \
      --json "$W/fusion_time.json" >"$W/fusion_time.log" 2>&1
    say "fusion graphs: rc $? -- $(grep -c '^fusion graph ' "$W/fusion_time.log") done; $(grep -m1 'fused graphs timed' "$W/fusion_time.log")"
    grep -E 'timed: pwconv' "$W/fusion_time.log" | sed 's/^ *//' | cut -c1-160 | while IFS= read -r l; do say "pwconv: $l"; done
  fi
fi
say "done"
pack
