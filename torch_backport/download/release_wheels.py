"""torch's release wheels: the one place that asks pip for one, by
(version, target), with one cache layout, $PREGRAD_CACHE/wheels/<target>/,
where this machine is just one target.

`release_files` reads a few files of a release (new-base, --overlay,
identification by version, the harness's new-release notice): the wheel's
URL is chosen from the simple API of pip's configured indexes and
find-links (simple_index.py, with pip's credentials, TLS and proxy
settings: a company mirror is honoured, and no wheel is downloaded to name
one), then only the zip's directory and those members are fetched by byte
range (ranged.py), each capped at its RECORD size and checked against the
wheel's own RECORD. A cached wheel is read from disk; an index whose simple
API cannot be read, or without ranges, falls back to downloading the whole
wheel with pip, and says why. `release_wheel` is that whole wheel (`--wheel` builds
from it), downloaded once with `pip download`."""

from __future__ import annotations

import csv
import dataclasses
import re
import struct
import subprocess
import sys
import sysconfig
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from torch_backport.download import pip_config, transport
from torch_backport.infra import record
from torch_backport.infra.errors import Refused
from torch_backport.infra.fsio import make_dirs, trusted_cache
from torch_backport.download.pip_config import pip_environment, shown_url
from torch_backport.download.ranged import NoRanges, RangedFile

MB = 1024 * 1024
MEMBER_CAP = 64 * MB  # a member RECORD lists without a size
# What a broken or hostile zip raises while a member is read.
DECODING = (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, ValueError,
            struct.error, csv.Error)
# The host target's folder name (pip picks its wheel tag itself).
HOST_PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")


@dataclasses.dataclass(frozen=True)
class Target:
    """A wheel target: a platform tag pip's --platform takes (None: this
    machine, as pip chooses for it) and a CPython version ("3.11")."""
    platform: Optional[str]
    python: str

    @classmethod
    def host(cls) -> "Target":
        return cls(None, f"{sys.version_info.major}.{sys.version_info.minor}")

    @property
    def python_tag(self) -> str:
        """The wheel's Python tag: cp310 for 3.10."""
        return f"cp{self.python.replace('.', '')}"

    @property
    def folder(self) -> str:
        return f"{self.python_tag}-{self.platform or HOST_PLATFORM}"

    def pip_options(self) -> List[str]:
        options = ["--only-binary=:all:", "--python-version", self.python]
        if self.platform is not None:
            options += ["--implementation", "cp", "--platform", self.platform]
        return options

    def __str__(self) -> str:
        return f"{self.python_tag} {self.platform or 'this machine'}"


@dataclasses.dataclass
class ReleaseFiles:
    """A release's files (path -> bytes; a path it lacks is absent), each
    checked against its wheel's RECORD, where they came from, and how many
    bytes that took."""
    version: str
    files: Dict[str, bytes]
    source: str
    transferred: int = 0


def platform_accepts(wanted: str, have: str) -> bool:
    """Whether a wheel tagged `have` installs where pip's --platform is
    `wanted`: the same tag, or an older manylinux or macOS of the same
    architecture (pip takes those too)."""
    def parts(tag: str) -> Optional[Tuple[str, Tuple[int, int], str]]:
        legacy = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
        for name, floor in legacy.items():
            if tag.startswith(name + "_"):
                return "manylinux", floor, tag[len(name) + 1:]
        found = re.fullmatch(r"(manylinux|macosx)_(\d+)_(\d+)_(.+)", tag)
        return (found[1], (int(found[2]), int(found[3])), found[4]) if found else None

    if wanted == have:
        return True
    mine, theirs = parts(wanted), parts(have)
    return (mine is not None and theirs is not None and mine[0] == theirs[0]
            and mine[2] == theirs[2] and theirs[1] <= mine[1])


