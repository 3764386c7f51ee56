"""A PyTorch git checkout: apply, check, inspect and revert each topic's
series as commits.

Works through git only (`git am -3`, `git apply --3way`, `git revert`,
`git patch-id`), every git process started by git.py; never imports torch.
History is read once per command (history.py), down to where the touched
files were a base's; the base of each topic is base.py's. `--check`
tries the patches in a throw-away index with an object directory of its own:
it writes nothing into the repository, objects included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Optional, Tuple

from torch_backport.patchset.apply import apply_each
from torch_backport.checkout.base import Base, Tree
from torch_backport.patchset.driver import Mode, Plan, Say
from torch_backport.infra.errors import Refused
from torch_backport.infra.fsio import fault_point
from torch_backport.infra.git import (
    checkout as user_checkout,
    conflict_places,
    Git,
    identity,
    throwaway_index,
    unapplied_hunks,
    write_blobs,
)
from torch_backport.checkout.history import find_series_commits, History
from torch_backport.patchset.patchfile import Patch
from torch_backport.patchset.series import pristine_blobs, Series, Topic
from torch_backport.infra.exit_codes import Exit

MARKERS = ["torch/_inductor/config.py", "torch/_functorch/aot_autograd.py"]
IN_PROGRESS = [("rebase-apply", "a git am or rebase"), ("rebase-merge", "a rebase"),
               ("MERGE_HEAD", "a merge"), ("CHERRY_PICK_HEAD", "a cherry-pick"),
               ("REVERT_HEAD", "a revert"), ("BISECT_LOG", "a bisect")]


# --------------------------------------------------------------------------
# Preconditions


def require_checkout(checkout: Path) -> Git:
    """The runner of a user's checkout, once it is one (identity, safe.directory)."""
    if not checkout.is_dir():
        raise Refused(f"{checkout} is not a directory")
    git = user_checkout(checkout)
    top = git("rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise Refused(f"{checkout} is not a git work tree")
    if Path(top.stdout.strip()).resolve() != checkout.resolve():
        raise Refused(f"{checkout} is inside the git work tree {top.stdout.strip()}; "
                      "name the top of the PyTorch checkout")
    if not git.ok("rev-parse", "--verify", "-q", "HEAD"):
        raise Refused(f"{checkout} has no commits, so it is not a PyTorch checkout")
    missing = [path for path in MARKERS if not git.ok("cat-file", "-e", f"HEAD:{path}")]
    if missing:
        raise Refused(f"{checkout} is not a PyTorch checkout: "
                      + ", ".join(missing) + " not tracked at HEAD")
    return git


def require_quiet(git: Git) -> None:
    """No operation in progress, nothing uncommitted: then any failure can be
    undone exactly, by going back to HEAD."""
    for name, what in IN_PROGRESS:
        path = git.git_path(name)
        if path.exists():
            raise Refused(f"{what} is in progress in {git.repo} ({path}); "
                          "finish or abort it first")
    dirty = uncommitted(git)
    if dirty.strip():
        raise Refused(f"{git.repo} has uncommitted changes; commit or stash them first:\n"
                      + "\n".join(f"  {line}" for line in dirty.splitlines()[:20]))


def require_identity(git: Git) -> None:
    if identity(git.repo) is None:
        raise Refused(f"git has no committer identity in {git.repo}; set user.name "
                      "and user.email (or use --no-commit)")


# --------------------------------------------------------------------------
# What the checkout holds


def preimages(git: Git, series: Series) -> List[bytes]:
    """Every intermediate version of the touched files (pristine, after
    0001, after 0002, ...), for the object store a patch is tried or applied
    in: a 3-way fallback needs the pre-image blob named on each patch's
    `index` line, and only the first patch to touch a file names a blob that
    the checkout's history has. None if the repository lacks a pristine
    blob (then no 3-way merge can help).

    Each step is applied with the post-image check of `apply_each`, so a
    patch that was edited or cut short is refused here, while the plan is
    made, before any git step that writes. Reading only: the blobs are
    written by the trial (into its own object directory) or the writes."""
    pristine = {}
    for rel, blob in pristine_blobs(series).items():
        shown = git("cat-file", "blob", blob, check=False, binary=True)
        if shown.returncode != 0:
            return []
        pristine[rel] = shown.stdout
    versions = apply_each(pristine, series)[:-1]  # the last one is no pre-image
    return [data for files in versions for data in files.values()]


def feature_at_head(git: Git, topic: Topic) -> bool:
    shown = git("cat-file", "blob", f"HEAD:{topic.feature_file}", check=False, binary=True)
    return shown.returncode == 0 and topic.has_feature(shown.stdout)


def topic_label(checkout: Path, topic: Topic) -> str:
    """How a line about `checkout` starts: "CHECKOUT: topic NAME:"."""
    return f"{checkout}:" + topic.unless_primary(" topic {name}:")


def uncommitted(git: Git) -> str:
    """`git status --porcelain` of the tracked files, without refreshing
    (and so rewriting) the index."""
    return str(git("--no-optional-locks", "status", "--porcelain",
                   "--untracked-files=no").stdout)


def snapshot_refs(git: Git) -> Tuple[str, str]:
    return str(git("rev-parse", "HEAD").stdout.strip()), uncommitted(git)


def orig_head(git: Git) -> str:
    return str(git("rev-parse", "-q", "--verify", "ORIG_HEAD", check=False).stdout.strip())


def restore_orig_head(git: Git, before: str) -> None:
    """git am, revert --abort and reset --hard rewrite ORIG_HEAD; a refused
    run must leave it as the user had it."""
    if before:
        git("update-ref", "--no-deref", "ORIG_HEAD", before, check=False)
    else:
        git("update-ref", "-d", "ORIG_HEAD", check=False)


# --------------------------------------------------------------------------
# Commands


def cmd_status(tree: Tree, topic: Topic) -> int:
    upstream = feature_at_head(tree.git, topic)
    try:
        base = tree.base(topic)
    except Refused as problem:
        print(f"{topic_label(tree.path, topic)} {problem}")
        print(f"feature present at HEAD: {'yes' if upstream else 'no'}")
        return Exit.OK if upstream else Exit.FAILED
    applied = find_series_commits(tree.history, base.series)
    print(f"{topic_label(tree.path, topic)} base {base.series.base} ({base.reason})")
    for patch in base.series.patches:
        commit = applied[patch.name]
        state = f"applied   {commit[:12]}" if commit else "missing   " + " " * 12
        print(f"  {state}  {patch.name}")
    count = sum(1 for commit in applied.values() if commit)
    total = len(applied)
    print(f"series: {count} of {total} patches applied (matched by patch-id)")
    print(f"feature present at HEAD: {'yes' if upstream else 'no'}"
          + (" (upstream, not through this series)" if upstream and not count else ""))
    return Exit.OK


def not_available(tree: Tree, command: str, topic: Topic) -> Optional[List[str]]:
    """What `command` says of a topic that no base of fits this tree and
    that the run leaves alone; None if one fits or HEAD has the feature."""
    try:
        tree.base(topic)
        return None
    except Refused as problem:
        if feature_at_head(tree.git, topic):
            return None
        if command == "apply":
            # A default topic the user did not name: the others still go in.
            return [topic.prefixed(f"not available for this tree: {problem}; left alone")]
        return [f"{topic_label(tree.path, topic)} {problem}",
                "feature present at HEAD: no",
                "not available for this tree: a plain apply leaves this topic alone"]


def plan_apply(tree: Tree, commit: bool, topic: Topic, plan: Plan) -> None:
    """`git am -3` the patches of the series that HEAD's history lacks (with
    `commit` False, stage them): `plan` gets what the run says and does."""
    git = tree.git
    upstream_note = (f"{topic.present} at HEAD: the checkout has the feature upstream; "
                     "nothing to do")
    try:
        base = tree.base(topic)
    except Refused:
        if feature_at_head(git, topic):
            plan.say(topic.prefixed(upstream_note))
            return
        raise
    applied = find_series_commits(tree.history, base.series)
    names = [patch.name for patch in base.series.patches]
    done = [name for name in names if applied[name]]
    plan.say(topic.prefixed(f"base {base.series.base}: {base.reason}"))
    if len(done) == len(names):
        plan.say(f"already applied: all {len(names)} patches are in HEAD's history; "
                 "nothing to do")
        return
    if not done and base.series.adds_feature and feature_at_head(git, topic):
        plan.say(upstream_note)
        return
    if done != names[: len(done)]:
        raise Refused("only part of the series is applied, and not as a prefix "
                      f"({', '.join(done)}); revert it with --revert first")
    todo = [patch for patch in base.series.patches if patch.name not in done]
    if done:
        plan.say(f"{len(done)} patch(es) already applied; applying the other {len(todo)}")
    blobs = preimages(git, base.series)
    plan.trial = lambda say: try_apply(git, base, todo, blobs, say)
    plan.would = [f"check: {len(todo)} patch(es) would apply; HEAD, index and work tree "
                  "untouched"]
    if commit:
        plan.writes = lambda say: apply_as_commits(git, todo, blobs, say)
    else:
        plan.writes = lambda say: apply_staged(git, todo, blobs, say)


def try_apply(git: Git, base: Base, todo: List[Patch], blobs: List[bytes], say: Say) -> None:
    """Apply into a throw-away index (its pre-image blobs into its own object
    directory), saying each patch that would apply."""
    with throwaway_index(git) as trial:
        write_blobs(trial, blobs)
        for patch in todo:
            # A plain apply first, to name the failing hunks should the 3-way
            # merge fail too (--3way leaves no markers in a throw-away index).
            hunks = unapplied_hunks(trial, patch.path)
            result = trial("apply", "--cached", "--3way", str(patch), check=False)
            if result.returncode != 0:
                conflicted = [line[2:] for line in result.stderr.splitlines()
                              if line.startswith("U ")]
                places = [f"{rel}:{line}" for rel, line in hunks if rel in conflicted]
                raise Refused(f"{patch.name} would not apply, even with a 3-way merge; "
                              "conflicting hunks at:\n  "
                              + "\n  ".join(places or conflicted or result.stderr.splitlines())
                              + "\ncheck: nothing was changed")
            how = "cleanly" if base.exact else "(3-way merge)"
            say(f"  would apply {patch.name} {how}")


def apply_as_commits(git: Git, todo: List[Patch], blobs: List[bytes], say: Say) -> None:
    """`git am -3` one patch at a time: a run killed between two patches leaves
    a clean tree with a prefix of the series, which --status reports and the
    next apply finishes (or --revert removes). The pre-image blobs go into
    the repository's object store first: unreachable, they change no ref,
    index or file and go away with the next gc."""
    require_identity(git)
    write_blobs(git, blobs)
    head_before, _ = snapshot_refs(git)
    orig_before = orig_head(git)
    for patch in todo:
        fault_point(patch)
        result = git("am", "-3", "--quiet", str(patch), check=False)
        if result.returncode == 0:
            continue
        places = conflict_places(git)
        errors = [line for line in (result.stdout + result.stderr).splitlines()
                  if line.startswith("error:")]
        git("am", "--abort", check=False)
        git("reset", "-q", "--hard", head_before, check=False)
        restore_orig_head(git, orig_before)
        head_after, dirty = snapshot_refs(git)
        restored = head_after == head_before and not dirty.strip()
        raise Refused(
            f"{patch.name} does not apply, even with a 3-way merge; conflicts at:\n"
            + "\n".join(f"  {place}" for place in places or errors)
            + ("\nthe am was aborted; HEAD, index and work tree are as before"
               if restored else "\nWARNING: could not restore the checkout exactly")
        )
    say(git("log", "--oneline", "--no-decorate", f"{head_before}..HEAD").stdout.rstrip())
    say(f"applied {len(todo)} patch(es) as commits on top of {head_before[:12]}")


def apply_staged(git: Git, todo: List[Patch], blobs: List[bytes], say: Say) -> None:
    write_blobs(git, blobs)
    for patch in todo:
        result = git("apply", "--index", "--3way", str(patch), check=False)
        if result.returncode != 0:
            places = conflict_places(git)
            orig_before = orig_head(git)
            git("reset", "-q", "--merge", "HEAD", check=False)
            git("checkout", "-q", "HEAD", "--", ".", check=False)
            restore_orig_head(git, orig_before)
            raise Refused(f"{patch.name} does not apply, even with a 3-way merge; "
                          "conflicts at:\n" + "\n".join(f"  {p}" for p in places)
                          + "\nthe index and work tree were reset to HEAD")
        say(f"  staged {patch.name}")
    say(f"applied {len(todo)} patch(es) to the index and work tree; nothing committed")


def plan_revert(tree: Tree, topic: Topic, plan: Plan) -> None:
    """`git revert` exactly the series' commits, newest first."""
    try:
        base = tree.base(topic).series
    except Refused:
        plan.say(f"topic {topic.name}: nothing to revert: this tree has no series of it")
        return
    applied = find_series_commits(tree.history, base)
    commits = [(name, commit) for name, commit in applied.items() if commit]
    if not commits:
        plan.say(f"topic {topic.name}: nothing to revert: no commit of its {base.base} "
                 "series is in HEAD's history")
        return
    git = tree.git
    plan.trial = lambda say: try_revert(git, commits, say)
    plan.would = [f"check: {len(commits)} commit(s) would revert; HEAD, index and work tree "
                  "untouched"]
    plan.writes = lambda say: revert_commits(git, commits, say)


def revert_commits(git: Git, commits: List[Tuple[str, str]], say: Say) -> None:
    head_before, _ = snapshot_refs(git)
    require_identity(git)
    orig_before = orig_head(git)
    for name, commit in reversed(commits):
        fault_point(commit)
        result = git("revert", "--no-edit", commit, check=False)
        if result.returncode != 0:
            places = conflict_places(git)
            files = sorted({place.split(":")[0] for place in places})
            later = git("log", "--oneline", "--no-decorate",
                        f"{commit}..{head_before}", "--", *files).stdout.rstrip()
            git("revert", "--abort", check=False)
            git("reset", "-q", "--hard", head_before)
            restore_orig_head(git, orig_before)
            raise Refused(
                f"cannot revert {name} ({commit[:12]}): later commits touched the same "
                "lines; conflicts at:\n" + "\n".join(f"  {p}" for p in places)
                + "\nlater commits touching those files:\n"
                + "\n".join(f"  {line}" for line in later.splitlines())
                + f"\nnothing was changed: HEAD is back at {head_before[:12]}"
            )
        say(f"  reverted {commit[:12]}  {name}")
    say(f"reverted {len(commits)} commit(s) of the series")


def try_revert(git: Git, commits: List[Tuple[str, str]], say: Say) -> None:
    """Reverse-apply each commit into a throw-away index, newest first."""
    with throwaway_index(git) as trial:
        for name, commit in reversed(commits):
            diff = git("diff", "--full-index", f"{commit}^", commit).stdout
            result = trial("apply", "--cached", "--3way", "-R", "-", check=False, input=diff)
            if result.returncode != 0:
                conflicted = [line[2:] for line in result.stderr.splitlines()
                              if line.startswith("U ")]
                later = git("log", "--oneline", "--no-decorate",
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

    def __init__(self, tree: Tree, commit: bool) -> None:
        self.tree = tree
        self.commit = commit

    def status(self, topic: Topic) -> int:
        return cmd_status(self.tree, topic)

    def plan(self, command: str, topic: Topic, plan: Plan) -> None:
        if command == "apply":
            plan_apply(self.tree, self.commit, topic, plan)
        else:
            plan_revert(self.tree, topic, plan)

    def not_available(self, command: str, topic: Topic) -> Optional[List[str]]:
        return not_available(self.tree, command, topic)

    def series_for(self, topic: Topic) -> Optional[Series]:
        try:
            return self.tree.base(topic).series
        except Refused:
            return None  # no series for this tree: the topic's own run says so


def open_checkout(checkout: Path, command: str, commit: bool
                  ) -> Callable[[List[Topic]], CheckoutMode]:
    def open_mode(chosen: List[Topic]) -> CheckoutMode:
        git = require_checkout(checkout)
        if command != "status":
            require_quiet(git)
        return CheckoutMode(Tree(History(git, chosen)), commit)
    return open_mode
