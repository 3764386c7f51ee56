"""Bad inputs and damaged installs: each case a user reported, each refused or
recovered with a message that says what and where, and nothing lost.

A damaged series is tried on a copy of this project (scripts/ and patches/ in
a scratch directory), so the repository's own patches are never touched.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import unittest
from pathlib import Path

from checkout_repo import make_checkout, site_of
from fake_install import (copy_project, InstallTestCase, MANIFEST, REPO, source_python,
                          STATE_DIRNAME, STOCK, TOUCHED)

CONFIG = "torch/_inductor/config.py"
PATCH_0003 = "0003-inductor-add-pre_grad_pass_timing-early-late-default.patch"


class ReliabilityTest(InstallTestCase):
    scratch_prefix = "pregrad-reliability-"
    maxDiff = None

    def project_copy(self) -> Path:
        """scripts/, torch_backport/ and patches/ of this project, to damage a
        patch in."""
        return copy_project(self.tmp / "project")

    def cut_0003_before_config(self, project: Path) -> Path:
        patch = project / "patches" / "v2.11.0" / PATCH_0003
        text = patch.read_text()
        patch.write_text(text[: text.index(f"diff --git a/{CONFIG}")])
        return patch

    # A damaged series is refused before anything is written.

    def test_patch_cut_at_a_file_boundary_is_refused_everywhere(self) -> None:
        project = self.project_copy()
        self.cut_0003_before_config(project)
        install = self.install()
        before = install.snapshot()
        code, output = install.run(apply=project / "scripts" / "apply.sh")
        self.assertEqual(code, 1, output)
        self.assertIn(f"patches/v2.11.0/{PATCH_0003}: the diffstat names {CONFIG}, but the "
                      "patch has no diff for it (cut short?)", output)
        self.assertEqual(install.snapshot(), before)
        checked = subprocess.run(
            [str(project / "scripts" / "check-patches"), "--python",
             source_python(STOCK), "v2.11.0"], capture_output=True, text=True)
        self.assertEqual(checked.returncode, 1)
        self.assertIn("the diffstat says 3 file(s) changed, the patch has 2 diff section(s)",
                      checked.stdout)

    def test_patch_cut_mid_hunk_is_refused_by_checkout_mode_without_a_traceback(self) -> None:
        project = self.project_copy()
        patch = project / "patches" / "v2.11.0" / PATCH_0003
        lines = patch.read_text().splitlines(keepends=True)
        patch.write_text("".join(lines[:-20]))
        checkout = make_checkout(self.tmp / "pytorch", site_of(source_python(STOCK)))
        before = checkout.state()
        code, output = checkout.run(apply=project / "scripts" / "apply.sh")
        self.assertEqual(code, 1, output)
        self.assertNotIn("Traceback", output)
        self.assertRegex(output, rf"{PATCH_0003}: torch/_inductor/config.py: hunk @@ -\d+ has "
                                 r"\d+ of \d+ old and \d+ of \d+ new line\(s\)")
        self.assertEqual(checkout.state(), before)

    def test_hand_edited_patch_that_still_applies_is_refused_by_its_post_image(self) -> None:
        project = self.project_copy()
        patch = project / "patches" / "v2.11.0" / PATCH_0003
        text = patch.read_text()
        # Same line counts, different content: only the post-image blob tells.
        edited = text.replace('+pre_grad_pass_timing: Literal["early", "late", "default"] = ',
                              '+pre_grad_pass_timing: Literal["early", "late", "default"]  = ', 1)
        self.assertNotEqual(edited, text)
        patch.write_text(edited)
        install = self.install()
        before = install.snapshot()
        code, output = install.run(apply=project / "scripts" / "apply.sh")
        self.assertEqual(code, 1, output)
        self.assertIn(f"{PATCH_0003}: {CONFIG} came out as blob", output)
        self.assertIn("the patch was edited or is not whole; nothing was changed", output)
        self.assertEqual(install.snapshot(), before)

    def test_patch_paths_are_confined_to_torch(self) -> None:
        project = self.project_copy()
        patch = project / "patches" / "v2.11.0" / PATCH_0003
        patch.write_text(patch.read_text().replace(f"a/{CONFIG} b/{CONFIG}",
                                                   "a/../setup.py b/../setup.py"))
        code, output = self.install().run("--check", apply=project / "scripts" / "apply.sh")
        self.assertEqual(code, 1)
        self.assertIn("../setup.py: only relative paths under torch/ may be patched", output)

    # Installs changed by hand are described as they are.

    def test_one_file_put_back_by_hand_is_partial_then_completed_or_reverted(self) -> None:
        install = self.install()
        pristine = install.snapshot()
        self.assertEqual(install.run()[0], 0)
        patched = install.snapshot()
        install.path(CONFIG).write_bytes(pristine[CONFIG])
        code, output = install.run("--status")
        self.assertEqual(code, 1)
        self.assertIn(f"  pristine  {CONFIG}", output)
        self.assertIn("partly reverted by hand", output)
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertIn(f"  patched {CONFIG} again", output)
        self.assertEqual(install.snapshot(), patched)
        install.path(CONFIG).write_bytes(pristine[CONFIG])
        code, output = install.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertEqual(install.snapshot(), pristine)

    def test_deleted_file_is_reported_missing(self) -> None:
        install = self.install()
        install.path(CONFIG).unlink()
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 1)
        self.assertIn(f"<site>/{CONFIG}: is missing", output)
        self.assertEqual(install.snapshot(), before)
        self.assertIn(f"  missing   {CONFIG}", install.run("--status")[1])

    def test_symlinked_file_is_refused_and_stays_a_link(self) -> None:
        install = self.install()
        real = self.tmp / "elsewhere" / "config.py"
        real.parent.mkdir()
        real.write_bytes(install.path(CONFIG).read_bytes())
        install.path(CONFIG).unlink()
        install.path(CONFIG).symlink_to(real)
        before = real.read_bytes()
        code, output = install.run()
        self.assertEqual(code, 1)
        self.assertIn("linked: the files the series touches are symbolic links into another "
                      "directory", output)
        self.assertIn("patching them would change every venv that shares it", output)
        self.assertTrue(install.path(CONFIG).is_symlink())
        self.assertEqual(real.read_bytes(), before)

    def test_patched_install_without_its_backups_is_recognised(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        shutil.rmtree(install.site / STATE_DIRNAME)
        code, output = install.run("--status")
        self.assertEqual(code, 1)
        self.assertIn("patched without backups: the files are exactly what this series makes",
                      output)
        self.assertEqual(install.run()[0], 0)
        before = install.snapshot()
        code, output = install.run("--revert")
        self.assertEqual(code, 1)
        self.assertIn("the backups in <site>/.torch-pregrad-backport are gone, so nothing was "
                      "reverted; reinstall torch", output)
        self.assertEqual(install.snapshot(), before)

    def test_state_dir_without_manifest_is_rolled_back(self) -> None:
        """What a --revert killed in its final cleanup used to leave."""
        install = self.install()
        pristine = install.snapshot()
        self.assertEqual(install.run()[0], 0)
        (install.site / STATE_DIRNAME / MANIFEST).unlink()
        code, output = install.run("--status")
        self.assertEqual(code, 1)
        self.assertIn("has no manifest.json (a run was killed part-way)", output)
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertIn("rolled back an interrupted earlier run: restored 5 file(s)", output)
        self.assertEqual(install.run("--revert")[0], 0)
        self.assertEqual(install.snapshot(), pristine)

    # Interpreters, runners and output directories.

    def fake_python(self, answer: str) -> Path:
        """An "interpreter" that prints `answer` to whatever it is asked: what a
        version probe gets from Python 2.7 (no 3.9 syntax runs there)."""
        fake = self.tmp / "python2.7"
        fake.write_text(f"#!/bin/sh\necho '{answer}'\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        return fake

    def test_old_python_is_refused_with_the_minimum(self) -> None:
        fake = self.fake_python("old 2.7")  # apply.sh's probe prints "old X.Y"
        result = subprocess.run([str(REPO / "scripts" / "apply.sh"), "--python", str(fake)],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr, f"scripts/apply.sh: {fake} is Python 2.7; apply.sh needs "
                         "Python 3.9 or later (torch 2.9 and later need 3.10 anyway)\n")

    def test_check_patches_refuses_an_old_python(self) -> None:
        fake = self.fake_python("2.7")  # check-patches' probe prints "X.Y"
        result = subprocess.run([str(REPO / "scripts" / "check-patches"), "--python", str(fake)],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, f"scripts/check-patches: {fake} is Python 2.7; it needs "
                         "Python 3.9 or later\n")

    def test_upstream_runner_without_pytest_changes_nothing(self) -> None:
        install = self.install()  # a venv without pytest
        checkout = self.tmp / "pytorch"
        (checkout / "test" / "dynamo").mkdir(parents=True)
        (checkout / "test" / "dynamo" / "test_aot_autograd_cache.py").write_text("")
        before = install.snapshot()
        result = subprocess.run(
            [str(REPO / "scripts" / "run-upstream-tests.sh"), str(checkout),
             "--python", str(install.python)], capture_output=True, text=True)
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot run pytest", result.stderr)
        self.assertIn("nothing was changed", result.stderr)
        self.assertEqual(install.snapshot(), before)

    def test_overlay_refuses_listed_paths_outside_its_directory(self) -> None:
        out = self.tmp / "overlay"
        install = self.install()
        self.assertEqual(install.run("--overlay", "v2.11.0", "--out", str(out))[0], 0)
        victim = self.tmp / "victim.txt"
        victim.write_text("keep me")
        sums = out / "SHA256SUMS"
        sums.write_text(sums.read_text() + f"{'0' * 64}  ../victim.txt\n")
        code, output = install.run("--overlay", "v2.11.0", "--out", str(out))
        self.assertEqual(code, 1)
        self.assertIn("names '../victim.txt', which is not a file under torch/", output)
        self.assertEqual(victim.read_text(), "keep me")
        self.assertTrue(all((out / rel).is_file() for rel in TOUCHED))

    def test_readme_table_of_what_can_go_wrong_matches_code_and_tests(self) -> None:
        """Every message fragment quoted in the docs/what-can-go-wrong.md table
        is in the product (torch_backport/, scripts/), and every test it names
        exists."""
        readme = (REPO / "docs" / "what-can-go-wrong.md").read_text()
        table = readme[readme.index("## What can go wrong"):]
        rows = [line for line in table.splitlines() if line.startswith("| ") and "`test_" in line]
        self.assertGreater(len(rows), 15)
        # Messages are split over adjacent string literals: join them.
        scripts = re.sub(r"[\"']\s*\n\s*[rf]*[\"']", "", "".join(
            path.read_text() for part in ("torch_backport", "scripts")
            for path in sorted((REPO / part).rglob("*")) if path.is_file()
            and path.suffix in (".py", ".sh", "")))
        tests = "".join(path.read_text() for path in (REPO / "test" / "tools").glob("*.py"))
        for row in rows:
            said = row.split(" | ")[1]
            for fragment in re.findall(r'"([^"]+)"', said):
                for piece in fragment.split(" … "):
                    piece = piece.strip("… ")
                    if piece:
                        self.assertTrue(piece in scripts,
                                        f"{piece!r} of the docs row {row[:60]!r} is "
                                        "in no product file")
            for name in re.findall(r"`(test_\w+)`", row.split(" | ")[-1]):
                self.assertTrue(f"def {name}(" in tests, f"no test {name} in test/tools")

    def test_compare_lists_regressions_and_fixes_of_upstream_tests(self) -> None:
        """junit_summary.py --compare, run-upstream-tests.sh's table: each
        build's counts, then the tests that pass stock and fail patched (exit
        1), those fixed, and those that ran on stock only."""
        def report(name: str, cases: str) -> str:
            path = self.tmp / name
            path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")
            return str(path)

        stock = report("stock.xml", """
