"""The command's one grammar: every option, mode rule and the help text of
`scripts/apply.sh` (a clone) and `torch-backport apply` (installed).

The arguments are parsed here, once, under whatever Python runs the command.
Checkout mode and an overlay from the package index then run in this
process; an installed wheel (and an overlay from one) runs in the target
interpreter PY, which gets the parsed request as JSON through _launch.py and
never imports from this command's own environment (its torch, if any, is not
the one to patch).

Exit codes: 0 done or nothing to do; 1 refused or failed; 2 usage error;
130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from torch_backport import __version__
from torch_backport.engine import engine, has_pypa, in_target, pypa_python
from torch_backport.errors import Failed, REPO, UsageError
from torch_backport.fsio import cache_dir
from torch_backport.help_text import apply_help, BACKPORT_HELP

PACKAGE = Path(__file__).resolve().parent
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
    platforms: List[str] = dataclasses.field(default_factory=list)
    python_versions: List[str] = dataclasses.field(default_factory=list)
    all_platforms: bool = False
    model: Optional[str] = None
    helping: bool = False


# The message for an option given without its value.
NEEDS = {
    "--python": "--python needs an interpreter",
    "--overlay": "--overlay needs a base, e.g. v2.11.0",
    "--out": "--out needs a directory",
    "--lock": "--lock needs a file name, e.g. dist/requirements.txt",
    "--topic": "--topic needs a topic name (or default, or all)",
    "--wheel": "--wheel needs a torch wheel file or torch==X",
    "--expect": "--expect needs a state: --expect patched",
    "--platform": "--platform needs a wheel platform tag, e.g. manylinux_2_28_aarch64",
    "--python-version": "--python-version needs a version, e.g. 3.12",
    "--model": "--model needs MODULE:FACTORY, e.g. mypkg.models:make_model",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit here
        raise UsageError(message)


class _SetMode(argparse.Action):
    """--status, --revert, --verify, --overlay BASE and --wheel IN: one of
    them at most."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        assert option_string is not None
        wanted = option_string[2:]
        if namespace.command != "apply":
            raise argparse.ArgumentError(None, f"--{namespace.command} and --{wanted} "
                                               "do not go together")
        namespace.command = wanted
        if wanted == "overlay":
            namespace.overlay_base = values
        if wanted == "wheel":
            namespace.wheel = values


def _parser() -> _Parser:
    parser = _Parser(prog="apply.sh", add_help=False, allow_abbrev=False,
                     exit_on_error=False)
    parser.set_defaults(command="apply", overlay_base=None, wheel=None)
    parser.add_argument("-h", "--help", dest="helping", action="store_true")
    parser.add_argument("--python")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--status", action=_SetMode, nargs=0)
    parser.add_argument("--revert", action=_SetMode, nargs=0)
    parser.add_argument("--verify", action=_SetMode, nargs=0)
    parser.add_argument("--model")
    parser.add_argument("--overlay", action=_SetMode)
    parser.add_argument("--wheel", action=_SetMode)
    parser.add_argument("--out")
    parser.add_argument("--lock")
    parser.add_argument("--no-commit", action="store_true")
    parser.add_argument("--topic", dest="topics", action="append", default=[])
    parser.add_argument("--expect")
    parser.add_argument("--platform", dest="platforms", action="append", default=[])
    parser.add_argument("--python-version", dest="python_versions", action="append",
                        default=[])
    parser.add_argument("--all-platforms", action="store_true")
    return parser


def parse(argv: Sequence[str], default_python: Optional[str] = None) -> Request:
    """The request `argv` makes, or UsageError naming what is wrong. With
    `default_python` (torch-backport), an install is that interpreter's
    unless --python, a CHECKOUT, --overlay or --wheel says otherwise."""
    try:
        known, rest = _parser().parse_known_args(list(argv))
    except argparse.ArgumentError as problem:
        if problem.argument_name in NEEDS and "expected one argument" in problem.message:
            raise UsageError(NEEDS[problem.argument_name]) from None
        raise UsageError(problem.message) from None
    request = Request(**{field.name: getattr(known, field.name)
                         for field in dataclasses.fields(Request) if field.name != "checkout"})
    if request.helping:
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
        from torch_backport.series import topics
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
    from torch_backport.series import supported_bases
    from torch_backport.tables import release_numbers
    wanted = re.fullmatch(r"(?:torch==|v)?(\d+(?:\.\d+)*)", named)
    if wanted is None:
        return
    oldest = supported_bases()[0]
    if release_numbers(wanted[1]) < release_numbers(oldest):
        raise Failed(f"torch {wanted[1]} is older than every base here (the oldest is "
                     f"{oldest}), so no series can match its files; nothing was downloaded "
                     "(docs/patch-contract.md#why-not-280)")


