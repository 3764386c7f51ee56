"""The matrix's pytest runs as data (test/harness/matrix.py runs them): which
suites each build runs, with which interpreter and environment, in which
order. Nothing here starts a process.

A stock job says its release in PREGRAD_EXPECT_STOCK and a patched job in
PREGRAD_EXPECT_PATCHED: test/dynamo/conftest.py then marks what that build
is expected to fail as strict xfails, so pytest's exit status is the job's
verdict (test/dynamo/stock_expectations.py says what fails where).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple

# Queues jobs that became ready together: the scheduler then picks the
# longest of them all, not the first one queued.
Queue = Callable[[Sequence["Job"]], None]

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from torch_backport.infra.fsio import cache_dir  # noqa: E402  (the one cache path)
from torch_backport.infra.tables import release_numbers  # noqa: E402

RESULTS_SUITE = "test/dynamo/test_pre_grad_results.py"
REAL_MODELS_SUITE = "test/dynamo/test_real_models.py"
IDENTIFICATION_SUITE = "test/dynamo/test_release_identification.py"
DYNAMO_SUITES = (IDENTIFICATION_SUITE,
                 "test/dynamo/test_pre_grad_pass_timing.py",
                 "test/dynamo/test_pre_grad_stale_hits.py",
                 "test/dynamo/test_pre_grad_remote_cache.py", RESULTS_SUITE,
                 "test/dynamo/test_cpu_isa_probe.py", "test/dynamo/test_autocast_cache.py",
                 "test/dynamo/test_torchao_quant_lift_up.py", REAL_MODELS_SUITE)
# Stock builds only: they need the release's own files.
STOCK_ONLY_SUITES = ("test/dynamo/test_patched_wheel_rules.py",
                     "test/dynamo/test_real_install_round_trip.py")
# The results suites are a patched build's longest: a job of their own.
OTHER_SUITES = tuple(s for s in DYNAMO_SUITES if s not in (RESULTS_SUITE, REAL_MODELS_SUITE))
# apply.sh --verify (and --verify --model) on one stock and one patched
# install of each tier: in the full tier stock 2.15.0 (the results defect
# named) and patched 2.11.0 (the backported feature holds); in the short
# tier its newest release, stock and patched.
VERIFY_SUITE = "test/dynamo/test_verify_command.py"
VERIFY_FULL_TIER_STOCK, VERIFY_FULL_TIER_PATCHED = "2.15.0", "2.11.0"
# AOTInductor on a real network (about 30 s of C++): one full-tier patched build.
AOTI_SUITE, AOTI_RELEASE = "test/dynamo/test_real_models_aoti.py", "2.15.0"
# The short tier (a release whose content another tested release has,
# test/harness/content_identity.py): compile cells that tell stock from
# patched on every release: the results cell upstream gets wrong, a
# behaviour test of the feature, the autocast key.
SHORT_CELLS = (
    f"{RESULTS_SUITE}::PreGradResultsTests::"
    "test_matches_eager_timing_late_freezing_entry_compile_fx_model_name_conv_bn",
    "test/dynamo/test_pre_grad_pass_timing.py::PreGradPassTimingTests::"
    "test_pre_grad_passes_default_timing_with_uuid",
    "test/dynamo/test_autocast_cache.py::AutocastCacheTests::"
    "test_region_without_dtype_misses_under_another_ambient_dtype")
# What proves nothing on stock (the random properties, the two-process
# autocast test): marked patched_only by test/dynamo/conftest.py.
NOT_ON_STOCK = "not patched_only"
# scripts/new-base, rehearsed on every base: the stock venv of each base's
# release, and of 2.12.1 (a release whose files are a base's).
NEW_BASE_RELEASES = ("2.9.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0",
                     "2.14.1")
# The tool suite builds its small installs from these two stock venvs.
TOOLS_STOCK, TOOLS_UPSTREAM = "2.11.0", "2.12.0"
WHEEL_RELEASE = "2.11.0"  # the patched wheel built, installed and tested
# The Pythons users run besides 3.11 (the wheels are cp310-cp313): the
# oldest release on the oldest, the newest on the newest, each the short
# tier with --verify's suite and the real install's round trip.
OTHER_PYTHONS = (("2.9.0", "3.10"), ("2.15.0", "3.13"))


# Two jobs run at once on two cores: each job gets one OpenMP thread and one
# Inductor compile thread (no pool of compile workers), so that two jobs use
# two cores. One job keeps torch's defaults, so that they stay tested.
ONE_CORE_EACH = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
TORCH_DEFAULTS_JOB = "patched-2.14.0-short"
# Inductor's compiled kernels, kept between runs per venv
# (test/dynamo/kept_kernels.py keys them within it).
KERNEL_STORE = "PREGRAD_KERNEL_STORE"


def kernel_store(python: str) -> Path:
    """<cache>/kernels/<the venv's directory name>."""
    return cache_dir() / "kernels" / Path(python).parent.parent.name


