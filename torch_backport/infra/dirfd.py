"""Directories opened once and acted in by descriptor, so that a directory
swapped for a link after it was checked cannot redirect a write.

Root writes into installs other users own. A check by path ("is this a
link?") and a write by path are two lookups, and the owner can rename a
directory and put a link in its place between them. Here each directory is
opened with O_DIRECTORY|O_NOFOLLOW, from the top the caller trusts (the
site-packages directory) down, one component at a time, and every create,
read, link, rename, stat and unlink names only an entry of an open
directory (`dir_fd=`): a name swapped after the open no longer matters, and
a link or a file of the wrong type met on the way is refused by name. This
is what systemd's `chase()` does with `openat(O_PATH|O_NOFOLLOW)` per
component, and the fix of Rust's `remove_dir_all` for CVE-2022-21658
(`unlinkat` relative to a directory opened without following links);
`shutil.rmtree(dir_fd=)` (Python 3.11+; remove_tree_at walks the same way
before) is the standard library's version of the latter.

Every write, rename and removal takes a fault step (fsio.fault_point)
first, as fsio's path-based primitives do."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import sys
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Tuple

from torch_backport.infra.errors import Refused
from torch_backport.infra.fsio import (FILE_CAP, fault_point, fill, is_our_temp, kind_of,
                                       LinkRefused, open_regular, read_capped,
                                       TEMP_SUFFIX)

OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _refusal(path: Path, problem: OSError, expected: str) -> Refused:
    """What opening `path` as a `expected` without following a link failed on."""
    try:
        found = kind_of(os.lstat(path).st_mode)
    except OSError:
        found = "missing entry"
    if problem.errno in (errno.ELOOP, errno.ENOTDIR) or found == "symbolic link":
        if found == "symbolic link":
            return LinkRefused(f"{path} is a symbolic link where this project expects a "
                               f"{expected}; refused, nothing was written. Remove the link")
        return Refused(f"{path} is a {found} where this project expects a {expected}; "
                       "refused, nothing was written. Remove it")
    raise problem


class Dir:
    """An open directory; `path` is where it was when opened, for messages."""

    def __init__(self, handle: int, path: Path) -> None:
        self.fd = handle
        self.path = path

    @classmethod
    def open(cls, path: Path) -> "Dir":
        """The directory `path` itself: its last component may not be a link
        (those above it are the caller's to trust)."""
        try:
            return cls(os.open(path, OPEN_DIRECTORY), path)
        except OSError as problem:
            raise _refusal(path, problem, "directory") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Dir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Directories below this one.

    def sub(self, name: str) -> "Dir":
        """The directory `name` in this one, never through a link."""
        try:
            return Dir(os.open(name, OPEN_DIRECTORY, dir_fd=self.fd), self.path / name)
        except OSError as problem:
            raise _refusal(self.path / name, problem, "directory") from None

    def walk(self, parts: Iterable[str], make_mode: Optional[int] = None,
             owner: Optional[Tuple[int, int]] = None) -> "Dir":
        """The directory at `parts` below this one, opened component by
        component; with `make_mode`, each missing one is made with that mode
        (whatever the umask) and `owner`. The caller closes what it gets."""
        at = self
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise Refused(f"{at.path / part}: not a plain name; refused")
            if make_mode is not None and at.lstat(part) is None:
                at.mkdir(part, make_mode, owner)
            below = at.sub(part)
            if at is not self:
                at.close()
            at = below
        return at if at is not self else Dir(os.dup(self.fd), self.path)

    def mkdir(self, name: str, mode: int, owner: Optional[Tuple[int, int]] = None) -> None:
        """`name`, a new directory, with `mode` whatever the umask, and
        `owner`, both set on the open directory."""
        fault_point(self.path / name)
        os.mkdir(name, mode, dir_fd=self.fd)
        with self.sub(name) as made:
            os.fchmod(made.fd, mode)
            if owner is not None:
                os.fchown(made.fd, *owner)

    def remove_tree_if_there(self, name: str) -> None:
        if self.lstat(name) is not None:
            self.remove_tree(name)

    # Entries.

    def lstat(self, name: str) -> Optional[os.stat_result]:
        """`name`'s own status (a link's, not its target's); None if missing."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def names(self) -> List[str]:
        with os.scandir(self.fd) as entries:
            return sorted(entry.name for entry in entries)

    def read(self, name: str, cap: int = FILE_CAP,
             head: bool = False) -> Tuple[bytes, os.stat_result]:
        """The bytes of the regular file `name` (fsio.open_regular: not a
        link, FIFO or device, at most `cap` bytes, or its first `cap` bytes
        with `head`) and its status, from one descriptor."""
        try:
            with open_regular(Path(name), cap, self.fd, self.path / name, head) as stream:
                return read_capped(stream, self.path / name, cap, head), os.fstat(
                    stream.fileno())
        except FileNotFoundError as problem:
            raise _refusal(self.path / name, problem, "file") from None

    def is_regular(self, name: str) -> bool:
        found = self.lstat(name)
        return found is not None and stat.S_ISREG(found.st_mode)

    # Writes: a new file under a name no one could have planted, then renames.

    def new_file(self, name: str, data: bytes, mode: int,
                 owner: Optional[Tuple[int, int]] = None) -> None:
        """`name`, which must not exist, created exclusively (O_EXCL: no link
        is followed) and filled: fsynced, its mode and owner set on the open
        file, never by path."""
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, mode, dir_fd=self.fd)
        try:
            fill(handle, data, mode, owner)
        except BaseException:
            os.close(handle)
            os.unlink(name, dir_fd=self.fd)
            raise
        os.close(handle)

    def temp_name(self, target: str) -> str:
        return f".{target}.{secrets.token_hex(8)}{TEMP_SUFFIX}"

    def write_temp(self, target: str, data: bytes, mode: int,
                   owner: Optional[Tuple[int, int]] = None) -> str:
        """`data` in a new temporary file beside `target`; its name."""
        fault_point(self.path / target)
        for _ in range(100):
            name = self.temp_name(target)
            try:
                self.new_file(name, data, mode, owner)
            except FileExistsError:
                continue
            return name
        raise OSError(errno.EEXIST, "no free temporary name", str(self.path / target))

    def link_temp(self, source: "Dir", source_name: str, target: str, mode: int) -> str:
        """`source_name`'s file (a regular file, checked on the link made)
        under a new temporary name beside `target`: a hard link where it can
        be made (no space used), else a copy."""
        fault_point(self.path / target)
        data, expected = source.read(source_name)
        for _ in range(100):
            name = self.temp_name(target)
            try:
                os.link(source_name, name, src_dir_fd=source.fd, dst_dir_fd=self.fd,
                        follow_symlinks=False)
            except FileExistsError:
                continue
            except OSError:  # another file system, or linking refused: a copy
                return self.write_temp(target, data, mode)
            linked = self.lstat(name)
            if linked is None or (linked.st_dev, linked.st_ino) != (expected.st_dev,
                                                                    expected.st_ino):
                os.unlink(name, dir_fd=self.fd)  # swapped between the read and the link
                raise Refused(f"{source.path / source_name} changed while it was linked; "
                              "refused")
            handle = os.open(name, OPEN_FILE, dir_fd=self.fd)
            try:
                os.fchmod(handle, mode)
            finally:
                os.close(handle)
            return name
        raise OSError(errno.EEXIST, "no free temporary name", str(self.path / target))

    def replace(self, name: str, target: str, into: Optional["Dir"] = None) -> None:
        """Rename `name` over `target` (in `into`, by default this directory)."""
        into = into or self
        fault_point(into.path / target)
        os.replace(name, target, src_dir_fd=self.fd, dst_dir_fd=into.fd)

    def atomic_write(self, target: str, data: bytes, mode: int,
                     owner: Optional[Tuple[int, int]] = None) -> None:
        name = self.write_temp(target, data, mode, owner)
        try:
            self.replace(name, target)
        except BaseException:
            os.unlink(name, dir_fd=self.fd)
            raise

    def unlink(self, name: str) -> None:
        fault_point(self.path / name)
        os.unlink(name, dir_fd=self.fd)

    def remove_tree(self, name: str) -> None:
        """`name` and all it holds, by descriptor all the way down (never
        following a link): remove_tree_at."""
        fault_point(self.path / name)
        remove_tree_at(self.fd, name)

    def leftover_temps(self, target: str) -> Iterator[str]:
        """The temporary files a killed run left beside `target`."""
        for name in self.names():
            found = self.lstat(name)
            if is_our_temp(name, target) and found is not None and not stat.S_ISDIR(
                    found.st_mode):
                yield name


def remove_tree_at(dir_fd: int, name: str) -> None:
    """`shutil.rmtree(name, dir_fd=dir_fd)`, which Python 3.11 added;
    walk_and_remove where the target interpreter is older (3.9, 3.10)."""
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        walk_and_remove(dir_fd, name)


def walk_and_remove(dir_fd: int, name: str) -> None:
    """rmtree's walk by descriptor: each directory opened without following
    a link, each entry removed relative to it, the directory last."""
    fd = os.open(name, OPEN_DIRECTORY, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as listed:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listed]
        for entry_name, is_directory in entries:
            if is_directory:
                walk_and_remove(fd, entry_name)
            else:
                os.unlink(entry_name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def parent_and_name(site: Dir, rel: str, make_mode: Optional[int] = None) -> Tuple[Dir, str]:
    """The open directory of `rel` (a path below `site`) and its last name."""
    parts = Path(rel).parts
    return site.walk(parts[:-1], make_mode), parts[-1]
