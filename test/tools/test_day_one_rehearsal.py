"""Day one rehearsed end to end (issue 48): in a scratch clone that has
forgotten a release, `scripts/new-base --latest` finds it on an index on
127.0.0.1, serves it, runs its tier and commits it on a branch; for a
release whose files conflict (2.8.0) it ends at the conflict and says where.

The forgotten release is 2.13.0, whose pre-grad-pass-timing series the
replay from v2.12.0 reproduces: its real wheel (/opt/wheels' 2.13.0+cpu, the
one its venv was installed from) is served by range. The tier is the short
one (`scripts/test.sh --releases 2.13.0 --short`, in a cache of its own
whose venv is a hard-linked copy of the real one): the gate's own matrix
gives the same files the full tier in the same run. The local index serves
torch alone, as the release's day-one index would be read; what the tier
installs besides (PyPA's wheel, packaging and urllib3, for the stock
`--wheel` rules) comes from a find-links directory the test fills from the
configured index first. Runs in the new-base job (PREGRAD_RELEASE_PYTHONS).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Dict, List

from local_servers import Answer, ranges, Running, Seen, Server, simple_page
from prerequisites import missing

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "tools"))
from test_new_base import post_images, PYTHONS, release_pythons  # noqa: E402
sys.path.insert(0, str(REPO))
from maint.release_tier import results_hold, Step  # noqa: E402
from torch_backport.engine import PYPA  # noqa: E402

FORGOTTEN = "2.13.0"
WHEELS = sorted(Path("/opt/wheels").glob(f"torch-{FORGOTTEN}+cpu-*.whl"))
IDENTITY = {"GIT_AUTHOR_NAME": "day-one", "GIT_AUTHOR_EMAIL": "day-one@example.invalid",
            "GIT_COMMITTER_NAME": "day-one", "GIT_COMMITTER_EMAIL": "day-one@example.invalid"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env={**os.environ, **IDENTITY})
    assert done.returncode == 0, done.stderr
    return done.stdout


def verify_table(report: str, build: str) -> Step:
    """The --verify output the report shows for `build`."""
    block = report.split(f"### --verify, {build} ", 1)[1].split("```\n", 2)[1]
    return Step([], 0, block.splitlines(), 0.0)


def entries(table: Path) -> List[str]:
    """A table's rows, without its comments (which say where it came from)."""
    return [line for line in table.read_text().splitlines() if not line.startswith("#")]


def scratch_clone(into: Path) -> Path:
    """The work tree's tracked files as they are now (uncommitted edits
    included), in a new repository with one commit."""
    names = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, names):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    git(into, "init", "-q")
    git(into, "add", "-A")
    git(into, "commit", "-q", "-m", "the project")
    return into


