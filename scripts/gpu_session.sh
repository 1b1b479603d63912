#!/usr/bin/env bash
# The first-GPU-run checks (issue "First GPU run") in ONE device command, for sessions whose whole
# device budget is about 15 minutes: the stages of scripts/gpu_verify.sh, overlapped where they do
# not time each other, under one deadline.
#   t=0       `train` (configs/gpu_quick.yaml to hit@5px) starts in the background: its data
#             generation is CPU work, and nothing in it is a timing that contention would falsify
#   t=0       `first` in the foreground: env + cuDNN runtime version, plans (device JSON vs handle),
#             every gpu test (gtest JSON), `check`, memcheck of one step, ceilings, a short bench
#             (the bench's figure is taken under the training's contention: not a speed result)
#   then      `sanitize`: racecheck + synccheck over the custom-kernel tests
#   then      wait for `train` (stopped with a checkpoint at its own limit), `evalcmp` on its checkpoint
#             (CUDA, CPU reference and the CPU reference's bf16 floor), `bnstats` (its best and last
#             checkpoints on its validation split with running and with batch BatchNorm statistics)
#   then      with the GPU to itself and the time left: `bench step --layers` at batch 128 (the
#             depthwise variants' times; issue "GPU speed"), the same step with every switch built since
#             the H200 run at once (bench_all), with `--merge-heads` (the four heads' conv1 as one
#             128 -> 256 ConvBN), with `--fuse-head-bn` (their BN inside their conv2, alone and with
#             `--merge-heads`), with `--fuse-up-bn` (the up paths' upsample inside their BN passes), with
#             `--dw-fused-bwd` (the
#             stride-1 depthwise dgrad + wgrad in one kernel) and `--dw-fused-bwd-bn` (with the depthwise
#             ConvBN's BN backward dx inside it), with `--bn-row-batch 4`
#             (the BatchNorm row kernels' loads four rows at a time: their step-level A/B), with `--pdl`
#             (programmatic dependent launch of the project's kernels), with `--fuse-expand-dw
#             --dw-fused-bwd` and `--fuse-expand-dw --dw-fused-bwd-bn` (the fused LiteBlock with the fused
#             backward, without and with the BN's dx inside it) and `--dw-fused-bn-grad --dw-fused-bwd-bn`
#             (with the expand BN's backward reductions in the depthwise kernel's epilogue too, against
#             the latter), with `--upsample-row-loads` (the
#             upsampling backward's window rows loaded together), with `--pw-custom` (the project's
#             tensor-core 1x1 conv against cuDNN per shape), `--pw-stats` (with the 1x1 ConvBNs' BN
#             statistics from its epilogue) and `--pw-bn-grad` (the depthwise BNs' backward reductions in
#             its dgrad's epilogue) and `--pw-bn-bwd` (the 1x1 ConvBNs' BN dx formed in its dgrad and
#             wgrad loads), with `--dw-stats` (the depthwise BNs' statistics from the staged
#             depthwise forward's epilogue), with `--fuse-dw-pw` (each depthwise BN + SiLU inside the
#             following 1x1 conv) and `--fuse-dw-pw --pw-stats` (against `--pw-stats`), and with
#             `--no-dw-variants` (the depthwise variants' step-level A/B), each compared with the
#             per-layer run's step by tools/bench_ab.py (bench_ab.md); then, with the time left,
#             `plan --fusion-graphs --time` (the cuDNN BN-fusion graphs timed against the plain conv and
#             our BN kernels; its graph lines are logged as they finish, so a cut keeps those).
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
#   SF_AB_ONLY         comma-separated A/B names (bench_bn4,bench_pdl,...: the records' names below) to
#                      run, in the script's order; default all
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

