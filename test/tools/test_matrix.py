"""The matrix (scripts/test.sh, test/harness/matrix.py): its scheduler with
fake jobs (the order queued, at most `limit` at once, a broken job still
ends), its verdict (pytest's exit status: a strict xpass, a collection error
and "no test collected" fail a job; the table's counts come from the JUnit
report), the plan as data (--list), and the usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from fake_install import REPO, ScratchTestCase

sys.path.insert(0, str(REPO / "test" / "harness"))
from matrix_jobs import Job, selecting  # noqa: E402
from matrix_report import counts_by_suite, Verdicts, verdicts  # noqa: E402
from matrix_scheduler import Outcome, PytestRunner, Scheduler  # noqa: E402

MATRIX = REPO / "test" / "harness" / "matrix.py"


def fake_job(name: str) -> Job:
    return Job(name, "tools", sys.executable, [])


class SchedulerTest(ScratchTestCase):
    def run_fakes(self, names: list[str], limit: int) -> tuple[list[str], int]:
        """(the order the fake jobs started in, the most that ran at once)."""
        started: list[str] = []
        running, most = [0], [0]
        lock = threading.Lock()

        def run(job: Job) -> Outcome:
            with lock:
                started.append(job.name)
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= 1
            return Outcome(job, 0, 0.05)

        scheduler = Scheduler(run, limit=limit)
        for name in names:
            scheduler.queue(fake_job(name))
        scheduler.wait()
        self.assertEqual(sorted(scheduler.outcomes), sorted(names))
        return started, most[0]

    def test_jobs_start_in_the_order_queued_one_at_a_time(self) -> None:
        names = [f"job-{i}" for i in range(5)]
        self.assertEqual(self.run_fakes(names, limit=1), (names, 1))

    def test_two_run_at_once_when_the_limit_is_two(self) -> None:
        started, most = self.run_fakes([f"job-{i}" for i in range(6)], limit=2)
        self.assertEqual(most, 2)
        self.assertEqual(started, [f"job-{i}" for i in range(6)])

    def test_the_longest_expected_starts_first_and_the_never_timed_before_it(self) -> None:
        release = threading.Event()
        started: list[str] = []

        def run(job: Job) -> Outcome:
            started.append(job.name)
            release.wait(5)
            return Outcome(job, 0, 0)

        expected = {"blocker": 1.0, "short": 10.0, "long": 300.0, "middle": 60.0}
        scheduler = Scheduler(run, limit=1, expected=lambda job: expected.get(job.name))
        for name in ("blocker", "short", "long", "never-timed", "middle"):
            scheduler.queue(fake_job(name))
        release.set()
        scheduler.wait()
        self.assertEqual(started, ["blocker", "never-timed", "long", "middle", "short"])

    def test_jobs_ready_together_start_longest_first(self) -> None:
        started: list[str] = []
        expected = {"short": 10.0, "long": 300.0}
        scheduler = Scheduler(lambda job: (started.append(job.name), Outcome(job, 0, 0))[1],
                              limit=1, expected=lambda job: expected.get(job.name))
        scheduler.queue_all([fake_job("short"), fake_job("long")])
        scheduler.wait()
        self.assertEqual(started, ["long", "short"])

    def test_raising_the_limit_starts_the_pending_jobs(self) -> None:
        release = threading.Event()
        scheduler = Scheduler(lambda job: (release.wait(5), Outcome(job, 0, 0))[1], limit=1)
        for name in ("a", "b", "c"):
            scheduler.queue(fake_job(name))
        scheduler.set_limit(3)
        release.set()
        scheduler.wait()
        self.assertEqual(sorted(scheduler.outcomes), ["a", "b", "c"])

    def test_a_runner_that_raises_fails_its_job_and_the_rest_run(self) -> None:
        def run(job: Job) -> Outcome:
            if job.name == "broken":
                raise RuntimeError("no such thing")
            return Outcome(job, 0, 0)

        scheduler = Scheduler(run, limit=2)
        for name in ("broken", "fine"):
            scheduler.queue(fake_job(name))
        scheduler.wait()
        self.assertIsNone(scheduler.outcomes["broken"].exit_code)
        self.assertEqual(scheduler.outcomes["fine"].exit_code, 0)

    def test_two_jobs_of_one_name_are_refused(self) -> None:
        scheduler = Scheduler(lambda job: Outcome(job, 0, 0), limit=0)
        scheduler.queue(fake_job("same"))
        with self.assertRaises(ValueError):
            scheduler.queue(fake_job("same"))


SUITE = """
import pytest

