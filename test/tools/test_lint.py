"""test/harness/lint.py, the linters test.sh runs before the matrix: a
finding in a copy of the checkout fails the step and is named, file and
line, with nothing written into the copy. (That the checkout itself is
clean, the gate's own lint step shows.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
import unittest
from pathlib import Path

from fake_install import REPO, ScratchTestCase

HARNESS = REPO / "test" / "harness"
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))
import lint  # noqa: E402

COPIED = ("setup.cfg", "torch_backport", "maint", "scripts", "test", "bench", "requirements")


@unittest.skipUnless((lint.lint_venv() / ".pregrad-ready").is_file(),
                     "needs the linters' venv (scripts/test.sh makes it before the matrix)")
class LintTest(ScratchTestCase):
    def copy(self) -> Path:
        copy = self.tmp / "project"
        for part in COPIED:
            if (REPO / part).is_dir():
                shutil.copytree(REPO / part, copy / part,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                copy.mkdir(exist_ok=True)
                shutil.copy2(REPO / part, copy / part)
        return copy

    def lint(self, copy: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(copy / "test" / "harness" / "lint.py")],
                              cwd=copy, capture_output=True, text=True)

    def test_a_long_line_fails_and_is_named(self) -> None:
        copy = self.copy()
        with open(copy / "maint" / "update_docs.py", "a") as module:
            module.write(f"LONG = {'x' * 100!r}\n")
        result = self.lint(copy)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("maint/update_docs.py", result.stderr)
        self.assertIn("E501 line too long", result.stderr)
        self.assertFalse((copy / ".mypy_cache").exists())

    def test_a_type_error_fails_and_is_named(self) -> None:
        copy = self.copy()
        with open(copy / "torch_backport" / "infra" / "exit_codes.py", "a") as module:
            module.write("\n\ndef wrong() -> int:\n    return 'one'\n")
        result = self.lint(copy)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertRegex(result.stderr, r"torch_backport/infra/exit_codes\.py:\d+: error: "
                                        r"Incompatible return value type")


if __name__ == "__main__":
    unittest.main()
