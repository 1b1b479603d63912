"""scripts/gpu_unpack.sh: the packed binaries (.gpu.tar.xz) back into .gpu/ on the GPU host, with tar or,
where the host has no xz, Python's tarfile."""
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class GpuUnpackTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu_unpack.")
        os.makedirs(os.path.join(self.dir, "scripts"))
        shutil.copy(os.path.join(ROOT, "scripts", "gpu_unpack.sh"), os.path.join(self.dir, "scripts"))
        gpu = os.path.join(self.dir, ".gpu")
        os.makedirs(os.path.join(gpu, "tests"))
        with open(os.path.join(gpu, "slidefuse"), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(gpu, "slidefuse"), 0o755)
        with open(os.path.join(gpu, "commit.txt"), "w") as f:
            f.write("abc123\n")
        with tarfile.open(os.path.join(self.dir, ".gpu.tar.xz"), "w:xz") as t:
            t.add(gpu, arcname=".gpu")
        shutil.rmtree(gpu)

    def unpack(self, path=None):
        env = dict(os.environ)
        if path:
            env["PATH"] = path + ":" + env["PATH"]
        return subprocess.run(["bash", os.path.join(self.dir, "scripts", "gpu_unpack.sh")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def test_tar_and_the_python_fallback(self):
        r = self.unpack()
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("gpu_unpack: .gpu/ from .gpu.tar.xz (tar, ", r.stdout)
        self.assertIn("commit abc123", r.stdout)
        self.assertTrue(os.access(os.path.join(self.dir, ".gpu", "slidefuse"), os.X_OK))
        # A host whose tar cannot read xz: Python's tarfile instead, over what is there.
        fake = os.path.join(self.dir, "fakebin")
        os.makedirs(fake)
        with open(os.path.join(fake, "tar"), "w") as f:
            f.write("#!/bin/sh\necho 'tar: xz: Cannot exec' >&2\nexit 2\n")
        os.chmod(os.path.join(fake, "tar"), 0o755)
        r = self.unpack(fake)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("(python3 tarfile, ", r.stdout)
        self.assertTrue(os.access(os.path.join(self.dir, ".gpu", "slidefuse"), os.X_OK))

    def test_a_missing_archive_is_named(self):
        os.remove(os.path.join(self.dir, ".gpu.tar.xz"))
        r = self.unpack()
        self.assertEqual(r.returncode, 1)
        self.assertIn("no .gpu.tar.xz here", r.stdout)


if __name__ == "__main__":
    unittest.main()
