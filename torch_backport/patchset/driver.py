"""The one driver for topics, used by every mode (an installed wheel, a
checkout): which topics a command acts on, --status over all of them, which
topics a run leaves alone, the plans made before anything is written, and
the exit code.

A mode says what one command does to one topic (a `Plan`); this module says
how topics combine. `--check` shows each plan; a run that writes makes every
topic's plan first (and tries it, where trying is a step of its own), so a
refusal of one topic leaves every topic as it was. Exit codes: 0 done or
nothing to do, 1 refused or failed (nothing changed), 130 interrupted (what
was written is restored).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from typing import Callable, cast, ContextManager, Dict, List, Mapping, Optional, Tuple

from torch_backport.infra.errors import BackportError, Failed, Refused, report
from torch_backport.infra.paths import shown
from torch_backport.patchset.identify import Match, series_by_content
from torch_backport.patchset.series import refuse_shared_files, select_topics, Series, Topic
from torch_backport.infra.exit_codes import Exit

Say = Callable[[str], None]


def quiet(line: str) -> None:
    """A `Say` that keeps nothing: for taking back what a failed run applied."""


@dataclasses.dataclass
class Plan:
    """What one command does to one topic, decided before anything is
    written: what the run says whether it writes or not (`said`), what
    --check says instead of writing (`would`), the writes, and, where the
    writes can be tried without changing anything (a throw-away git index),
    that trial."""
    said: List[str] = dataclasses.field(default_factory=list)
    would: List[str] = dataclasses.field(default_factory=list)
    writes: Optional[Callable[[Say], None]] = None
    trial: Optional[Callable[[Say], None]] = None

    def say(self, line: str) -> None:
        self.said.append(line)

    def check(self, say: Say) -> None:
        """What --check prints after `said`: the trial's lines, then `would`."""
        if self.trial is not None:
            self.trial(say)
        for line in self.would:
            say(line)

    def execute(self, say: Say) -> None:
        if self.writes is not None:
            self.writes(say)


class Mode:
    """One target (an install, a checkout) and what each command does to one
    topic there. Every mode must override status, plan, series_for and
    unexpected: here they raise NotImplementedError. The other hooks have
    defaults a mode overrides where it needs to: no lock, nothing to say,
    nothing applied, nothing to add."""

    def status(self, topic: Topic) -> int:
        """Print where the target stands for `topic`; the exit code."""
        raise NotImplementedError

    def status_record(self, topic: Topic) -> Dict[str, object]:
        """Where the target stands for `topic`, as data with its "exit_code"
        (--status --json; an install only)."""
        raise NotImplementedError

    def plan(self, command: str, topic: Topic, plan: Plan) -> None:
        """Fill in `plan` for `command` (apply or revert) on `topic`, or raise
        Refused; what `plan` says before the refusal is shown with it."""
        raise NotImplementedError

    def series_for(self, topic: Topic) -> Optional[Series]:
        """The series this target gets for `topic`, None if there is none."""
        raise NotImplementedError

    def not_available(self, command: str, topic: Topic) -> Optional[List[str]]:
        """What `command` (status or apply) says of a topic for which this
        target has no series, and which the run leaves alone
        (`Topic.left_alone_unless`); None if it has one."""
        return None

    def session(self) -> ContextManager[None]:
        """Held around apply and revert (a lock, say)."""
        return contextlib.nullcontext()

    def reading(self) -> ContextManager[None]:
        """Held around --status: waits for a run that writes (a shared lock)."""
        return contextlib.nullcontext()

    def is_applied(self, topic: Topic) -> bool:
        """Whether `topic` is applied, for taking back what a failed run
        applied; a mode that cannot take back answers False."""
        return False

    def after_plain_revert(self, chosen: List[Topic]) -> None:
        """Called after a revert without --topic of the topics `chosen`."""

    def unexpected(self, topic: Topic) -> Optional[str]:
        """Why `topic` is neither applied nor upstream's here (what --status
        --expect patched refuses); None if it is."""
        raise NotImplementedError

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


def left_alone(mode: Mode, command: str, topic: Topic, named: bool) -> Optional[List[str]]:
    """The lines a run says instead of acting on `topic`, if it leaves it
    alone: the one place the optional-topic rule is applied to a target."""
    if command == "revert" or not topic.left_alone_unless(named):
        return None
    return mode.not_available(command, topic)


