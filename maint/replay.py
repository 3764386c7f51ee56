"""new-base's replay in a scratch repository: a base's pristine files with
its series applied by `git am`, then an orphan commit of the release's
files and `git am -3` of the same patches onto it, so that every patch
merges with the base's own files as the ancestor. A replay that stops at a
conflict is left for a person (`git am --continue`); the next run picks up
what they finished, recognised by the marker file in the repository's .git.
Every git command goes through torch_backport/infra/git.py (a scratch runner:
isolated configuration, a fixed identity and date)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

from torch_backport.infra import git as gitrun
from torch_backport.infra.record import sha256_hex
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.series import Series, Topic
from torch_backport.download.release_wheels import ReleaseFiles

MARKER = "pregrad-new-base.json"  # in the scratch repository's .git


def blobs_of(files: ReleaseFiles, paths: Sequence[str]) -> Dict[str, Optional[str]]:
    """path -> git blob id of the release's file (None: it has none)."""
    return {rel: git_blob_id(files.files[rel]) if rel in files.files else None
            for rel in paths}


@dataclasses.dataclass
class Finished:
    """A replay whose every patch is in: the commits after `release_commit`."""
    work: Path
    release_commit: str
    hows: List[str]  # how each patch went in, as far as git am -3 got
    lines: List[str]


@dataclasses.dataclass
class Stopped:
    """A replay stopped at a conflict: which patch, and the report."""
    work: Path
    patch: str
    report: List[str]
    lines: List[str]


@dataclasses.dataclass
class Unfit:
    """A scratch repository that cannot be picked up: why."""
    line: str


Replayed = Union[Finished, Stopped, Unfit]


def series_digest(series: Series) -> str:
    return sha256_hex(b"".join(patch.read_bytes() for patch in series.patches))


def stamp_of(topic: Topic, series: Series, files: ReleaseFiles) -> Dict[str, object]:
    """What a scratch repository was made from: a later run picks it up
    only if all of this is the same."""
    return {"release": files.version, "from": series.base, "topic": topic.name,
            "release_blobs": blobs_of(files, series.touched), "series": series_digest(series)}


def read_marker(work: Path) -> Optional[Dict[str, object]]:
    try:
        found: Dict[str, object] = json.loads((work / ".git" / MARKER).read_text())
        return found
    except (OSError, ValueError):
        return None


def write_marker(work: Path, stamp: Dict[str, object]) -> None:
    (work / ".git" / MARKER).write_text(json.dumps(stamp, indent=1))


def merge_hows(output: str) -> List[str]:
    """How `git am -3` took each patch it got to, from its output."""
    hows: List[str] = []
    for section in re.split(r"^Applying: ", output, flags=re.MULTILINE)[1:]:
        if "No changes -- Patch already applied" in section:
            hows.append("dropped: already in the release")
        elif "CONFLICT" in section or "Patch failed" in section:
            hows.append("conflict")
        elif "Falling back to patching base and 3-way merge" in section:
            hows.append("3-way merge, clean")
        else:
            hows.append("applied as is")
    return hows


def stopped(work: Path, series: Series, release: str, lines: List[str]) -> Stopped:
    """Which patch, file and hunk did not merge, and the conflicting lines."""
    git = gitrun.scratch(work)
    patch = series.patches[gitrun.am_stopped_at(git) - 1]
    return Stopped(work, patch.name, gitrun.conflict_report(git, patch.path, release), lines)


def start(work: Path, series: Series, base_files: Dict[str, bytes], files: ReleaseFiles,
          stamp: Dict[str, object]) -> Replayed:
    """A fresh scratch repository: the base's files with its series, then
    the release's files and `git am -3` of the same patches."""
    shutil.rmtree(work, ignore_errors=True)
    git = gitrun.init_scratch(work, f"{series.base}-series")
    gitrun.write_tree(git, base_files)
    gitrun.commit_all(git, f"pristine torch {series.version} ({series.base})")
    patches = [str(patch.path) for patch in series.patches]
    git("am", "-q", "--keep-cr", *patches)  # the base's own series: must apply
    git("checkout", "-q", "--orphan", f"v{files.version}")
    git("rm", "-rfq", ".")
    gitrun.write_tree(git, {rel: files.files[rel] for rel in series.touched})
    release = gitrun.commit_all(git, f"pristine torch {files.version} ({files.source})")
    stamp["release_commit"] = release
    write_marker(work, stamp)
    am = git("am", "-3", "--keep-cr", *patches, check=False)
    hows = merge_hows(am.stdout + am.stderr)
    hows = hows[:len(hows) - (am.returncode != 0)]
    stamp["hows"] = hows
    write_marker(work, stamp)
    if am.returncode != 0:
        return stopped(work, series, files.version, [])
    return Finished(work, release, hows, [])


def resume(work: Path, topic: Topic, series: Series, files: ReleaseFiles,
           previous: Dict[str, object]) -> Replayed:
    """A scratch repository made from the same files and series: still
    stopped, or finished by a person."""
    if (work / ".git" / "rebase-apply").exists():
        return stopped(work, series, files.version,
                       ["still stopped at this conflict (from an earlier run)"])
    release_commit = str(previous["release_commit"])
    git = gitrun.scratch(work)
    count = int(git("rev-list", "--count", f"{release_commit}..HEAD").stdout)
    if count == 0 or count > len(series.patches):
        return Unfit(f"{topic.name}: {work} has {count} commit(s) on the v{files.version} "
                     f"files, {series.base}'s series has {len(series.patches)}: finish there "
                     "(git am --continue) or remove it and run again; not written")
    hows = [str(how) for how in previous.get("hows", [])]  # type: ignore[attr-defined]
    return Finished(work, release_commit, hows,
                    [f"{topic.name}: picking up the series finished in {work}"])


def replay(work: Path, topic: Topic, series: Series, files: ReleaseFiles,
           ancestor: Callable[[], ReleaseFiles]) -> Replayed:
    """`series` replayed onto the release's files in the scratch repository
    `work`: picked up from an earlier run made from the same files and
    series, else made afresh (`ancestor` reads the base's pristine files)."""
    stamp = stamp_of(topic, series, files)
    previous = read_marker(work)
    if previous is not None and all(previous.get(k) == v for k, v in stamp.items()):
        return resume(work, topic, series, files, previous)
    lines: List[str] = []
    if work.exists():
        # Made for other files, another base or an edited series: kept
        # aside, never deleted (it may hold a person's resolution).
        aside = work.with_name(f"{work.name}.{datetime.datetime.now():%Y%m%d-%H%M%S}")
        os.replace(work, aside)
        lines.append(f"{topic.name}: {work} was made for other files or another "
                     f"series; moved it to {aside} and started again")
    base = ancestor()
    lines.append(f"{topic.name}: {series.base}'s pristine files, the merge ancestor, "
                 f"from {base.source}")
    made = start(work, series, base.files, files, stamp)
    if not isinstance(made, Unfit):
        made.lines[:0] = lines
    return made


def format_patches(work: Path, release_commit: str, out: Path) -> List[Path]:
    """The commits after the release's, as `git format-patch` files in `out`."""
    git = gitrun.scratch(work)
    git("format-patch", "--zero-commit", "-N", "--full-index", "--no-signature",
        "-o", str(out), f"{release_commit}..HEAD")
    return sorted(out.glob("*.patch"))
