"""Bytecode that cannot go stale: apply and --revert compile each file they
write again in the invalidation mode its .pyc had, so that a new process
runs the new source even with unchecked-hash .pyc files (reproducible
images: `python -m compileall --invalidation-mode unchecked-hash`), and
--status says when a .pyc would make Python run other code than the file."""

from __future__ import annotations

import subprocess
import unittest

from fake_install import FakeInstall, InstallTestCase

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


if __name__ == "__main__":
    unittest.main()
