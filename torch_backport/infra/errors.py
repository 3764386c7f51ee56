"""The one root of every error the user must act on, and the one place that
reports it. The lowest module: it imports only the exit codes."""

from __future__ import annotations

import sys
from typing import ClassVar

from torch_backport.infra.exit_codes import Exit


def printable(text: str) -> str:
    """`text` (a server's Location, page or reason phrase, a file name) as
    it may be printed: every character a terminal would act on (escapes,
    carriage returns, controls) shown as a Python escape instead."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


class BackportError(Exception):
    """A problem the user must act on; the message says what and where.

    `exit_code` is what the command exits with; `changed` says whether
    anything was written before it was raised (every error so far is raised
    before a write, or after the write was taken back)."""

    exit_code: ClassVar[int] = Exit.FAILED
    changed: ClassVar[bool] = False


class Refused(BackportError):
    """The target, an input or the series do not allow what was asked; exit 1."""


class UsageError(BackportError):
    """Arguments the grammar does not allow; exit 2."""

    exit_code = Exit.USAGE


class Failed(BackportError):
    """A precondition the arguments name does not hold (no such checkout,
    no such interpreter); exit 1."""


def report(problem: BackportError, command: str, see_help: bool = False) -> int:
    """Say `problem` on stderr, prefixed by `command` as the user typed it
    (`scripts/apply.sh`, `torch-backport apply`); its exit code."""
    print(f"{command}: {problem}", file=sys.stderr)
    if see_help:
        print(f"(see {command} --help)", file=sys.stderr)
    return problem.exit_code