def with_run_environment(job: "Job") -> "Job":
    """The job with the threads and the kernel store it runs with (its own
    env wins)."""
    env = {} if job.name == TORCH_DEFAULTS_JOB else dict(ONE_CORE_EACH)
    env[KERNEL_STORE] = str(kernel_store(job.python))
    return dataclasses.replace(job, env={**env, **job.env})


class SetupFailed(Exception):
    """A venv, the patched wheel or the tiers could not be set up: exit 1."""


@dataclasses.dataclass(frozen=True)
class Job:
    """One pytest run: `python -m pytest` with the matrix's own flags, a
    JUnit report at <logs>/<name>.xml, then `argv`; `env` on top of the
    matrix's environment. The verdict is pytest's exit status."""
    name: str  # the log and report: <logs>/<name>.log, <logs>/<name>.xml
    build: str  # the table's first column: stock-X, patched-X, wheel-X, tools
    python: str
    argv: List[str]
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    release: Optional[str] = None  # whose tier the wall-time table names


@dataclasses.dataclass(frozen=True)
class Build:
    """A release's two interpreters: its stock venv and the patched copy;
    `label` names a Python other than the matrix's own (`-py3.10`)."""
    release: str
    stock: str
    patched: str
    label: str = ""


@dataclasses.dataclass(frozen=True)
class Tier:
    level: str  # "full" or "short"
    why: str


def full_tier(build: Build, pytest_args: Sequence[str]) -> List[Job]:
    """Every suite, stock and patched, longest first. With PYTEST_ARGS (a
    selection) there is no stock job: a selection says nothing about "fails
    exactly where expected"."""
    release = build.release
    patched_env = {"PREGRAD_EXPECT_PATCHED": release}
    stock_verify = [VERIFY_SUITE] if release == VERIFY_FULL_TIER_STOCK else []
    patched_verify = [VERIFY_SUITE] if release == VERIFY_FULL_TIER_PATCHED else []
    aoti = [AOTI_SUITE] if release == AOTI_RELEASE else []
    jobs = [Job(f"patched-{release}-results", f"patched-{release}", build.patched,
                [RESULTS_SUITE, REAL_MODELS_SUITE, *aoti, *pytest_args], patched_env, release)]
    if not pytest_args:
        # A full-tier stock run keeps what it can tell (conftest.py,
        # stock_expectations.checks_something_on_stock).
        jobs.append(Job(f"stock-{release}", f"stock-{release}", build.stock,
                        ["-m", NOT_ON_STOCK, *DYNAMO_SUITES, *STOCK_ONLY_SUITES,
                         *stock_verify],
                        {"PREGRAD_EXPECT_STOCK": release,
                         "PREGRAD_STOCK_DISCRIMINATING": release}, release))
    jobs.append(Job(f"patched-{release}", f"patched-{release}", build.patched,
                    [*OTHER_SUITES, *patched_verify, *pytest_args], patched_env, release))
    return jobs


def short_tier(build: Build, pytest_args: Sequence[str], verify: bool = False) -> List[Job]:
    """Identification, the real install's round trip and --wheel's rules
    (stock), and SHORT_CELLS, stock and patched; with `verify`, --verify's
    suite on both."""
    release, label = build.release, build.label
    suites = [VERIFY_SUITE] if verify else []
    jobs = [Job(f"patched-{release}{label}-short", f"patched-{release}{label}", build.patched,
                [IDENTIFICATION_SUITE, *SHORT_CELLS, *suites, *pytest_args],
                {"PREGRAD_EXPECT_PATCHED": release}, release)]
    if not pytest_args:
        jobs.append(Job(f"stock-{release}{label}-short", f"stock-{release}{label}", build.stock,
                        [IDENTIFICATION_SUITE, *STOCK_ONLY_SUITES, *SHORT_CELLS, *suites],
                        {"PREGRAD_EXPECT_STOCK": release}, release))
    return jobs


