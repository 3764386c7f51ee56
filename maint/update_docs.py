"""scripts/update-docs: README.md's supported-releases table, made from
patches/releases.tsv and patches/topics.tsv (read by torch_backport/patchset/releases.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

from maint import grammar
from torch_backport.infra.exit_codes import Exit
from torch_backport.infra.errors import Failed, Refused, report, UsageError
from torch_backport.infra.fsio import atomic_write
from torch_backport.patchset.releases import (candidates, HAS_IT, NOT_YET, Release,
                                              served)
from torch_backport.patchset.series import Applied, load_series, store, Topic

TABLE_BEGIN = "<!-- supported-releases: made by scripts/update-docs from patches/*.tsv -->"
TABLE_END = "<!-- end of supported-releases -->"
PROG = "update-docs"
README = Path(__file__).resolve().parents[1] / "README.md"
HELP = """\
Usage: scripts/update-docs [--check]
       scripts/update-docs --help

Rewrites README.md's supported-releases table (between its
`<!-- supported-releases ... -->` markers) from patches/releases.tsv and
patches/topics.tsv, so that a new release or topic is one row there plus
this command. --check writes nothing and exits 1 if the table is stale
(the tool suite runs it). apply.sh --help reads the same files each time.

A maintainer command of a clone, like scripts/new-base and
scripts/check-patches.
Exit codes: 0 up to date (or rewritten); 1 stale with --check, or a file
that cannot be read; 2 usage error.
"""


def read(argv: Sequence[str]) -> Optional[bool]:
    """--check or not; None for --help."""
    made = grammar.parser(PROG)
    made.add_argument("--check", action="store_true")
    known, positional = grammar.parse(made, argv, {})
    if positional:
        raise UsageError(f"unknown argument: {positional[0]}")
    return None if known.helping else bool(known.check)


def update(check: bool) -> int:
    try:
        text = README.read_text()
        made = with_table(text)
    except Refused as problem:
        return report(problem, f"scripts/{PROG}")
    except OSError as problem:
        return report(Failed(str(problem)), f"scripts/{PROG}")
    if made == text:
        print(f"{PROG}: {README.name}'s supported-releases table is up to date")
    elif check:
        print(f"{PROG}: {README.name}'s supported-releases table is stale; run "
              "scripts/update-docs", file=sys.stderr)
        return Exit.FAILED
    else:
        atomic_write(README, made.encode(), 0o644)
        print(f"{PROG}: rewrote {README.name}'s supported-releases table")
    return Exit.OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    return grammar.main(PROG, HELP, argv, read, update)


def readme_cell(release: Release, topic: Topic) -> str:
    base = release.bases.get(topic.name, HAS_IT)
    if base == HAS_IT:
        return "has it upstream"
    if base == NOT_YET:
        return "not served yet (scripts/new-base stopped at a conflict)"
    series = load_series(base, topic)
    count = len(series.patches)
    if base != f"v{release.version}":
        return f"`{base}`'s series (its files are {base[1:]}'s)"
    if topic.primary:
        what = "the feature and its results fixes" if series.adds_feature else "results fixes"
        return f"{what} (`{base}`, {count} patch{'es' if count > 1 else ''})"
    return f"`{base}` ({count} patch{'es' if count > 1 else ''})"


def readme_table() -> str:
    """README's supported-releases table, markers included."""
    every = list(store().topics)
    heads = [f"`{topic.name}`" + (" (opt-in)" if topic.applied is Applied.OPT_IN else "")
             for topic in every]
    rows = ["| release | " + " | ".join(heads) + " |", "|---" * (len(every) + 1) + "|"]
    pending = candidates()
    for release in served():
        cells = [readme_cell(release, topic) for topic in every]
        name = release.version + (" (candidate: matrix not passed yet)"
                                  if release.version in pending else "")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join([TABLE_BEGIN, *rows, TABLE_END])


def with_table(readme: str) -> str:
    """`readme` with its supported-releases table made anew."""
    if TABLE_BEGIN not in readme or TABLE_END not in readme:
        raise Refused(f"README.md has no '{TABLE_BEGIN}' ... '{TABLE_END}' block")
    before = readme[:readme.index(TABLE_BEGIN)]
    after = readme[readme.index(TABLE_END) + len(TABLE_END):]
    return before + readme_table() + after
