"""Usage: scripts/gpu-check.sh --python PY [--topic T]... [--test-deps DIR] [-- PYTEST_ARGS ...]
       scripts/gpu-check.sh --help

Runs on the GPU machine itself, offline, against the torch that PY imports
(e.g. /opt/torch/.venv/bin/python): the behaviour, results, real-network and
CUDA autocast suites with CUDA tensors (PREGRAD_TEST_DEVICE=cuda: torch's
default device), on PY's torch as installed (stock), then patched, then reverted:
  1. checks, writing nothing: PY imports torch and sees a CUDA device; PY has
     the test requirements (or --test-deps DIR has them); `apply.sh --python
     PY --status` finds nothing of this project applied, since the check ends
     by reverting and must not undo a patch of yours (refused, exit 1: revert
     it first, or check a `cp -al` copy of the venv); `apply.sh --check` would
     apply the topics; torch's RECORD lists files with a sha256;
  2. stock: python -m pytest test/dynamo/test_pre_grad_pass_timing.py
     test_pre_grad_results.py test_real_models.py test_cuda_autocast_cache.py
     with PREGRAD_EXPECT_STOCK=RELEASE (PY's torch's, 2.11.0 for
     2.11.0+cu130): test/dynamo/conftest.py makes each test that
     test/dynamo/stock_expectations.py says fails on this release on the CPU
     a strict xfail, so pytest's exit status says whether stock is as on the
     CPU; its counts are shown beside the patched ones, with that (on the GPU
     they may differ: the conv-bn fold is CPU-only); the stock run never
     fails the check;
  3. `apply.sh --python PY [--topic T]...`, then the same run with
     PREGRAD_EXPECT_PATCHED=RELEASE: pytest must exit 0 (every test passes,
     but for a needless miss stock_expectations.py expects of patched
     RELEASE, a strict xfail);
  4. `apply.sh --python PY --revert [--topic T]...`, also when a step fails
     or on Ctrl-C or SIGTERM once step 3 began (a running pytest is stopped, a
     running apply.sh is waited for, the revert ignores both), then every
     file of torch's RECORD that has a sha256 must match it ("RECORD: N
     files, all match"; torch_backport/infra/record.py, run by PY).
It ends with a table (suite | stock passed/failed/expected-fail | patched
passed/failed/expected-fail and verdict, counted from pytest's JUnit reports
by test/harness/matrix_report.py), each phase's wall time and the log paths.
Without a CUDA device (torch.cuda.is_available() is false in PY; nvidia-smi
is not needed) it says "no CUDA device" and exits 0, having written nothing:
no log, no venv, no download, no apply.

--python PY      the interpreter whose torch is checked (required)
--topic T        the topics to apply and revert, as apply.sh takes them
                 (repeat it, or T1,T2; default: the default topics)
--test-deps DIR  wheels of pytest, hypothesis and expecttest (and numpy), for a
                 PY that lacks them, made for PY's Python and platform on a
                 machine with network access (hypothesis's wheels are
                 compiled), e.g. for Python 3.12:
                   pip download -d DIR --only-binary=:all: --python-version 3.12 \\
                     --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \\
                     -r requirements/gpu-check.txt
                 Each wheel of DIR whose distribution PY lacks is unzipped into a
                 temporary directory on PYTHONPATH for the pytest runs only;
                 nothing is installed into PY. Without DIR, a PY that lacks
                 them is refused (exit 1) with that command for PY.
PYTEST_ARGS      (after --) go to both pytest runs (e.g. -k EXPR).
The check is test/harness/gpu_check.py (and target_python.py: what PY is
asked), run by the python3 on PATH. Needs git and python3 on PATH; no network.
Budget: under 8 minutes on a GPU machine (not yet measured there).
Environment: PREGRAD_LOGS (default <repo>/test-logs): logs go to
$PREGRAD_LOGS/gpu-*.log and gpu-*.xml. The caller's PREGRAD_EXPECT_STOCK,
PREGRAD_EXPECT_PATCHED and PREGRAD_STOCK_DISCRIMINATING are not passed on:
each pytest run sets its own.
Exit codes: 0 every patched test passed and the revert left torch's RECORD
matched (or no CUDA device here); 1 a check failed, or refused (PY's torch not
pristine, test requirements missing); 2 usage error (no --python, PY missing or
without torch, an unknown topic); 130 or 143 interrupted by Ctrl-C or SIGTERM
(after the revert, once the apply began).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import NoReturn, Sequence
from xml.etree.ElementTree import ParseError

from matrix_report import Counts, counts_by_suite, EXIT_MEANING
from target_python import (missing_requirements, output_of, pip_target, read_record, REPO,
                           torch_of, unzip_missing)

sys.path.insert(0, str(REPO))
from torch_backport.infra.tables import release_numbers  # noqa: E402

PROG = "gpu-check.sh"
APPLY = str(REPO / "scripts" / "apply.sh")
SUITES = ("test/dynamo/test_pre_grad_pass_timing.py", "test/dynamo/test_pre_grad_results.py",
          "test/dynamo/test_real_models.py", "test/dynamo/test_cuda_autocast_cache.py")
# conftest.py's: each run sets the one for its build (the stock run runs every
# test: no PREGRAD_STOCK_DISCRIMINATING); the caller's are not passed on.
EXPECT = {"stock": "PREGRAD_EXPECT_STOCK", "patched": "PREGRAD_EXPECT_PATCHED"}
EXPECTATION_VARIABLES = (*EXPECT.values(), "PREGRAD_STOCK_DISCRIMINATING")


class Stop(Exception):
    """The check ends: `message` (if any) to stderr, exit `code` (128 + the
    signal where SIGINT or SIGTERM stopped it)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code, self.message = code, message


