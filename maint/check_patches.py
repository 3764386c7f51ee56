"""scripts/check-patches: every series of every topic, checked whole and
against its base's pristine files (the help text says what is checked).
With --python it runs itself again under that interpreter, whose torch it
reads through importlib.metadata (torch_backport/installed/pristine.py)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from maint import grammar
from torch_backport.infra.exit_codes import Exit
from torch_backport.installed import pristine
from torch_backport.infra import record
from torch_backport.installed.install import find_install
from torch_backport.installed.state import State
from torch_backport.installed.status import inspect
from maint.choose import stock_venv_python
from torch_backport.patchset.apply import apply_series
from torch_backport.patchset import series as model
from torch_backport.infra.errors import Refused, report, UsageError
from torch_backport.infra.fsio import cache_dir
from torch_backport.infra.git import Git, git_blob_id
from torch_backport.patchset.patchfile import parse_patch

PROG = "check-patches"
LAUNCHER = Path(__file__).resolve().parents[1] / "scripts" / "check-patches"
UNDER_PY = "_PREGRAD_CHECK_UNDER_PY"
HELP = """\
Usage: scripts/check-patches [--python PY] [--patches DIR] [--topic T]... [BASE ...]
       scripts/check-patches --help

Checks every series of every topic (patches/topics.tsv; or the topics that
--topic names) for every base (or the BASEs named, e.g. v2.11.0) under
patches/ (or DIR):
- each `series` entry exists, parses as a patch and is listed once;
- no .patch file in the directory is left out of `series`;
- each patch carries its provenance (What/Why/Differs from upstream, Origin,
  Applied-Upstream, Last-Update) and has LF line endings;
- each patch is whole (torch_backport/patchset/series.py): every file its diffstat
  names has a diff, the hunks' line counts and the diffstat's insertions and
  deletions add up, `index` lines are full-length blob pairs, paths stay under
  torch/; and applying it produces exactly the post-image blobs it names;
- pristine.tsv names exactly the files the series touches, and no two topics
  of a base touch the same file (each is applied and reverted on its own);
- the pristine files of the base (from PY's installed torch if its files are
  that base's, pristine or patched; else from the stock venv of that release
  under $PREGRAD_CACHE/venvs; else from the release wheel, only those files
  read by byte range) match pristine.tsv, and the whole series applies to
  them in order with `git apply`: no fuzz, no offset beyond what git allows.
Collects every problem, then prints one summary.