def host_accepts(have: str) -> bool:
    """Whether this machine's pip would install a wheel of platform `have`."""
    try:
        from packaging import tags
    except ImportError:  # the clone's python3 may lack it: its own folder only
        return have == HOST_PLATFORM
    return any(tag.platform == have for tag in tags.sys_tags())


def cached(version: str, target: Target, cache: Path) -> Optional[Path]:
    """A cached wheel of torch `version` that `target` takes (a local label,
    2.13.0+cpu, is the same release), in any target's folder: the host's
    wheel serves a fleet target of the same machine, and the other way
    round. The folder-less layout of earlier releases is read too."""
    wheels = cache / "wheels"
    python = target.python_tag
    for folder in [wheels / target.folder, *sorted(wheels.glob("cp*-*")), wheels]:
        for wheel in sorted([*folder.glob(f"torch-{version}-*.whl"),
                             *folder.glob(f"torch-{version}+*.whl")]):
            tags = wheel.name[:-len(".whl")].split("-")[-3:]
            if tags[0] != python:
                continue
            platforms = tags[2].split(".")
            if any(host_accepts(tag) if target.platform is None
                   else platform_accepts(target.platform, tag) for tag in platforms):
                return wheel
    return None


def locate(version: str, target: Target) -> Tuple[Optional[str], str]:
    """The URL of torch `version`'s wheel for `target` on pip's configured
    indexes and find-links, read from their simple API (no wheel is
    downloaded), or None and why."""
    transport.require()
    # packaging, which simple_index needs, is not needed by every mode.
    from torch_backport.download.simple_index import find_wheel
    chosen, why = find_wheel(version, target.python, target.platform, pip_config.load(),
                             transport.shared())
    return (chosen.url, "") if chosen is not None else (None, why)


def release_wheel(version: str, target: Target, cache: Path,
                  quiet: bool = False) -> Optional[Path]:
    """torch `version`'s whole wheel for `target`, downloaded once into the
    cache with pip; None if the index has none."""
    found = cached(version, target, cache)
    if found is not None:
        return found
    folder = cache / "wheels" / target.folder
    make_dirs(folder, trusted_cache(cache), 0o700)
    print(f"{target}: downloading the torch {version} wheel into {folder} (530-900 MB"
          f"{'' if quiet else '; pip prints its size, then its progress'}) ...",
          file=sys.stderr, flush=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", *target.pip_options(),
         *(["--quiet"] if quiet else []), "-d", str(folder), f"torch=={version}"],
        env=pip_environment(), capture_output=quiet, text=True)
    found = cached(version, target, cache)
    if pip.returncode != 0 or found is None:
        try:
            folder.rmdir()  # made for this download: a refused run leaves nothing
        except OSError:
            pass  # it holds other wheels
        return None
    print(f"{target}: received the whole torch {version} wheel, "
          f"{found.stat().st_size / MB:.1f} MB, through pip", file=sys.stderr, flush=True)
    return found


def required_wheel(version: str, target: Target, cache: Path) -> Path:
    if cached(version, target, cache) is None and transport.available():
        # packaging, which simple_index needs, is not needed by every mode.
        from torch_backport.download.simple_index import absent_release
        absent = absent_release(version, pip_config.load(), transport.shared())
        if absent is not None:
            raise Refused(f"{absent}; nothing was written")
    found = release_wheel(version, target, cache)
    if found is None:
        raise Refused(f"pip could not download torch=={version} for {target} (its output is "
                      "above); nothing was written")
    return found


