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
import secrets
import stat
import sys
from pathlib import Path
from typing import Dict, List, Optional

from torch_backport.patchset.driver import release_series
from torch_backport.infra.dirfd import Dir, parent_and_name, remove_tree_at
from torch_backport.infra.fsio import (fault_point, is_our_temp, read_regular, refuse_link,
                                       refuse_links_below)
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
from torch_backport.infra.exit_codes import Exit

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
    return Exit.OK


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
    swap is done. Every write, rename and removal is relative to `out` and
    the directories below it opened once (dirfd.py): a directory swapped
    for a link after the checks redirects nothing."""
    touched = sorted(made.patched)
    refuse_link(out, "directory")
    out.mkdir(parents=True, exist_ok=True)
    previous = previous_overlay_files(out)
    new_files = [*touched, "SHA256SUMS", "STAMP"]
    for rel in [*previous, *new_files, JOURNAL]:
        refuse_links_below(out, out / rel)
    contents = dict(made.patched, SHA256SUMS="".join(
        f"{sha256_hex(made.patched[rel])}  {rel}\n" for rel in touched).encode(),
        STAMP=made.stamp().encode())
    with Dir.open(out) as top:
        for stale in top.names():  # left by a killed run
            if (stale.startswith(".overlay-") and stale != JOURNAL) or is_our_temp(stale, JOURNAL):
                found = top.lstat(stale)
                if found is not None and stat.S_ISDIR(found.st_mode):
                    top.remove_tree(stale)
                else:
                    top.unlink(stale)
        staging = f".overlay-{secrets.token_hex(8)}"
        top.mkdir(staging, 0o755)
        try:
            with top.sub(staging) as staged:
                for rel in new_files:
                    parent, name = parent_and_name(staged, rel, make_mode=0o755)
                    with parent:
                        fault_point(parent.path / name)
                        parent.new_file(name, contents[rel], 0o644)
                swap_in(top, staged, previous, new_files)
        finally:
            try:
                remove_tree_at(top.fd, staging)
            except OSError:
                pass


def swap_in(top: Dir, staged: Dir, previous: List[str], new_files: List[str]) -> None:
    """Remove the previous overlay's files and move the staged ones in.
    Until the journal is removed, every file it names counts as ours: a run
    killed while swapping files leaves a directory the next run can replace."""
    journal = sorted(set(previous) | set(new_files))
    fault_point(top.path / JOURNAL)
    top.atomic_write(JOURNAL, "".join(f"{rel}\n" for rel in journal).encode(), 0o644)
    for rel in previous:
        parent, name = parent_and_name(top, rel)
        with parent:
            parent.unlink(name)
    for folder in sorted({Path(rel).parent.parts for rel in previous}, reverse=True):
        remove_empty_folders(top, folder)
    for rel in new_files:
        source, name = parent_and_name(staged, rel)
        with source, top.walk(Path(rel).parts[:-1], make_mode=0o755) as into:
            source.replace(name, name, into=into)
    top.unlink(JOURNAL)


def remove_empty_folders(top: Dir, folder: tuple) -> None:  # type: ignore[type-arg]
    """`folder` (path parts below `top`) and each folder above it, up to
    `top`, while they are empty."""
    while folder:
        try:
            with top.walk(folder[:-1]) as parent, parent.sub(folder[-1]) as directory:
                if directory.names():
                    return
                os.rmdir(folder[-1], dir_fd=parent.fd)
        except FileNotFoundError:
            pass
        folder = folder[:-1]


def text_of(path: Path) -> str:
    """A listing the overlay left, read as a regular file, bounded."""
    return read_regular(path).decode("utf-8", "replace")


def previous_overlay_files(out: Path) -> List[str]:
    """The files of an overlay generated here before, which may be replaced.
    Anything else in `out` (an installed torch, say) makes us refuse, and so
    does a listed path that would lead outside `out`."""
    listed: List[str] = []
    sums, journal = out / "SHA256SUMS", out / JOURNAL
    if sums.is_file() and (out / "STAMP").is_file():
        listed += [line.split("  ", 1)[1] for line in text_of(sums).splitlines()
                   if "  " in line]
    if journal.is_file():
        listed += [line for line in text_of(journal).splitlines() if line]
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
