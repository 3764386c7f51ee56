"""The one driver for topics, used by every mode (an installed wheel, a
checkout): which topics a command acts on, --status over all of them, the
silent pre-check that lets a refusal of one topic leave every topic as it
was, and the exit code.

A mode says how to do one topic (`Mode`); this module says how topics
combine. Exit codes: 0 done or nothing to do, 1 refused or failed (nothing
changed), 130 interrupted (what was written is restored).
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Callable, ContextManager, List, Optional

from torch_backport.series import Refused, refuse_shared_files, select_topics, Series, Topic


class Mode:
    """One target (an install, a checkout) and how each command treats one
    topic there. `named` is whether the user named topics with --topic: a
    default topic without a series for this release is then a refusal, not
    "not available". A mode overrides what it has; the defaults do nothing."""

    def status(self, topic: Topic, named: bool) -> int:
        raise NotImplementedError

    def apply(self, topic: Topic, check: bool, named: bool) -> int:
        raise NotImplementedError

    def revert(self, topic: Topic, check: bool, named: bool) -> int:
        raise NotImplementedError

    def series_for(self, topic: Topic) -> Optional[Series]:
        """The series this target gets for `topic`, None if there is none."""
        raise NotImplementedError

    def session(self) -> ContextManager[None]:
        """Held around apply and revert (a lock, say)."""
        return contextlib.nullcontext()

    def is_applied(self, topic: Topic) -> bool:
        """Whether `topic` is applied, for taking back what a failed run
        applied; a mode that cannot take back answers False."""
        return False

    def after_revert(self, chosen: List[Topic], named: bool) -> None:
        """Called after a revert of the topics `chosen`."""

    def unapplied_defaults(self, chosen: List[Topic]) -> List[str]:
        """The default topics that are pristine, with a series here, while
        another default topic is applied: a partly applied target (--status
        exit 1)."""
        return []

    def interrupted(self) -> Optional[str]:
        """What to say on Ctrl-C (exit 130); None lets it propagate."""
        return None

    def failed(self, command: str, topic: Optional[Topic]) -> Optional[str]:
        """Where the target stands after an OSError in `command`."""
        return None


def chosen_topics(command: str, names: Optional[List[str]]) -> List[Topic]:
    """--status without --topic shows every topic; the other commands act on
    the default topics unless told."""
    return select_topics(["all"] if command == "status" and not names else names)


def run(command: str, names: Optional[List[str]], check: bool,
        open_mode: Callable[[List[Topic]], Mode]) -> int:
    """Run `command` (apply, revert, status) on the topics `names` selects
    in the target `open_mode` opens; print refusals and return the exit code."""
    mode: Optional[Mode] = None
    current: Optional[Topic] = None
    try:
        chosen = chosen_topics(command, names)
        mode = open_mode(chosen)
        named = bool(names)
        if command == "status":
            results = []
            for number, topic in enumerate(chosen):
                if number:
                    print()
                results.append(mode.status(topic, named))
            code = max(results)
            missing = [] if code or named else mode.unapplied_defaults(chosen)
            if missing:
                print(f"\npartly applied: default topic {', '.join(missing)} is pristine while "
                      "another default topic is applied; apply without --topic applies "
                      "it (--topic default,NAME adds an opt-in topic)")
                return 1
            return code
        act = mode.apply if command == "apply" else mode.revert
        with mode.session():
            if len(chosen) > 1:
                refuse_shared_files([series for series in map(mode.series_for, chosen)
                                     if series is not None])
            if len(chosen) > 1 and not check:
                # Every topic is checked before any is written: a refusal for
                # the second leaves the first unapplied too. The refused
                # topic's lines are shown with its error.
                for topic in chosen:
                    captured = io.StringIO()
                    try:
                        with contextlib.redirect_stdout(captured):
                            act(topic, True, named)
                    except Refused:
                        sys.stdout.write(captured.getvalue())
                        raise
            result = 0
            applied_here: List[Topic] = []
            try:
                for topic in chosen:
                    current = topic
                    before = mode.is_applied(topic)
                    result = max(result, act(topic, check, named))
                    if (command == "apply" and not check and not before
                            and mode.is_applied(topic)):
                        applied_here.append(topic)
            except BaseException:
                # A failure the pre-check could not foresee (disk full, an
                # I/O error) in one topic: take back the topics this run
                # applied before it, so that the target is as it was.
                for topic in reversed(applied_here):
                    with contextlib.redirect_stdout(io.StringIO()):
                        mode.revert(topic, False, named)
                    print(f"took back topic {topic.name}, applied earlier in this run",
                          file=sys.stderr)
                raise
            if command == "revert":
                mode.after_revert(chosen, named)
            return result
    except Refused as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        message = mode.interrupted() if mode is not None else None
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 130
    except OSError as problem:
        # Disk full, a permission the pre-check could not foresee, an I/O
        # error: say what failed and where the target stands now.
        print(f"error: {os_error(problem)}", file=sys.stderr)
        hint = mode.failed(command, current) if mode is not None else None
        if hint is not None:
            print(hint, file=sys.stderr)
        return 1


def generate(names: Optional[List[str]], make: Callable[[List[Topic]], int],
             interrupted: str) -> int:
    """Run a command that writes something new from the chosen topics' series
    (an overlay, a patched wheel): refusals and failures are reported like
    `run`'s; `interrupted` is what a Ctrl-C leaves."""
    try:
        return make(chosen_topics("generate", names))
    except KeyboardInterrupt:
        print(f"interrupted: {interrupted}", file=sys.stderr)
        return 130
    except Refused as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    except OSError as problem:
        print(f"error: {os_error(problem)}", file=sys.stderr)
        return 1


def os_error(problem: OSError) -> str:
    """"PATH: reason", not Python's "[Errno N] reason: 'PATH'"."""
    if problem.filename is None or problem.strerror is None:
        return str(problem)
    return f"{problem.filename}: {problem.strerror}"
