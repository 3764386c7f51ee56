"""A PyTorch git checkout: apply, check, inspect and revert each topic's
series as commits.

Works through git only (`git am -3`, `git apply --3way`, `git revert`,
`git patch-id`); never imports torch. History is read once per command
(`History`), down to where the touched files were a base's.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, IO, Iterator, List, Optional, Set, Tuple, Union

from torch_backport.driver import Mode, Plan, Say
from torch_backport.fsio import step
from torch_backport.series import (
    apply_each,
    identify,
    Identified,
    load_series,
    Patch,
    pristine_blobs,
    Refused,
    Series,
    supported_bases,
    Topic,
    topic_files,
)

MARKERS = ["torch/_inductor/config.py", "torch/_functorch/aot_autograd.py"]


def git(checkout: Path, *args: str, check: bool = True,
        env: Optional[Dict[str, str]] = None, input: Optional[str] = None
        ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["git", "-C", str(checkout), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        input=input,
    )
    if check and result.returncode != 0:
        raise Refused(f"git {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result


# --------------------------------------------------------------------------
# Preconditions


def require_checkout(checkout: Path) -> None:
    if not checkout.is_dir():
        raise Refused(f"{checkout} is not a directory")
    top = git(checkout, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise Refused(f"{checkout} is not a git work tree")
    if Path(top.stdout.strip()).resolve() != checkout.resolve():
        raise Refused(f"{checkout} is inside the git work tree {top.stdout.strip()}; "
                      "name the top of the PyTorch checkout")
    if git(checkout, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
        raise Refused(f"{checkout} has no commits, so it is not a PyTorch checkout")
    missing = [path for path in MARKERS
               if git(checkout, "cat-file", "-e", f"HEAD:{path}", check=False).returncode]
    if missing:
        raise Refused(f"{checkout} is not a PyTorch checkout: "
                      + ", ".join(missing) + " not tracked at HEAD")


def require_quiet(checkout: Path) -> None:
    """No operation in progress, nothing uncommitted: then any failure can be
    undone exactly, by going back to HEAD."""
    for name, what in [("rebase-apply", "a git am or rebase"),
                       ("rebase-merge", "a rebase"),
                       ("MERGE_HEAD", "a merge"),
                       ("CHERRY_PICK_HEAD", "a cherry-pick"),
                       ("REVERT_HEAD", "a revert"),
                       ("BISECT_LOG", "a bisect")]:
        path = Path(git(checkout, "rev-parse", "--git-path", name).stdout.strip())
        if not path.is_absolute():
            path = checkout / path
        if path.exists():
            raise Refused(f"{what} is in progress in {checkout} ({path}); "
                          "finish or abort it first")
    dirty = git(checkout, "status", "--porcelain", "--untracked-files=no").stdout
    if dirty.strip():
        raise Refused(f"{checkout} has uncommitted changes; commit or stash them first:\n"
                      + "\n".join(f"  {line}" for line in dirty.splitlines()[:20]))


def require_identity(checkout: Path) -> None:
    if git(checkout, "var", "GIT_COMMITTER_IDENT", check=False).returncode != 0:
        raise Refused(f"git has no committer identity in {checkout}; set user.name "
                      "and user.email (or use --no-commit)")


# --------------------------------------------------------------------------
# What the checkout holds


@dataclass
class Base:
    series: Series
    reason: str
    exact: bool


@dataclass
class Commit:
    sha: str
    message: str
    patch_id: str = ""


NULL_BLOB = "0" * 40


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

    def __init__(self, checkout: Path, chosen: List[Topic]) -> None:
        self.checkout = checkout
        self.topics = chosen
        self.files = sorted({rel for topic in chosen for rel in topic_files(topic)})
        listed = git(checkout, "ls-tree", "-r", "--full-tree", "HEAD", "--",
                     *self.files).stdout
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
        self.floors: Dict[str, tuple[int, List[str]]] = {}
        self._patch_ids: Dict[str, str] = {}
        self.bases: Dict[str, Union[Base, Refused]] = {}  # identify_base's answers
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
        process = subprocess.Popen(
            ["git", "-C", str(self.checkout), "log", "-p", "--raw", "--no-abbrev",
             "--full-index", "--no-color", "--no-merges", "--format=medium",
             "--no-ext-diff", "--no-textconv", "HEAD", "--", *self.files],
            stdout=subprocess.PIPE, stderr=errors)
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
        ids = git(self.checkout, "patch-id", "--stable",
                  input=log.decode("utf-8", "replace")).stdout
        for line in ids.splitlines():
            patch, sha = line.split()
            self._patch_ids[sha] = patch
        for read in self.commits:
            read.patch_id = self._patch_ids.get(read.sha, "")

    def above_floor(self, topic: Topic) -> List[Commit]:
        """The commits newer than the point where the topic's files were a
        base's pristine files (every commit read, if there is none)."""
        floor = self.floors.get(topic.name)
        return self.commits[: floor[0]] if floor else self.commits

    def floor_bases(self, topic: Topic) -> List[str]:
        floor = self.floors.get(topic.name)
        return floor[1] if floor else []