# ---- the GPU to itself: the per-layer bench with the depthwise variants, then two step A/Bs ----
if [ "$(left)" -gt 60 ]; then
  . scripts/cuda_libs.sh
  sf_python_cuda_libs
  sf_packed_libs "$B" "$B/slidefuse"
  bl=$(budget 400 15)
  say "bench step --layers: limit ${bl}s"
  timeout -k 5 "$bl" "$B/slidefuse" bench step --batch-sizes 128 --size 256x512 --layers --layers-batch 128 \
    --json "$W/bench_variants.json" >"$W/bench_variants.log" 2>&1
  say "bench: rc $? -- $(grep -m1 -E 'batch +128:' "$W/bench_variants.log" | sed 's/^ *//' | cut -c1-120)"
  # Step A/Bs against the per-layer run, most valuable first, each while at least 40 s are left:
  # ab NAME FLAGS...: the same step at batch 128 with FLAGS, into $W/NAME.json and $W/NAME.log.
  ab() {
    local name=$1; shift
    [ -z "${SF_AB_ONLY:-}" ] || [[ ",$SF_AB_ONLY," == *",$name,"* ]] || return 1
    [ "$(left)" -gt 40 ] || return 1
    timeout -k 5 "$(budget 120 10)" "$B/slidefuse" bench step --batch-sizes 128 --size 256x512 "$@" \
      --json "$W/$name.json" >"$W/$name.log" 2>&1
    say "bench $*: rc $? -- $(grep -m1 -E 'batch +128:' "$W/$name.log" | sed 's/^ *//' | cut -c1-120)"
  }
  # Every switch built since the H200 run at once (OPTIMIZATION_LOG entries 11-24), first, so that the
  # deadline never cuts it: what the step runs if they all pay (the A/Bs below say which of them do).
  ab bench_all --fuse-expand-dw --fuse-dw-pw --dw-fused-bwd-bn --dw-fused-bn-grad --bn-row-batch 4 --pdl \
    --upsample-row-loads --pw-stats --pw-bn-grad --dw-stats --pw-bn-bwd --merge-heads --fuse-head-bn --fuse-up-bn
  pack
  # The four heads' conv1 as one 3x3 128 -> 256 ConvBN (entry 25): against the per-layer run.
  ab bench_mergeheads --merge-heads
  pack
  # The stride-1 depthwise dgrad + wgrad fused (one pass over dy and x): the fused kernel's time per shape
  # (its variants lines) beside the separate passes'.
  if ab bench_dwfused --dw-fused-bwd; then
    grep -E 'fused backward runs' "$W/bench_dwfused.log" | sed -E 's/^ *([^:]*): .*(, fused backward runs.*)$/\1\2/' |
      head -12 | while IFS= read -r l; do say "bench --dw-fused-bwd: $l"; done
  fi
  pack
  # With each depthwise ConvBN's BN backward dx formed inside the fused kernel (bitwise equal).
  ab bench_dwfusedbn --dw-fused-bwd-bn
  pack
  # The BatchNorm row kernels four rows per loop turn (bitwise-equal results).
  ab bench_bn4 --bn-row-batch 4
  pack
  # Programmatic dependent launch of the project's kernels (bitwise-equal results).
  if ab bench_pdl --pdl; then
    say "bench --pdl: $(grep -m1 -E '^ *graphs:' "$W/bench_pdl.log" | sed 's/^ *//' | cut -c1-160)"
  fi
  pack
  # The fused LiteBlock (the expand's BN + SiLU inside the depthwise conv, its activation never stored)
  # with the fused backward staging it through the same prologue: against bench_dwfused, the fused
  # LiteBlock's own A/B (OPTIMIZATION_LOG entry 17).
  ab bench_fuseexp --fuse-expand-dw --dw-fused-bwd
  pack
  # The same with the depthwise ConvBN's BN dx inside the fused kernel too (both prologues): against
  # bench_dwfusedbn.
  ab bench_fuseexpbn --fuse-expand-dw --dw-fused-bwd-bn
  pack
  # With the expand BN's backward reductions in that kernel's epilogue too (its reduce pass gone; entry
  # 21): against bench_fuseexpbn (the chain).
  ab bench_fuseexpbg --dw-fused-bn-grad --dw-fused-bwd-bn
  pack
  # The upsampling backward's window rows loaded together (bitwise-equal results; entry 18).
  ab bench_upsrow --upsample-row-loads
  pack
  # The project's tensor-core 1x1 conv timed against cuDNN per 1x1 shape, the faster kept (entry 19).
  if ab bench_pwcustom --pw-custom; then
    say "bench --pw-custom: $(grep -c 'custom-pointwise' "$W/bench_pwcustom.log") log lines name custom-pointwise"
  fi
  pack
  # With the 1x1 ConvBNs' BN statistics from that kernel's epilogue (against bench_pwcustom: the chain).
  ab bench_pwstats --pw-stats
  pack
  # With the depthwise BNs' backward reductions in that kernel's dgrad epilogue (entry 22; against
  # bench_pwcustom: the chain).
  ab bench_pwbngrad --pw-bn-grad
  pack
  # With the 1x1 ConvBNs' BN dx formed in that kernel's dgrad and wgrad loads (entry 24; bitwise the same
  # step; against bench_pwcustom: the chain).
  ab bench_pwbnbwd --pw-bn-bwd
  pack
  # Both 1x1 dgrad fusions at once (the BN3 dx prologue with the BN2 reduce epilogue in the project dgrad;
  # against bench_pwbngrad: the chain).
  ab bench_pwbnboth --pw-bn-grad --pw-bn-bwd
  pack
  # The depthwise BNs' statistics from the staged depthwise forward's epilogue (entry 23): against the
  # per-layer run.
  ab bench_dwstats --dw-stats
  pack
  # Each depthwise ConvBN's BN + SiLU inside the following 1x1 conv, the depthwise activation never stored
  # (entry 20): against the per-layer run, and with the statistics epilogue against bench_pwstats.
  ab bench_fusedwpw --fuse-dw-pw
  pack
  ab bench_fusedwpwst --fuse-dw-pw --pw-stats
  pack
  # The up paths' upsample inside their BN passes (entry 27; predicted 0.5-0.9 ms; bitwise the same step):
  # against the per-layer run.
  ab bench_fuseupbn --fuse-up-bn
  pack
  # The heads' conv1 BN + ReLU inside their conv2, the bias folded (entry 26; predicted 0.5-0.85 ms, so after
  # the larger predictions): alone against the per-layer run, and with the merged heads against
  # bench_mergeheads (the chain).
  ab bench_fuseheadbn --fuse-head-bn
  ab bench_mergefusehead --merge-heads --fuse-head-bn
  pack
  # The depthwise kernels in variant 0 only: the step-level A/B of the variants.
  ab bench_dw0 --no-dw-variants
  # Each A/B against the per-layer run's step (tools/bench_ab.py: verdict from the p10-p90 spreads).
  ab=()
  for f in bench_all bench_mergeheads bench_fuseheadbn bench_mergefusehead bench_dwfused bench_dwfusedbn bench_bn4 bench_pdl bench_fuseexp bench_fuseexpbn bench_fuseexpbg bench_upsrow \
           bench_pwcustom bench_pwstats bench_pwbngrad bench_pwbnbwd bench_pwbnboth bench_dwstats bench_fusedwpw \
           bench_fusedwpwst bench_fuseupbn bench_dw0; do [ -s "$W/$f.json" ] && ab+=("$W/$f.json"); done
  if [ -s "$W/bench_variants.json" ] && [ ${#ab[@]} -gt 0 ]; then
    python3 tools/bench_ab.py "$W/bench_variants.json" "${ab[@]}" --md "$W/bench_ab.md" --json "$W/bench_ab.json" \
      >"$W/bench_ab.log" 2>&1
    say "A/B: rc $?"
    grep -E '^###|^\| *128 |^warning' "$W/bench_ab.md" 2>/dev/null | while IFS= read -r l; do say "A/B: $l"; done
  fi
  # The A/Bs whose predictions name another base than the per-layer run (OPTIMIZATION_LOG entries 16, 17, 19-22):
  # each OTHER against its BASE, one after another into bench_ab_chain.md.
  : >"$W/bench_ab_chain.md"
  for pair in bench_mergeheads:bench_mergefusehead bench_dwfused:bench_dwfusedbn bench_dwfused:bench_fuseexp bench_dwfusedbn:bench_fuseexpbn \
              bench_fuseexpbn:bench_fuseexpbg \
              bench_pwcustom:bench_pwstats bench_pwcustom:bench_pwbngrad bench_pwcustom:bench_pwbnbwd \
              bench_pwbngrad:bench_pwbnboth \
              bench_pwstats:bench_fusedwpwst; do
    base=${pair%%:*} other=${pair##*:}
    [ -s "$W/$base.json" ] && [ -s "$W/$other.json" ] || continue
    python3 tools/bench_ab.py "$W/$base.json" "$W/$other.json" --md "$W/ab_pair.md" >>"$W/bench_ab.log" 2>&1 &&
      cat "$W/ab_pair.md" >>"$W/bench_ab_chain.md"
    grep -E '^###|^\| *128 ' "$W/ab_pair.md" 2>/dev/null | while IFS= read -r l; do say "A/B chain: $l"; done
  done
  rm -f "$W/ab_pair.md"
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