def interrupted(signum: int, frame: FrameType | None) -> NoReturn:
    raise Stop(128 + signum, f"interrupted ({signal.Signals(signum).name})")


def warn(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def indented(text: str, by: str = "    ") -> str:
    return "\n".join(by + line for line in text.splitlines())


@dataclass
class Check:
    """One run: what it was given, and what it did so far."""
    python: str
    version: str  # torch.__version__, e.g. 2.11.0+cu130
    release: str  # what conftest.py's expectations take: 2.11.0
    topics: list[str]  # as apply.sh takes them: --topic T ...
    pytest_args: list[str]
    test_deps: str
    logs: Path
    pythonpath: str
    deps_root: str = ""
    applied: bool = False  # and not reverted yet
    record_before: list[str] = field(default_factory=list)
    record_line: str = ""
    failed: list[str] = field(default_factory=list)
    seconds: dict[str, int] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)  # pytest's, per run: the verdict

    @property
    def topic_words(self) -> str:
        return "".join(f" {word}" for word in self.topics)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        value = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        raise Stop(2, f"{value.group(1)} needs a value (see --help)" if value
                   else f"{message} (see --help)")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments, PYTEST_ARGS after the first `--`; usage errors: Stop(2)."""
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = Parser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("-h", "--help", action="store_true")
    parser.add_argument("--python", default="")
    parser.add_argument("--topic", dest="topics", action="append", default=[])
    parser.add_argument("--test-deps", default="")
    parser.add_argument("--release", nargs="?", const="")
    args, unknown = parser.parse_known_args(argv[:cut])
    if args.help:
        print(__doc__.strip())
        raise Stop(0)
    if args.release is not None:
        raise Stop(2, "--release is gone: the torch checked is PY's (--python PY; see --help)")
    if unknown:
        raise Stop(2, f"unknown argument: {unknown[0]} (see --help)")
    args.pytest_args = argv[cut + 1:]
    if not args.python:
        raise Stop(2, "--python PY is required: the interpreter whose torch to check, e.g. "
                      "/opt/torch/.venv/bin/python (see --help)")
    if args.test_deps and not os.path.isdir(args.test_deps):
        raise Stop(2, f"--test-deps {args.test_deps}: no such directory")
    args.test_deps = args.test_deps and os.path.abspath(args.test_deps)
    return args


def resolve_python(given: str) -> str:
    """An absolute path, symbolic links kept: a venv's bin/python is one, and
    the venv is what it names."""
    if "/" in given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise Stop(2, f"--python {given}: no such interpreter")
        return os.path.join(os.path.abspath(os.path.dirname(given)), os.path.basename(given))
    found = shutil.which(given)
    if not found:
        raise Stop(2, f"--python {given}: no such interpreter on PATH")
    return found


def refuse_requirements(python: str, missing: list[str], message: str) -> NoReturn:
    """Refused (exit 1): `message`, then how to make --test-deps DIR."""
    pins = (REPO / "requirements" / "test.txt").read_text().splitlines()
    numpy = "".join(f" {shlex.quote(pin)}" for pin in pins
                    if pin.startswith("numpy==") and "numpy" in missing)
    warn(f"{PROG}: {message}\n  On a machine with network access, in this repository (the "
         "wheels are for PY's Python and platform):\n    pip download -d DIR --only-binary=:all: "
         f"{pip_target(python)} -r requirements/gpu-check.txt{numpy}\n  then copy DIR here and "
         "rerun with --test-deps DIR: its wheels are unzipped into a\n  temporary directory on "
         "PYTHONPATH for the pytest runs only; nothing is installed into PY.")
    raise Stop(1)


def check_pristine(check: Check) -> None:
    """PY's torch must be pristine (the check ends by reverting), and apply.sh
    --check must accept the topics."""
    code, output = output_of([APPLY, "--python", check.python, "--status"])
    patched = any(line.startswith("patched") for line in output.splitlines())
    if patched:
        warn(f"{PROG}: {check.python}'s torch has this project's series applied (apply.sh "
             "--status below).\n  This check runs stock first, then patched, then reverts: it "
             "would undo your patch,\n  so it refuses; nothing was run. Revert it first "
             f"({APPLY} --python {check.python}\n  --revert, with --topic all if you applied "
             "cpu-isa-probe), or check a copy of the venv\n  (cp -al VENV COPY: apply.sh writes "
             "by atomic rename, so VENV keeps its bytes).")
    elif code != 0:
        warn(f"{PROG}: apply.sh --status does not find {check.python}'s torch pristine (exit "
             f"{code}; its output below); nothing was run")
    if patched or code != 0:
        warn(indented(output))
        raise Stop(1)
    code, output = output_of([APPLY, "--python", check.python, *check.topics, "--check"])
    if code != 0:
        warn(indented(output))
        raise Stop(2 if code == 2 else 1, f"apply.sh --check{check.topic_words} refuses (exit "
                                          f"{code}, above); nothing was run")


def check_record(check: Check) -> None:
    """Before anything is written: can the end tell that the revert left
    torch as installed?"""
    found = read_record(check.python)
    if found is None or found[0] == 0:
        raise Stop(1, f"torch's RECORD, read through importlib.metadata in {check.python}, "
                      + ("could not be checked (above)" if found is None
                         else "lists no file with a sha256")
                      + ": the check could not tell at its end that the revert left torch as "
                      "installed; nothing was run")
    check.record_before = found[1]
    if check.record_before:
        warn("   note: these files of torch differ from its RECORD before this run (they will "
             "at its end too):\n" + indented("\n".join(check.record_before), "     "))


def unzip_test_deps(check: Check) -> None:
    """The wheels of --test-deps that PY lacks, in a temporary site-packages
    on the pytest runs' PYTHONPATH. Named so: hypothesis takes a module there
    for a third party's, not the project's own (whose constants it would
    scan, and cache in .hypothesis/ here)."""
    check.deps_root = tempfile.mkdtemp(prefix="gpu-check-deps.")
    deps_dir = os.path.join(check.deps_root, "site-packages")
    os.mkdir(deps_dir)
    unzipped = unzip_missing(check.python, Path(check.test_deps), deps_dir)
    warn(" ".join([f"== test requirements from {check.test_deps}, unzipped into {deps_dir} "
                   "(PYTHONPATH of the pytest runs):", *unzipped]))
    still = missing_requirements(check.python, deps_dir)
    if still:
        refuse_requirements(check.python, still, f"{check.python} cannot import "
                            f"{' '.join(still)}, even with the wheels of {check.test_deps}; "
                            "nothing was run")
    check.pythonpath = deps_dir + (f":{check.pythonpath}" if check.pythonpath else "")


def run_logged(command: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """`command` in the repository, its output to `log`: its exit status.
    Interrupted meanwhile, pytest (`env` given: a session of its own) is
    killed with its children; apply.sh, which takes back a half-done run
    itself, is waited for; then the interruption goes on."""
    pending: Stop | None = None
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=REPO, start_new_session=env is not None)
        while True:
            try:
                code = process.wait()
                break
            except Stop as stop:
                if env is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    raise
                pending = pending or stop
    if pending is not None:
        raise pending
    return code


def run_suites(check: Check, label: str) -> None:
    """pytest on PY's torch as it is now, with CUDA tensors; `label`
    (stock, patched) names the build whose expectations conftest.py makes
    strict xfails, so pytest's exit status is the run's verdict."""
    begun, log = time.monotonic(), check.logs / f"gpu-{label}.log"
    warn(f"== {label}: pytest {' '.join(Path(suite).name for suite in SUITES)} (log: {log})")
    env = {name: value for name, value in os.environ.items()
           if name not in EXPECTATION_VARIABLES}
    # PREGRAD_REQUIRE_ALL: a torch that cannot be imported is an error, not
    # suites skipped (test/dynamo/conftest.py), as in the matrix.
    env.update({EXPECT[label]: check.release}, PYTHONPATH=check.pythonpath,
               PREGRAD_TEST_DEVICE="cuda", PYTORCH_PRINT_REPRO_ON_FAILURE="0",
               PREGRAD_REQUIRE_ALL="1")
    # -rfEs: the log ends with the tests unlike the expectations (an
    # XPASS(strict) is a failure) and why a test skipped.
    check.exit_codes[label] = run_logged(
        [check.python, "-m", "pytest", "-q", "-rfEs", "-p", "no:randomly", "--tb=short",
         "--durations=15", f"--junitxml={check.logs / f'gpu-{label}.xml'}", *SUITES,
         *check.pytest_args], log, env)
    check.seconds[label] = int(time.monotonic() - begun)
    lines = log.read_text(errors="replace").splitlines()
    warn(f"   {lines[-1] if lines else ''} ({check.seconds[label]} s)")


def revert_and_verify(check: Check) -> None:
    """Once the apply began, once: --revert, then torch's RECORD. Neither
    SIGINT nor SIGTERM stops it (apply.sh inherits that)."""
    if not check.applied:
        return
    check.applied = False
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        begun, log = time.monotonic(), check.logs / "gpu-revert.log"
        warn(f"== revert: apply.sh --python PY --revert{check.topic_words} (log: {log})")
        if run_logged([APPLY, "--python", check.python, "--revert", *check.topics], log) != 0:
            warn(f"{PROG}: --revert failed (see {log}); {check.python}'s torch is not as it "
                 f"was: see {APPLY} --python {check.python} --status")
            check.failed.append(f"the revert failed (see {log})")
        found = read_record(check.python)
        if found is None:
            check.record_line = "RECORD: could not be read (PY's error above)"
            check.failed.append("torch's RECORD could not be read")
        elif not found[1]:
            check.record_line = f"RECORD: {found[0]} files, all match"
        else:
            check.record_line = "\n".join(
                [f"RECORD: {found[0]} files, {len(found[1])} differ:"]
                + [f"  {rel}" + (" (it differed before this run too)"
                                 if rel in check.record_before else "") for rel in found[1]])
            check.failed.append("files of torch differ from its RECORD")
        warn(f"   {check.record_line}")
        check.seconds["revert"] = int(time.monotonic() - begun)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def has_report(xml: Path) -> bool:
    return xml.exists() and xml.stat().st_size > 0


def suite_counts(xml: Path) -> dict[str, Counts]:
    """The report's counts per test file (matrix_report.py reads them for
    the matrix too); none where pytest wrote no readable report."""
    if not has_report(xml):
        return {}
    try:
        return counts_by_suite(xml)
    except ParseError:
        return {}


def exit_line(check: Check, label: str, suites: dict[str, Counts]) -> None:
    """A run that failed with no failing test to show for it: why."""
    code = check.exit_codes.get(label, 0)
    if code != 0 and not any(counts.failed for counts in suites.values()):
        print(f"{label}: pytest exit {code}: {EXIT_MEANING.get(code, 'failed')} (see "
              f"{check.logs / f'gpu-{label}.log'})")


def table(check: Check) -> None:
    """Every suite of either run, with its counts from pytest's report:
    stock's with whether they are what stock_expectations.py says for this
    release on the CPU, patched's with the verdict. The verdict of each run
    is pytest's exit status."""
    patched_xml, patched_log = check.logs / "gpu-patched.xml", check.logs / "gpu-patched.log"
    stock, patched = suite_counts(check.logs / "gpu-stock.xml"), suite_counts(patched_xml)
    if check.exit_codes.get("patched") != 0 or not patched:
        check.failed.insert(0, f"a patched test failed, or none ran (see the end of {patched_log})")
    print(f"\n{'suite':<32} | {f'stock {check.version} (passed/failed/expected-fail)':<66} | "
          "patched (passed/failed/expected-fail | verdict)")
    for suite in sorted(set(stock) | set(patched)):
        cell = "-"
        if suite in stock:
            failed = stock[suite].failed
            cell = f"{stock[suite]} (" + (f"{failed} unlike the CPU" if failed
                                          else "as on the CPU") + ")"
        after = (f"{patched[suite]} | {'FAILED' if patched[suite].failed else 'ok'}"
                 if suite in patched else "did not run")
        print(f"{suite:<32} | {cell:<66} | {after}")
    exit_line(check, "stock", stock)
    if patched:
        exit_line(check, "patched", patched)
    else:
        print(f"patched: no test ran (see {patched_log})" if has_report(patched_xml)
              else f"patched: pytest wrote no report (see {patched_log})")