def tools_env(builds: Dict[str, Build]) -> Dict[str, str]:
    """The real installs test/tools/fake_install.py copies from."""
    return {"PREGRAD_STOCK_PYTHON": builds[TOOLS_STOCK].stock,
            "PREGRAD_UPSTREAM_PYTHON": builds[TOOLS_UPSTREAM].stock}


# The tool suite, the longest job, in two: the fault walks (about 45 % of its
# time) and the concurrency suite in a job of their own, the rest (any new
# file too) in the other.
TOOLS_FAULTS_SUITES = ("test/tools/test_faults.py", "test/tools/test_concurrency.py",
                       "test/tools/test_swapped_directories.py")


def tools_jobs(builds: Dict[str, Build], pytest_args: Sequence[str]) -> List[Job]:
    # test_new_base.py needs every base's stock venv and test_uv_end_to_end.py
    # the release wheel in the cache: jobs of their own (marked own_job,
    # test/tools/conftest.py).
    python, env = builds[TOOLS_STOCK].patched, tools_env(builds)
    others = [f"--ignore={suite}" for suite in TOOLS_FAULTS_SUITES]
    return [Job("tools", "tools", python,
                ["test/tools", *others, *selecting("not own_job", pytest_args)], env),
            Job("tools-faults", "tools", python,
                [*TOOLS_FAULTS_SUITES, *selecting("not own_job", pytest_args)], dict(env))]


def selecting(marks: str, pytest_args: Sequence[str]) -> List[str]:
    """`-m marks` and PYTEST_ARGS; pytest keeps only the last -m, so one of
    PYTEST_ARGS (-m EXPR, -mEXPR) is joined to `marks` with `and`."""
    expressions, rest = [marks], []
    words = iter(pytest_args)
    for word in words:
        if word == "-m":
            expressions.append(next(words, ""))
        elif word.startswith("-m") and not word.startswith("--"):
            expressions.append(word[2:])
        else:
            rest.append(word)
    joined = " and ".join(f"({expression})" for expression in expressions if expression)
    return ["-m", marks if len(expressions) == 1 else joined, *rest]


def wheel_jobs(builds: Dict[str, Build], wheel_python: str, wheel: str,
               pytest_args: Sequence[str]) -> List[Job]:
    """The patched wheel's installed venv, whose files are compared with the
    patched copy's (which runs every suite; the README's hash-pin recipe, a
    rebuild and a fresh venv, makes it one of the longer jobs); then uv in
    place on the real wheel (now in the cache), two foreign targets'
    patched wheels, and the real patched wheel's index served by nginx."""
    copy = builds[WHEEL_RELEASE]
    env = {**(tools_env(builds) if TOOLS_UPSTREAM in builds else {}),
           "PREGRAD_PATCHED_WHEEL": wheel, "PREGRAD_PATCHED_COPY_PYTHON": copy.patched}
    return [Job(f"wheel-{WHEEL_RELEASE}", f"wheel-{WHEEL_RELEASE}", wheel_python,
                ["test/dynamo/test_installed_patched_wheel.py", *pytest_args], dict(env)),
            Job("uv-fleet", "tools", copy.stock,
                ["test/tools/test_uv_end_to_end.py",
                 "test/tools/test_index_over_http.py::RealWheelOverHttp", *pytest_args],
                {**env, "PREGRAD_UV_FLEET": "1"})]


def wheel_job_on(build: Build, wheel_python: str, wheel: str,
                 pytest_args: Sequence[str]) -> Job:
    """The release's patched wheel for another Python, installed: its files
    compared with that Python's patched copy, pip check, --status (the
    README's recipe is run on the matrix's own Python, by the wheel job)."""
    name = f"wheel-{build.release}{build.label}"
    return Job(name, name, wheel_python,
               ["test/dynamo/test_installed_patched_wheel.py", *pytest_args],
               {"PREGRAD_PATCHED_WHEEL": wheel, "PREGRAD_PATCHED_COPY_PYTHON": build.patched},
               build.release)