def members(wheel: zipfile.ZipFile, paths: Sequence[str], where: str) -> Dict[str, bytes]:
    """The members of `wheel` that `paths` names, checked against its RECORD.
    A path RECORD does not list is not in this release; one it lists that
    the zip lacks, or whose size in the zip is not RECORD's, is refused
    before a byte of it is read, and what is inflated stops at RECORD's
    size (zipfile stops at the directory's size, which must be RECORD's)."""
    names = set(wheel.namelist())
    oversized = record.oversized_record(wheel)
    if oversized is not None:
        raise UnreadableMember(f"{where}: its RECORD claims {oversized.file_size} bytes; refused")
    try:
        entries = record.entries_of_wheel(wheel)
    except DECODING as problem:
        raise UnreadableMember(f"{where}: its RECORD cannot be read ({problem})") from None
    listed = record.of_entries(entries)
    sizes = {entry.as_posix(): entry.size for entry in entries if entry.size is not None}
    for rel in paths:
        if rel in listed and rel not in names:
            raise Refused(f"{where}: RECORD lists {rel} but the wheel has no such member")
        if rel in names:
            check_member_size(wheel.getinfo(rel), sizes.get(rel), where)
    try:
        files = {rel: wheel.read(rel) for rel in paths if rel in names}
    except DECODING as problem:
        raise UnreadableMember(f"{where}: a member cannot be read ({problem})") from None
    record.verify(files, listed, where)
    return files


class UnreadableMember(Refused):
    """A member whose bytes do not decode: a broken or hostile zip."""


def check_member_size(info: zipfile.ZipInfo, size: Optional[int], where: str) -> None:
    # Deflate adds at most 5 bytes per 16 KiB block it stores, and a little more.
    if size is None:  # RECORD gives no size: the cap, not a size to match
        if info.file_size > MEMBER_CAP:
            raise UnreadableMember(f"{where}: {info.filename} is {info.file_size} bytes; "
                                   f"over {MEMBER_CAP} without a size in RECORD, refused")
        size = info.file_size
    if info.file_size != size or info.compress_size > size + size // 1000 + 1024:
        raise UnreadableMember(
            f"{where}: {info.filename} is {info.file_size} bytes ({info.compress_size} "
            f"compressed) in the zip where RECORD says {size}; refused")


_remote: Dict[str, RangedFile] = {}


def ranged_members(url: str, paths: Sequence[str]) -> ReleaseFiles:
    """`paths` of the wheel at `url`, by range; the blocks read are kept for
    the process, so each topic's read of the same release costs nothing more."""
    remote = _remote[url] = RangedFile(url, transport.shared(), earlier=_remote.get(url))
    with zipfile.ZipFile(remote) as wheel:
        files = members(wheel, paths, shown_url(url))
    return ReleaseFiles("", files, f"{shown_url(url)} ({remote.transferred / MB:.1f} MB of "
                        f"{remote.size / MB:.0f} MB read by range, {remote.requests} requests)",
                        remote.transferred)


def received_line() -> str:
    """What this process received from the network in all, for a command's summary."""
    used = transport.used()
    if used is None:
        return "received from the network: nothing"
    return (f"received from the network: {used.received / MB:.1f} MB in all "
            f"({used.requests} requests, index pages included)")


def release_files(version: str, paths: Sequence[str], cache: Path,
                  target: Optional[Target] = None) -> ReleaseFiles:
    """The files `paths` names of torch `version`'s wheel for `target` (this
    machine's by default), each checked against the wheel's RECORD."""
    target = target or Target.host()
    wheel = cached(version, target, cache)
    if wheel is None:
        url, why = locate(version, target)
        if url is not None and urllib.parse.urlsplit(url).scheme == "file":
            wheel = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        else:
            if url is not None:
                try:
                    return dataclasses.replace(ranged_members(url, paths), version=version)
                except (NoRanges, UnreadableMember, OSError, *DECODING) as problem:
                    why = f"could not read the wheel's files by range ({problem})"
            print(f"torch {version}: {why}; downloading the whole wheel with pip instead",
                  file=sys.stderr, flush=True)
            wheel = required_wheel(version, target, cache)
    try:
        with zipfile.ZipFile(wheel) as opened:
            return ReleaseFiles(version, members(opened, paths, str(wheel)), str(wheel))
    except (zipfile.BadZipFile, OSError) as problem:
        raise Refused(f"{wheel}: cannot be read as a wheel ({problem})") from None
