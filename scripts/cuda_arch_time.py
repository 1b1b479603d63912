#!/usr/bin/env python3
"""CPU time to compile every .cu file of a configured build for two CUDA architecture sets.

usage: python3 scripts/cuda_arch_time.py BUILD_DIR   (a build configured with CMAKE_CUDA_ARCHITECTURES=90)

Each .cu compile command of BUILD_DIR/compile_commands.json is run once per set, without the
ccache launcher and with the sm_90 flags replaced, into a scratch object; the figure is the user+sys
time of the compilers (nvcc and its children), which shared machines disturb less than wall time.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SM90 = "--generate-code=arch=compute_90,code=[compute_90,sm_90]"
SETS = {
    "90": SM90,
    "89-real;90-real;120-real;120-virtual": "--generate-code=arch=compute_89,code=[sm_89] "
    "--generate-code=arch=compute_90,code=[sm_90] --generate-code=arch=compute_120,code=[compute_120,sm_120]",
}


def main(build):
    cmds = [c for c in json.load(open(os.path.join(build, "compile_commands.json"))) if c["file"].endswith(".cu")]
    if not cmds or SM90 not in cmds[0]["command"]:
        print("cuda_arch_time: expected .cu commands built for 90 (-DCMAKE_CUDA_ARCHITECTURES=90)", file=sys.stderr)
        return 1
    scratch = os.path.join(tempfile.mkdtemp(), "out.o")
    for name, flags in SETS.items():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        for c in cmds:
            cmd = c["command"].split("nvcc", 1)[1]  # drops a launcher (ccache) before nvcc
            cmd = "/usr/local/cuda/bin/nvcc" + cmd.replace(SM90, flags).split(" -o ")[0] + " -o " + scratch
            subprocess.run(cmd, shell=True, cwd=c["directory"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        print(f"{name}: {len(cmds)} .cu files, {cpu:.0f} s CPU, {time.time() - t0:.0f} s wall (one at a time)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build"))
