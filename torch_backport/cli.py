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
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from torch_backport import __version__
from torch_backport.fsio import atomic_write, cache_dir, locked
from torch_backport.series import REPO

PACKAGE = Path(__file__).resolve().parent
LAUNCH = PACKAGE / "_launch.py"

APPLY_HELP = """\
Usage: scripts/apply.sh --python PY [--topic T]... [--check | --status [--expect patched] | --revert [--check]]
       scripts/apply.sh CHECKOUT [--topic T]... [--check | --no-commit | --status | --revert [--check]]
       scripts/apply.sh --overlay BASE [--topic T]... [--python PY] [--out DIR]
       scripts/apply.sh --wheel IN --out DIR [--topic T]... [--check]
       scripts/apply.sh --help

Brings torch 2.12's cache-aware pre-grad pass timing
(torch._inductor.config.pre_grad_pass_timing) to a torch that lacks it, by
applying the series in patches/<base>/ to an installed wheel or to a PyTorch
git checkout.

Topics (patches/topics.tsv): each topic is a series per base, applied,
reported and reverted on its own.
@TOPICS@
  --topic T            act on topic T (repeat it, or T1,T2; `all` is every
                       topic, `default` the default ones, so
                       `default,cpu-isa-probe` adds the opt-in topic to
                       them). An unknown name is a usage error (exit 2),
                       wherever it appears. Without it apply, --revert and
                       --overlay act on the default topics, and --status
                       reports every topic. A default topic other than
                       pre-grad-pass-timing that has no series for a release
                       is reported as not available and left alone, unless
                       named with --topic.

Which series: for each topic, the one whose base's files (pristine.tsv)
the torch or tree holds byte for byte, by git blob id, or, once patched,
whose patched files it holds; the version string only breaks ties. 2.12.1
gets v2.12.0's series, 2.14.0 v2.14.1's, a +cpu or vendor build the series
of the release whose files it has; the output says which and why.

Installed wheel (the torch that interpreter PY imports):
  --python PY          apply the series whose base's files PY's torch holds.
                       Before writing anything, every file it touches must
                       match the wheel's RECORD hashes; otherwise it refuses,
                       names the files and changes nothing. Originals are kept beside the install
                       (site-packages/.torch-pregrad-backport/, and
                       .torch-pregrad-backport-<topic>/ for an opt-in topic)
                       for --revert.
                       A second apply says "already applied" and exits 0.
                       @WITH_FEATURE@ have the feature and get their results
                       fixes; a torch with the feature whose files match no
                       series here (a vendor build) is reported and
                       left alone, unless the results defect is known on the
                       releases around it: then it is "unseen" (a release
                       this project has not seen: 2.16.0 before a series
                       exists for it), refused with what is known and what
                       to do (scripts/new-base). One without the feature
                       whose files match no base
                       is refused, naming the files that differ. The run
                       refuses before writing if it could not write every
                       file (run it as the install's owner).
  --check              say what would happen; write nothing
  --status             pristine / patched / partly reverted by hand / patched
                       without backups / modified / outdated / interrupted /
                       has the feature / unseen / unsupported, for every
                       topic (exit 0 when each is pristine, patched or has
                       the feature; 3 when a topic is unseen: a release with
                       the feature, no series here and the results defect
                       known on the releases around it; a topic other than
                       pre-grad-pass-timing with no series for this release
                       is "not available for this release", which is fine
                       unless named with --topic)
  --expect patched     with --status, the guard for images and CI: exit 1
                       unless every default topic is applied (by apply.sh or
                       a patched wheel) or upstream's. A stock install, an
                       unseen release and a reinstall that put the stock
                       files back all fail it.
  --revert             restore the originals, checked against RECORD again;
                       also finishes or rolls back an interrupted run

PyTorch checkout or release branch (a git work tree of pytorch/pytorch):
  CHECKOUT             identify the base by the content of the files the series
                       touches (their blob hashes, patches/<base>/pristine.tsv),
                       say which base and why, then `git am -3` the series: one
                       commit per patch, messages and trailers kept. Refuses,
                       changing nothing, a dirty tree or index, an am, rebase,
                       merge, cherry-pick or revert in progress, a directory
                       that is not a PyTorch checkout, an unknown base, and a
                       conflict the 3-way merge cannot resolve (it aborts the am
                       and names the patch, file and line). A second run says
                       "already applied". A @FIXED_BASES@ tree gets its
                       results fixes; any other tree with the feature upstream
                       is reported and left alone. The commits are made one
                       patch at a time: a run killed in between leaves a clean
                       tree with part of the series, which the next run
                       finishes. Each command reads HEAD's history once, and
                       only down to where the touched files were a base's.
  --no-commit          stage the changes instead of committing them (every
                       chosen topic's; topics share no file)
  --check              apply into a throw-away index: HEAD, index and tree untouched
  --status             which patches are applied (by patch-id), and whether the
                       feature is present at HEAD
  --revert             `git revert` exactly the series' commits, newest first;
                       refuses, naming the later commits, if they touched the
                       same lines (HEAD is left where it was)

Patched wheel (a torch wheel with the series in it, to pin by hash):
  --wheel IN           IN is a torch wheel file, or torch==X for the release
                       wheel (downloaded once into the cache). Checks every
                       file of IN against its RECORD, applies each topic's
                       series (chosen by content, post-image blobs checked, as
                       on an install), and writes to DIR the same wheel with
                       version X+pregrad.g<10 hex> (a PEP 440 local label that
                       names the series; torch==X requirements accept it), a
                       new RECORD and dist-info name, and the same bytes every
                       time. A refused IN (a file that does not match RECORD,
                       a release without a series, not a torch wheel) writes
                       nothing. An install made from it shows as "installed
                       from a patched wheel" in --status. Needs PyPA's wheel
                       and packaging: without them in python3, they are
                       installed once into a venv in the cache.
  --out DIR            where the wheel goes (required)
  --lock FILE          with --wheel: also write FILE, a requirements file
                       for pip install --require-hashes: every dependency of
                       torch==X as pip resolves it now (name==version and the
                       sha256 of the file pip would install, from pip install
                       --dry-run --report), and the patched wheel by its
                       path and sha256 in torch's place. It is for the Python
                       and platform running this command.
  --platform TAG       with --wheel torch==X: build for this wheel platform tag
                       (repeat it; e.g. manylinux_2_28_aarch64, macosx_15_0_arm64,
                       win_amd64), each target's release wheel downloaded once
                       into the cache, and write DIR/simple/, a PEP 503 index
                       of every patched torch wheel in DIR (relative links with
                       sha256) for pip --index-url file://DIR/simple, pip
                       --find-links DIR or a uv [[tool.uv.index]]. A target the
                       index has no wheel for is named (exit 1)
  --python-version V   with --platform: for CPython V (repeat it; default
                       3.10, 3.11, 3.12 and 3.13)
  --all-platforms      every Linux x86_64 and aarch64, macOS arm64 and
                       Windows amd64 wheel of CPython 3.10-3.13 the release
                       has (the combinations it lacks are named, exit 0)
  --check              check IN and the series; write nothing

Overlay (the patched files of a base at their upstream paths, for copying
into an image or a vendored tree; see overlay/README.md):
  --overlay BASE       generate overlay/ for BASE (e.g. v2.11.0) from the
                       pristine release files plus the series. The pristine
                       files come from PY's torch if --python is given (its
                       files must be BASE's, pristine or patched by this
                       script), else from the wheel that `pip download`
                       fetches (cached). BASE may also be a release without
                       a series of its own (2.12.1, 2.14.0): each topic then
                       gets the series whose base's files it holds.
  --out DIR            write there instead of overlay/

@BASES@
Requirements: git, Python 3.9 or later for PY, and python3 on PATH (it reads
these arguments, and runs CHECKOUT mode and --overlay without --python).
Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport)
holds downloaded wheels (and the venv with PyPA's wheel for --wheel).
Exit codes: 0 done or nothing to do; 1 refused or failed (nothing changed);
2 usage error; 3 --status on an unseen release (see --status); 130
interrupted (Ctrl-C; --status tells where it stands).
"""  # noqa: E501  (the help is printed as written)

