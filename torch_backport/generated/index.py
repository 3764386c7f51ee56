"""DIR/simple/, the PEP 503 index over the torch wheels in DIR, with each
wheel's core metadata beside it (PEP 658, spelled both ways as PEP 714 asks).

For every `torch-*.whl` in DIR the fleet writes `<wheel>.metadata`, the bytes
of the wheel's own `*.dist-info/METADATA` (checked against the wheel's
RECORD, read through importlib.metadata as record.py reads every RECORD),
and one link in `simple/torch/index.html`. Only regular files are read or
published: a link, FIFO or device named like a wheel, or a `.metadata` that
is not a file, is refused by name before anything is written.

    <a href="../../torch-2.11.0%2Bpregrad.g…-cp311-cp311-win_amd64.whl#sha256=…"
       data-requires-python="&gt;=3.10" data-core-metadata="sha256=…"
       data-dist-info-metadata="sha256=…">torch-2.11.0+pregrad.g…-win_amd64.whl</a><br/>

A resolver that knows the attributes (pip 22.3 and later, uv, poetry, pdm)
reads the 30 KB .metadata file instead of the wheel (or its zip directory by
Range); an older pip ignores them, and the page stays PEP 503. The links are
relative and percent-encoded (`+` is `%2B`: a bucket's URL path would read a
bare `+` as a space) and every file is static, so DIR can be served as it is
by any static server or synced to a bucket: nothing needs a directory listing
or content negotiation. A page of anchors needs no template library: the
standard library's `html.escape` and `urllib.parse.quote` write it.
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import hashlib
import html
import os
import re
import stat
import zipfile
import zlib
from pathlib import Path
from typing import List, Optional
from urllib.parse import quote

from packaging.metadata import parse_email
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torch_backport.infra.errors import Refused
from torch_backport.infra.dirfd import Dir
from torch_backport.infra.fsio import (kind_of, open_regular, owner_of, refuse_link,
                                       refuse_links_below)
from torch_backport.infra.record import (CHUNK, digest, dist_info_of, of_wheel,
                                         oversized_record, refuse_unsafe_names, sha256_hex)

PROJECT = "torch"
WHEELS = f"{PROJECT}-*.whl"
SUFFIX = ".metadata"  # PEP 658: the distribution's URL with this appended
METADATA_CAP = 4 * 1024 * 1024  # torch's is about 30 KB
WHEEL_CAP = 16 * 1024 * 1024 * 1024  # torch's CUDA wheels are about 1 GB
# PEP 425: a platform tag is sysconfig's platform with "-" and "." made "_".
PLATFORM_RE = re.compile(r"[A-Za-z0-9_]+")


@dataclasses.dataclass(frozen=True)
class Listed:
    """A wheel of the index: its file, its sha256, its METADATA bytes, and
    the Requires-Python they carry (None: none)."""
    wheel: Path
    sha256: str
    metadata: bytes
    requires_python: Optional[str]


def unreadable(wheel: Path, why: object) -> Refused:
    return Refused(f"{wheel}: its METADATA cannot be read for the index ({why}); move it "
                   "out of the directory or rebuild it; nothing was written")


def read_listed(wheel: Path) -> Listed:
    """`wheel`'s METADATA, checked against its RECORD and its file name; or
    Refused. The wheel is read from one descriptor of a regular file that is
    not a link (open_regular), so a FIFO, a device or a link named like a
    wheel is refused by name, and the sha256 the page gives is of the same
    bytes."""
    try:
        _, version, _, wheel_tags = parse_wheel_filename(wheel.name)
        with open_regular(wheel, WHEEL_CAP) as stream:
            with zipfile.ZipFile(stream) as opened:
                oversized = oversized_record(opened)
                if oversized is not None:
                    raise unreadable(wheel, f"its RECORD claims {oversized.file_size} bytes")
                names = opened.namelist()
                refuse_unsafe_names(names, str(wheel))
                name = dist_info_of(names, PROJECT) + "METADATA"
                size = opened.getinfo(name).file_size
                if size > METADATA_CAP:
                    raise unreadable(wheel, f"its METADATA is {size} bytes, over the "
                                            f"{METADATA_CAP} this index takes")
                data: bytes = opened.read(name)
                if digest(data) != of_wheel(opened, PROJECT).get(name):
                    raise unreadable(wheel, f"{name} does not match the wheel's RECORD")
            stream.seek(0)
            sha256 = hashlib.sha256()
            for chunk in iter(lambda: stream.read(CHUNK), b""):
                sha256.update(chunk)
    except (InvalidWheelFilename, zipfile.BadZipFile, KeyError, OSError, ValueError,
            csv.Error, zlib.error, NotImplementedError, EOFError) as problem:
        raise unreadable(wheel, problem) from None
    odd = sorted(tag.platform for tag in wheel_tags if not PLATFORM_RE.fullmatch(tag.platform))
    if odd:
        raise unreadable(wheel, f"its platform tag {odd[0]!r} is not a PEP 425 platform tag")
    raw, _ = parse_email(data)
    said = raw.get("version")
    try:
        same = (raw.get("name") is not None and canonicalize_name(raw["name"]) == PROJECT
                and said is not None and Version(said) == version)
    except InvalidVersion:
        same = False
    if not same:
        raise unreadable(wheel, f"it says Name {raw.get('name')!r}, Version {said!r}, where "
                                f"the file name says {PROJECT} {version}")
    requires = raw.get("requires_python")
    if requires is not None:
        try:
            SpecifierSet(requires)
        except InvalidSpecifier:
            raise unreadable(wheel, f"its Requires-Python {requires!r} is not a PEP 440 "
                                    "specifier") from None
    return Listed(wheel, sha256.hexdigest(), data, requires)


def read_all(out: Path) -> List[Listed]:
    """Every torch wheel in `out` with its metadata (none if `out` is not
    there yet): the fleet asks before it builds, so a wheel the index could
    not list is refused while nothing has changed."""
    return [read_listed(wheel) for wheel in sorted(out.glob(WHEELS))] if out.is_dir() else []


def link(listed: Listed) -> str:
    name = listed.wheel.name
    core = f"sha256={sha256_hex(listed.metadata)}"
    requires = ("" if listed.requires_python is None else
                f' data-requires-python="{html.escape(listed.requires_python, quote=True)}"')
    return (f'    <a href="../../{quote(name)}#sha256={listed.sha256}"'
            f'{requires} data-core-metadata="{core}" data-dist-info-metadata="{core}">'
            f"{html.escape(name)}</a><br/>")


def page(title: str, body: List[str]) -> bytes:
    return ("<!DOCTYPE html>\n<html>\n  <head>\n"
            '    <meta name="pypi:repository-version" content="1.0">\n'
            f"    <title>{title}</title>\n  </head>\n  <body>\n"
            + "".join(f"{line}\n" for line in body) + "  </body>\n</html>\n").encode()


def write_metadata(top: Dir, listed: List[Listed]) -> None:
    """`<wheel>.metadata` beside each wheel (rewritten only when it differs,
    so a bucket sync uploads nothing new), and none for a wheel that is gone."""
    for item in listed:
        name = item.wheel.name + SUFFIX
        if top.lstat(name) is None or top.read(name, METADATA_CAP)[0] != item.metadata:
            write_ours(top, name, item.metadata)
    kept = {item.wheel.name + SUFFIX for item in listed}
    for stale in top.names():
        if fnmatch.fnmatchcase(stale, WHEELS + SUFFIX) and stale not in kept:
            top.unlink(stale)


def write_ours(directory: Dir, name: str, data: bytes) -> None:
    """`name` in `directory`, replaced whole; root writing into another
    user's directory gives the new file to the owner of the file it
    replaces, or of the directory (set on the open file)."""
    found = directory.lstat(name)
    directory.atomic_write(name, data, 0o644,
                           owner_of(found if found is not None else os.fstat(directory.fd)))


def refuse_planted_links(out: Path, listed: List[Listed]) -> None:
    """Every name the index writes or removes, and the directories on the
    way, may not be a symbolic link, and a `.metadata` must be a regular
    file: refused before anything is written."""
    refuse_link(out, "directory")
    for item in listed:
        refuse_link(item.wheel.with_name(item.wheel.name + SUFFIX))
    for metadata in out.glob(WHEELS + SUFFIX):
        found = metadata.lstat()
        if not stat.S_ISREG(found.st_mode):
            raise Refused(f"{metadata} is a {kind_of(found.st_mode)} where the index keeps a "
                          "wheel's metadata file; refused, nothing was written. Remove it")
    for rel in ("simple", f"simple/{PROJECT}", f"simple/{PROJECT}/index.html",
                "simple/index.html"):
        refuse_links_below(out, out / rel)


def write_index(out: Path, listed: List[Listed]) -> Path:
    """DIR/simple/ (PEP 503) over `listed`, the torch wheels in `out`, by
    relative link with their sha256, after their .metadata files: a page
    never names a file that is not there yet. Written relative to `out`
    and its subdirectories opened once (dirfd.py): a directory swapped for
    a link after the checks redirects nothing."""
    refuse_planted_links(out, listed)
    with Dir.open(out) as top:
        write_metadata(top, listed)
        with top.walk(["simple", PROJECT], make_mode=0o755) as project:
            write_ours(project, "index.html", page(
                f"Links for {PROJECT}", [f"    <h1>Links for {PROJECT}</h1>",
                                         *(link(item) for item in listed)]))
        with top.sub("simple") as simple:
            write_ours(simple, "index.html", page(
                "Simple index", [f'    <a href="{PROJECT}/">{PROJECT}</a><br/>']))
    return out / "simple"
