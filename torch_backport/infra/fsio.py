"""The I/O primitives every mode writes through: the fault hook, an atomic
file write, the refusal of symbolic links, and a per-directory lock.

Teams run this as root over installs and index directories that other users
can write to, so no write follows a name someone else could have planted:
temporary files are created exclusively under random names (mkstemp), their
mode and owner are set on the open file, the rename puts them in place, and
a target, a state directory or a directory on the way that is a symbolic
link is refused before anything is written.

Every step that writes, renames or deletes calls `fault_point()` first, so that the
tests can stop a run at any of them: _PREGRAD_TEST_FAULT=kill:N exits hard
at step N (as a SIGKILL would), enospc:N raises "No space left on device"
there. Unset, `fault_point()` only counts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from torch_backport.infra.errors import Refused


CACHE_ENV = "PREGRAD_CACHE"
# Every temporary file is `.<target name>.<random>.pregrad-tmp` beside its
# target, made exclusively: a name planted in advance is never written through.
TEMP_SUFFIX = ".pregrad-tmp"
FAULT_ENV = "_PREGRAD_TEST_FAULT"
_steps_taken = 0


def fault_point(what: object) -> None:
    """A point where a test may kill the run or fill the disk (FAULT_ENV),
    just before `what` is written, renamed or removed."""
    global _steps_taken
    spec = os.environ.get(FAULT_ENV, "")
    kind, _, at = spec.partition(":")
    this_step, _steps_taken = _steps_taken, _steps_taken + 1
    if spec and this_step == int(at):  # one fault per run
        if kind == "kill":
            os._exit(137)
        if kind == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(what))


def owner_to_give(reference: Path) -> Optional[Tuple[int, int]]:
    """Root writing into another user's install: the owner of `reference`,
    so that the owner can still revert; None where nothing is to change."""
    if os.geteuid() != 0:
        return None
    wanted = reference.lstat()
    return wanted.st_uid, wanted.st_gid


def own_like(path: Path, reference: Path) -> None:
    """Give `path` (never what it links to) the owner of `reference`. A file
    with other hard links (shared with another install or a cache) is left
    as it is."""
    owner = owner_to_give(reference)
    if owner is None:
        return
    found = path.lstat()
    if (found.st_uid, found.st_gid) == owner:
        return
    if not stat.S_ISDIR(found.st_mode) and found.st_nlink > 1:
        return
    os.chown(path, *owner, follow_symlinks=False)


class LinkRefused(Refused):
    """A symbolic link where the project expects a file or a directory."""


def refuse_link(path: Path, kind: str = "file") -> None:
    """Refuse `path` if it is a symbolic link: nothing is ever written through one."""
    if path.is_symlink():
        raise LinkRefused(f"{path} is a symbolic link where this project expects a {kind} "
                          f"(to {os.readlink(path)}); refused, nothing was written. Remove "
                          "the link, or name another directory")


def refuse_links_below(root: Path, path: Path) -> None:
    """Refuse if `path` or any directory from `root` (trusted as given) down
    to it is a symbolic link."""
    if ".." in path.parts or not path.is_relative_to(root):
        raise Refused(f"{path} is not inside {root}; refused, nothing was written")
    relative = path.relative_to(root)
    at = root
    for index, part in enumerate(relative.parts):
        at = at / part
        refuse_link(at, "file" if index == len(relative.parts) - 1 and not at.is_dir()
                    else "directory")


def is_our_temp(name: str, target_name: str) -> bool:
    """A temporary file this project left beside `target_name` (the earlier
    fixed name included)."""
    return name.startswith(f".{target_name}.") and name.endswith(TEMP_SUFFIX)


def leftover_temps(target: Path) -> List[Path]:
    """The temporary files a killed run left beside `target`."""
    if not target.parent.is_dir():
        return []
    return sorted(target.parent / entry.name for entry in os.scandir(target.parent)
                  if is_our_temp(entry.name, target.name)
                  and not entry.is_dir(follow_symlinks=False))


def _new_file(directory: Path, prefix: str) -> Tuple[int, Path]:
    """An empty file of ours in `directory` that no one could have named:
    mkstemp creates it exclusively (O_EXCL, so no link is followed), mode 0600."""
    refuse_link(directory, "directory")
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=directory)
    return handle, Path(name)


def _fill(handle: int, data: bytes, mode: int, owner: Optional[Tuple[int, int]]) -> None:
    """Write, fsync, then set mode and owner on the open file, not by path."""
    with os.fdopen(handle, "wb", closefd=False) as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    os.fchmod(handle, mode)
    if owner is not None:
        os.fchown(handle, *owner)


def _new_temp(target: Path, data: bytes, mode: int, owner: Optional[Tuple[int, int]]) -> Path:
    """`data`, fsynced, in a new temporary file of ours beside `target`."""
    handle, tmp = _new_file(target.parent, f".{target.name}.")
    try:
        _fill(handle, data, mode, owner)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        os.close(handle)
    return tmp


def write_temp(target: Path, data: bytes, mode: int) -> Path:
    """`data`, fsynced, in a new temporary file beside `target`; its path.
    A `target` that is a symbolic link is refused."""
    refuse_link(target)
    fault_point(target)
    return _new_temp(target, data, mode,
                     owner_to_give(target if target.exists() else target.parent))


def atomic_write(target: Path, data: bytes, mode: int) -> None:
    """Write `data` to `target` so that a reader sees the old or the new
    bytes, never part: a fsynced temporary file beside it, then a rename."""
    tmp = write_temp(target, data, mode)
    fault_point(target)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def write_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """A file that must not exist yet, in a directory of ours: created with
    O_EXCL|O_NOFOLLOW, so nothing planted there is written through."""
    fault_point(path)
    _write_exclusive(path, data, mode)


def _write_exclusive(path: Path, data: bytes, mode: int) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        _fill(handle, data, mode, None)
    finally:
        os.close(handle)


def link_temp(source: Path, target: Path, mode: int) -> Path:
    """`source`'s file under a new temporary name beside `target`, by hard
    link where it can (no space used: files this project keeps are only ever
    replaced by rename), else a copy; its mode set on the open file."""
    refuse_link(target)
    refuse_link(target.parent, "directory")
    fault_point(target)
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
        try:
            os.link(source, tmp, follow_symlinks=False)  # never replaces or follows tmp
        except FileExistsError:
            continue
        except OSError:  # another file system: a copy
            return _new_temp(target, source.read_bytes(), mode, owner_to_give(source))
        handle = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fchmod(handle, mode)
        finally:
            os.close(handle)
        return tmp
    raise OSError(errno.EEXIST, "no free temporary name", str(target))


def link_or_copy(source: Path, destination: Path) -> None:
    """`destination`, a new name in a directory of ours, for `source`'s file:
    a hard link where it can be made, else a copy (created exclusively)."""
    fault_point(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, destination, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        _write_exclusive(destination, source.read_bytes(), source.stat().st_mode & 0o7777)
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
