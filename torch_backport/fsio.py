"""The I/O primitives every mode writes through: the fault hook, an atomic
file write and a per-directory lock.

Every step that writes, renames or deletes calls `step()` first, so that the
tests can stop a run at any of them: _PREGRAD_TEST_FAULT=kill:N exits hard
at step N (as a SIGKILL would), enospc:N raises "No space left on device"
there. Unset, `step()` only counts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
from pathlib import Path
from typing import Iterator

CACHE_ENV = "PREGRAD_CACHE"
FAULT_ENV = "_PREGRAD_TEST_FAULT"
_steps_taken = 0


def step(what: object) -> None:
    global _steps_taken
    spec = os.environ.get(FAULT_ENV, "")
    kind, _, at = spec.partition(":")
    this_step, _steps_taken = _steps_taken, _steps_taken + 1
    if spec and this_step == int(at):  # one fault per run
        if kind == "kill":
            os._exit(137)
        if kind == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(what))


def atomic_write(target: Path, data: bytes, mode: int) -> None:
    """Write `data` to `target` so that a reader sees the old or the new
    bytes, never part: a fsynced temporary file beside it, then a rename."""
    tmp = target.with_name(f".{target.name}.pregrad-tmp")
    step(tmp)
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)
    step(target)
    os.replace(tmp, target)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One apply or revert at a time per directory: an flock on it."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another apply.sh run on {directory} ...",
                  file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def cache_dir() -> Path:
    """Where downloaded wheels (and the test venvs) live: $PREGRAD_CACHE, by
    default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pregrad-backport"
