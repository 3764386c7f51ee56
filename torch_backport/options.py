"""The one option table of `scripts/apply.sh` / `torch-backport apply`: each
option once, with its help in each mode it takes part in. The parser (cli.py),
the message for an option without its value and --help all come from it.
Long explanations are in docs/usage.md; the help points there."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import textwrap
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torch_backport.infra.errors import UsageError

HELP_COLUMN = 23
WIDTH = 79


class Kind(enum.Enum):
    SWITCH = "switch"  # --check
    VALUE = "value"  # --python PY
    REPEATED = "repeated"  # --topic T, given again for more
    MODE = "mode"  # --status: chooses the command
    MODE_VALUE = "mode-value"  # --overlay BASE: chooses the command, with its value
    POSITIONAL = "positional"  # CHECKOUT


class Section(enum.Enum):
    """The sections of --help, one per kind of target: its title, and where
    docs/usage.md has it in full."""
    TOPICS = ("Topics", "")
    INSTALL = ("Installed wheel (the torch that interpreter PY imports)",
               "docs/usage.md#installed-wheel")
    CHECKOUT = ("PyTorch checkout or release branch (a git work tree of pytorch/pytorch)",
                "docs/usage.md#fork-or-release-branch")
    WHEEL = ("Patched wheel (a torch wheel with the series in it, to pin by hash)",
             "docs/usage.md#patched-wheel")
    OVERLAY = ("Overlay (the patched files of a base at their upstream paths)",
               "docs/usage.md#the-overlay")


@dataclasses.dataclass(frozen=True)
class Option:
    name: str  # --python, or CHECKOUT for the positional argument
    kind: Kind
    help: Mapping[Section, str]
    value: Optional[str] = None  # the value's name in the help: PY
    dest: Optional[str] = None  # the Request field, where it is not the name's
    needs: Optional[str] = None  # said when the value is missing

    @property
    def field(self) -> str:
        return self.dest or self.name.lstrip("-").replace("-", "_").lower()

    @property
    def shown(self) -> str:
        return f"{self.name} {self.value}" if self.value else self.name


OPTIONS: Tuple[Option, ...] = (
    Option("--topic", Kind.REPEATED, dest="topics", value="T",
           needs="--topic needs a topic name (or default, or all)", help={
               Section.TOPICS: "act on topic T (repeat it, or T1,T2; `all` is every topic, "
               "`default` the default ones, so `default,cpu-isa-probe` adds the opt-in "
               "topic to them). An unknown name is a usage error (exit 2). Without it "
               "apply, --revert and --overlay act on the default topics, and --status "
               "reports every topic."}),
    Option("--python", Kind.VALUE, value="PY", needs="--python needs an interpreter", help={
        Section.INSTALL: "apply the series whose base's files PY's torch holds, after "
        "checking every file it touches against the wheel's RECORD (a mismatch is "
        "refused, naming the files, with nothing changed). Originals are kept in "
        "site-packages/.torch-pregrad-backport*/ for --revert. A second apply says "
        "\"already applied\". @WITH_FEATURE@ have the feature and get their results "
        "fixes; an unseen release with the feature is refused with what to do "
        "(scripts/new-base).",
        Section.OVERLAY: "take the pristine files from PY's torch (its files must be "
        "BASE's, pristine or patched here) instead of the release wheel on pip's index"}),
    Option("--check", Kind.SWITCH, help={
        Section.INSTALL: "say what would happen; write nothing",
        Section.CHECKOUT: "apply into a throw-away index: HEAD, index and tree untouched",
        Section.WHEEL: "check IN and the series; write nothing"}),
    Option("--status", Kind.MODE, help={
        Section.INSTALL: "each topic's state: pristine / patched / modified / outdated / "
        "interrupted / has the feature / unseen / unsupported ... (exit 0 when each is "
        "pristine, patched or has the feature; 3 when a topic is unseen)",
        Section.CHECKOUT: "which patches are applied (by patch-id), and whether the feature "
        "is present at HEAD"}),
    Option("--expect", Kind.VALUE, value="patched", needs="--expect needs a state: "
           "--expect patched", help={
               Section.INSTALL: "with --status, the guard for images and CI: exit 1 unless "
               "every default topic is applied (by apply.sh or a patched wheel) or "
               "upstream's"}),
    Option("--json", Kind.SWITCH, help={
        Section.INSTALL: "with --status, print one JSON object instead: each topic's state, "
        "exit code, base, files and what to do (docs/usage.md#status-as-json)"}),
    Option("--revert", Kind.MODE, help={
        Section.INSTALL: "restore the originals, checked against RECORD again; also "
        "finishes or rolls back an interrupted run",
        Section.CHECKOUT: "`git revert` exactly the series' commits, newest first; refuses, "
        "naming the later commits, if they touched the same lines"}),
    Option("--verify", Kind.MODE, help={
        Section.INSTALL: "in a fresh process of PY, with an Inductor cache of its own and no "
        "bytecode written, run what each topic promises and print one line per cell, "
        "expected beside actual; exit 0 only if every cell holds. About 15-25 s on 2 "
        "cores; needs a C++ compiler (docs/usage.md#proof-from-the-running-code---verify)"}),
    Option("--model", Kind.VALUE, value="MODULE:FACTORY",
           needs="--model needs MODULE:FACTORY, e.g. mypkg.models:make_model", help={
               Section.INSTALL: "with --verify: your own model, from FACTORY in MODULE (a "
               "module name or a .py file), which returns (model, example_inputs); one "
               "row per entry point (compile_fx, torch._inductor.compile, export, "
               "AOTInductor, torch.compile) with its max abs error against eager"}),
    Option("CHECKOUT", Kind.POSITIONAL, help={
        Section.CHECKOUT: "identify the base by the content of the files the series touches "
        "(patches/<base>/pristine.tsv), say which and why, then `git am -3` the series: "
        "one commit per patch. Refuses, changing nothing, a dirty tree, an operation in "
        "progress, an unknown base and a conflict the 3-way merge cannot resolve. A "
        "@FIXED_BASES@ tree gets its results fixes."}),
    Option("--no-commit", Kind.SWITCH, help={
        Section.CHECKOUT: "stage the changes instead of committing them"}),
    Option("--wheel", Kind.MODE_VALUE, value="IN", needs="--wheel needs a torch wheel file "
           "or torch==X", help={
               Section.WHEEL: "IN is a torch wheel file, or torch==X for the release wheel "
               "(downloaded once into the cache). Checks IN against its RECORD, applies "
               "each topic's series and writes the same wheel with version "
               "X+pregrad.g<10 hex>, the same bytes every time"}),
    Option("--out", Kind.VALUE, value="DIR", needs="--out needs a directory", help={
        Section.WHEEL: "where the wheel goes (required)",
        Section.OVERLAY: "write there instead of overlay/"}),
    Option("--lock", Kind.VALUE, value="FILE", needs="--lock needs a file name, e.g. "
           "dist/requirements.txt", help={
               Section.WHEEL: "also write FILE, a requirements file for pip install "
               "--require-hashes: torch==X's dependencies as pip resolves them now, and "
               "the patched wheel in torch's place (for this Python and platform)"}),
    Option("--platform", Kind.REPEATED, value="TAG", dest="platforms",
           needs="--platform needs a wheel platform tag, e.g. manylinux_2_28_aarch64", help={
               Section.WHEEL: "with --wheel torch==X: build for this wheel platform tag "
               "(repeat it), and write DIR/simple/, a PEP 503 index of every patched "
               "wheel in DIR"}),
    Option("--python-version", Kind.REPEATED, value="V", dest="python_versions",
           needs="--python-version needs a version, e.g. 3.12", help={
               Section.WHEEL: "with --platform: for CPython V (repeat it; default 3.10, "
               "3.11, 3.12 and 3.13)"}),
    Option("--all-platforms", Kind.SWITCH, help={
        Section.WHEEL: "every Linux x86_64 and aarch64, macOS arm64 and Windows amd64 wheel "
        "of CPython 3.10-3.13 the release has"}),
    Option("--overlay", Kind.MODE_VALUE, value="BASE", dest="overlay_base",
           needs="--overlay needs a base, e.g. v2.11.0", help={
               Section.OVERLAY: "generate overlay/ for BASE (e.g. v2.11.0, or a release "
               "without a series of its own, e.g. 2.12.1) from the pristine release files "
               "plus the series; the files come from the release wheel on pip's index, "
               "read by HTTP range (a few MB)"}),
)

USAGE = (
    "--python PY [--topic T]... [--check | --status [--expect patched] | --revert [--check]]",
    "--python PY --verify [--topic T]...",
    "--python PY --verify --model MODULE:FACTORY",
    "CHECKOUT [--topic T]... [--check | --no-commit | --status | --revert [--check]]",
    "--overlay BASE [--topic T]... [--python PY] [--out DIR]",
    "--wheel IN --out DIR [--topic T]... [--check] [--lock FILE]",
    "--wheel torch==X --out DIR (--platform TAG... [--python-version V]... "
    "| --all-platforms)",
    "--help (after a mode's options: that mode's help)",
)


def needs() -> Dict[str, str]:
    """What is said for an option given without its value."""
    return {option.name: option.needs for option in OPTIONS if option.needs}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit here
        raise UsageError(message)


class _SetMode(argparse.Action):
    """The MODE and MODE_VALUE options: one of them at most."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        assert option_string is not None
        wanted = option_string[2:]
        if namespace.command != "apply":
            raise argparse.ArgumentError(None, f"--{namespace.command} and --{wanted} "
                                               "do not go together")
        namespace.command = wanted
        if self.nargs != 0:
            setattr(namespace, self.dest, values)


