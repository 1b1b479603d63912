#!/usr/bin/env bash
# Fuzzes the data-format parsers: builds the libFuzzer targets (fuzz_npy: the NPY parser,
# fuzz_shard: the shard reader) with clang++ -fsanitize=fuzzer,address,undefined, generates a
# small seed corpus (make_seeds.cpp) and an NPY header dictionary, then runs each target for a
# short time. Exits non-zero on any crash, sanitizer report, leak or timeout; the reproducer is
# left in WORK_DIR/artifacts/ and can be replayed with `WORK_DIR/fuzz_npy FILE`.
#
# usage: tools/fuzz/run_fuzz.sh [SECONDS_PER_TARGET (20)] [WORK_DIR (build/fuzz)]
# env:   FUZZ_CXX (default clang++)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SECS=${1:-20}
WORK=${2:-$SRC/build/fuzz}
CXX=${FUZZ_CXX:-clang++}
mkdir -p "$WORK/artifacts" "$WORK/seeds/npy" "$WORK/seeds/shard" "$WORK/corpus/npy" "$WORK/corpus/shard"

COMMON=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I"$SRC" -fsanitize=address,undefined -fno-sanitize-recover=undefined)
NPY_SRC=("$SRC/data/npy.cpp" "$SRC/data/shard_io.cpp" "$SRC/runtime/error.cpp")
SHARD_SRC=("$SRC/data/shard.cpp" "$SRC/data/shard_io.cpp" "$SRC/data/crc32.cpp" "$SRC/runtime/error.cpp")

echo "[fuzz] building with $CXX"
pids=()
"$CXX" "${COMMON[@]}" -fsanitize=fuzzer "$SRC/tools/fuzz/fuzz_npy.cpp" "${NPY_SRC[@]}" -o "$WORK/fuzz_npy" &
pids+=($!)
"$CXX" "${COMMON[@]}" -fsanitize=fuzzer "$SRC/tools/fuzz/fuzz_shard.cpp" "${SHARD_SRC[@]}" -o "$WORK/fuzz_shard" &
pids+=($!)
"$CXX" "${COMMON[@]}" "$SRC/tools/fuzz/make_seeds.cpp" "${SHARD_SRC[@]}" "$SRC/data/shard_writer.cpp" \
  "$SRC/runtime/log.cpp" -pthread -o "$WORK/make_seeds" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
"$WORK/make_seeds" "$WORK/seeds/npy" "$WORK/seeds/shard"

# Tokens of the NPY header grammar, so that mutations reach the dict parser's branches quickly.
cat > "$WORK/npy.dict" <<'DICT'
"\x93NUMPY"
"\x01\x00"
"\x02\x00"
"\x03\x00"
"{'descr': "
"'fortran_order': "
"'shape': "
"True"
"False"
"(0,)"
"()"
", "
",)"
"'<f4'"
"'<f8'"
"'|u1'"
"'<i8'"
"'<i4'"
"'|b1'"
"'>f4'"
"[('a', '<f4')]"
"\"descr\""
"9223372036854775807"
DICT

run() {  # target (npy|shard), extra libFuzzer flags...
  local t=$1
  shift
  local log="$WORK/fuzz_$t.log"
  echo "[fuzz] fuzz_$t for ${SECS}s"
  if ! "$WORK/fuzz_$t" "$@" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$WORK/artifacts/$t-" "$WORK/corpus/$t" "$WORK/seeds/$t" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "[fuzz] fuzz_$t FAILED (log: $log, reproducer in $WORK/artifacts/)" >&2
    return 1
  fi
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$log" || true
}
run npy -dict="$WORK/npy.dict"
run shard
echo "[fuzz] no crashes"
