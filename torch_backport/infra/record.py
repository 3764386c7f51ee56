"""RECORD, the list of a wheel's files with their sha256 (PEP 376, PEP 627):
its digest form, reading it from an install or from a wheel file, and
checking files against it. The one place that computes a RECORD digest:
every mode, scripts/gpu-check, check-patches and the harness use it.
Reading goes through `importlib.metadata`, for an install and for a wheel
file alike (a wheel's dist-info read as a `PathDistribution`)."""

from __future__ import annotations

import base64
import csv
import hashlib
import re
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from torch_backport.infra.errors import Refused

CHUNK = 1 << 20
RECORD_CAP = 64 * 1024 * 1024  # torch's RECORD is about 2 MB
DRIVE_RE = re.compile(r"^[A-Za-z]:")


def unsafe_name(name: str) -> str:
    """Why a wheel member name could write outside the install, or "": a
    `..` part, an absolute path, a backslash, a drive letter or a NUL."""
    if "\\" in name:
        return "has a backslash"
    if "\0" in name:
        return "has a NUL"
    if name.startswith("/"):
        return "is an absolute path"
    if DRIVE_RE.match(name):
        return "has a drive letter"
    if ".." in name.split("/"):
        return "has a '..' part"
    return ""


def refuse_unsafe_names(names: List[str], where: str) -> None:
    """Refuse a wheel whose members could land outside the install."""
    for name in names:
        why = unsafe_name(name)
        if why:
            raise Refused(f"{where}: the member {name!r} {why}; refused, nothing was written")


def digest(data: bytes) -> str:
    """The RECORD form of a sha256: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def sha256_hex(data: bytes) -> str:
    """The hex form of a sha256 (pristine.tsv, pip's --hash, an index's #sha256=)."""
    return hashlib.sha256(data).hexdigest()


def _file_hash(path: Path) -> "hashlib._Hash":
    """The sha256 object of a file's bytes, read in chunks (wheels are large)."""
    hashed = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK), b""):
            hashed.update(chunk)
    return hashed


def file_sha256(path: Path) -> str:
    """`sha256_hex` of a file, read in chunks."""
    return _file_hash(path).hexdigest()


def file_digest(path: Path) -> str:
    """`digest` of a file, read in chunks."""
    return base64.urlsafe_b64encode(_file_hash(path).digest()).rstrip(b"=").decode()


def of_entries(entries: List[metadata.PackagePath]) -> Dict[str, str]:
    """path -> RECORD sha256 digest of every hashed entry."""
    return {entry.as_posix(): entry.hash.value for entry in entries
            if entry.hash is not None and entry.hash.mode == "sha256"}


def of_dist(dist: metadata.Distribution) -> Dict[str, str]:
    """path -> RECORD sha256 digest of every hashed file of `dist`."""
    return of_entries(dist.files or [])


def dist_info_of(names: List[str], project: str = "torch") -> str:
    """The `<project>-<version>.dist-info/` directory among a wheel's member
    names (a local build tag, 2.13.0+cpu, names it too)."""
    for name in names:
        if (name.startswith(f"{project}-") and name.endswith(".dist-info/RECORD")
                and name.count("/") == 1):
            return name[:-len("RECORD")]
    raise Refused(f"no {project}-*.dist-info/RECORD in the wheel")


def oversized_record(wheel: zipfile.ZipFile) -> Optional[zipfile.ZipInfo]:
    """A RECORD of `wheel` bigger than RECORD_CAP (zipfile and WheelFile
    inflate RECORD whole), or None."""
    return next((info for info in wheel.infolist() if info.filename.endswith(".dist-info/RECORD")
                 and info.file_size > RECORD_CAP), None)


def entries_of_wheel(wheel: zipfile.ZipFile, project: str = "torch") -> List[metadata.PackagePath]:
    """A wheel file's own RECORD, each entry with its hash and size."""
    dist_info = dist_info_of(wheel.namelist(), project)
    try:
        return list(metadata.PathDistribution(zipfile.Path(wheel, dist_info)).files or [])
    except (TypeError, ValueError, UnicodeDecodeError, csv.Error) as problem:
        raise Refused(f"{dist_info}RECORD cannot be read ({problem})") from None


def of_wheel(wheel: zipfile.ZipFile, project: str = "torch") -> Dict[str, str]:
    """path -> RECORD sha256 digest, from a wheel file's own RECORD."""
    return of_entries(entries_of_wheel(wheel, project))


def mismatches(files: Mapping[str, bytes], record: Mapping[str, str]) -> List[str]:
    """The paths of `files` whose bytes are not what `record` says."""
    return sorted(rel for rel, data in files.items() if digest(data) != record.get(rel))


def verify(files: Mapping[str, bytes], record: Mapping[str, str], where: str) -> None:
    """Refuse if any of `files` differs from `record`, naming `where` and the file."""
    wrong = mismatches(files, record)
    if wrong:
        raise Refused(f"{where}: {wrong[0]} does not match the wheel's RECORD"
                      + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""))


def installed_mismatches(dist: metadata.Distribution) -> List[str]:
    """Every hashed file of an install whose bytes differ from its RECORD
    (missing files included): empty for a pristine install."""
    root = Path(str(dist.locate_file("")))
    wrong = []
    for rel, expected in of_dist(dist).items():
        path = root / rel
        if not path.is_file() or file_digest(path) != expected:
            wrong.append(rel)
    return wrong