def write_phase(check: Check, checks_begun: float, missing: list[str]) -> None:
    """From here on the check writes: logs, the wheels of --test-deps, the
    apply. The caller reverts."""
    check.logs.mkdir(parents=True, exist_ok=True)
    for old in [*check.logs.glob("gpu-*.log"), *check.logs.glob("gpu-*.xml")]:
        old.unlink()
    if missing:
        unzip_test_deps(check)
    check.seconds["checks"] = int(time.monotonic() - checks_begun)
    run_suites(check, "stock")
    if not has_report(check.logs / "gpu-stock.xml"):
        raise Stop(1, "the stock run wrote no report: pytest did not run (see "
                      f"{check.logs / 'gpu-stock.log'}); nothing was applied")
    begun, log = time.monotonic(), check.logs / "gpu-apply.log"
    warn(f"== apply: apply.sh --python PY{check.topic_words} (log: {log})")
    check.applied = True
    try:
        code = run_logged([APPLY, "--python", check.python, *check.topics], log)
    finally:
        check.seconds["apply"] = int(time.monotonic() - begun)
    if code != 0:
        raise Stop(1, f"apply.sh failed (see {log})")
    run_suites(check, "patched")
    revert_and_verify(check)
    table(check)


def start(args: argparse.Namespace) -> Check | None:
    """PY and its torch; None (said) where it sees no CUDA device."""
    python = resolve_python(args.python)
    try:
        version, cuda, device = torch_of(python)
    except RuntimeError as error:
        shown = args.python if args.python == python else f"{args.python} ({python})"
        raise Stop(2, f"--python {shown} cannot import torch: {error}") from None
    if not cuda:
        print(f"{PROG}: no CUDA device (torch {version} at {python} sees none): nothing to check")
        return None
    warn(f"== torch {version} at {python}, on {device}")
    release = ".".join(str(number) for number in release_numbers(version))
    topics = [word for topic in args.topics for word in ("--topic", topic)]
    return Check(python, version, release, topics, args.pytest_args, args.test_deps,
                 pythonpath=os.environ.get("PYTHONPATH", ""),
                 logs=Path(os.environ.get("PREGRAD_LOGS") or REPO / "test-logs"))


