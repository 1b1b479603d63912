"""Tests of tools/sass_loads.py on hand-written SASS listings in cuobjdump's format (no GPU, no
cuobjdump): dependent load batches (serial, hoisted, 128-bit destinations, overwritten registers,
predicated loads, stores), the largest loop's choice, and the command line.

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
import sass_loads  # noqa: E402


def listing(functions):
    """cuobjdump -sass text for {name: [instruction, ...]} (addresses every 0x10)."""
    out = ["", "Fatbin elf code:", "================", "arch = sm_90", "", "\tcode for sm_90"]
    for name, insns in functions.items():
        out.append("\t\tFunction : %s" % name)
        out.append('\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"')
        for i, ins in enumerate(insns):
            out.append("        /*%04x*/                   %s ;                 /* 0x000000000000 */" % (16 * i, ins))
            out.append("                                                          /* 0x000fc00000000000 */")
        out.append("\t\t..........")
    return "\n".join(out) + "\n"


SERIAL = [  # loop at 0x10: load, use, load, use
    "MOV R8, RZ",
    "LDG.E R4, desc[UR4][R2.64]",
    "FFMA R8, R4, R5, R8",
    "LDG.E R6, desc[UR4][R2.64+0x4]",
    "FFMA R8, R6, R5, R8",
    "ISETP.NE.AND P0, PT, R9, RZ, PT",
    "@P0 BRA 0x10",
    "EXIT",
]
HOISTED = [  # loop at 0x10: both loads, then both uses
    "MOV R8, RZ",
    "LDG.E R4, desc[UR4][R2.64]",
    "@!P1 LDG.E R6, desc[UR4][R2.64+0x4]",
    "FFMA R8, R4, R5, R8",
    "FFMA R8, R6, R5, R8",
    "@P0 BRA 0x10",
    "EXIT",
]


class SassLoadsTest(unittest.TestCase):
    def rows(self, functions, name_filter=""):
        return {r["function"]: r for r in sass_loads.report(listing(functions), name_filter)}

    def test_serial_and_hoisted_loops(self):
        r = self.rows({"serial": SERIAL, "hoisted": HOISTED})
        self.assertEqual((r["serial"]["loads"], r["serial"]["batches"], r["serial"]["ffma"]), (2, 2, 2))
        self.assertTrue(r["serial"]["loop"])
        self.assertEqual(r["serial"]["loads_per_batch"], 1.0)
        self.assertEqual((r["hoisted"]["loads"], r["hoisted"]["batches"]), (2, 1))  # the predicated load counts
        self.assertEqual(r["hoisted"]["loads_per_batch"], 2.0)

    def test_wide_loads_own_every_register_they_write(self):
        body = ["LDG.E.128.CONSTANT R4, desc[UR6][R2.64]", "LDG.E.64 R12, desc[UR6][R2.64+0x10]",
                "FADD R20, R14, R15",   # neither R14 nor R15 is loaded (R12, R13 are): no wait
                "LDG.E R16, desc[UR6][R2.64+0x20]",
                "FFMA R20, R7, R7, R20",  # R7: the 128-bit load's fourth register
                "LDG.E R17, desc[UR6][R2.64+0x30]", "FADD R20, R17, R20", "EXIT"]
        self.assertEqual(sass_loads.batches([(16 * i, s) for i, s in enumerate(body)]), [3, 1])

    def test_overwritten_register_and_stores(self):
        body = ["LDG.E R4, desc[UR6][R2.64]",
                "MOV R4, RZ",            # overwritten before any read: no longer waits on the load
                "FADD R8, R4, R4",
                "LDG.E R5, desc[UR6][R2.64+0x4]",
                "STG.E desc[UR6][R10.64], R5",  # a store reads its data operand
                "LDG.E R6, desc[UR6][R2.64+0x8]", "EXIT"]
        self.assertEqual(sass_loads.batches([(16 * i, s) for i, s in enumerate(body)]), [2, 1])

    def test_address_from_a_loaded_register_starts_a_new_batch(self):
        body = ["LDG.E.64 R2, desc[UR6][R8.64]", "LDG.E R4, desc[UR6][R2.64]", "EXIT"]  # pointer chase
        self.assertEqual(sass_loads.batches([(16 * i, s) for i, s in enumerate(body)]), [1, 1])

    def test_largest_loop_and_whole_function(self):
        two_loops = ["LDG.E R4, desc[UR4][R2.64]", "FADD R8, R4, R8", "@P0 BRA 0x0",  # 3 instructions
                     "LDG.E R4, desc[UR4][R2.64]", "LDG.E R5, desc[UR4][R2.64+0x4]", "LDG.E R6, desc[UR4][R2.64+0x8]",
                     "FFMA R8, R4, R5, R8", "FFMA R8, R6, R5, R8", "@P0 BRA 0x30", "EXIT"]
        straight = ["LDG.E R4, desc[UR4][R2.64]", "FADD R8, R4, R8", "LDG.E R5, desc[UR4][R2.64]",
                    "FADD R8, R5, R8", "BRA 0x60", "EXIT"]  # a forward branch is not a loop
        r = self.rows({"two_loops": two_loops, "straight": straight})
        self.assertEqual((r["two_loops"]["loads"], r["two_loops"]["batches"], r["two_loops"]["ffma"]), (3, 1, 2))
        self.assertFalse(r["straight"]["loop"])
        self.assertEqual((r["straight"]["loads"], r["straight"]["batches"]), (2, 2))

    def test_command_line(self):
        fd, path = tempfile.mkstemp(suffix=".sass")
        with os.fdopen(fd, "w") as f:
            f.write(listing({"_Z6serialv": SERIAL, "_Z7hoistedv": HOISTED}))
        self.addCleanup(os.remove, path)
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(sass_loads.main([path, "--json", "--filter", "hoisted"]), 0)
        rows = json.loads(out.getvalue())
        self.assertEqual([r["function"] for r in rows], ["_Z7hoistedv"])
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(sass_loads.main([path]), 0)
        text = out.getvalue().splitlines()
        self.assertTrue(text[0].startswith("scope"))
        self.assertIn("_Z6serialv", text[1])
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(sass_loads.main([path, "--filter", "nothing_like_this"]), 1)
        self.assertIn("no function matching 'nothing_like_this'", err.getvalue())


if __name__ == "__main__":
    unittest.main()
