"""Where an installed torch stands for one topic, as a type: `State` (what
--status says of each state, its exit code, and what apply and revert need
to know of it) and `Status` (the state with the install, the series and
the per-file lines it was found with). The messages that name the way back
to the wheel's files (the installer's reinstall command) are here too:
--status and the refusals of apply and revert say them alike.

Finding the state is status.py; nothing here reads the install's
files or writes anything."""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Callable, Dict, List, Optional, Union

from torch_backport.infra.paths import shown
from torch_backport.patchset.identify import Identified
from torch_backport.installed.install import Install
from torch_backport.installed.records import Manifest
from torch_backport.patchset.releases import known_defect
from torch_backport.patchset.series import fixed_bases, Series, supported_bases
from torch_backport.infra.tables import release_numbers
from torch_backport.infra.exit_codes import Exit

# The words a state's flags are made of (State.__new__).
FLAGS = ("applied", "expected", "revertible", "unchanged", "recovery")


def installer(install: Install) -> str:
    """The installer that made this torch (INSTALLER in its dist-info): pip, uv, ..."""
    return (install.dist.read_text("INSTALLER") or "pip").strip() or "pip"


def reinstall_command(install: Install, link_mode: str = "") -> str:
    """The command of the installer that made this torch that puts the stock
    wheel's files back (a uv venv often has no pip)."""
    version = install.built.source.get("version", install.version) if install.built \
        else install.version
    if installer(install) == "uv":
        prefix = f"UV_LINK_MODE={link_mode} " if link_mode else ""
        return (f"{prefix}uv pip install -p {sys.executable} --reinstall-package torch "
                f"--no-deps torch=={version}")
    return f"{sys.executable} -m pip install --force-reinstall --no-deps torch=={version}"


def linked_message(install: Install, linked: List[str]) -> str:
    target = install.path(linked[0]).resolve().parent
    whose = "uv's cache" if installer(install) == "uv" else "another directory"
    return (f"linked: the files the series touches are symbolic links into {whose} "
            f"({target}, ...): patching them would change every venv that shares it, so "
            "nothing is patched there. Install torch as copies, then apply: "
            f"{reinstall_command(install, link_mode='copy')}")


def built_from(install: Install) -> str:
    source = install.built.source if install.built else {}
    return f"{source.get('wheel', 'a torch wheel')}, by {install.built_by()}"


def revert_flags(install: Install) -> str:
    return "--revert" + install.topic.unless_primary(" --topic {name}")


def unseen_message(status: Status) -> str:
    """A release with the feature whose files match no series here, on which
    the results defect is to be expected: what is known, and what to do."""
    install = status.install
    found = status.identified
    files = f" ({found.reason()})" if found is not None and found.series is not None else ""
    return (
        f"unseen: torch {install.version} has the feature ({install.topic.present}), but "
        f"this version of torch-pregrad-backport has no series for its files{files}.\n"
        f"The results defect is known on every release from "
        f"{known_defect(install.topic, install.version)}, the newest tested: compile_fx on "
        "a GraphModule with freezing, under the default or late timing, returns wrong "
        "numbers (resnet50 off by up to 122; docs/results-fixes.md). Expect it here too.\n"
        "What to do: a newer torch-pregrad-backport that lists this release; or, from a "
        f"clone, scripts/new-base {'.'.join(map(str, release_numbers(install.version)))} "
        f"--python {sys.executable} (docs/patch-contract.md, \"Day one of a new release\"); "
        "until then torch._inductor.config.pre_grad_pass_timing = \"early\" avoids the "
        "defect, at the cost of the warm-start savings.")


def describe_files(status: Status) -> str:
    """The files that block a run, each with what is wrong with it."""
    wrong = {FileKind.MODIFIED: "differs from the wheel and the series",
             FileKind.MISSING: "is missing",
             FileKind.SYMLINK: "is a symbolic link (replaced after the series was applied)"}
    return "\n".join(f"  {status.install.site / rel}: {wrong[kind]}"
                     for rel, kind in sorted(status.kinds.items()) if kind in wrong)


def unsupported_detail(status: Status) -> str:
    """Why no series fits: which files differ from the closest base's."""
    topic = status.install.topic
    found = status.identified
    detail = (topic.unless_primary("topic {name} has no series that matches these files")
              or "no series of this topic matches these files")
    if found is not None and found.series is not None:
        detail += f" ({found.reason()})"
    return detail + "; supported bases: " + ", ".join(supported_bases(topic))


def no_fixes_note(status: Status) -> str:
    """For a torch that has the feature but no series here: where this
    topic's fixes for releases with the feature exist, if it has any."""
    topic = status.install.topic
    if status.series is not None:
        return ""
    bases = supported_bases(topic)
    fixes = fixed_bases(topic)
    if not fixes:
        return ""
    if topic.primary:
        return ("\nnote: this project's results fixes (see README, patch ledger) exist "
                "only for the supported bases: " + ", ".join(bases))
    return (f"\nnote: topic {topic.name} has series for releases that have its change "
            "upstream only for: " + ", ".join(fixes))


def patched_message(status: Status) -> str:
    return f"patched: the series is applied (revert with {revert_flags(status.install)})"


def no_backups_message(status: Status) -> str:
    install = status.install
    return ("patched without backups: the files are exactly what this "
            f"series makes, but {install.state_dir} with the originals is gone (deleted, or "
            "the files were copied from an overlay); --revert cannot restore them: "
            f"reinstall torch ({reinstall_command(install)})")


def feature_message(status: Status) -> str:
    return (f"has the feature: {status.install.topic.present}; nothing to apply"
            + no_fixes_note(status))


