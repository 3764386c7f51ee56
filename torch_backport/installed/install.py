"""An installed torch wheel as every mode reads it: the install, its RECORD
(record.py, through `importlib.metadata`), and this project's state
directory beside it and its layout.

<site>/.torch-pregrad-backport[-<topic>]/ holds manifest.json (what was
applied, to which torch, and each file's RECORD digest before and after) and
orig/<path> (the wheel's bytes of each patched file). It is written in a
staging directory and renamed into place, and removed by a rename to a trash
directory (transaction.py): a killed run leaves one of those, never a state
directory without its manifest. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import py_compile
import stat
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Dict, Optional, Tuple

from torch_backport.infra import record
from torch_backport.infra.dirfd import Dir
from torch_backport.infra.fsio import foreign_entry, owner_of, read_regular, walked
from torch_backport.infra.errors import Refused
from torch_backport.infra.git import git_blob_id
from torch_backport.installed.records import Built, BUILT_NAME, BuiltTopic, Manifest
from torch_backport.patchset.series import primary_topic, Topic

STATE_DIRNAME = ".torch-pregrad-backport"
MANIFEST = "manifest.json"
BACKUPS = "orig"  # <state dir>/orig/<path>: the wheel's bytes of each patched file
APPLIED = "manifest.applied.json"  # the manifest once every file is in place


@dataclasses.dataclass
class Install:
    """An installed torch, seen through one topic: each topic keeps its own
    backups and manifest, so topics are applied and reverted independently."""
    dist: metadata.Distribution
    site: Path
    version: str
    record: Dict[str, str]  # path -> RECORD sha256 digest, for every hashed file
    topic: Topic
    built: Optional[Built] = None  # BUILT_NAME, if from a patched wheel

    @property
    def state_dir(self) -> Path:
        return self.site / f"{STATE_DIRNAME}{self.topic.unless_primary('-{name}')}"

    @property
    def manifest_path(self) -> Path:
        return self.state_dir / MANIFEST

    def backup(self, rel: str) -> Path:
        """Where the wheel's bytes of `rel` are kept while it is patched."""
        return self.state_dir / BACKUPS / rel

    def read_backup(self, rel: str) -> bytes:
        """The backup of `rel`, from a state directory no third user could
        have changed (refuse_untrusted_state)."""
        refuse_untrusted_state(self)
        return read_regular(self.backup(rel))

    @property
    def state_mode(self) -> int:
        """The mode of the state, staging and backup directories, whatever the
        umask: the install's own, never more open than 0755."""
        return (self.site.stat().st_mode & 0o755) | 0o700

    def trusted_owners(self) -> tuple[int, int]:
        """Who may own what the state directory holds: root and the install's owner."""
        return 0, self.site.stat().st_uid

    def leftover(self, kind: str) -> Path:
        """A staging or trash dir that only a killed run leaves behind."""
        return self.state_dir.with_name(f"{self.state_dir.name}.{kind}")

    def for_topic(self, topic: Topic) -> "Install":
        return dataclasses.replace(self, topic=topic)

    def built_by(self) -> str:
        return self.built.built_by if self.built else "torch-pregrad-backport"

    def built_topic(self) -> Optional[BuiltTopic]:
        """What the patched wheel this torch was installed from says of this
        topic; None if it was not, or does not carry the topic."""
        return self.built.topics.get(self.topic.name) if self.built else None

    def has_feature(self) -> bool:
        path = self.path(self.topic.feature_file)
        return (path.is_file() and not path.is_symlink()
                and self.topic.has_feature(read_regular(path)))

    def path(self, rel: str) -> Path:
        return self.site / rel

    def read(self, rel: str) -> bytes:
        return read_regular(self.path(rel))

    def blob(self, rel: str) -> Optional[str]:
        """The git blob id of an installed file; None if it is missing or a link."""
        path = self.path(rel)
        if path.is_symlink() or not path.is_file():
            return None
        return git_blob_id(read_regular(path))

    def matches_record(self, rel: str) -> bool:
        path = self.path(rel)
        return (not path.is_symlink() and path.is_file()
                and record.digest(read_regular(path)) == self.record.get(rel))


PYCACHE = "__pycache__"
PYC_HEADER = 16  # PEP 552: magic, flags, then a source hash or mtime and size


def pycache_of(source: Path) -> Path:
    return source.parent / PYCACHE


def pycache_is_a_directory(source: Path) -> bool:
    """Whether `source`'s __pycache__ is a real directory (not a link to one,
    not a file, FIFO or device): the only kind bytecode is read from or
    written into."""
    try:
        return stat.S_ISDIR(pycache_of(source).lstat().st_mode)
    except OSError:
        return False