def test_passes():
    pass

@pytest.mark.xfail(strict=True, reason="the defect is there")
def test_fails_as_expected():
    assert False

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass
"""
XPASS = """
import pytest

@pytest.mark.xfail(strict=True, reason="the defect should be there")
def test_passes_although_expected_to_fail():
    pass
"""


class VerdictTest(ScratchTestCase):
    """Real pytest runs of small suites through the matrix's runner."""

    def run_jobs(self, suites: dict[str, str],
                 jobs: list[Job]) -> tuple[Verdicts, dict[str, int | None]]:
        for name, text in suites.items():
            (self.tmp / name).write_text(text)
        logs = self.tmp / "logs"
        logs.mkdir()
        with open(os.devnull, "w") as quiet:
            scheduler = Scheduler(PytestRunner(logs, os.environ, self.tmp, say=quiet), limit=2)
            for job in jobs:
                scheduler.queue(job)
            scheduler.wait()
        found = verdicts(scheduler.queued, scheduler.outcomes, logs)
        return found, {name: outcome.exit_code for name, outcome in scheduler.outcomes.items()}

    def test_counts_come_from_the_junit_report_and_exit_0_passes(self) -> None:
        found, codes = self.run_jobs({"test_good.py": SUITE}, [
            Job("stock-9.9.9", "stock-9.9.9", sys.executable, ["test_good.py"],
                {"PREGRAD_EXPECT_STOCK": "9.9.9"})])
        self.assertEqual(codes, {"stock-9.9.9": 0})
        self.assertEqual(found.failed_jobs, [])
        self.assertEqual([(row.suite, row.counts, row.verdict) for row in found.rows], [
            ("test_good.py", "1 passed, 0 failed, 1 expected-fail, 1 skipped",
             "ok (fails exactly where expected)")])
        self.assertEqual(found.stock_expected_failures, 1)

    def test_a_strict_xpass_fails_the_job(self) -> None:
        """A stock cell that starts passing fails the run."""
        found, codes = self.run_jobs({"test_xpass.py": XPASS}, [
            Job("stock", "stock-9.9.9", sys.executable, ["test_xpass.py"])])
        self.assertEqual(codes, {"stock": 1})
        self.assertEqual(found.failed_jobs, ["stock"])
        [row] = found.rows
        self.assertEqual(row.counts, "0 passed, 1 failed, 0 expected-fail")
        self.assertTrue(row.verdict.startswith("FAILED, see the end of "), row.verdict)
        self.assertIn("XPASS(strict)", (self.tmp / "logs" / "stock.log").read_text())

    def test_a_collection_error_counts_as_a_failure_of_its_file(self) -> None:
        found, codes = self.run_jobs({"test_broken.py": "import no_such_module_here\n",
                                      "test_good.py": SUITE}, [
            Job("patched", "patched-9.9.9", sys.executable, ["test_good.py", "test_broken.py"])])
        self.assertNotEqual(codes["patched"], 0)
        self.assertEqual(found.failed_jobs, ["patched"])
        self.assertIn(("test_broken.py", "0 passed, 1 failed, 0 expected-fail"),
                      [(row.suite, row.counts) for row in found.rows])
        self.assertEqual(found.total.failed, 1)

    def test_each_failing_test_is_named_with_its_message(self) -> None:
        """The run ends with one "failed:" line per failing test: whoever reads
        only the end of the output learns what failed without the logs."""
        found, _ = self.run_jobs({"test_mixed.py": "def test_fine():\n    pass\n\n"
                                  "def test_wrong():\n    assert 1 == 2, 'one is not two'\n"},
                                 [Job("tools", "tools", sys.executable, ["test_mixed.py"])])
        [[failure, *_]] = found.failed_tests
        self.assertRegex(failure, r"^tools test_mixed::test_wrong: AssertionError: one is not two")

    def test_a_failing_commands_last_lines_follow_its_name(self) -> None:
        """A message that ends with a command's output (the error last) is
        shown by its first line and its last six."""
        output = "\n".join(f"line {n}" for n in range(1, 21)) + "\nERROR: the cause"
        found, _ = self.run_jobs({"test_cmd.py": "import unittest\n\n"
                                  "class CommandTest(unittest.TestCase):\n"
                                  "    def test_cmd(self):\n"
                                  f"        self.assertEqual(1, 0, {output!r})\n"},
                                 [Job("tools", "tools", sys.executable, ["test_cmd.py"])])
        [lines] = found.failed_tests
        self.assertEqual(lines, [
            "tools test_cmd.CommandTest::test_cmd: AssertionError: 1 != 0 : line 1",
            "  | line 16", "  | line 17", "  | line 18", "  | line 19", "  | line 20",
            "  | ERROR: the cause"])

    def test_counts_by_suite_of_a_repository_run(self) -> None:
        """The suites of test/dynamo, as the matrix and gpu-check run them
        from the repository: a dotted classname names the file; an XPASS
        (strict) and an error are failures, an xfail an expected failure, a
        file that did not collect (no class) a failure of that file."""
        report = self.tmp / "report.xml"
        results = "test.dynamo.test_pre_grad_results.PreGradResultsTests"
        report.write_text(f"""<testsuites><testsuite>
<testcase classname="{results}" name="test_a"/>
<testcase classname="{results}" name="test_b"><failure message="[XPASS(strict)] "/></testcase>
<testcase classname="{results}" name="test_c"><skipped type="pytest.xfail" message=""/></testcase>
<testcase classname="test.dynamo.test_pre_grad_pass_timing.PreGradPassTimingTests"
  name="test_d"><error message="fixture"/></testcase>
<testcase classname="test.dynamo.test_pre_grad_pass_timing.PreGradPassTimingTests"
  name="test_e"><skipped type="pytest.skip" message="no CUDA"/></testcase>
<testcase classname="" name="test.dynamo.test_real_models"><error message="collection failure"/>
</testcase></testsuite></testsuites>""")
        counted = {suite: str(counts) for suite, counts in counts_by_suite(report).items()}
        self.assertEqual(counted, {
            "test_pre_grad_results.py": "1 passed, 1 failed, 1 expected-fail",
            "test_pre_grad_pass_timing.py": "0 passed, 1 failed, 0 expected-fail, 1 skipped",
            "test_real_models.py": "0 passed, 1 failed, 0 expected-fail"})

    def test_no_test_collected_fails_the_job(self) -> None:
        found, codes = self.run_jobs({"test_good.py": SUITE}, [
            Job("selected-away", "tools", sys.executable, ["test_good.py", "-k", "nothing"])])
        self.assertEqual(codes, {"selected-away": 5})
        [row] = found.rows
        self.assertEqual((row.suite, row.counts), (
            "-", "pytest exit 5: no test collected (all deselected?)"))
        self.assertEqual(found.total.failed, 1)

    def test_every_job_must_have_what_its_tests_need(self) -> None:
        """PREGRAD_REQUIRE_ALL=1: a missing prerequisite is an error, not a
        skip (test/tools/prerequisites.py)."""
        _, codes = self.run_jobs({"test_env.py": "import os\n\ndef test_required():\n"
                                  "    assert os.environ['PREGRAD_REQUIRE_ALL'] == '1'\n"},
                                 [Job("tools", "tools", sys.executable, ["test_env.py"])])
        self.assertEqual(codes, {"tools": 0})

    def test_an_interpreter_that_is_not_there_fails_the_job(self) -> None:
        found, codes = self.run_jobs({}, [Job("gone", "tools", str(self.tmp / "no-python"), [])])
        self.assertEqual(codes, {"gone": None})
        self.assertEqual([(row.counts, row.verdict.split(",")[0]) for row in found.rows],
                         [("pytest did not run", "FAILED")])

    def test_stopping_the_runner_ends_a_running_job(self) -> None:
        """An abandoned run (a venv that failed, Ctrl-C) leaves no pytest behind."""
        started = self.tmp / "started"
        (self.tmp / "test_slow.py").write_text(
            f"import pathlib, time\n\ndef test_slow():\n"
            f"    pathlib.Path({str(started)!r}).touch()\n    time.sleep(120)\n")
        logs = self.tmp / "logs"
        logs.mkdir()
        with open(os.devnull, "w") as quiet:
            runner = PytestRunner(logs, os.environ, self.tmp, say=quiet)
            scheduler = Scheduler(runner, limit=1)
            scheduler.queue(Job("slow", "tools", sys.executable, ["test_slow.py"]))
            scheduler.queue(Job("never", "tools", sys.executable, ["test_slow.py"]))
            while not started.exists():
                time.sleep(0.1)  # until pytest is in the test
            begun = time.monotonic()
            scheduler.cancel_pending()
            runner.stop()
            scheduler.wait()
        self.assertLess(time.monotonic() - begun, 30)
        self.assertNotEqual(scheduler.outcomes["slow"].exit_code, 0)
        self.assertNotIn("never", scheduler.outcomes)