def new_base_job(builds: Dict[str, Build], pytest_args: Sequence[str]) -> Optional[Job]:
    """The rehearsal of scripts/new-base on every base; None unless every
    release of NEW_BASE_RELEASES is part of the run."""
    if not all(release in builds for release in NEW_BASE_RELEASES):
        return None
    pythons = ",".join(f"{release}={builds[release].stock}" for release in NEW_BASE_RELEASES)
    return Job("new-base", "tools", builds[TOOLS_STOCK].stock,
               ["test/tools/test_new_base.py", "test/tools/test_day_one_rehearsal.py",
                *pytest_args],
               {**tools_env(builds), "PREGRAD_RELEASE_PYTHONS": pythons})


def is_series_base(release: str) -> bool:
    """A release a series is cut against (patches/v<release>/) runs the full
    tier whatever else is tested: content_identity.py makes it the
    reference of its content."""
    return (REPO / "patches" / f"v{release}").is_dir()


class Setup(Protocol):
    """What the plan needs set up, as it needs it: matrix.py's real setup
    (venvs, the wheel, the tiers by content) or --list's prediction."""

    def release(self, release: str) -> Build: ...

    def release_on(self, release: str, python: str) -> Build:
        """The release's stock venv and patched copy on CPython `python` (3.10)."""

    def patched_wheel(self, builds: Dict[str, Build]) -> Tuple[str, str]:
        """(the python of a venv with the patched wheel installed, the wheel)."""

    def patched_wheel_on(self, build: Build, python: str) -> Tuple[str, str]:
        """The same for `build`, a release on CPython `python`, the wheel
        built by `apply.sh --wheel` run with that Python as python3."""

    def tiers(self, builds: Sequence[Build]) -> List[Tuple[str, Tier]]:
        """(release, its tier by content) for each build, in the order given."""

    def note(self, line: str) -> None: ...

    # Whether the patched wheel is built in a thread of its own, beside the
    # venvs (a real setup), or at once (--list, which builds nothing).
    background: bool


def setup_order(selected: Sequence[str]) -> List[str]:
    """The tool suite needs stock 2.11.0 and 2.12.0 only: those first."""
    first = [release for release in (TOOLS_STOCK, TOOLS_UPSTREAM) if release in selected]
    return first + [release for release in selected if release not in first]


def plan(selected: Sequence[str], pytest_args: Sequence[str], setup: Setup,
         queue: Queue) -> Dict[str, Tier]:
    """Set up each release and queue its jobs as soon as what they need is
    there; then the tiers by content, the other releases' jobs and the
    new-base rehearsal. The tier of each release."""
    builds: Dict[str, Build] = {}

    def queue_to_run(jobs: Sequence[Job]) -> None:
        queue([with_run_environment(job) for job in jobs])

    wheel = PatchedWheel(setup, pytest_args, queue_to_run)
    try:
        tiers = queue_as_set_up(selected, pytest_args, setup, queue_to_run, builds, wheel)
        queue_by_tier(selected, pytest_args, setup, queue_to_run, builds, tiers)
    finally:
        wheel.join()
    for release, python in OTHER_PYTHONS:
        if release in selected:
            build = setup.release_on(release, python)
            tiers[f"{release}{build.label}"] = Tier("short", f"{release} on Python {python}")
            queue_to_run(short_tier(build, pytest_args, verify=True))
            queue_to_run([wheel_job_on(build, *setup.patched_wheel_on(build, python),
                                       pytest_args)])
    rehearsal = new_base_job(builds, pytest_args)
    if rehearsal is None:
        setup.note(f"   new-base rehearsal: not run (needs {' '.join(NEW_BASE_RELEASES)} "
                   "among --releases)")
    else:
        queue_to_run([rehearsal])
    return tiers


