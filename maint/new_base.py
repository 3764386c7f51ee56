"""scripts/new-base, a maintainer command of the clone: serve a torch
release by replaying the nearest base's series onto its files with a real
3-way merge (maint/request.py has its help text and grammar).

For each topic the release's touched files (from --python's install, or
the release wheel read by byte range, each checked against RECORD) are
compared with every base's (maint/choose.py):
- equal to a base's, byte for byte: the release gets only its row in
  patches/releases.tsv, naming that base;
- the topic's change upstream and no fixes for it: "has it";
- otherwise the nearest base (or --from) is replayed in a scratch git
  repository (maint/replay.py): that base's pristine files, its series
  applied with `git am`, then an orphan commit of the release's files and
  `git am -3` of the same patches onto it, so every patch merges against
  the base's own files as the ancestor. A clean replay is written to
  patches/v<release>/ (maint/write.py), each message saying where it came
  from and how; a conflict is left in the scratch repository for a person
  (`git am --continue`), and the next run picks up the finished series.

A written series is a candidate (patches/candidates.tsv) until its matrix
has passed (`scripts/test.sh --releases X`); `--served` then takes it off
that list. Nothing here imports torch. An installed torch-backport has
none of this (maint/ is not shipped).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, TextIO, Tuple

from maint import choose, grammar, release_tier, request as grammar_of, update_docs, write
from maint.choose import Outcome, Run
from maint.request import Request
from torch_backport.infra import git as infra_git, tables
from torch_backport.download import transport
from torch_backport.infra.errors import Refused, UsageError
from torch_backport.infra.exit_codes import DayOne, Exit
from torch_backport.infra.paths import shown
from torch_backport.installed.pristine import NotPristine
from torch_backport.infra.fsio import atomic_write, cache_dir
from torch_backport.patchset.releases import NOT_YET
from torch_backport.patchset.series import load_series, Store, store, supported_bases, Topic
from torch_backport.download.release_wheels import MB, received_line

CLONE = Path(__file__).resolve().parents[1]
INTERRUPTED = "interrupted; patches/ is as it was unless a 'wrote' line says otherwise"


def served(request: Request, patches: Store) -> int:
    """--served: RELEASE's matrix passed; take it off candidates.tsv."""
    path = write.candidates_path(patches)
    if request.release not in tables.read_candidates(patches.root):
        print(f"new-base: {request.release} is not a candidate in {shown(path)}; "
              "nothing to do")
        return Exit.OK
    if not request.check:
        text = tables.with_candidate(patches.root, request.release, listed=False)
        atomic_write(path, text.encode(), 0o644)
    print(f"{'would remove' if request.check else 'removed'} {request.release} from "
          f"{shown(path)}: served")
    return Exit.OK


def touched_paths(chosen: List[Topic]) -> List[str]:
    """Every file some base's series of the chosen topics touches, and each
    topic's feature file."""
    return sorted({rel for topic in chosen for base in supported_bases(topic)
                   for rel in load_series(base, topic).touched} |
                  {topic.feature_file for topic in chosen})


def read_total(run: Run) -> Optional[str]:
    ranged = [found for found in run.reads if found.transferred]
    if not ranged:
        return received_line() if transport.used() is not None else None
    return (f"read by range: {sum(f.transferred for f in ranged) / MB:.1f} MB, "
            f"{len(ranged)} read(s) of release wheels; {received_line()}")


def say_check(request: Request, patches: Store, outcomes: List[Outcome], row: write.Row) -> int:
    for outcome in outcomes:
        if outcome.written is not None:
            print(f"would write {shown(patches.root / ('v' + request.release))}"
                  f"{'' if outcome.topic.primary else '/' + outcome.topic.dir}/")
    print(f"would {row.verb} {row.what}")
    if any(outcome.written is not None for outcome in outcomes):
        print(f"would list {request.release} in {shown(write.candidates_path(patches))}")
    print("check: nothing was written")
    return Exit.FAILED if any(outcome.conflict for outcome in outcomes) else Exit.OK