def make_plan(mode: Mode, command: str, topic: Topic, named: bool, tried: bool) -> Plan:
    """The topic's plan (with `tried`, its trial run too, saying nothing).
    On a refusal, what the plan said so far is printed before it propagates."""
    plan = Plan()
    unavailable = left_alone(mode, command, topic, named)
    if unavailable is not None:
        plan.said = unavailable
        return plan
    heard: List[str] = []
    try:
        mode.plan(command, topic, plan)
        if tried and plan.trial is not None:
            plan.trial(heard.append)
    except Refused:
        for line in plan.said + heard:
            print(line)
        raise
    return plan


def show_status(mode: Mode, chosen: List[Topic], named: bool) -> int:
    results = []
    for number, topic in enumerate(chosen):
        if number:
            print()
        unavailable = left_alone(mode, "status", topic, named)
        if unavailable is not None:
            print("\n".join(unavailable))
            results.append(0)
        else:
            results.append(mode.status(topic))
    code = max(results)
    missing = [] if code or named else mode.unapplied_defaults(chosen)
    if missing:
        print(f"\npartly applied: default topic {', '.join(missing)} is pristine while "
              "another default topic is applied; apply without --topic applies "
              "it (--topic default,NAME adds an opt-in topic)")
        return Exit.FAILED
    return code


def show_status_json(mode: Mode, chosen: List[Topic], named: bool,
                     expect: Optional[str]) -> int:
    """--status --json: one object on stdout, the exit code show_status and
    guard would give."""
    records: List[Dict[str, object]] = []
    for topic in chosen:
        unavailable = left_alone(mode, "status", topic, named)
        records.append({"topic": topic.name, "state": "not available",
                        "exit_code": int(Exit.OK),
                        "says": "\n".join(unavailable)} if unavailable is not None
                       else mode.status_record(topic))
    # int(), never str(): an Exit prints as "Exit.FAILED" on Python 3.9 and 3.10.
    code = max(int(cast(int, record["exit_code"])) for record in records)
    missing = [] if code or named else mode.unapplied_defaults(chosen)
    found: Dict[str, object] = {"python": sys.executable, "topics": records,
                                "partly_applied": missing}
    if missing:
        code = Exit.FAILED
    if expect == "patched":
        wrong = [reason for reason in map(mode.unexpected, select_topics(None)) if reason]
        found["expect_patched"] = {"met": not wrong, "why": wrong}
        code = max(code, Exit.FAILED) if wrong else code
    found["exit_code"] = int(code)
    print(json.dumps(found, indent=2))
    return code


def execute_plans(mode: Mode, command: str, chosen: List[Topic], named: bool,
                  reached: List[Topic]) -> None:
    """Make every topic's plan, then carry them out in order. Every topic is
    planned (and tried) before any is written: a refusal for the second
    leaves the first unapplied too. `reached` gets each topic as its writes
    start."""
    plans = [make_plan(mode, command, topic, named, tried=len(chosen) > 1)
             for topic in chosen]
    applied_here: List[Topic] = []
    try:
        for topic, plan in zip(chosen, plans):
            reached.append(topic)
            before = mode.is_applied(topic)
            for line in plan.said:
                print(line)
            plan.execute(print)
            if command == "apply" and not before and mode.is_applied(topic):
                applied_here.append(topic)
    except BaseException:
        # A failure no plan could foresee (disk full, an I/O error) in one
        # topic: take back the topics this run applied before it, so that
        # the target is as it was.
        for topic in reversed(applied_here):
            undo = Plan()
            mode.plan("revert", topic, undo)
            undo.execute(quiet)
            print(f"took back topic {topic.name}, applied earlier in this run",
                  file=sys.stderr)
        raise


def guard(mode: Mode, code: int) -> int:
    """--status --expect patched: every default topic applied or upstream's."""
    wrong = [reason for reason in map(mode.unexpected, select_topics(None)) if reason]
    if wrong:
        print(f"\nexpected patched: {'; '.join(wrong)}")
        return max(code, Exit.FAILED)
    print("\nexpected patched: every default topic is applied or upstream's")
    return code