class PatchedWheel:
    """The patched wheel built and installed in a thread of its own (a
    minute of the setup), its jobs queued when it is there; `join` waits for
    it and raises what it raised."""

    def __init__(self, setup: Setup, pytest_args: Sequence[str], queue: Queue) -> None:
        self.setup, self.pytest_args, self.queue = setup, pytest_args, queue
        self.thread: Optional[threading.Thread] = None
        self.failure: Optional[BaseException] = None

    def start(self, builds: Dict[str, Build]) -> None:
        self.thread = threading.Thread(target=self._build, args=(dict(builds),),
                                       name="patched-wheel", daemon=True)
        if self.setup.background:
            self.thread.start()
        else:
            self._build(dict(builds))

    def _build(self, builds: Dict[str, Build]) -> None:
        try:
            self.queue(wheel_jobs(builds, *self.setup.patched_wheel(builds), self.pytest_args))
        except BaseException as failure:  # raised again by join(), in the main thread
            self.failure = failure

    @property
    def started(self) -> bool:
        return self.thread is not None

    def join(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.thread.join()
        if self.failure is not None:
            raise self.failure


def queue_as_set_up(selected: Sequence[str], pytest_args: Sequence[str], setup: Setup,
                    queue: Queue, builds: Dict[str, Build],
                    wheel: PatchedWheel) -> Dict[str, Tier]:
    """Each release set up in turn (into `builds`); what can start then
    starts: the tool suite once its two venvs exist, the patched wheel's
    build (in its thread) and then its jobs, a series base's full tier (it is
    the reference of its content whatever else is tested). The tiers known
    so far."""
    tiers: Dict[str, Tier] = {}
    tools_queued = False
    for release in setup_order(selected):
        builds[release] = setup.release(release)
        if not tools_queued and TOOLS_STOCK in builds and TOOLS_UPSTREAM in builds:
            queue(tools_jobs(builds, pytest_args))
            tools_queued = True
        if tools_queued and not wheel.started:
            wheel.start(builds)
        if is_series_base(release):
            tiers[release] = Tier("full", f"patches/v{release} is cut against it")
            queue(full_tier(builds[release], pytest_args))
    if WHEEL_RELEASE in builds and not wheel.started:  # 2.12.0 not tested: no tool suite
        wheel.start(builds)
    return tiers


# The inner loop (scripts/test.sh --quick): the tool suite without its slow
# tests, and the short tier of a backport release and a release upstream
# ships the feature in (the tool suite reads stock 2.12.0 too).
QUICK_RELEASES = ("2.11.0", "2.15.0")
QUICK_TOOLS_MARKS = "not own_job and not slow"


def quick_plan(setup: Setup, queue: Queue) -> Dict[str, Tier]:
    """What a typical change to the tool breaks, in a few minutes: not the gate."""
    builds: Dict[str, Build] = {}
    for release in setup_order([*QUICK_RELEASES, TOOLS_UPSTREAM]):
        builds[release] = setup.release(release)
    jobs = [Job("tools-quick", "tools", builds[TOOLS_STOCK].patched,
                ["test/tools", "-m", QUICK_TOOLS_MARKS], tools_env(builds))]
    for release in QUICK_RELEASES:
        jobs += short_tier(builds[release], [])
    queue([with_run_environment(job) for job in jobs])
    return {release: Tier("short", "--quick") for release in QUICK_RELEASES}


def short_plan(selected: Sequence[str], setup: Setup, queue: Queue) -> Dict[str, Tier]:
    """--short: the short tier of each named release (--verify's suite on the
    newest), and nothing else: new-base's day-one rehearsal in the gate,
    whose own matrix gives the same files the full tier."""
    builds = {release: setup.release(release) for release in setup_order(selected)}
    newest = max(selected, key=release_numbers)
    jobs: List[Job] = []
    for release in selected:
        jobs += short_tier(builds[release], [], verify=release == newest)
    queue([with_run_environment(job) for job in jobs])
    return {release: Tier("short", "--short") for release in selected}


def queue_by_tier(selected: Sequence[str], pytest_args: Sequence[str], setup: Setup,
                  queue: Queue, builds: Dict[str, Build],
                  tiers: Dict[str, Tier]) -> None:
    """The tiers by content, computed from the installed files now (into
    `tiers`); the full-tier releases' jobs, then the short ones (longest
    first). A series base must come out full."""
    short: List[Build] = []
    jobs: List[Job] = []
    for release, tier in setup.tiers([builds[release] for release in selected]):
        setup.note(f"   {release}: {tier.level} tier ({tier.why})")
        if release in tiers and tier.level != "full":
            raise SetupFailed(f"{release} is a series base but content_identity.py gives "
                              f"it the {tier.level} tier")
        queued_already = release in tiers
        tiers[release] = tier
        if queued_already:
            continue
        if tier.level == "full":
            jobs += full_tier(builds[release], pytest_args)
        else:
            short.append(builds[release])
    newest = max((build.release for build in short), key=release_numbers, default=None)
    for build in short:
        jobs += short_tier(build, pytest_args, verify=build.release == newest)
    queue(jobs)
