"""The I/O primitives: the fault hook, an atomic file write by path, the
refusal of symbolic links, bounded reads of regular files, a per-directory
lock and the cache's trust. Writes into an install go through dirfd.py,
relative to directories opened once.

Teams run this as root over installs and index directories that other users
can write to, so no write follows a name someone else could have planted:
temporary files are created exclusively under random names (mkstemp), their
mode and owner are set on the open file, the rename puts them in place, and
a target, a state directory or a directory on the way that is a symbolic
link is refused before anything is written.

Every step that writes, renames or deletes calls `fault_point()` first, so that the
tests can stop a run at any of them: _PREGRAD_TEST_FAULT=kill:N exits hard
at step N (as a SIGKILL would), enospc:N raises "No space left on device"
there, stop:N stops the process (SIGSTOP) until the test, which meanwhile
swaps a directory, continues it. Unset, `fault_point()` only counts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, List, Optional, Tuple

from torch_backport.infra.errors import Refused


CACHE_ENV = "PREGRAD_CACHE"
# The largest file read whole from an install, a state directory or an index
# directory: torch's largest source a series touches is about 100 KB.
FILE_CAP = 64 * 1024 * 1024
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
            os._exit(128 + signal.SIGKILL)  # as a shell reports kill -9
        if kind == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(what))
        if kind == "stop":  # the test swaps a directory, then sends SIGCONT
            os.kill(os.getpid(), signal.SIGSTOP)


def owner_of(found: os.stat_result) -> Optional[Tuple[int, int]]:
    """Root writing into another user's install: `found`'s owner, for what
    root creates beside it, so that the owner can still revert; None for
    any other caller (nothing to change)."""
    return (found.st_uid, found.st_gid) if os.geteuid() == 0 else None


def owner_to_give(reference: Path) -> Optional[Tuple[int, int]]:
    """owner_of `reference` itself (never what it links to)."""
    return owner_of(reference.lstat()) if os.geteuid() == 0 else None


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


class NotARegularFile(Refused):
    """A FIFO, device, socket or directory where a file is to be read."""


def kind_of(mode: int) -> str:
    """What an lstat mode is, in the words of a message."""
    for test, kind in ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "regular file" if stat.S_ISREG(mode) else "special file"


@contextlib.contextmanager
def open_regular(path: Path, cap: int = FILE_CAP, dir_fd: Optional[int] = None,
                 shown: Optional[Path] = None, head: bool = False) -> Iterator[BinaryIO]:
    """`path` (relative to `dir_fd` if given; `shown` in messages) opened for
    reading where it is a regular file itself, at most `cap` bytes (any size
    with `head`, of which only the first `cap` are read): never through a
    link (O_NOFOLLOW), never blocking on a FIFO (O_NONBLOCK), its type and
    size checked on the open file (fstat), so a name swapped after a check
    cannot hand over something else."""
    shown = shown or path
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
    except OSError as problem:
        if problem.errno == errno.ELOOP:
            raise LinkRefused(f"{shown} is a symbolic link where this project expects a "
                              "file; refused, nothing was written. Remove the link") from None
        raise
    stream = os.fdopen(handle, "rb")
    with stream:
        found = os.fstat(handle)
        if not stat.S_ISREG(found.st_mode):
            raise NotARegularFile(f"{shown} is a {kind_of(found.st_mode)} where this project "
                                  "reads a file; refused, nothing was written. Remove it")
        if found.st_size > cap and not head:
            raise Refused(f"{shown} is {found.st_size} bytes, more than the {cap} this "
                          "project reads of such a file; refused, nothing was written")
        yield stream


def read_regular(path: Path, cap: int = FILE_CAP, dir_fd: Optional[int] = None,
                 shown: Optional[Path] = None, head: bool = False) -> bytes:
    """The bytes of `path` (see open_regular), read up to `cap`: a file that
    grows while it is read is cut there and refused (with `head`, its
    first `cap` bytes)."""
    shown = shown or path
    with open_regular(path, cap, dir_fd, shown, head) as stream:
        return read_capped(stream, shown, cap, head)


def read_capped(stream: BinaryIO, shown: Path, cap: int, head: bool = False) -> bytes:
    """What `stream` holds, up to `cap` bytes: more is refused (with `head`,
    cut there)."""
    data = stream.read(cap if head else cap + 1)
    if len(data) > cap:
        raise Refused(f"{shown} grew past {cap} bytes while it was read; refused, nothing "
                      "was written")
    return data


def make_dirs(path: Path, below: Path, mode: int) -> None:
    """`path` and each missing directory from `below` (which exists) down to
    it, each made with `mode` whatever the umask; a link or non-directory on
    the way is refused."""
    refuse_links_below(below, path)
    at = below
    for part in path.relative_to(below).parts:
        at = at / part
        try:
            os.mkdir(at, mode)
        except FileExistsError:
            if not stat.S_ISDIR(at.lstat().st_mode):
                raise Refused(f"{at} is a {kind_of(at.lstat().st_mode)} where this project "
                              "makes a directory; refused. Remove it") from None
            continue
        handle = os.open(at, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(handle, mode)
        finally:
            os.close(handle)


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


def fill(handle: int, data: bytes, mode: int, owner: Optional[Tuple[int, int]]) -> None:
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
        fill(handle, data, mode, owner)
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


# The parts of the cache that hold what is executed or read as the caller:
# PyPA's venvs (tools/pypa-pyX.Y) and the downloaded release wheels.
CACHE_SUBTREES = ("tools", "wheels")


def _open_to_others(found: os.stat_result) -> bool:
    """Whether a user other than the owner may change what a directory
    holds: group or other write, unless the sticky bit keeps each entry its
    owner's (/tmp)."""
    return bool(found.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) and not (
        found.st_mode & stat.S_ISVTX)


