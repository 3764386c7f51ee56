"""A new base in one command (`scripts/new-base`, `torch-backport new-base`):
serve a torch release by replaying the nearest base's series onto its files
with a real 3-way merge.

For each topic the release's touched files (from --python's install or the
release wheel, each checked against RECORD) are compared with every base's:
- equal to a base's, byte for byte: the release gets only its row in
  patches/releases.tsv, naming that base;
- the topic's change upstream and no fixes for it: "has it";
- otherwise the nearest base (or --from) is replayed in a scratch git
  repository: that base's pristine files, its series applied with `git am`,
  then an orphan commit of the release's files and `git am -3` of the same
  patches onto it, so every patch merges against the base's own files as
  the ancestor. A clean replay is written to patches/v<release>/ by `git
  format-patch`, each message saying where it came from and how; a conflict
  is left in the scratch repository for a person (`git am --continue`), and
  the next run picks up the finished series from there.

A written series is a candidate (patches/candidates.tsv) until its matrix
has passed (`scripts/test.sh --releases X`); `--served` then takes it off
that list. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from torch_backport.fsio import atomic_write, cache_dir
from torch_backport.install import files_of_wheel, record_digest
from torch_backport.releases import CANDIDATES, HAS_IT, NOT_YET
from torch_backport.series import (
    fixed_bases,
    git_blob_id,
    identify,
    load_series,
    Refused,
    release_numbers,
    REPO,
    Series,
    sha256_hex,
    shown,
    Store,
    store,
    supported_bases,
    Topic,
    version_preference,
)

USAGE = """\
Usage: scripts/new-base RELEASE [--from BASE] [--topic T]... [--python PY] [--check]
       scripts/new-base RELEASE --served
       scripts/new-base --help

