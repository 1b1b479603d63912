#!/usr/bin/env bash
# On the GPU host: unpacks the binaries scripts/gpu_pack.sh packed into .gpu.tar.xz (what travels: a
# quarter of the .gpu folder's size, within the device's 64 MiB working-tree limit) into .gpu/, replacing
# what is there. With tar + xz, or Python's tarfile where the host has no xz. Run from the repository
# root, first in a device command:
#   scripts/gpu_unpack.sh && SF_DEADLINE=540 scripts/gpu_session.sh .gpu
# usage: scripts/gpu_unpack.sh [archive (default .gpu.tar.xz)]
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:-.gpu.tar.xz}
[ -f "$A" ] || { echo "gpu_unpack: no $A here (carry it: scripts/gpu_pack.sh makes it)" >&2; exit 1; }
t0=$(date +%s)
if tar -tJf "$A" >/dev/null 2>&1; then
  rm -rf .gpu
  tar -xJf "$A"
  how="tar"
else
  rm -rf .gpu
  python3 - "$A" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    names = t.getnames()
    if any(n.startswith("/") or ".." in n.split("/") for n in names):
        sys.exit("gpu_unpack: %s holds a path outside .gpu/" % sys.argv[1])
    try:
        t.extractall(".", filter="data")
    except TypeError:  # Python before 3.12: no filters
        t.extractall(".")
PY
  how="python3 tarfile"
fi
[ -x .gpu/slidefuse ] || { echo "gpu_unpack: $A did not hold .gpu/slidefuse" >&2; exit 1; }
echo "gpu_unpack: .gpu/ from $A ($how, $(( $(date +%s) - t0 )) s), commit $(cat .gpu/commit.txt 2>/dev/null || echo unknown)"
