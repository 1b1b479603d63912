#!/usr/bin/env python3
"""Checks that ctest registers every test of a gtest executable, and nothing else.

usage: check_registered.py REGISTERED_FILE PREFIX EXECUTABLE

REGISTERED_FILE lists the ctest names, one a line (tests/emu/CMakeLists.txt writes it from the
TEST(...) lines it reads in the sources); PREFIX is stripped from them. The executable's
--gtest_list_tests is the truth: a test the regular expression missed would never run in CI, a
name it invented would run nothing and pass.
"""
import subprocess
import sys


def listed(executable):
    out = subprocess.run([executable, "--gtest_list_tests"], check=True, capture_output=True, text=True).stdout
    names, suite = set(), None
    for line in out.splitlines():
        text = line.split("#")[0].strip()
        if not text:
            continue
        if not line.startswith(" "):
            suite = text if text.endswith(".") else None  # anything else printed is not a suite
        elif suite is not None:
            names.add(suite + text)
    return names


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    registered_file, prefix, executable = argv[1:]
    with open(registered_file) as f:
        registered = [line.strip() for line in f if line.strip()]
    stripped = {name[len(prefix):] if name.startswith(prefix) else name for name in registered}
    actual = listed(executable)
    missing, extra = sorted(actual - stripped), sorted(stripped - actual)
    dup = len(registered) - len(set(registered))
    for name in missing:
        print(f"not registered: {name}")
    for name in extra:
        print(f"registered, not in the executable: {name}")
    if dup:
        print(f"{dup} names registered twice")
    print(f"{len(actual)} tests in {executable}, {len(set(registered))} registered")
    return 1 if missing or extra or dup else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