BACKPORT_HELP = """\
Usage: torch-backport apply [ARGS...]
       torch-backport --help | --version

`torch-backport apply ARGS` is scripts/apply.sh ARGS of a clone of
torch-pregrad-backport {version}, installed with its patch series in
  {package}/patches
to patch, check, report on (--status) or revert (--revert) the torch of an
installed wheel, to apply the series to a PyTorch checkout, or to write an
overlay.
`torch-backport apply --help` lists ARGS.

Without --python PY, a CHECKOUT, --overlay or --wheel among ARGS, `apply` adds
  --python {python}
the interpreter this command is installed into, so it patches the torch next
to it. --overlay needs --out DIR: its default, overlay/ beside the scripts,
would be inside site-packages.

Requirements: git (wheel mode applies the patches with `git apply`).
Exit codes: apply.sh's (0 done or nothing to do; 1 refused or failed; 2 usage
error; 130 interrupted); 2 for a usage error of torch-backport itself.
"""


class UsageError(Exception):
    """Arguments the grammar does not allow; exit 2."""


class Failed(Exception):
    """A precondition the arguments name does not hold (no such checkout,
    no such interpreter); exit 1."""


@dataclasses.dataclass
class Request:
    """What the arguments ask for, after every mode rule."""
    command: str  # apply | status | revert | overlay | wheel
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
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit here
        raise UsageError(message)


