"""Tests of tools/layer_gaps.py: on the committed H100 bench record (docs/gpu/2026-11-24-h100) the
groups add up to the table (sums recomputed here from the rows), and on hand-written records the
depthwise variants lines are read (chosen variant, saving against variant 0, fastest direct and
staged gather variant), gzip input, and the error for a record without per-layer rows.

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
import layer_gaps  # noqa: E402

RUN9 = os.path.join(ROOT, "docs", "gpu", "2026-11-24-h100", "7-tests-fixed", "bench_conv_first.json")
TOOL = os.path.join(ROOT, "tools", "layer_gaps.py")


def row(name, ms, floor, gb):
    return {"name": name, "ms": ms, "floor_ms": floor, "gb": gb, "fwd_ms": ms / 3, "bwd_ms": 2 * ms / 3}


SHAPE = "n128 64x128 c64->64 k3 s1 g64: custom-depthwise (cudnn 15.468 ms, custom 0.828 ms per fwd+bwd; -1 = not timed)"
VARIANTS = ("  dwconv variants: fwd 7 (4ch 2x4 s8x32) of [0.3000 0.2900 0.2500 - 0.2600 0.2700 0.1800 0.1500 0.1600] ms,"
            " dgrad 2 (4ch 2x4) of [0.3000 0.3100 0.2000 0.2500 0.2200 0.2300 0.2400 0.2100 0.2600] ms,"
            " wgrad 3 (4ch 1x4 w1) of [0.2800 0.2700 0.2600 0.2000 0.2100] ms")
NAMES = ("dwconv variant names: gather [0 8ch 2x4 | 1 8ch 1x4 | 2 4ch 2x4 | 3 4ch 1x4 | 4 2ch 2x4 | 5 2ch 4x4 |"
         " 6 8ch 2x4 s8x32 | 7 4ch 2x4 s8x32 | 8 2ch 4x4 s8x32], wgrad [0 8ch 1x4 w1 | 1 4ch 1x4 w2 |"
         " 2 2ch 1x4 w4 | 3 4ch 1x4 w1 | 4 2ch 1x4 w1]")


def record(plans):
    rows = [row("stage2.branch_1_4.0.dw_conv", 1.2, 0.5, 1.0), row("stage2.branch_1_4.0.pw_expand", 0.8, 0.6, 1.2),
            row("stage4.branch_1_32.0.dw_conv", 0.3, 0.1, 0.05), row("loss", 0.3, 0.02, 0.067),
            row("stage2.fusion.up_1_8_to_1_4.1", 0.2, 0.1, 0.4)]
    return {"schema": "slidefuse.bench/1", "commit": "abc", "device": {"name": "GPU"},
            "runs": [{"batch": 128, "ms_per_step": 3.0, "samples_per_s": 42666.7}],
            "layers": {"rows": rows, "total": {"ms": 2.8}, "conv_plans": plans}}


class LayerGapsTest(unittest.TestCase):
    def test_groups_add_up_on_the_h100_record(self):
        with open(RUN9) as f:
            d = json.load(f)
        rep = layer_gaps.report(d)
        rows = d["layers"]["rows"]
        total_ms = sum(r["ms"] for r in rows)
        total_floor = sum(r["floor_ms"] for r in rows)
        self.assertAlmostEqual(total_ms, d["layers"]["total"]["ms"], places=6)
        for key in ("by_class", "by_resolution"):
            groups = rep[key]
            self.assertEqual(sum(g["rows"] for g in groups), len(rows))
            self.assertAlmostEqual(sum(g["ms"] for g in groups), total_ms, places=6)
            self.assertAlmostEqual(sum(g["floor_ms"] for g in groups), total_floor, places=6)
            self.assertAlmostEqual(sum(g["gap_share"] for g in groups), 1.0, places=9)
            gaps = [g["gap_ms"] for g in groups]
            self.assertEqual(gaps, sorted(gaps, reverse=True))
        dw = [r for r in rows if r["name"].endswith(".dw_conv")]
        got = next(g for g in rep["by_class"] if g["group"].startswith("depthwise"))
        self.assertEqual(got["rows"], len(dw))
        self.assertEqual(got["rows"], 41)  # the 23 LiteBlocks' and 18 DSConv down paths'
        self.assertAlmostEqual(got["ms"], sum(r["ms"] for r in dw), places=9)
        self.assertAlmostEqual(got["gbps"], sum(r["gb"] for r in dw) / (got["ms"] / 1e3), places=6)
        self.assertEqual(rep["by_class"][0]["group"], got["group"])  # the largest gap of that run
        self.assertAlmostEqual(rep["step"]["ms_per_step"], 67.27729415893555)
        # That run predates the variants: no variants lines.
        self.assertEqual(rep["depthwise_variants"], [])

    def test_classes_and_resolutions(self):
        self.assertTrue(layer_gaps.layer_class("stem.lite_blocks.0.dw_conv").startswith("depthwise"))
        self.assertTrue(layer_gaps.layer_class("lite_fpn.fuse_1_4.smooth").startswith("3x3 smooth"))
        self.assertTrue(layer_gaps.layer_class("stage3.fusion.smooth_1_16").startswith("3x3 smooth"))
        self.assertTrue(layer_gaps.layer_class("dual_head.offset.conv1").startswith("3x3 head"))
        self.assertEqual(layer_gaps.layer_class("dual_head.offset.conv2"), layer_gaps.OTHER)
        self.assertEqual(layer_gaps.resolution("stage3.fusion.up_1_16_to_1_4.1"), "1/4")  # the destination
        self.assertEqual(layer_gaps.resolution("stage4.fusion.down_1_4_to_1_32.2.dw_conv"), "1/32")
        self.assertEqual(layer_gaps.resolution("stage3.branch_1_16.0.pw_expand"), "1/16")
        self.assertEqual(layer_gaps.resolution("dual_head.angle.conv1"), "heads (1/4)")
        self.assertEqual(layer_gaps.resolution("optimizer"), "loss, optimizer, data")

    def test_variants_lines(self):
        rep = layer_gaps.report(record([SHAPE, VARIANTS, NAMES, "  cudnn plan fprop n128 ... | 0.1 ms"]))
        self.assertEqual(len(rep["depthwise_variants"]), 1)
        e = rep["depthwise_variants"][0]
        self.assertEqual(e["shape"], "n128 64x128 c64->64 k3 s1 g64")
        f = e["passes"]["fwd"]
        self.assertEqual((f["chosen"], f["name"], f["ms"], f["variant0_ms"]), (7, "4ch 2x4 s8x32", 0.15, 0.30))
        self.assertAlmostEqual(f["saved_pct"], 50.0)
        self.assertEqual(f["best_direct"], {"variant": 2, "name": "4ch 2x4", "ms": 0.25})  # "-" skipped
        self.assertEqual(f["best_staged"], {"variant": 7, "name": "4ch 2x4 s8x32", "ms": 0.15})
        d = e["passes"]["dgrad"]
        self.assertEqual((d["chosen"], d["ms"]), (2, 0.20))
        self.assertEqual(d["best_staged"]["variant"], 7)
        w = e["passes"]["wgrad"]
        self.assertEqual((w["chosen"], w["name"], w["ms"], w["variant0_ms"]), (3, "4ch 1x4 w1", 0.20, 0.28))
        self.assertNotIn("best_direct", w)
        md = layer_gaps.markdown(rep)
        self.assertIn("| n128 64x128 c64->64 k3 s1 g64 | fwd | 7 (4ch 2x4 s8x32) | 0.1500 | 0.3000 | 50.0% |", md)

    def test_wgrad_per_pixel_against_hoisted_loads(self):
        names = NAMES.replace("4 2ch 1x4 w1]", "4 2ch 1x4 w1 | 5 8ch 1x4 w1 hoist | 6 4ch 1x4 w1 hoist |"
                                                 " 7 4ch 1x4 w1 prefetch | 8 2ch 1x4 w1 prefetch]")
        self.assertNotEqual(names, NAMES)
        line = VARIANTS.replace("wgrad 3 (4ch 1x4 w1) of [0.2800 0.2700 0.2600 0.2000 0.2100] ms",
                                "wgrad 7 (4ch 1x4 w1 prefetch) of [0.2800 0.2700 0.2600 0.2000 0.2100 0.1500 0.1200"
                                " 0.1000 0.1100] ms")
        self.assertNotEqual(line, VARIANTS)
        rep = layer_gaps.report(record([SHAPE, line, names]))
        w = rep["depthwise_variants"][0]["passes"]["wgrad"]
        self.assertEqual((w["chosen"], w["ms"], w["variant0_ms"]), (7, 0.10, 0.28))
        self.assertEqual(w["best_per_pixel"], {"variant": 3, "name": "4ch 1x4 w1", "ms": 0.20})
        self.assertEqual(w["best_hoisted"], {"variant": 7, "name": "4ch 1x4 w1 prefetch", "ms": 0.10})
        self.assertNotIn("best_direct", w)
        self.assertIn("| wgrad | 7 (4ch 1x4 w1 prefetch) | 0.1000 | 0.2800 | 64.3% | 3 (4ch 1x4 w1) 0.2000 |"
                      " 7 (4ch 1x4 w1 prefetch) 0.1000 |", layer_gaps.markdown(rep))

    def test_dgrad_overwrite_mode_is_its_own_pass(self):
        # Since 2026-11-27 a dgrad run in both modes has a choice per mode: "dgrad" (accumulate) and
        # "dgrad overwrite"; a shape whose step only overwrites has the second alone.
        ow = " dgrad overwrite 7 (4ch 2x4 s8x32) of [0.2000 0.1900 0.1200 0.1400 0.1300 0.1500 0.1100 0.0900 0.1000] ms,"
        both = VARIANTS.replace(" wgrad 3", ow + " wgrad 3")
        e = layer_gaps.report(record([SHAPE, both, NAMES]))["depthwise_variants"][0]
        self.assertEqual((e["passes"]["dgrad"]["chosen"], e["passes"]["dgrad"]["ms"]), (2, 0.20))
        o = e["passes"]["dgrad overwrite"]
        self.assertEqual((o["chosen"], o["name"], o["ms"], o["variant0_ms"]), (7, "4ch 2x4 s8x32", 0.09, 0.20))
        self.assertEqual(o["best_direct"], {"variant": 2, "name": "4ch 2x4", "ms": 0.12})
        only = VARIANTS.replace(" dgrad 2 (4ch 2x4) of [0.3000 0.3100 0.2000 0.2500 0.2200 0.2300 0.2400 0.2100 0.2600] ms,",
                                ow)
        self.assertNotEqual(only, VARIANTS)
        e = layer_gaps.report(record([SHAPE, only, NAMES]))["depthwise_variants"][0]
        self.assertNotIn("dgrad", e["passes"])
        self.assertEqual(e["passes"]["dgrad overwrite"]["chosen"], 7)
        md = layer_gaps.markdown(layer_gaps.report(record([SHAPE, both, NAMES])))
        self.assertIn("| n128 64x128 c64->64 k3 s1 g64 | dgrad overwrite | 7 (4ch 2x4 s8x32) | 0.0900 | 0.2000 | 55.0% |",
                      md)

    def test_prologue_forward_of_a_fused_shape(self):
        line = VARIANTS + (", fwd with BN prologue 6 (8ch 2x4 s8x32) of [0.9000 0.9500 - - - - 0.4500 0.5000 0.4800"
                           " 0.8000] ms")
        rep = layer_gaps.report(record([SHAPE, line, NAMES]))
        e = rep["depthwise_variants"][0]
        self.assertEqual(e["passes"]["fwd"]["chosen"], 7)  # the plain forward still read as before
        f = e["passes"]["fwd+prologue"]
        self.assertEqual((f["chosen"], f["name"], f["ms"], f["variant0_ms"]), (6, "8ch 2x4 s8x32", 0.45, 0.90))
        self.assertAlmostEqual(f["saved_pct"], 50.0)
        self.assertEqual(f["best_direct"]["variant"], 0)
        self.assertEqual(f["best_staged"]["variant"], 6)
        self.assertIn("| fwd+prologue | 6 (8ch 2x4 s8x32) | 0.4500 | 0.9000 | 50.0% |", layer_gaps.markdown(rep))

    def test_names_from_chosen_variants_without_the_names_line(self):
        names = layer_gaps.gather_names([SHAPE, VARIANTS])
        self.assertEqual(names[7], "4ch 2x4 s8x32")
        self.assertEqual(names[2], "4ch 2x4")
        self.assertEqual(names[0], "variant 0")

    def test_cli_gzip_md_json_and_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            gz = os.path.join(tmp, "bench.json.gz")
            with gzip.open(gz, "wt") as f:
                json.dump(record([SHAPE, VARIANTS, NAMES]), f)
            md, js = os.path.join(tmp, "gaps.md"), os.path.join(tmp, "gaps.json")
            r = subprocess.run([sys.executable, TOOL, gz, "--md", md, "--json", js], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(md) as f:
                text = f.read()
            self.assertIn("## By layer class", text)
            self.assertIn("graph step 3.00 ms, 42666.7 samples/s at batch 128", text)
            with open(js) as f:
                self.assertEqual(json.load(f)["by_class"][0]["group"], "depthwise ConvBN (dw_conv)")
            bad = os.path.join(tmp, "bad.json")
            with open(bad, "w") as f:
                json.dump({"schema": "slidefuse.bench/1", "runs": []}, f)
            r = subprocess.run([sys.executable, TOOL, bad], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no per-layer rows", r.stderr)
            r = subprocess.run([sys.executable, TOOL, os.path.join(tmp, "missing.json")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)

    def test_against_a_base_record(self):
        # A record whose depthwise rows halved and whose heads merged two rows into one, against its base.
        base = record([])
        other = record([])
        other["runs"][0]["ms_per_step"] = 2.5
        other["layers"]["rows"] = [row("stage2.branch_1_4.0.dw_conv", 0.6, 0.5, 1.0),
                                   row("stage2.branch_1_4.0.pw_expand", 0.8, 0.6, 1.2),
                                   row("stage4.branch_1_32.0.dw_conv", 0.15, 0.1, 0.05), row("loss", 0.3, 0.02, 0.067)]
        a = layer_gaps.against_report(other, base)
        self.assertAlmostEqual(a["base_layers_ms"] - a["layers_ms"], 0.95)
        by = {g["group"]: g for g in a["by_class"]}
        dw = by["depthwise ConvBN (dw_conv)"]
        self.assertAlmostEqual(dw["saved_ms"], 0.75)
        self.assertAlmostEqual(dw["fwd_saved_ms"], 0.25)
        self.assertAlmostEqual(dw["bwd_saved_ms"], 0.5)
        self.assertEqual(a["by_class"][0]["group"], "depthwise ConvBN (dw_conv)")  # the largest saving first
        up = by["fusion up paths"]
        self.assertEqual((up["rows"], up["base_rows"]), (0, 1))  # a row the other record no longer has
        self.assertAlmostEqual(up["saved_ms"], 0.2)
        with tempfile.TemporaryDirectory() as tmp:
            pa, pb = os.path.join(tmp, "other.json"), os.path.join(tmp, "base.json")
            for path, doc in ((pa, other), (pb, base)):
                with open(path, "w") as f:
                    json.dump(doc, f)
            r = subprocess.run([sys.executable, TOOL, pa, "--against", pb], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("## Against base.json (eager per-layer rows)", r.stdout)
            self.assertIn("graph step 2.50 ms against 3.00 ms (0.50 ms saved); eager per-layer rows 1.85 ms against "
                          "2.80 ms (0.95 ms saved).", r.stdout)
            self.assertIn("| depthwise ConvBN (dw_conv) | 2 (2) | 1.50 | 0.75 | 0.75 | 0.25 | 0.50 |", r.stdout)
            del base["layers"]
            with open(pb, "w") as f:
                json.dump(base, f)
            r = subprocess.run([sys.executable, TOOL, pa, "--against", pb], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("base.json: no per-layer rows", r.stderr)


if __name__ == "__main__":
    unittest.main()
