"""The project's two tables and their one version order:
patches/releases.tsv (the releases served, and the series each topic's
identification must choose for each) and patches/candidates.tsv (releases
whose series scripts/new-base wrote and whose matrix has not passed yet).
Read and written here only; `releases.py` checks the rows against the
series and makes text of them. Nothing here knows what a series is."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import shown

RELEASES = "releases.tsv"
CANDIDATES = "candidates.tsv"
HEADER_PREFIX = "# release\t"
CANDIDATES_HEAD = [
    "# Releases whose series scripts/new-base wrote and whose matrix",
    "# (scripts/test.sh --releases X) has not passed yet: candidates, not served.",
    "# `scripts/new-base X --served` removes a row.",
    "# release"]
PRERELEASES = "prereleases.tsv"
PRERELEASES_HEAD = [
    "# Releases whose row scripts/new-base wrote from another index's files",
    "# (--index: a release candidate on torch's test index, published under the",
    "# final's number). `scripts/new-base --latest` checks the final's files",
    "# against the row by content on its day and removes the line.",
    "# release\tindex"]


def release_numbers(version: str) -> Tuple[int, ...]:
    """The one version order: '2.12.1+cu130' -> (2, 12, 1); 'v2.11.0' ->
    (2, 11, 0); '2.11.0a0+git1' -> (2, 11, 0); () for no version at all.
    A local label (+cpu) or a vendor suffix is the same release."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


@dataclasses.dataclass(frozen=True)
class Rows:
    """patches/releases.tsv as written: its topic columns, and per release
    (in file order) the cell of each topic."""
    path: Path
    topics: Tuple[str, ...]
    cells: Dict[str, Dict[str, str]]  # release -> topic -> cell

    @property
    def versions(self) -> List[str]:
        return list(self.cells)

    def nearest_at_or_below(self, version: str) -> Optional[str]:
        """The listed release of `version`, else the newest listed below it."""
        wanted = release_numbers(version)
        below = [v for v in self.cells if release_numbers(v) <= wanted]
        return max(below, key=release_numbers, default=None)

    def newest_below(self, version: str) -> Optional[str]:
        below = [v for v in self.cells if release_numbers(v) < release_numbers(version)]
        return max(below, key=release_numbers, default=None)


def read_releases(patches: Path) -> Rows:
    """Every row of <patches>/releases.tsv; Refused, naming the file and
    the row, for a missing header or a row of another width."""
    path = patches / RELEASES
    lines = path.read_text().splitlines()
    header = next((line[2:].split("\t") for line in lines if line.startswith(HEADER_PREFIX)),
                  None)
    if header is None:
        raise Refused(f"{shown(path)} has no '# release<TAB>topic...' header line")
    cells: Dict[str, Dict[str, str]] = {}
    rows = [line.split("\t") for line in lines if line.strip() and not line.startswith("#")]
    for number, row in enumerate(rows, 1):
        if len(row) != len(header):
            raise Refused(f"{shown(path)}: row {number} has {len(row)} fields, the header "
                          f"{len(header)}")
        cells[row[0]] = dict(zip(header[1:], row[1:]))
    return Rows(path, tuple(header[1:]), cells)


def with_release(rows: Rows, release: str, cells: Dict[str, str], default: str) -> str:
    """releases.tsv's text with `release`'s row set to `cells` (a topic
    not in `cells` keeps its earlier cell, else gets `default`): replaced in
    place, or inserted after the last release below it."""
    lines = rows.path.read_text().splitlines()
    kept = rows.cells.get(release, {})
    text = "\t".join([release] + [cells.get(name, kept.get(name, default))
                                  for name in rows.topics])
    if release in rows.cells:
        lines = [text if line.split("\t")[0] == release else line for line in lines]
    else:
        data = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
        below = [i for i in data
                 if release_numbers(lines[i].split("\t")[0]) < release_numbers(release)]
        at = (below[-1] + 1) if below else (data[0] if data else len(lines))
        lines.insert(at, text)
    return "\n".join(lines) + "\n"


def release_rows(patches: Path, name: str) -> Dict[str, str]:
    """A release list of patches/ (candidates.tsv, prereleases.tsv): each
    release -> the rest of its row ("" if none); empty if there is no file."""
    path = patches / name
    if not path.is_file():
        return {}
    return {release: rest for release, _, rest in (
        line.partition("\t") for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#"))}


def with_release_row(patches: Path, name: str, head: List[str], release: str,
                     row: Optional[str]) -> str:
    """That list's text with `release`'s row replaced by `row`, or removed (None)."""
    path = patches / name
    lines = path.read_text().splitlines() if path.is_file() else list(head)
    lines = [line for line in lines if line.split("\t")[0] != release]
    if row is not None:
        lines.append(row)
    return "\n".join(lines) + "\n"


def read_candidates(patches: Path) -> List[str]:
    """The releases of <patches>/candidates.tsv; none if there is no file."""
    return list(release_rows(patches, CANDIDATES))


def read_prereleases(patches: Path) -> Dict[str, str]:
    """<patches>/prereleases.tsv: release -> the index its files came from."""
    return release_rows(patches, PRERELEASES)


def with_prerelease(patches: Path, release: str, index: Optional[str]) -> str:
    """prereleases.tsv's text with `release` from `index`, or without it (None)."""
    return with_release_row(patches, PRERELEASES, PRERELEASES_HEAD, release,
                            None if index is None else f"{release}\t{index}")


def with_candidate(patches: Path, release: str, listed: bool) -> str:
    """candidates.tsv's text with `release` listed or not."""
    return with_release_row(patches, CANDIDATES, CANDIDATES_HEAD, release,
                            release if listed else None)
