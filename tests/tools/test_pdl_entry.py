"""The sources' side of programmatic dependent launch (runtime/launch.cuh, docs/GPU_STEP.md).

A kernel launched with the PDL attribute may be scheduled before its predecessor on the stream has
finished; it is correct only because its first statement is rt::pdl_entry() (griddepcontrol.wait).
No compiler checks that, so this test does, over every CUDA source of the step (kernels/, model/,
data/):
  - no `<<<...>>>` launch is left: every launch goes through rt::launch, which is what sets the
    attribute when rt::Exec::pdl asks for it;
  - every `__global__` function's body starts with `rt::pdl_entry();`.
The checker itself is tested on small sources that break each rule.

Run: python3 -m unittest discover -s tests/tools -p 'test_*.py'
"""
import glob
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "emu"))
from rewrite_cu import mask_comments_and_strings  # noqa: E402

DIRS = ("kernels", "model", "data")
ENTRY = "rt::pdl_entry();"


def problems(text, name):
    """The rule breaks of one source, as 'name:line: what' strings."""
    masked = mask_comments_and_strings(text)
    out = []
    for m in re.finditer(r"<<<", masked):
        out.append("%s:%d: a <<<...>>> launch (use rt::launch)" % (name, masked.count("\n", 0, m.start()) + 1))
    for m in re.finditer(r"\b__global__\b", masked):
        i, depth = m.end(), 0
        while i < len(masked):  # the body's opening brace, after the parameter list
            c = masked[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif depth == 0 and c in "{;":
                break
            i += 1
        if i >= len(masked) or masked[i] == ";":
            continue  # a declaration
        kernel = next((k for k in re.finditer(r"(\w+)\s*\(", masked[m.end():i]) if k.group(1) != "__launch_bounds__"),
                      None)
        first = masked[i + 1:].lstrip()
        if not first.startswith(ENTRY):
            out.append("%s:%d: kernel %s does not start with %s" % (
                name, masked.count("\n", 0, m.start()) + 1, kernel.group(1) if kernel else "?", ENTRY))
    return out


def sources():
    files = []
    for d in DIRS:
        for ext in ("cu", "cuh"):
            files += glob.glob(os.path.join(ROOT, d, "*." + ext))
    return sorted(files)


class TestPdlEntry(unittest.TestCase):
    def test_every_kernel_of_the_step_waits_first(self):
        files = sources()
        self.assertGreater(len(files), 10)
        found, kernels = [], 0
        for f in files:
            with open(f) as fh:
                text = fh.read()
            kernels += len(re.findall(r"\b__global__\b", mask_comments_and_strings(text)))
            found += problems(text, os.path.relpath(f, ROOT))
        self.assertGreater(kernels, 40)
        self.assertEqual(found, [])

    def test_checker_catches_each_rule_break(self):
        good = ("// a comment: k<<<1, 1>>>() and __global__ void f() {}\n"
                "template <int R>\n__global__ void __launch_bounds__(256) k(int n, const float* x) {\n"
                "    rt::pdl_entry();\n    if (n) return;\n}\n"
                "__global__ void declared(int);\n"
                "void go(const rt::Exec& ex) { rt::launch(ex, \"k\", k<1>, 1, 1, 0, 0, nullptr); }\n")
        self.assertEqual(problems(good, "good.cu"), [])
        late = good.replace("    rt::pdl_entry();\n    if (n) return;\n", "    if (n) return;\n    rt::pdl_entry();\n")
        self.assertEqual(problems(late, "late.cu"), ["late.cu:3: kernel k does not start with rt::pdl_entry();"])
        chevrons = good + "void old(int* p) { k<1><<<1, 32, 0, s>>>(1, p); }\n"
        self.assertEqual(problems(chevrons, "old.cu"), ["old.cu:9: a <<<...>>> launch (use rt::launch)"])
        missing = good.replace("    rt::pdl_entry();\n", "")
        self.assertEqual(len(problems(missing, "m.cu")), 1)


if __name__ == "__main__":
    unittest.main()
