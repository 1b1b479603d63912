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

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader


def main(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not files:
        print(f"read_tfevents: no event files in {run_dir}", file=sys.stderr)
        return 1
    out = {"file_version": None, "scalars": {}}
    for path in files:
        for event in EventFileLoader(path).Load():  # raises on a bad CRC or a truncated record
            if event.HasField("file_version"):
                out["file_version"] = event.file_version
            for v in event.summary.value:
                out["scalars"].setdefault(v.tag, []).append([event.step, v.simple_value])
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
