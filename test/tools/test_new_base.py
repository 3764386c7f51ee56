"""scripts/new-base on the real release files, and what a release this
project has not seen gets from apply.sh.

Needs the stock venv of every release (scripts/test.sh passes them as
PREGRAD_RELEASE_PYTHONS=2.9.0=PY,2.9.1=PY,...; it runs this file as a job of
its own once every venv is set up). The rehearsal removes each base's series
in turn, in a copy of patches/, and regenerates it from each neighbour
(test/harness/rehearse_bases.py): a clean merge must give the committed
post-images byte for byte, unless REHEARSAL says why not; a conflict must
name its hunk and leave patches/ as it was.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Dict

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "harness"))
from rehearse_bases import rehearse_all, tree_digest  # noqa: E402

NEW_BASE = REPO / "scripts" / "new-base"
APPLY = REPO / "scripts" / "apply.sh"
PYTHONS = "PREGRAD_RELEASE_PYTHONS"
AOT = "torch/_functorch/aot_autograd.py"

# (topic, base, regenerated from) -> outcome. "differs": the merge is clean
# but is not the committed series, for the reason given.
REHEARSAL = {
    ("pre-grad-pass-timing", "v2.9.0", "v2.9.1"): "identical",
    ("pre-grad-pass-timing", "v2.9.1", "v2.9.0"): "identical",
    ("pre-grad-pass-timing", "v2.9.1", "v2.10.0"): "conflict",
    ("pre-grad-pass-timing", "v2.10.0", "v2.9.1"): "conflict",
    ("pre-grad-pass-timing", "v2.10.0", "v2.11.0"): "conflict",
    ("pre-grad-pass-timing", "v2.11.0", "v2.10.0"): "conflict",
    ("pre-grad-pass-timing", "v2.12.0", "v2.13.0"): "identical",
    ("pre-grad-pass-timing", "v2.13.0", "v2.12.0"): "identical",
    ("pre-grad-pass-timing", "v2.13.0", "v2.14.1"): "conflict",
    ("pre-grad-pass-timing", "v2.14.1", "v2.13.0"): "conflict",
    ("autocast-cache-key", "v2.9.1", "v2.10.0"): "identical",
    ("autocast-cache-key", "v2.10.0", "v2.9.1"): "identical",
    ("autocast-cache-key", "v2.10.0", "v2.11.0"): "conflict",
    ("autocast-cache-key", "v2.11.0", "v2.10.0"): "conflict",
    ("autocast-cache-key", "v2.11.0", "v2.12.0"): "conflict",
    ("autocast-cache-key", "v2.12.0", "v2.11.0"): "differs",
    ("autocast-cache-key", "v2.12.0", "v2.13.0"): "conflict",
    ("autocast-cache-key", "v2.13.0", "v2.12.0"): "conflict",
    ("autocast-cache-key", "v2.13.0", "v2.14.1"): "differs",
    ("autocast-cache-key", "v2.14.1", "v2.13.0"): "conflict",
    ("cpu-isa-probe", "v2.9.1", "v2.10.0"): "identical",
    ("cpu-isa-probe", "v2.10.0", "v2.9.1"): "identical",
    ("cpu-isa-probe", "v2.10.0", "v2.11.0"): "identical",
    ("cpu-isa-probe", "v2.11.0", "v2.10.0"): "identical",
    ("cpu-isa-probe", "v2.11.0", "v2.12.0"): "identical",
    ("cpu-isa-probe", "v2.12.0", "v2.11.0"): "identical",
}
# Why a clean merge is not the committed series: the neighbour's series
# lacks a concern this base needs.
WHY_DIFFERS = {
    ("autocast-cache-key", "v2.12.0", "v2.11.0"): "v2.11.0's series has no enter/exit "
    "patch (#192555): 2.12.0 would keep bypassing the cache for autocast regions",
    ("autocast-cache-key", "v2.13.0", "v2.14.1"): "v2.14.1's series has no enter/exit "
    "patch (#192555, upstream from 2.14.0): 2.13.0 would keep bypassing the cache",
}


def release_pythons() -> Dict[str, str]:
    return dict(item.split("=", 1) for item in os.environ.get(PYTHONS, "").split(",") if item)


def run(*args: str, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(arg) for arg in args], capture_output=True, text=True, env=env)


def post_images(patch: Path) -> list[str]:
    """A patch's diff lines from its first `diff --git` on: what it does,
    without the message that says where it came from."""
    lines = [line for line in patch.read_text().splitlines()
             if line.startswith(("index ", "diff --git", "@@", "+", "-", " "))]
    first = next(i for i, line in enumerate(lines) if line.startswith("diff --git"))
    return lines[first:]


def unseen_copy(python: str, root: Path) -> str:
    """A hard-linked copy of `python`'s venv whose aot_autograd.py differs
    from every base's, its RECORD updated: a release this project has not
    seen, as pip would install it."""
    venv = Path(python).parent.parent
    copy = root / "unseen"
    subprocess.run(["cp", "-al", str(venv), str(copy)], check=True)
    site = Path(run(str(copy / "bin" / "python"), "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    target = site / AOT
    data = target.read_bytes() + b"# a release this project has not seen\n"
    target.unlink()  # a new inode: the stock venv keeps its bytes
    target.write_bytes(data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = next(site.glob("torch-*.dist-info/RECORD"))
    lines = [f"{AOT},sha256={digest},{len(data)}" if line.startswith(AOT + ",") else line
             for line in record.read_text().splitlines()]
    record.unlink()
    record.write_text("\n".join(lines) + "\n")
    return str(copy / "bin" / "python")


@unittest.skipUnless(os.environ.get(PYTHONS), f"needs {PYTHONS} (scripts/test.sh sets it)")
class NewBaseTest(unittest.TestCase):
    def setUp(self) -> None:
        self.pythons = release_pythons()
        self.tmp = Path(tempfile.mkdtemp(prefix="pregrad-new-base-test-"))
        self.addCleanup(shutil.rmtree, self.tmp)
        self.patches = self.tmp / "patches"
        shutil.copytree(REPO / "patches", self.patches)

    def new_base(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run(str(NEW_BASE), *args, "--patches", str(self.patches),
                   "--scratch", str(self.tmp / "scratch"))

    def test_each_base_regenerates_from_its_neighbours_as_expected(self) -> None:
        done = rehearse_all(self.pythons)
        self.assertEqual(sorted((d.topic, d.base, d.neighbour) for d in done), sorted(REHEARSAL))
        for item in done:
            with self.subTest(topic=item.topic, base=item.base, neighbour=item.neighbour):
                self.assertEqual(item.outcome, REHEARSAL[item.topic, item.base, item.neighbour],
                                 item.output)
                if item.outcome == "differs":
                    self.assertIn((item.topic, item.base, item.neighbour), WHY_DIFFERS)
                if item.outcome == "conflict":
                    self.assertTrue(item.untouched, item.output)
                    self.assertIn(": hunk @@ -", item.output)
                    self.assertIn("conflicting lines in ", item.output)

    def test_regenerated_v2_13_0_equals_the_committed_series(self) -> None:
        for path in (self.patches / "v2.13.0").iterdir():
            if path.is_file():
                path.unlink()
        made = self.new_base("2.13.0", "--from", "v2.12.0", "--topic", "pre-grad-pass-timing",
                             "--python", self.pythons["2.13.0"],
                             "--base-python", f"2.12.0={self.pythons['2.12.0']}")
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        for name in (REPO / "patches" / "v2.13.0").glob("*.patch"):
            self.assertEqual(post_images(self.patches / "v2.13.0" / name.name),
                             post_images(name), name.name)
        message = (self.patches / "v2.13.0" / sorted(
            p.name for p in (self.patches / "v2.13.0").glob("*.patch"))[0]).read_text()
        self.assertIn("Rebased-From: v2.12.0 (applied as is)", message)
        self.assertIn("2.13.0", (self.patches / "candidates.tsv").read_text())
        self.assertIn("scripts/test.sh --releases 2.13.0", made.stdout)

    def test_a_release_whose_files_are_a_bases_gets_only_its_row(self) -> None:
        rows = self.patches / "releases.tsv"
        rows.write_text("".join(line for line in rows.read_text().splitlines(keepends=True)
                                if not line.startswith("2.12.1\t")))
        made = self.new_base("2.12.1", "--python", self.pythons["2.12.1"])
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        self.assertIn("2.12.1\tv2.12.0\tv2.12.0\tv2.12.0\n", rows.read_text())
        self.assertFalse((self.patches / "v2.12.1").exists())
        self.assertFalse((self.patches / "candidates.tsv").exists())

    def test_check_writes_nothing(self) -> None:
        shutil.rmtree(self.patches / "v2.13.0")
        before = tree_digest(self.patches)
        checked = self.new_base("2.13.0", "--python", self.pythons["2.13.0"], "--check",
                                "--topic", "pre-grad-pass-timing")
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        self.assertIn("would write ", checked.stdout)
        self.assertIn("check: nothing was written", checked.stdout)
        self.assertEqual(tree_digest(self.patches), before)
        self.assertFalse((self.tmp / "scratch").exists())

    def test_a_conflict_finished_by_hand_is_picked_up_by_the_next_run(self) -> None:
        shutil.rmtree(self.patches / "v2.13.0" / "autocast-cache-key")
        args = ("2.13.0", "--from", "v2.11.0", "--topic", "autocast-cache-key",
                "--python", self.pythons["2.13.0"],
                "--base-python", f"2.11.0={self.pythons['2.11.0']}")
        stopped = self.new_base(*args)
        self.assertEqual(stopped.returncode, 1, stopped.stdout + stopped.stderr)
        self.assertIn("git am --continue", stopped.stdout)
        work = self.tmp / "scratch" / "autocast-cache-key"
        # What a person does: resolve (here: keep the patch's side), add, continue.
        for command in (["checkout", "--theirs", "torch"], ["add", "-A"], ["am", "--continue"]):
            done = subprocess.run(["git", *command], cwd=work, capture_output=True, text=True,
                                  env=dict(os.environ, GIT_EDITOR="true"))
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        picked = self.new_base(*args)
        self.assertEqual(picked.returncode, 0, picked.stdout + picked.stderr)
        self.assertIn("picking up the series finished in", picked.stdout)
        series = self.patches / "v2.13.0" / "autocast-cache-key" / "series"
        self.assertTrue(series.is_file())
        first = sorted((series.parent).glob("*.patch"))[0].read_text()
        self.assertIn("Rebased-From: v2.11.0 (conflict resolved by hand)", first)

    def test_unseen_release_status_names_the_defect_and_exits_3(self) -> None:
        python = unseen_copy(self.pythons["2.12.0"], self.tmp)
        status = run(str(APPLY), "--python", python, "--status")
        self.assertEqual(status.returncode, 3, status.stdout + status.stderr)
        self.assertIn("unseen: torch 2.12.0 has the feature", status.stdout)
        self.assertIn("The results defect is known on every release from 2.12.0 through",
                      status.stdout)
        self.assertIn("scripts/new-base 2.12.0", status.stdout)

    def test_unseen_release_apply_refuses_and_changes_nothing(self) -> None:
        python = unseen_copy(self.pythons["2.12.0"], self.tmp)
        site = next((self.tmp / "unseen" / "lib").glob("python*/site-packages"))
        before = (sorted(os.listdir(site)), tree_digest(site / "torch" / "_inductor"),
                  tree_digest(site / "torch" / "_functorch"))
        applied = run(str(APPLY), "--python", python)
        self.assertEqual(applied.returncode, 1, applied.stdout + applied.stderr)
        self.assertIn("scripts/apply.sh: unseen: torch 2.12.0", applied.stderr)
        self.assertIn("Nothing was changed.", applied.stderr)
        self.assertEqual((sorted(os.listdir(site)), tree_digest(site / "torch" / "_inductor"),
                          tree_digest(site / "torch" / "_functorch")), before)

    def test_expect_patched_refuses_an_unseen_release(self) -> None:
        python = unseen_copy(self.pythons["2.12.0"], self.tmp)
        guard = run(str(APPLY), "--python", python, "--status", "--expect", "patched")
        self.assertNotEqual(guard.returncode, 0)
        self.assertIn("expected patched: pre-grad-pass-timing is unseen", guard.stdout)


if __name__ == "__main__":
    unittest.main()
