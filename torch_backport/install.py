"""An installed torch wheel as every mode reads it: the install, its RECORD
(through `importlib.metadata`, for an install and for a wheel file alike),
and this project's state directory beside it and its layout.

<site>/.torch-pregrad-backport[-<topic>]/ holds manifest.json (what was
applied, to which torch, and each file's RECORD digest before and after) and
orig/<path> (the wheel's bytes of each patched file). It is written in a
staging directory and renamed into place, and removed by a rename to a trash
directory: a killed run leaves one of those, never a state directory without
its manifest. Nothing here imports torch.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import hashlib
import importlib.util
import json
import os
import py_compile
import shutil
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional

from torch_backport.fsio import free_kb, link_or_copy, own_like, step, temp_path, write_temp
from torch_backport.series import git_blob_id, primary_topic, Refused, Series, sha256_hex, Topic

STATE_DIRNAME = ".torch-pregrad-backport"
# In the dist-info of a torch installed from a wheel that patched_wheel.py
# built: what it was built from and which topics' series it carries.
BUILT_NAME = "PREGRAD_BACKPORT.json"
Manifest = Dict[str, Any]  # the JSON of <state dir>/manifest.json
MANIFEST = "manifest.json"
BACKUPS = "orig"  # <state dir>/orig/<path>: the wheel's bytes of each patched file


def record_digest(data: bytes) -> str:
    """The RECORD form of a sha256: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclasses.dataclass
class Install:
    """An installed torch, seen through one topic: each topic keeps its own
    backups and manifest, so topics are applied and reverted independently."""
    dist: metadata.Distribution
    site: Path
    version: str
    record: Dict[str, str]  # path -> RECORD sha256 digest, for every hashed file
    topic: Topic
    built: Optional[Dict[str, Any]] = None  # BUILT_NAME, if from a patched wheel

    @property
    def state_dir(self) -> Path:
        return self.site / f"{STATE_DIRNAME}{self.topic.named('-{name}')}"

    @property
    def manifest_path(self) -> Path:
        return self.state_dir / MANIFEST

    def backup(self, rel: str) -> Path:
        """Where the wheel's bytes of `rel` are kept while it is patched."""
        return self.state_dir / BACKUPS / rel

    def leftover(self, kind: str) -> Path:
        """A staging or trash dir that only a killed run leaves behind."""
        return self.state_dir.with_name(f"{self.state_dir.name}.{kind}")

    def for_topic(self, topic: Topic) -> "Install":
        return dataclasses.replace(self, topic=topic)

    def built_by(self) -> str:
        return str((self.built or {}).get("built-by", "torch-pregrad-backport"))

    def built_topic(self) -> Optional[Dict[str, Any]]:
        """What the patched wheel this torch was installed from says of this
        topic; None if it was not, or does not carry the topic."""
        if self.built is None:
            return None
        entry: Optional[Dict[str, Any]] = self.built.get("topics", {}).get(self.topic.name)
        return entry

    def has_feature(self) -> bool:
        path = self.path(self.topic.feature_file)
        return path.is_file() and self.topic.has_feature(path.read_bytes())

    def path(self, rel: str) -> Path:
        return self.site / rel

    def read(self, rel: str) -> bytes:
        return self.path(rel).read_bytes()

    def blob(self, rel: str) -> Optional[str]:
        """The git blob id of an installed file; None if it is missing or a link."""
        path = self.path(rel)
        if path.is_symlink() or not path.is_file():
            return None
        return git_blob_id(path.read_bytes())

    def matches_record(self, rel: str) -> bool:
        path = self.path(rel)
        return (not path.is_symlink() and path.is_file()
                and record_digest(path.read_bytes()) == self.record.get(rel))


def refresh_bytecode(install: Install, rel: str) -> None:
    """After `rel`'s source changed: the .pyc this interpreter loads is
    compiled again in the invalidation mode it had (an unchecked-hash .pyc
    would otherwise keep running the old code, as in reproducible images),
    and other interpreters' .pyc of it are removed. Never raises: a .pyc it
    cannot write is removed, one it cannot remove --status reports."""
    source = install.path(rel)
    mine = Path(importlib.util.cache_from_source(str(source)))
    for pyc in sorted(source.parent.glob(f"__pycache__/{source.stem}.*.pyc")):
        mode = invalidation_mode(pyc) if pyc == mine else None
        try:
            step(pyc)
            if mode is None:
                pyc.unlink()
            else:
                py_compile.compile(str(source), cfile=str(pyc), doraise=True,
                                   invalidation_mode=mode)
                own_like(pyc, source)
        except (OSError, py_compile.PyCompileError):
            try:
                pyc.unlink()
            except OSError:
                pass


def invalidation_mode(pyc: Path) -> Optional[py_compile.PycInvalidationMode]:
    """How Python checks `pyc` against its source (PEP 552); None if it is
    not this interpreter's."""
    try:
        header = pyc.read_bytes()[:16]
    except OSError:
        return None
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
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
    if invalidation_mode(pyc) != py_compile.PycInvalidationMode.UNCHECKED_HASH:
        return None
    if not source.is_file() or pyc.read_bytes()[8:16] == importlib.util.source_hash(
            source.read_bytes()):
        return None
    return (f"{pyc.relative_to(install.site)} is an unchecked-hash .pyc of other source: "
            f"Python runs it, not {rel}")


def record_of(dist: metadata.Distribution) -> Dict[str, str]:
    """path -> RECORD sha256 digest of every hashed file of `dist`."""
    return {entry.as_posix(): entry.hash.value for entry in dist.files or []
            if entry.hash is not None and entry.hash.mode == "sha256"}