def parser(prog: str) -> Parser:
    """The parser of the table (CHECKOUT is what is left over)."""
    made = Parser(prog=prog, add_help=False, allow_abbrev=False, exit_on_error=False)
    made.set_defaults(command="apply")
    made.add_argument("-h", "--help", dest="helping", action="store_true")
    for option in OPTIONS:
        if option.kind is Kind.SWITCH:
            made.add_argument(option.name, dest=option.field, action="store_true")
        elif option.kind is Kind.VALUE:
            made.add_argument(option.name, dest=option.field)
        elif option.kind is Kind.REPEATED:
            made.add_argument(option.name, dest=option.field, action="append", default=[])
        elif option.kind is Kind.MODE:
            made.add_argument(option.name, dest=option.field, action=_SetMode, nargs=0)
        elif option.kind is Kind.MODE_VALUE:
            made.add_argument(option.name, dest=option.field, action=_SetMode, default=None)
    return made


def entry(shown: str, text: str) -> List[str]:
    """One option's lines: its name, then its help from HELP_COLUMN."""
    indent = " " * HELP_COLUMN
    first = f"  {shown}"
    lines = textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                          break_on_hyphens=False, break_long_words=False)
    if len(first) < HELP_COLUMN - 1:
        return [first.ljust(HELP_COLUMN) + lines[0][HELP_COLUMN:]] + lines[1:]
    return [first] + lines