def untrusted_cache_part(cache: Path) -> Optional[str]:
    """Why another user could change what `cache` holds, naming where; None
    if no one but the caller (and root, above it) can. As pip does with its
    cache: the cache and what it holds must be the caller's, and no
    directory above it may let another user swap it."""
    me = os.geteuid()
    chains = {cache.absolute(), cache.resolve()}
    for chain in chains:
        for above in reversed(chain.parents):
            try:
                found = above.lstat()
            except FileNotFoundError:
                break
            if stat.S_ISLNK(found.st_mode):
                continue  # its own directory is checked; resolve() gives the other chain
            if found.st_uid not in (0, me) or _open_to_others(found):
                return (f"{above}, a directory above it, is owned by uid {found.st_uid} with "
                        f"mode {stat.filemode(found.st_mode)}")
    if not cache.exists():
        return None
    top = cache.resolve()
    return (foreign_entry([top, *top.iterdir()], (me,), f"uid {me}")
            or next(filter(None, (foreign_entry(walked(top / part), (me,), f"uid {me}")
                                  for part in CACHE_SUBTREES if (top / part).is_dir())), None))


def walked(top: Path) -> Iterator[Path]:
    """`top` and everything below it, never through a link."""
    for directory, folders, files in os.walk(top):
        yield from (Path(directory) / name for name in ["", *folders, *files])


def foreign_entry(entries: Iterable[Path], owners: Tuple[int, ...], whom: str,
                  files_only: bool = False) -> Optional[str]:
    """The first of `entries` another user could have put there or could
    change, and why: owned by a uid not in `owners` (`whom` says who may
    own them), or a directory others may write to; with `files_only`, also
    an entry neither a directory nor a regular file. None if there is none."""
    for entry in entries:
        found = entry.lstat()
        if files_only and not (stat.S_ISDIR(found.st_mode) or stat.S_ISREG(found.st_mode)):
            return f"{entry} is a {kind_of(found.st_mode)}"
        if found.st_uid not in owners:
            return f"{entry} is owned by uid {found.st_uid}, not by {whom}"
        if stat.S_ISDIR(found.st_mode) and found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (f"{entry} is a directory others may write to (mode "
                    f"{stat.filemode(found.st_mode)})")
    return None


def refuse_untrusted_cache(cache: Path) -> None:
    """Refused if another user could have put what `cache` holds there
    (untrusted_cache_part): a program or wheel from it would run or be read
    as the caller."""
    why = untrusted_cache_part(cache)
    if why is not None:
        raise Refused(f"the cache {cache} cannot be trusted: {why}. What it holds would run "
                      f"or be read as uid {os.geteuid()}; refused, nothing was read from it "
                      f"or written. Use a cache of your own ({CACHE_ENV}=DIR), or give this "
                      "one to this user (chown -R, chmod go-w)")


def trusted_cache(cache: Path) -> Path:
    """`cache` (absolute), checked (refuse_untrusted_cache) and made if
    missing: mode 0700 whatever the umask, as each missing directory above it."""
    cache = cache.absolute()
    refuse_untrusted_cache(cache)
    if not cache.exists():
        missing = [cache, *(above for above in cache.parents if not above.exists())]
        make_dirs(cache, missing[-1].parent, 0o700)
    return cache
