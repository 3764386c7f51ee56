"""The base of a git checkout, per topic: the one whose series is (partly)
in HEAD's history, else the one whose pristine files HEAD holds, else the
one whose files HEAD's history held, else the closest one whose pristine
blobs the repository has (a 3-way merge needs them). Identification by
content is `identify.identify`'s; this adds only what the history and the
object store tell. Found once per topic and command (`Tree.base`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set, Union

from torch_backport.infra.errors import Refused
from torch_backport.infra.git import Git
from torch_backport.checkout.history import find_series_commits, History
from torch_backport.patchset.identify import identify, Identified, Match
from torch_backport.patchset.series import (load_series, pristine_blobs, Series,
                                            supported_bases, Topic)


@dataclass
class Base:
    series: Series
    reason: str
    exact: bool


class Tree:
    """A checkout as one command reads it: its git runner, HEAD's history
    over the chosen topics' files, and each topic's base, found once."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.git: Git = history.git
        self.path: Path = history.git.repo
        self._bases: Dict[str, Union[Base, Refused]] = {}

    def base(self, topic: Topic) -> Base:
        """The base of the checkout for `topic` (`find_base`), or the
        refusal that says why there is none: answered once per command."""
        if topic.name not in self._bases:
            try:
                self._bases[topic.name] = find_base(self.history, topic)
            except Refused as problem:
                self._bases[topic.name] = problem
        found = self._bases[topic.name]
        if isinstance(found, Refused):
            raise found
        return found


def find_base(history: History, topic: Topic) -> Base:
    """History first, then content, then the closest base a 3-way merge can use."""
    found = base_in_history(history, topic)
    if found is not None:
        return found
    # Not in the history: the content answer is the series model's.
    by_content = identify(topic, history.head)
    if by_content.series is not None and by_content.how is Match.PRISTINE:
        return Base(by_content.series, by_content.reason(), True)
    floor = history.floor_bases(topic)
    if floor:
        # HEAD's history holds a base's pristine files (a release branch
        # with local changes on top): that base, with a 3-way merge.
        below = identify(topic, history.head, among=floor)
        assert below.series is not None
        base = below.series.base
        changed = (f"; {', '.join(below.differing)} changed since" if below.differing
                   else "")
        return Base(below.series, f"{len(below.same)} of {len(below.same) + len(below.differing)}"
                    f" files the series touches are identical to {base}'s{changed}; HEAD's "
                    f"history holds {base}'s files, so the series goes in with a 3-way merge "
                    "(git am -3)", False)
    if by_content.series is None:
        raise Refused(f"topic {topic.name} has no series for any base")
    return closest_mergeable_base(history, topic, by_content)


def base_in_history(history: History, topic: Topic) -> Optional[Base]:
    """The base whose series is (partly) in HEAD's history, if any.

    Bases share patch subjects (one concern, one subject on every base),
    and some topics' patches have the same patch-id on several bases: the
    base whose pristine files lie below the series wins, then the one
    matched by patch-id over one matched by subject."""
    in_history = []
    floor = history.floor_bases(topic)
    for name in supported_bases(topic):
        series = load_series(name, topic)
        exact: List[str] = []
        found = find_series_commits(history, series, exact)
        count = sum(1 for commit in found.values() if commit)
        if count:
            in_history.append((name in floor, len(exact), count, series))
    if not in_history:
        return None
    _, _, count, series = max(in_history, key=lambda found: found[:3])
    return Base(series, f"{count} of {len(series.patches)} patches of its series "
                "are in HEAD's history", False)


def closest_mergeable_base(history: History, topic: Topic, by_content: Identified) -> Base:
    """The closest base whose pristine blobs this repository has: a 3-way
    merge needs the pre-images."""
    pristine = {name: set(pristine_blobs(load_series(name, topic)).values())
                for name in supported_bases(topic)}
    stored = stored_blobs(history.git, sorted(set().union(*pristine.values())))
    mergeable = [name for name, blobs in pristine.items() if blobs <= stored]
    if mergeable:
        closest = identify(topic, history.head, among=mergeable)
        assert closest.series is not None
        return Base(closest.series, f"{closest.reason()}; {closest.series.base}'s blobs are "
                    "in this repository, so the series goes in with a 3-way merge (git am -3)",
                    False)
    raise Refused(
        "unknown base: the files the series touches match no supported base "
        f"({', '.join(supported_bases(topic))}): {by_content.reason()}; and the pre-images "
        "that a 3-way merge needs are not in this repository; check out a supported "
        "release first"
    )


def stored_blobs(git: Git, blobs: List[str]) -> Set[str]:
    """Which of `blobs` the repository's object store has (one git process)."""
    listed = git("cat-file", "--batch-check", input="".join(f"{b}\n" for b in blobs))
    return {line.split()[0] for line in listed.stdout.splitlines()
            if not line.endswith(" missing")}