def run(argv: Sequence[str], started: float) -> int:
    check = start(parse(argv))
    if check is None:
        return 0
    checks_begun, python = time.monotonic(), check.python
    missing = missing_requirements(python)
    if not missing and check.test_deps:
        warn(f"   {python} has the test requirements: the wheels of --test-deps are not needed")
    if missing and not check.test_deps:
        refuse_requirements(python, missing, f"{python} lacks the test requirements: "
                            f"{' '.join(missing)}; nothing was run")
    check_pristine(check)
    check_record(check)
    try:
        write_phase(check, checks_begun, missing)
    finally:
        revert_and_verify(check)
        if check.deps_root:
            shutil.rmtree(check.deps_root, ignore_errors=True)
    s = check.seconds
    print(f"{check.record_line}\nwall time: checks {s.get('checks', 0)} s, stock "
          f"{s.get('stock', 0)} s, apply {s.get('apply', 0)} s, patched {s.get('patched', 0)} s, "
          f"revert and RECORD {s.get('revert', 0)} s; {int(time.monotonic() - started)} s in all\n"
          f"logs: {check.logs}/gpu-{{stock,apply,patched,revert}}.log (pytest's, and at their "
          "end the tests unlike the expectations), gpu-{stock,patched}.xml")
    if check.failed:
        raise Stop(1, "FAILED: " + "; ".join(check.failed))
    print(f"{PROG}: ok: every patched test passed, and the revert left torch as its RECORD says")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The exit status (the module's text says which)."""
    started = time.monotonic()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--help | head` ends quietly
    # A Ctrl-C that the caller ignores (a background job) stays ignored.
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        return run(sys.argv[1:] if argv is None else argv, started)
    except Stop as stop:
        if stop.message:
            warn(f"{PROG}: {stop.message}")
        return stop.code


if __name__ == "__main__":
    sys.exit(main())
