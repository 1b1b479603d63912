"""Tests of tools/plot_metrics.py. Parsing and error tests run everywhere (stdlib only); the
drawing tests run only where matplotlib imports and are skipped elsewhere (CI has no matplotlib).

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "plot_metrics.py")

_spec = importlib.util.spec_from_file_location("plot_metrics", SCRIPT)
pm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pm)

try:
    import matplotlib  # noqa: F401

    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False


def train_record(step, loss, lr):
    return {"step": step, "epoch": 1 + step // 10, "loss": loss, "loss_mean_window": loss, "lr": lr,
            "grad_norm": 0.5, "skipped_steps": 0, "samples_per_s": 12.5}


def val_record(step, mae, hit2, hit5):
    return {"validation": True, "epoch": step // 10, "step": step, "mae_px": mae, "rmse_px": mae * 1.2,
            "hit_le_2px": hit2, "hit_le_5px": hit5, "gap_mae": mae, "slider_mae": mae, "samples": 64}


def write_run(folder, records, tail=""):
    path = os.path.join(folder, "metrics.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        f.write(tail)
    return path


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


class Styles(unittest.TestCase):
    def test_validation_lines_differ_in_style_and_marker(self):
        keys = ("hit_le_2px", "hit_le_5px", "mae_px")
        for a in keys:
            for b in keys:
                if a < b:
                    sa, sb = pm.ACC_STYLES[a], pm.ACC_STYLES[b]
                    self.assertNotEqual(sa["linestyle"], sb["linestyle"], (a, b))
                    self.assertNotEqual(sa["marker"], sb["marker"], (a, b))
                    self.assertNotEqual(sa["color"], sb["color"], (a, b))

    @unittest.skipUnless(HAVE_MPL, "matplotlib is not installed")
    def test_equal_hit_rates_stay_visible(self):
        import matplotlib.pyplot as plt
        with tempfile.TemporaryDirectory() as d:
            recs = [val_record(10 * k, 1.0, 100.0, 100.0) for k in range(1, 4)]
            train, val = pm.load_metrics(write_run(d, recs))
            captured = []
            real_close = plt.close
            plt.close = lambda fig: captured.append(fig)
            try:
                pm.plot(train, val, os.path.join(d, "m.png"), "t")
            finally:
                plt.close = real_close
            ax_acc = captured[0].axes[2]
            lines = {l.get_label(): l for l in ax_acc.get_lines()}
            two, five = lines["hit@2px (%)"], lines["hit@5px (%)"]
            self.assertEqual(list(two.get_ydata()), list(five.get_ydata()))
            self.assertNotEqual(two.get_marker(), five.get_marker())
            self.assertNotEqual(two.get_linestyle(), five.get_linestyle())
            self.assertGreater(two.get_zorder(), five.get_zorder())


class LoadMetrics(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_splits_training_and_validation_records(self):
        recs = [train_record(s, 5.0 / s, 1e-3) for s in range(1, 21)]
        recs.insert(10, val_record(10, 12.0, 5.0, 20.0))
        recs.append(val_record(20, 8.0, 10.0, 40.0))
        path = write_run(self.dir, recs)
        train, val = pm.load_metrics(path)
        self.assertEqual([r["step"] for r in train], list(range(1, 21)))
        self.assertEqual([r["step"] for r in val], [10, 20])
        self.assertEqual(pm.series(val, "hit_le_5px"), ([10, 20], [20.0, 40.0]))
        # A folder is accepted in place of the file.
        self.assertEqual(pm.metrics_path(self.dir), path)

    def test_series_skips_missing_and_non_finite_values(self):
        recs = [{"step": 1, "loss": 1.0}, {"step": 2}, {"step": 3, "loss": float("nan")}, {"step": 4, "loss": 0.5}]
        self.assertEqual(pm.series(recs, "loss"), ([1, 4], [1.0, 0.5]))

    def test_partial_last_line_is_skipped_but_a_bad_middle_line_is_an_error(self):
        path = write_run(self.dir, [train_record(1, 1.0, 1e-3)], tail='{"step": 2, "lo')
        train, val = pm.load_metrics(path)
        self.assertEqual(len(train), 1)
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(train_record(1, 1.0, 1e-3)) + "\nnot json\n" + json.dumps(train_record(2, 1, 1)) + "\n")
        with self.assertRaisesRegex(pm.MetricsError, r"metrics.jsonl:2: not a JSON record"):
            pm.load_metrics(path)

    def test_errors_name_the_file(self):
        with self.assertRaisesRegex(pm.MetricsError, "no such file"):
            pm.load_metrics(os.path.join(self.dir, "missing.jsonl"))
        path = write_run(self.dir, [])
        with self.assertRaisesRegex(pm.MetricsError, "holds no records"):
            pm.load_metrics(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write('{"loss": 1.0}\n')
        with self.assertRaisesRegex(pm.MetricsError, "'step'"):
            pm.load_metrics(path)

    def test_missing_matplotlib_gives_a_clear_message(self):
        write_run(self.dir, [train_record(1, 1.0, 1e-3)])
        code = ("import sys, runpy; sys.modules['matplotlib'] = None; "
                f"sys.argv = ['plot_metrics.py', {self.dir!r}]; runpy.run_path({SCRIPT!r}, run_name='__main__')")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("matplotlib is not installed", p.stderr)
        self.assertIn("pip install matplotlib", p.stderr)


@unittest.skipUnless(HAVE_MPL, "matplotlib is not installed")
class Plot(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_writes_a_png_beside_the_metrics(self):
        recs = [train_record(s, 5.0 / s, 1e-3 * (0.9 ** s)) for s in range(1, 41)]
        recs += [val_record(s, 20.0 / s, s, 2 * s) for s in (10, 20, 30, 40)]
        write_run(self.dir, recs)
        self.assertEqual(pm.main([self.dir]), 0)
        w, h = png_size(os.path.join(self.dir, "metrics.png"))
        self.assertEqual((w, h), (900, 1000))

    def test_training_only_run_and_explicit_output(self):
        path = write_run(self.dir, [train_record(s, 1.0, 0.0) for s in range(1, 5)])  # lr 0: no log axis
        out = os.path.join(self.dir, "custom.png")
        self.assertEqual(pm.main([path, "-o", out, "--title", "t"]), 0)
        png_size(out)

    def test_command_line_reports_errors_with_exit_code_1(self):
        p = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, "nope")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no such file", p.stderr)


if __name__ == "__main__":
    unittest.main()
