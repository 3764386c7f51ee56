"""Which series a torch gets: decided by the bytes of the files the series
touch, the version string only breaking ties. Patch releases (2.12.1),
local build tags (+cpu, +cu130) and vendor builds (2.11.0a0+git...) are
where the two differ. Every mode identifies through `identify`; a checkout
adds only what its history tells (checkout/base.py)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterator, List, Mapping, Optional, Tuple

from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import shown
from torch_backport.patchset.series import (
    final_blobs,
    load_series,
    pristine_blobs,
    pristine_table,
    Series,
    supported_bases,
    Topic,
)
from torch_backport.infra.tables import release_numbers


def version_preference(base: str, version: Optional[str]) -> Tuple[int, Tuple[int, ...]]:
    """Sort key among bases that match equally well: the base the version
    names, then the nearest base below it, then the nearest above."""
    if not version:
        return (3, ())
    have, wanted = release_numbers(base), release_numbers(version)
    if have == wanted:
        return (0, ())
    if have < wanted:
        return (1, tuple(-part for part in have))
    return (2, have)


def topic_files(topic: Topic) -> List[str]:
    """Every file that some base's series of `topic` touches (the union of
    their pristine.tsv): what identification reads."""
    files: set[str] = set()
    for base in supported_bases(topic):
        files.update(pristine_table(load_series(base, topic)))
    return sorted(files)


class Match(enum.Enum):
    """How a torch's files match a series' base."""
    PRISTINE = "pristine"  # every file the series touches is the base's
    PATCHED = "patched"  # every file is what the series makes of the base's
    CLOSEST = "closest"  # neither: the nearest base, for the message


@dataclasses.dataclass(frozen=True)
class Identified:
    """The series a tree or install gets, and why."""
    topic: Topic
    series: Optional[Series]  # None: the topic has no series at all
    how: Match
    same: Tuple[str, ...]  # files holding the base's pristine or patched blob
    differing: Tuple[str, ...]  # the others

    @property
    def exact(self) -> bool:
        return self.how is not Match.CLOSEST

    def reason(self) -> str:
        assert self.series is not None
        base, total = self.series.base, len(self.same) + len(self.differing)
        files = (f"the {total} files the series touches are" if total > 1
                 else "the one file the series touches is")
        if self.how is Match.PRISTINE:
            return f"{files} byte-identical to {base}'s"
        if self.how is Match.PATCHED:
            return f"{files} byte-identical to what {base}'s series makes of them"
        differ = ", ".join(self.differing) + (" differs" if len(self.differing) == 1
                                              else " differ")
        if not self.same:
            return f"{differ} from every base's (nearest by version: {base})"
        return (f"{len(self.same)} of {total} files the series touches are identical "
                f"to {base}'s, the closest base; {differ}")


def identify(topic: Topic, blobs: Mapping[str, Optional[str]],
             version: Optional[str] = None, among: Optional[List[str]] = None) -> Identified:
    """The base of `topic` whose pristine files (or whose series' patched
    files) `blobs` (path -> git blob id, None for a missing file) hold
    exactly; without an exact match, the closest. Ties go to the base that
    `version` names, then to the nearest base below it. `among` limits the
    candidates (a checkout: the bases its history held)."""
    ranked = []
    for base in supported_bases(topic) if among is None else among:
        series = load_series(base, topic)
        pristine, patched = pristine_blobs(series), final_blobs(series)
        files = sorted(set(pristine) | set(patched))
        as_pristine = [rel for rel in files if blobs.get(rel) == pristine.get(rel)]
        as_patched = [rel for rel in files if blobs.get(rel) == patched.get(rel, pristine.get(rel))]
        either = [rel for rel in files if rel in as_pristine or rel in as_patched]
        if len(as_pristine) == len(files):
            how, same = Match.PRISTINE, as_pristine
        elif len(as_patched) == len(files):
            how, same = Match.PATCHED, as_patched
        else:
            how, same = Match.CLOSEST, either
        differing = [rel for rel in files if rel not in same]
        key = (how is Match.CLOSEST, -len(same) / len(files),
               version_preference(base, version))
        ranked.append((key, Identified(topic, series, how, tuple(same), tuple(differing))))
    if not ranked:
        return Identified(topic, None, Match.CLOSEST, (), ())
    ranked.sort(key=lambda item: item[0])
    return ranked[0][1]


def series_by_content(version: str, blobs: Mapping[str, Optional[str]], chosen: List[Topic],
                      optional: Tuple[Topic, ...] = ()) -> Iterator[Identified]:
    """Each chosen topic's identification for a release whose touched files
    have these `blobs`, in order: its series is the base whose pristine files
    they are, byte for byte (the overlay and the patched wheel start from a
    release's own files). A topic in `optional` without one comes out as it
    is (not "pristine": left out); any other is refused, as are files that a
    series already patched."""
    for topic in chosen:
        found = identify(topic, blobs, version)
        if found.series is not None and found.how is Match.PATCHED:
            raise Refused(f"torch {version}: its files are already patched by "
                          f"{shown(found.series.directory)}; nothing was written")
        if (found.series is None or found.how is not Match.PRISTINE) and topic not in optional:
            detail = f" ({found.reason()})" if found.series is not None else ""
            what = topic.of_topic("of")
            raise Refused(f"torch {version}: no series{what} matches its files{detail}; "
                          "nothing was written")
        yield found
