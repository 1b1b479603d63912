#!/usr/bin/env bash
# Runs the gpu-labelled tests on a GPU host from an existing build folder (built here or copied
# from a build machine: cudart and yaml-cpp are static, RPATH covers the toolkit). cuDNN/cuBLAS
# are taken from /usr/local/cuda or, when that lacks them, from a Python environment's
# nvidia/*/lib folders (PyTorch wheels ship them there).
# The test binary is run directly (not through ctest), so a build folder copied to another path
# works. Then one whole training step (CudaStep.OneStepForSanitizer) runs under compute-sanitizer
# memcheck when the tool is on PATH or in the toolkit (SF_SKIP_SANITIZER=1 skips it).
# usage: scripts/gpu_test.sh [build-dir] [gtest args, e.g. --gtest_output=json:out.json]
set -euo pipefail
cd "$(dirname "$0")/.."
export SF_SOURCE_DIR=${SF_SOURCE_DIR:-$PWD}  # the tests find configs/ here, not at the build machine's path
BUILD_DIR=${1:-${BUILD_DIR:-build}}
shift || true
[ -d "$BUILD_DIR" ] || { echo "gpu_test: no build folder '$BUILD_DIR' (run scripts/setup.sh first)" >&2; exit 1; }
. scripts/cuda_libs.sh
if ! ldconfig -p 2>/dev/null | grep -q libcudnn.so.9 && [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
  sf_python_cuda_libs
fi
sf_packed_libs "$BUILD_DIR" "$BUILD_DIR/tests/sf_gpu_tests"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
"$BUILD_DIR/tests/sf_gpu_tests" "$@" || status=$?
if [ "${SF_SKIP_SANITIZER:-0}" != 1 ]; then
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [ -n "$SAN" ]; then
    echo "== compute-sanitizer memcheck: one training step =="
    "$SAN" --tool memcheck --error-exitcode 86 --leak-check full \
      "$BUILD_DIR/tests/sf_gpu_tests" --gtest_filter=CudaStep.OneStepForSanitizer || status=$?
  else
    echo "compute-sanitizer not found: memcheck of one step skipped" >&2
  fi
fi
exit $status