def identify_base(history: History, topic: Topic) -> Base:
    """The base of the checkout: the one whose series is (partly) in HEAD's
    history, else the one whose pristine blobs the touched files match.
    Answered once per topic and command: the history is read once too."""
    if topic.name not in history.bases:
        try:
            history.bases[topic.name] = find_base(history, topic)
        except Refused as problem:
            history.bases[topic.name] = problem
    found = history.bases[topic.name]
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
    if by_content.series is not None and by_content.how == "pristine":
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
    stored = stored_blobs(history.checkout, sorted(set().union(*pristine.values())))
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


def stored_blobs(checkout: Path, blobs: List[str]) -> Set[str]:
    """Which of `blobs` the repository's object store has (one git process)."""
    listed = git(checkout, "cat-file", "--batch-check", input="".join(f"{b}\n" for b in blobs))
    return {line.split()[0] for line in listed.stdout.splitlines()
            if not line.endswith(" missing")}


def seed_preimage_blobs(checkout: Path, series: Series) -> None:
    """Write into the object store every intermediate version of the touched
    files (pristine, after 0001, after 0002, ...). A 3-way fallback needs the
    pre-image blob named on each patch's `index` line; only the first patch to
    touch a file names a blob that the checkout's history has. Unreachable
    blobs change no ref, index or file and go away with the next gc.

    Each step is applied with the post-image check of `apply_each`, so a
    patch that was edited or cut short is refused here, before any git step
    that writes."""
    blobs = pristine_blobs(series)
    pristine = {}
    for rel, blob in blobs.items():
        shown = subprocess.run(["git", "-C", str(checkout), "cat-file", "blob", blob],
                               capture_output=True)
        if shown.returncode != 0:
            return  # no pristine blob, so no 3-way merge to help
        pristine[rel] = shown.stdout
    versions = apply_each(pristine, series)[:-1]  # the last one is no pre-image
    with tempfile.TemporaryDirectory(prefix="pregrad-seed-") as tmp:
        work = Path(tmp)
        paths = []
        for number, files in enumerate(versions):
            for rel, data in files.items():
                (work / str(number) / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / str(number) / rel).write_bytes(data)
                paths.append(str(work / str(number) / rel))
        if paths:
            git(checkout, "hash-object", "-w", "--stdin-paths", input="\n".join(paths) + "\n")


def patch_id(text: str, checkout: Path) -> str:
    out = git(checkout, "patch-id", "--stable", input=text).stdout.split()
    return out[0] if out else ""


