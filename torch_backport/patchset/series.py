"""The series model that every path uses: the topics, the bases, each
topic's series for a base (its patches in order, the files they touch) and
the base's pristine files as pristine.tsv names them.

An installed wheel (installed/mode.py), a checkout (checkout/mode.py), the
overlay (overlay.py), scripts/check-patches and the tests all read a series
through `load_series`, which refuses a series with a patch that is not whole
(patchfile.py) before anything is written. Applying it in memory is
apply.py; which series a torch gets, identify.py.

Topics, bases and series are data. patches/topics.tsv names the topics; a
topic's series for a base lives in patches/<base>/<dir>/ (the default topic's
dir is `.`, patches/<base>/ itself): `series` lists the patches in order,
`pristine.tsv` names the pristine files' git blob ids and sha256.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import REPO, shown
from torch_backport.patchset.patchfile import parse_patch, Patch
from torch_backport.infra.tables import release_numbers

PATCHES = REPO / "patches"


class Applied(enum.Enum):
    """When a topic is applied (topics.tsv's third column)."""
    DEFAULT = "default"  # when no --topic is given
    OPT_IN = "opt-in"  # only when named with --topic


@dataclasses.dataclass(frozen=True)
class Topic:
    """One row of patches/topics.tsv."""
    name: str
    dir: str  # under patches/<base>/; "." is patches/<base>/ itself
    applied: Applied
    feature_file: str  # the file in which the feature shows
    feature_marker: str  # regex for a line that only a torch with the feature has
    present: str  # how to say that a torch has it, e.g. "x already exists"
    summary: str
    store: "Store" = dataclasses.field(compare=False, repr=False)  # where it was read

    @property
    def primary(self) -> bool:
        """The original series, in patches/<base>/ itself: it keeps the state
        directory and messages it had before there were topics."""
        return self.dir == "."

    def unless_primary(self, form: str) -> str:
        """How a message names this topic: not at all for the original series
        (its messages are those it had before there were topics), else `form`
        with {name} filled in. Every label is made here."""
        return "" if self.primary else form.format(name=self.name)

    def prefixed(self, text: str) -> str:
        """`text` as said of this topic: after "topic NAME: " for the others."""
        return self.unless_primary("topic {name}: ") + text

    def of_topic(self, preposition: str) -> str:
        """e.g. " of topic NAME" (nothing for the original series)."""
        return self.unless_primary(f" {preposition} topic {{name}}")

    def left_alone_unless(self, named: bool) -> bool:
        """Whether a run leaves this topic alone where no series of it fits
        (saying "not available"): a topic other than the original one that the
        user did not name."""
        return not named and not self.primary

    def has_feature(self, data: bytes) -> bool:
        return re.search(self.feature_marker, data.decode("utf-8", "replace"),
                         re.MULTILINE) is not None

    def directory(self, base: str) -> Path:
        root = self.store.root
        return root / base if self.primary else root / base / self.dir


@dataclasses.dataclass(frozen=True)
class Store:
    """A patches directory: its topics (topics.tsv) and each topic's series
    per base, each read once. The package's own is `store()`;
    scripts/check-patches and the tests open others."""
    root: Path
    _series: Dict[Tuple[str, str], Series] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)

    @functools.cached_property
    def topics(self) -> Tuple[Topic, ...]:
        """Every topic, in the order of topics.tsv."""
        found: List[Topic] = []
        topics_file = self.root / "topics.tsv"
        if not topics_file.is_file():
            raise Refused(f"{shown(topics_file)} is missing: it names the topics")
        for number, line in enumerate(topics_file.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 7 or fields[2] not in ("default", "opt-in"):
                raise Refused(f"{shown(topics_file)}:{number}: expected 7 tab-separated "
                              "fields: name, dir, default|opt-in, feature file, feature "
                              "marker, present, summary")
            name, directory, applied, feature_file, marker, present, summary = fields
            found.append(Topic(name, directory, Applied(applied), feature_file, marker, present,
                               summary, store=self))
        return tuple(found)

    @property
    def primary(self) -> Topic:
        """The original topic (<base>/ itself), which keeps the state
        directory and wording it had before there were topics. Not the same
        as the default topics, `select(None)`: every topic marked default."""
        return next(topic for topic in self.topics if topic.primary)

    def bases(self, topic: Topic) -> List[str]:
        """The bases that have a series for `topic`, oldest first."""
        return sorted((p.name for p in self.root.iterdir()
                       if (topic.directory(p.name) / "series").is_file()), key=release_numbers)

    def series(self, base: str, topic: Topic) -> Series:
        """`topic`'s series for `base`, read and checked once (`load_series`)."""
        key = (base, topic.name)
        if key not in self._series:
            self._series[key] = read_series(base, topic)
        return self._series[key]

    def select(self, names: Optional[List[str]]) -> List[Topic]:
        """The topics `--topic` names (in topics.tsv order; "all" is every
        topic, "default" the default ones, so `default,cpu-isa-probe` adds an
        opt-in topic to them); without names, the default ones. Every name is
        checked before any is taken."""
        known = self.topics
        if not names:
            return [topic for topic in known if topic.applied is Applied.DEFAULT]
        wanted = {part for name in names for part in name.split(",") if part}
        unknown = sorted(wanted - {topic.name for topic in known} - {"all", "default"})
        if unknown:
            raise Refused(f"unknown topic {unknown[0]!r}; topics: "
                          + ", ".join(f"{t.name} ({t.applied.value})" for t in known)
                          + ", default, all")
        return [topic for topic in known
                if "all" in wanted or topic.name in wanted
                or ("default" in wanted and topic.applied is Applied.DEFAULT)]


@functools.lru_cache(maxsize=None)
def store(root: Path = PATCHES) -> Store:
    """The store of `root`, one per directory (the package's own by default)."""
    return Store(root)


def topics() -> List[Topic]:
    """Every topic of the package's store, in the order of topics.tsv."""
    return list(store().topics)


def primary_topic() -> Topic:
    return store().primary


def select_topics(names: Optional[List[str]]) -> List[Topic]:
    """`Store.select` of the package's store."""
    return store().select(names)


@dataclasses.dataclass
class Series:
    base: str  # e.g. "v2.11.0"
    directory: Path
    patches: List[Patch]
    touched: List[str]  # paths relative to site-packages / checkout root
    topic: Topic

    @property
    def version(self) -> str:
        return self.base[1:]

    @property
    def adds_feature(self) -> bool:
        """Whether the series brings its topic's feature itself (pre_grad_pass_timing
        before 2.12) or only fixes a base that has it (2.12.0 and later)."""
        marker = re.compile(self.topic.feature_marker)
        return any(line.startswith("+") and not line.startswith("+++")
                   and marker.search(line[1:])
                   for patch in self.patches for line in patch.read_text().splitlines())


def supported_bases(topic: Optional[Topic] = None) -> List[str]:
    """The bases that have a series for `topic` (the primary topic if None)."""
    chosen = topic or primary_topic()
    return chosen.store.bases(chosen)


def fixed_bases(topic: Topic) -> List[str]:
    """The bases whose series of `topic` only fixes a release that has the
    topic's change (it adds no feature line): 2.12.0 and later for the
    original topic."""
    return [base for base in supported_bases(topic) if not load_series(base, topic).adds_feature]


def series_entries(series_file: Path) -> List[Tuple[int, str]]:
    """(line number, patch file name) of each entry; `#` starts a comment."""
    entries = []
    for number, line in enumerate(series_file.read_text().splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            entries.append((number, entry))
    return entries


def load_series(base: str, topic: Optional[Topic] = None) -> Series:
    """`topic`'s series for `base` (the primary topic's if None), from the
    store the topic was read from."""
    chosen = topic or primary_topic()
    return chosen.store.series(base, chosen)


def read_series(base: str, topic: Topic) -> Series:
    directory = topic.directory(base)
    series_file = directory / "series"
    if not series_file.is_file():
        what = topic.of_topic("in")
        raise Refused(f"no series for base {base!r}{what}; supported bases: "
                      + ", ".join(supported_bases(topic)))
    patches: List[Patch] = []
    problems: List[str] = []
    for number, entry in series_entries(series_file):
        path = directory / entry
        if "/" in entry or not path.is_file():
            problems.append(f"{shown(series_file)}:{number}: {entry} does not exist")
            continue
        patch, found = parse_patch(path)
        problems += found
        if patch is not None:
            patches.append(patch)
    if problems:
        raise Refused("the series is not whole, nothing was changed:\n  " + "\n  ".join(problems))
    touched: List[str] = []
    for patch in patches:
        for diff in patch.files:
            if diff.path not in touched:
                touched.append(diff.path)
    return Series(base, directory, patches, sorted(touched), topic)


def shared_files(every: List[Series]) -> List[str]:
    """Files that two of these series (one base, different topics) both patch.
    Topics are applied and reverted on their own, so they must not share one."""
    owner: Dict[str, str] = {}
    problems: List[str] = []
    for series in every:
        for rel in series.touched:
            if rel in owner:
                problems.append(f"{series.base}: topics {owner[rel]} and "
                                f"{series.topic.name} both patch {rel}")
            else:
                owner[rel] = series.topic.name
    return problems


def load_topic_series(base: str, chosen: List[Topic], skip_missing: bool = False
                      ) -> List[Series]:
    """The series of `base` for each chosen topic (with `skip_missing`, only
    the topics that have one); refuses two topics that patch the same file."""
    every = [load_series(base, topic) for topic in chosen
             if not skip_missing or (topic.directory(base) / "series").is_file()]
    refuse_shared_files(every)
    return every


def refuse_shared_files(every: List[Series]) -> None:
    problems = shared_files(every)
    if problems:
        raise Refused("topics that patch the same file:\n  " + "\n  ".join(problems)
                      + "\nthey cannot be applied together; nothing was changed")


def pristine_table(series: Series) -> Dict[str, Tuple[str, str]]:
    """path -> (git blob sha1, sha256) of the base's pristine files (pristine.tsv)."""
    table = series.directory / "pristine.tsv"
    result: Dict[str, Tuple[str, str]] = {}
    for line in table.read_text().splitlines():
        if line and not line.startswith("#"):
            path, blob, digest = line.split("\t")
            result[path] = (blob, digest)
    return result


def pristine_sha256(series: Series) -> Dict[str, str]:
    """path -> sha256 (hex) of the base's pristine file (pristine.tsv)."""
    return {path: row[1] for path, row in pristine_table(series).items()}


def pristine_blobs(series: Series) -> Dict[str, str]:
    """path -> git blob id of the base's pristine file (pristine.tsv)."""
    return {path: row[0] for path, row in pristine_table(series).items()}


def final_blobs(series: Series) -> Dict[str, str]:
    """path -> the git blob the whole series leaves each file as."""
    blobs: Dict[str, str] = {}
    for patch in series.patches:
        for diff in patch.files:
            blobs[diff.path] = diff.post_blob
    return blobs