def fill(text: str, filled: Mapping[str, str]) -> str:
    """`text` with each @MARKER@ of `filled` replaced by its words."""
    for marker, value in filled.items():
        text = text.replace(marker, value)
    return text


def section(mode: Section, filled: Mapping[str, str]) -> List[str]:
    """A mode's help: its title, then its options, the one that chooses the
    mode first."""
    title, docs = mode.value
    lines = [f"{title}:"] + ([f"  (in full: {docs})"] if docs else [])
    choosing = (Kind.MODE_VALUE, Kind.POSITIONAL)
    for option in sorted(OPTIONS, key=lambda option: option.kind not in choosing):
        if mode in option.help:
            lines += entry(option.shown, fill(option.help[mode], filled))
    return lines


def usage(prog: str) -> List[str]:
    return [("Usage: " if number == 0 else "       ") + f"{prog} {line}"
            for number, line in enumerate(USAGE)]


def sections_for(command: str, checkout: bool, python: bool) -> Sequence[Section]:
    """The sections --help shows after these options: one mode's, or all."""
    if checkout:
        return (Section.TOPICS, Section.CHECKOUT)
    if command == "overlay":
        return (Section.TOPICS, Section.OVERLAY)
    if command == "wheel":
        return (Section.TOPICS, Section.WHEEL)
    if command in ("status", "revert", "verify") or python:
        return (Section.TOPICS, Section.INSTALL)
    return tuple(Section)
