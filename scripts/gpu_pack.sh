#!/usr/bin/env bash
# Builds for one GPU architecture (default sm_90: H100/H200) into ${BUILD_DIR:-build-gpu} and
# copies just the binaries a GPU host needs into ${PACK_DIR:-.gpu} (slidefuse, tests/sf_gpu_tests and
# the suite runner's probe tests/sf_suite_probe: ~14 MB; cudart and yaml-cpp are static, cuDNN/cuBLAS
# come from the host), in the layout
# scripts/gpu_verify.sh and scripts/gpu_test.sh expect of a build folder. The pack folder is added
# to .git/info/exclude, so it never lands in a commit but can travel beside a copy of the repository:
#   scripts/gpu_pack.sh && <on the GPU host, in the repository copy> scripts/gpu_verify.sh first .gpu
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${ARCH:-90}
BUILD_DIR=${BUILD_DIR:-build-gpu}
PACK_DIR=${PACK_DIR:-.gpu}
# Only these binaries are built (BUILD_TARGETS= builds everything, the test suites too).
BUILD_TARGETS=${BUILD_TARGETS-slidefuse sf_gpu_tests sf_suite_probe} BUILD_DIR="$BUILD_DIR" \
  CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=$ARCH ${CMAKE_ARGS:-}" ./scripts/setup.sh
# torch.compile cache parts returned by an earlier lease (scripts/gpu_compare.sh) survive a re-pack.
keep=$(mktemp -d)
mv "$PACK_DIR"/inductor_cache.tgz.part* "$keep"/ 2>/dev/null || true
rm -rf "$PACK_DIR"
mkdir -p "$PACK_DIR/tests"
mv "$keep"/* "$PACK_DIR"/ 2>/dev/null && echo "[gpu_pack] kept $(ls "$PACK_DIR"/inductor_cache.tgz.part* | wc -l) inductor cache part(s)"
rmdir "$keep"
cp "$BUILD_DIR/slidefuse" "$PACK_DIR/"
cp "$BUILD_DIR/tests/sf_gpu_tests" "$BUILD_DIR/tests/sf_suite_probe" "$PACK_DIR/tests/"
if [ -d .git ]; then
  mkdir -p .git/info
  grep -qxF "/$PACK_DIR/" .git/info/exclude 2>/dev/null || echo "/$PACK_DIR/" >> .git/info/exclude
fi
# Shared libraries the binaries need beyond glibc, libstdc++/libgcc and the CUDA libraries the GPU
# host's Python environment provides (today: OpenMP's libgomp), packed for a host image without them.
mkdir -p "$PACK_DIR/lib"
for bin in "$PACK_DIR/slidefuse" "$PACK_DIR/tests/sf_gpu_tests"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}' | grep -E '/libgomp\.so' | while read -r lib; do cp -L "$lib" "$PACK_DIR/lib/"; done
done
git rev-parse HEAD > "$PACK_DIR/commit.txt" 2>/dev/null || true
echo "[gpu_pack] sm_$ARCH binaries in $PACK_DIR ($(du -sh "$PACK_DIR" | cut -f1)), commit $(cat "$PACK_DIR/commit.txt" 2>/dev/null)"
# What travels: the folder as one xz archive (about a quarter of its size: the binaries alone are near the
# device's 64 MiB working-tree limit), unpacked on the GPU host by scripts/gpu_unpack.sh. Carry
# "$PACK_DIR.tar.xz", not the folder.
if [ "${PACK_XZ:-1}" = 1 ]; then
  tar cf - "$PACK_DIR" | xz -6 -T0 > "$PACK_DIR.tar.xz.tmp" && mv "$PACK_DIR.tar.xz.tmp" "$PACK_DIR.tar.xz"
  if [ -d .git ]; then
    grep -qxF "/$PACK_DIR.tar.xz" .git/info/exclude 2>/dev/null || echo "/$PACK_DIR.tar.xz" >> .git/info/exclude
  fi
  echo "[gpu_pack] $PACK_DIR.tar.xz: $(du -sh "$PACK_DIR.tar.xz" | cut -f1) (carry it; scripts/gpu_unpack.sh on the host)"
fi