def files_of_wheel(wheel_path: Path, paths: List[str]) -> Dict[str, bytes]:
    """The files `paths` names that torch's wheel file holds, each checked
    against the wheel's RECORD (read as an install's is)."""
    with zipfile.ZipFile(wheel_path) as wheel:
        # A local build tag (2.13.0+cpu) names the dist-info directory too.
        dist_info = next(name for name in wheel.namelist()
                         if name.startswith("torch-") and name.endswith(".dist-info/RECORD")
                         and name.count("/") == 1)[:-len("RECORD")]
        record = record_of(metadata.PathDistribution(zipfile.Path(wheel, dist_info)))
        names = set(wheel.namelist())
        files = {rel: wheel.read(rel) for rel in paths if rel in names}
    for rel, data in files.items():
        if record_digest(data) != record.get(rel):
            raise Refused(f"{wheel_path}: {rel} does not match the wheel's RECORD")
    return files


def find_install(topic: Optional[Topic] = None) -> Install:
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        raise Refused(f"{sys.executable} has no torch installed") from None
    record = record_of(dist)
    if not record:
        raise Refused(
            f"torch {dist.version}: its RECORD has no sha256 hashes, so pristine "
            "files cannot be told from modified ones"
        )
    site = Path(str(dist.locate_file(""))).resolve()
    built_text = dist.read_text(BUILT_NAME)
    try:
        built = json.loads(built_text) if built_text is not None else None
    except ValueError:
        raise Refused(f"torch {dist.version}: its dist-info has an unreadable "
                      f"{BUILT_NAME}") from None
    return Install(dist, site, dist.version, record, topic or primary_topic(), built)


def read_manifest(install: Install) -> Optional[Manifest]:
    path = install.manifest_path
    if not path.is_file():
        return None
    try:
        manifest: Manifest = json.loads(path.read_text())
        return manifest
    except ValueError:
        return {"state": "unreadable manifest"}


def drop_state(install: Install) -> None:
    """Remove the state dir in one rename, then delete it: a run killed in
    between leaves a trash dir that the next run removes, never a state dir
    without its manifest."""
    trash = install.leftover("trash")
    remove_leftovers(install)
    step(install.state_dir)
    os.replace(install.state_dir, trash)
    step(trash)
    shutil.rmtree(trash)


def remove_leftovers(install: Install) -> None:
    """What only a killed run leaves: a staging dir that was never renamed
    into place, a trash dir that was not deleted, and the temporary copies
    of the topic's files that were written before the staging dir was."""
    from torch_backport.series import topic_files
    for leftover in (install.leftover("staging"), install.leftover("trash")):
        if leftover.exists():
            step(leftover)
            shutil.rmtree(leftover)
    if not install.state_dir.exists():
        remove_partial_writes(install, topic_files(install.topic))


def remove_partial_writes(install: Install, paths: List[str]) -> None:
    """Temporary files that a killed atomic_write left beside its target."""
    for rel in paths:
        tmp = temp_path(install.path(rel))
        if tmp.exists():
            step(tmp)
            tmp.unlink()


APPLIED = "manifest.applied.json"  # the manifest once every file is in place


def write_backups(install: Install, series: Series,
                  pristine: Dict[str, bytes], patched: Dict[str, bytes]) -> None:
    """Everything an apply needs on disk before it replaces a file: the
    backups (hard links to the installed files where those are the wheel's:
    no space), the manifest as it is while applying and once applied, and
    each patched file's fsynced temporary copy beside it. The state dir is
    staged and renamed into place: complete or absent. A failure here (a
    full disk) removes what it wrote; the install is as it was."""
    staging = install.leftover("staging")
    try:
        stage(install, series, pristine, patched, staging)
        step(install.state_dir)
        os.replace(staging, install.state_dir)
    except BaseException as problem:
        shutil.rmtree(staging, ignore_errors=True)
        remove_partial_writes(install, series.touched)
        if isinstance(problem, OSError) and problem.errno == errno.ENOSPC:
            need = (sum(map(len, patched.values())) + 4096) // 1024 + 1
            raise OSError(errno.ENOSPC, f"No space left on device: this apply needs about "
                          f"{need} KB free in {install.site} ({free_kb(install.site)} KB "
                          "are); nothing was changed", problem.filename) from None
        raise


def stage(install: Install, series: Series, pristine: Dict[str, bytes],
          patched: Dict[str, bytes], staging: Path) -> None:
    for rel, data in pristine.items():
        source = install.path(rel)
        if source.is_file() and source.read_bytes() == data:
            link_or_copy(source, staging / BACKUPS / rel)
        else:  # an earlier series' backup: the installed file is not the wheel's
            step(staging / BACKUPS / rel)
            (staging / BACKUPS / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / BACKUPS / rel).write_bytes(data)
    manifest = {
        "state": "applying",
        "torch": install.version,
        "base": series.base,
        "series": {p.name: sha256_hex(p.read_bytes()) for p in series.patches},
        "pristine": {rel: install.record[rel] for rel in series.touched},
        "patched": {rel: record_digest(data) for rel, data in patched.items()},
        "modes": {rel: install.path(rel).stat().st_mode & 0o7777 for rel in series.touched},
    }
    step(staging / MANIFEST)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
    step(staging / APPLIED)
    (staging / APPLIED).write_text(json.dumps(dict(manifest, state="applied"), indent=2))
    for made in [staging, *staging.rglob("*")]:
        own_like(made, install.site)
    for rel in series.touched:
        write_temp(install.path(rel), patched[rel], install.path(rel).stat().st_mode & 0o7777)