class _SetMode(argparse.Action):
    """--status, --revert, --overlay BASE and --wheel IN: one of them at most."""

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
    rules.insert(0, (request.expect is not None and request.expect != "patched",
                     f"--expect {request.expect}: the one state to expect is `patched`"))
    rules.insert(1, (request.expect is not None and (request.command != "status"
                                                     or request.python is None),
                     "--expect patched goes with --status on an install (--python PY)"))
    for broken, message in rules:
        if broken:
            raise UsageError(message)


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
    wanted = re.fullmatch(r"(?:torch==|v)?(\d+(?:\.\d+)*)", named)
    if wanted is None:
        return
    oldest = supported_bases()[0]

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", version))

    if key(wanted[1]) < key(oldest):
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


def execute(request: Request) -> int:
    """Run a parsed request: here, or in the target interpreter."""
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
        return engine(dict(order, from_install=False))
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
    return in_target(request.python, {"engine": "wheel", "command": request.command,
                                      "check": request.check, "topics": request.topics,
                                      "expect": request.expect})


# PyPA's wheel and packaging, for --wheel where python3 lacks them.
PYPA = ("wheel==0.48.0", "packaging==26.4")


def has_pypa() -> bool:
    import importlib.util
    return all(importlib.util.find_spec(name) is not None for name in ("wheel", "packaging"))


def pypa_python(cache: Path) -> str:
    """A venv in the cache with PyPA's wheel and packaging, made once (one
    run at a time: two test jobs may ask at once)."""
    tools = cache / "tools"
    venv = tools / "pypa"
    python = venv / "bin" / "python"
    ready = venv / ".pregrad-ready"
    tools.mkdir(parents=True, exist_ok=True)
    with locked(tools):
        if ready.is_file() and ready.read_text() == " ".join(PYPA):
            return str(python)
        print(f"installing PyPA's {' and '.join(PYPA)} into {venv} (once) ...",
              file=sys.stderr, flush=True)
        for command in ([sys.executable, "-m", "venv", "--clear", str(venv)],
                        [str(python), "-m", "pip", "install", "--quiet",
                         "--disable-pip-version-check", *PYPA]):
            if subprocess.run(command).returncode != 0:
                raise Failed(f"could not set up {venv} ({' '.join(command[:3])} failed; "
                             "its output is above); nothing was written")
        atomic_write(ready, " ".join(PYPA).encode(), 0o644)
    return str(python)


