"""Another user on this machine, for the attacks root must withstand:
`nobody` (uid 65534) runs commands through setpriv, and owns what it is
given."""

from __future__ import annotations

import os
import shutil
import subprocess
import unittest
from pathlib import Path
from typing import TypeVar

NOBODY = 65534
DEADLINE = 120  # seconds for one of nobody's commands

Case = TypeVar("Case", bound=type)


def as_nobody(*command: str) -> None:
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                    *command], check=True, timeout=DEADLINE)


def give_to_nobody(path: Path) -> None:
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(path)], check=True)


def needs_root_and_setpriv(cls: Case) -> Case:
    """Skip `cls` unless this is root with setpriv and /usr/bin/python3
    (nobody's venvs are made from it: this interpreter may sit in root's home)."""
    return unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv")
                               and Path("/usr/bin/python3").exists(),
                               "needs root, setpriv (util-linux) and /usr/bin/python3")(cls)
