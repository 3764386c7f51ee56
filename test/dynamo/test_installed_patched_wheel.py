"""The patched torch 2.11.0 wheel, built by `scripts/apply.sh --wheel
torch==2.11.0` from the release wheel and installed by pip: scripts/test.sh's
wheel job runs this file and the behaviour and results suites in that venv.

PREGRAD_PATCHED_WHEEL names the wheel the venv was installed from; without
it (any other run) these tests skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
from importlib import metadata
from pathlib import Path

from torch_backport.patched_wheel import file_sha256 as sha256

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply.sh"
WHEEL = os.environ.get("PREGRAD_PATCHED_WHEEL", "")


@unittest.skipUnless(WHEEL, "run by scripts/test.sh's wheel job (PREGRAD_PATCHED_WHEEL)")
class InstalledPatchedWheelTests(unittest.TestCase):
    def test_this_torch_is_the_patched_wheel(self) -> None:
        version = Path(WHEEL).name.split("-")[1]
        self.assertEqual(metadata.version("torch"), version)
        self.assertRegex(version, r"^2\.11\.0\+pregrad\.g[0-9a-f]{10}$")

    def test_pip_check_passes(self) -> None:
        result = subprocess.run([sys.executable, "-m", "pip", "check"],
                                capture_output=True, text=True)
        self.assertEqual((result.returncode, result.stdout),
                         (0, "No broken requirements found.\n"), result.stderr)

    def test_status_says_installed_from_a_patched_wheel(self) -> None:
        result = subprocess.run([str(APPLY), "--python", sys.executable, "--status"],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(result.stdout.count("patched: installed from a patched wheel"), 2,
                         result.stdout)

    def test_a_rebuild_from_the_same_release_wheel_has_the_same_sha256(self) -> None:
        with tempfile.TemporaryDirectory(prefix="pregrad-rebuild-") as out:
            result = subprocess.run([str(APPLY), "--wheel", "torch==2.11.0", "--out", out],
                                    capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            (rebuilt,) = Path(out).iterdir()
            self.assertEqual(rebuilt.name, Path(WHEEL).name)
            self.assertEqual(sha256(rebuilt), sha256(Path(WHEEL)))


if __name__ == "__main__":
    unittest.main()
