#!/usr/bin/env bash
# The main job: set up, build, and train. For now a short training run of the CPU reference
# backend on a small deterministic input (configs/cpu_smoke.yaml); extra arguments are passed
# to `slidefuse train` (e.g. key.path=value overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Sleeping (not spinning) OpenMP threads: the CPU backend shares small machines well.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec ./"${BUILD_DIR:-build}"/slidefuse train --config configs/cpu_smoke.yaml "$@"