@unittest.skipUnless(os.environ.get(PYTHONS), f"needs {PYTHONS} (scripts/test.sh sets it)")
class DayOneRehearsalTest(unittest.TestCase):
    def setUp(self) -> None:
        self.pythons = release_pythons()
        scratch = tempfile.TemporaryDirectory(prefix="pregrad-day-one-rehearsal-")
        self.addCleanup(scratch.cleanup)
        self.tmp = Path(scratch.name)

    def latest(self, clone: Path, cache: Path, listed: List[str], data: Dict[str, bytes],
               *extra: str) -> subprocess.CompletedProcess[str]:
        def index(server: Server, seen: Seen) -> Answer:
            if seen.path.rstrip("/") == "/simple/torch":
                return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, \
                    simple_page([(name, url) for name, url in zip(data, listed)])
            name = seen.path.rsplit("/", 1)[-1].replace("%2B", "+")
            return ranges(data[name], seen.headers.get("Range")) if name in data else \
                (404, {}, b"")

        tools = self.tmp / "tool-wheels"
        if not tools.is_dir():  # from the configured index, before the local one stands in
            fetched = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d",
                                      str(tools), *PYPA], capture_output=True, text=True)
            if fetched.returncode != 0:
                missing(f"needs pip's index for {' '.join(PYPA)}: {fetched.stderr[-500:]}")
        with Running(index) as served:
            env = {**os.environ, **IDENTITY, "PIP_CONFIG_FILE": os.devnull,
                   "PIP_INDEX_URL": f"{served.base}/simple", "PIP_EXTRA_INDEX_URL": "",
                   "PIP_FIND_LINKS": str(tools), "PREGRAD_CACHE": str(cache)}
            return subprocess.run([str(clone / "scripts" / "new-base"), "--latest", *extra],
                                  capture_output=True, text=True, env=env, timeout=1800)

    @unittest.skipUnless(WHEELS, f"needs the machine's torch {FORGOTTEN}+cpu wheel in "
                         "/opt/wheels")
    def test_a_forgotten_release_is_served_tested_and_committed_on_a_branch(self) -> None:
        clone = scratch_clone(self.tmp / "clone")
        base = clone / "patches" / f"v{FORGOTTEN}"
        for path in [*base.glob("*.patch"), base / "series", base / "pristine.tsv"]:
            path.unlink()
        rows = clone / "patches" / "releases.tsv"
        rows.write_text("".join(line for line in rows.read_text().splitlines(keepends=True)
                                if not line.startswith(f"{FORGOTTEN}\t")))
        git(clone, "commit", "-q", "-a", "-m", f"forget {FORGOTTEN}'s series")
        forgot = git(clone, "rev-parse", "HEAD").strip()
        cache = self.tmp / "cache"
        (cache / "venvs").mkdir(parents=True)
        stock_venv = Path(self.pythons[FORGOTTEN]).parent.parent
        subprocess.run(["cp", "-al", str(stock_venv), str(cache / "venvs" / stock_venv.name)],
                       check=True)
        wheel = WHEELS[-1]
        report = self.tmp / "day-one.md"

        made = self.latest(clone, cache, [f"/files/{wheel.name.replace('+', '%2B')}"],
                           {wheel.name: wheel.read_bytes()}, "--tier", "short", "--branch",
                           "--base-python", f"2.12.0={self.pythons['2.12.0']}",
                           "--report", str(report))

        said = made.stdout + made.stderr[-3000:] + (
            report.read_text() if report.is_file() else "")
        self.assertEqual(made.returncode, 3, said)
        self.assertIn("short tier: served-candidate", made.stdout)
        branch = f"day-one/torch-{FORGOTTEN}"
        self.assertEqual(git(clone, "branch", "--show-current").strip(), branch)
        self.assertEqual(git(clone, "rev-list", f"{forgot}..HEAD").split(), [
            git(clone, "rev-parse", "HEAD").strip()])
        self.assertEqual(git(clone, "status", "--porcelain", "--", "patches", "README.md",
                             "docs"), "")
        committed = sorted(git(clone, "diff", "--name-only", forgot, "HEAD").split())
        self.assertEqual(committed, sorted([
            *(f"patches/v{FORGOTTEN}/{p.name}" for p in (REPO / "patches" / f"v{FORGOTTEN}")
              .iterdir() if p.is_file()),
            "patches/candidates.tsv", "patches/releases.tsv", "README.md"]))
        for name in (REPO / "patches" / f"v{FORGOTTEN}").glob("*.patch"):
            self.assertEqual(post_images(base / name.name), post_images(name), name.name)
        self.assertEqual(entries(base / "pristine.tsv"),
                         entries(REPO / "patches" / f"v{FORGOTTEN}" / "pristine.tsv"))
        self.assertEqual(rows.read_text(), (REPO / "patches" / "releases.tsv").read_text())
        message = git(clone, "log", "-1", "--format=%B")
        self.assertIn(f"Serve torch {FORGOTTEN}", message)
        self.assertRegex(message, r"The short tier: summary: \d+ passed, 0 failed")
        text = report.read_text()
        self.assertTrue(text.startswith(f"# torch {FORGOTTEN}: served-candidate\n"), text[:200])
        self.assertRegex(text, r"summary: \d+ passed, 0 failed")
        self.assertIn("### --verify, stock (exit 1", text)
        self.assertIn("### --verify, patched (exit 0", text)
        self.assertIn("verify: all 6 cells hold", text)
        self.assertIn("  results: with freezing, the late pre-grad passes fold", text)
        # The upstream-fixed rule on these real tables: the patched build's
        # stands in for a stock release whose numbers upstream fixed.
        self.assertEqual([results_hold(verify_table(text, build)) for build in
                          ("stock", "patched")], [False, True])

    def test_a_release_whose_files_conflict_ends_at_the_conflict(self) -> None:
        """torch 2.8.0, read by range from the index pip is configured with
        (its wheel listed on 127.0.0.1 by its real address): no topic's
        series merges, exit 1, and the report names each patch, file and
        hunk; the clone is left as it was."""
        from torch_backport.download import pip_config, simple_index, transport
        found, why = simple_index.find_wheel("2.8.0", "3.11", None, pip_config.load(),
                                             transport.shared())
        assert found is not None, why
        clone = scratch_clone(self.tmp / "clone")
        head = git(clone, "rev-parse", "HEAD")
        report = self.tmp / "day-one.md"
        bases = [f"--base-python={release}={python}" for release, python in self.pythons.items()]
        made = self.latest(clone, self.tmp / "cache", [found.url], {found.filename: b""},
                           *bases, "--report", str(report))
        self.assertEqual(made.returncode, 1, made.stdout + made.stderr[-3000:])
        self.assertTrue(report.is_file(), made.stdout + made.stderr[-3000:])
        text = report.read_text()
        self.assertTrue(text.startswith("# torch 2.8.0: conflict\n"), text[:200])
        for topic in ("pre-grad-pass-timing", "autocast-cache-key", "cpu-isa-probe"):
            self.assertIn(f"topic {topic} is not written", text)
        self.assertRegex(text, r"0001-[^ ]+\.patch")
        self.assertRegex(text, r"torch/_inductor/[a-z_/]+\.py")
        self.assertIn("hunk @@ -", text)
        self.assertEqual(git(clone, "rev-parse", "HEAD"), head)
        self.assertEqual(git(clone, "status", "--porcelain"), "")


if __name__ == "__main__":
    unittest.main()
