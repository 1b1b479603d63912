#!/usr/bin/env python3
"""Reads the TensorBoard event files of a folder with the `tensorboard` package and prints
{"file_version": ..., "scalars": {tag: [[step, value], ...]}} as JSON. Used by
tests/tools_tensorboard_test.cpp (which skips where tensorboard is not installed).

usage: python3 tests/tools/read_tfevents.py RUN_DIR
"""
import glob
import json
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader


def main(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not files:
        print(f"read_tfevents: no event files in {run_dir}", file=sys.stderr)
        return 1
    out = {"file_version": None, "records": 0, "scalars": {}}
    for path in files:
        for event in LegacyEventFileLoader(path).Load():  # the raw Event protos, CRCs checked
            out["records"] += 1
            if event.HasField("file_version"):
                out["file_version"] = event.file_version
    # What TensorBoard's scalar dashboard reads.
    acc = EventAccumulator(run_dir)
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
