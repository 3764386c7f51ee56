"""`scripts/new-base --latest` (issue 48): the newest final torch release
on pip's configured index, read from its simple API on 127.0.0.1, is
"nothing new" where patches/releases.tsv has its row, and is served
otherwise; pre-releases and yanked files do not count. --check keeps
patches/ as it was; --report writes the Markdown a pull request takes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Dict, List, Tuple

from fake_install import REPO, source_python, STOCK
from fake_wheel import make_fake_wheel, release_files
from local_servers import Answer, ranges, Running, Seen, Server

NEW_BASE = REPO / "scripts" / "new-base"
SERVED_NEWEST = "2.15.0"  # the newest row of patches/releases.tsv


def json_page(files: List[Tuple[str, bool]]) -> bytes:
    """A PEP 691 project page naming `files` (name, yanked)."""
    return json.dumps({"meta": {"api-version": "1.0"}, "name": "torch", "files": [
        {"filename": name, "url": f"/files/{name}", "hashes": {}, "yanked": yanked}
        for name, yanked in files]}).encode()


class LatestReleaseTest(unittest.TestCase):
    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="pregrad-day-one-")
        self.addCleanup(scratch.cleanup)
        self.tmp = Path(scratch.name)
        self.patches = self.tmp / "patches"
        shutil.copytree(REPO / "patches", self.patches)
        self.before = {str(path.relative_to(self.patches)): path.read_bytes()
                       for path in sorted(self.patches.rglob("*")) if path.is_file()}
        self.wheels: Dict[str, bytes] = {}
        self.listed: List[Tuple[str, bool]] = []
        self.listed_on_test: List[Tuple[str, bool]] = []

    def handler(self, server: Server, seen: Seen) -> Answer:
        if seen.path.rstrip("/") == "/simple/torch":
            return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, \
                json_page(self.listed)
        if seen.path.rstrip("/") == "/test/simple/torch":  # torch's test index
            return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, \
                json_page(self.listed_on_test)
        name = seen.path.rsplit("/", 1)[-1]
        if name in self.wheels:
            return ranges(self.wheels[name], seen.headers.get("Range"))
        return 404, {}, b""

    def latest(self, *extra: str) -> Tuple[int, str, float]:
        return self.new_base("--latest", *extra)

    def new_base(self, *args: str) -> Tuple[int, str, float]:
        """scripts/new-base ARGS against the index on 127.0.0.1 (@TEST@ in
        an argument: the URL of its test index)."""
        with Running(self.handler) as index:
            env = {**os.environ, "PIP_CONFIG_FILE": os.devnull,
                   "PIP_INDEX_URL": f"{index.base}/simple", "PIP_EXTRA_INDEX_URL": "",
                   "PIP_FIND_LINKS": "", "PREGRAD_CACHE": str(self.tmp / "cache")}
            started = time.monotonic()
            done = subprocess.run([sys.executable, str(NEW_BASE), "--patches", str(self.patches),
                                   *(arg.replace("@TEST@", f"{index.base}/test/simple")
                                     for arg in args)],
                                  capture_output=True, text=True, env=env, timeout=600)
        return done.returncode, done.stdout + done.stderr, time.monotonic() - started

    def serve_wheel(self, version: str, changed: Dict[str, bytes]) -> str:
        """A fake torch `version` wheel of stock 2.11.0's files, `changed`
        appended to; its file name."""
        files = release_files(source_python(STOCK))
        for rel, tail in changed.items():
            files[rel] += tail
        directory = self.tmp / "wheels" / str(len(self.wheels))
        wheel = make_fake_wheel(directory, files, version)
        self.wheels[wheel.name] = wheel.read_bytes()
        return wheel.name

    def assertPatchesUnchanged(self) -> None:
        after = {str(path.relative_to(self.patches)): path.read_bytes()
                 for path in sorted(self.patches.rglob("*")) if path.is_file()}
        self.assertEqual(sorted(name for name in {*self.before, *after}
                                if self.before.get(name) != after.get(name)), [])

    def test_nothing_new_when_the_newest_final_release_is_served(self) -> None:
        tag = "cp311-cp311-manylinux_2_28_x86_64"
        self.listed = [(f"torch-2.14.1-{tag}.whl", False), (f"torch-2.15.0-{tag}.whl", False),
                       (f"torch-2.16.0rc1-{tag}.whl", False), (f"torch-2.16.0-{tag}.whl", True),
                       (f"torch-2.16.0.dev20261201-{tag}.whl", False)]
        report = self.tmp / "report.md"
        code, output, took = self.latest("--report", str(report))
        self.assertEqual((code, output),
                         (0, f"nothing new: {SERVED_NEWEST} is served "
                             f"({self.patches}/releases.tsv)\n"))
        self.assertLess(took, 10)
        self.assertTrue(report.read_text().startswith(f"# torch {SERVED_NEWEST}: nothing new\n"))
        self.assertPatchesUnchanged()

    def test_a_new_release_with_a_bases_files_is_served_by_its_row(self) -> None:
        wheel = make_fake_wheel(self.tmp / "wheels", release_files(source_python(STOCK)),
                                "2.16.0")
        self.wheels[wheel.name] = wheel.read_bytes()
        self.listed = [(wheel.name, False)]
        report = self.tmp / "report.md"
        code, output, _ = self.latest("--check", "--report", str(report))
        self.assertEqual(code, 3, output)
        self.assertIn(f"new: torch 2.16.0 is on the index and not in {self.patches}/"
                      "releases.tsv", output)
        self.assertIn("v2.11.0", output)
        self.assertIn("check: nothing was written", output)
        text = report.read_text()
        self.assertTrue(text.startswith("# torch 2.16.0: would be served (check: nothing "
                                        "written)\n"), text)
        self.assertPatchesUnchanged()

    def test_a_release_candidate_is_served_early_and_its_final_by_content(self) -> None:
        # torch's test index publishes a release candidate under the final's
        # number; here its compile_fx.py has a line v2.11.0's lacks.
        candidate = {"torch/_inductor/compile_fx.py": b"\n# in the release candidate\n"}
        self.listed_on_test = [(self.serve_wheel("2.16.0", candidate), False)]
        code, output, _ = self.new_base("2.16.0", "--index", "@TEST@", "--base-python",
                                        f"2.11.0={source_python(STOCK)}")
        self.assertEqual(code, 0, output)
        self.assertTrue((self.patches / "v2.16.0" / "series").is_file(), output)
        self.assertIn("listed 2.16.0 in", output)
        self.assertIn("2.16.0\t", (self.patches / "prereleases.tsv").read_text())
        # Its final's day, without the test index: other files are not served by content.
        other = {"torch/_inductor/compile_fx.py": b"\n# changed after the candidate\n"}
        self.wheels.clear()
        self.listed = [(self.serve_wheel("2.16.0", other), False)]
        code, output, _ = self.latest("--tier", "none")
        self.assertEqual(code, 1, output)
        self.assertIn("torch 2.16.0's files are not the pre-release's", output)
        self.assertIn("compile_fx.py", output)
        self.assertIn("serve the final again (scripts/new-base 2.16.0)", output)
        self.assertIn("2.16.0\t", (self.patches / "prereleases.tsv").read_text())
        # The candidate's files: served by its row, the line removed.
        self.wheels.clear()
        self.listed = [(self.serve_wheel("2.16.0", candidate), False)]
        report = self.tmp / "report.md"
        code, output, _ = self.latest("--tier", "none", "--report", str(report))
        self.assertEqual(code, 3, output)
        self.assertIn("removed 2.16.0 from", output)
        self.assertNotIn("2.16.0\t", (self.patches / "prereleases.tsv").read_text())
        self.assertTrue(report.read_text().startswith("# torch 2.16.0: served by content\n"))

    def test_a_named_release_with_latest_is_a_usage_error(self) -> None:
        done = subprocess.run([sys.executable, str(NEW_BASE), "2.16.0", "--latest"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2)
        self.assertIn("--latest asks the index for the RELEASE: name none", done.stderr)
        done = subprocess.run([sys.executable, str(NEW_BASE), "--latest", "--index",
                               "https://download.pytorch.org/whl/test/cpu"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2)
        self.assertIn("--index takes the http(s) URL of a simple index, with a named RELEASE",
                      done.stderr)


if __name__ == "__main__":
    unittest.main()
