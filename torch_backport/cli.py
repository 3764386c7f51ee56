"""Usage: torch-backport apply [ARGS...]
       torch-backport --help | --version

Runs scripts/apply.sh ARGS of torch-pregrad-backport {version}, installed with
the patch series beside it in
  {package}
to patch, check, report on (--status) or revert (--revert) the torch of an
installed wheel, or to apply the series to a PyTorch checkout.
`torch-backport apply --help` lists ARGS.

Without --python PY, a CHECKOUT or --overlay among ARGS, `apply` adds
  --python {python}
the interpreter this command is installed into, so it patches the torch next
to it. --overlay needs --out DIR: its default, overlay/ beside the scripts,
would be inside site-packages.

Requirements: bash and git (wheel mode applies the patches with `git apply`).
Exit codes: apply.sh's (0 done or nothing to do; 1 refused or failed; 2 usage
error); 2 for a usage error of torch-backport itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from torch_backport import __version__

PACKAGE = Path(__file__).resolve().parent
APPLY = PACKAGE / "scripts" / "apply.sh"
# apply.sh's options that take a value (test_install_package.py checks this
# against apply.sh's argument loop): an argument after one of them is its
# value, any other argument without a leading "-" is a CHECKOUT.
VALUE_OPTIONS = frozenset({"--python", "--overlay", "--out", "--topic"})


def usage() -> str:
    assert __doc__ is not None
    return __doc__.format(version=__version__, package=PACKAGE, python=sys.executable)


def apply_help_line() -> str:
    """The line `torch-backport apply --help` prints before apply.sh's help."""
    return (f"torch-backport apply ARGS runs {APPLY} ARGS, adding --python "
            f"{sys.executable} when ARGS have no --python, CHECKOUT or --overlay.")


def usage_error(message: str) -> int:
    print(f"torch-backport: {message}\n(see torch-backport --help)", file=sys.stderr)
    return 2


def apply_args(args: Sequence[str]) -> tuple[list[str], bool, Optional[str]]:
    """What to pass to apply.sh, whether it will print its help, and the
    usage error to report instead of running it (or None)."""
    has: set[str] = set()  # the options given, and "CHECKOUT"
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-h", "--help"):  # apply.sh prints its help here and exits 0
            return list(args), True, None
        if arg in VALUE_OPTIONS:
            if index + 1 == len(args):  # apply.sh names the missing value
                return list(args), False, None
            has.add(arg)
            index += 2
            continue
        has.add("CHECKOUT" if not arg.startswith("-") else arg)
        index += 1
    if "--overlay" in has and "--out" not in has:
        return [], False, ("--overlay needs --out DIR here: its default, overlay/ "
                           f"beside apply.sh,\nwould be inside site-packages ({PACKAGE})")
    if not has & {"--python", "--overlay", "CHECKOUT"}:
        return ["--python", sys.executable, *args], False, None
    return list(args), False, None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        return usage_error("say what to do: torch-backport apply [ARGS...]")
    if args[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    if args[0] == "--version":
        print(f"torch-backport {__version__}")
        return 0
    if args[0] != "apply":
        return usage_error(f"unknown command: {args[0]} (the one command is `apply`)")
    passed, helping, error = apply_args(args[1:])
    if error is not None:
        return usage_error(error)
    if helping:
        print(apply_help_line(), flush=True)
    try:
        os.execvp("bash", ["bash", str(APPLY), *passed])
    except OSError as exc:  # no bash on PATH
        print(f"torch-backport: cannot run bash {APPLY}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
