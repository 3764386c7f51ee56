"""The overlay: the patched files of a base at their upstream paths
(torch/_inductor/..., torch/_functorch/...), generated from the pristine
release files plus the series, for copying into an image or a vendored tree.

The pristine files come from the interpreter's installed torch (--python PY:
this module then runs under PY, see _launch.py) or from the release wheel,
downloaded once into the cache and checked against its RECORD. The output
directory is replaced as a whole or not at all: a journal names every file a
run may have written, so a killed run leaves a directory the next run can
replace, and a directory holding anything else is refused.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from torch_backport.patchset.driver import release_series
from torch_backport.infra.fsio import (atomic_write, is_our_temp, leftover_temps, refuse_link,
                                 refuse_links_below, fault_point)
from torch_backport.installed.install import find_install
from torch_backport.installed.pristine import base_files, this_install
from torch_backport.download.release_wheels import received_line, release_files
from torch_backport.patchset.apply import apply_series
from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import shown
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.identify import topic_files
from torch_backport.patchset.patchfile import confined
from torch_backport.infra.record import sha256_hex
from torch_backport.patchset.series import Applied, load_topic_series, Series, Topic, topics
from torch_backport.infra.tables import release_numbers

JOURNAL = ".overlay-journal"


def overlay_series(name: str, chosen: List[Topic], from_install: bool,
                   cache: Path) -> tuple[List[Series], Optional[str]]:
    """The series an overlay of `name` is made from, and the release whose
    files it starts from when that is not the base's own: a base names its
    own series (v2.11.0); any other release (2.12.1, v2.14.0) gets, for each
    topic, the series whose pristine files that release holds byte for byte."""
    if all((topic.directory(name) / "series").is_file() for topic in chosen):
        return load_topic_series(name, chosen), None
    version = name[1:] if name.startswith("v") else name
    if not release_numbers(version):
        raise Refused(f"--overlay {name}: not a base or a torch release (e.g. v2.11.0, 2.12.1)")
    paths = sorted({rel for topic in chosen for rel in topic_files(topic)})
    if from_install:
        install = find_install()
        if release_numbers(install.version) != release_numbers(version):
            raise Refused(f"{sys.executable} has torch {install.version}, not {version}")
        blobs = {rel: install.blob(rel) for rel in paths}
    else:
        files = release_files(version, paths, cache).files
        blobs = {rel: git_blob_id(files[rel]) if rel in files else None for rel in paths}
    return release_series(version, blobs, chosen, (), "using"), version


@dataclasses.dataclass
class Overlay:
    """What an overlay directory gets: each touched file patched, and where
    its pristine bytes came from."""
    every: List[Series]
    release: Optional[str]  # the release its files came from, if not the base's own
    source: str
    pristine: Dict[str, bytes]
    patched: Dict[str, bytes]

    def stamp(self) -> str:
        """The STAMP file: what the overlay was made from, by sha256."""
        touched = sorted(self.patched)
        lines = [f"base: {self.every[0].base}"]
        lines += [f"release: {self.release}"] if self.release else []
        lines += [f"source: {self.source}"]
        if [part.topic for part in self.every] != [topic for topic in topics()
                                                   if topic.applied is Applied.DEFAULT]:
            lines += ["topics: " + " ".join(part.topic.name for part in self.every)]
        lines += ["series:"]
        lines += [f"  {sha256_hex(p.read_bytes())}  {shown(p.path)}"
                  for part in self.every for p in part.patches]
        lines += ["pristine:"] + [f"  {sha256_hex(self.pristine[rel])}  {rel}" for rel in touched]
        lines += ["patched (also in SHA256SUMS):"]
        lines += [f"  {sha256_hex(self.patched[rel])}  {rel}" for rel in touched]
        return "\n".join(lines) + "\n"


def cmd_overlay(base: str, out: Path, from_install: bool, cache: Path,
                chosen: List[Topic]) -> int:
    made = plan_overlay(base, from_install, cache, chosen)
    write_overlay(made, out)
    for rel in sorted(made.patched):
        print(f"  {out / rel}")
    series = made.every[0]
    names = "" if len(made.every) == 1 and series.topic.primary else (
        " (topics: " + ", ".join(part.topic.name for part in made.every) + ")")
    what = f"torch {made.release} (base {series.base})" if made.release else series.base
    print(f"overlay for {what}{names} written to {out} "
          f"(verify: cd {out} && sha256sum -c SHA256SUMS)")
    if not from_install:
        print(received_line())
    return 0


def plan_overlay(base: str, from_install: bool, cache: Path, chosen: List[Topic]) -> Overlay:
    """The overlay of `base`, made in memory: each pristine file checked
    against pristine.tsv, then patched."""
    every, release = overlay_series(base, chosen, from_install, cache)
    made = Overlay(every, release, "", {}, {})
    for part in every:
        if from_install:
            files = this_install(part)
            made.source = f"installed torch of {sys.executable}"
        else:
            files = base_files(part, cache, version=release)
            made.source = f"torch {release or part.version} wheel from the package index"
        made.pristine.update(files)
        made.patched.update(apply_series(files, part))
    return made


def write_overlay(made: Overlay, out: Path) -> None:
    """Replace the overlay in `out` as a whole: the new files are staged
    beside it, and a journal names every file this run may write until the
    swap is done."""
    touched = sorted(made.patched)
    refuse_link(out, "directory")
    out.mkdir(parents=True, exist_ok=True)
    previous = previous_overlay_files(out)
    new_files = [*touched, "SHA256SUMS", "STAMP"]
    for rel in [*previous, *new_files, JOURNAL]:
        refuse_links_below(out, out / rel)
    for stale in [*(p for p in out.glob(".overlay-*") if p.name != JOURNAL),
                  *leftover_temps(out / JOURNAL)]:
        if stale.exists() or stale.is_symlink():  # left by a killed run
            fault_point(stale)
            shutil.rmtree(stale) if stale.is_dir() and not stale.is_symlink() else stale.unlink()
    staging = Path(tempfile.mkdtemp(prefix=".overlay-", dir=out))
    contents = dict(made.patched, SHA256SUMS="".join(
        f"{sha256_hex(made.patched[rel])}  {rel}\n" for rel in touched).encode(),
        STAMP=made.stamp().encode())
    try:
        for rel in new_files:
            fault_point(staging / rel)
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(contents[rel])
        swap_in(out, staging, previous, new_files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def swap_in(out: Path, staging: Path, previous: List[str], new_files: List[str]) -> None:
    """Remove the previous overlay's files and move the staged ones in.
    Until the journal is removed, every file it names counts as ours: a run
    killed while swapping files leaves a directory the next run can replace."""
    journal = sorted(set(previous) | set(new_files))
    fault_point(out / JOURNAL)
    atomic_write(out / JOURNAL, "".join(f"{rel}\n" for rel in journal).encode(), 0o644)
    for rel in previous:
        fault_point(out / rel)
        (out / rel).unlink()
    for directory in sorted({(out / rel).parent for rel in previous}, reverse=True):
        while directory != out and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent
    for rel in new_files:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        fault_point(out / rel)
        os.replace(staging / rel, out / rel)
    fault_point(out / JOURNAL)
    (out / JOURNAL).unlink()


def previous_overlay_files(out: Path) -> List[str]:
    """The files of an overlay generated here before, which may be replaced.
    Anything else in `out` (an installed torch, say) makes us refuse, and so
    does a listed path that would lead outside `out`."""
    listed: List[str] = []
    sums, journal = out / "SHA256SUMS", out / JOURNAL
    if sums.is_file() and (out / "STAMP").is_file():
        listed += [line.split("  ", 1)[1] for line in sums.read_text().splitlines()
                   if "  " in line]
    if journal.is_file():
        listed += [line for line in journal.read_text().splitlines() if line]
    outside = [rel for rel in listed
               if not (confined(rel) or rel in ("SHA256SUMS", "STAMP"))
               or not (out / rel).resolve().is_relative_to(out.resolve())]
    if outside:
        raise Refused(
            f"{sums if sums.is_file() else journal} names {outside[0]!r}, which is not a "
            f"file under torch/ inside {out}; nothing was written or deleted. Remove that "
            "line, or name a new directory")
    ours = (set(listed) | ({"SHA256SUMS", "STAMP"} if listed else set())
            | {"README.md", JOURNAL})
    foreign = [str(path.relative_to(out)) for path in sorted(out.rglob("*"))
               if path.is_file() and str(path.relative_to(out)) not in ours
               and not is_our_temp(path.name, JOURNAL)
               and not path.relative_to(out).parts[0].startswith(".overlay-")]
    if foreign:
        raise Refused(
            f"{out} holds files that this script did not generate (e.g. {foreign[0]}, "
            f"{len(foreign)} in all); nothing was written. Name an empty or new "
            "directory, or one holding an earlier overlay"
        )
    return sorted({rel for rel in listed if (out / rel).is_file()})