class CommandLineTest(ScratchTestCase):
    def matrix(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PREGRAD_CACHE": str(self.tmp / "cache")}
        return subprocess.run([str(REPO / "scripts" / "test.sh"), *args], capture_output=True,
                              text=True, env=env)

    def test_help_and_usage_errors(self) -> None:
        helped = self.matrix("--help")
        self.assertEqual(helped.returncode, 0)
        self.assertTrue(helped.stdout.startswith("Usage: scripts/test.sh"))
        for args, said in ((["--releases", "1.0.0"], "1.0.0 is not in patches/releases.tsv"),
                           (["--releases"], "--releases needs a list"),
                           (["--releases", ""], "--releases names no release"),
                           (["--frobnicate"], "unknown argument: --frobnicate")):
            refused = self.matrix(*args)
            self.assertEqual(refused.returncode, 2, args)
            self.assertIn(said, refused.stderr)

    def test_list_plans_jobs_as_data_and_makes_nothing(self) -> None:
        """Without venvs (an empty cache) the plan still names every job;
        the old spelling --bases v2.11.0 still works."""
        listed = self.matrix("--bases", "v2.11.0,v2.12.0", "--list", "--", "-x")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        jobs = [json.loads(line) for line in listed.stdout.splitlines()]
        self.assertEqual([job["name"] for job in jobs], [
            "patched-2.11.0-results", "patched-2.11.0", "tools", "tools-faults", "wheel-2.11.0",
            "uv-fleet", "patched-2.12.0-results", "patched-2.12.0"])  # no stock jobs: PYTEST_ARGS
        self.assertTrue(all(job["argv"][-1] == "-x" for job in jobs))
        self.assertEqual(jobs[2]["argv"], [
            "test/tools", "--ignore=test/tools/test_faults.py",
            "--ignore=test/tools/test_concurrency.py",
            "--ignore=test/tools/test_swapped_directories.py", "-m", "not own_job", "-x"])
        self.assertEqual(jobs[3]["argv"], ["test/tools/test_faults.py",
                                           "test/tools/test_concurrency.py",
                                           "test/tools/test_swapped_directories.py",
                                           "-m", "not own_job", "-x"])
        self.assertEqual(jobs[0]["env"], {
            "PREGRAD_EXPECT_PATCHED": "2.11.0", "OMP_NUM_THREADS": "1",
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "PREGRAD_KERNEL_STORE": str(self.tmp / "cache" / "kernels" / "torch-2.11.0-patched")})
        self.assertEqual({job["expected_s"] for job in jobs}, {None})  # never timed
        self.assertFalse((self.tmp / "cache").exists())
        self.assertIn("new-base rehearsal: not run", listed.stderr)

    def test_a_marker_expression_of_pytest_args_narrows_the_job_s_own(self) -> None:
        """pytest keeps the last -m only: one of PYTEST_ARGS is joined to
        the job's."""
        for args, argv in ((["-m", "slow", "-x"], ["-m", "(not own_job) and (slow)", "-x"]),
                           (["-mslow"], ["-m", "(not own_job) and (slow)"]),
                           (["-k", "shape"], ["-m", "not own_job", "-k", "shape"])):
            self.assertEqual(selecting("not own_job", args), argv, args)

    def test_list_of_a_full_run_has_stock_jobs_that_expect_their_failures(self) -> None:
        listed = self.matrix("--releases", "2.11.0", "--list")
        jobs = {job["name"]: job for job in map(json.loads, listed.stdout.splitlines())}
        self.assertEqual(sorted(jobs), ["patched-2.11.0", "patched-2.11.0-results",
                                        "stock-2.11.0", "uv-fleet", "wheel-2.11.0"])
        self.assertEqual(jobs["stock-2.11.0"]["env"], {
            "PREGRAD_EXPECT_STOCK": "2.11.0", "PREGRAD_STOCK_DISCRIMINATING": "2.11.0",
            "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "PREGRAD_KERNEL_STORE": str(self.tmp / "cache" / "kernels" / "torch-2.11.0")})
        self.assertEqual(jobs["stock-2.11.0"]["argv"][:2], ["-m", "not patched_only"])

    def test_the_oldest_and_newest_release_run_on_the_other_pythons_users_run(self) -> None:
        """2.9.0 on Python 3.10 and 2.15.0 on 3.13: the short tier with
        --verify's suite, stock (with the round trip) and patched, each in
        venvs of its own."""
        listed = self.matrix("--releases", "2.9.0,2.15.0", "--list")
        jobs = {job["name"]: job for job in map(json.loads, listed.stdout.splitlines())}
        for release, python in (("2.9.0", "3.10"), ("2.15.0", "3.13")):
            label = f"{release}-py{python}"
            stock, patched = jobs[f"stock-{label}-short"], jobs[f"patched-{label}-short"]
            self.assertEqual(stock["python"], str(self.tmp / "cache" / "venvs" / f"torch-{label}"
                                                  / "bin" / "python"))
            self.assertEqual(patched["python"], str(self.tmp / "cache" / "venvs"
                                                    / f"torch-{label}-patched" / "bin" / "python"))
            self.assertIn("test/dynamo/test_verify_command.py", stock["argv"])
            self.assertIn("test/dynamo/test_verify_command.py", patched["argv"])
            self.assertIn("test/dynamo/test_real_install_round_trip.py", stock["argv"])
            self.assertEqual(stock["env"]["PREGRAD_EXPECT_STOCK"], release)

    def test_short_plans_only_the_short_tier_of_the_named_releases(self) -> None:
        listed = self.matrix("--releases", "2.13.0", "--short", "--list")
        self.assertEqual([json.loads(line)["name"] for line in listed.stdout.splitlines()],
                         ["patched-2.13.0-short", "stock-2.13.0-short"])
        refused = self.matrix("--releases", "2.13.0", "--short", "--", "-x")
        self.assertEqual((refused.returncode, refused.stderr.strip()),
                         (2, "test.sh: --short takes no PYTEST_ARGS"))


@pytest.mark.usefixtures("patched_python")  # conftest.py: skips without
class StockExpectationTest(ScratchTestCase):
    """test/dynamo/conftest.py on this torch: a test stock_expectations.py
    says fails on stock 2.11.0 (the timing option's default), run on a torch
    that has the option, is a strict XPASS and fails the run. (Its patched
    run, where it must pass, is the patched jobs' own; one torch import here
    costs 10 to 15 s.)"""

    def pytest(self, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
             "test/dynamo/test_pre_grad_pass_timing.py", "-k", "test_config_default_is_default"],
            capture_output=True, text=True, cwd=REPO, env={**os.environ, **env})

    def test_a_stock_cell_that_passes_fails_the_run(self) -> None:
        as_stock = self.pytest(PREGRAD_EXPECT_STOCK="2.11.0")
        self.assertEqual(as_stock.returncode, 1, as_stock.stdout)
        self.assertIn("XPASS(strict)", as_stock.stdout)