def write_all(request: Request, patches: Store, outcomes: List[Outcome], row: write.Row) -> None:
    """The staged series, the releases.tsv row and the candidates.tsv entry."""
    staged = [(o.topic, o.written) for o in outcomes if o.written is not None]
    for line in write.move_series(patches, request.release, staged):
        print(line)
    atomic_write(row_path(patches), row.text.encode(), 0o644)
    print(f"{row.done} {row.what}")
    path = patches.root / tables.PRERELEASES
    if request.index is not None:
        text = tables.with_prerelease(patches.root, request.release, request.index)
        atomic_write(path, text.encode(), 0o644)
        print(f"listed {request.release} in {shown(path)}: its files came from "
              f"{request.index}; --latest checks the final's by content on its day")
    elif request.release in tables.read_prereleases(patches.root):
        text = tables.with_prerelease(patches.root, request.release, None)
        atomic_write(path, text.encode(), 0o644)
        print(f"removed {request.release} from {shown(path)}: served from its own files")
    if staged:
        path = write.candidates_path(patches)
        text = tables.with_candidate(patches.root, request.release, listed=True)
        atomic_write(path, text.encode(), 0o644)
        print(f"listed {request.release} in {shown(path)}: a candidate, not served, until "
              f"its matrix passes: scripts/test.sh --releases {request.release}, then "
              f"scripts/new-base {request.release} --served")


def row_path(patches: Store) -> Path:
    return patches.root / tables.RELEASES


def decide(run: Run, chosen: List[Topic]) -> List[Outcome]:
    """Each chosen topic's outcome, its lines printed."""
    paths = touched_paths(chosen)
    files = choose.release_files(run, paths)
    print(f"torch {run.request.release}: {len(files.files)} of the {len(paths)} files the "
          f"topics touch, from {files.source}, each checked against RECORD")
    outcomes = [choose.outcome_for(topic, files, run) for topic in chosen]
    for outcome in outcomes:
        for line in outcome.lines:
            print(line)
    total = read_total(run)
    if total:
        print(total)
    return outcomes


def run(request: Request) -> int:
    patches = store(request.patches)
    if request.served:
        return served(request, patches)
    if request.branch:
        refuse_changed_work_tree(request.patches)
    if request.index is not None:
        # Beside pip's configured extra indexes (the variable replaces what
        # pip.conf says, so they are named again), for every read and
        # install of this run: the release wheel, the tier's venvs.
        from torch_backport.download import pip_config
        configured = pip_config.options().get("extra-index-url", "")
        os.environ["PIP_EXTRA_INDEX_URL"] = " ".join(filter(None, [configured, request.index]))
        # A cache of its own: the pre-release is published under the final's
        # number, and its venv or wheel must not stand in for the final's
        # in the main cache later.
        own = cache_dir() / "prereleases" / request.release
        own.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.environ["PREGRAD_CACHE"] = str(own)
    if request.latest:
        return latest(request, patches)
    with recorded() as lines:
        code = serve(request, patches)
        code, outcome, tier = after_serving(request, patches, request.release, code, code)
    if request.report is not None:
        write_report(request.report, request.release, outcome, lines, tier)
    return code


