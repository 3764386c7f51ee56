"""The series model that every path uses: bases, their patches, what each
patch touches, and whether a patch is whole.

An installed wheel (wheel_mode.py), a checkout (checkout_mode.py), the
overlay (overlay.py), scripts/check-patches and the tests all read a series through
`load_series`, which refuses a patch that is not whole before anything is
written: a file section missing from what the diffstat announces, a hunk cut
short, a line count that does not add up, a path outside `torch/`. Applying
(`apply_series`) then checks that every file a patch touches ends as the
post-image blob its `index` line names, so a hand-edited patch that still
applies is refused too.

Topics, bases and series are data. patches/topics.tsv names the topics; a
topic's series for a base lives in patches/<base>/<dir>/ (the default topic's
dir is `.`, patches/<base>/ itself): `series` lists the patches in order,
`pristine.tsv` names the pristine files' git blob ids and sha256.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

PACKAGE = Path(__file__).resolve().parent
# A clone keeps patches/ beside the package; the installed package carries
# them inside (setup.cfg maps patches/ to torch_backport/patches).
REPO = PACKAGE if (PACKAGE / "patches").is_dir() else PACKAGE.parent
PATCHES = REPO / "patches"
# Every file a series may touch lives under one of these (relative, no "..").
ALLOWED_ROOTS = ("torch/",)
DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: \d+)?$")
STAT_LINE_RE = re.compile(r"^ (\S.*?)\s+\|\s+\d+")
STAT_SUMMARY_RE = re.compile(
    r"^ (\d+) files? changed(?:, (\d+) insertions?\(\+\))?(?:, (\d+) deletions?\(-\))?$")
SUBJECT_RE = re.compile(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n .*)*)", re.MULTILINE)


class Refused(Exception):
    """A problem the user must fix; the message says what and where."""


def shown(path: Path) -> str:
    """A path as the user should read it: relative to the repository if inside."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


@dataclasses.dataclass(frozen=True)
class Hunk:
    old_start: int
    old_lines: int
    new_lines: int


@dataclasses.dataclass(frozen=True)
class FileDiff:
    path: str
    pre_blob: str
    post_blob: str
    hunks: Tuple[Hunk, ...]
    added: int
    removed: int


@dataclasses.dataclass(frozen=True)
class Patch:
    path: Path
    subject: str
    files: Tuple[FileDiff, ...]

    @property
    def name(self) -> str:
        return self.path.name

    def read_text(self) -> str:
        return self.path.read_text()

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