<testcase classname="test_a.T" name="test_kept"/>
<testcase classname="test_a.T" name="test_broken"/>
<testcase classname="test_a.T" name="test_mended"><failure/></testcase>
<testcase classname="test_a.T" name="test_gone"/>
<testcase classname="test_a.T" name="test_off"><skipped type="pytest.skip"/></testcase>""")
        patched = report("patched.xml", """
<testcase classname="test_a.T" name="test_kept"/>
<testcase classname="test_a.T" name="test_broken"><error message="boom"/></testcase>
<testcase classname="test_a.T" name="test_mended"/>
<testcase classname="test_a.T" name="test_off"><skipped type="pytest.skip"/></testcase>""")
        summary = REPO / "test" / "harness" / "junit_summary.py"
        result = subprocess.run(["python3", str(summary), "--compare", stock, patched],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stdout, (
            "stock: 3 passed, 1 failed, 1 skipped\n"
            "patched: 2 passed, 1 failed, 1 skipped\n"
            "regressions (pass stock, fail patched): 1\n"
            "  test                   stock   patched\n"
            "  test_a.T::test_broken  passed  failed\n"
            "fixed (fail stock, pass patched): 1\n"
            "  test                   stock   patched\n"
            "  test_a.T::test_mended  failed  passed\n"
            "ran on stock only: 1\n"
            "  test                   stock   patched\n"
            "  test_a.T::test_gone    passed  -\n"))
        same = subprocess.run(["python3", str(summary), "--compare", stock, stock],
                              capture_output=True, text=True)
        self.assertEqual(same.returncode, 0, same.stderr)
        self.assertIn("regressions (pass stock, fail patched): 0\n", same.stdout)
        # Its only use: the verdict of the project's own runs is pytest's.
        for gone in (["--by-suite"], [stock, "--by-suite", "--expect-stock", "2.12.0"]):
            refused = subprocess.run(["python3", str(summary), *gone],
                                     capture_output=True, text=True)
            self.assertEqual(refused.returncode, 2, gone)
            self.assertIn("Usage: python3 test/harness/junit_summary.py --compare",
                          refused.stderr)

    def test_nothing_stray_is_tracked(self) -> None:
        tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                                 text=True, check=True).stdout.splitlines()
        stray = [path for path in tracked if path.endswith((".bak", ".orig", ".rej", ".pyc"))
                 or path.startswith(("test-logs/", "overlay/torch/", "bench-out/"))]
        self.assertEqual(stray, [])


if __name__ == "__main__":
    unittest.main()
