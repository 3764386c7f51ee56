"""The command's one grammar: the mode rules of `scripts/apply.sh` (a clone)
and `torch-backport apply` (installed), over the option table of options.py,
and running the request they make.

The arguments are parsed here, once, under whatever Python runs the command.
Checkout mode and an overlay from the package index then run in this
process; an installed wheel (and an overlay from one) runs in the target
interpreter PY, which gets the request as an Order (infra/order.py) in JSON
through _launch.py and never imports from this command's own environment
(its torch, if any, is not the one to patch).

Exit codes: infra/exit_codes.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from torch_backport import __version__
from torch_backport.engine import carry_out, has_pypa, in_target, pypa_python
from torch_backport.infra.errors import BackportError, Failed, report, UsageError
from torch_backport.infra.order import Order, Task
from torch_backport.infra.paths import PACKAGE, REPO
from torch_backport.infra.fsio import cache_dir, refuse_untrusted_cache
from torch_backport import options
from torch_backport.help_text import apply_help, BACKPORT_HELP, EXIT_CODES
from torch_backport.infra.exit_codes import Exit

# The clone's maintainer tools (maint/, run by scripts/<name>): not shipped.
MAINTAINER_COMMANDS = ("new-base", "check-patches", "update-docs")


@dataclasses.dataclass
class Request:
    """What the arguments ask for, after every mode rule."""
    command: str  # apply | status | revert | verify | overlay | wheel
    check: bool = False
    python: Optional[str] = None
    checkout: Optional[str] = None
    no_commit: bool = False
    overlay_base: Optional[str] = None
    wheel: Optional[str] = None
    out: Optional[str] = None
    lock: Optional[str] = None
    topics: List[str] = dataclasses.field(default_factory=list)
    expect: Optional[str] = None
    json: bool = False
    platforms: List[str] = dataclasses.field(default_factory=list)
    python_versions: List[str] = dataclasses.field(default_factory=list)
    all_platforms: bool = False
    model: Optional[str] = None
    helping: bool = False


def parse(argv: Sequence[str], default_python: Optional[str] = None) -> Request:
    """The request `argv` makes, or UsageError naming what is wrong. With
    `default_python` (torch-backport), an install is that interpreter's
    unless --python, a CHECKOUT, --overlay or --wheel says otherwise."""
    try:
        known, rest = options.parser("apply.sh").parse_known_args(list(argv))
    except argparse.ArgumentError as problem:
        needs = options.needs()
        if problem.argument_name in needs and "expected one argument" in problem.message:
            raise UsageError(needs[problem.argument_name]) from None
        raise UsageError(problem.message) from None
    request = Request(**{field.name: getattr(known, field.name)
                         for field in dataclasses.fields(Request) if field.name != "checkout"})
    if request.helping:
        request.checkout = next((arg for arg in rest if not arg.startswith("-")), None)
        return request
    given = [arg for arg in argv if arg == "--python" or arg.startswith("--python=")]
    if len(given) > 1:
        raise UsageError("--python given more than once; name one interpreter")
    for arg in rest:
        if arg.startswith("-"):
            raise UsageError(f"unknown argument: {arg}")
        if request.checkout is not None:
            raise UsageError(f"one checkout at a time (got {request.checkout} and {arg})")
        request.checkout = arg
    if request.topics:
        from torch_backport.patchset.series import topics
        names = [topic.name for topic in topics()]
        listed = ", ".join(names) + ", default, all"
        for name in request.topics:
            parts = [part for part in name.split(",") if part]
            if not parts:
                raise UsageError(f"--topic {name!r} names no topic; topics: {listed}")
            for part in parts:
                if part not in names and part not in ("all", "default"):
                    raise UsageError(f"--topic {name!r}: unknown topic {part!r}"
                                     f"; nothing was done; topics: {listed}")
    if (default_python is not None and request.python is None and request.checkout is None
            and request.command not in ("overlay", "wheel")):
        request.python = default_python
    check_mode_rules(request)
    return request


def check_mode_rules(request: Request) -> None:
    """Which options go with which mode; the first rule broken is named."""
    rules: List[tuple[bool, str]]
    if request.command == "wheel":
        rules = [(request.checkout is not None, "--wheel and CHECKOUT do not go together"),
                 (request.python is not None, "--wheel and --python do not go together "
                  "(the wheel is read, not installed)"),
                 (request.no_commit, "--no-commit goes with a CHECKOUT"),
                 (request.out is None, "--wheel needs --out DIR"),
                 (request.lock is not None and request.check,
                  "--lock with --check: --check writes nothing; drop one")]
    elif request.command == "overlay":
        rules = [(request.lock is not None, "--lock goes with --wheel"),
                 (request.check, "--check does not apply to --overlay"),
                 (request.checkout is not None, "--overlay and CHECKOUT do not go together"),
                 (request.no_commit, "--no-commit goes with a CHECKOUT")]
    elif request.checkout is not None:
        rules = [(request.lock is not None, "--lock goes with --wheel"),
                 (request.python is not None, "--python and CHECKOUT do not go together"),
                 (request.out is not None, "--out goes with --overlay"),
                 (request.no_commit and request.command != "apply",
                  "--no-commit goes with applying"),
                 (request.no_commit and request.check,
                  "--check writes nothing, so --no-commit has nothing to leave "
                  "uncommitted; drop one"),
                 (request.check and request.command == "status",
                  "--status writes nothing; drop --check")]
    else:
        rules = [(request.lock is not None, "--lock goes with --wheel"),
                 (request.no_commit, "--no-commit goes with a CHECKOUT"),
                 (request.python is None, "say what to patch: --python PY or a CHECKOUT"),
                 (request.out is not None, "--out goes with --overlay")]
    fleet = bool(request.platforms or request.python_versions or request.all_platforms)
    if fleet:
        rules[:0] = [
            (request.command != "wheel", "--platform, --python-version and --all-platforms "
             "go with --wheel torch==X"),
            (request.command == "wheel" and not (request.wheel or "").startswith("torch=="),
             "--platform, --python-version and --all-platforms take the wheels from the "
             "index: --wheel torch==X, not a file"),
            (bool(request.platforms) and request.all_platforms,
             "--platform and --all-platforms do not go together"),
            (bool(request.python_versions) and not request.platforms,
             "--python-version goes with --platform (or use --all-platforms)"),
            (request.lock is not None, "--lock resolves for the platform that runs it: "
             "not with --platform or --all-platforms (serve the fleet from its index)")]
    if request.command == "verify" or request.model is not None:
        rules[:0] = verify_rules(request)
    rules.insert(0, (request.expect is not None and request.expect != "patched",
                     f"--expect {request.expect}: the one state to expect is `patched`"))
    rules.insert(1, (request.expect is not None and (request.command != "status"
                                                     or request.python is None),
                     "--expect patched goes with --status on an install (--python PY)"))
    rules.insert(2, (request.json and (request.command != "status" or request.python is None),
                     "--json goes with --status on an install (--python PY)"))
    for broken, message in rules:
        if broken:
            raise UsageError(message)


def verify_rules(request: Request) -> List[tuple[bool, str]]:
    """--verify runs an interpreter's torch; --model goes with it."""
    model = request.model or ""
    return [(request.command != "verify", "--model goes with --verify: "
             "--verify --model MODULE:FACTORY"),
            (request.checkout is not None, "--verify runs an interpreter's torch: "
             "--python PY, not a CHECKOUT (build it, then --verify its Python)"),
            (request.check, "--verify writes nothing; drop --check"),
            (request.model is not None and re.fullmatch(r"[^:]+:[A-Za-z_]\w*", model) is None,
             f"--model {model!r}: say MODULE:FACTORY (a module name or a .py file, a "
             "colon, and the function that returns (model, example_inputs))"),
            (request.model is not None and bool(request.topics),
             "--model checks the model's results through every entry point: "
             "not with --topic")]


