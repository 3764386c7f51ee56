"""A patched torch wheel: the release wheel with the chosen topics' series
applied, a PEP 440 local version label that names the series, a true RECORD,
and the same bytes every time it is built from the same inputs.

The version is the release's plus a local label, `2.11.0+pregrad.g<10 hex>`
(after the release's own label: `2.13.0+cpu.pregrad.g<10 hex>`), where the
hex digits start the sha256 of what was applied (each topic's name, base and
patch bytes, in order). PEP 440 ignores a local label when a requirement has
none, so `torch==2.11.0` (torchvision's, torchaudio's) accepts it.

Reading goes through PyPA's `wheel.wheelfile.WheelFile`, which checks every
file it reads against the wheel's RECORD, and writing through the same class,
which writes the new RECORD. Each file keeps its entry's timestamp and mode,
and the RECORD entry gets the old RECORD's timestamp, so the output depends
on the input wheel and the series only. The wheel is written beside its final
name and renamed when whole: a refused or interrupted build leaves nothing.
"""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelError, WheelFile

from torch_backport import __version__
from torch_backport.patchset.driver import Plan, release_series, Say
from torch_backport.infra.fsio import atomic_write, refuse_link, fault_point
from torch_backport.download.release_wheels import required_wheel, Target
from torch_backport.patchset.apply import apply_series
from torch_backport.infra.errors import Refused
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.identify import topic_files
from torch_backport.infra.record import file_sha256, refuse_unsafe_names, sha256_hex
from torch_backport.patchset.series import Series, Topic
# In the patched wheel's dist-info: what it was built from and with; an
# install made from it is recognised by this file.
from torch_backport.installed.records import Built, BUILT_NAME, BuiltTopic
from torch_backport.infra.exit_codes import Exit

LOCAL_PREFIX = "pregrad"
SCRATCH_PREFIX = ".pregrad-build-"
REQUIREMENT_RE = re.compile(r"torch==([0-9][0-9A-Za-z.+!_-]*)")


def source_wheel(source: str, cache: Path) -> Path:
    """IN as given: a wheel file, or `torch==X` for the release wheel."""
    requirement = REQUIREMENT_RE.fullmatch(source)
    if requirement:
        return required_wheel(requirement.group(1), Target.host(), cache)
    path = Path(source)
    if not path.is_file():
        raise Refused(f"{source}: no such wheel file (give a torch wheel, or torch==X to "
                      "download one)")
    return path


def series_digest(every: List[Series]) -> str:
    digest = hashlib.sha256()
    for series in every:
        digest.update(f"{series.topic.name}\0{series.base}\0".encode())
        for patch in series.patches:
            digest.update(patch.read_bytes())
    return digest.hexdigest()


def patched_version(release: Version, every: List[Series]) -> Version:
    label = f"{LOCAL_PREFIX}.g{series_digest(every)[:10]}"
    local = f"{release.local}.{label}" if release.local else label
    return Version(f"{release.public}+{local}")


@contextlib.contextmanager
def opened(path: Path) -> Iterator[WheelFile]:
    try:
        with WheelFile(str(path)) as wheel:
            refuse_unsafe_names(wheel.namelist(), str(path))
            yield wheel
    except WheelError as problem:
        raise Refused(f"{path}: {problem}; nothing was written") from None
    except zipfile.BadZipFile as problem:
        raise Refused(f"{path}: not a wheel ({problem}); nothing was written") from None


def read_checked(wheel: WheelFile, path: Path, name: str) -> bytes:
    """An entry's bytes; WheelFile checks them against RECORD."""
    try:
        data: bytes = wheel.read(name)
        return data
    except WheelError as problem:
        raise Refused(f"{path}: {name} does not match the wheel's RECORD ({problem}); "
                      "nothing was written") from None


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """How a patched wheel, or each of a fleet, is built."""
    out: Path  # the directory it goes into
    chosen: List[Topic]
    optional: Tuple[Topic, ...]  # left out where no series fits
    check: bool  # say what would be written; write nothing
    lock: Optional[str] = None  # also write this requirements file


def cmd_wheel(source: str, cache: Path, request: BuildRequest) -> int:
    """Write the patched wheel of IN (`source`), as `request` asks."""
    build(source_wheel(source, cache), request)
    return Exit.OK


def build(path: Path, request: BuildRequest) -> None:
    """Plan the patched wheel of `path`, then say it (--check) or write it."""
    with opened(path) as wheel:
        plan = plan_wheel(wheel, path, request)
        for line in plan.said:
            print(line)
        if request.check:
            plan.check(print)
        else:
            plan.execute(print)


