"""scripts/new-base's grammar: its help text and the request its arguments
make (maint/grammar.py's conventions, those of torch_backport/cli.py)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from maint import grammar
from maint.release_tier import LEVELS
from torch_backport.options import Parser
from torch_backport.infra.errors import UsageError
from torch_backport.infra.paths import REPO

PROG = "new-base"
USAGE = """\
Usage: scripts/new-base RELEASE [--from BASE] [--topic T]... [--python PY] [--tier LEVEL] [--branch]
                        [--base-python V=PY]... [--check] [--patches DIR] [--scratch DIR]
                        [--report FILE] [--index URL]
       scripts/new-base RELEASE --served [--check] [--patches DIR]
       scripts/new-base --latest [--tier LEVEL] [--branch] [--report FILE] [--check]
                        [--patches DIR]
       scripts/new-base --help

Serves torch RELEASE (e.g. 2.16.0): for each topic (patches/topics.tsv; or
those --topic names) it reads the files the topic's series touch from PY's
installed torch (--python; it must be RELEASE, stock: each file is checked
against the install's RECORD) or from the release wheel on pip's configured
index (only the wheel's zip directory and those files, by byte range; a
whole download into $PREGRAD_CACHE/wheels where the index has no ranges;
checked against the wheel's RECORD), then:
  - files equal to a base's, byte for byte: only the patches/releases.tsv
    row, naming that base (2.14.0 -> v2.14.1);
  - the topic's change upstream and no fixes series for it: "has it";
  - otherwise it replays the nearest base's series (the one holding most of
    these files byte for byte, then the nearest release below; or --from)
    in a scratch git repository with a real 3-way merge: `git am -3` onto
    the release's files, the base's pristine files (from --base-python, a
    stock venv under $PREGRAD_CACHE/venvs, or that release's wheel, by
    byte range; checked against its pristine.tsv) as the merge ancestor.
    Clean: it writes patches/vRELEASE/ (or its topic directory): `git
    format-patch --zero-commit -N --full-index --no-signature` output, each
    message saying which base it was rebased from and how each patch
    merged, plus series and pristine.tsv.
  - a hunk that does not merge: that topic is not written; the output names
    the patch, the file, the hunk and the conflicting lines, and leaves the
    scratch repository (path printed) stopped in `git am`. Resolve the
    conflict there, `git add` the file, `git am --continue`, then run this
    command again: it picks up the finished series.
It says where each release's files came from (an install, a cached wheel,
or the MB read by range). Then it writes the patches/releases.tsv row (a
topic still at a conflict is "not yet"), lists RELEASE in
patches/candidates.tsv when it wrote a series (a candidate until
`scripts/test.sh --releases RELEASE` has passed; then `--served`), runs
scripts/update-docs and scripts/check-patches on what it wrote.

  --from BASE        replay BASE's series (e.g. v2.14.1) for every topic named
  --topic T          only topic T (repeat, or T1,T2); default: every topic
  --python PY        read RELEASE's files from PY's torch instead of the wheel
  --base-python V=PY read base V's pristine files from PY's torch (repeat)
  --check            say all of this, write nothing (scratch repositories
                     are made under a temporary directory and removed)
  --served           RELEASE's matrix passed: remove it from candidates.tsv
  --latest           RELEASE is the newest final torch release on pip's
                     configured indexes and find-links (their simple API,
                     no download): if patches/releases.tsv has its row,
                     "nothing new: X is served" (or "X is a candidate"),
                     exit 0; else serve it as above, exit 3 when every
                     topic got a series, a row or "has it"
  --tier LEVEL       after writing, run the release tier (maint/release_tier.py):
                     full (the default with --latest) or short
                     (`scripts/test.sh --releases RELEASE [--short]`, which
                     makes its venvs), then `apply.sh --verify` on the stock
                     venv and on a patched copy; none skips it (the default
                     without --latest). It decides the outcome:
                     served-candidate (matrix and patched --verify pass; a
                     full tier also takes RELEASE off candidates.tsv),
                     upstream-fixed (stock --verify finds no results defect:
                     propose dropping the results patches), tier-failed
  --branch           served-candidate: commit what was written (patches/, the
                     README, docs/) as one commit, with the matrix's summary,
                     on a new branch day-one/torch-RELEASE of the clone
                     holding --patches; refuses a work tree with changes
  --index URL        also read torch from the simple index at URL, as pip's
                     --extra-index-url (for this run and the tier it
                     starts): a release candidate on torch's test index
                     (https://download.pytorch.org/whl/test/cpu), published
                     under the final's number, so that its series is ready
                     before the final ships. A named RELEASE served so is
                     listed in patches/prereleases.tsv with URL; on the
                     final's day --latest reads the final's files from the
                     configured index and, where each topic's cell is the
                     row's, the final is served by content: the line is
                     removed (exit 3, a change to merge); where they
                     differ, it says which topic and exits 1 (serve the
                     final again: scripts/new-base RELEASE)
  --report FILE      also write what was found as Markdown to FILE (a pull
                     request's or an issue's body): the release, the
                     outcome, where its files came from and each topic's
                     lines, and with a tier its matrix table and both
                     --verify tables
  --patches DIR      the patches directory to read and write (default: the
                     clone's patches/); update-docs runs only on the clone's
  --scratch DIR      where scratch repositories go (default:
                     $PREGRAD_CACHE/new-base/vRELEASE/<topic>)

A maintainer command of a clone: an installed torch-backport has no
new-base.
Exit codes: 0 every topic served (written, a base's row, or has it), or
--latest found nothing new; 1 a topic stopped at a conflict (the others
were written), a refusal (nothing written) or a failed tier; 2 usage
error; 3 --latest served a new release (served-candidate: to merge); 4
upstream-fixed (the tier found the stock release right); 130 interrupted.
"""

NEEDS = {
    "--from": "--from needs a base, e.g. v2.14.1",
    "--topic": "--topic needs a topic name (or T1,T2, or all)",
    "--python": "--python needs an interpreter",
    "--base-python": "--base-python needs VERSION=PY, e.g. 2.14.1=venv/bin/python",
    "--patches": "--patches needs a directory",
    "--scratch": "--scratch needs a directory",
    "--report": "--report needs a file to write",
    "--tier": "--tier needs a level: full, short or none",
    "--index": "--index needs the URL of a simple index, e.g. "
               "https://download.pytorch.org/whl/test/cpu",
}


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
    latest: bool = False  # `release` is "" until the index names it
    report: Optional[Path] = None
    tier: str = "none"  # release_tier.LEVELS
    branch: bool = False
    index: Optional[str] = None  # an extra simple index (a release candidate's)


def parser() -> Parser:
    made = grammar.parser(PROG)
    made.add_argument("--from", dest="from_base")
    made.add_argument("--topic", dest="topics", action="append", default=[])
    made.add_argument("--python")
    made.add_argument("--base-python", dest="base_pythons", action="append", default=[])
    made.add_argument("--check", action="store_true")
    made.add_argument("--served", action="store_true")
    made.add_argument("--patches")
    made.add_argument("--scratch")
    made.add_argument("--latest", action="store_true")
    made.add_argument("--report")
    made.add_argument("--tier")
    made.add_argument("--branch", action="store_true")
    made.add_argument("--index")
    return made


def base_pythons(given: List[str]) -> Dict[str, str]:
    found: Dict[str, str] = {}
    for value in given:
        version, eq, python = value.partition("=")
        if not eq or not python:
            raise UsageError(NEEDS["--base-python"])
        found[version.lstrip("v")] = python
    return found


def release_named(positional: List[str]) -> str:
    if not positional:
        raise UsageError("name the RELEASE, e.g. scripts/new-base 2.16.0")
    if len(positional) > 1:
        raise UsageError(f"one RELEASE only (got {positional[0]} and {positional[1]})")
    release = positional[0].lstrip("v")
    if not re.fullmatch(r"\d+\.\d+\.\d+", release):
        raise UsageError(f"RELEASE is a torch release like 2.16.0, not {release!r}")
    return release


def read(argv: Sequence[str]) -> Optional[Request]:
    """The request `argv` makes, None for --help; UsageError naming what is wrong."""
    known, positional = grammar.parse(parser(), argv, NEEDS)
    if known.helping:
        return None
    from_base = known.from_base
    if from_base is not None and not from_base.startswith("v"):
        from_base = f"v{from_base}"
    patches = Path(known.patches) if known.patches else REPO / "patches"
    if not (patches / "topics.tsv").is_file():
        raise UsageError(f"{patches} has no topics.tsv: not a patches directory")
    if known.latest and (positional or known.served):
        raise UsageError("--latest asks the index for the RELEASE: name none, and no --served")
    tier = known.tier or ("full" if known.latest and not known.check else "none")
    if tier not in LEVELS:
        raise UsageError(f"--tier is full, short or none, not {tier!r}")
    if tier != "none" and (known.check or known.served):
        raise UsageError("--tier runs the matrix on what was written: not with --check "
                         "or --served")
    if known.index is not None and (known.served or known.latest
                                    or not re.match(r"https?://", known.index)):
        raise UsageError("--index takes the http(s) URL of a simple index, with a named "
                         "RELEASE (not --latest or --served)")
    if known.branch and (known.check or known.served):
        raise UsageError("--branch commits what was written: not with --check or --served")
    return Request("" if known.latest else release_named(positional), from_base,
                   [part for value in known.topics for part in value.split(",") if part],
                   known.python, base_pythons(known.base_pythons), known.check, known.served,
                   patches, Path(known.scratch) if known.scratch else None, known.latest,
                   Path(known.report) if known.report else None, tier, known.branch,
                   known.index)
