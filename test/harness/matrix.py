"""Usage: scripts/test.sh [--releases 2.11.0,2.14.1] [--list] [-- PYTEST_ARGS ...]
       scripts/test.sh --releases LIST --short [--list]
       scripts/test.sh --quick
       scripts/test.sh --help
(scripts/test.sh runs `python3 test/harness/matrix.py`.)

Runs every test, on a fresh machine too. For each torch release in
patches/releases.tsv (or those named with --releases) it makes sure a venv
with that stock torch exists under $PREGRAD_CACHE/venvs (test/harness/venvs.py;
the first run downloads about 4.6 GB per release, and lifts a pip-configured
cap on torch for those installs, saying so; files that two venvs share byte
for byte are then hard-linked, with util-linux's hardlink), makes a
hard-linked copy of it and applies every topic there (apply.sh --topic all
picks each topic's series by the files' content; it writes each file by
atomic rename, so the stock venv keeps its bytes), installs redis-server and
nginx where missing (as root, with apt-get), then runs test/dynamo on the stock
and the patched build. Each run is a pytest job whose exit status is its
verdict; test/dynamo/conftest.py makes what a build is expected to fail a
strict xfail:
  - stock: each test must pass or fail exactly as
    test/dynamo/stock_expectations.py says (the behaviour, stale-hit and
    remote-cache tests fail on every base without the feature; the result
    tests, real torchvision networks among them (test/torchvision.tsv pins
    each release's torchvision), fail where upstream returns wrong
    numbers), so a test that cannot fail is caught (XPASS(strict)); a
    full-tier stock run keeps the tests whose stock outcome differs from
    patched, all of 2.12.0 and the tool suites
    (stock_expectations.checks_something_on_stock);
  - patched: every test must pass (stock_expectations.py names the one
    needless miss 2.15.0 keeps, upstream's autocast keying).
Tiers by content: a release whose installed files equal another tested
release's (test/harness/content_identity.py computes it each run, and lists
what it ignores: version stamps, CUDA-only files) runs the short tier:
identification, apply/--status/--revert on its real install, --wheel's
rules and three compile cells that tell stock from patched; the series
base of each content (else the newest) runs everything.
The Pythons users run besides 3.11: 2.9.0 also runs on Python 3.10 and
2.15.0 on 3.13 (matrix_jobs.OTHER_PYTHONS), the short tier with --verify's
suite, stock (with the round trip) and patched, in venvs of their own
(torch-X-pyM.N, made by pyenv's interpreter, else pythonM.N on PATH).
The tool suite (test/tools) runs once, in two jobs (`tools-faults`: the
fault walks and the concurrency suite; `tools`: the rest), against small
installs built from the stock 2.11.0 and 2.12.0 venvs, and starts as soon as
those two are set up, while the other venvs install. When 2.11.0 is tested,
the patched wheel: `apply.sh --wheel torch==2.11.0` builds it from the
cached release wheel (about a minute, in a thread of its own beside the
venvs), pip installs it into another hard-linked copy of the stock venv, and
that venv runs test/dynamo/test_installed_patched_wheel.py (pip check,
--status, every installed file's sha256 against the patched 2.11.0 copy, the
README's hash-pin recipe in a fresh venv); the uv-fleet job follows.
Jobs run two at a time from the start, also while venvs install; a job
starts as soon as its venvs are ready, and of those waiting the one the last
run took longest over starts first (each job's wall time is kept in
$PREGRAD_CACHE/matrix-durations.json; a job never timed starts first).
Each job runs with one OpenMP thread and one Inductor compile thread
(OMP_NUM_THREADS, TORCHINDUCTOR_COMPILE_THREADS), so that two jobs use two
cores; patched-2.14.0-short keeps torch's defaults. Inductor's compiled
kernels and precompiled headers are kept between runs in
$PREGRAD_CACHE/kernels/<venv>/<key> (test/dynamo/kept_kernels.py: the key
is the interpreter, the compiler and its version, the CPU's flags and the
torch files); every test still starts with empty FX graph and AOTAutograd
caches, and each pytest process has a live directory of its own.
Before the matrix it runs the configured linters (test/harness/lint.py:
flake8 and mypy --strict, 10 to 30 s; for every release or --quick, not for
a selection): a finding stops the run there, before any venv is made.
At the end it prints a table build x suite -> passed / failed /
expected-fail with a verdict, each job's wall and CPU time and tier, the
setup time, the critical path and the total, and a summary line. Full
pytest output, expected failures included, goes to log files under
$PREGRAD_LOGS (default: test-logs/ in the repository), not to the terminal.

--releases LIST  comma-separated torch releases to test (default: every
                 release in patches/releases.tsv); the tool suite runs whenever
                 2.11.0 and 2.12.0 are part of the run. --bases v2.11.0 is
                 the old spelling and still works.
--quick          the inner loop for a change to the tool, not the gate (a few
                 minutes with the venvs in place): the tool suite without its
                 slow tests, and the short tier of 2.11.0 and 2.15.0, stock
                 and patched (stock 2.12.0's venv too, for the tool suite).
--short          only the short tier of each release --releases names
                 (--verify's suite on the newest): no tool suite, wheel or
                 rehearsal. For new-base's day-one rehearsal, whose files
                 the gate's own matrix gives the full tier; not the gate.
--list           print the planned jobs, one JSON object a line (name, build,
                 python, argv, env, release, expected_s: the wall time of the
                 job's last run, null if never timed), and run nothing: no venv is made,
                 no log written; the tiers by content are computed when every
                 stock venv is ready, else the releases are planned full.
PYTEST_ARGS      (after --) go to every pytest run; the stock jobs are
                 left out then, since a selection says nothing about "fails
                 exactly where expected".
Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport),
PREGRAD_LOGS (default <repo>/test-logs).
Exit codes: 0 every job's pytest exited 0; 1 anything else; 2 usage error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, TextIO, Tuple

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from torch_backport.infra import tables  # noqa: E402
from torch_backport.infra.errors import Refused  # noqa: E402
from torch_backport.infra.fsio import cache_dir  # noqa: E402

import durations  # noqa: E402
import lint  # noqa: E402
import venvs  # noqa: E402
from disk_watch import DiskWatch  # noqa: E402
from matrix_jobs import (QUICK_RELEASES, WHEEL_RELEASE, Build, Job, SetupFailed,  # noqa: E402
                         Tier, plan, quick_plan, short_plan)
from matrix_report import bounds, table, verdicts, wall_times  # noqa: E402
from matrix_scheduler import PytestRunner, Scheduler  # noqa: E402

PATCHES = REPO / "patches"
APPLY = REPO / "scripts" / "apply.sh"
HARNESS = REPO / "test" / "harness"


class UsageError(Exception):
    """Arguments this command does not take: exit 2."""


class HelpWanted(Exception):
    """-h or --help among the arguments: the usage text, exit 0."""


@dataclasses.dataclass(frozen=True)
class Options:
    releases: List[str]
    pytest_args: List[str]
    list_only: bool = False
    quick: bool = False
    short: bool = False


def parse(argv: Sequence[str], served: Sequence[str]) -> Options:
    releases, list_only, short = list(served), False, False
    rest = list(argv)
    while rest:
        argument = rest.pop(0)
        if argument in ("--releases", "--bases"):
            if not rest:
                raise UsageError(f"test.sh: {argument} needs a list, e.g. 2.11.0")
            listed = rest.pop(0)
            # --bases v2.11.0,v2.12.0: the old spelling names the series.
            releases = [item[1:] if item.startswith("v") else item
                        for item in listed.split(",")] if listed else []
        elif argument in ("-h", "--help"):
            raise HelpWanted()
        elif argument == "--list":
            list_only = True
        elif argument == "--short":
            short = True
        elif argument == "--quick":
            if len(argv) != 1:
                raise UsageError("test.sh: --quick takes no other argument")
            return Options(list(QUICK_RELEASES), [], quick=True)
        elif argument == "--":
            if short:
                raise UsageError("test.sh: --short takes no PYTEST_ARGS")
            return Options(checked(releases, served), rest, list_only)
        else:
            raise UsageError(f"test.sh: unknown argument: {argument} (see --help)")
    return Options(checked(releases, served), [], list_only, short=short)


def checked(releases: List[str], served: Sequence[str]) -> List[str]:
    have = ",".join(served)
    if not releases:
        raise UsageError(f"test.sh: --releases names no release (have: {have})")
    for release in releases:
        if release not in served:
            raise UsageError(f"test.sh: {release} is not in patches/releases.tsv (have: {have})")
    return list(dict.fromkeys(releases))  # a release named twice is tested once


def step(line: str) -> None:
    print(f"== {line}", file=sys.stderr, flush=True)


def minutes(seconds: float) -> str:
    whole, rest = divmod(round(seconds), 60)
    return f"{whole} min {rest:02d} s"


def tiers_by_content(builds: Sequence[Build], log: TextIO) -> List[Tuple[str, Tier]]:
    """content_identity.py, run by a test venv's python (it has pyelftools,
    requirements/test.txt), over every stock venv's site-packages."""
    sites = []
    for build in builds:
        site = subprocess.run([build.stock, "-c", "import sysconfig; "
                               "print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True)
        if site.returncode != 0:
            raise SetupFailed(f"could not ask {build.stock} for its site-packages")
        sites.append(f"{build.release}={site.stdout.strip()}")
    log.flush()
    found = subprocess.run([builds[0].stock, str(HARNESS / "content_identity.py"), *sites],
                           stdout=subprocess.PIPE, stderr=log, text=True)
    if found.returncode != 0:
        raise SetupFailed(f"could not compare the releases' files; see {log.name}")
    tiers = []
    for line in found.stdout.splitlines():
        release, level, why = line.split("|", 2)
        tiers.append((release, Tier(level, why)))
    return tiers


class RealSetup:
    """The venvs, the patched wheel and the tiers by content, made now; the
    setup's own output goes to <logs>/venvs.log and wheel.log."""
    background = True

    def __init__(self, logs: Path, venvs_log: TextIO, started: float) -> None:
        self.logs = logs
        self.venvs_log = venvs_log
        self.started = started

    def note(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def release(self, release: str) -> Build:
        try:
            stock = venvs.ensure_venv(release, log=self.venvs_log,
                                      keep_release_wheel=release == WHEEL_RELEASE)
        except venvs.InstallFailed as failure:
            raise SetupFailed(f"could not set up torch {release} ({failure}); see "
                              f"{self.logs}/venvs.log") from failure
        try:
            patched = venvs.patched_copy(release, f"torch-{release}-patched",
                                         ["--topic", "all"], log=self.venvs_log)
        except venvs.InstallFailed as failure:
            raise SetupFailed(f"applying the series to a copy of the torch {release} venv "
                              f"failed; see {self.logs}/venvs.log") from failure
        self.note(f"   {release}: stock {stock}, patched {patched} "
                  f"({minutes(time.monotonic() - self.started)} in)")
        torchvision = venvs.pinned(venvs.TORCHVISION_PINS, release)
        if not torchvision.reason.startswith("built for torch "):
            # A release the index has no torchvision built for: say what it got.
            self.note(f"   {release}: torchvision {torchvision.version} ({torchvision.reason})")
        return Build(release, str(stock), str(patched))

    def release_on(self, release: str, python: str) -> Build:
        label = f"-py{python}"
        try:
            interpreter = venvs.interpreter_of(python)
            stock = venvs.ensure_venv(release, f"torch-{release}{label}", log=self.venvs_log,
                                      interpreter=interpreter)
            patched = venvs.patched_copy(release, f"torch-{release}{label}-patched",
                                         ["--topic", "all"], log=self.venvs_log,
                                         stock_name=f"torch-{release}{label}",
                                         interpreter=interpreter)
        except venvs.InstallFailed as failure:
            raise SetupFailed(f"could not set up torch {release} on Python {python} "
                              f"({failure}); see {self.logs}/venvs.log") from failure
        self.note(f"   {release} on Python {python}: stock {stock}, patched {patched} "
                  f"({minutes(time.monotonic() - self.started)} in)")
        return Build(release, str(stock), str(patched), label)

    def patched_wheel(self, builds: Dict[str, Build]) -> Tuple[str, str]:
        """The patched 2.11.0 wheel, pip-installed into a copy of the stock venv."""
        step(f"patched wheel of torch {WHEEL_RELEASE}, installed into a copy of its venv "
             f"(logs: {self.logs / 'wheel.log'})")
        return self.installed_wheel(builds[WHEEL_RELEASE])

    def patched_wheel_on(self, build: Build, python: str) -> Tuple[str, str]:
        """The release's patched wheel built by `scripts/apply.sh --wheel` run
        with Python `python` as python3 (the wheel is for that Python), and
        pip-installed into a copy of the stock venv of that Python."""
        wheel_python, wheel = self.installed_wheel(build, python)
        self.note(f"   {build.release} on Python {python}: {wheel_python}")
        return wheel_python, wheel

    def installed_wheel(self, build: Build, python: Optional[str] = None) -> Tuple[str, str]:
        release = build.release
        wheel_log = self.logs / "wheel.log"
        wheel_venv = venvs.venvs_dir() / f"torch-{release}{build.label}-wheel"
        stock_venv = Path(build.stock).parent.parent
        with open(wheel_log, "a") as log, tempfile.TemporaryDirectory() as front:
            env = dict(os.environ)
            if python is not None:
                # The user whose python3 is this Python: a link first on PATH.
                os.symlink(venvs.interpreter_of(python), Path(front) / "python3")
                env["PATH"] = f"{front}{os.pathsep}{env['PATH']}"
            venvs.seed_release_wheel(release, log, python)
            made = subprocess.run([str(APPLY), "--wheel", f"torch=={release}", "--out",
                                   str(cache_dir() / "patched-wheels")],
                                  stdout=subprocess.PIPE, stderr=log, text=True, env=env)
            log.write(made.stdout)
            wrote = [line[len("wrote "):] for line in made.stdout.splitlines()
                     if line.startswith("wrote ")]
            shutil.rmtree(wheel_venv, ignore_errors=True)
            install_env = dict(os.environ)
            venvs.lift_configured_constraint(install_env, release, log)
            if not (wrote and venvs.run_into(log, ["cp", "-al", stock_venv, wheel_venv])
                    and venvs.run_into(log, [venvs.python_of(wheel_venv), *venvs.QUIET_PIP,
                                             "install", "--no-deps", wrote[-1]],
                                       install_env)):
                raise SetupFailed(f"building or installing the patched {release}{build.label} "
                                  f"wheel failed; see {wheel_log}")
        self.note(f"   {wrote[-1]}")
        return str(venvs.python_of(wheel_venv)), wrote[-1]

    def tiers(self, builds: Sequence[Build]) -> List[Tuple[str, Tier]]:
        step("tiers by content (test/harness/content_identity.py)")
        return tiers_by_content(builds, self.venvs_log)


class PredictedSetup:
    """--list: where the run would put each venv, making none."""
    background = False

    def note(self, line: str) -> None:
        print(line, file=sys.stderr)

    def release(self, release: str) -> Build:
        if not venvs.is_ready(venvs.venvs_dir() / f"torch-{release}", release):
            self.note(f"   {release}: no ready stock venv yet (a run makes it)")
        return Build(release, str(venvs.python_of(venvs.venvs_dir() / f"torch-{release}")),
                     str(venvs.python_of(venvs.venvs_dir() / f"torch-{release}-patched")))

    def release_on(self, release: str, python: str) -> Build:
        name = f"torch-{release}-py{python}"
        if not venvs.is_ready(venvs.venvs_dir() / name, release):
            self.note(f"   {release} on Python {python}: no ready stock venv yet (a run "
                      "makes it)")
        return Build(release, str(venvs.python_of(venvs.venvs_dir() / name)),
                     str(venvs.python_of(venvs.venvs_dir() / f"{name}-patched")),
                     f"-py{python}")

    def patched_wheel(self, builds: Dict[str, Build]) -> Tuple[str, str]:
        return (str(venvs.python_of(venvs.venvs_dir() / f"torch-{WHEEL_RELEASE}-wheel")),
                f"<the wheel `apply.sh --wheel torch=={WHEEL_RELEASE}` writes>")

    def patched_wheel_on(self, build: Build, python: str) -> Tuple[str, str]:
        return (str(venvs.python_of(venvs.venvs_dir() / f"torch-{build.release}{build.label}"
                                    "-wheel")),
                f"<the wheel `apply.sh --wheel torch=={build.release}` writes, run by Python "
                f"{python}>")

    def tiers(self, builds: Sequence[Build]) -> List[Tuple[str, Tier]]:
        missing = [build.release for build in builds
                   if not venvs.is_ready(Path(build.stock).parent.parent, build.release)]
        if not missing:
            with open(os.devnull, "w") as quiet:
                return tiers_by_content(builds, quiet)
        why = f"by content after setup; not computed: no ready venv for {', '.join(missing)}"
        return [(build.release, Tier("full", why)) for build in builds]


def list_plan(options: Options) -> int:
    planned: List[Job] = []
    try:
        if options.short:
            short_plan(options.releases, PredictedSetup(), planned.extend)
        else:
            plan(options.releases, options.pytest_args, PredictedSetup(), planned.extend)
    except SetupFailed as failure:
        print(f"test.sh: {failure}", file=sys.stderr)
        return 1
    known = durations.load()
    for job in planned:
        # expected_s: the job's wall time in the last run that ran it (null: never timed).
        print(json.dumps({**dataclasses.asdict(job), "expected_s": known.get(job.name)}))
    return 0


# The servers the tests start, Debian's packages (program -> package):
# redis-server for the remote-cache tests, nginx for the fleet's index over
# HTTP (test/tools/test_index_over_http.py starts its own on 127.0.0.1).
SERVERS = {"redis-server": "redis-server", "nginx": "nginx"}


def installed(program: str) -> bool:
    # nginx is in /usr/sbin, which a user's PATH may lack.
    search = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin"
    return shutil.which(program, path=search) is not None


def ensure_servers(logs: Path) -> None:
    """The servers the tests run, installed where missing (as root, with apt-get)."""
    missing = [package for program, package in SERVERS.items() if not installed(program)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SetupFailed(f"{' and '.join(missing)} missing; install (sudo apt-get install "
                          f"{' '.join(missing)}) and rerun")
    step(f"installing {' '.join(missing)} (apt-get; logs: {logs}/apt.log)")
    with open(logs / "apt.log", "w") as log:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if not (venvs.run_into(log, ["apt-get", "update", "-q"], env)
                and venvs.run_into(log, ["apt-get", "install", "-y", "-q", *missing], env)):
            raise SetupFailed(f"apt-get install {' '.join(missing)} failed; see {logs}/apt.log")


def prepare_environment() -> None:
    """What every process of the run inherits."""
    os.environ["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"
    # The jobs start the tool (a launcher and an engine, each importing the
    # package) thousands of times: with bytecode written once (the checkout
    # ignores __pycache__), none of them compiles the package anew. Measured
    # here: 0.50 s of CPU an apply.sh run instead of 0.56 s.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    # The tests start apply.sh (whose launcher is `python3`) hundreds of
    # times. Where python3 is a version manager's shim (pyenv's costs 0.3 s a
    # call here) they get the interpreter the shim ran, first on PATH.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def abandon(scheduler: Scheduler, runner: PytestRunner) -> None:
    """Start no other job and end the running ones (their process groups):
    nothing the run started outlives it."""
    scheduler.cancel_pending()
    runner.stop()
    scheduler.wait()


def run(options: Options) -> int:
    started = time.monotonic()
    logs = Path(os.environ.get("PREGRAD_LOGS") or REPO / "test-logs")
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    prepare_environment()
    # The linters first (10 to 30 s): a finding stops the run before the
    # hour of jobs. Only for the gate and --quick: a selection of releases
    # (new-base's tier of a new one), --short or PYTEST_ARGS tests those.
    served = tables.read_releases(PATCHES).versions
    whole = options.quick or (list(options.releases) == list(served) and not options.short
                              and not options.pytest_args)
    if whole and not lint.check(logs):
        return 1
    disk = DiskWatch([cache_dir(), Path(tempfile.gettempdir())])
    runner = PytestRunner(logs, os.environ, REPO)
    known = durations.load()
    # Two at once from the start, the longest first (by the last run's times).
    scheduler = Scheduler(runner, limit=2, expected=lambda job: known.get(job.name))
    try:
        ensure_servers(logs)
        step(f"venvs (logs: {logs}/venvs.log); jobs start as their venvs are ready, "
             f"two at a time, the longest first (logs: {logs}/<job>.log)")
        with open(logs / "venvs.log", "a") as venvs_log:
            setup = RealSetup(logs, venvs_log, started)
            tiers = (quick_plan(setup, scheduler.queue_all) if options.quick else
                     short_plan(options.releases, setup, scheduler.queue_all) if options.short
                     else plan(options.releases, options.pytest_args, setup,
                               scheduler.queue_all))
            venvs.drop_wheelhouse(venvs_log)
        setup_seconds = time.monotonic() - started
        runner.setup_done()
        step(f"set up in {minutes(setup_seconds)}; {len(scheduler.queued)} pytest runs in all")
        scheduler.wait()
    except SetupFailed as failure:
        print(f"test.sh: {failure}", file=sys.stderr)
        abandon(scheduler, runner)
        return 1
    except BaseException:  # Ctrl-C, or a bug here: the jobs go too
        abandon(scheduler, runner)
        raise
    durations.save({name: outcome.seconds for name, outcome in scheduler.outcomes.items()
                    if outcome.exit_code is not None})
    return report(options, logs, scheduler, tiers, started, setup_seconds, disk)


def report(options: Options, logs: Path, scheduler: Scheduler, tiers: Dict[str, Tier],
           started: float, setup_seconds: float, disk: DiskWatch) -> int:
    found = verdicts(scheduler.queued, scheduler.outcomes, logs)
    print(table(found.rows))
    print(wall_times(scheduler.queued, scheduler.outcomes, tiers))
    print(bounds(scheduler.outcomes, started, setup_seconds, time.monotonic() - started))
    print(f"logs: {logs} ({minutes(time.monotonic() - started)})", flush=True)
    # A torch newer than every row of patches/releases.tsv is on the index:
    # say so, and what identification gives for it (never a failure here).
    with open(logs / "newer-release.log", "a") as log:
        subprocess.run([sys.executable, str(HARNESS / "newer_release.py")], stderr=log)
    print(f"expected failures on stock builds: {found.stock_expected_failures} (each one a "
          "defect or missing feature the tests detect)")
    passed = not found.failed_jobs
    # A release scripts/new-base wrote is a candidate until its matrix passes.
    for candidate in tables.read_candidates(PATCHES):
        if candidate not in options.releases:
            continue
        if passed:
            print(f"candidate {candidate}: its matrix passed in this run; serve it: "
                  f"scripts/new-base {candidate} --served")
        else:
            print(f"candidate {candidate}: this run did not pass; it stays a candidate")
    print(f"disk: {disk.summary()}")
    # Last, so that whoever reads only the end of the output sees what failed.
    for head, *tail in found.failed_tests:
        print(f"failed: {head}", *tail, sep="\n")
    print(f"summary: {found.total.passed} passed, {found.total.failed} failed")
    return 0 if passed else 1


def main(argv: Sequence[str]) -> int:
    try:
        options = parse(argv, tables.read_releases(PATCHES).versions)
    except HelpWanted:
        print(__doc__.strip())
        return 0
    except UsageError as problem:
        print(problem, file=sys.stderr)
        return 2
    except Refused as problem:  # patches/releases.tsv itself is malformed
        print(f"test.sh: {problem}", file=sys.stderr)
        return 1
    os.chdir(REPO)
    # A CI timeout's TERM stops the jobs too (they run in sessions of their
    # own, out of reach of a signal to this process group).
    signal.signal(signal.SIGTERM, terminated)
    try:
        return list_plan(options) if options.list_only else run(options)
    except KeyboardInterrupt:
        print("test.sh: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("test.sh: terminated", file=sys.stderr)
        return 143


class Terminated(Exception):
    """SIGTERM, raised where the run is, so that its jobs are stopped."""


def terminated(signum: int, frame: object) -> None:
    raise Terminated()


if __name__ == "__main__":
    # Output piped into `head` ends quietly, as a shell command's does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
