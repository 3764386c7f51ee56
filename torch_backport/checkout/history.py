"""HEAD's history in a git checkout, over the files the chosen topics
touch: read once per command (`History`), down to where the touched files
were a base's, and which of a series' commits it holds
(`find_series_commits`: by patch-id, or by subject and Origin trailer where a
3-way merge changed the context; a later revert undoes one)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from typing import Dict, IO, List, Optional, Set, Tuple

from torch_backport.infra.errors import Refused
from torch_backport.infra.git import Git
from torch_backport.patchset.identify import topic_files
from torch_backport.patchset.series import (load_series, pristine_blobs, Series,
                                            supported_bases, Topic)

NULL_BLOB = "0" * 40
LOG = ["log", "-p", "--raw", "--no-abbrev", "--full-index", "--no-color", "--no-merges",
       "--format=medium", "--no-ext-diff", "--no-textconv", "HEAD", "--"]


@dataclass
class Commit:
    sha: str
    message: str
    patch_id: str = ""


class History:
    """HEAD's history over the files the chosen topics touch, read once per
    command: one `git log -p --raw` stream, newest first, and one `git
    patch-id` over what was read. Identification, the shared-file check, the
    silent pre-check and the real pass all use it.

    The walk stops early: going back from HEAD it tracks each file's blob
    (a commit's raw line names the blob before it), and once the files of a
    topic hold some base's pristine blobs, nothing older can be that topic's
    series; when every topic has reached such a point, git is stopped. A
    tree at a base's pristine files stops before git starts; a tree that
    never held one (an unknown base) costs one whole walk."""

    def __init__(self, git: Git, chosen: List[Topic]) -> None:
        self.git = git
        self.topics = chosen
        self.files = sorted({rel for topic in chosen for rel in topic_files(topic)})
        listed = git("ls-tree", "-r", "--full-tree", "HEAD", "--", *self.files).stdout
        self.head: Dict[str, Optional[str]] = {rel: None for rel in self.files}
        for line in listed.splitlines():
            meta, _, rel = line.partition("\t")
            self.head[rel] = meta.split()[2]
        self.pristine = {topic.name: [(base, pristine_blobs(load_series(base, topic)))
                                      for base in supported_bases(topic)]
                         for topic in chosen}
        self.commits: List[Commit] = []
        # topic -> (how many of self.commits lie above its pristine point,
        #           the bases whose pristine blobs are there)
        self.floors: Dict[str, Tuple[int, List[str]]] = {}
        self._walk()

    def _reached_floor(self, state: Dict[str, Optional[str]], changed: Set[str]) -> None:
        for topic in self.topics:
            if topic.name in self.floors:
                continue
            bases = [base for base, blobs in self.pristine[topic.name]
                     if (not changed or changed & set(blobs))
                     and all(state.get(rel) == blob for rel, blob in blobs.items())]
            if bases:
                self.floors[topic.name] = (len(self.commits), bases)

    def _walk(self) -> None:
        state = dict(self.head)
        self._reached_floor(state, set())
        if len(self.floors) == len(self.topics):
            return
        with tempfile.TemporaryFile() as errors:
            self._read_log(state, errors)

    def _read_log(self, state: Dict[str, Optional[str]], errors: IO[bytes]) -> None:
        process = self.git.stream(*LOG, *self.files, errors=errors)
        assert process.stdout is not None
        chunks: List[bytes] = []
        message: List[str] = []
        changed: Set[str] = set()
        current: Optional[Commit] = None

        def finish() -> bool:
            """Close the commit being read; True once every topic has a floor."""
            if current is None:
                return False
            current.message = "\n".join(message).strip("\n")
            self.commits.append(current)
            self._reached_floor(state, changed)
            return len(self.floors) == len(self.topics)

        stopped = False
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("commit ") and len(line) >= 47:
                if finish():
                    stopped = True
                    break
                current = Commit(line.split()[1], "")
                message, changed = [], set()
            elif line.startswith("    ") and current is not None and not changed:
                message.append(line[4:])
            elif line == "" and not changed and current is not None and message:
                message.append("")
            elif line.startswith(":"):
                meta, _, rel = line.partition("\t")
                old = meta.split()[2]
                state[rel] = None if old == NULL_BLOB else old
                changed.add(rel)
            chunks.append(raw)
        if not stopped:
            finish()
            if process.wait() != 0:
                errors.seek(0)
                raise Refused("git log failed:\n"
                              + errors.read().decode(errors="replace").strip())
        else:
            process.kill()
            process.wait()
        process.stdout.close()
        self._read_patch_ids(b"".join(chunks))

    def _read_patch_ids(self, log: bytes) -> None:
        """Each commit's patch-id, from one `git patch-id` over the log read."""
        ids = self.git("patch-id", "--stable", input=log.decode("utf-8", "replace")).stdout
        found: Dict[str, str] = {}
        for line in ids.splitlines():
            patch, sha = line.split()
            found[sha] = patch
        for read in self.commits:
            read.patch_id = found.get(read.sha, "")

    def above_floor(self, topic: Topic) -> List[Commit]:
        """The commits newer than the point where the topic's files were a
        base's pristine files (every commit read, if there is none)."""
        floor = self.floors.get(topic.name)
        return self.commits[: floor[0]] if floor else self.commits

    def floor_bases(self, topic: Topic) -> List[str]:
        floor = self.floors.get(topic.name)
        return floor[1] if floor else []


def patch_id(git: Git, text: str) -> str:
    out = git("patch-id", "--stable", input=text).stdout.split()
    return out[0] if out else ""


def series_patch_ids(git: Git, series: Series) -> Dict[str, str]:
    """patch file name -> its patch-id, from one `git patch-id` run."""
    texts = [patch.read_text() for patch in series.patches]
    out = git("patch-id", "--stable", input="".join(
        text if text.endswith("\n") else text + "\n" for text in texts)).stdout.splitlines()
    if len(out) != len(texts):  # a patch git sees no diff in: one at a time
        return {patch.name: patch_id(git, text) for patch, text in zip(series.patches, texts)}
    return {patch.name: line.split()[0] for patch, line in zip(series.patches, out)}


def find_series_commits(history: History, series: Series,
                        exact: Optional[List[str]] = None) -> Dict[str, Optional[str]]:
    """patch file name -> the newest commit in HEAD's history that applied it,
    or None when there is none or a later commit reverted it.

    A commit applied the patch if it has the patch's patch-id, or, when a
    3-way merge changed the context lines (and so the patch-id), if it has the
    patch's subject and Origin trailer, which `git am` and cherry-picks keep.
    A later commit reverted it if its message says "This reverts commit
    <sha>" or its diff has the reverse patch-id. `exact`, if given, collects
    the names of the patches matched by patch-id."""
    git = history.git
    commits = history.above_floor(series.topic)
    found: Dict[str, Optional[str]] = {}
    if not commits:
        return {patch.name: None for patch in series.patches}
    forwards = series_patch_ids(git, series)
    for patch in series.patches:
        origin = re.search(r"^Origin: .*$", patch.read_text(), re.MULTILINE)
        by_subject = [commit for commit in commits
                      if commit.message.split("\n", 1)[0] == patch.subject
                      and origin is not None and origin.group(0) in commit.message]
        forward = forwards[patch.name]
        candidates = [commit for commit in commits
                      if commit.patch_id == forward or commit in by_subject]
        if not candidates:
            found[patch.name] = None
            continue
        applied = candidates[0]
        if exact is not None and applied.patch_id == forward:
            exact.append(patch.name)
        reverse = patch_id(git, git("diff", applied.sha, f"{applied.sha}^",
                                    "--", *series.touched).stdout)
        newer = commits[: commits.index(applied)]
        reverted = any(f"This reverts commit {applied.sha}" in commit.message
                       or commit.patch_id == reverse for commit in newer)
        found[patch.name] = None if reverted else applied.sha
    return found