A maintainer command of a clone, like scripts/new-base.
Exit codes: 0 all good; 1 problems found; 2 usage error.
"""
PROVENANCE = ["What: ", "Why: ", "Differs from upstream: ", "Origin: ",
              "Applied-Upstream: ", "Last-Update: "]


@dataclasses.dataclass(frozen=True)
class Request:
    python: Optional[str]
    patches: Optional[Path]
    topics: List[str]
    bases: List[str]


def read(argv: Sequence[str]) -> Optional[Request]:
    made = grammar.parser(PROG)
    made.add_argument("--python")
    made.add_argument("--patches")
    made.add_argument("--topic", dest="topics", action="append", default=[])
    known, bases = grammar.parse(made, argv, {
        "--python": "--python needs an interpreter", "--patches": "--patches needs a directory",
        "--topic": "--topic needs a topic name (or T1,T2, or all)"})
    if known.helping:
        return None
    return Request(known.python, Path(known.patches).resolve() if known.patches else None,
                   known.topics, bases)


def listing_problems(directory: Path) -> List[str]:
    """The series file's entries, each patch's form and provenance."""
    problems: List[str] = []
    series_file = directory / "series"
    entries = model.series_entries(series_file)
    names = [entry for _, entry in entries]
    for number, entry in entries:
        patch = directory / entry
        if not patch.is_file():
            problems.append(f"{series_file}:{number}: {entry} does not exist")
            continue
        if names.count(entry) > 1:
            problems.append(f"{series_file}:{number}: {entry} is listed {names.count(entry)} times")
        parsed = Git(directory)("apply", "--numstat", str(patch), check=False)
        if parsed.returncode != 0:
            problems.append(f"{patch}: does not parse: {parsed.stderr.strip()}")
        problems += parse_patch(patch)[1]
        data = patch.read_bytes()
        if b"\r\n" in data:
            problems.append(f"{patch}: has CRLF line endings")
        text = data.decode("utf-8", "replace")
        for field in PROVENANCE:
            if not re.search(rf"^{re.escape(field)}", text, re.MULTILINE):
                problems.append(f"{patch}: no '{field.strip()}' line")
    for unused in sorted(set(p.name for p in directory.glob("*.patch")) - set(names)):
        problems.append(f"{directory / unused}: not listed in {series_file}")
    return problems


def pristine_for(series: model.Series, use_install: bool, cache: Path) -> Dict[str, bytes]:
    """The base's pristine files: this interpreter's torch when asked (it runs
    under --python's interpreter then), else the stock venv's or the wheel's."""
    if use_install:
        return pristine.this_install(series)
    return pristine.base_files(series, cache,
                               pythons=(stock_venv_python(cache, series.version),))


def pristine_problems(series: model.Series, pristine_files: Dict[str, bytes]) -> List[str]:
    """The files against pristine.tsv and the first patch's pre-images, then
    the whole series applied to them."""
    problems: List[str] = []
    base, table, blobs = series.base, model.pristine_sha256(series), model.pristine_blobs(series)
    for rel, data in pristine_files.items():
        if record.sha256_hex(data) != table[rel]:
            problems.append(f"pristine {rel} of {base} does not match pristine.tsv (sha256)")
        blob = git_blob_id(data)
        if blob != blobs[rel]:
            problems.append(f"pristine {rel} of {base} is git blob {blob}, pristine.tsv "
                            f"says {blobs[rel]}")
        first = next((d for p in series.patches for d in p.files if d.path == rel), None)
        if first is not None and first.pre_blob != blobs[rel]:
            problems.append(f"{next(p for p in series.patches if first in p.files)}: its "
                            f"pre-image of {rel} is not the pristine blob {blobs[rel]}")
    if not problems:
        try:
            apply_series(pristine_files, series)
        except Refused as failure:
            problems.append(str(failure))
    return problems


def check_base(base: str, topic: model.Topic, use_install: bool, cache: Path) -> List[str]:
    directory = topic.directory(base)
    problems = listing_problems(directory)
    if problems:
        return problems
    try:
        series = model.load_series(base, topic)
    except Refused as failure:
        return [str(failure)]
    table = model.pristine_sha256(series)
    if sorted(table) != series.touched:
        return [f"{directory / 'pristine.tsv'} lists {sorted(table)}, "
                f"the series touches {series.touched}"]
    try:
        files = pristine_for(series, use_install, cache)
    except Refused as failure:
        return [str(failure)]
    return pristine_problems(series, files)


def overlapping_topics(bases: List[str], chosen: List[model.Topic]) -> List[str]:
    """Files that two topics of one base both patch."""
    problems: List[str] = []
    for base in bases:
        every = []
        for topic in chosen:
            try:
                every.append(model.load_series(base, topic))
            except Refused:
                continue  # no series, or not whole: reported above
        problems += model.shared_files(every)
    return problems


def under_python(python: str, argv: Sequence[str]) -> None:
    """Run this command again under `python` (3.9 or later), whose torch it
    then reads from inside; returns only if it already runs there."""
    if os.environ.get(UNDER_PY):
        return
    if not os.access(python, os.X_OK):
        raise UsageError(f"{python} is not an interpreter that runs here")
    probe = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True)
    version = (tuple(int(part) for part in probe.stdout.split("."))
               if probe.returncode == 0 else ())
    if version < (3, 9):
        # exit 2 with this one line, as before (test_reliability.py holds it)
        sys.exit(report(UsageError(f"{python} is Python {probe.stdout.strip() or '(unknown)'}; "
                                   "it needs Python 3.9 or later"), f"scripts/{PROG}"))
    os.environ[UNDER_PY] = "1"
    sys.stdout.flush()
    os.execv(python, [python, str(LAUNCHER), *argv])


def check_topic(topic: model.Topic, request: Request, cache: Path) -> List[str]:
    problems: List[str] = []
    for base in request.bases or model.supported_bases(topic):
        directory = topic.directory(base)
        if not (directory / "series").is_file():
            if topic.primary:
                problems.append(f"{directory}: no series file")
            else:
                print(f"{base} {topic.name}: no series for this base")
            continue
        from_install = bool(request.python) and installed_base(topic) == base
        found = check_base(base, topic, from_install, cache)
        label = base if topic.primary else f"{base} {topic.name}"
        print(f"{label}: {'ok' if not found else f'{len(found)} problem(s)'}")
        problems += found
    return problems


def check(request: Request, argv: Sequence[str]) -> int:
    if request.python:
        under_python(request.python, argv)
    patches = model.store(request.patches) if request.patches else model.store()
    if not patches.root.is_dir():
        raise UsageError(f"{patches.root} is not a directory")
    try:
        chosen = patches.select(request.topics or ["all"])
    except Refused as unknown:
        raise UsageError(str(unknown)) from None
    problems: List[str] = []
    for topic in chosen:
        problems += check_topic(topic, request, cache_dir())
    problems += overlapping_topics(request.bases or patches.bases(patches.primary), chosen)
    for problem in problems:
        print(f"  {problem}")
    print(f"{PROG}: finished with {len(problems)} error(s)")
    return Exit.FAILED if problems else Exit.OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return grammar.main(PROG, HELP, args, read, lambda request: check(request, args))


def installed_base(topic: model.Topic) -> Optional[str]:
    """The base whose pristine or patched files this interpreter's torch holds."""
    try:
        status = inspect(find_install(topic))
    except Refused:
        return None
    if status.series is None or status.state not in (State.PRISTINE, State.PATCHED):
        return None
    return status.series.base