def latest(request: Request, patches: Store) -> int:
    """--latest: the newest final release on the configured indexes; nothing
    new if its row is there, else serve it (exit 3 where that worked)."""
    from torch_backport.download import pip_config, simple_index
    newest, why = simple_index.newest_final_release(pip_config.load(), transport.shared())
    if newest is None:
        raise Refused(f"--latest: {why}; nothing was written")
    tier: Optional[release_tier.Tier] = None
    code: int
    with recorded() as lines:
        if newest in tables.read_prereleases(patches.root):
            code, outcome = final_by_content(request, patches, newest)
            if code == DayOne.SERVED_CANDIDATE and request.branch and not request.check:
                commit_on_branch(
                    request, newest, None, branch=f"day-one/torch-{newest}-final",
                    written=(f"torch {newest}'s files are those of the pre-release its row "
                             "was written from and its tier ran on, read by content: its "
                             "line in patches/prereleases.tsv is removed"))
        elif newest in tables.read_candidates(patches.root):
            print(f"nothing new: {newest} is a candidate (its series is written; "
                  f"scripts/test.sh --releases {newest}, then scripts/new-base {newest} "
                  "--served)")
            code, outcome = Exit.OK, "nothing new"
        elif newest in tables.read_releases(patches.root).versions:
            cells = tables.read_releases(patches.root).cells[newest]
            waiting = sorted(topic for topic, cell in cells.items() if cell == NOT_YET)
            if waiting:
                print(f"{newest} is listed, but topic(s) {', '.join(waiting)} stopped at a "
                      f"conflict: finish them (scripts/new-base {newest})")
                code, outcome = Exit.FAILED, "conflict"
            else:
                print(f"nothing new: {newest} is served ({shown(row_path(patches))})")
                code, outcome = Exit.OK, "nothing new"
        else:
            print(f"new: torch {newest} is on the index and not in "
                  f"{shown(row_path(patches))}")
            served_request = dataclasses.replace(request, release=newest, latest=False)
            code = serve(served_request, patches)
            code, outcome, tier = after_serving(served_request, patches, newest, code,
                                                DayOne.SERVED_CANDIDATE)
    if request.report is not None:
        write_report(request.report, newest, outcome, lines, tier)
    return code


def final_by_content(request: Request, patches: Store, release: str) -> Tuple[int, str]:
    """--latest: `release`'s row was written from a pre-release's files
    (prereleases.tsv). The final's files, from the configured index, give
    each topic the row's cell without a new series: served by content."""
    index = tables.read_prereleases(patches.root)[release]
    print(f"{release}'s row was written from a pre-release ({index}): reading the final's "
          "files to compare")
    temporary = Path(tempfile.mkdtemp(prefix="pregrad-new-base-"))
    # A cache of its own: the pre-release's venv or whole wheel, cached
    # under the final's number, must not stand in for the final's files.
    cached = os.environ.get("PREGRAD_CACHE")
    os.environ["PREGRAD_CACHE"] = str(temporary / "cache")
    try:
        check = dataclasses.replace(request, release=release, latest=False, check=True)
        outcomes = decide(Run(check, cache_dir(), temporary / "scratch", temporary / "staged"),
                          patches.select(["all"]))
    except NotPristine as problem:
        # A series replayed from the base the pre-release made reads that
        # base's files from this release's wheel: the final's, which differ.
        print(f"torch {release}'s files are not the pre-release's ({problem}): serve the "
              f"final again (scripts/new-base {release})")
        return Exit.FAILED, "pre-release differs"
    finally:
        if cached is None:
            del os.environ["PREGRAD_CACHE"]
        else:
            os.environ["PREGRAD_CACHE"] = cached
        shutil.rmtree(temporary, ignore_errors=True)
    row = tables.read_releases(patches.root).cells[release]
    differ = [o.topic.name for o in outcomes
              if o.conflict or o.written is not None or o.cell != row.get(o.topic.name)]
    if differ:
        print(f"torch {release}'s files are not the pre-release's for topic(s) "
              f"{', '.join(differ)}: serve the final again (scripts/new-base {release})")
        return Exit.FAILED, "pre-release differs"
    path = patches.root / tables.PRERELEASES
    if not request.check:
        text = tables.with_prerelease(patches.root, release, None)
        atomic_write(path, text.encode(), 0o644)
    print(f"{'would remove' if request.check else 'removed'} {release} from {shown(path)}: "
          "the final's files are the pre-release's, so its row serves it by content")
    return DayOne.SERVED_CANDIDATE, "served by content"


