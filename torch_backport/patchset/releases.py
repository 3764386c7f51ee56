"""The releases this project serves (patches/releases.tsv) and the text made
from them and the topics (patches/topics.tsv): the topic and release lines
of --help, and README's supported-releases table. A new release or topic is
one row; `scripts/update-docs` rewrites the README table, and the tool suite
fails while it is stale.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Dict, List, Optional

from torch_backport.infra import tables
from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import shown
from torch_backport.patchset.series import load_series, store, supported_bases, Topic

HAS_IT = "has it"  # the release has the topic's change upstream, and no series
NOT_YET = "not yet"  # scripts/new-base stopped at a conflict: no series for it yet


@dataclasses.dataclass(frozen=True)
class Release:
    """One row: a torch release and, per topic name, the base whose series
    its stock files get, or HAS_IT."""
    version: str
    bases: Dict[str, str]


def served() -> List[Release]:
    """Every row of patches/releases.tsv, in its order, each checked
    against the topics and series here (tables.py reads the file)."""
    rows = tables.read_releases(store().root)
    known = {topic.name: topic for topic in store().topics}
    unknown = [name for name in rows.topics if name not in known]
    if unknown:
        raise Refused(f"{shown(rows.path)}: its header names {unknown[0]}, which is not a topic")
    found = [Release(version, cells) for version, cells in rows.cells.items()]
    for release in found:
        for name, base in release.bases.items():
            if base not in (HAS_IT, NOT_YET) and base not in supported_bases(known[name]):
                raise Refused(f"{shown(rows.path)}: {release.version} names {base} for topic "
                              f"{name}, which has no series there")
    return found


def candidates() -> List[str]:
    """The releases of patches/candidates.tsv: series written by
    scripts/new-base whose matrix has not passed yet."""
    return tables.read_candidates(store().root)


def with_the_feature(topic: Topic) -> List[Release]:
    """The served releases that have `topic`'s feature and get fixes for it:
    those whose series does not add the feature."""
    return [release for release in served()
            if release.bases.get(topic.name, HAS_IT) not in (HAS_IT, NOT_YET)
            and not load_series(release.bases[topic.name], topic).adds_feature]


def nearest_row(version: str) -> "Release | None":
    """The row of `version`, else of the newest listed release below it."""
    rows = {release.version: release for release in served()}
    nearest = tables.read_releases(store().root).nearest_at_or_below(version)
    return rows[nearest] if nearest is not None else None


def known_defect(topic: Topic, version: str) -> Optional[str]:
    """For a torch `version` that has `topic`'s change and whose files match
    no series here: the releases on which this project knows the change to
    be defective ("2.12.0 through 2.15.0"), if the nearest listed release at
    or below it gets fixes for it; None where it has it upstream without fixes."""
    fixed = [release.version for release in with_the_feature(topic)]
    if not fixed:
        return None
    row = nearest_row(version)
    if row is not None and row.bases.get(topic.name) == HAS_IT:
        return None
    return f"{fixed[0]} through {fixed[-1]}"


def span(names: List[str]) -> str:
    """'2.12.0-2.15.0' for a run of names, one name alone, '' for none."""
    if not names:
        return ""
    return names[0] if len(names) == 1 else f"{names[0]}-{names[-1]}"


def help_topics() -> str:
    """The topic lines of --help, one entry per row of topics.tsv."""
    lines = []
    for topic in store().topics:
        where = "patches/<base>/" if topic.primary else f"patches/<base>/{topic.dir}/"
        entry = f"  {topic.name:<20}  ({topic.applied.value}) {topic.summary}; {where}"
        lines += textwrap.wrap(entry, width=79, subsequent_indent=" " * 24,
                               break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


def help_releases() -> str:
    pending = candidates()
    return ", ".join(release.version + (" (candidate)" if release.version in pending else "")
                     for release in served())
