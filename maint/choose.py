"""What new-base gives each topic of a release: the release's files (an
install's, or the wheel's by byte range: torch_backport/installed/pristine.py and
torch_backport/download/ranged.py), then a base's row when they are that base's files, "has it"
when the change is upstream, else a replay of the nearest base's series
(maint/replay.py) staged for writing (maint/write.py), or a conflict left
for a person."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from maint import replay as scratch
from maint import write
from maint.request import Request
from torch_backport.installed import pristine
from torch_backport.infra import tables
from torch_backport.download import release_wheels
from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import shown
from torch_backport.patchset.releases import HAS_IT, NOT_YET
from torch_backport.patchset.identify import identify, Match, version_preference
from torch_backport.patchset.series import (fixed_bases, load_series, pristine_blobs, Series,
                                            supported_bases, Topic)
from torch_backport.download.release_wheels import ReleaseFiles


@dataclasses.dataclass
class Outcome:
    """What one topic gets: `cell` is its releases.tsv cell."""
    topic: Topic
    cell: str
    lines: List[str]
    written: Optional[Path] = None  # a staged series directory to move into place
    conflict: bool = False


@dataclasses.dataclass
class Run:
    """One run of new-base: the request, where scratch repositories and
    staged series go, and every release's files it read (for the total)."""
    request: Request
    cache: Path
    scratch_root: Path
    staging_root: Path
    reads: List[ReleaseFiles] = dataclasses.field(default_factory=list)

    def ancestor(self, series: Series) -> ReleaseFiles:
        """The base's pristine files, checked against its pristine.tsv: from
        --base-python, the stock venv, else the wheel by byte range."""
        version = series.version
        found = pristine.base_release(series, self.cache, pythons=(
            self.request.base_pythons.get(version),
            stock_venv_python(self.cache, version)))
        self.reads.append(found)
        return found

    def trial(self, tmp: Path) -> "Run":
        """This run, replaying in a throw-away directory (and never resuming)."""
        return dataclasses.replace(self, scratch_root=tmp / "scratch",
                                   staging_root=tmp / "staged", reads=self.reads)


def release_files(run: Run, paths: List[str]) -> ReleaseFiles:
    """RELEASE's files: from --python's torch, else its wheel by byte range."""
    request = run.request
    if request.python is None:
        found = release_wheels.release_files(request.release, paths, run.cache)
    else:
        found = pristine.install_files(request.python, paths)
        if tables.release_numbers(found.version) != tables.release_numbers(request.release):
            raise Refused(f"--python {request.python} has torch {found.version}, not "
                          f"{request.release}; nothing was written")
        # 2.13.0+cpu is release 2.13.0: the series and its row are named by the release.
        found = dataclasses.replace(found, version=request.release)
    run.reads.append(found)
    return found


def has_upstream(topic: Topic, files: ReleaseFiles) -> bool:
    data = files.files.get(topic.feature_file)
    return data is not None and topic.has_feature(data)


def candidate_bases(topic: Topic, files: ReleaseFiles) -> List[str]:
    """The bases whose series fit a release like this one: those that fix a
    release with the change if it has it, else those that bring it."""
    fixes = fixed_bases(topic)
    if has_upstream(topic, files):
        return fixes
    return [base for base in supported_bases(topic) if base not in fixes]


def nearest_bases(topic: Topic, files: ReleaseFiles, among: List[str]) -> List[str]:
    """`among`, nearest first: the base holding most of the release's touched
    files byte for byte; then the nearest release below it, then above."""
    def key(base: str) -> Tuple[int, Tuple[int, Tuple[int, ...]]]:
        series = load_series(base, topic)
        blobs = scratch.blobs_of(files, series.touched)
        same = sum(blobs[rel] == blob for rel, blob in pristine_blobs(series).items())
        return (-same, version_preference(base, files.version))
    return sorted(among, key=key)


def upstream_before(topic: Topic, release: str) -> str:
    """Why a release with the topic's change needs no series, going by the
    newest served release below it: '' if that one gets a series."""
    rows = tables.read_releases(topic.store.root)
    previous = rows.newest_below(release)
    if previous is None or rows.cells[previous].get(topic.name) != HAS_IT:
        return ""
    return f"as {previous}, the newest release below it, has it"


def conflict_outcome(topic: Topic, base: str, files: ReleaseFiles, stop: scratch.Stopped,
                     check: bool) -> Outcome:
    lines = stop.lines + [
        f"{topic.name}: {stop.patch} of {base} does not merge onto torch "
        f"{files.version}'s files (3-way, {base}'s files as the ancestor):", *stop.report]
    if check:
        lines.append("  a run without --check leaves a scratch repository stopped at this "
                     "conflict, to finish with git am --continue")
    else:
        lines += [
            f"  the scratch repository is stopped in git am at that patch: {stop.work}",
            f"  to finish: cd {stop.work}; edit the file(s) above; git add them; "
            "git am --continue",
            "  then run this command again: it writes the series you finished"]
    lines.append(f"  topic {topic.name} is not written; its releases.tsv cell is '{NOT_YET}'")
    return Outcome(topic, NOT_YET, lines, conflict=True)


