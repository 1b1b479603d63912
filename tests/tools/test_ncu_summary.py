"""Tests of tools/ncu_summary.py on hand-written ncu raw CSVs (no GPU, no ncu): unit scaling, grouping
of launches per kernel, time-weighted rates, shares, classes, the copy-ceiling share, and the errors.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ncu_summary  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum",'
          '"sm__warps_active.avg.pct_of_peak_sustained_active"')
DW = "void kern::(anonymous namespace)::dwconv3x3_forward_kernel<1, 8, 2, 4, (kern::Act)0, false>(kern::DwConvPlan, int)"
BN = "void kern::(anonymous namespace)::bn_act_apply_kernel<(kern::Act)1>(float const*, int)"


def row(i, name, t, rd, wr, occ):
    return f'"{i}","1","slidefuse","h","{name}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","{t}","{rd}","{wr}","{occ}"'


class NcuSummaryTest(unittest.TestCase):
    def write(self, lines):
        fd, path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(fd, "w") as f:
            f.write("==PROF== Connected\n" + "\n".join(lines) + "\n==PROF== Disconnected\n")
        self.addCleanup(os.remove, path)
        return path

    def test_short_names(self):
        self.assertEqual(ncu_summary.short_name(DW),
                         "kern::(anonymous namespace)::dwconv3x3_forward_kernel<1, 8, 2, 4, (kern::Act)0, false>")
        self.assertEqual(ncu_summary.short_name("sm90_xmma_gemm(Params)"), "sm90_xmma_gemm")
        self.assertEqual(ncu_summary.short_name("plain"), "plain")
        self.assertEqual(ncu_summary.kernel_class(ncu_summary.short_name(DW)), "dwconv3x3_forward")
        self.assertEqual(ncu_summary.kernel_class("sm90_xmma_fprop_implicit_gemm"), "cuDNN")
        self.assertEqual(ncu_summary.kernel_class("cutlass_80_tensorop_gemm"), "cuDNN")
        self.assertEqual(ncu_summary.kernel_class("ampere_sgemm_128x64"), "cuBLAS")
        self.assertEqual(ncu_summary.kernel_class("mystery"), "other")

    def test_units_grouping_shares_and_rates(self):
        # Units row in usecond / Mbyte: scaled to ns and bytes. dwconv: two launches (100 + 300 us,
        # occupancy 20% and 40%: time-weighted 35%), 268 + 268 MB moved; bn: one launch of 100 us.
        path = self.write([HEADER, '"","","","","","","","","","","","usecond","Mbyte","Mbyte","%"',
                           row(0, DW, "100", "67", "67", "20"), row(1, BN, "100", "50", "50", "50"),
                           row(2, DW, "300", "201", "201", "40")])
        s = ncu_summary.summarise(ncu_summary.read_rows(path), copy_gbps=3000.0)
        self.assertEqual(s["launches"], 3)
        self.assertAlmostEqual(s["total_ms"], 0.5)
        dw, bn = s["kernels"]
        self.assertIn("dwconv3x3_forward_kernel<1, 8, 2, 4", dw["name"])
        self.assertEqual(dw["launches"], 2)
        self.assertAlmostEqual(dw["total_ms"], 0.4)
        self.assertAlmostEqual(dw["mean_us"], 200.0)
        self.assertAlmostEqual(dw["share_pct"], 80.0)
        self.assertAlmostEqual(dw["dram_mb"], 536.0)
        self.assertAlmostEqual(dw["gbps"], 1340.0)  # 536e6 bytes / 400e3 ns
        self.assertAlmostEqual(dw["pct_of_copy"], 100 * 1340.0 / 3000.0)
        self.assertAlmostEqual(dw["sm__warps_active.avg.pct_of_peak_sustained_active"], 35.0)
        self.assertAlmostEqual(bn["gbps"], 1000.0)
        self.assertAlmostEqual(sum(k["share_pct"] for k in s["kernels"]), 100.0)
        classes = {c["class"]: c for c in s["classes"]}
        self.assertAlmostEqual(classes["dwconv3x3_forward"]["total_ms"], 0.4)
        self.assertAlmostEqual(classes["bn_act_apply"]["share_pct"], 20.0)
        md = ncu_summary.markdown(s, top=1)
        self.assertIn("| (1 more) | 1 | 0.100 | 20.0% |", md)
        self.assertIn("45%", md)  # 1340 / 3000 of the copy ceiling

    def test_base_units_without_a_units_row(self):
        path = self.write([HEADER, row(0, BN, "2000", "1000", "3000", "n/a")])
        s = ncu_summary.summarise(ncu_summary.read_rows(path))
        k = s["kernels"][0]
        self.assertAlmostEqual(k["gbps"], 2.0)  # 4000 bytes / 2000 ns
        self.assertIsNone(k.get("sm__warps_active.avg.pct_of_peak_sustained_active"))
        self.assertNotIn("pct_of_copy", k)

    def test_errors(self):
        with self.assertRaisesRegex(ncu_summary.SummaryError, "no ncu CSV header"):
            ncu_summary.read_rows(self.write(['"a","b"', '"1","2"']))
        with self.assertRaisesRegex(ncu_summary.SummaryError, "no kernel rows"):
            ncu_summary.read_rows(self.write([HEADER]))
        with self.assertRaisesRegex(ncu_summary.SummaryError, "cannot read"):
            ncu_summary.read_rows("/nonexistent/ncu.csv")

    def test_command_line(self):
        path = self.write([HEADER, row(0, DW, "1000", "1000", "1000", "50")])
        with tempfile.TemporaryDirectory() as d:
            ceil = os.path.join(d, "ceilings.json")
            with open(ceil, "w") as f:
                json.dump({"copy": {"gbps": 4.0}}, f)
            out_json, out_md = os.path.join(d, "s.json"), os.path.join(d, "s.md")
            tool = os.path.join(ROOT, "tools", "ncu_summary.py")
            r = subprocess.run([sys.executable, tool, path, "--ceilings", ceil, "--json", out_json, "--md", out_md],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out_json) as f:
                s = json.load(f)
            self.assertEqual(s["schema"], "slidefuse.ncu_summary/1")
            self.assertAlmostEqual(s["kernels"][0]["pct_of_copy"], 50.0)
            with open(ceil, "w") as f:
                f.write("{}")
            r = subprocess.run([sys.executable, tool, path, "--ceilings", ceil], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no copy.gbps", r.stderr)
            r = subprocess.run([sys.executable, tool, "--print-metrics"], capture_output=True, text=True)
            self.assertEqual(r.stdout.strip().split(","), ncu_summary.METRICS)

    def test_step_time_against_kernel_time_and_gzip(self):
        # Two kernels of 100 and 300 us (0.4 ms) in a 1.0 ms graph step: 0.6 ms between kernels, 300 us
        # per launch; from --step-ms, from a bench record (--bench), and from a gzip-compressed CSV.
        lines = [HEADER, '"","","","","","","","","","","","usecond","Mbyte","Mbyte","%"',
                 row(0, DW, "100", "1", "1", "20"), row(1, BN, "300", "1", "1", "50")]
        s = ncu_summary.add_step(ncu_summary.summarise(ncu_summary.read_rows(self.write(lines))), 1.0)
        self.assertAlmostEqual(s["between_kernels_ms"], 0.6)
        self.assertAlmostEqual(s["between_kernels_pct"], 60.0)
        self.assertAlmostEqual(s["between_kernels_us_per_launch"], 300.0)
        self.assertIn("graph step 1.000 ms: kernels 0.400 ms, 0.600 ms (60.0%) between kernels, 300.00 us per launch",
                      ncu_summary.markdown(s, top=5))
        tool = os.path.join(ROOT, "tools", "ncu_summary.py")
        with tempfile.TemporaryDirectory() as d:
            gz = os.path.join(d, "ncu_raw.csv.gz")
            with gzip.open(gz, "wt") as f:
                f.write("\n".join(lines) + "\n")
            bench = os.path.join(d, "bench.json")
            with open(bench, "w") as f:
                json.dump({"schema": "slidefuse.bench/1", "runs": [{"ms_per_step": 0.5}]}, f)
            out = os.path.join(d, "s.json")
            r = subprocess.run([sys.executable, tool, gz, "--bench", bench, "--json", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                got = json.load(f)
            self.assertAlmostEqual(got["total_ms"], 0.4)
            self.assertAlmostEqual(got["between_kernels_ms"], 0.1)
            r = subprocess.run([sys.executable, tool, gz, "--step-ms", "2"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("1.600 ms (80.0%) between kernels", r.stdout)
            r = subprocess.run([sys.executable, tool, gz, "--step-ms", "2", "--bench", bench],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            r = subprocess.run([sys.executable, tool, gz, "--step-ms", "0"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            with open(bench, "w") as f:
                json.dump({"runs": []}, f)
            r = subprocess.run([sys.executable, tool, gz, "--bench", bench], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no runs[0].ms_per_step", r.stderr)


if __name__ == "__main__":
    unittest.main()
