"""scripts/update-docs: README.md's supported-releases table, made from
patches/releases.tsv and patches/topics.tsv (torch_backport/releases.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

from maint import grammar
from torch_backport.errors import Refused, UsageError
from torch_backport.fsio import atomic_write
from torch_backport.releases import with_table

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
    except (OSError, Refused) as problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 1
    if made == text:
        print(f"{PROG}: {README.name}'s supported-releases table is up to date")
    elif check:
        print(f"{PROG}: {README.name}'s supported-releases table is stale; run "
              "scripts/update-docs", file=sys.stderr)
        return 1
    else:
        atomic_write(README, made.encode(), 0o644)
        print(f"{PROG}: rewrote {README.name}'s supported-releases table")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    return grammar.main(PROG, HELP, argv, read, update)