def checked_cache_dir() -> Path:
    """cache_dir(), or Failed if it names something that is not a directory."""
    cache = cache_dir()
    if cache.exists() and not cache.is_dir():
        raise Failed(f"PREGRAD_CACHE={cache} is not a directory (it holds the downloaded "
                     "wheels); nothing was written")
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


def execute(request: Request, command: str = "scripts/apply.sh") -> int:
    """Run a parsed request: here, or in the target interpreter. `command`
    is how the user ran this one (what --verify's advice names)."""
    order: Dict[str, Any]
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
        checked_cache_dir()
    if request.command == "wheel":
        order = {"engine": "wheel-build", "source": request.wheel, "out": request.out,
                 "platforms": request.platforms, "pythons": request.python_versions,
                 "all_platforms": request.all_platforms,
                 "cache": str(cache_dir()), "topics": request.topics,
                 "check": request.check, "lock": request.lock}
        if has_pypa():
            return engine(order)
        return in_target(pypa_python(cache_dir()), order)
    if request.command == "overlay":
        out = Path(request.out) if request.out else REPO / "overlay"
        order = {"engine": "overlay", "base": request.overlay_base, "out": str(out),
                 "cache": str(cache_dir()), "topics": request.topics}
        if request.python is not None:
            require_python(request.python)
            return in_target(request.python, dict(order, from_install=True))
        if has_pypa():
            return engine(dict(order, from_install=False))
        return in_target(pypa_python(cache_dir()), dict(order, from_install=False))
    if request.checkout is not None:
        if not os.path.exists(request.checkout):
            raise Failed(f"{request.checkout} does not exist")
        if os.path.isfile(request.checkout) and os.access(request.checkout, os.X_OK):
            raise Failed(f"{request.checkout} is a program, not a PyTorch checkout; to patch "
                         f"the torch of a Python interpreter, say --python {request.checkout}")
        return engine({"engine": "checkout", "command": request.command,
                       "checkout": request.checkout, "check": request.check,
                       "no_commit": request.no_commit, "topics": request.topics})
    assert request.python is not None
    require_python(request.python)
    # A mode rule, but checked after the interpreter, as apply.sh always did.
    if request.command == "status" and request.check:
        raise UsageError("--status writes nothing; drop --check")
    if request.command == "verify":
        # Set before PY starts: --verify writes no bytecode, its own included.
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        return in_target(request.python, {"engine": "verify", "topics": request.topics,
                                          "model": request.model,
                                          "command": command})
    return in_target(request.python, {"engine": "wheel", "command": request.command,
                                      "check": request.check, "topics": request.topics,
                                      "expect": request.expect})


def run_apply(argv: Sequence[str], prog_note: Optional[str] = None,
              default_python: Optional[str] = None) -> int:
    """`apply.sh ARGS`; as `torch-backport apply ARGS` with `default_python`."""
    try:
        request = parse(argv, default_python)
        if request.helping:
            if prog_note:
                print(prog_note)
            print(apply_help(), end="")
            return 0
        if default_python is not None:
            if request.command == "overlay" and request.out is None:
                return backport_usage_error(
                    "--overlay needs --out DIR here: its default, overlay/ beside apply.sh,"
                    f"\nwould be inside site-packages ({PACKAGE})")
        return execute(request, invoked_as(default_python))
    # The installed command names itself: it has no scripts/apply.sh.
    except UsageError as problem:
        print(f"{command_name(default_python)}: {problem}\n(see {invoked_as(default_python)} "
              "--help)",
              file=sys.stderr)
        return 2
    except Failed as problem:
        print(f"{command_name(default_python)}: {problem}", file=sys.stderr)
        return 1


def command_name(default_python: Optional[str]) -> str:
    """How messages name this command."""
    return "apply.sh" if default_python is None else "torch-backport apply"


def invoked_as(default_python: Optional[str]) -> str:
    """The command as a user types it again (--help, --verify's advice)."""
    return "scripts/apply.sh" if default_python is None else "torch-backport apply"


def backport_usage_error(message: str) -> int:
    print(f"torch-backport: {message}\n(see torch-backport --help)", file=sys.stderr)
    return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The installed `torch-backport` command."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        return backport_usage_error("say what to do: torch-backport apply [ARGS...]")
    if args[0] in ("-h", "--help"):
        print(BACKPORT_HELP.format(version=__version__, package=PACKAGE,
                                   python=sys.executable), end="")
        return 0
    if args[0] == "--version":
        print(f"torch-backport {__version__}")
        return 0
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
        return 130


def launched(argv: List[str]) -> int:
    """Entry from _launch.py: `apply ARGS` (scripts/apply.sh) or `engine ORDER`
    (the target interpreter)."""
    if argv[:1] == ["engine"]:
        return engine(json.loads(argv[1]))
    return run_apply(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
