"""What the torch-dependent baseline tests share (test_torch_baseline.py, test_libtorch_baseline.py):
the tools' import paths, torch and numpy when importable (one thread: the same kernels give the
same bits), the skip decorator and the one-thread environment for the programs they start."""
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(REPO, "tools", "baselines")
for _p in (BASE, os.path.join(REPO, "tools", "reference")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

try:
    import numpy as np  # noqa: F401
    import torch
    torch.set_num_threads(1)
    HAVE_TORCH = True
except ImportError:  # pragma: no cover
    np = torch = None
    HAVE_TORCH = False

shards = None
if HAVE_TORCH:
    import shards  # noqa: E402,F401,F811

needs_torch = unittest.skipUnless(HAVE_TORCH, "torch (and numpy) not importable")
ENV1 = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def read_text(path):
    with open(path) as f:
        return f.read()


__all__ = ["REPO", "BASE", "HAVE_TORCH", "ENV1", "needs_torch", "np", "torch", "shards", "read_text"]
