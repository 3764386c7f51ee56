"""The matrix's closing table, read back from what each job left: pytest's
exit status is the verdict (0 and nothing else passes: 5, no test
collected, fails too), and the JUnit report gives the counts per suite
(passed, failed, expected failures, skipped). An expected failure is a
strict xfail that test/dynamo/conftest.py set; one that passes is an
XPASS(strict), a failure."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from matrix_jobs import Job, Tier
from matrix_scheduler import Outcome

# What pytest's exit statuses mean (pytest.ExitCode), for a row that has
# no failing test to name.
EXIT_MEANING = {1: "tests failed", 2: "interrupted", 3: "internal error",
                4: "usage error", 5: "no test collected (all deselected?)"}


@dataclasses.dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    expected_failures: int = 0
    skipped: int = 0

    def __str__(self) -> str:
        return (f"{self.passed} passed, {self.failed} failed, "
                f"{self.expected_failures} expected-fail"
                + (f", {self.skipped} skipped" if self.skipped else ""))


@dataclasses.dataclass(frozen=True)
class Row:
    build: str
    suite: str
    counts: str
    verdict: str


def clipped(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[:width - 1] + "…"


def gist(text: str, last: int = 6) -> List[str]:
    """A failure's message in a few lines: its first line (the assertion)
    and its last ones, where a failed command's error is; a message cut
    from the end of a long output starts in the middle of a line."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return [""]
    head, tail = lines[0].strip(), lines[1:][-last:]
    return [clipped(head)] + [clipped(f"  | {line}") for line in tail]


def cases(report: Path) -> Iterator[Tuple[str, ElementTree.Element]]:
    """Each test case of a JUnit report, with the test file it is in: the
    classname is the dotted path of its class (test.dynamo.test_x.SomeTests)
    or module; a file that failed to collect is a case without a class,
    named by its dotted path."""
    for case in ElementTree.parse(report).iter("testcase"):
        dotted = (case.get("classname") or case.get("name") or "").split(".")
        module = next((part for part in reversed(dotted) if part.startswith("test_")),
                      dotted[-1])
        yield module + ".py", case


def failure_of(case: ElementTree.Element) -> Optional[ElementTree.Element]:
    """Errors (a collection error too) are failures."""
    children = {child.tag: child for child in case}
    return children.get("failure", children.get("error"))


def counts_by_suite(report: Path) -> Dict[str, Counts]:
    """Counts per test file."""
    suites: Dict[str, Counts] = {}
    for suite, case in cases(report):
        counts = suites.setdefault(suite, Counts())
        skipped = case.find("skipped")
        if failure_of(case) is not None:
            counts.failed += 1
        elif skipped is not None and skipped.get("type") == "pytest.xfail":
            counts.expected_failures += 1
        elif skipped is not None:
            counts.skipped += 1
        else:
            counts.passed += 1  # a non-strict xpass too ("any" on stock)
    return suites


def failing_tests(report: Path) -> List[List[str]]:
    """Each failing test case: "<test id>: <first line of its message>",
    then the message's last lines."""
    named = []
    for _, case in cases(report):
        failure = failure_of(case)
        if failure is not None:
            head, *tail = gist(failure.get("message") or failure.text or "")
            named.append([f"{case.get('classname', '')}::{case.get('name', '')}: {head}", *tail])
    return named


