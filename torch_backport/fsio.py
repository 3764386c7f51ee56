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
import shutil
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


def own_like(path: Path, reference: Path) -> None:
    """Root writing into another user's install: give `path` the owner of
    `reference`, so that the owner can still revert. A file with other
    hard links (shared with another install or a cache) is left as it is."""
    if os.geteuid() != 0:
        return
    wanted = reference.stat()
    found = path.lstat()
    if (found.st_uid, found.st_gid) == (wanted.st_uid, wanted.st_gid):
        return
    if not path.is_dir() and found.st_nlink > 1:
        return
    os.chown(path, wanted.st_uid, wanted.st_gid, follow_symlinks=False)


def temp_path(target: Path) -> Path:
    """Where `target`'s next bytes wait before the rename that puts them in place."""
    return target.with_name(f".{target.name}.pregrad-tmp")


def write_temp(target: Path, data: bytes, mode: int) -> Path:
    """`data`, fsynced, in `target`'s temporary file; its path."""
    tmp = temp_path(target)
    step(tmp)
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)
    own_like(tmp, target if target.exists() else target.parent)
    return tmp


def atomic_write(target: Path, data: bytes, mode: int) -> None:
    """Write `data` to `target` so that a reader sees the old or the new
    bytes, never part: a fsynced temporary file beside it, then a rename."""
    tmp = write_temp(target, data, mode)
    step(target)
    os.replace(tmp, target)


def link_or_copy(source: Path, destination: Path) -> None:
    """`destination` as another name of `source`'s file (no space used; the
    files this project keeps are only ever replaced by rename, never written
    in place), or a copy where a link cannot be made."""
    step(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    if destination.exists():
        destination.unlink()
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)
        own_like(destination, source)


def free_kb(path: Path) -> int:
    found = os.statvfs(path)
    return found.f_bavail * found.f_frsize // 1024


@contextlib.contextmanager
def locked(directory: Path, shared: bool = False) -> Iterator[None]:
    """One apply or revert at a time per directory: an flock on it. A reader
    (--status, `shared`) waits for a writer and lets other readers in, so
    it never sees a run half-way."""
    handle = os.open(directory, os.O_RDONLY)
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        try:
            fcntl.flock(handle, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another apply.sh run on {directory} ...",
                  file=sys.stderr, flush=True)
            fcntl.flock(handle, kind)
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
