"""Tests of tools/launch_census.py on hand-written censuses in the emulation's format (the header and
rows kernel_table.cpp writes): kernel families, the merge of shards, the order and the refusals.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import launch_census as lc  # noqa: E402

HEADER = ("# launches per kernel and block size (sm_90 table t.tsv); occupancy: ...\n"
          "threads\tlaunches\tregs\tsmem\tstack\tbound\tblocks_per_sm\toccupancy\tlimit\tkernel\n")
DX1 = ("void kern::(anonymous namespace)::bn_act_backward_dx_kernel<(kern::Act)1, 1, "
       "kern::(anonymous namespace)::RowsStored>(unsigned long, int, float*)")
DX4 = DX1.replace("(kern::Act)1, 1,", "(kern::Act)1, 4,")
FILL = "kern::(anonymous namespace)::fill_kernel(float*, unsigned long, float)"


class Census(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="census_")

    def write(self, name, rows):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(HEADER + "".join("\t".join(str(c) for c in r) + "\n" for r in rows))
        return path

    def test_family_drops_namespaces_template_arguments_and_parameters(self):
        self.assertEqual(lc.family(DX1), "bn_act_backward_dx_kernel")
        self.assertEqual(lc.family(FILL), "fill_kernel")
        self.assertEqual(lc.family("model::epoch_kernel(long*)"), "epoch_kernel")

    def test_shards_merge_and_the_lowest_occupancy_comes_first(self):
        a = self.write("a.tsv", [(256, 10, 83, 0, 0, 0, 2, 0.25, "registers", DX1),
                                 (256, 5, 26, 0, 0, 0, 8, 1.0, "warps", FILL),
                                 (32, 3, "-", "-", "-", "-", "-", "-", "-", "(anonymous namespace)::read_kernel(float*)")])
        b = self.write("b.tsv", [(256, 7, 83, 0, 0, 0, 2, 0.25, "registers", DX1),
                                 (256, 2, 117, 0, 0, 0, 2, 0.25, "registers", DX4),
                                 (128, 4, 26, 0, 0, 0, 16, 1.0, "warps", FILL)])
        rows = lc.read([a, b])
        self.assertEqual(rows[(DX1, 256)]["launches"], 17)
        fams = lc.summarize(rows)
        self.assertEqual([f["family"] for f in fams], ["bn_act_backward_dx_kernel", "fill_kernel"])
        dx = fams[0]
        self.assertEqual((dx["instances"], dx["launches"], dx["regs"], dx["occupancy"]), (2, 19, [83, 117], [0.25, 0.25]))
        self.assertEqual(fams[1]["threads"], [128, 256])
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(lc.main([a, b, "--json"]), 0)
        doc = json.loads(out.getvalue())
        self.assertEqual(doc["schema"], "slidefuse.launch_census/1")
        self.assertEqual(doc["unchecked"], ["(anonymous namespace)::read_kernel(float*)"])
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(lc.main([a, b]), 0)
        text = out.getvalue()
        self.assertLess(text.index("bn_act_backward_dx_kernel"), text.index("fill_kernel"))
        self.assertIn("1 kernels without an sm_90 record", text)

    def test_refusals(self):
        bad = os.path.join(self.tmp, "bad.tsv")
        with open(bad, "w") as f:
            f.write("kernel\tlaunches\nx\t1\n")
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(lc.main([bad]), 2)
        self.assertIn("not a launch census", err.getvalue())
        short = self.write("short.tsv", [(256, 1, 83)])
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(lc.main([short]), 2)
        self.assertIn("malformed row", err.getvalue())
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(lc.main([os.path.join(self.tmp, "missing.tsv")]), 2)


if __name__ == "__main__":
    unittest.main()