@dataclasses.dataclass(frozen=True)
class Topic:
    """One row of patches/topics.tsv."""
    name: str
    dir: str  # under patches/<base>/; "." is patches/<base>/ itself
    applied: str  # "default": applied when no --topic is given; "opt-in"
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

    def named(self, form: str) -> str:
        """How a message names this topic: not at all for the original series
        (its messages are those it had before there were topics), else `form`
        with {name} filled in. Every label is made here."""
        return "" if self.primary else form.format(name=self.name)

    def label(self, text: str) -> str:
        """`text` as said of this topic: after "topic NAME: " for the others."""
        return self.named("topic {name}: ") + text

    def qualified(self, preposition: str) -> str:
        """e.g. " of topic NAME" (nothing for the original series)."""
        return self.named(f" {preposition} topic {{name}}")

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
            found.append(Topic(name, directory, applied, feature_file, marker, present,
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
        def key(name: str) -> Tuple[int, ...]:
            return tuple(int(part) for part in re.findall(r"\d+", name))

        return sorted((p.name for p in self.root.iterdir()
                       if (topic.directory(p.name) / "series").is_file()), key=key)

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
            return [topic for topic in known if topic.applied == "default"]
        wanted = {part for name in names for part in name.split(",") if part}
        unknown = sorted(wanted - {topic.name for topic in known} - {"all", "default"})
        if unknown:
            raise Refused(f"unknown topic {unknown[0]!r}; topics: "
                          + ", ".join(f"{t.name} ({t.applied})" for t in known) + ", default, all")
        return [topic for topic in known
                if "all" in wanted or topic.name in wanted
                or ("default" in wanted and topic.applied == "default")]


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


def confined(path: str) -> bool:
    pure = PurePosixPath(path)
    return (not pure.is_absolute() and ".." not in pure.parts and "\\" not in path
            and path.startswith(ALLOWED_ROOTS))


def parse_patch(patch: Path) -> Tuple[Optional[Patch], List[str]]:
    """The patch and the problems that make it not whole (empty when whole)."""
    text = patch.read_text(errors="replace")
    where = shown(patch)
    problems: List[str] = []
    subject = SUBJECT_RE.search(text.split("\n\n", 1)[0])
    head, _, _ = text.partition("\ndiff --git ")
    sections = [m for m in DIFF_RE.finditer(text)]
    if not sections:
        return None, [f"{where}: no 'diff --git' section: not a patch, or cut before its diff"]
    files: List[FileDiff] = []
    for number, match in enumerate(sections):
        old, new = match.group(1), match.group(2)
        end = sections[number + 1].start() if number + 1 < len(sections) else len(text)
        body = text[match.end():end].split("\n")[1:]
        if old != new:
            problems.append(f"{where}: renames are not supported ({match.group(0)})")
        if not confined(new):
            problems.append(f"{where}: {new}: only relative paths under "
                            f"{', '.join(ALLOWED_ROOTS)} may be patched")
        file_problems, diff = parse_file_section(where, new, body)
        problems += file_problems
        if diff is not None:
            files.append(diff)
    problems += diffstat_problems(where, head, [m.group(2) for m in sections], files)
    if problems:
        return None, problems
    return Patch(patch, subject.group(1).replace("\n ", " ") if subject else "",
                 tuple(files)), []


def diffstat_problems(where: str, head: str, section_paths: List[str],
                      files: List[FileDiff]) -> List[str]:
    """What the diffstat in the patch's `head` announces and the diff
    sections do not hold: a file, a file count, a line count."""
    problems: List[str] = []
    stat_files = [m.group(1) for m in map(STAT_LINE_RE.match, head.splitlines()) if m]
    summary = next((m for m in map(STAT_SUMMARY_RE.match, head.splitlines()) if m), None)
    for stat in stat_files:
        if stat.startswith(".../"):
            found = any(p.endswith(stat[3:]) for p in section_paths)
        else:
            found = stat in section_paths
        if not found:
            problems.append(f"{where}: the diffstat names {stat}, but the patch has no "
                            "diff for it (cut short?)")
    if summary is None:
        if stat_files or "\n---\n" in head:
            problems.append(f"{where}: the diffstat has no 'N files changed' line")
        return problems
    count, added, removed = (int(summary.group(1)), int(summary.group(2) or 0),
                             int(summary.group(3) or 0))
    if count != len(section_paths):
        problems.append(f"{where}: the diffstat says {count} file(s) changed, the patch "
                        f"has {len(section_paths)} diff section(s)")
    hunk_added, hunk_removed = sum(f.added for f in files), sum(f.removed for f in files)
    if files and (added, removed) != (hunk_added, hunk_removed):
        problems.append(
            f"{where}: the diffstat says {added} insertion(s) and {removed} deletion(s), "
            f"the hunks add {hunk_added} and remove {hunk_removed} line(s) (a hunk edited "
            "or cut?)")
    return problems


def read_hunk(body: List[str], line: int, old_len: int, new_len: int
              ) -> Tuple[int, int, int, int, int]:
    """Read a hunk's lines from body[line] on, up to the counts its header
    gives: (the line after it, old and new lines seen, lines added, removed)."""
    old_seen = new_seen = added = removed = 0
    while line < len(body) and (old_seen < old_len or new_seen < new_len):
        text = body[line]
        if text.startswith("\\"):  # "\ No newline at end of file"
            line += 1
            continue
        kind = text[:1]
        if kind == " " or text == "":
            old_seen += 1
            new_seen += 1
        elif kind == "-":
            old_seen += 1
            removed += 1
        elif kind == "+":
            new_seen += 1
            added += 1
        else:
            break
        line += 1
    return line, old_seen, new_seen, added, removed


def parse_file_section(where: str, path: str, body: List[str]
                       ) -> Tuple[List[str], Optional[FileDiff]]:
    problems: List[str] = []
    index = next((INDEX_RE.match(line) for line in body[:6] if line.startswith("index ")), None)
    if index is None:
        return [f"{where}: {path}: no 'index A..B' line"], None
    pre, post = index.group(1), index.group(2)
    if len(pre) != 40 or len(post) != 40:
        problems.append(f"{where}: {path}: 'index {pre}..{post}' is not a full-length blob "
                        "pair (format-patch --full-index; git am -3 needs it)")
    hunks: List[Hunk] = []
    added = removed = 0
    line = 0
    while line < len(body) and not body[line].startswith("@@"):
        line += 1
    while line < len(body):
        header = HUNK_RE.match(body[line])
        if header is None:
            break  # the signature, or the end of this section
        old_len = 1 if header.group(2) is None else int(header.group(2))
        new_len = 1 if header.group(4) is None else int(header.group(4))
        line, old_seen, new_seen, plus, minus = read_hunk(body, line + 1, old_len, new_len)
        added, removed = added + plus, removed + minus
        if (old_seen, new_seen) != (old_len, new_len):
            problems.append(
                f"{where}: {path}: hunk @@ -{header.group(1)} has {old_seen} of {old_len} "
                f"old and {new_seen} of {new_len} new line(s) (cut short or edited)")
            return problems, None
        while line < len(body) and body[line].startswith("\\"):
            line += 1
        hunks.append(Hunk(int(header.group(1)), old_len, new_len))
    if not hunks:
        problems.append(f"{where}: {path}: no hunk")
    if problems:
        return problems, None
    return problems, FileDiff(path, pre, post, tuple(hunks), added, removed)


def load_series(base: str, topic: Optional[Topic] = None) -> Series:
    """`topic`'s series for `base` (the primary topic's if None), from the
    store the topic was read from."""
    chosen = topic or primary_topic()
    return chosen.store.series(base, chosen)


def read_series(base: str, topic: Topic) -> Series:
    directory = topic.directory(base)
    series_file = directory / "series"
    if not series_file.is_file():
        what = topic.qualified("in")
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


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def apply_series(pristine: Dict[str, bytes], series: Series) -> Dict[str, bytes]:
    """The patched contents: each patch applied with `git apply` (no fuzz), and
    every file it touches checked against the post-image blob of its `index`
    line."""
    versions = apply_each(pristine, series)
    return versions[-1] if versions else dict(pristine)


def apply_each(pristine: Dict[str, bytes], series: Series) -> List[Dict[str, bytes]]:
    """As apply_series, but the contents after each patch, in series order (a
    3-way merge needs every intermediate pre-image)."""
    # A run checks every topic before it writes any, then applies them: the
    # same patches to the same bytes, which git then applies once.
    patches = tuple(series.patches)
    texts = tuple(patch.read_bytes() for patch in patches)
    versions = _apply_each_once(tuple(pristine.items()), patches, texts, series.base)
    return [dict(version) for version in versions]


@functools.lru_cache(maxsize=16)
def _apply_each_once(pristine_items: Tuple[Tuple[str, bytes], ...], patches: Tuple[Patch, ...],
                     texts: Tuple[bytes, ...], base: str
                     ) -> Tuple[Tuple[Tuple[str, bytes], ...], ...]:
    # `texts`, the patches' bytes, are part of the key only: a patch file
    # edited since is applied anew.
    pristine = dict(pristine_items)
    versions: List[Tuple[Tuple[str, bytes], ...]] = []
    with tempfile.TemporaryDirectory(prefix="pregrad-apply-") as tmp:
        work = Path(tmp)
        # A repository of its own, so git never resolves paths against an
        # enclosing checkout.
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        for rel, data in pristine.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        for patch in patches:
            result = subprocess.run(
                ["git", "apply", "--verbose", "--whitespace=nowarn", str(patch.path)],
                cwd=work, capture_output=True, text=True)
            if result.returncode != 0:
                errors = [line for line in result.stderr.splitlines()
                          if line.startswith("error:")]
                raise Refused(f"{shown(patch.path)} does not apply to the pristine "
                              f"{base} files:\n  " + "\n  ".join(errors))
            for diff in patch.files:
                blob = git_blob_id((work / diff.path).read_bytes())
                if blob != diff.post_blob:
                    raise Refused(
                        f"{shown(patch.path)}: {diff.path} came out as blob {blob[:12]}, "
                        f"the patch's index line says {diff.post_blob[:12]}: the patch was "
                        "edited or is not whole; nothing was changed")
            versions.append(tuple((rel, (work / rel).read_bytes()) for rel in pristine))
    return tuple(versions)


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


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


# --------------------------------------------------------------------------
# Which series a torch gets: decided by the bytes of the files the series
# touch, the version string only breaking ties. Patch releases (2.12.1),
# local build tags (+cpu, +cu130) and vendor builds (2.11.0a0+git...) are
# where the two differ.


def release_numbers(version: str) -> Tuple[int, ...]:
    """'2.12.1+cu130' -> (2, 12, 1); 'v2.11.0' -> (2, 11, 0); '2.11.0a0+git1' -> (2, 11, 0)."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


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


@dataclasses.dataclass(frozen=True)
class Identified:
    """The series a tree or install gets, and why."""
    topic: Topic
    series: Optional[Series]  # None: the topic has no series at all
    how: str  # "pristine" | "patched" | "closest"
    same: Tuple[str, ...]  # files holding the base's pristine or patched blob
    differing: Tuple[str, ...]  # the others

    @property
    def exact(self) -> bool:
        return self.how in ("pristine", "patched")

    def reason(self) -> str:
        assert self.series is not None
        base, total = self.series.base, len(self.same) + len(self.differing)
        files = (f"the {total} files the series touches are" if total > 1
                 else "the one file the series touches is")
        if self.how == "pristine":
            return f"{files} byte-identical to {base}'s"
        if self.how == "patched":
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
            how, same = "pristine", as_pristine
        elif len(as_patched) == len(files):
            how, same = "patched", as_patched
        else:
            how, same = "closest", either
        differing = [rel for rel in files if rel not in same]
        key = (how == "closest", -len(same) / len(files),
               version_preference(base, version))
        ranked.append((key, Identified(topic, series, how, tuple(same), tuple(differing))))
    if not ranked:
        return Identified(topic, None, "closest", (), ())
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
        if found.series is not None and found.how == "patched":
            raise Refused(f"torch {version}: its files are already patched by "
                          f"{shown(found.series.directory)}; nothing was written")
        if (found.series is None or found.how != "pristine") and topic not in optional:
            detail = f" ({found.reason()})" if found.series is not None else ""
            what = topic.qualified("of")
            raise Refused(f"torch {version}: no series{what} matches its files{detail}; "
                          "nothing was written")
        yield found
