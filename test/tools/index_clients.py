"""The venv of the index and packaging clients the tool tests run
(requirements/index-clients.txt: a current pip, poetry and PyPA's build),
made once under $PREGRAD_CACHE/tools/, not in every test venv."""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
from pathlib import Path

from fake_install import REPO
from prerequisites import missing
from torch_backport.infra.fsio import cache_dir

CLIENTS = REPO / "requirements" / "index-clients.txt"


def clients_python() -> Path:
    """The python of a venv with requirements/index-clients.txt, made once
    under $PREGRAD_CACHE/tools/ (one maker at a time)."""
    wanted = hashlib.sha256(CLIENTS.read_bytes()).hexdigest()
    tools = cache_dir() / "tools"
    venv = tools / "index-clients"
    ready = venv / ".pregrad-ready"
    tools.mkdir(parents=True, exist_ok=True)
    with open(tools / "index-clients.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (ready.is_file() and ready.read_text() == wanted):
            for command in ([sys.executable, "-m", "venv", "--clear", str(venv)],
                            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                             "--disable-pip-version-check", "-r", str(CLIENTS)]):
                made = subprocess.run(command, capture_output=True, text=True)
                if made.returncode != 0:
                    missing(f"needs pip's index: could not make {venv}: {' '.join(command)}: "
                            f"{made.stdout}{made.stderr}")
            ready.write_text(wanted)
    return venv / "bin" / "python"
