"""Canned bench reports ("slidefuse.bench/1") for the tests of tools/baselines and tools/compare.py."""
import bench_schema


def canned_report(tool, batch_ms, mode="m", status=None, peak=2 ** 30):
    """A report with one run per batch size: batch_ms maps batch -> per-step times (ms), or None for
    a run that failed (status `status`, default "oom")."""
    runs = []
    for b, t in batch_ms.items():
        if t is None:
            runs.append(bench_schema.make_run(b, 256, 512, 2, mode, 10, [], None, status=status or "oom",
                                              error="CUDA out of memory"))
        else:
            runs.append(bench_schema.make_run(b, 256, 512, 2, mode, 10, t, peak))
    return bench_schema.make_report(tool, {"name": "NVIDIA H100 80GB HBM3", "driver": "570.1", "cuda": "12.8",
                                           "cudnn": "91000", "torch": "2.11.0"}, runs, commit="abc123",
                                    date="2026-11-21T10:00:00Z")
