#!/usr/bin/env bash
# The main job: set up, build, and train.
#   - on a machine with a usable GPU (`slidefuse devices` exits 0): configs/quickstart.yaml, the
#     1.1.1 recipe on the CUDA backend at 256x512, 3 epochs on generated data (made on first use),
#     minutes long, ending with a validation table;
#   - otherwise one line says why, and a short training run of the CPU reference backend on a
#     small deterministic input runs instead (configs/cpu_smoke.yaml).
# Extra arguments go to `slidefuse train` after the preset: key.path=value overrides, or
# `--config configs/default.yaml` for the full recipe (a later --config wins).
# SF_RUN_DRY_RUN=1 prints the chosen command instead of running it; SF_RUN_SKIP_SETUP=1 skips
# scripts/setup.sh; SLIDEFUSE_BIN names the binary (default build/slidefuse).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SF_RUN_SKIP_SETUP:-0}" = 1 ] || ./scripts/setup.sh
bin=${SLIDEFUSE_BIN:-./${BUILD_DIR:-build}/slidefuse}
# Sleeping (not spinning) OpenMP threads: the CPU backend shares small machines well.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

rc=0
report=$("$bin" devices 2>&1) || rc=$?
if [ "$rc" -eq 0 ]; then
  config=configs/quickstart.yaml
  echo "[run] $(head -n 1 <<<"$report"): training configs/quickstart.yaml on the CUDA backend"
else
  case "$rc" in
    2) why=$(head -n 1 <<<"$report") ;;                                  # no usable CUDA device: ...
    3) why="GPU not supported by this build:${report##*not supported:}" ;;
    *) why="slidefuse devices failed (exit $rc): $(tail -n 1 <<<"$report")" ;;
  esac
  config=configs/cpu_smoke.yaml
  echo "[run] no GPU run (${why//$'\n'/ }): running the CPU smoke configs/cpu_smoke.yaml instead"
fi

cmd=("$bin" train --config "$config" "$@")
if [ "${SF_RUN_DRY_RUN:-0}" = 1 ]; then
  echo "[run] would run: ${cmd[*]}"
  exit 0
fi
exec "${cmd[@]}"
