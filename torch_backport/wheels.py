"""torch's release wheels: the one place that asks pip for one, by
(version, target), with one cache layout, $PREGRAD_CACHE/wheels/<target>/,
where this machine is just one target.

`release_files` reads a few files of a release (new-base, --overlay,
identification by version, the harness's new-release notice): pip names the
wheel's URL from the configured index (`pip install --dry-run --report`:
pip's own index-url, extra-index-url, find-links and credentials, so a
company mirror is honoured), then only the zip's directory and those
members are fetched by byte range (ranged.py) and checked against the
wheel's own RECORD. A cached wheel is read from disk; an index without
ranges, or a URL pip would not name, falls back to downloading the whole
wheel, and says so. `release_wheel` is that whole wheel (`--wheel` builds
from it), downloaded once with `pip download`."""

from __future__ import annotations

import dataclasses
import functools
import http.client
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from torch_backport import record
from torch_backport.errors import Refused
from torch_backport.ranged import NoRanges, RangedFile

MB = 1024 * 1024
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
    def folder(self) -> str:
        platform = self.platform or HOST_PLATFORM
        return f"cp{self.python.replace('.', '')}-{platform}"

    def pip_options(self) -> List[str]:
        options = ["--only-binary=:all:", "--python-version", self.python]
        if self.platform is not None:
            options += ["--implementation", "cp", "--platform", self.platform]
        return options

    def __str__(self) -> str:
        return f"cp{self.python.replace('.', '')} {self.platform or 'this machine'}"


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
    python = f"cp{target.python.replace('.', '')}"
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


def pip_environment() -> Dict[str, str]:
    # A version is pinned exactly here, so a cap in pip's configuration (a
    # build machine's torch<=X) would only refuse a release it cannot
    # choose. An empty PIP_CONSTRAINT would be ignored by pip: /dev/null.
    return dict(os.environ, PIP_CONSTRAINT=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")


@functools.lru_cache(maxsize=None)
def locate(version: str, target: Target) -> Tuple[Optional[str], str]:
    """The URL of torch `version`'s wheel for `target` on pip's configured
    index, without downloading it (None, and why, if pip names none)."""
    with tempfile.TemporaryDirectory(prefix="pregrad-locate-") as tmp:
        report = Path(tmp) / "report.json"
        asked = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps",
             "--ignore-installed", "--target", str(Path(tmp) / "target"),
             "--report", str(report), *target.pip_options(), f"torch=={version}"],
            capture_output=True, text=True, env=pip_environment())
        if asked.returncode != 0 or not report.is_file():
            said = (asked.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"pip could not name the wheel: {said}"
        installs = json.loads(report.read_text()).get("install", [])
    url = installs[0].get("download_info", {}).get("url") if installs else None
    return (str(url), "") if url else (None, "pip's report names no wheel")


def index_credentials() -> Dict[str, Tuple[str, str]]:
    """host -> (user, password) from pip's configured index URLs: pip's
    report leaves them out of the wheel's URL. ~/.netrc is read by
    ranged.py; a keyring is not (pip's whole download then, said)."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, env=pip_environment())
    urls = re.findall(r"(?:index-url|extra-index-url)='([^']*)'", listed.stdout)
    urls += [os.environ.get("PIP_INDEX_URL", ""), os.environ.get("PIP_EXTRA_INDEX_URL", "")]
    found: Dict[str, Tuple[str, str]] = {}
    for url in " ".join(urls).split():
        parts = urllib.parse.urlsplit(url)
        if parts.username and parts.hostname:
            found[parts.hostname] = (urllib.parse.unquote(parts.username),
                                     urllib.parse.unquote(parts.password or ""))
    return found


def release_wheel(version: str, target: Target, cache: Path,
                  quiet: bool = False) -> Optional[Path]:
    """torch `version`'s whole wheel for `target`, downloaded once into the
    cache with pip; None if the index has none."""
    found = cached(version, target, cache)
    if found is not None:
        return found
    folder = cache / "wheels" / target.folder
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{target}: downloading the torch {version} wheel into {folder} (530-900 MB"
          f"{'' if quiet else '; pip prints its size, then its progress'}) ...",
          file=sys.stderr, flush=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", *target.pip_options(),
         *(["--quiet"] if quiet else []), "-d", str(folder), f"torch=={version}"],
        env=pip_environment(), capture_output=quiet, text=True)
    found = cached(version, target, cache)
    if pip.returncode != 0 or found is None:
        return None
    return found


def required_wheel(version: str, target: Target, cache: Path) -> Path:
    found = release_wheel(version, target, cache)
    if found is None:
        raise Refused(f"pip could not download torch=={version} for {target} (its output is "
                      "above); nothing was written")
    return found


def members(wheel: zipfile.ZipFile, paths: Sequence[str], where: str) -> Dict[str, bytes]:
    """The members of `wheel` that `paths` names, checked against its RECORD."""
    names = set(wheel.namelist())
    files = {rel: wheel.read(rel) for rel in paths if rel in names}
    record.verify(files, record.of_wheel(wheel), where)
    return files


def ranged_members(url: str, paths: Sequence[str]) -> ReleaseFiles:
    remote = RangedFile(url, index_credentials().get(urllib.parse.urlsplit(url).hostname or ""))
    with zipfile.ZipFile(io.BufferedReader(remote, 1 << 16)) as wheel:
        files = members(wheel, paths, url)
    return ReleaseFiles("", files, f"{url} ({remote.transferred / MB:.1f} MB of "
                        f"{remote.size / MB:.0f} MB read by range, {remote.requests} requests)",
                        remote.transferred)


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
        elif url is not None:
            try:
                return dataclasses.replace(ranged_members(url, paths), version=version)
            except (NoRanges, urllib.error.URLError, OSError, http.client.HTTPException,
                    zipfile.BadZipFile) as problem:
                why = f"could not read the wheel's files by range ({problem})"
        print(f"torch {version}: {why}; downloading the whole wheel instead",
              file=sys.stderr, flush=True)
        wheel = wheel or required_wheel(version, target, cache)
    with zipfile.ZipFile(wheel) as opened:
        return ReleaseFiles(version, members(opened, paths, str(wheel)), str(wheel))
