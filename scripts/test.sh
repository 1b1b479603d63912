#!/usr/bin/env bash
# Set up, build, and run the whole test suite. GPU-labelled tests skip themselves (and ctest
# reports them as skipped) on a machine without a usable GPU; emu-labelled tests run the custom
# kernels' gpu tests on the CPU under an emulated device (docs/EMULATION.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