def unsupported_message(status: Status) -> str:
    return f"unsupported: {unsupported_detail(status)}"


def linked_status_message(status: Status) -> str:
    return linked_message(status.install, status.files(FileKind.LINK))


def patched_wheel_message(status: Status) -> str:
    install = status.install
    return ("patched: installed from a patched wheel (built from "
            f"{built_from(install)}); --revert cannot undo it: install the stock wheel "
            f"({reinstall_command(install)})")


Says = Union[str, Callable[["Status"], str]]


class State(enum.Enum):
    """Where an install stands for one topic. Each member carries its label
    (the word messages use), --status's exit code, what --status says (made
    from the Status when asked) and its flags:
    applied     the topic's files are as its series makes them (a partly
                applied install is one where another default topic is not);
    expected    what --status --expect patched accepts;
    revertible  --revert puts the wheel's files back from the backups;
    unchanged   --revert has nothing to restore;
    recovery    a run stopped part-way: revert or the next apply rolls it back."""

    label: str
    exit_code: int
    applied: bool
    expected: bool
    revertible: bool
    unchanged: bool
    recovery: bool
    says: Says

    def __new__(cls, label: str, exit_code: int, says: Says, flags: str = "") -> State:
        member = object.__new__(cls)
        member._value_ = label
        member.label, member.exit_code, member.says = label, exit_code, says
        words = set(flags.split())
        assert words <= set(FLAGS), words - set(FLAGS)
        (member.applied, member.expected, member.revertible, member.unchanged,
         member.recovery) = (word in words for word in FLAGS)
        return member

    PRISTINE = ("pristine", Exit.OK, "pristine: every file the series touches matches torch's "
                "RECORD", "unchanged")
    PATCHED = ("patched", Exit.OK, patched_message, "applied expected revertible")
    PARTIAL = ("partial", Exit.FAILED, "partly reverted by hand: the files marked pristine "
               "are the wheel's again; apply patches them again, --revert restores the "
               "others", "revertible")
    NO_BACKUPS = ("patched-no-backups", Exit.FAILED, no_backups_message, "applied")
    MODIFIED = ("modified", Exit.FAILED, "modified: the files marked modified differ from "
                "both the wheel and the series")
    OUTDATED = ("outdated", Exit.FAILED, "outdated: an earlier version of the series is applied; "
                "apply replaces it, --revert removes it", "revertible")
    INTERRUPTED = ("interrupted", Exit.FAILED, "interrupted: an earlier run stopped part-way; "
                   "--revert or the next apply rolls it back", "revertible recovery")
    HAS_FEATURE = ("has-feature", Exit.OK, feature_message, "expected unchanged")
    UNSUPPORTED = ("unsupported", Exit.FAILED, unsupported_message, "unchanged")
    UNSEEN = ("unseen", Exit.UNSEEN, unseen_message)
    LINKED = ("linked", Exit.FAILED, linked_status_message, "unchanged")
    PATCHED_WHEEL = ("patched-wheel", Exit.OK, patched_wheel_message, "applied expected")

    def message(self, status: Status) -> str:
        """What --status says of this state, for `status`."""
        return self.says if isinstance(self.says, str) else self.says(status)

    def __str__(self) -> str:
        return self.label


class FileKind(enum.Enum):
    """What one file the series touches is, in an install."""
    PRISTINE = "pristine"  # the wheel's, by RECORD
    PATCHED = "patched"  # what the series makes of it
    MODIFIED = "modified"  # neither
    MISSING = "missing"
    SYMLINK = "symlink"  # a link where the series wrote a file
    LINK = "link"  # a link before anything was applied (uv's symlink mode)


@dataclasses.dataclass
class Status:
    state: State
    install: Install
    series: Optional[Series]
    kinds: Dict[str, FileKind]  # each file's kind, by its path in site-packages
    manifest: Optional[Manifest]
    # How the series was chosen: by the files' content (None: the manifest of
    # the run that applied it names it).
    identified: Optional[Identified] = None
    note: Optional[str] = None  # said before the files (an interrupted run)

    @property
    def lines(self) -> List[str]:
        """--status's per-file detail: "  <kind> <path>", by path."""
        return ([f"  {self.note}"] if self.note else []) + [
            f"  {kind.value:<9} {rel}" for rel, kind in sorted(self.kinds.items())]

    def headline(self) -> str:
        where = f"torch {self.install.version} in {self.install.site}"
        topic = self.install.topic.unless_primary("topic {name}")
        if self.series:
            topic += ", " if topic else ""
            return where + f" (base {self.series.base}, {topic}{len(self.series.patches)} patches)"
        return where + (f" ({topic})" if topic else "")

    def files(self, kind: FileKind) -> List[str]:
        return sorted(rel for rel, its in self.kinds.items() if its is kind)

    def why(self, verb: str) -> Optional[str]:
        """Why this series, when the version string alone would not say it
        (2.12.1 gets v2.12.0's series, 2.9.0 its own): None otherwise."""
        if self.series is None or (release_numbers(self.install.version)
                                   == release_numbers(self.series.base)):
            return None
        where = shown(self.series.directory)
        if self.identified is None:
            return (f"torch {self.install.version}: patched with {where} "
                    f"(the manifest in {self.install.state_dir} says so)")
        if not self.identified.exact:
            return None  # refused or reported as modified: the lines say why
        return f"torch {self.install.version}: {self.identified.reason()}: {verb} {where}"

    def headline_lines(self, verb: str) -> List[str]:
        why = self.why(verb)
        return [self.headline()] + ([why] if why else [])

    def message(self) -> str:
        """What --status says of this install's state."""
        return self.state.message(self)
