#!/usr/bin/env bash
# Set up, build, and run the whole test suite. GPU-labelled tests skip themselves (and ctest
# reports them as skipped) on a machine without a usable GPU; emu-labelled tests run the custom
# kernels' gpu tests on the CPU under an emulated device (docs/EMULATION.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# CI (a fresh clone on a machine without a GPU) compiles sm_90 only: the tests need every .cu to
# compile, not code for every GPU, and one architecture halves the .cu compile time. A build
# folder configured before, or a machine with a GPU, keeps the default set (CMakeLists.txt).
if [ ! -f "${BUILD_DIR:-build}/CMakeCache.txt" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  export CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${SF_TEST_CUDA_ARCHITECTURES:-90} ${CMAKE_ARGS:-}"
fi
./scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
