"""apply, --status and --revert on this release's real install.

Run on a stock build (scripts/test.sh, both tiers). The install is a
hard-linked copy of this venv beside it (apply.sh replaces files by atomic
rename, so this venv keeps its bytes): every topic applies and reports
patched or upstream's, the revert takes each one back, and then every file of
torch's RECORD has its recorded sha256 again (importlib.metadata reads the
RECORD). test/tools tests the same steps on small installs; this is the real
one, with the release's own RECORD.

A file of the copy that is still the same inode as this venv's holds this
venv's bytes, so it is not hashed twice: this venv's own files are all
hashed against the RECORD, last, and the copy's other files (those the tool
replaced) are hashed each time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply.sh"
# Prints each file of torch's RECORD whose bytes are not the recorded ones
# (a missing one too), skipping a file that is the same inode as its
# counterpart under sys.argv[1], if given.
RECORD_MISMATCHES = """
import base64, hashlib, importlib.metadata as m, os, sys
reference = sys.argv[1] if len(sys.argv) > 1 else None
dist = m.distribution("torch")
for f in dist.files:
    if f.hash is None:
        continue
    path = f.locate()
    try:
        found = os.stat(path)
        if reference is not None:
            other = os.stat(os.path.join(reference, f))
            if (found.st_dev, found.st_ino) == (other.st_dev, other.st_ino):
                continue
        data = open(path, "rb").read()
    except OSError:
        print(f)
        continue
    digest = hashlib.new(f.hash.mode, data).digest()
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
        self.site = sysconfig.get_paths()["purelib"]  # this venv's: the copy's counterpart

    def record_mismatches(self, python: str, reference: str | None = None) -> list[str]:
        """The RECORD's files that do not have their recorded bytes; with
        `reference` (a site-packages), a file that is the same inode as its
        counterpart there is taken as that one's bytes."""
        found = run(python, "-c", RECORD_MISMATCHES, *([reference] if reference else []))
        self.assertEqual(found.returncode, 0, found.stderr)
        return found.stdout.split()

    def test_apply_status_revert_restores_every_file_to_record(self) -> None:
        applied = run(str(APPLY), "--python", self.python, "--topic", "all")
        self.assertEqual(applied.returncode, 0, applied.stdout + applied.stderr)
        status = run(str(APPLY), "--python", self.python, "--status")
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
        self.assertNotIn("pristine:", status.stdout)
        # The series changed files.
        self.assertNotEqual(self.record_mismatches(self.python, self.site), [])

        reverted = run(str(APPLY), "--python", self.python, "--revert", "--topic", "all")
        self.assertEqual(reverted.returncode, 0, reverted.stdout + reverted.stderr)
        self.assertEqual(self.record_mismatches(self.python, self.site), [])
        # This venv kept its bytes, and so did every file the copy still shares with it.
        self.assertEqual(self.record_mismatches(sys.executable), [])


if __name__ == "__main__":
    unittest.main()