def after_serving(request: Request, patches: Store, release: str, code: int,
                  served_code: int) -> Tuple[int, str, Optional[release_tier.Tier]]:
    """The release tier (--tier) and the branch (--branch) after `serve`
    returned `code`: the exit status, the outcome and the tier run."""
    if code != 0 or request.check:
        return code or served_code, outcome_of(code, request.check), None
    tier = None
    outcome = release_tier.SERVED_CANDIDATE
    if request.tier != "none":
        tier = release_tier.run(release, request.tier,
                                cache_dir() / "new-base" / f"v{release}" / "tier")
        outcome = tier.outcome
        print(f"{request.tier} tier: {outcome}: {tier.why}")
        print(f"  matrix: {release_tier.summary_line(tier)}")
        if outcome == release_tier.SERVED_CANDIDATE and tier.level == "full":
            served(dataclasses.replace(request, release=release), patches)
    if outcome == release_tier.SERVED_CANDIDATE and request.branch:
        commit_on_branch(request, release, tier)
    return {release_tier.SERVED_CANDIDATE: served_code,
            release_tier.UPSTREAM_FIXED: DayOne.UPSTREAM_FIXED}.get(outcome, Exit.FAILED), \
        outcome, tier


BRANCHED = ("README.md", "docs")  # besides --patches: what update-docs writes


def work_tree_of(patches: Path) -> Path:
    found = infra_git.run_to_the_end(["git", "-C", str(patches), "rev-parse",
                                      "--show-toplevel"])
    if found.returncode != 0:
        raise Refused(f"--branch: {shown(patches)} is not in a git work tree; nothing was "
                      "written")
    return Path(found.stdout.strip())


def refuse_changed_work_tree(patches: Path) -> None:
    """--branch commits only what this run writes: the work tree starts clean."""
    repo = work_tree_of(patches)
    changed = infra_git.checkout(repo)("status", "--porcelain", "--untracked-files=all",
                                       "--", str(patches), *BRANCHED).stdout.splitlines()
    if changed:
        raise Refused(f"--branch: {shown(repo)} has changes under {shown(patches)}, the README "
                      f"or docs/ ({changed[0].strip()}{', ...' if len(changed) > 1 else ''}); "
                      "commit or stash them first; nothing was written")


def commit_on_branch(request: Request, release: str, tier: Optional[release_tier.Tier],
                     written: str = "", branch: str = "") -> None:
    """One commit of what was written, on a new branch day-one/torch-RELEASE;
    `written` says what, where it is not a replayed series and its row."""
    repo = work_tree_of(request.patches)
    git = infra_git.checkout(repo)
    branch = branch or f"day-one/torch-{release}"
    git("switch", "-q", "-c", branch)
    git("add", "-A", "--", str(request.patches),
        *[name for name in BRANCHED if (repo / name).exists()])
    matrix = (f"The {tier.level} tier: {release_tier.summary_line(tier)}; --verify holds "
              "patched." if tier is not None else
              "No tier was run here (the pre-release's files were tested)." if written
              else "No tier was run (--tier none).")
    written = written or (f"the series replayed onto torch {release}'s files, its "
                          "patches/releases.tsv row and the docs")
    git("commit", "-q", "-m", f"Serve torch {release} (scripts/new-base)\n\n"
        f"Written by scripts/new-base{' --latest' if request.latest else ''}: "
        f"{written}.\n\n{matrix}\n")
    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    print(f"committed {head} on branch {branch} of {shown(repo)}")


def outcome_of(code: int, check: bool) -> str:
    if code != 0:
        return "conflict"
    return "would be served (check: nothing written)" if check else "served-candidate"


class Recorded(io.TextIOBase):
    """What the command prints, printed and kept for the report."""

    def __init__(self, shown_to: TextIO) -> None:
        self.shown_to = shown_to
        self.lines: List[str] = []
        self.partial = ""

    def write(self, text: str) -> int:
        self.shown_to.write(text)
        self.partial += text
        *done, self.partial = self.partial.split("\n")
        self.lines += done
        return len(text)

    def flush(self) -> None:
        self.shown_to.flush()


@contextlib.contextmanager
def recorded() -> Iterator[List[str]]:
    """The lines printed inside the block (also printed), for the report."""
    keeper = Recorded(sys.stdout)
    with contextlib.redirect_stdout(keeper):
        yield keeper.lines
    if keeper.partial:
        keeper.lines.append(keeper.partial)


