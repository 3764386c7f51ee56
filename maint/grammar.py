"""The maintainer commands' grammar, with the conventions of
torch_backport/cli.py: argparse without its own help or exits, the help
text (usage first, exit codes last) printed for -h/--help, an option
without its value named in the command's words, and every error said by
errors.report as `scripts/<prog>: message` (a usage error, exit 2, then
`(see scripts/<prog> --help)`; a refusal, exit 1)."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, List, Mapping, Optional, Sequence, Tuple, TypeVar

from torch_backport.infra.exit_codes import Exit
from torch_backport.infra.errors import BackportError, report, UsageError
from torch_backport.options import Parser

Request = TypeVar("Request")


def parser(prog: str) -> Parser:
    """An argparse parser with cli.py's settings and -h/--help as `helping`."""
    made = Parser(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False)
    made.add_argument("-h", "--help", dest="helping", action="store_true")
    return made


def parse(made: Parser, argv: Sequence[str], needs: Mapping[str, str]
          ) -> Tuple[argparse.Namespace, List[str]]:
    """The options and the positional arguments of `argv`; UsageError for an
    unknown option, or an option without its value (`needs` words it)."""
    try:
        known, rest = made.parse_known_args(list(argv))
    except argparse.ArgumentError as problem:
        if problem.argument_name in needs and "expected one argument" in problem.message:
            raise UsageError(needs[str(problem.argument_name)]) from None
        raise UsageError(problem.message) from None
    for arg in rest:
        if arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown argument: {arg}")
    for arg, value in zip(argv, list(argv[1:]) + [None]):
        option, eq, joined = arg.partition("=")
        if option in needs and (joined if eq else value) == "":
            raise UsageError(needs[option])
    return known, rest


def usage_error(prog: str, problem: UsageError) -> int:
    return report(problem, f"scripts/{prog}", see_help=True)


def main(prog: str, help_text: str, argv: Optional[Sequence[str]],
         read: Callable[[Sequence[str]], Optional[Request]],
         run: Callable[[Request], int], interrupted: str = "interrupted") -> int:
    """A maintainer command: `read` makes the request from the arguments
    (None: --help), `run` carries it out and returns the exit code."""
    try:
        request = read(sys.argv[1:] if argv is None else argv)
    except UsageError as problem:
        return usage_error(prog, problem)
    if request is None:
        print(help_text, end="")
        return Exit.OK
    try:
        return run(request)
    except BackportError as problem:
        return report(problem, f"scripts/{prog}", see_help=isinstance(problem, UsageError))
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        return Exit.INTERRUPTED
