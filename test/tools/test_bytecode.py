"""Bytecode that cannot go stale: apply and --revert compile each file they
write again in the invalidation mode its .pyc had, so that a new process
runs the new source even with unchecked-hash .pyc files (reproducible
images: `python -m compileall --invalidation-mode unchecked-hash`), and
--status says when a .pyc would make Python run other code than the file.
Bytecode is a file like any other: a __pycache__ that is a link or not a
directory is refused before anything is written, and a .pyc is read only as
a regular file (a planted FIFO or link to a device neither hangs nor grows)."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from pathlib import Path

from fake_install import APPLY, FakeInstall, InstallTestCase

CONFIG = "torch/_inductor/config.py"
# What the import system runs for a file: its .pyc where the .pyc's
# invalidation mode accepts it (SourceFileLoader.get_code, as `import` does).
NAMES = """
import importlib.machinery, sys
loader = importlib.machinery.SourceFileLoader("config", sys.argv[1])
print("pre_grad_pass_timing" in loader.get_code("config").co_names)
"""


def compile_unchecked(install: FakeInstall) -> None:
    subprocess.run([str(install.python), "-m", "compileall", "-q", "--invalidation-mode",
                    "unchecked-hash", str(install.site / "torch")], check=True)


def runs_the_feature(install: FakeInstall) -> bool:
    """Whether a new process would run a config.py that has the feature."""
    found = subprocess.run([str(install.python), "-c", NAMES, str(install.path(CONFIG))],
                           capture_output=True, text=True, check=True)
    return found.stdout.strip() == "True"


class BytecodeTest(InstallTestCase):
    def test_apply_over_unchecked_pyc_runs_the_patched_source(self) -> None:
        install = self.install()
        compile_unchecked(install)
        self.assertFalse(runs_the_feature(install))
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertTrue(runs_the_feature(install))
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
        self.assertNotIn("stale bytecode", output)

    def test_revert_over_unchecked_pyc_runs_the_wheels_source(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        compile_unchecked(install)  # of the patched sources
        self.assertTrue(runs_the_feature(install))
        code, output = install.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertFalse(runs_the_feature(install))
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
        self.assertNotIn("stale bytecode", output)

    def test_status_names_an_unchecked_pyc_of_other_source(self) -> None:
        install = self.install()
        compile_unchecked(install)
        # What an image build that compiled before the patch, then copied
        # the patched sources in, would hold.
        stock_pyc = {path: path.read_bytes()
                     for path in install.path(CONFIG).parent.glob("__pycache__/config.*.pyc")}
        self.assertEqual(install.run()[0], 0)
        for path, data in stock_pyc.items():
            path.write_bytes(data)
        self.assertFalse(runs_the_feature(install))
        code, output = install.run("--status")
        self.assertEqual(code, 1, output)
        self.assertIn("stale bytecode: a new process would not run the files above:", output)
        self.assertIn("is an unchecked-hash .pyc of other source: Python runs it, not "
                      f"{CONFIG}", output)


PYC_NAME = f"config.{sys.implementation.cache_tag}.pyc"


class PlantedBytecodeTest(InstallTestCase):
    """What another user who owns the install may plant in __pycache__."""

    def pycache(self, install: FakeInstall) -> Path:
        return install.path(CONFIG).parent / "__pycache__"

    def test_a_linked_pycache_is_refused_and_its_target_untouched(self) -> None:
        install = self.install()
        elsewhere = self.tmp / "root-owned-bytecode"
        elsewhere.mkdir()
        (elsewhere / PYC_NAME).write_bytes(b"root's bytecode")
        (elsewhere / "config.cpython-310.pyc").write_bytes(b"another interpreter's")
        pycache = self.pycache(install)
        if pycache.exists():
            for entry in pycache.iterdir():
                entry.unlink()
            pycache.rmdir()
        pycache.symlink_to(elsewhere)
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 1, output)
        self.assertIn("__pycache__ is a symbolic link where this project expects a directory",
                      output)
        self.assertEqual(install.snapshot(), before)
        self.assertEqual(sorted(path.name for path in elsewhere.iterdir()),
                         sorted(["config.cpython-310.pyc", PYC_NAME]))
        self.assertEqual((elsewhere / PYC_NAME).read_bytes(), b"root's bytecode")

    def test_a_pycache_that_is_not_a_directory_is_refused(self) -> None:
        install = self.install()
        pycache = self.pycache(install)
        if pycache.exists():
            for entry in pycache.iterdir():
                entry.unlink()
            pycache.rmdir()
        pycache.write_bytes(b"not a directory")
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 1, output)
        self.assertIn("__pycache__ is not a directory", output)
        self.assertEqual(install.snapshot(), before)

    def apply_over_a_planted_pyc(self, plant: str) -> None:
        """--status, apply, --status and --revert with `plant` at config's
        .pyc: each ends (a hang is subprocess.TimeoutExpired, well before
        the suite's own deadline), says no traceback, and the revert holds."""
        install = self.install()
        pyc = self.pycache(install) / PYC_NAME
        pyc.parent.mkdir(exist_ok=True)
        if pyc.exists() or pyc.is_symlink():
            pyc.unlink()
        if plant == "fifo":
            os.mkfifo(pyc)
        else:
            pyc.symlink_to(plant)
        for args in (("--status",), (), ("--status",), ("--revert",)):
            result = subprocess.run([str(APPLY), "--python", str(install.python), *args],
                                    capture_output=True, text=True, timeout=60)
            self.assertIn(result.returncode, (0, 1), result.stderr)
            self.assertNotIn("Traceback", result.stdout + result.stderr)
        self.assertFalse(runs_the_feature(install))

    def test_a_fifo_at_the_pyc_does_not_hang_status_apply_or_revert(self) -> None:
        self.apply_over_a_planted_pyc("fifo")

    def test_a_link_to_dev_zero_at_the_pyc_is_not_read(self) -> None:
        self.apply_over_a_planted_pyc("/dev/zero")


if __name__ == "__main__":
    unittest.main()
