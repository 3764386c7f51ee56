"""The wall time each matrix job took in the last run that ran it, kept in
the cache (<cache>/matrix-durations.json) so that the next run starts the
longest first and `--list` says what to expect. A job never timed has no
entry: the scheduler starts it first (it may be the longest)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, Mapping, Optional

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from torch_backport.infra.fsio import cache_dir  # noqa: E402  (the one cache path)

FILE_NAME = "matrix-durations.json"


def durations_file() -> Path:
    return cache_dir() / FILE_NAME


def load(path: Optional[Path] = None) -> Dict[str, float]:
    """Job name -> seconds; empty where there is no file or it is unreadable
    (the order is then the order queued: nothing is lost but time)."""
    try:
        found = json.loads((path or durations_file()).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(name): float(seconds) for name, seconds in found.items()
            if isinstance(seconds, (int, float))}


def save(measured: Mapping[str, float], path: Optional[Path] = None) -> None:
    """The jobs of this run replace their earlier figures; the others stay.
    Written by rename: a reader sees the old file or the new one."""
    target = path or durations_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    merged = {**load(target), **{name: round(seconds, 1) for name, seconds in measured.items()}}
    handle, partial = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(dict(sorted(merged.items())), out, indent=1)
            out.write("\n")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