def read_pyc_header(pyc: Path) -> Optional[bytes]:
    """The first 16 bytes of `pyc` where it is a regular file, the file
    itself (O_NOFOLLOW) and opened without blocking (a FIFO), else None."""
    try:
        handle = os.open(pyc, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        return os.read(handle, PYC_HEADER)
    finally:
        os.close(handle)


def refresh_bytecode(install: Install, rel: str, parent: Dir, name: str) -> None:
    """After `rel`'s source (`name` in the open directory `parent`) changed:
    the .pyc this interpreter loads is compiled again in the invalidation
    mode it had (an unchecked-hash .pyc would otherwise keep running the old
    code, as in reproducible images), and other interpreters' .pyc of it are
    removed. Bytecode is read and written only in a __pycache__ opened as a
    real directory below `parent` (a link there was refused before anything
    was written, refuse_links), by descriptor; an entry that is not a
    regular file is removed, never read or followed; what is written is a
    new file of root's, given the source's owner on the open file. Never
    raises: a .pyc it cannot write is removed, one it cannot remove
    --status reports."""
    mine = Path(importlib.util.cache_from_source(str(install.path(rel)))).name
    prefix = f"{Path(name).stem}."
    try:
        pycache = parent.sub(PYCACHE)
    except (Refused, OSError):
        return
    with pycache:
        for pyc in pycache.names():
            if not (pyc.startswith(prefix) and pyc.endswith(".pyc")):
                continue
            mode = mode_of(pycache_header(pycache, pyc)) if pyc == mine else None
            try:
                if mode is None:
                    pycache.unlink(pyc)
                else:
                    data, source = compiled(install, rel, parent, name, mode)
                    pycache.atomic_write(pyc, data, source.st_mode & 0o666, owner_of(source))
            except (OSError, py_compile.PyCompileError, Refused):
                try:
                    os.unlink(pyc, dir_fd=pycache.fd)
                except OSError:
                    pass


def pycache_header(pycache: Dir, pyc: str) -> Optional[bytes]:
    """The first 16 bytes of `pyc` where it is a regular file, else None."""
    try:
        return pycache.read(pyc, cap=PYC_HEADER, head=True)[0]
    except (Refused, OSError):
        return None


def compiled(install: Install, rel: str, parent: Dir, name: str,
             mode: py_compile.PycInvalidationMode) -> Tuple[bytes, os.stat_result]:
    """The bytecode Python would write for `name` (read from `parent` by
    descriptor), and the source's status. py_compile works by path, so it
    compiles a private copy with the source's bytes and times, under the
    installed path's name (`dfile`) for tracebacks."""
    source, found = parent.read(name)
    with tempfile.TemporaryDirectory(prefix="pregrad-bytecode-") as private:
        copy = Path(private) / name
        copy.write_bytes(source)
        os.utime(copy, ns=(found.st_atime_ns, found.st_mtime_ns))
        out = Path(private) / "compiled.pyc"
        py_compile.compile(str(copy), cfile=str(out), dfile=str(install.path(rel)),
                           doraise=True, invalidation_mode=mode)
        return out.read_bytes(), found


def invalidation_mode(pyc: Path) -> Optional[py_compile.PycInvalidationMode]:
    """How Python checks `pyc` against its source (PEP 552); None if it is
    not this interpreter's, or not a regular file."""
    return mode_of(read_pyc_header(pyc))


def mode_of(header: Optional[bytes]) -> Optional[py_compile.PycInvalidationMode]:
    if header is None or len(header) < PYC_HEADER or header[:4] != importlib.util.MAGIC_NUMBER:
        return None
    flags = int.from_bytes(header[4:8], "little")
    if not flags & 1:
        return py_compile.PycInvalidationMode.TIMESTAMP
    if flags & 2:
        return py_compile.PycInvalidationMode.CHECKED_HASH
    return py_compile.PycInvalidationMode.UNCHECKED_HASH


def stale_bytecode(install: Install, rel: str) -> Optional[str]:
    """Why Python would run other code than `rel` holds: an unchecked-hash
    .pyc of other source; None if it runs the file."""
    source = install.path(rel)
    pyc = Path(importlib.util.cache_from_source(str(source)))
    header = read_pyc_header(pyc) if pycache_is_a_directory(source) else None
    if header is None or mode_of(header) != py_compile.PycInvalidationMode.UNCHECKED_HASH:
        return None
    if not source.is_file() or source.is_symlink() or (
            header[8:16] == importlib.util.source_hash(read_regular(source))):
        return None
    return (f"{pyc.relative_to(install.site)} is an unchecked-hash .pyc of other source: "
            f"Python runs it, not {rel}")


def find_install(topic: Optional[Topic] = None) -> Install:
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        raise Refused(f"{sys.executable} has no torch installed") from None
    digests = record.of_dist(dist)
    if not digests:
        raise Refused(
            f"torch {dist.version}: its RECORD has no sha256 hashes, so pristine "
            "files cannot be told from modified ones"
        )
    site = Path(str(dist.locate_file(""))).resolve()
    built_text = dist.read_text(BUILT_NAME)
    try:
        built = Built.from_json(built_text) if built_text is not None else None
    except ValueError:
        raise Refused(f"torch {dist.version}: its dist-info has an unreadable "
                      f"{BUILT_NAME}") from None
    return Install(dist, site, dist.version, digests, topic or primary_topic(), built)


def read_manifest(install: Install) -> Optional[Manifest]:
    path = install.manifest_path
    if not path.is_file() or path.is_symlink():
        return None
    return Manifest.from_json(read_regular(path).decode("utf-8", "replace"))


def untrusted_state(install: Install) -> Optional[str]:
    """What in the state directory a user other than root and the install's
    owner owns, or could have swapped (a directory others may write to), or
    is neither a directory nor a regular file; None if nothing is. A backup
    is put back into the install by rename, so one that a third user could
    have replaced must never be used. (A backup's bytes are checked against
    RECORD besides.)"""
    if not install.state_dir.exists():
        return None
    owners = install.trusted_owners()
    return foreign_entry(walked(install.state_dir), owners,
                         f"root or the install's owner (uid {owners[1]})", files_only=True)


def refuse_untrusted_state(install: Install) -> None:
    why = untrusted_state(install)
    if why is not None:
        raise Refused(f"the state directory {install.state_dir} cannot be trusted: {why}. "
                      "Its backups are not used; refused, nothing was written. Reinstall "
                      "torch to get the wheel's files back")
