"""A patch file of a series, read and checked whole: its subject, and per
file the pre- and post-image blobs of its `index` line and its hunks.

`parse_patch` names every problem that makes a patch not whole before
anything is written: a file section missing from what the diffstat
announces, a hunk cut short, a line count that does not add up, a path
outside `torch/`, an `index` line without full-length blob ids (git am -3
needs them). Nothing here knows what a series is."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path, PurePosixPath
from typing import List, Optional, Tuple

from torch_backport.infra.paths import shown

# Every file a series may touch lives under one of these (relative, no "..").
ALLOWED_ROOTS = ("torch/",)
DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: \d+)?$")
STAT_LINE_RE = re.compile(r"^ (\S.*?)\s+\|\s+\d+")
STAT_SUMMARY_RE = re.compile(
    r"^ (\d+) files? changed(?:, (\d+) insertions?\(\+\))?(?:, (\d+) deletions?\(-\))?$")
SUBJECT_RE = re.compile(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n .*)*)", re.MULTILINE)


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


def confined(path: str) -> bool:
    """Whether a patched path is relative, without "..", under ALLOWED_ROOTS."""
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
