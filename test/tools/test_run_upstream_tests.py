"""scripts/run-upstream-tests.sh: stock vs patched, regressions reported, the
checkout untouched and the torch install left as it was found.

The "upstream" test file here stands in for PyTorch's: it reads the installed
torch's config.py, so a small install (fake_install.py) is enough and no
compile runs. pytest reaches that install's interpreter through a .pth file.
"""

from __future__ import annotations

import subprocess
import sysconfig
import unittest

from checkout_repo import Checkout
from fake_install import make_fake_install, REPO, ScratchTestCase, source_python, STOCK

RUNNER = REPO / "scripts" / "run-upstream-tests.sh"
STAND_IN = '''\
import importlib.metadata
from pathlib import Path


def config_text():
    dist = importlib.metadata.distribution("torch")
    return Path(dist.locate_file("torch/_inductor/config.py")).read_text()


def test_config_has_no_timing():  # passes stock, fails patched: a regression
    assert "pre_grad_pass_timing:" not in config_text()


def test_config_has_timing():  # fails stock, passes patched: fixed
    assert "pre_grad_pass_timing:" in config_text()


def test_pre_grad_passes_exist():  # passes both
    assert "use_pre_grad_passes" in config_text()
'''


class RunUpstreamTestsTest(ScratchTestCase):
    scratch_prefix = "pregrad-upstream-tests-"
    maxDiff = None

    def setUp(self) -> None:
        super().setUp()
        self.install = make_fake_install(self.tmp / "install", source_python(STOCK))
        # pytest and its dependencies, after the small install's own site-packages.
        (self.install.site / "zz-test-runner.pth").write_text(
            sysconfig.get_paths()["purelib"] + "\n")
        self.checkout = Checkout(self.tmp / "pytorch")
        self.checkout.path.mkdir()
        self.checkout.git("init", "-q")
        self.checkout.commit_file("test/dynamo/test_stand_in.py", STAND_IN.encode(), "tests")
        self.list = self.tmp / "list.txt"
        self.list.write_text("# stand-in list\ndynamo/test_stand_in.py\ninductor/test_absent.py\n")

    def run_runner(self) -> tuple[int, str]:
        result = subprocess.run(
            [str(RUNNER), str(self.checkout.path), "--python", str(self.install.python),
             "--tests", str(self.list)],
            capture_output=True, text=True,
        )
        return result.returncode, result.stdout

    def test_reports_regressions_and_leaves_everything_as_found(self) -> None:
        checkout_before = self.checkout.state()
        install_before = self.install.snapshot()
        code, output = self.run_runner()
        self.assertEqual(code, 1, output)
        self.assertExpectedInline(output, """\
stock: 2 passed, 1 failed, 0 skipped
patched: 2 passed, 1 failed, 0 skipped
regressions (pass stock, fail patched): 1
  test                                             stock   patched
  dynamo.test_stand_in::test_config_has_no_timing  passed  failed
fixed (fail stock, pass patched): 1
  test                                             stock   patched
  dynamo.test_stand_in::test_config_has_timing     failed  passed
ran on stock only: 0
""")
        self.assertEqual(self.checkout.state(), checkout_before)
        self.assertEqual(self.install.snapshot(), install_before)

    def test_a_patched_install_is_left_patched(self) -> None:
        self.assertEqual(self.install.run()[0], 0)
        before = self.install.snapshot()
        code, _ = self.run_runner()
        self.assertEqual(code, 1)
        self.assertEqual(self.install.snapshot(), before)

    def test_no_listed_file_fails_rather_than_passing_silently(self) -> None:
        self.list.write_text("inductor/test_absent.py\n")
        result = subprocess.run(
            [str(RUNNER), str(self.checkout.path), "--python", str(self.install.python),
             "--tests", str(self.list)],
            capture_output=True, text=True,
        )
        self.assertEqual(result.returncode, 1)
        self.assertIn("no listed test file exists", result.stderr)


if __name__ == "__main__":
    unittest.main()
