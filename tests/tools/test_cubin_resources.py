"""Tests of tools/cubin_resources.py: the largest block by registers (the hardware check as
cuda_occupancy.h models it), nvcc's anonymous-namespace names, and, where nvcc is installed (CUDA on
every build machine of this project), the figures read from real sm_90 cubins in an object file and a
static library against the ones `ptxas -v` prints for the same compile; the command line's table,
JSON and TSV; the refusals (no sm_90 cubin, a compressed one).

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import cubin_resources as cr  # noqa: E402

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)

PROBE = r"""
namespace {
__global__ void __launch_bounds__(384) anon_kernel(float* p) { p[threadIdx.x] *= 2.f; }
}
namespace ns {
template <int N> __global__ void shared_kernel(float* p) {
    __shared__ float s[N];
    __shared__ double t[3];
    s[threadIdx.x % N] = p[threadIdx.x];
    t[threadIdx.x % 3] = p[1];
    __syncthreads();
    p[threadIdx.x] = s[(threadIdx.x + 1) % N] + static_cast<float>(t[(threadIdx.x + 2) % 3]);
}
}
// Many live values under a bound of 128 threads x 4 blocks: registers capped at 128, the rest spilled.
__global__ void __launch_bounds__(128, 4) heavy_kernel(const float* a, float* b, int n) {
    float acc[64];
    for (int i = 0; i < 64; ++i) acc[i] = a[i * n + threadIdx.x];
    float s = 0;
    for (int i = 0; i < 64; ++i)
        for (int j = 0; j < 64; ++j) s += acc[i] * acc[j] * a[j];
    b[threadIdx.x] = s;
}
__global__ void plain_kernel(float* p, int n) { if (threadIdx.x < n) p[threadIdx.x] = 1; }
void launch_all(float* p) {
    anon_kernel<<<1, 32>>>(p);
    ns::shared_kernel<1000><<<1, 32>>>(p);
    ns::shared_kernel<12000><<<1, 32>>>(p);
    heavy_kernel<<<1, 32>>>(p, p, 3);
    plain_kernel<<<1, 32>>>(p, 3);
}
"""


def ptxas_figures(log):
    """{mangled: {regs, smem, stack}} from `ptxas -v` output."""
    out, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = {"regs": None, "smem": 0, "stack": 0}
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and cur:
            out[cur]["stack"] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            out[cur]["smem"] = int(s.group(1)) if s else 0
    return out


class LargestBlock(unittest.TestCase):
    def test_registers(self):
        # cuda_occupancy.h's per-block check: ceil256(regs * 32) * roundup4(warps) <= 65536.
        for regs, want in [(0, 1024), (32, 1024), (64, 1024), (65, 896), (72, 896), (80, 768), (96, 640),
                           (128, 512), (168, 384), (170, 256), (255, 256), (256, 0)]:
            self.assertEqual(cr.max_threads(regs), want, regs)

    def test_bound_and_reasons(self):
        self.assertEqual(cr.max_threads(32, 256), 256)
        self.assertEqual(cr.max_threads(128, 768), 512)
        self.assertEqual(cr.block_fits(32, 256, 256), "")
        self.assertIn("__launch_bounds__ maximum of 256", cr.block_fits(32, 256, 288))
        self.assertIn("at most 512 threads", cr.block_fits(128, 0, 544))


class Normalize(unittest.TestCase):
    def test_nvcc_anonymous_namespaces_take_the_host_name(self):
        self.assertEqual(cr.normalize("_ZN40_GLOBAL__N__2f48d42c_8_probe_cu_cce0c4b36anon_kEPf"),
                         "_ZN12_GLOBAL__N_16anon_kEPf")
        nested = "_ZN4kern42_GLOBAL__N__0123abcd_10_bn_act_cu_9f8e7d6c11some_kernelILi2EEEvPKfPf"
        self.assertEqual(cr.normalize(nested), "_ZN4kern12_GLOBAL__N_111some_kernelILi2EEEvPKfPf")

    def test_other_names_are_unchanged(self):
        for name in ("_Z5heavyPKfPfi", "_ZN12_GLOBAL__N_16anon_kEPf", "_Z2tkILi1000EEvPf"):
            self.assertEqual(cr.normalize(name), name)

    def test_merged_records_keep_the_tighter_limits(self):
        a = {"regs": 40, "smem": 100, "stack": 0, "bound": 512, "file": "a.o"}
        b = {"regs": 72, "smem": 0, "stack": 16, "bound": 0, "file": "b.o"}
        t = cr.table({"_ZN40_GLOBAL__N__2f48d42c_8_probe_cu_cce0c4b36anon_kEPf": a,
                      "_ZN40_GLOBAL__N__99999999_8_other_cu_cce0c4b36anon_kEPf": b})
        self.assertEqual(list(t), ["_ZN12_GLOBAL__N_16anon_kEPf"])
        r = t["_ZN12_GLOBAL__N_16anon_kEPf"]
        self.assertEqual((r["regs"], r["smem"], r["stack"], r["bound"], r["max_threads"]), (72, 100, 16, 512, 512))


@unittest.skipUnless(NVCC, "nvcc not installed")
class RealCubins(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cubin_resources_")
        src = os.path.join(cls.tmp, "probe.cu")
        with open(src, "w") as f:
            f.write(PROBE)
        cls.obj = os.path.join(cls.tmp, "probe.o")
        res = subprocess.run([NVCC, "-arch=sm_90", "-c", src, "-o", cls.obj, "-Xptxas", "-v"],
                             capture_output=True, text=True, check=True)
        cls.ptxas = ptxas_figures(res.stdout + res.stderr)
        cls.lib = os.path.join(cls.tmp, "libprobe.a")
        subprocess.run(["ar", "rcs", cls.lib, cls.obj], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_figures_equal_ptxas(self):
        self.assertEqual(len(self.ptxas), 5, self.ptxas)
        for path in (self.obj, self.lib):
            records, cubins = cr.read([path], 90)
            self.assertEqual(cubins, 1)
            self.assertEqual(sorted(records), sorted(self.ptxas), path)
            for name, want in self.ptxas.items():
                got = records[name]
                self.assertEqual((got["regs"], got["smem"], got["stack"]), (want["regs"], want["smem"], want["stack"]),
                                 name)
        records, _ = cr.read([self.obj], 90)
        bounds = {n: r["bound"] for n, r in records.items()}
        self.assertEqual(bounds["_Z12heavy_kernelPKfPfi"], 128)
        self.assertEqual(bounds["_Z12plain_kernelPfi"], 0)
        anon = [n for n in records if "anon_kernel" in n]
        self.assertEqual(len(anon), 1)
        self.assertEqual(bounds[anon[0]], 384)
        self.assertEqual(cr.normalize(anon[0]), "_ZN12_GLOBAL__N_111anon_kernelEPf")
        # The probe was written so that these mean something: spills, and two shared arrays.
        self.assertGreater(records["_Z12heavy_kernelPKfPfi"]["stack"], 0)
        self.assertEqual(records["_ZN2ns13shared_kernelILi12000EEEvPf"]["smem"], 48024)

    def test_command_line_table_json_and_tsv(self):
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(cr.main([self.lib, "--filter", "heavy"]), 0)
        self.assertIn("heavy_kernel(float const*, float*, int)", out.getvalue())
        self.assertNotIn("plain_kernel", out.getvalue())
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(cr.main([self.obj, "--json"]), 0)
        doc = json.loads(out.getvalue())
        self.assertEqual(doc["schema"], "slidefuse.cubin_resources/1")
        self.assertEqual(len(doc["kernels"]), 5)
        heavy = next(k for k in doc["kernels"] if k["name"] == "_Z12heavy_kernelPKfPfi")
        self.assertEqual(heavy["max_threads"], 128)
        tsv = os.path.join(self.tmp, "table.tsv")
        with redirect_stdout(io.StringIO()):
            self.assertEqual(cr.main([self.obj, "--tsv", tsv]), 0)
        with open(tsv) as f:
            rows = [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]
        self.assertEqual(len(rows), 5)
        by = {r[0]: r[1:] for r in rows}
        self.assertEqual(by["_ZN12_GLOBAL__N_111anon_kernelEPf"][3:], ["384", "384"])
        self.assertEqual(by["_Z12heavy_kernelPKfPfi"][0], str(self.ptxas["_Z12heavy_kernelPKfPfi"]["regs"]))

    def test_against_another_build(self):
        # The probe again with plain_kernel's body changed and heavy_kernel gone: the rest the same code.
        src = os.path.join(self.tmp, "probe2.cu")
        with open(src, "w") as f:
            f.write(PROBE.replace("p[threadIdx.x] = 1; }", "p[threadIdx.x] = 2; }")
                    .replace("    heavy_kernel<<<1, 32>>>(p, p, 3);\n", "")
                    .replace("__global__ void __launch_bounds__(128, 4) heavy_kernel", "__device__ void heavy_fn"))
        other = os.path.join(self.tmp, "probe2.o")
        subprocess.run([NVCC, "-arch=sm_90", "-c", src, "-o", other], check=True, capture_output=True)
        same, changed, added, removed = cr.compare_code(cr.code([other], 90), cr.code([self.obj], 90))
        self.assertEqual(changed, ["_Z12plain_kernelPfi"])
        self.assertEqual(removed, ["_Z12heavy_kernelPKfPfi"])
        self.assertEqual(added, [])
        self.assertEqual(len(same), 3)  # the anonymous-namespace kernel compared under its normalized name
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(cr.main([other, "--against", self.obj]), 0)
        self.assertIn("changed  plain_kernel(float*, int)", out.getvalue())
        self.assertIn("3 kernels with the same code, 1 changed, 0 new, 1 gone", out.getvalue())
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(cr.main([other, "--against", self.obj, "--filter", "shared_kernel"]), 0)
        self.assertIn("2 kernels with the same code, 0 changed, 0 new, 0 gone", out.getvalue())

    def test_refusals(self):
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(cr.main([self.obj, "--arch", "80"]), 2)
        self.assertIn("no sm_80 cubin", err.getvalue())
        src = os.path.join(self.tmp, "probe.cu")
        packed = os.path.join(self.tmp, "packed.o")
        subprocess.run([NVCC, "-arch=sm_90", "-c", src, "-o", packed, "-Xfatbin=-compress-all"], check=True,
                       capture_output=True)
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(cr.main([packed]), 2)
        self.assertIn("compressed", err.getvalue())
        with open(os.path.join(self.tmp, "junk.o"), "wb") as f:
            f.write(b"not an object file")
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(cr.main([os.path.join(self.tmp, "junk.o")]), 2)
        self.assertIn("not a 64-bit little-endian ELF", err.getvalue())


if __name__ == "__main__":
    unittest.main()