def release_of(wheel: WheelFile, path: Path) -> Version:
    """The torch release `wheel` is, or Refused: not torch, or patched already."""
    parsed = wheel.parsed_filename
    assert parsed is not None
    if canonicalize_name(parsed.group("name")) != "torch":
        raise Refused(f"{path.name} is not a torch wheel (it is "
                      f"{parsed.group('name')}'s); nothing was written")
    try:
        release = Version(parsed.group("ver"))
    except InvalidVersion:
        raise Refused(f"{path.name}: {parsed.group('ver')!r} is not a PEP 440 "
                      "version; nothing was written") from None
    if f"{wheel.dist_info_path}/{BUILT_NAME}" in wheel.namelist():
        raise Refused(f"{path.name} is already a patched wheel (it has "
                      f"{wheel.dist_info_path}/{BUILT_NAME}); nothing was written")
    return release


def refuse_foreign_lock(wheel: WheelFile, path: Path) -> None:
    """--lock resolves with this interpreter's pip, for this platform: a
    wheel for another is refused before anything is built."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename
    tags = parse_wheel_filename(path.name)[3]
    if not tags & set(sys_tags()):
        raise Refused(f"--lock resolves for the Python and platform that run it, and "
                      f"{path.name} is for another ({', '.join(sorted(map(str, tags)))}): "
                      "build it without --lock (or with --platform into an index), or lock "
                      "on that platform; nothing was written")


def plan_wheel(wheel: WheelFile, path: Path, request: BuildRequest) -> Plan:
    out, chosen, optional, lock = request.out, request.chosen, request.optional, request.lock
    if lock is not None:
        refuse_foreign_lock(wheel, path)
    release = release_of(wheel, path)
    names = set(wheel.namelist())
    paths = sorted({rel for topic in chosen for rel in topic_files(topic)})
    as_read = {rel: read_checked(wheel, path, rel) for rel in paths if rel in names}
    # A Windows wheel's .py files have CRLF endings: identified and patched
    # as LF, written back with CRLF. Mixed endings are left as they are (a
    # real difference, refused as one).
    crlf = sorted(rel for rel, data in as_read.items()
                  if b"\r\n" in data
                  and data == data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    files = {rel: data.replace(b"\r\n", b"\n") if rel in crlf else data
             for rel, data in as_read.items()}
    if crlf:
        print(f"torch {release}: its {len(crlf)} files the topics touch have CRLF line "
              "endings (a Windows wheel): identified and patched as LF, written with CRLF")
    every = release_series(str(release), {rel: git_blob_id(files[rel]) if rel in files
                                          else None for rel in paths},
                           chosen, optional, "applying")
    patched: Dict[str, bytes] = {}
    for series in every:
        patched.update(apply_series({rel: files[rel] for rel in series.touched}, series))
    patched = {rel: data.replace(b"\n", b"\r\n") if rel in crlf else data
               for rel, data in patched.items()}
    version = patched_version(release, every)
    parsed = wheel.parsed_filename
    assert parsed is not None
    build = f"-{parsed.group('build')}" if parsed.group("build") else ""
    name = (f"torch-{version}{build}-{parsed.group('pyver')}-{parsed.group('abi')}-"
            f"{parsed.group('plat')}.whl")
    built = Built(
        built_by=f"torch-pregrad-backport {__version__}",
        source={"wheel": path.name, "sha256": file_sha256(path), "version": str(release)},
        topics={series.topic.name: BuiltTopic(
            base=series.base,
            series={p.name: sha256_hex(p.read_bytes()) for p in series.patches},
            files={rel: sha256_hex(patched[rel]) for rel in series.touched},
        ) for series in every})
    patched_wheel = PatchedWheel(wheel, path, out / name, patched, release, version,
                                 built.to_json())
    return Plan(trial=lambda say: verify_all(wheel, path),
                would=[f"check: would write {out / name} (version {version}); "
                       "nothing was written"],
                writes=lambda say: write_patched(patched_wheel, lock, say))


@dataclasses.dataclass
class PatchedWheel:
    """What a patched wheel is made of: the source wheel, open, and the
    files and metadata that change."""
    wheel: WheelFile
    path: Path  # the source wheel
    target: Path  # where the patched wheel goes
    patched: Dict[str, bytes]
    release: Version
    version: Version
    built: str  # the JSON of BUILT_NAME


def write_patched(made: PatchedWheel, lock: Optional[str], say: Say) -> None:
    out, target = made.target.parent, made.target
    refuse_link(out, "directory")
    refuse_link(target)
    created = not out.exists()
    # WheelFile takes the dist-info name from the file name: the wheel is
    # written under its own name in a scratch directory beside it, made
    # afresh under a name no one could have planted.
    scratch: Optional[Path] = None
    try:
        fault_point(out / SCRATCH_PREFIX)
        out.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out))
        partial = scratch / target.name
        write(made, partial)
        fault_point(target)
        os.replace(partial, target)
    finally:
        if scratch is not None and scratch.exists():
            shutil.rmtree(scratch)
        if created and out.exists() and not target.exists():
            out.rmdir()
    say(f"wrote {target}")
    say(f"  version {made.version} (pip's torch=={made.release.public} accepts it)")
    say(f"  sha256 {file_sha256(target)}")
    if lock is not None:
        write_lock(Path(lock), target, made.release)


def write_lock(lock: Path, wheel: Path, release: Version) -> None:
    """A requirements file for pip install --require-hashes: the dependencies
    of `wheel` (torch==release's, from its METADATA) as pip resolves them
    here, with hashes, and `wheel` in torch's place. pip resolves from the
    wheel itself, so torch's own wheel is not fetched again."""
    print(f"resolving the dependencies of {wheel.name} with pip (pip install --dry-run "
          "--report) ...", file=sys.stderr, flush=True)
    resolved = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", "-", str(wheel)],
        capture_output=True, text=True)
    if resolved.returncode != 0:
        raise Refused(f"pip could not resolve torch=={release} for --lock (exit "
                      f"{resolved.returncode}): {resolved.stderr.strip()[-500:]}; the wheel "
                      f"is written, {lock} is not")
    lines = [f"# pip install --require-hashes -r {lock.name}: torch=={release}'s "
             "dependencies as pip resolved them, and", "# the patched wheel in torch's place "
             "(written by torch-pregrad-backport; for this Python and platform)"]
    for item in json.loads(resolved.stdout)["install"]:
        name = canonicalize_name(item["metadata"]["name"])
        digest = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if name == "torch":
            continue
        if digest is None:
            raise Refused(f"pip's report gives no sha256 for {name}; {lock} is not written")
        lines.append(f"{name}=={item['metadata']['version']} --hash=sha256:{digest}")
    # The wheel by version and hash, found through a --find-links relative to
    # the lock file (pip and uv read it so): dist/ can move or be served as
    # it is, and no index has this exact local version, so a machine without
    # the wheel fails instead of installing stock torch.
    where = os.path.relpath(wheel.parent.resolve(), lock.parent.resolve())
    version = wheel.name.split("-")[1]
    lines[2:2] = [f"--find-links {where}"]
    lines.append(f"torch=={version} --hash=sha256:{file_sha256(wheel)}")
    atomic_write(lock, ("\n".join(lines) + "\n").encode(), 0o644)
    print(f"wrote {lock} ({len(lines) - 3} requirements, each pinned by sha256; the patched "
          f"wheel through --find-links {where}, relative to it)")