def write_report(path: Path, release: str, outcome: str, lines: List[str],
                 tier: Optional[release_tier.Tier] = None) -> None:
    """The Markdown a pull request or an issue takes as its body."""
    text = (f"# torch {release}: {outcome}\n\n"
            f"`scripts/new-base` on {datetime.date.today().isoformat()}:\n\n```\n"
            + "\n".join(lines) + "\n```\n\n"
            + (release_tier.report_sections(tier) + "\n" if tier is not None else "")
            + NEXT_STEPS.get(outcome, "").format(release=release))
    atomic_write(path, text.encode(), 0o644)


NEXT_STEPS = {
    release_tier.SERVED_CANDIDATE: (
        "Next: `scripts/test.sh --releases {release}` (stock and patched), then "
        "`scripts/new-base {release} --served`, then merge (docs/patch-contract.md, "
        "\"Day one of a new release\"). Where the tier above passed in full, only the merge "
        "is left: its CI runs the whole matrix.\n"),
    release_tier.UPSTREAM_FIXED: (
        "Next: torch {release} returns eager's numbers in every results cell on its own. "
        "Drop the results patches from its series (keep the feature's), or serve it by row "
        "alone where no topic needs a series; docs/results-fixes.md says which patch is "
        "which.\n"),
    release_tier.TIER_FAILED: (
        "Next: read the logs named above; the series is written but not served. Fix the "
        "series (or the tests), then `scripts/test.sh --releases {release}`.\n"),
    "served by content": (
        "Next: merge. torch {release}'s files are those of the pre-release its row and "
        "series were written and tested from; users get them by content.\n"),
    "pre-release differs": (
        "Next: `scripts/new-base {release}` serves the final's own files (its series "
        "replayed again), then its tier as on any day one.\n"),
    "conflict": (
        "Next: finish each conflicting patch in the scratch repository named above "
        "(`git add`, `git am --continue`), then run `scripts/new-base {release}` again "
        "(docs/patch-contract.md).\n"),
}


def serve(request: Request, patches: Store) -> int:
    try:
        chosen = patches.select(request.topics or ["all"])
    except Refused as unknown:  # a usage error, as apply.sh's --topic
        raise UsageError(str(unknown)) from None
    temporary = Path(tempfile.mkdtemp(prefix="pregrad-new-base-"))
    try:
        scratch_root = (temporary / "scratch" if request.check else request.scratch
                        or cache_dir() / "new-base" / f"v{request.release}")
        outcomes = decide(Run(request, cache_dir(), scratch_root, temporary / "staged"), chosen)
        row = write.release_row(patches, request.release,
                                {o.topic.name: o.cell for o in outcomes}, NOT_YET)
        if request.check:
            return say_check(request, patches, outcomes, row)
        if all(o.conflict for o in outcomes):
            print("nothing was written: no topic has a series or a row cell yet")
            return Exit.FAILED
        write_all(request, patches, outcomes, row)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    code = follow_up(request, [o.topic for o in outcomes if o.written is not None])
    return Exit.FAILED if code or any(o.conflict for o in outcomes) else Exit.OK


def follow_up(request: Request, topics: List[Topic]) -> int:
    """update-docs (the clone's README) and check-patches on what was written."""
    code = 0
    if request.patches.resolve() == (CLONE / "patches").resolve():
        code |= update_docs.main([])
    if topics:
        check = [sys.executable, str(CLONE / "scripts" / "check-patches"),
                 "--patches", str(request.patches)]
        if request.python is not None:
            check += ["--python", request.python]
        for topic in topics:
            check += ["--topic", topic.name]
        sys.stdout.flush()
        code |= subprocess.run(check + [f"v{request.release}"]).returncode
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    return grammar.main(grammar_of.PROG, grammar_of.USAGE, argv, grammar_of.read, run,
                        INTERRUPTED)