def series_patch_ids(checkout: Path, series: Series) -> Dict[str, str]:
    """patch file name -> its patch-id, from one `git patch-id` run."""
    texts = [patch.read_text() for patch in series.patches]
    out = git(checkout, "patch-id", "--stable", input="".join(
        text if text.endswith("\n") else text + "\n" for text in texts)).stdout.splitlines()
    if len(out) != len(texts):  # a patch git sees no diff in: one at a time
        return {patch.name: patch_id(text, checkout)
                for patch, text in zip(series.patches, texts)}
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
    checkout = history.checkout
    commits = history.above_floor(series.topic)
    found: Dict[str, Optional[str]] = {}
    if not commits:
        return {patch.name: None for patch in series.patches}
    forwards = series_patch_ids(checkout, series)
    for patch in series.patches:
        text = patch.read_text()
        subject = patch.subject
        origin = re.search(r"^Origin: .*$", text, re.MULTILINE)
        by_subject = [commit for commit in commits
                      if commit.message.split("\n", 1)[0] == subject
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
        reverse = patch_id(git(checkout, "diff", applied.sha, f"{applied.sha}^",
                               "--", *series.touched).stdout, checkout)
        newer = commits[: commits.index(applied)]
        reverted = any(f"This reverts commit {applied.sha}" in commit.message
                       or commit.patch_id == reverse for commit in newer)
        found[patch.name] = None if reverted else applied.sha
    return found


def feature_at_head(checkout: Path, topic: Topic) -> bool:
    shown = git(checkout, "show", f"HEAD:{topic.feature_file}", check=False)
    return shown.returncode == 0 and topic.has_feature(shown.stdout.encode())


def topic_label(checkout: Path, topic: Topic) -> str:
    """How a line about `checkout` starts: "CHECKOUT: topic NAME:"."""
    return f"{checkout}:" + topic.named(" topic {name}:")


def snapshot_refs(checkout: Path) -> tuple[str, str]:
    return (git(checkout, "rev-parse", "HEAD").stdout.strip(),
            git(checkout, "status", "--porcelain", "--untracked-files=no").stdout)


def orig_head(checkout: Path) -> str:
    return git(checkout, "rev-parse", "-q", "--verify", "ORIG_HEAD", check=False).stdout.strip()


def restore_orig_head(checkout: Path, before: str) -> None:
    """git am, revert --abort and reset --hard rewrite ORIG_HEAD; a refused
    run must leave it as the user had it."""
    if before:
        git(checkout, "update-ref", "--no-deref", "ORIG_HEAD", before, check=False)
    else:
        git(checkout, "update-ref", "-d", "ORIG_HEAD", check=False)


def conflict_locations(checkout: Path) -> List[str]:
    """'path:line' of each conflict marker left in the work tree."""
    places = []
    for path in git(checkout, "diff", "--name-only", "--diff-filter=U").stdout.split():
        try:
            lines = (checkout / path).read_text().splitlines()
        except OSError:
            places.append(path)
            continue
        places += [f"{path}:{n}" for n, line in enumerate(lines, 1)
                   if line.startswith("<<<<<<< ")] or [path]
    return places


# --------------------------------------------------------------------------
# Commands


def cmd_status(history: History, topic: Topic) -> int:
    checkout = history.checkout
    upstream = feature_at_head(checkout, topic)
    try:
        base = identify_base(history, topic)
    except Refused as problem:
        print(f"{topic_label(checkout, topic)} {problem}")
        print(f"feature present at HEAD: {'yes' if upstream else 'no'}")
        return 0 if upstream else 1
    applied = find_series_commits(history, base.series)
    print(f"{topic_label(checkout, topic)} base {base.series.base} ({base.reason})")
    for patch in base.series.patches:
        commit = applied[patch.name]
        state = f"applied   {commit[:12]}" if commit else "missing   " + " " * 12
        print(f"  {state}  {patch.name}")
    count = sum(1 for commit in applied.values() if commit)
    total = len(applied)
    print(f"series: {count} of {total} patches applied (matched by patch-id)")
    print(f"feature present at HEAD: {'yes' if upstream else 'no'}"
          + (" (upstream, not through this series)" if upstream and not count else ""))
    return 0


def not_available(history: History, command: str, topic: Topic) -> Optional[List[str]]:
    """What `command` says of a topic that no base of fits this tree and
    that the run leaves alone; None if one fits or HEAD has the feature."""
    try:
        identify_base(history, topic)
        return None
    except Refused as problem:
        if feature_at_head(history.checkout, topic):
            return None
        if command == "apply":
            # A default topic the user did not name: the others still go in.
            return [topic.label(f"not available for this tree: {problem}; left alone")]
        return [f"{topic_label(history.checkout, topic)} {problem}",
                "feature present at HEAD: no",
                "not available for this tree: a plain apply leaves this topic alone"]


def plan_apply(history: History, commit: bool, topic: Topic, plan: Plan) -> None:
    """`git am -3` the patches of the series that HEAD's history lacks (with
    `commit` False, stage them): `plan` gets what the run says and does."""
    checkout = history.checkout
    upstream_note = (f"{topic.present} at HEAD: the checkout has the feature upstream; "
                     "nothing to do")
    try:
        base = identify_base(history, topic)
    except Refused:
        if feature_at_head(checkout, topic):
            plan.say(topic.label(upstream_note))
            return
        raise
    applied = find_series_commits(history, base.series)
    names = [patch.name for patch in base.series.patches]
    done = [name for name in names if applied[name]]
    plan.say(topic.label(f"base {base.series.base}: {base.reason}"))
    if len(done) == len(names):
        plan.say(f"already applied: all {len(names)} patches are in HEAD's history; "
                 "nothing to do")
        return
    if not done and base.series.adds_feature and feature_at_head(checkout, topic):
        plan.say(upstream_note)
        return
    if done != names[: len(done)]:
        raise Refused("only part of the series is applied, and not as a prefix "
                      f"({', '.join(done)}); revert it with --revert first")
    todo = [patch for patch in base.series.patches if patch.name not in done]
    if done:
        plan.say(f"{len(done)} patch(es) already applied; applying the other {len(todo)}")
    seed_preimage_blobs(checkout, base.series)
    plan.trial = lambda say: try_apply(checkout, base, todo, say)
    plan.would = [f"check: {len(todo)} patch(es) would apply; HEAD, index and work tree "
                  "untouched"]
    if commit:
        plan.writes = lambda say: apply_as_commits(checkout, todo, say)
    else:
        plan.writes = lambda say: apply_staged(checkout, todo, say)


@contextlib.contextmanager
def throwaway_index(checkout: Path) -> Iterator[Dict[str, str]]:
    """The environment of a git index read from HEAD that nothing else
    sees: HEAD, the index and the tree stay untouched."""
    with tempfile.TemporaryDirectory(prefix="pregrad-check-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(checkout, "read-tree", "HEAD", env=env)
        yield env


def try_apply(checkout: Path, base: Base, todo: List[Patch], say: Say) -> None:
    """Apply into a throw-away index, saying each patch that would apply."""
    with throwaway_index(checkout) as env:
        for patch in todo:
            # A plain apply first, to name the failing hunks should the 3-way
            # merge fail too (--3way leaves no markers in a throw-away index).
            plain = git(checkout, "apply", "--cached", "--check", str(patch),
                        check=False, env=env)
            result = git(checkout, "apply", "--cached", "--3way", str(patch),
                         check=False, env=env)
            if result.returncode != 0:
                conflicted = [line[2:] for line in result.stderr.splitlines()
                              if line.startswith("U ")]
                hunks = [line.replace("error: patch failed: ", "")
                         for line in plain.stderr.splitlines()
                         if line.startswith("error: patch failed: ")
                         and line.split(": ")[2].rsplit(":", 1)[0] in conflicted]
                raise Refused(f"{patch.name} would not apply, even with a 3-way merge; "
                              "conflicting hunks at:\n  "
                              + "\n  ".join(hunks or conflicted or result.stderr.splitlines())
                              + "\ncheck: nothing was changed")
            how = "cleanly" if base.exact else "(3-way merge)"
            say(f"  would apply {patch.name} {how}")


def apply_as_commits(checkout: Path, todo: List[Patch], say: Say) -> None:
    """`git am -3` one patch at a time: a run killed between two patches leaves
    a clean tree with a prefix of the series, which --status reports and the
    next apply finishes (or --revert removes)."""
    require_identity(checkout)
    head_before, _ = snapshot_refs(checkout)
    orig_before = orig_head(checkout)
    for patch in todo:
        step(patch)
        result = git(checkout, "am", "-3", "--quiet", str(patch), check=False)
        if result.returncode == 0:
            continue
        places = conflict_locations(checkout)
        errors = [line for line in (result.stdout + result.stderr).splitlines()
                  if line.startswith("error:")]
        git(checkout, "am", "--abort", check=False)
        git(checkout, "reset", "-q", "--hard", head_before, check=False)
        restore_orig_head(checkout, orig_before)
        head_after, dirty = snapshot_refs(checkout)
        restored = head_after == head_before and not dirty.strip()
        raise Refused(
            f"{patch.name} does not apply, even with a 3-way merge; conflicts at:\n"
            + "\n".join(f"  {place}" for place in places or errors)
            + ("\nthe am was aborted; HEAD, index and work tree are as before"
               if restored else "\nWARNING: could not restore the checkout exactly")
        )
    say(git(checkout, "log", "--oneline", "--no-decorate",
            f"{head_before}..HEAD").stdout.rstrip())
    say(f"applied {len(todo)} patch(es) as commits on top of {head_before[:12]}")


def apply_staged(checkout: Path, todo: List[Patch], say: Say) -> None:
    for patch in todo:
        result = git(checkout, "apply", "--index", "--3way", str(patch), check=False)
        if result.returncode != 0:
            places = conflict_locations(checkout)
            orig_before = orig_head(checkout)
            git(checkout, "reset", "-q", "--merge", "HEAD", check=False)
            git(checkout, "checkout", "-q", "HEAD", "--", ".", check=False)
            restore_orig_head(checkout, orig_before)
            raise Refused(f"{patch.name} does not apply, even with a 3-way merge; "
                          "conflicts at:\n" + "\n".join(f"  {p}" for p in places)
                          + "\nthe index and work tree were reset to HEAD")
        say(f"  staged {patch.name}")
    say(f"applied {len(todo)} patch(es) to the index and work tree; nothing committed")


def plan_revert(history: History, topic: Topic, plan: Plan) -> None:
    """`git revert` exactly the series' commits, newest first."""
    checkout = history.checkout
    try:
        base = identify_base(history, topic).series
    except Refused:
        plan.say(f"topic {topic.name}: nothing to revert: this tree has no series of it")
        return
    applied = find_series_commits(history, base)
    commits = [(name, commit) for name, commit in applied.items() if commit]
    if not commits:
        plan.say(f"topic {topic.name}: nothing to revert: no commit of its {base.base} "
                 "series is in HEAD's history")
        return
    plan.trial = lambda say: try_revert(checkout, commits, say)
    plan.would = [f"check: {len(commits)} commit(s) would revert; HEAD, index and work tree "
                  "untouched"]
    plan.writes = lambda say: revert_commits(checkout, commits, say)


def revert_commits(checkout: Path, commits: List[Tuple[str, str]], say: Say) -> None:
    head_before, _ = snapshot_refs(checkout)
    require_identity(checkout)
    orig_before = orig_head(checkout)
    for name, commit in reversed(commits):
        step(commit)
        result = git(checkout, "revert", "--no-edit", commit, check=False)
        if result.returncode != 0:
            places = conflict_locations(checkout)
            files = sorted({place.split(":")[0] for place in places})
            later = git(checkout, "log", "--oneline", "--no-decorate",
                        f"{commit}..{head_before}", "--", *files).stdout.rstrip()
            git(checkout, "revert", "--abort", check=False)
            git(checkout, "reset", "-q", "--hard", head_before)
            restore_orig_head(checkout, orig_before)
            raise Refused(
                f"cannot revert {name} ({commit[:12]}): later commits touched the same "
                "lines; conflicts at:\n" + "\n".join(f"  {p}" for p in places)
                + "\nlater commits touching those files:\n"
                + "\n".join(f"  {line}" for line in later.splitlines())
                + f"\nnothing was changed: HEAD is back at {head_before[:12]}"
            )
        say(f"  reverted {commit[:12]}  {name}")
    say(f"reverted {len(commits)} commit(s) of the series")


def try_revert(checkout: Path, commits: List[Tuple[str, str]], say: Say) -> None:
    """Reverse-apply each commit into a throw-away index, newest first."""
    with throwaway_index(checkout) as env:
        for name, commit in reversed(commits):
            diff = git(checkout, "diff", "--full-index", f"{commit}^", commit).stdout
            result = git(checkout, "apply", "--cached", "--3way", "-R", "-",
                         check=False, env=env, input=diff)
            if result.returncode != 0:
                conflicted = [line[2:] for line in result.stderr.splitlines()
                              if line.startswith("U ")]
                later = git(checkout, "log", "--oneline", "--no-decorate",
                            f"{commit}..HEAD", "--", *conflicted).stdout.rstrip()
                raise Refused(
                    f"{name} ({commit[:12]}) would not revert: later commits touched the "
                    "same lines in " + ", ".join(conflicted or ["its files"])
                    + ":\n" + "\n".join(f"  {line}" for line in later.splitlines())
                    + "\ncheck: nothing was changed")
            say(f"  would revert {commit[:12]}  {name}")


class CheckoutMode(Mode):
    """The driver's view of a checkout. A run that fails part way is not
    taken back (is_applied is False): its commits are whole, and the next run
    finishes. A tree's --status counts each topic's commits itself (no
    unapplied_defaults)."""

    def __init__(self, history: History, commit: bool) -> None:
        self.history = history
        self.commit = commit

    def status(self, topic: Topic) -> int:
        return cmd_status(self.history, topic)

    def plan(self, command: str, topic: Topic, plan: Plan) -> None:
        if command == "apply":
            plan_apply(self.history, self.commit, topic, plan)
        else:
            plan_revert(self.history, topic, plan)

    def not_available(self, command: str, topic: Topic) -> Optional[List[str]]:
        return not_available(self.history, command, topic)

    def series_for(self, topic: Topic) -> Optional[Series]:
        try:
            return identify_base(self.history, topic).series
        except Refused:
            return None  # no series for this tree: the topic's own run says so


def open_checkout(checkout: Path, command: str, commit: bool
                  ) -> Callable[[List[Topic]], CheckoutMode]:
    def open_mode(chosen: List[Topic]) -> CheckoutMode:
        require_checkout(checkout)
        if command != "status":
            require_quiet(checkout)
        return CheckoutMode(History(checkout, chosen), commit)
    return open_mode