Serves torch RELEASE (e.g. 2.16.0): for each topic (patches/topics.tsv; or
those --topic names) it reads the files the topic's series touch from PY's
installed torch (--python; it must be RELEASE, stock: each file is checked
against the install's RECORD) or from the release wheel (pip download, once,
into $PREGRAD_CACHE/wheels; checked against the wheel's RECORD), then:
  - files equal to a base's, byte for byte: only the patches/releases.tsv
    row, naming that base (2.14.0 -> v2.14.1);
  - the topic's change upstream and no fixes series for it: "has it";
  - otherwise it replays the nearest base's series (the one holding most of
    these files byte for byte, then the nearest release below; or --from)
    in a scratch git repository with a real 3-way merge: `git am -3` onto
    the release's files, the base's pristine files (from a stock venv under
    $PREGRAD_CACHE/venvs, --base-python, or that release's wheel) as the
    merge ancestor. Clean: it writes patches/vRELEASE/ (or its topic
    directory): `git format-patch --zero-commit -N --full-index
    --no-signature` output, each message saying which base it was rebased
    from and how each patch merged, plus series and pristine.tsv.
  - a hunk that does not merge: that topic is not written; the output names
    the patch, the file, the hunk and the conflicting lines, and leaves the
    scratch repository (path printed) stopped in `git am`. Resolve the
    conflict there, `git add` the file, `git am --continue`, then run this
    command again: it picks up the finished series.
Then it writes the patches/releases.tsv row (a topic still at a conflict is
"not yet"), lists RELEASE in patches/candidates.tsv when it wrote a series
(a candidate until `scripts/test.sh --releases RELEASE` has passed; then
`--served`), runs scripts/update-docs and scripts/check-patches on what it
wrote.

  --from BASE        replay BASE's series (e.g. v2.14.1) for every topic named
  --topic T          only topic T (repeat, or T1,T2); default: every topic
  --python PY        read RELEASE's files from PY's torch instead of the wheel
  --base-python V=PY read base V's pristine files from PY's torch (repeat)
  --check            say all of this, write nothing (scratch repositories
                     are made under a temporary directory and removed)
  --served           RELEASE's matrix passed: remove it from candidates.tsv
  --patches DIR      the patches directory to read and write (default: the
                     clone's patches/); update-docs runs only on the clone's
  --scratch DIR      where scratch repositories go (default:
                     $PREGRAD_CACHE/new-base/vRELEASE/<topic>)

Exit codes: 0 every topic served (written, a base's row, or has it); 1 a
topic stopped at a conflict (the others were written) or a refusal (nothing
written); 2 usage error.
"""

AUTHOR = ("torch-pregrad-backport", "pregrad-backport@localhost")
FORMAT_PATCH = ["format-patch", "--zero-commit", "-N", "--full-index", "--no-signature"]
MARKER = "pregrad-new-base.json"  # in the scratch repository's .git


@dataclasses.dataclass(frozen=True)
class Request:
    release: str
    from_base: Optional[str]
    topics: List[str]
    python: Optional[str]
    base_pythons: Dict[str, str]
    check: bool
    served: bool
    patches: Path
    scratch: Optional[Path]


@dataclasses.dataclass
class ReleaseFiles:
    """A release's files (path -> bytes; a path it lacks is absent), each
    checked against its RECORD, and where they came from."""
    version: str
    files: Dict[str, bytes]
    source: str

    def blobs(self, paths: Sequence[str]) -> Dict[str, Optional[str]]:
        return {rel: git_blob_id(self.files[rel]) if rel in self.files else None
                for rel in paths}


@dataclasses.dataclass
class Outcome:
    """What one topic gets: `cell` is its releases.tsv cell."""
    topic: Topic
    cell: str
    lines: List[str]
    written: Optional[Path] = None  # a staged series directory to move into place
    conflict: bool = False


# --------------------------------------------------------------------------
# Reading files, checked against RECORD.

INSTALL_PROBE = r"""
import json, sys
from importlib import metadata
dist = metadata.distribution("torch")
record = {f.as_posix(): f.hash.value for f in dist.files or []
          if f.hash is not None and f.hash.mode == "sha256"}
print(json.dumps({"version": dist.version, "site": str(dist.locate_file("")),
                  "record": {p: record.get(p) for p in json.loads(sys.argv[1])}}))
"""


def install_files(python: str, paths: Sequence[str]) -> ReleaseFiles:
    """The files `paths` names of PY's torch, each as its RECORD says."""
    probe = subprocess.run([python, "-c", INSTALL_PROBE, json.dumps(list(paths))],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise Refused(f"{python}: could not read its torch's RECORD "
                      f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else 'no output'})")
    found = json.loads(probe.stdout)
    site = Path(found["site"])
    files: Dict[str, bytes] = {}
    for rel, digest in found["record"].items():
        path = site / rel
        if digest is None or not path.is_file():
            continue
        data = path.read_bytes()
        if record_digest(data) != digest:
            raise Refused(f"{path} differs from torch {found['version']}'s RECORD (patched or "
                          "edited): new-base needs the release's own files; use a stock "
                          "install, or leave out --python to read the release wheel")
        files[rel] = data
    return ReleaseFiles(found["version"], files, f"{python}'s torch {found['version']} ({site})")


def wheel_files(version: str, paths: Sequence[str], cache: Path) -> ReleaseFiles:
    from torch_backport.fsio import release_wheel
    wheel = release_wheel(version, cache)
    return ReleaseFiles(version, files_of_wheel(wheel, list(paths)), f"{wheel}")


def release_files(request: Request, paths: Sequence[str]) -> ReleaseFiles:
    if request.python is None:
        return wheel_files(request.release, paths, cache_dir())
    found = install_files(request.python, paths)
    if release_numbers(found.version) != release_numbers(request.release):
        raise Refused(f"--python {request.python} has torch {found.version}, not "
                      f"{request.release}; nothing was written")
    # 2.13.0+cpu is release 2.13.0: the series and its row are named by the release.
    return dataclasses.replace(found, version=request.release)


def base_pristine(series: Series, request: Request) -> Dict[str, bytes]:
    """The pristine files of `series`' base, checked against its pristine.tsv:
    from --base-python, else the stock test venv, else the release wheel."""
    from torch_backport.series import pristine_sha256
    wanted = pristine_sha256(series)
    version = series.version
    pythons = [request.base_pythons.get(version),
               str(cache_dir() / "venvs" / f"torch-{version}" / "bin" / "python")]
    tried: List[str] = []
    for python in pythons:
        if python is None or not os.access(python, os.X_OK):
            continue
        try:
            found = install_files(python, list(wanted))
        except Refused as problem:
            tried.append(str(problem))
            continue
        if all(rel in found.files and sha256_hex(found.files[rel]) == digest
               for rel, digest in wanted.items()):
            return {rel: found.files[rel] for rel in wanted}
        tried.append(f"{python}: its files are not {series.base}'s pristine.tsv")
    found = wheel_files(version, list(wanted), cache_dir())
    for rel, digest in wanted.items():
        if rel not in found.files or sha256_hex(found.files[rel]) != digest:
            also = "; also tried: " + "; ".join(tried) if tried else ""
            raise Refused(f"{found.source}: {rel} is not the file "
                          f"{shown(series.directory)}/pristine.tsv names{also}")
    return {rel: found.files[rel] for rel in wanted}


# --------------------------------------------------------------------------
# Choosing what a topic gets.


def has_upstream(topic: Topic, files: ReleaseFiles) -> bool:
    data = files.files.get(topic.feature_file)
    return data is not None and topic.has_feature(data)


def previous_release(patches: Store, release: str) -> Optional[Tuple[str, Dict[str, str]]]:
    """The newest releases.tsv row below `release`: (version, topic -> cell)."""
    path = patches.root / "releases.tsv"
    lines = path.read_text().splitlines()
    header = next(line[2:].split("\t") for line in lines if line.startswith("# release\t"))
    rows = [line.split("\t") for line in lines if line.strip() and not line.startswith("#")]
    below = [row for row in rows
             if release_numbers(row[0]) < release_numbers(release)]
    if not below:
        return None
    row = max(below, key=lambda fields: release_numbers(fields[0]))
    return row[0], dict(zip(header[1:], row[1:]))


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
        from torch_backport.series import pristine_blobs
        blobs = files.blobs(series.touched)
        same = sum(blobs[rel] == blob for rel, blob in pristine_blobs(series).items())
        return (-same, version_preference(base, files.version))
    return sorted(among, key=key)


# --------------------------------------------------------------------------
# The scratch repository.


def git(work: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_COMMITTER_NAME=AUTHOR[0], GIT_COMMITTER_EMAIL=AUTHOR[1],
               GIT_AUTHOR_NAME=AUTHOR[0], GIT_AUTHOR_EMAIL=AUTHOR[1],
               GIT_COMMITTER_DATE="2026-01-01T00:00:00+00:00", LC_ALL="C")
    result = subprocess.run(["git", *args], cwd=work, env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise Refused(f"git {' '.join(args[:2])} failed in {work}: "
                      f"{(result.stderr or result.stdout).strip()}")
    return result


def commit_files(work: Path, files: Dict[str, bytes], message: str) -> str:
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    git(work, "add", "-A")
    git(work, "commit", "-q", "--allow-empty", "-m", message)
    return git(work, "rev-parse", "HEAD").stdout.strip()


def series_digest(series: Series) -> str:
    return sha256_hex(b"".join(patch.read_bytes() for patch in series.patches))


def start_replay(work: Path, series: Series, base_files: Dict[str, bytes],
                 files: ReleaseFiles, stamp: Dict[str, object]) -> Tuple[str, List[str], int]:
    """A fresh scratch repository: the base's files with its series, then
    the release's files and `git am -3` of the same patches. Returns the
    release commit, how each patch that went in went in, and am's exit code."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", f"{series.base}-series")
    git(work, "config", "user.name", AUTHOR[0])
    git(work, "config", "user.email", AUTHOR[1])
    git(work, "config", "core.autocrlf", "false")
    commit_files(work, base_files, f"pristine torch {series.version} ({series.base})")
    patches = [str(patch.path) for patch in series.patches]
    git(work, "am", "-q", "--keep-cr", *patches)  # the base's own series: must apply
    git(work, "checkout", "-q", "--orphan", f"v{files.version}")
    git(work, "rm", "-rfq", ".")
    release = commit_files(work, {rel: files.files[rel] for rel in series.touched},
                           f"pristine torch {files.version} ({files.source})")
    stamp["release_commit"] = release
    (work / ".git" / MARKER).write_text(json.dumps(stamp, indent=1))
    am = git(work, "am", "-3", "--keep-cr", *patches, check=False)
    hows = merge_hows(am.stdout + am.stderr)
    stamp["hows"] = hows[:len(hows) - (am.returncode != 0)]
    (work / ".git" / MARKER).write_text(json.dumps(stamp, indent=1))
    return release, stamp["hows"], am.returncode  # type: ignore[return-value]


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


@dataclasses.dataclass
class Conflict:
    patch: str
    lines: List[str]


def describe_conflict(work: Path, series: Series, release: str) -> Conflict:
    """Which patch, file and hunk did not merge, and the conflicting lines."""
    apply_dir = work / ".git" / "rebase-apply"
    number = int((apply_dir / "next").read_text()) if (apply_dir / "next").is_file() else 1
    patch = series.patches[number - 1]
    lines: List[str] = []
    # The hunk: `git apply --check` of the patch against HEAD names the first
    # one that does not apply, by its line in the pre-image.
    with tempfile.TemporaryDirectory(prefix="pregrad-new-base-index-") as tmp:
        index = str(Path(tmp) / "index")
        env = dict(os.environ, GIT_INDEX_FILE=index)
        subprocess.run(["git", "read-tree", "HEAD"], cwd=work, env=env, check=True)
        check = subprocess.run(["git", "apply", "--cached", "--check", "--verbose",
                                str(patch.path)], cwd=work, env=env,
                               capture_output=True, text=True)
    failed = re.findall(r"^error: patch failed: (\S+):(\d+)$", check.stderr, re.MULTILINE)
    text = patch.read_text()
    for rel, line in failed:
        header = re.search(rf"^@@ -{line}(?:,\d+)? \+\d+(?:,\d+)? @@.*$", section_of(text, rel),
                           re.MULTILINE)
        lines.append(f"  {rel}: hunk {header.group(0) if header else f'at line {line}'} "
                     f"does not apply to {release}'s file")
    unmerged = git(work, "diff", "--name-only", "--diff-filter=U").stdout.split()
    shown_lines = 0
    for rel in unmerged:
        content = (work / rel).read_text(errors="replace").splitlines()
        starts = [i for i, text_line in enumerate(content) if text_line.startswith("<<<<<<<")]
        lines.append(f"  conflicting lines in {rel} ({len(starts)} region(s)):")
        for start in starts:
            end = next((i for i in range(start, len(content))
                        if content[i].startswith(">>>>>>>")), len(content) - 1)
            lines.append(f"    lines {start + 1}-{end + 1}:")
            for i in range(start, end + 1):
                if shown_lines >= 60:
                    lines.append("    ... (the rest is in the file)")
                    break
                lines.append(f"    {i + 1:>6}  {content[i]}")
                shown_lines += 1
    if not unmerged and not failed:
        lines.append("  git am stopped without a conflicted file; see `git am --show-current-patch`")
    return Conflict(patch.name, lines)


def section_of(patch_text: str, rel: str) -> str:
    start = patch_text.find(f"diff --git a/{rel} b/{rel}")
    if start < 0:
        return patch_text
    end = patch_text.find("\ndiff --git ", start + 1)
    return patch_text[start:end if end > 0 else len(patch_text)]


# --------------------------------------------------------------------------
# Writing a series.


def rebased_message(text: str, base: str, release: str, how: str, today: str) -> str:
    """A format-patch file whose message says it was rebased, from which base
    and how; Last-Update is today."""
    head, sep, rest = text.partition("\n---\n")
    head = re.sub(r"^Last-Update: .*$", f"Last-Update: {today}", head, flags=re.MULTILINE)
    body, _, trailers = head.rpartition("\n\n")
    note = "\n".join(textwrap.wrap(
        f"Rebased onto torch {release} from {base}'s series by scripts/new-base ({how}), "
        f"with the pristine {base} files as the merge ancestor; the paragraphs above were "
        f"written for {base}.", width=72, break_on_hyphens=False))
    return f"{body}\n\n{note}\n\n{trailers}\nRebased-From: {base} ({how}){sep}{rest}"


def stage_series(work: Path, release_commit: str, series: Series, files: ReleaseFiles,
                 hows: List[str], staging: Path) -> None:
    """patches, series and pristine.tsv of the replayed series, in `staging`."""
    staging.mkdir(parents=True)
    out = Path(tempfile.mkdtemp(prefix="pregrad-new-base-fp-"))
    try:
        git(work, *FORMAT_PATCH, "-o", str(out), f"{release_commit}..HEAD")
        made = sorted(out.glob("*.patch"))
        today = datetime.date.today().isoformat()
        names: List[str] = []
        kept = [how for how in hows if not how.startswith("dropped")]
        for number, path in enumerate(made):
            how = (kept[number] if number < len(kept) else "conflict resolved by hand"
                   if number == len(kept) else "applied by git am --continue after that")
            text = rebased_message(path.read_text(), series.base, files.version, how, today)
            (staging / path.name).write_text(text)
            names.append(path.name)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    touched = sorted({line.split(" b/", 1)[1] for name in names
                      for line in (staging / name).read_text().splitlines()
                      if line.startswith("diff --git a/")})
    rows = [f"{rel}\t{git_blob_id(files.files[rel])}\t{sha256_hex(files.files[rel])}"
            for rel in touched]
    (staging / "pristine.tsv").write_text(
        f"# Pristine torch v{files.version} files that the series touches, as in the "
        "wheel.\n# path\tgit-blob-sha1\tsha256\n" + "\n".join(rows) + "\n")
    (staging / "series").write_text(
        f"# Series for torch v{files.version}: quilt order, one patch a line, `#` starts a "
        "comment.\n"
        f"# Made by scripts/new-base from {series.base}'s series (3-way merge onto the "
        f"v{files.version} files).\n" + "\n".join(names) + "\n")


def replay(topic: Topic, base: str, files: ReleaseFiles, request: Request,
           scratch_root: Path, staging_root: Path) -> Outcome:
    series = load_series(base, topic)
    missing = [rel for rel in series.touched if rel not in files.files]
    if missing:
        return Outcome(topic, NOT_YET, [
            f"{topic.name}: torch {files.version} has no {', '.join(missing)}, which "
            f"{base}'s series patches: a redesign, not a replay; not written"], conflict=True)
    work = scratch_root / topic.name
    stamp: Dict[str, object] = {
        "release": files.version, "from": base, "topic": topic.name,
        "release_blobs": files.blobs(series.touched), "series": series_digest(series)}
    lines: List[str] = []
    previous = read_marker(work)
    resumable = previous is not None and all(previous.get(k) == v for k, v in stamp.items())
    if resumable and (work / ".git" / "rebase-apply").exists():
        assert previous is not None
        conflict = describe_conflict(work, series, files.version)
        return conflict_outcome(topic, base, files, work, conflict,
                                ["still stopped at this conflict (from an earlier run)"],
                                request.check)
    if resumable:
        assert previous is not None
        release_commit = str(previous["release_commit"])
        count = int(git(work, "rev-list", "--count", f"{release_commit}..HEAD").stdout)
        if count == 0 or count > len(series.patches):
            return Outcome(topic, NOT_YET, [
                f"{topic.name}: {work} has {count} commit(s) on the v{files.version} files, "
                f"{base}'s series has {len(series.patches)}: finish there (git am --continue) "
                "or remove it and run again; not written"], conflict=True)
        hows = [str(how) for how in previous.get("hows", [])]  # type: ignore[union-attr]
        lines.append(f"{topic.name}: picking up the series finished in {work}")
    else:
        if work.exists():
            # Made for other files, another base or an edited series: kept
            # aside, never deleted (it may hold a person's resolution).
            aside = work.with_name(f"{work.name}.{datetime.datetime.now():%Y%m%d-%H%M%S}")
            os.replace(work, aside)
            lines.append(f"{topic.name}: {work} was made for other files or another "
                         f"series; moved it to {aside} and started again")
        base_files = base_pristine(series, request)
        release_commit, hows, code = start_replay(work, series, base_files, files, stamp)
        if code != 0:
            conflict = describe_conflict(work, series, files.version)
            return conflict_outcome(topic, base, files, work, conflict, lines, request.check)
    staging = staging_root / topic.name
    stage_series(work, release_commit, series, files, hows, staging)
    check_post_images(topic, staging, files)
    summary = ", ".join(f"{patch.name[:4]} {how}" for patch, how in zip(series.patches, hows))
    left = len(series.patches) - len(hows)
    if left:
        summary += f"{', ' if summary else ''}{left} after a conflict resolved by hand"
    lines.append(f"{topic.name}: replayed {base}'s {len(series.patches)} patch(es) onto "
                 f"torch {files.version}'s files: {summary}")
    return Outcome(topic, f"v{files.version}", lines, written=staging)


def check_post_images(topic: Topic, staging: Path, files: ReleaseFiles) -> None:
    """The staged series applies to the release's files and yields its own
    post-image blobs (series.apply_series checks them)."""
    from torch_backport.series import apply_series, read_series
    probe = Store(staging.parent)
    name = staging.name
    shadow = dataclasses.replace(topic, dir=".", store=probe)
    series = read_series(name, shadow)
    apply_series({rel: files.files[rel] for rel in series.touched}, series)


def read_marker(work: Path) -> Optional[Dict[str, object]]:
    path = work / ".git" / MARKER
    try:
        found: Dict[str, object] = json.loads(path.read_text())
        return found
    except (OSError, ValueError):
        return None


def conflict_outcome(topic: Topic, base: str, files: ReleaseFiles, work: Path,
                     conflict: Conflict, before: List[str], check: bool) -> Outcome:
    lines = before + [
        f"{topic.name}: {conflict.patch} of {base} does not merge onto torch "
        f"{files.version}'s files (3-way, {base}'s files as the ancestor):",
        *conflict.lines]
    if check:
        lines.append("  a run without --check leaves a scratch repository stopped at this "
                     "conflict, to finish with git am --continue")
    else:
        lines += [
            f"  the scratch repository is stopped in git am at that patch: {work}",
            f"  to finish: cd {work}; edit the file(s) above; git add them; git am --continue",
            "  then run this command again: it writes the series you finished"]
    lines.append(f"  topic {topic.name} is not written; its releases.tsv cell is '{NOT_YET}'")
    return Outcome(topic, NOT_YET, lines, conflict=True)


# --------------------------------------------------------------------------
# A topic's outcome, and the whole run.


def upstream_before(topic: Topic, release: str) -> str:
    """Why a release with the topic's change needs no series, going by the
    newest served release below it: '' if that one gets a series."""
    previous = previous_release(topic.store, release)
    if previous is None or previous[1].get(topic.name) != HAS_IT:
        return ""
    return f"as {previous[0]}, the newest release below it, has it"


def outcome_for(topic: Topic, files: ReleaseFiles, request: Request, scratch_root: Path,
                staging_root: Path) -> Outcome:
    bases = supported_bases(topic)
    if not bases:
        return Outcome(topic, HAS_IT if has_upstream(topic, files) else NOT_YET,
                       [f"{topic.name}: no base has a series"])
    paths = sorted({rel for base in bases for rel in load_series(base, topic).touched})
    found = identify(topic, files.blobs(paths), files.version)
    if found.series is not None and found.how == "pristine":
        return Outcome(topic, found.series.base, [f"{topic.name}: {found.reason()}: "
                                                  f"the row names {found.series.base}"])
    if found.series is not None and found.how == "patched":
        raise Refused(f"{files.source}: its files are already patched by "
                      f"{shown(found.series.directory)}; new-base needs stock files")
    among = candidate_bases(topic, files)
    if request.from_base is not None:
        if request.from_base not in bases:
            raise Refused(f"--from {request.from_base}: topic {topic.name} has no series "
                          f"there (bases: {', '.join(bases)})")
        base = request.from_base
    elif has_upstream(topic, files) and (not among or upstream_before(topic, files.version)):
        why = upstream_before(topic, files.version) or "and no base needs fixes for it"
        return Outcome(topic, HAS_IT, [f"{topic.name}: {topic.present} in torch "
                                       f"{files.version}, {why}: has it"])
    elif not among:
        return Outcome(topic, NOT_YET, [f"{topic.name}: no base's series fits"], conflict=True)
    else:
        ranked = nearest_bases(topic, files, among)
        outcome = replay(topic, ranked[0], files, request, scratch_root, staging_root)
        if outcome.conflict:
            outcome.lines += others_that_merge(topic, ranked[1:], files, request)
        return outcome
    return replay(topic, base, files, request, scratch_root, staging_root)


def others_that_merge(topic: Topic, others: List[str], files: ReleaseFiles,
                      request: Request) -> List[str]:
    """Where the nearest base's series stopped at a conflict: which other
    bases' series merge cleanly (tried in a throw-away directory)."""
    clean = []
    for other in others:
        with tempfile.TemporaryDirectory(prefix="pregrad-new-base-trial-") as tmp:
            trial = replay(topic, other, files, request, Path(tmp) / "scratch",
                           Path(tmp) / "staged")
        if not trial.conflict:
            clean.append(other)
    if not clean:
        return [f"  no other base's series of {topic.name} merges cleanly either"]
    return [f"  {', '.join(clean)}: its series merges cleanly; `--from {clean[0]} --topic "
            f"{topic.name}` writes it, but a clean merge is not proof: check that its "
            "patches are the concerns this release needs (docs/patch-contract.md)"]


def write_outcomes(request: Request, patches: Store, outcomes: List[Outcome]) -> List[str]:
    """Move each staged series into patches/v<release>/, series file last."""
    said: List[str] = []
    target = patches.root / f"v{request.release}"
    for outcome in outcomes:
        if outcome.written is None:
            continue
        final = target if outcome.topic.primary else target / outcome.topic.dir
        final.mkdir(parents=True, exist_ok=True)
        for old in final.glob("*.patch"):
            old.unlink()
        names = sorted(p.name for p in outcome.written.iterdir())
        for name in [n for n in names if n != "series"] + ["series"]:
            os.replace(outcome.written / name, final / name)
        said.append(f"wrote {shown(final)}/ ({len(names) - 2} patch(es), series, pristine.tsv)")
    return said


def release_row(request: Request, patches: Store, outcomes: List[Outcome]
                ) -> Tuple[str, Tuple[str, str, str]]:
    """The new releases.tsv text and what was done to it."""
    path = patches.root / "releases.tsv"
    lines = path.read_text().splitlines()
    header = next(line[2:].split("\t") for line in lines if line.startswith("# release\t"))
    cells = {outcome.topic.name: outcome.cell for outcome in outcomes}
    old = next((line.split("\t") for line in lines
                if line.split("\t")[0] == request.release), None)
    # A topic this run did not look at keeps its cell from an earlier row.
    kept = dict(zip(header, old)) if old else {}
    row = [request.release] + [cells.get(name, kept.get(name, NOT_YET)) for name in header[1:]]
    text = "\t".join(row)
    if old is not None:
        lines = [text if line.split("\t")[0] == request.release else line for line in lines]
        done = ("replace", "replaced", f"the {request.release} row of {shown(path)}: "
                f"{' | '.join(row[1:])}")
    else:
        rows = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
        after = [i for i in rows if release_numbers(lines[i].split("\t")[0])
                 < release_numbers(request.release)]
        at = (after[-1] + 1) if after else (rows[0] if rows else len(lines))
        lines.insert(at, text)
        done = ("add", "added", f"{request.release} to {shown(path)}: {' | '.join(row[1:])}")
    return "\n".join(lines) + "\n", done


def candidates_text(patches: Store, release: str, add: bool) -> Tuple[str, bool]:
    path = patches.root / CANDIDATES
    lines = path.read_text().splitlines() if path.is_file() else [
        "# Releases whose series scripts/new-base wrote and whose matrix",
        "# (scripts/test.sh --releases X) has not passed yet: candidates, not served.",
        "# `scripts/new-base X --served` removes a row.",
        "# release"]
    present = any(line.split("\t")[0] == release for line in lines)
    if add and not present:
        lines.append(release)
    if not add:
        lines = [line for line in lines if line.split("\t")[0] != release]
    return "\n".join(lines) + "\n", present


def run(request: Request) -> int:
    patches = store(request.patches)
    if request.served:
        text, present = candidates_text(patches, request.release, add=False)
        if not present:
            print(f"new-base: {request.release} is not a candidate in "
                  f"{shown(patches.root / CANDIDATES)}; nothing to do")
            return 0
        if not request.check:
            atomic_write(patches.root / CANDIDATES, text.encode(), 0o644)
        print(f"{'would remove' if request.check else 'removed'} {request.release} from "
              f"{shown(patches.root / CANDIDATES)}: served")
        return 0
    chosen = patches.select(request.topics or ["all"])
    paths = sorted({rel for topic in chosen for base in supported_bases(topic)
                    for rel in load_series(base, topic).touched} |
                   {topic.feature_file for topic in chosen})
    files = release_files(request, paths)
    print(f"torch {request.release}: {len(files.files)} of the {len(paths)} files the "
          f"topics touch, from {files.source}, each checked against RECORD")
    temporary = Path(tempfile.mkdtemp(prefix="pregrad-new-base-"))
    try:
        scratch_root = (temporary / "scratch" if request.check else request.scratch
                        or cache_dir() / "new-base" / f"v{request.release}")
        staging_root = temporary / "staged"
        outcomes = [outcome_for(topic, files, request, scratch_root, staging_root)
                    for topic in chosen]
        for outcome in outcomes:
            for line in outcome.lines:
                print(line)
        written = [o for o in outcomes if o.written is not None]
        rows, row_said = release_row(request, patches, outcomes)
        candidates, _ = candidates_text(patches, request.release, add=True)
        if request.check:
            for outcome in written:
                print(f"would write {shown(patches.root / ('v' + request.release))}"
                      f"{'' if outcome.topic.primary else '/' + outcome.topic.dir}/")
            print(f"would {row_said[0]} {row_said[2]}")
            if written:
                print(f"would list {request.release} in {shown(patches.root / CANDIDATES)}")
            print("check: nothing was written")
            return 1 if any(o.conflict for o in outcomes) else 0
        if all(o.conflict for o in outcomes):
            print("nothing was written: no topic has a series or a row cell yet")
            return 1
        for line in write_outcomes(request, patches, outcomes):
            print(line)
        atomic_write(patches.root / "releases.tsv", rows.encode(), 0o644)
        print(f"{row_said[1]} {row_said[2]}")
        if written:
            atomic_write(patches.root / CANDIDATES, candidates.encode(), 0o644)
            print(f"listed {request.release} in {shown(patches.root / CANDIDATES)}: a "
                  "candidate, not served, until its matrix passes: scripts/test.sh "
                  f"--releases {request.release}, then scripts/new-base {request.release} "
                  "--served")
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    code = follow_up(request, [o.topic for o in written])
    return 1 if code or any(o.conflict for o in outcomes) else 0


def follow_up(request: Request, topics: List[Topic]) -> int:
    """update-docs (the clone's README) and check-patches on what was written."""
    code = 0
    if request.patches.resolve() == (REPO / "patches").resolve():
        code |= subprocess.run([str(REPO / "scripts" / "update-docs")]).returncode
    if topics:
        check = [str(REPO / "scripts" / "check-patches"), "--patches", str(request.patches)]
        if request.python is not None:
            check += ["--python", request.python]
        for topic in topics:
            check += ["--topic", topic.name]
        code |= subprocess.run(check + [f"v{request.release}"]).returncode
    return code


def parse(argv: Sequence[str]) -> Optional[Request]:
    """The request, or None for --help; raises ValueError on a usage error."""
    args = list(argv)
    if any(arg in ("-h", "--help") for arg in args):
        return None
    values: Dict[str, object] = {"topics": [], "base_pythons": {}}
    release = None
    while args:
        arg = args.pop(0)
        if arg in ("--check", "--served"):
            values[arg[2:]] = True
            continue
        if arg in ("--from", "--topic", "--python", "--base-python", "--patches", "--scratch"):
            if not args or not args[0] or args[0].startswith("--"):
                raise ValueError(f"{arg} needs a value")
            value = args.pop(0)
            if arg == "--topic":
                values["topics"].extend(part for part in value.split(",") if part)  # type: ignore[union-attr]
            elif arg == "--base-python":
                version, eq, python = value.partition("=")
                if not eq or not python:
                    raise ValueError("--base-python needs VERSION=PY, e.g. 2.14.1=venv/bin/python")
                values["base_pythons"][version.lstrip("v")] = python  # type: ignore[index]
            else:
                values[arg[2:]] = value
            continue
        if arg.startswith("-"):
            raise ValueError(f"unknown option {arg}")
        if release is not None:
            raise ValueError(f"one RELEASE only (got {release} and {arg})")
        release = arg
    if release is None:
        raise ValueError("name the RELEASE, e.g. scripts/new-base 2.16.0")
    release = release.lstrip("v")
    if not re.fullmatch(r"\d+\.\d+\.\d+", release):
        raise ValueError(f"RELEASE is a torch release like 2.16.0, not {release!r}")
    from_base = values.get("from")
    if from_base is not None and not str(from_base).startswith("v"):
        from_base = f"v{from_base}"
    patches_dir = Path(str(values.get("patches", REPO / "patches")))
    return Request(release, from_base, list(values["topics"]),  # type: ignore[arg-type]
                   values.get("python"), dict(values["base_pythons"]),  # type: ignore[arg-type]
                   bool(values.get("check")), bool(values.get("served")), patches_dir,
                   Path(str(values["scratch"])) if "scratch" in values else None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        request = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as problem:
        print(f"new-base: {problem}\n(see scripts/new-base --help)", file=sys.stderr)
        return 2
    if request is None:
        print(USAGE, end="")
        return 0
    if not (request.patches / "topics.tsv").is_file():
        print(f"new-base: {request.patches} has no topics.tsv: not a patches directory",
              file=sys.stderr)
        return 2
    try:
        return run(request)
    except Refused as problem:
        print(f"new-base: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("new-base: interrupted; patches/ is as it was unless a 'wrote' line says "
              "otherwise", file=sys.stderr)
        return 130