def require_python(python: str) -> None:
    """A Python >= 3.9 that runs, or Failed naming it."""
    if not python.strip():
        raise UsageError("--python needs an interpreter; it was given an empty name")
    # Python 2 must be able to parse this line too.
    probe = ('import sys; print("ok" if sys.version_info >= (3, 9) '
             'else "old %d.%d" % sys.version_info[:2])')
    try:
        answer = subprocess.run([python, "-c", probe], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        answer = ""
    if answer.startswith("old"):
        raise Failed(f"{python} is Python {answer[4:]}; apply.sh needs Python 3.9 or later "
                     "(torch 2.9 and later need 3.10 anyway)")
    if answer != "ok":
        raise Failed(f"{python} is not a Python interpreter that runs here")


def refuse_release_older_than_every_base(named: str) -> None:
    """Failed for `--overlay v2.8.0` or `--wheel torch==2.8.0`: a release
    older than the oldest base can match no series, which is known from the
    version alone, before the wheel is downloaded. Any other release is
    decided by its files."""
    from torch_backport.patchset.series import supported_bases
    from torch_backport.infra.tables import release_numbers
    wanted = re.fullmatch(r"(?:torch==|v)?(\d+(?:\.\d+)*)", named)
    if wanted is None:
        return
    oldest = supported_bases()[0]
    if release_numbers(wanted[1]) < release_numbers(oldest):
        raise Failed(f"torch {wanted[1]} is older than every base here (the oldest is "
                     f"{oldest}), so no series can match its files; nothing was downloaded "
                     "(docs/patch-contract.md#why-not-280)")


def checked_cache_dir() -> Path:
    """cache_dir(); Failed if it names something that is not a directory,
    Refused if another user could have put what it holds there."""
    cache = cache_dir()
    if cache.exists() and not cache.is_dir():
        raise Failed(f"PREGRAD_CACHE={cache} is not a directory (it holds the downloaded "
                     "wheels); nothing was written")
    refuse_untrusted_cache(cache)
    return cache


def checked_out_dir(out: str, option: str = "--out") -> None:
    """Failed unless `out` is a directory or can be made one: checked before
    anything is read, so that --check says what the real run would do."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise Failed(f"{option} {out} is not a directory; nothing was read or written")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise Failed(f"{option} {out}: cannot make a directory under {ancestor}; nothing "
                     "was read or written")


def execute(request: Request, invoked_as: str = "scripts/apply.sh") -> int:
    """Run a parsed request: here, or in the target interpreter. `invoked_as`
    is how the user ran this command (its messages' prefix, --verify's advice)."""
    order: Order
    needs_git = request.checkout is not None or request.command in ("apply", "wheel", "overlay")
    if needs_git and shutil.which("git") is None:
        raise Failed("git is not on PATH: the series are applied with git apply / git am; "
                     "install git (e.g. apt-get install git); nothing was written")
    if request.command in ("wheel", "overlay"):
        named = request.overlay_base if request.command == "overlay" else request.wheel
        refuse_release_older_than_every_base(named or "")
        if request.out is not None:
            checked_out_dir(request.out)
        if request.lock is not None:
            checked_out_dir(str(Path(request.lock).parent), f"--lock {request.lock}:")
            if Path(request.lock).is_dir():
                raise Failed(f"--lock {request.lock} is a directory; name the file to write; "
                             "nothing was read or written")
        cache = checked_cache_dir()
    if request.command == "wheel":
        order = Order(Task.BUILD_WHEEL, invoked_as, source=request.wheel, out=request.out,
                      platforms=tuple(request.platforms),
                      pythons=tuple(request.python_versions),
                      all_platforms=request.all_platforms, cache=str(cache),
                      topics=tuple(request.topics), check=request.check, lock=request.lock)
        if has_pypa():
            return carry_out(order)
        return in_target(pypa_python(cache), order)
    if request.command == "overlay":
        out = Path(request.out) if request.out else REPO / "overlay"
        order = Order(Task.OVERLAY, invoked_as, base=request.overlay_base, out=str(out),
                      cache=str(cache), topics=tuple(request.topics))
        if request.python is not None:
            require_python(request.python)
            return in_target(request.python, dataclasses.replace(order, from_install=True))
        if has_pypa():
            return carry_out(order)
        return in_target(pypa_python(cache), order)
    if request.checkout is not None:
        if not os.path.exists(request.checkout):
            raise Failed(f"{request.checkout} does not exist")
        if os.path.isfile(request.checkout) and os.access(request.checkout, os.X_OK):
            raise Failed(f"{request.checkout} is a program, not a PyTorch checkout; to patch "
                         f"the torch of a Python interpreter, say --python {request.checkout}")
        return carry_out(Order(Task.CHECKOUT, invoked_as, request.command,
                               checkout=request.checkout, check=request.check,
                               commit=not request.no_commit, topics=tuple(request.topics)))
    assert request.python is not None
    require_python(request.python)
    # A mode rule, but checked after the interpreter, as apply.sh always did.
    if request.command == "status" and request.check:
        raise UsageError("--status writes nothing; drop --check")
    if request.command == "verify":
        # Set before PY starts: --verify writes no bytecode, its own included.
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        return in_target(request.python, Order(Task.VERIFY, invoked_as,
                                               topics=tuple(request.topics),
                                               model=request.model))
    return in_target(request.python, Order(Task.INSTALL, invoked_as, request.command,
                                           check=request.check, topics=tuple(request.topics),
                                           expect=request.expect, json=request.json))


def run_apply(argv: Sequence[str], prog_note: Optional[str] = None,
              default_python: Optional[str] = None) -> int:
    """`apply.sh ARGS`; as `torch-backport apply ARGS` with `default_python`."""
    try:
        request = parse(argv, default_python)
        if request.helping:
            if prog_note:
                print(prog_note)
            modes = options.sections_for(request.command, request.checkout is not None,
                                         request.python is not None)
            print(apply_help(invoked_as(default_python), modes), end="")
            return Exit.OK
        if default_python is not None:
            if request.command == "overlay" and request.out is None:
                return backport_usage_error(
                    "--overlay needs --out DIR here: its default, overlay/ beside apply.sh,"
                    f"\nwould be inside site-packages ({PACKAGE})")
        return execute(request, invoked_as(default_python))
    # The installed command names itself: it has no scripts/apply.sh.
    except BackportError as problem:
        return report(problem, invoked_as(default_python),
                      see_help=isinstance(problem, UsageError))


def invoked_as(default_python: Optional[str]) -> str:
    """The command as a user types it again (--help, --verify's advice)."""
    return "scripts/apply.sh" if default_python is None else "torch-backport apply"


def backport_usage_error(message: str) -> int:
    return report(UsageError(message), "torch-backport", see_help=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The installed `torch-backport` command."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        return backport_usage_error("say what to do: torch-backport apply [ARGS...]")
    if args[0] in ("-h", "--help"):
        print(BACKPORT_HELP.format(version=__version__, package=PACKAGE,
                                   python=sys.executable, exit_codes=EXIT_CODES,
                                   usage=int(Exit.USAGE)), end="")
        return Exit.OK
    if args[0] == "--version":
        from torch_backport.patchset import releases
        print(f"torch-backport {__version__}\nserves torch {releases.help_releases()}")
        return Exit.OK
    if args[0] in MAINTAINER_COMMANDS:
        return backport_usage_error(
            f"{args[0]} is a maintainer command of a clone, not installed: run\n"
            f"scripts/{args[0]} in a clone of torch-pregrad-backport (the one command "
            "here is `apply`)")
    if args[0] != "apply":
        return backport_usage_error(f"unknown command: {args[0]} (the one command is `apply`)")
    note = (f"torch-backport apply ARGS is scripts/apply.sh ARGS, adding --python "
            f"{sys.executable} when ARGS have no --python, CHECKOUT, --overlay or --wheel.")
    try:
        return run_apply(args[1:], prog_note=note, default_python=sys.executable)
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C); --status tells where the target stands", file=sys.stderr)
        return Exit.INTERRUPTED


def from_launcher(argv: List[str]) -> int:
    """Entry from _launch.py: `apply ARGS` (scripts/apply.sh) or `engine ORDER`
    (the target interpreter)."""
    if argv[:1] == ["engine"]:
        return carry_out(Order.from_json(argv[1]))
    return run_apply(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
