# Sourced by the GPU scripts (gpu_test.sh, gpu_verify.sh, gpu_session.sh): where the binaries find
# the CUDA libraries on a host whose toolkit lacks them.
# sf_python_cuda_libs: cuDNN / cuBLAS / NCCL from a Python environment's nvidia/*/lib folders
# (PyTorch wheels ship them there), prepended to LD_LIBRARY_PATH.
sf_python_cuda_libs() {
  local py site s lib
  for py in python3 /usr/bin/python3; do
    site=$($py -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) || continue
    for s in $site; do
      for lib in "$s"/nvidia/*/lib; do
        if [ -d "$lib" ]; then LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"; fi
      done
    done
  done
  export LD_LIBRARY_PATH
}
# sf_packed_libs BUILD_DIR BINARY: the libraries scripts/gpu_pack.sh packed beside the binaries
# (BUILD_DIR/lib: libgomp), appended only where BINARY misses one on this host.
sf_packed_libs() {
  if [ -d "$1/lib" ] && ldd "$2" 2>/dev/null | grep -q 'not found'; then
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(cd "$1/lib" && pwd)"
  fi
}