def run(command: str, names: Optional[List[str]], check: bool,
        open_mode: Callable[[List[Topic]], Mode], invoked_as: str,
        expect: Optional[str] = None, as_json: bool = False) -> int:
    """Run `command` (apply, revert, status) on the topics `names` selects
    in the target `open_mode` opens; print refusals, prefixed `invoked_as`,
    and return the exit code."""
    opened: List[Mode] = []
    reached: List[Topic] = []

    def work() -> int:
        chosen = chosen_topics(command, names)
        mode = open_mode(chosen)
        opened.append(mode)
        named = bool(names)
        if command == "status":
            with mode.reading():
                if as_json:
                    return show_status_json(mode, chosen, named, expect)
                code = show_status(mode, chosen, named)
                return guard(mode, code) if expect == "patched" else code
        with mode.session():
            if len(chosen) > 1:
                refuse_shared_files([series for series in map(mode.series_for, chosen)
                                     if series is not None])
            if check:
                for topic in chosen:
                    reached.append(topic)
                    plan = make_plan(mode, command, topic, named, tried=False)
                    for line in plan.said:
                        print(line)
                    plan.check(print)
            else:
                execute_plans(mode, command, chosen, named, reached)
            if command == "revert" and not named:
                mode.after_plain_revert(chosen)
            return Exit.OK

    return run_reporting(
        work, invoked_as, lambda: opened[0].interrupted() if opened else None,
        lambda: opened[0].failed(command, reached[-1] if reached else None) if opened else None)


def generate(names: Optional[List[str]],
             make: Callable[[List[Topic], Tuple[Topic, ...]], int], interrupted: str,
             invoked_as: str) -> int:
    """Run a command that writes something new from the chosen topics' series
    (an overlay, a patched wheel). `make` gets the chosen topics and those of
    them that it may leave out where no series fits (`Topic.left_alone_unless`).
    Refusals and failures are reported like `run`'s; `interrupted` is what a
    Ctrl-C leaves."""
    def work() -> int:
        chosen = chosen_topics("generate", names)
        return make(chosen, tuple(topic for topic in chosen
                                  if topic.left_alone_unless(bool(names))))

    return run_reporting(work, invoked_as, lambda: f"interrupted: {interrupted}", lambda: None)


def run_reporting(work: Callable[[], int], invoked_as: str,
                  interrupted: Callable[[], Optional[str]],
                  failed: Callable[[], Optional[str]]) -> int:
    """`work()`'s exit code; an error (errors.report, prefixed `invoked_as`),
    an OSError (disk full, a permission no plan could foresee, an I/O error)
    and a Ctrl-C are said, with what
    `interrupted` or `failed` says of where the target stands (a Ctrl-C
    propagates if it says nothing)."""
    try:
        return work()
    except BackportError as problem:
        return report(problem, invoked_as)
    except KeyboardInterrupt:
        message = interrupted()
        if message is None:
            raise
        print(message, file=sys.stderr)
        return Exit.INTERRUPTED
    except OSError as problem:
        report(Failed(os_error(problem)), invoked_as)
        hint = failed()
        if hint is not None:
            print(hint, file=sys.stderr)
        return Exit.FAILED


def release_series(version: str, blobs: Mapping[str, Optional[str]], chosen: List[Topic],
                   optional: Tuple[Topic, ...], verb: str) -> List[Series]:
    """The series of a release's own files (`series_by_content`), each said
    with `verb` ("using", "applying"), and the optional topics left out."""
    every: List[Series] = []
    for found in series_by_content(version, blobs, chosen, optional):
        if found.series is not None and found.how is Match.PRISTINE:
            print(f"torch {version}: {found.reason()}: {verb} {shown(found.series.directory)}")
            every.append(found.series)
        else:
            detail = f" ({found.reason()})" if found.series is not None else ""
            print(f"topic {found.topic.name}: not available for this release{detail}; left out")
    refuse_shared_files(every)
    return every


def os_error(problem: OSError) -> str:
    """"PATH: reason", not Python's "[Errno N] reason: 'PATH'"."""
    if problem.filename is None or problem.strerror is None:
        return str(problem)
    return f"{problem.filename}: {problem.strerror}"
