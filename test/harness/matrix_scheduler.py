"""Running the matrix's jobs (matrix_jobs.Job): a scheduler that keeps at
most `limit` of them running, the longest expected first, and the runner
that makes one job a pytest process with its output in files.

A job starts as soon as it is queued (its venvs are ready) and a slot is
free, also while the main thread is setting up the next venv. Among the
queued jobs the one the last run took longest over starts first
(durations.py keeps each job's wall time in the cache); one never timed
counts as the longest.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from matrix_jobs import Job

# -rs: the log says why a test skipped (test/torchao.tsv's reason, say).
# --durations: the log says where a job's time goes.
PYTEST_FLAGS = ("-q", "-rs", "-p", "no:randomly", "--tb=short", "--durations=15")
# Every job has what its tests need (a torch venv, the servers, uv): a missing
# one is an error here, where elsewhere the test skips (test/tools/prerequisites.py,
# test/dynamo/conftest.py).
REQUIRE_ALL = {"PREGRAD_REQUIRE_ALL": "1"}
SETUP_FIRST_NICENESS = 10


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a job ended: pytest's exit status (None: it could not start), its
    wall time, the CPU time of its process tree (user and system, of every
    process it waited for) and when it was queued (monotonic)."""
    job: Job
    exit_code: Optional[int]
    seconds: float
    cpu_seconds: float = 0.0
    queued_at: float = 0.0


NEVER_TIMED = float("inf")


class Scheduler:
    """At most `limit` jobs at once, each in a thread of its own that calls
    `run(job)`; of the jobs waiting, the one `expected` says is longest
    first (ties in the order queued)."""

    def __init__(self, run: Callable[[Job], Outcome], limit: int = 1,
                 expected: Callable[[Job], Optional[float]] = lambda job: None) -> None:
        self._run = run
        self._limit = limit
        self._expected = expected
        self._pending: List[Job] = []
        self._running = 0
        self._changed = threading.Condition()
        self.queued: List[Job] = []  # every job, in the order queued (the table's order)
        self.queued_at: Dict[str, float] = {}
        self.outcomes: Dict[str, Outcome] = {}

    def queue(self, job: Job) -> None:
        self.queue_all([job])

    def queue_all(self, jobs: Sequence[Job]) -> None:
        """Jobs that became ready together: the longest of them starts first."""
        with self._changed:
            for job in jobs:
                if any(earlier.name == job.name for earlier in self.queued):
                    raise ValueError(f"two jobs named {job.name}: their logs would collide")
                self.queued.append(job)
                self.queued_at[job.name] = time.monotonic()
                self._pending.append(job)
            self._start_what_fits()

    def set_limit(self, limit: int) -> None:
        with self._changed:
            self._limit = limit
            self._start_what_fits()

    def cancel_pending(self) -> None:
        with self._changed:
            self._pending.clear()
            self._changed.notify_all()

    def wait(self) -> None:
        """Until every queued job has ended."""
        with self._changed:
            while self._pending or self._running:
                self._changed.wait()

    def _longest_pending(self) -> Job:
        def expected(job: Job) -> float:
            seconds = self._expected(job)
            return NEVER_TIMED if seconds is None else seconds
        job = max(self._pending, key=expected)  # max keeps the first of equals
        self._pending.remove(job)
        return job

    def _start_what_fits(self) -> None:  # the caller holds self._changed
        while self._pending and self._running < self._limit:
            job = self._longest_pending()
            self._running += 1
            threading.Thread(target=self._work, args=(job,), name=job.name, daemon=True).start()

    def _work(self, job: Job) -> None:
        begun = time.monotonic()
        try:
            outcome = self._run(job)
        except Exception as problem:  # a runner bug must not hang wait(): the job failed
            print(f"   {job.name}: could not run ({type(problem).__name__}: {problem})",
                  file=sys.stderr)
            outcome = Outcome(job, None, time.monotonic() - begun)
        outcome = dataclasses.replace(outcome, queued_at=self.queued_at[job.name])
        with self._changed:
            self.outcomes[job.name] = outcome
            self._running -= 1
            self._start_what_fits()
            self._changed.notify_all()


class PytestRunner:
    """Runs a job as `PYTHON -m pytest PYTEST_FLAGS --junitxml=... ARGV` in
    the repository, output to <logs>/<name>.log, in a session of its own so
    that it and its children can be stopped together."""

    def __init__(self, logs: Path, base_env: Mapping[str, str], repo: Path,
                 say: TextIO = sys.stderr) -> None:
        self.logs = logs
        # What decides a job's verdict comes from the job alone, never from
        # the caller's environment.
        self.base_env = {name: value for name, value in base_env.items()
                         if not name.startswith(("PREGRAD_EXPECT_",
                                                 "PREGRAD_STOCK_DISCRIMINATING"))}
        self.repo = repo
        self.say = say
        self._processes: Dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._setting_up = True

    def setup_done(self) -> None:
        """The setup ended: the running jobs back to the ordinary priority
        (where this user may raise it again), and later ones start there."""
        with self._lock:
            self._setting_up = False
            for process in self._processes.values():
                prioritize(process.pid, 0)

    def command(self, job: Job) -> List[str]:
        return [job.python, "-m", "pytest", *PYTEST_FLAGS,
                f"--junitxml={self.logs / (job.name + '.xml')}", *job.argv]

    def __call__(self, job: Job) -> Outcome:
        begun = time.monotonic()
        with open(self.logs / f"{job.name}.log", "wb") as log:
            try:
                with self._lock:
                    if self._stopping:
                        return Outcome(job, None, 0.0)
                    process = subprocess.Popen(self.command(job), stdout=log,
                                               stderr=subprocess.STDOUT, cwd=self.repo,
                                               env={**self.base_env, **REQUIRE_ALL,
                                                    **job.env},
                                               start_new_session=True)
                    self._processes[job.name] = process
                    if self._setting_up:
                        # While venvs still install, a job yields the CPU to
                        # the setup, which every later job waits for.
                        prioritize(process.pid, SETUP_FIRST_NICENESS)
            except OSError as problem:  # no such interpreter: the log says so
                log.write(f"could not start {job.python}: {problem}\n".encode())
                return Outcome(job, None, time.monotonic() - begun)
            exit_code, cpu_seconds = waited(process)
        with self._lock:
            del self._processes[job.name]
        seconds = time.monotonic() - begun
        minutes, rest = divmod(round(seconds), 60)
        print(f"   done {job.name:<28} {minutes} min {rest:02d} s", file=self.say, flush=True)
        return Outcome(job, exit_code, seconds, cpu_seconds)

    def stop(self) -> None:
        """End every job this runner started (its process group), and start
        no other: the run is being abandoned."""
        with self._lock:
            self._stopping = True
            for process in self._processes.values():
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def waited(process: "subprocess.Popen[bytes]") -> Tuple[int, float]:
    """Wait for `process`: its exit status as Popen gives it, and the CPU
    seconds (user and system) of it and every descendant it waited for."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_utime + usage.ru_stime


def prioritize(group: int, niceness: int) -> None:
    """The niceness of a job's process group (its session: the job and what
    it started); as much as this user may set."""
    try:
        os.setpriority(os.PRIO_PGRP, group, niceness)
    except OSError:  # gone already, or a lower niceness this user may not set
        pass
