"""apply, --status and --revert on this release's real install.

Run on a stock build (scripts/test.sh, both tiers). The install is a
hard-linked copy of this venv beside it (apply.sh replaces files by atomic
rename, so this venv keeps its bytes): every topic applies and reports
patched or upstream's, the revert takes each one back, and then every file of
torch's RECORD has its recorded sha256 again (importlib.metadata reads the
RECORD). test/tools tests the same steps on small installs; this is the real
one, with the release's own RECORD.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply.sh"
RECORD_MISMATCHES = """
import base64, hashlib, importlib.metadata as m
for f in m.distribution("torch").files:
    if f.hash is None:
        continue
    digest = hashlib.new(f.hash.mode, f.locate().read_bytes()).digest()
    if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
        print(f)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True)


class RealInstallRoundTripTest(unittest.TestCase):
    def setUp(self) -> None:
        venv = Path(sys.prefix)
        scratch = Path(tempfile.mkdtemp(prefix=f"{venv.name}-round-trip-", dir=venv.parent))
        self.addCleanup(shutil.rmtree, scratch)
        self.copy = scratch / "venv"
        subprocess.run(["cp", "-al", str(venv), str(self.copy)], check=True)
        self.python = str(self.copy / "bin" / "python")

    def record_mismatches(self, python: str) -> list[str]:
        return run(python, "-c", RECORD_MISMATCHES).stdout.split()

    def test_apply_status_revert_restores_every_file_to_record(self) -> None:
        applied = run(str(APPLY), "--python", self.python, "--topic", "all")
        self.assertEqual(applied.returncode, 0, applied.stdout + applied.stderr)
        status = run(str(APPLY), "--python", self.python, "--status")
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
        self.assertNotIn("pristine:", status.stdout)
        self.assertNotEqual(self.record_mismatches(self.python), [])  # the series changed files

        reverted = run(str(APPLY), "--python", self.python, "--revert", "--topic", "all")
        self.assertEqual(reverted.returncode, 0, reverted.stdout + reverted.stderr)
        self.assertEqual(self.record_mismatches(self.python), [])
        self.assertEqual(self.record_mismatches(sys.executable), [])  # this venv kept its bytes


if __name__ == "__main__":
    unittest.main()