def finished_outcome(topic: Topic, done: scratch.Finished, series: Series,
                     files: ReleaseFiles, run: Run) -> Outcome:
    staging = run.staging_root / topic.name
    write.stage_series(done, series, files, staging)
    write.check_post_images(topic, staging, files)
    summary = ", ".join(f"{patch.name[:4]} {how}" for patch, how in zip(series.patches,
                                                                        done.hows))
    left = len(series.patches) - len(done.hows)
    if left:
        summary += f"{', ' if summary else ''}{left} after a conflict resolved by hand"
    return Outcome(topic, f"v{files.version}", done.lines + [
        f"{topic.name}: replayed {series.base}'s {len(series.patches)} patch(es) onto "
        f"torch {files.version}'s files: {summary}"], written=staging)


def replay_outcome(topic: Topic, base: str, files: ReleaseFiles, run: Run) -> Outcome:
    series = load_series(base, topic)
    missing = [rel for rel in series.touched if rel not in files.files]
    if missing:
        return Outcome(topic, NOT_YET, [
            f"{topic.name}: torch {files.version} has no {', '.join(missing)}, which "
            f"{base}'s series patches: a redesign, not a replay; not written"], conflict=True)
    made = scratch.replay(run.scratch_root / topic.name, topic, series, files,
                          lambda: run.ancestor(series))
    if isinstance(made, scratch.Unfit):
        return Outcome(topic, NOT_YET, [made.line], conflict=True)
    if isinstance(made, scratch.Stopped):
        return conflict_outcome(topic, base, files, made, run.request.check)
    return finished_outcome(topic, made, series, files, run)


def others_that_merge(topic: Topic, others: List[str], files: ReleaseFiles,
                      run: Run) -> List[str]:
    """Where the nearest base's series stopped at a conflict: which other
    bases' series merge cleanly (tried in a throw-away directory)."""
    clean, lines = [], []
    for other in others:
        before = len(run.reads)
        with tempfile.TemporaryDirectory(prefix="pregrad-new-base-trial-") as tmp:
            trial = replay_outcome(topic, other, files, run.trial(Path(tmp)))
        lines += [f"  tried {other}'s series ({'clean' if not trial.conflict else 'conflict'}"
                  f"), its pristine files from {found.source}" for found in run.reads[before:]]
        if not trial.conflict:
            clean.append(other)
    if not clean:
        return lines + [f"  no other base's series of {topic.name} merges cleanly either"]
    return lines + [
        f"  {', '.join(clean)}: its series merges cleanly; `--from {clean[0]} --topic "
        f"{topic.name}` writes it, but a clean merge is not proof: check that its "
        "patches are the concerns this release needs (docs/patch-contract.md)"]


def exact_or_upstream(topic: Topic, files: ReleaseFiles, bases: List[str],
                      request: Request) -> Optional[Outcome]:
    """A base's row (the release's files are that base's), "has it", or
    None: a replay decides."""
    paths = sorted({rel for base in bases for rel in load_series(base, topic).touched})
    found = identify(topic, scratch.blobs_of(files, paths), files.version)
    if found.series is not None and found.how is Match.PRISTINE:
        return Outcome(topic, found.series.base, [f"{topic.name}: {found.reason()}: "
                                                  f"the row names {found.series.base}"])
    if found.series is not None and found.how is Match.PATCHED:
        raise Refused(f"{files.source}: its files are already patched by "
                      f"{shown(found.series.directory)}; new-base needs stock files")
    if request.from_base is not None or not has_upstream(topic, files):
        return None
    upstream = upstream_before(topic, files.version)
    if candidate_bases(topic, files) and not upstream:
        return None
    why = upstream or "and no base needs fixes for it"
    return Outcome(topic, HAS_IT, [f"{topic.name}: {topic.present} in torch "
                                   f"{files.version}, {why}: has it"])


def outcome_for(topic: Topic, files: ReleaseFiles, run: Run) -> Outcome:
    bases = supported_bases(topic)
    if not bases:
        return Outcome(topic, HAS_IT if has_upstream(topic, files) else NOT_YET,
                       [f"{topic.name}: no base has a series"])
    decided = exact_or_upstream(topic, files, bases, run.request)
    if decided is not None:
        return decided
    if run.request.from_base is not None:
        if run.request.from_base not in bases:
            raise Refused(f"--from {run.request.from_base}: topic {topic.name} has no series "
                          f"there (bases: {', '.join(bases)})")
        return replay_outcome(topic, run.request.from_base, files, run)
    among = candidate_bases(topic, files)
    if not among:
        return Outcome(topic, NOT_YET, [f"{topic.name}: no base's series fits"], conflict=True)
    ranked = nearest_bases(topic, files, among)
    outcome = replay_outcome(topic, ranked[0], files, run)
    if outcome.conflict:
        outcome.lines += others_that_merge(topic, ranked[1:], files, run)
    return outcome


def stock_venv_python(cache: Path, version: str) -> str:
    """The stock test venv of a release (scripts/test.sh makes them)."""
    return str(cache / "venvs" / f"torch-{version}" / "bin" / "python")