def in_target(python: str, order: Dict[str, Any]) -> int:
    """Hand `order` to the engine under `python`; returns only on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    # A bare name (`--python python3`) is looked up on PATH, as require_python's run did.
    path = python if os.sep in python else (shutil.which(python) or python)
    os.execv(path, [path, str(LAUNCH), "engine", json.dumps(order)])


def engine(order: Dict[str, Any]) -> int:
    """Carry out an order (in this interpreter: the target one for a wheel)."""
    from torch_backport import driver
    names = order["topics"] or None
    if order["engine"] == "wheel-build" and (order.get("platforms") or order.get("all_platforms")):
        from torch_backport.fleet import cmd_fleet, targets
        release = order["source"].split("==", 1)[1]
        return driver.generate(names, lambda chosen, optional: cmd_fleet(
            release, targets(order["platforms"], order["pythons"], order["all_platforms"]),
            order["all_platforms"], Path(order["out"]), Path(order["cache"]), chosen, optional,
            order["check"]), "each wheel is written whole or not at all; the index is "
            "written last")
    if order["engine"] == "wheel-build":
        from torch_backport.patched_wheel import cmd_wheel
        return driver.generate(names, lambda chosen, optional: cmd_wheel(
            order["source"], Path(order["out"]), Path(order["cache"]), chosen, optional,
            order["check"], order.get("lock")),
            "the partial wheel was removed; nothing was written")
    if order["engine"] == "overlay":
        from torch_backport.overlay import cmd_overlay
        # An overlay leaves no topic out: it is what was asked for, or nothing.
        return driver.generate(names, lambda chosen, optional: cmd_overlay(
            order["base"], Path(order["out"]), order["from_install"], Path(order["cache"]),
            chosen), "the output directory keeps a journal of what this run wrote; the "
            "next run finishes or replaces it")
    if order["engine"] == "install-files":
        # Another interpreter reads this one's torch (pristine.install_files).
        from torch_backport.pristine import probe
        print(json.dumps(probe(order["paths"])))
        return 0
    if order["engine"] == "checkout":
        from torch_backport.checkout_mode import open_checkout
        return driver.run(order["command"], names, order["check"], open_checkout(
            Path(order["checkout"]).resolve(), order["command"], not order["no_commit"]))
    from torch_backport.wheel_mode import open_install, without_torch
    leftover = without_torch(order["command"], order["check"])
    if leftover is not None:
        return leftover
    return driver.run(order["command"], names, order["check"], open_install,
                      order.get("expect"))


def apply_help() -> str:
    """APPLY_HELP with the topics and releases of patches/topics.tsv and
    patches/releases.tsv."""
    from torch_backport import releases
    from torch_backport.series import fixed_bases, primary_topic, Refused
    try:
        primary = primary_topic()
        bases = textwrap.fill(
            "Bases: the directories of patches/ that hold a series file (for a topic "
            "other than the default: patches/<base>/<topic>/series). Releases served: "
            f"{releases.help_releases()}.", width=79, break_on_hyphens=False)
        with_feature = [release.version for release in releases.with_the_feature(primary)]
        made = {"@TOPICS@": releases.help_topics(),
                "@WITH_FEATURE@": releases.span(with_feature),
                "@FIXED_BASES@": releases.span(fixed_bases(primary)),
                "@BASES@": bases}
    except (OSError, Refused) as problem:
        # The help still prints: the rest of it is what a user needs to fix this.
        broken = f"(cannot list them: {problem})"
        made = {"@TOPICS@": f"  {broken}", "@WITH_FEATURE@": "Releases with a fixes series",
                "@FIXED_BASES@": "release's", "@BASES@": f"Bases: {broken}"}
    text = APPLY_HELP
    for marker, value in made.items():
        text = text.replace(marker, value)
    return text


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
        return execute(request)
    # The installed command names itself: it has no scripts/apply.sh.
    except UsageError as problem:
        help_command = "scripts/apply.sh" if default_python is None else "torch-backport apply"
        print(f"{command_name(default_python)}: {problem}\n(see {help_command} --help)",
              file=sys.stderr)
        return 2
    except Failed as problem:
        print(f"{command_name(default_python)}: {problem}", file=sys.stderr)
        return 1


def command_name(default_python: Optional[str]) -> str:
    return "apply.sh" if default_python is None else "torch-backport apply"


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
