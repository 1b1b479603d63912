#!/usr/bin/env bash
# Installs what the build needs and is missing (Debian 12 with the CUDA toolkit under
# /usr/local/cuda), then configures and builds into ${BUILD_DIR:-build}.
# Pinned Debian package versions; nothing is installed that is already present.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  "cmake=3.25.1-1"
  "g++=4:12.2.0-3"
  "make=4.3-4.1"
  "libyaml-cpp-dev=0.7.0+dfsg-8+b1"
  "libgtest-dev=1.12.1-0.2"
  "nlohmann-json3-dev=3.11.2-2"
  "libstb-dev=0.0~git20220908.8b5f1f3+ds-1"  # stb_image.h: PNG/JPEG decoding (slidefuse predict)
  "clang-14=1:14.0.6-12"            # libFuzzer targets of the parsers (ctest -L fuzz)
  "libclang-rt-14-dev=1:14.0.6-12"
  "openmpi-bin=4.1.4-3+b1"          # mpirun: data-parallel runs and their tests (docs/DISTRIBUTED.md)
  "libopenmpi-dev=4.1.4-3+b1"       # mpi.h for libslidefuse_mpi.so
)
missing=()
for spec in "${PKGS[@]}"; do
  name=${spec%%=*}
  dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "install ok installed" || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH
  else echo "[setup] error: nvcc not found (expected the CUDA toolkit under /usr/local/cuda)" >&2; exit 1; fi
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
# BUILD_TARGETS (space-separated, optional): build only these (scripts/gpu_pack.sh: the binaries a GPU host runs).
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" ${targets[@]+"${targets[@]}"}