def verify_all(wheel: WheelFile, path: Path) -> None:
    for info in wheel.infolist():
        if not info.is_dir() and not info.filename.startswith(wheel.record_path):
            read_checked(wheel, path, info.filename)


def write(made: PatchedWheel, partial: Path) -> None:
    wheel, path = made.wheel, made.path
    dist_info, new_dist_info = wheel.dist_info_path, f"torch-{made.version}.dist-info"
    record_info = wheel.getinfo(wheel.record_path)
    entries = [info for info in wheel.infolist() if not info.is_dir()
               and not info.filename.startswith(wheel.record_path)]  # RECORD(.jws|.p7s)
    total = sum(info.file_size for info in entries) or 1
    done, shown_at = 0, 0
    # WheelFile dates the RECORD it writes by SOURCE_DATE_EPOCH.
    with source_date_epoch(calendar.timegm((*record_info.date_time, 0, 0, 0))):
        fault_point(partial)
        with WheelFile(str(partial), "w") as new:
            for info in entries:
                data = made.patched.get(info.filename)
                if data is None:
                    data = read_checked(wheel, path, info.filename)
                arcname = info.filename
                refuse_unsafe_names([arcname], str(partial))
                if arcname.startswith(f"{dist_info}/"):
                    arcname = new_dist_info + arcname[len(dist_info):]
                    if arcname == f"{new_dist_info}/METADATA":
                        data = with_version(data, made.release, made.version)
                new.writestr(entry(arcname, info), data)
                done += info.file_size
                if done * 10 // total > shown_at:
                    shown_at = done * 10 // total
                    print(f"  writing {partial.name}: {shown_at * 10}%", file=sys.stderr,
                          flush=True)
            new.writestr(entry(f"{new_dist_info}/{BUILT_NAME}", record_info), made.built)
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())


def entry(name: str, like: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """A zip entry named `name` with `like`'s timestamp and mode."""
    info = zipfile.ZipInfo(name, date_time=like.date_time)
    info.external_attr = like.external_attr
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def with_version(metadata: bytes, release: Version, version: Version) -> bytes:
    text = metadata.decode("utf-8")
    new, count = re.subn(r"^Version: .*$", f"Version: {version}", text, count=1,
                         flags=re.MULTILINE)
    if count != 1:
        raise Refused(f"the wheel's METADATA has no Version line (torch {release}); "
                      "nothing was written")
    return new.encode("utf-8")


@contextlib.contextmanager
def source_date_epoch(timestamp: int) -> Iterator[None]:
    before = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(timestamp)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = before