@dataclasses.dataclass
class Verdicts:
    """The table's rows and the run's totals."""
    rows: List[Row] = dataclasses.field(default_factory=list)
    total: Counts = dataclasses.field(default_factory=Counts)
    failed_jobs: List[str] = dataclasses.field(default_factory=list)
    # "<job> <test id>: <first line of its message>" and the message's last
    # lines, for the run's last lines.
    failed_tests: List[List[str]] = dataclasses.field(default_factory=list)
    # The closing line counts the defects and missing features the stock
    # builds show; patched 2.15.0's one needless miss is not one.
    stock_expected_failures: int = 0

    def add(self, outcome: Optional[Outcome], job: Job, logs: Path) -> None:
        log, report = logs / f"{job.name}.log", logs / f"{job.name}.xml"
        exit_code = outcome.exit_code if outcome else None
        if exit_code != 0:
            self.failed_jobs.append(job.name)
        read = report.is_file() and exit_code is not None
        suites = counts_by_suite(report) if read else {}
        self.failed_tests += [[f"{job.name} {head}", *tail]
                              for head, *tail in (failing_tests(report) if read else [])]
        for suite, counts in sorted(suites.items()):
            verdict = "ok" if not counts.failed else f"FAILED, see the end of {log}"
            if "PREGRAD_EXPECT_STOCK" in job.env:
                self.stock_expected_failures += counts.expected_failures
                if not counts.failed:
                    verdict += " (fails exactly where expected)"
            self.rows.append(Row(job.build, suite, str(counts), verdict))
            for field in dataclasses.fields(Counts):
                setattr(self.total, field.name,
                        getattr(self.total, field.name) + getattr(counts, field.name))
        if exit_code != 0 and not any(counts.failed for counts in suites.values()):
            # The job failed with no failing test to show for it: one row.
            why = ("pytest did not run" if exit_code is None
                   else f"pytest exit {exit_code}: {EXIT_MEANING.get(exit_code, 'failed')}")
            self.rows.append(Row(job.build, "-", why, f"FAILED, see {log}"))
            self.total.failed += 1
            self.failed_tests.append([f"{job.name}: {why}"])


def verdicts(queued: Iterable[Job], outcomes: Mapping[str, Outcome], logs: Path) -> Verdicts:
    found = Verdicts()
    for job in queued:
        found.add(outcomes.get(job.name), job, logs)
    return found


def table(rows: Iterable[Row]) -> str:
    lines = [f"\n{'build':<16} {'suite':<32} {'outcome':<44} verdict"]
    lines += [f"{row.build:<16} {row.suite:<32} {row.counts:<44} {row.verdict}" for row in rows]
    return "\n".join(lines)


def clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes:2d}:{rest:02d}"


def wall_times(queued: Iterable[Job], outcomes: Mapping[str, Outcome],
               tiers: Mapping[str, Tier]) -> str:
    """Each job's wall time and the CPU time of its processes (user and
    system), and its tier."""
    lines = [f"\n{'job':<30} {'wall':>5} {'cpu':>6}  tier"]
    for job in queued:
        outcome = outcomes.get(job.name)
        wall, cpu = (outcome.seconds, outcome.cpu_seconds) if outcome else (0.0, 0.0)
        # A build on another Python (stock-2.9.0-py3.10) has a tier of its own.
        tier = tiers.get(job.build.partition("-")[2] if "-py" in job.build else job.release or "")
        level = f"{tier.level}: {tier.why}" if tier else "-"
        lines.append(f"{job.name:<30} {clock(wall)} {clock(cpu):>6}  {level}")
    return "\n".join(lines)


def bounds(outcomes: Mapping[str, Outcome], started: float, setup_seconds: float,
           total_seconds: float, cores: int = 2) -> str:
    """Where the run's time went: the setup (venvs, patched copies, the
    patched wheel, the tiers), the jobs' wall and CPU time added up, the
    critical path (the job that would end last with a core for every job:
    when its venvs were ready, plus its wall time) and the run's total."""
    ran = [outcome for outcome in outcomes.values() if outcome.exit_code is not None]
    wall = sum(outcome.seconds for outcome in ran)
    cpu = sum(outcome.cpu_seconds for outcome in ran)
    lines = [f"\nsetup: {clock(setup_seconds).strip()} (venvs, patched copies, the patched "
             "wheel, tiers; jobs ran beside it)",
             f"jobs: {len(ran)}, wall {clock(wall).strip()} and CPU {clock(cpu).strip()} in all "
             f"({clock(cpu / cores).strip()} on {cores} cores)"]
    if ran:
        last = max(ran, key=lambda outcome: outcome.queued_at + outcome.seconds)
        ready = last.queued_at - started
        lines.append(f"critical path: {clock(ready + last.seconds).strip()} ({last.job.name}: "
                     f"ready at {clock(ready).strip()}, ran {clock(last.seconds).strip()})")
    lines.append(f"total: {clock(total_seconds).strip()}")
    return "\n".join(lines)
