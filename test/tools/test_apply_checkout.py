"""scripts/apply.sh CHECKOUT on release-branch-shaped repositories.

Each test builds a repository from a real torch install's files (no network),
runs apply.sh on it as a maintainer would, and checks the history, the files
and, for every refusal, that HEAD, refs, index and work tree are byte for byte
as before.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
import unittest
from pathlib import Path

from hypothesis import given, HealthCheck, settings, strategies as st

from checkout_repo import Checkout, make_checkout, site_of
from fake_install import ScratchTestCase, source_python, STOCK, TOUCHED, UPSTREAM

import torch_backport.patchset.series as model  # noqa: E402
from torch_backport.patchset.apply import apply_series  # noqa: E402

SERIES = model.load_series("v2.11.0")
# The original topic alone: what most scenarios here are about (a plain
# apply also applies the other default topics, autocast-cache-key).
ORIGINAL = ("--topic", "pre-grad-pass-timing")


def stock_site() -> Path:
    return site_of(source_python(STOCK))


def patched_files() -> dict[str, bytes]:
    pristine = {rel: (stock_site() / rel).read_bytes() for rel in TOUCHED}
    return apply_series(pristine, SERIES)


def git_dir(checkout: Checkout) -> dict[str, str]:
    """sha256 of every file under .git (objects, index, refs, logs, ...):
    `find .git -type f | sort | xargs sha256sum`."""
    root = checkout.path / ".git"
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def subjects() -> list[str]:
    return [patch.subject for patch in SERIES.patches]


def hunk_lines(rel: str) -> set[int]:
    """Pristine line numbers that some patch's hunk (with context) covers in rel,
    widened by 3 lines: edits there may legitimately conflict."""
    covered: set[int] = set()
    for patch in SERIES.patches:
        for diff in patch.files:
            if diff.path == rel:
                for hunk in diff.hunks:
                    covered.update(range(hunk.old_start - 3,
                                         hunk.old_start + max(hunk.old_lines, 1) + 3))
    return covered


class ApplyCheckoutTest(ScratchTestCase):
    scratch_prefix = "pregrad-checkout-test-"
    maxDiff = None

    def setUp(self) -> None:
        super().setUp()
        self.site = stock_site()

    def checkout(self, name: str = "pytorch") -> Checkout:
        return make_checkout(self.tmp / name, self.site)

    def assertRefusedUnchanged(self, checkout: Checkout, *args: str) -> str:
        before = checkout.state()
        code, output = checkout.run(*args)
        self.assertEqual(code, 1, output)
        self.assertEqual(checkout.state(), before)
        return output

    def test_status_of_the_base(self) -> None:
        code, output = self.checkout().run("--status")
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
<checkout>: base v2.11.0 (the 5 files the series touches are byte-identical to v2.11.0's)
  missing                 0001-aot_autograd-run-pre-grad-passes-after-the-AOTAutogr.patch
  missing                 0002-inductor-key-the-FX-graph-and-AOTAutograd-caches-on-.patch
  missing                 0003-inductor-add-pre_grad_pass_timing-early-late-default.patch
  missing                 0004-inductor-make-the-CPU-inference-remove_identity-pass.patch
  missing                 0005-aot_autograd-run-early-pre-grad-passes-before-prepar.patch
  missing                 0006-inductor-warn-once-per-pass-class-when-default-timin.patch
  missing                 0007-aot_autograd-prepare-again-when-late-pre-grad-passes.patch
  missing                 0008-inductor-do-not-fold-a-BatchNorm-into-a-conv-module-.patch
series: 0 of 8 patches applied (matched by patch-id)
feature present at HEAD: no

<checkout>: topic autocast-cache-key: base v2.11.0 (the one file the series touches is byte-identical to v2.11.0's)
  missing                 0001-aot_autograd-key-the-AOTAutogradCache-on-each-enable.patch
  missing                 0002-aot_autograd-key-the-ambient-dtype-an-in-graph-autoc.patch
series: 0 of 2 patches applied (matched by patch-id)
feature present at HEAD: no

<checkout>: topic cpu-isa-probe: base v2.11.0 (the one file the series touches is byte-identical to v2.11.0's)
  missing                 0001-inductor-probe-the-CPU-vector-ISA-without-importing-.patch
  missing                 0002-inductor-retry-the-ISA-probe-s-dlopen-after-importin.patch
  missing                 0003-inductor-remember-a-successful-ISA-probe-next-to-its.patch
series: 0 of 3 patches applied (matched by patch-id)
feature present at HEAD: no
""")  # noqa: E501 (the real output)

    def test_apply_makes_one_commit_per_patch_keeping_messages(self) -> None:
        checkout = self.checkout()
        base = checkout.git("rev-parse", "HEAD").strip()
        code, output = checkout.run(*ORIGINAL)
        self.assertEqual(code, 0, output)
        self.assertIn(f"base v2.11.0: the {len(TOUCHED)} files the series touches are "
                      "byte-identical", output)
        log = checkout.git("log", "--reverse", "--format=%s", f"{base}..HEAD").splitlines()
        self.assertEqual(log, subjects())
        for commit, patch in zip(
            checkout.git("rev-list", "--reverse", f"{base}..HEAD").split(), SERIES.patches
        ):
            body = checkout.git("log", "-1", "--format=%B", commit)
            origin = re.search(r"^Origin: .*$", patch.read_text(), re.MULTILINE)
            assert origin is not None
            self.assertIn(origin.group(0), body)
            self.assertRegex(body, r"\nApplied-Upstream: (2\.12\.0|no)\n")
        for rel, data in patched_files().items():
            self.assertEqual(checkout.read(rel), data, rel)
        self.assertEqual(checkout.git("status", "--porcelain"), "")

    def test_second_apply_is_a_no_op(self) -> None:
        checkout = self.checkout()
        self.assertEqual(checkout.run()[0], 0)
        before = checkout.state()
        code, output = checkout.run()
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
base v2.11.0: 8 of 8 patches of its series are in HEAD's history
already applied: all 8 patches are in HEAD's history; nothing to do
topic autocast-cache-key: base v2.11.0: 2 of 2 patches of its series are in HEAD's history
already applied: all 2 patches are in HEAD's history; nothing to do
""")
        self.assertEqual(checkout.state(), before)

    def test_check_leaves_head_index_and_tree_untouched(self) -> None:
        checkout = self.checkout()
        before = checkout.state()
        code, output = checkout.run("--check")
        self.assertEqual(code, 0, output)
        self.assertIn(f"check: {len(SERIES.patches)} patch(es) would apply; HEAD, index and "
                      "work tree untouched", output)
        self.assertEqual(checkout.state(), before)

    def test_check_writes_nothing_into_the_repository_objects_included(self) -> None:
        """--check tries the patches, and the 3-way pre-images they need, in a
        throw-away index with an object directory of its own: every file under
        .git (the objects, the index, the refs) is as it was, byte for byte. A
        local change makes the trial a 3-way merge; --revert --check tries the
        reverse patches the same way."""
        checkout = self.checkout()
        config = checkout.read("torch/_inductor/config.py")
        checkout.commit_file("torch/_inductor/config.py", config + b"\n# fork: local knob\n",
                             "fork: local knob")
        for args in [("--check",), ("--check", "--topic", "all")]:
            before = git_dir(checkout)
            code, output = checkout.run(*args)
            self.assertEqual(code, 0, output)
            self.assertIn("would apply 0003-inductor-add-pre_grad_pass_timing-early-late-default"
                          ".patch (3-way merge)", output)
            after = git_dir(checkout)
            self.assertEqual(sorted(after.keys() - before.keys()), [], "files .git gained")
            self.assertEqual(after, before)
        self.assertEqual(checkout.run()[0], 0)
        before = git_dir(checkout)
        code, output = checkout.run("--revert", "--check")
        self.assertEqual(code, 0, output)
        self.assertIn(f"check: {len(SERIES.patches)} commit(s) would revert", output)
        self.assertEqual(git_dir(checkout), before)

    def test_no_commit_stages_the_series(self) -> None:
        checkout = self.checkout()
        head = checkout.git("rev-parse", "HEAD")
        code, output = checkout.run("--no-commit", *ORIGINAL)
        self.assertEqual(code, 0, output)
        self.assertEqual(checkout.git("rev-parse", "HEAD"), head)
        self.assertEqual(sorted(checkout.git("diff", "--cached", "--name-only").split()), TOUCHED)
        self.assertEqual(checkout.git("diff", "--name-only"), "")
        for rel, data in patched_files().items():
            self.assertEqual(checkout.read(rel), data, rel)

    def test_local_change_in_a_touched_file_goes_through_a_3way_merge(self) -> None:
        checkout = self.checkout()
        config = checkout.read("torch/_inductor/config.py")
        checkout.commit_file("torch/_inductor/config.py", config + b"\n# fork: local knob\n",
                             "fork: local knob")
        code, output = checkout.run()
        self.assertEqual(code, 0, output)
        self.assertIn("4 of 5 files the series touches are identical to v2.11.0's; "
                      "torch/_inductor/config.py changed since; HEAD's history holds "
                      "v2.11.0's files, so the series goes in with a 3-way merge", output)
        merged = checkout.read("torch/_inductor/config.py")
        self.assertIn(b"# fork: local knob", merged)
        self.assertIn(b'pre_grad_pass_timing: Literal["early", "late", "default"] = "default"',
                      merged)

    def test_every_touched_file_changed_since_the_release_still_finds_its_base(self) -> None:
        """A release branch that went on changing every file the series touches
        holds no base's files at HEAD; its history does (bench/checkout_scale.py's
        `main` branch, at 90,000 commits)."""
        checkout = self.checkout()
        for rel in TOUCHED:
            checkout.commit_file(rel, checkout.read(rel) + b"\n# fork: local note\n",
                                 f"fork: note in {rel}")
        code, output = checkout.run(*ORIGINAL, "--check")
        self.assertEqual(code, 0, output)
        self.assertIn(f"base v2.11.0: 0 of {len(TOUCHED)} files the series touches are "
                      "identical to v2.11.0's; " + ", ".join(TOUCHED) + " changed since; "
                      "HEAD's history holds v2.11.0's files, so the series goes in with a "
                      "3-way merge (git am -3)", output)

    def test_series_merged_over_changed_context_is_still_recognised(self) -> None:
        """A fork edit 3 lines above a hunk: the 3-way merge changes the commit's
        context and so its patch-id; status, a second apply and revert still
        find the commit (by subject and Origin trailer)."""
        checkout = self.checkout()
        config = checkout.read("torch/_inductor/config.py").replace(
            b"# Registers a custom pregrad pass. Note",
            b"# Registers a custom pregrad pass (fork: see our docs). Note",
        )
        checkout.commit_file("torch/_inductor/config.py", config, "fork: doc pointer")
        before = {rel: checkout.read(rel) for rel in TOUCHED}
        self.assertEqual(checkout.run()[0], 0)
        count = len(SERIES.patches)
        self.assertIn(f"series: {count} of {count} patches applied", checkout.run("--status")[1])
        self.assertIn("already applied", checkout.run()[1])
        code, output = checkout.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertIn(f"reverted {count} commit(s) of the series", output)
        self.assertEqual({rel: checkout.read(rel) for rel in TOUCHED}, before)

    def patched_then_changed_on_top(self) -> Checkout:
        """The series applied, then a fork commit that edits a line of patch 0003."""
        checkout = self.checkout()
        self.assertEqual(checkout.run()[0], 0)
        config = checkout.read("torch/_inductor/config.py").replace(
            b'pre_grad_pass_timing: Literal["early", "late", "default"] = "default"',
            b'pre_grad_pass_timing: Literal["early", "late", "default"] = "early"',
        )
        checkout.commit_file("torch/_inductor/config.py", config, "fork: default to early")
        return checkout

    def test_revert_check_predicts_a_conflict_and_changes_nothing(self) -> None:
        checkout = self.patched_then_changed_on_top()
        output = self.assertRefusedUnchanged(checkout, "--revert", "--check")
        self.assertIn("0003-inductor-add-pre_grad_pass_timing-early-late-default.patch", output)
        self.assertIn("would not revert: later commits touched the same lines in "
                      "torch/_inductor/config.py", output)
        self.assertIn("fork: default to early", output)

    def test_revert_reverts_exactly_the_series(self) -> None:
        checkout = self.checkout()
        self.assertEqual(checkout.run(*ORIGINAL)[0], 0)
        checkout.commit_file("NOTES", b"later, unrelated\n", "later unrelated commit")
        code, output = checkout.run("--revert", *ORIGINAL)
        self.assertEqual(code, 0, output)
        self.assertEqual(
            checkout.git("log", f"-{len(SERIES.patches)}", "--format=%s").splitlines(),
            [f'Revert "{subject}"' for subject in subjects()],
        )
        for rel in TOUCHED:
            self.assertEqual(checkout.read(rel), (self.site / rel).read_bytes(), rel)
        self.assertEqual(checkout.read("NOTES"), b"later, unrelated\n")
        self.assertIn(f"series: 0 of {len(SERIES.patches)} patches applied",
                      checkout.run("--status")[1])

    def test_revert_refuses_when_later_commits_touched_the_same_lines(self) -> None:
        checkout = self.patched_then_changed_on_top()
        output = self.assertRefusedUnchanged(checkout, "--revert", *ORIGINAL)
        self.assertIn("cannot revert 0003-inductor-add-pre_grad_pass_timing", output)
        self.assertRegex(output, r"torch/_inductor/config\.py:\d+")
        self.assertIn("fork: default to early", output)

    def test_refuses_a_dirty_tree(self) -> None:
        checkout = self.checkout()
        (checkout.path / "torch/_inductor/config.py").write_bytes(b"# edited\n")
        output = self.assertRefusedUnchanged(checkout)
        self.assertIn("has uncommitted changes", output)
        self.assertIn(" M torch/_inductor/config.py", output)

    def test_refuses_a_dirty_index(self) -> None:
        checkout = self.checkout()
        (checkout.path / "new_file.py").write_bytes(b"x = 1\n")
        checkout.git("add", "new_file.py")
        output = self.assertRefusedUnchanged(checkout)
        self.assertIn("A  new_file.py", output)

    def test_refuses_an_am_in_progress(self) -> None:
        checkout = self.checkout()
        bogus = self.tmp / "bogus.patch"
        bogus.write_text(SERIES.patches[0].read_text().replace(
            "     ignore_shape_env: bool = False,", "     ignore_shape_env: int = 7,"))
        checkout.git("am", str(bogus), check=False)
        output = self.assertRefusedUnchanged(checkout)
        self.assertIn("a git am or rebase is in progress", output)

    def test_refuses_a_merge_in_progress(self) -> None:
        checkout = self.checkout()
        checkout.git("checkout", "-q", "-b", "side", "HEAD~1")
        checkout.commit_file("RELEASE_NOTES.md", b"side\n", "side notes")
        checkout.git("checkout", "-q", "release/2.11")
        checkout.commit_file("RELEASE_NOTES.md", b"main\n", "main notes")
        checkout.git("merge", "side", check=False)  # conflicts: MERGE_HEAD stays
        output = self.assertRefusedUnchanged(checkout)
        self.assertIn("a merge is in progress", output)

    def test_refuses_a_directory_that_is_not_a_pytorch_checkout(self) -> None:
        other = Checkout(self.tmp / "other")
        other.path.mkdir()
        other.git("init", "-q")
        other.commit_file("README", b"not torch\n", "init")
        output = self.assertRefusedUnchanged(other)
        self.assertIn("is not a PyTorch checkout: torch/_inductor/config.py, "
                      "torch/_functorch/aot_autograd.py not tracked at HEAD", output)

    def test_refuses_a_directory_that_is_not_a_git_work_tree(self) -> None:
        plain = self.tmp / "plain"
        plain.mkdir()
        code, output = Checkout(plain).run()
        self.assertEqual(code, 1)
        self.assertIn("is not a git work tree", output)

    def test_a_history_that_never_held_a_base_uses_the_blobs_the_repository_has(self) -> None:
        """An orphan branch whose touched files all differ from every base's,
        in a repository that also holds v2.11.0 (bench/checkout_scale.py's
        `before-release` branch): the 3-way merge's pre-images are there."""
        checkout = make_checkout(self.tmp / "orphan", self.site)
        checkout.git("checkout", "-q", "--orphan", "older")
        for rel in TOUCHED:
            (checkout.path / rel).write_bytes(checkout.read(rel) + b"\n# older\n")
        checkout.git("add", "-A")
        checkout.git("commit", "-q", "-m", "an older tree")
        code, output = checkout.run(*ORIGINAL, "--status")
        self.assertEqual(code, 0, output)
        self.assertIn("base v2.11.0 (" + ", ".join(TOUCHED) + " differ from every base's "
                      "(nearest by version: v2.11.0); v2.11.0's blobs are in this repository, "
                      "so the series goes in with a 3-way merge (git am -3))", output)

    def test_refuses_an_unknown_base(self) -> None:
        checkout = make_checkout(self.tmp / "older", self.site)
        codecache = checkout.read("torch/_inductor/codecache.py")
        # Rewrite history so the v2.11.0 blob of codecache.py was never there.
        checkout.git("checkout", "-q", "--orphan", "older")
        (checkout.path / "torch/_inductor/codecache.py").write_bytes(codecache[:-200])
        checkout.git("add", "-A")
        checkout.git("commit", "-q", "-m", "an older release")
        checkout.git("branch", "-D", "release/2.11")
        checkout.git("tag", "-d", "v2.11.0")
        checkout.git("reflog", "expire", "--expire=now", "--all")
        checkout.git("gc", "-q", "--prune=now")
        output = self.assertRefusedUnchanged(checkout)
        self.assertIn("unknown base: the files the series touches match no supported base", output)

    def conflicting_checkout(self) -> Checkout:
        """A fork that changed a line inside patch 0003's hunk in config.py."""
        checkout = self.checkout()
        config = checkout.read("torch/_inductor/config.py").replace(
            b"use_pre_grad_passes: bool = True\n", b"use_pre_grad_passes: bool = False\n"
        )
        checkout.commit_file("torch/_inductor/config.py", config, "fork: no pre-grad passes")
        return checkout

    def test_refuses_a_conflict_naming_patch_file_and_line(self) -> None:
        checkout = self.conflicting_checkout()
        # git am and reset move ORIG_HEAD; the refused run must put back the
        # user's, which here is not HEAD.
        checkout.git("update-ref", "ORIG_HEAD", "HEAD~1")
        output = self.assertRefusedUnchanged(checkout, *ORIGINAL)
        self.assertIn("0003-inductor-add-pre_grad_pass_timing-early-late-default.patch does "
                      "not apply, even with a 3-way merge; conflicts at:", output)
        self.assertRegex(output, r"\n  torch/_inductor/config\.py:\d+\n")
        self.assertIn("the am was aborted; HEAD, index and work tree are as before", output)

    def test_check_names_a_conflict_and_changes_nothing(self) -> None:
        checkout = self.conflicting_checkout()
        output = self.assertRefusedUnchanged(checkout, "--check")
        self.assertRegex(output, r"0003-inductor-add-pre_grad_pass_timing-early-late-default"
                         r"\.patch would not apply, even with a 3-way merge; conflicting "
                         r"hunks at:\n  torch/_inductor/config\.py:\d+\n")

    def test_checkout_of_a_release_with_the_feature_gets_the_results_fixes(self) -> None:
        """A v2.12.0 tree is found by content and gets its own two-patch series."""
        upstream_site = site_of(source_python(UPSTREAM))
        checkout = make_checkout(self.tmp / "v2.12", upstream_site)
        code, output = checkout.run(*ORIGINAL)
        self.assertEqual(code, 0, output)
        self.assertIn("base v2.12.0: the 2 files the series touches are byte-identical to "
                      "v2.12.0's", output)
        subjects = checkout.git("log", "--format=%s", "-n2").splitlines()
        self.assertEqual(subjects, [
            "inductor: do not fold a BatchNorm into a conv module that has other uses",
            "aot_autograd: prepare again when late pre-grad passes replace parameters",
        ])

    def test_checkout_of_a_patch_release_gets_the_series_its_files_match(self) -> None:
        """A v2.12.1 tree (2.12.1's touched files are 2.12.0's, byte for
        byte) gets v2.12.0's series, and --status says so for every topic."""
        upstream_site = site_of(source_python(UPSTREAM))
        checkout = self.checkout_at(upstream_site, "v2.12.1")
        before_tree = checkout.git("rev-parse", "HEAD^{tree}")
        code, output = checkout.run("--topic", "all")
        self.assertEqual(code, 0, output)
        code, output = checkout.run("--status")
        self.assertEqual(code, 0, output)
        self.assertIn("<checkout>: base v2.12.0 (2 of 2 patches of its series are in "
                      "HEAD's history)", output)
        self.assertIn("<checkout>: topic cpu-isa-probe: base v2.12.0 (3 of 3 patches", output)
        self.assertIn("<checkout>: topic autocast-cache-key: base v2.12.0 (3 of 3 patches",
                      output)
        code, output = checkout.run("--revert", "--topic", "all")
        self.assertEqual(code, 0, output)
        self.assertEqual(checkout.git("rev-parse", "HEAD^{tree}"), before_tree)

    def checkout_at(self, site: Path, tag: str) -> Checkout:
        checkout = make_checkout(self.tmp / tag, site)
        checkout.git("tag", "-d", "v2.11.0")
        checkout.git("tag", tag, "HEAD~2")
        return checkout

    def test_usage_errors_exit_2(self) -> None:
        checkout = self.checkout()
        code, output = checkout.run("--python", sys.executable)
        self.assertEqual(code, 2)
        self.assertIn("--python and CHECKOUT do not go together", output)

    @given(data=st.data())
    @settings(max_examples=12, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    def test_unrelated_edits_apply_with_3way_or_fail_cleanly(self, data: st.DataObject) -> None:
        """Edits to the touched files outside the hunks: the series goes in with
        a 3-way merge, keeping the edits; if it ever cannot, nothing changes."""
        with tempfile.TemporaryDirectory(dir=self.tmp) as tmp:
            checkout = make_checkout(Path(tmp) / "repo", self.site)
            edits = data.draw(st.lists(st.sampled_from(TOUCHED), min_size=1, max_size=3),
                              label="files")
            markers = []
            for number, rel in enumerate(edits):
                lines = checkout.read(rel).decode().split("\n")
                free = sorted(set(range(1, len(lines))) - hunk_lines(rel))
                at = data.draw(st.sampled_from(free), label=f"line in {rel}")
                marker = f"# fork edit {number}"
                lines.insert(at, marker)
                markers.append((rel, marker))
                checkout.commit_file(rel, "\n".join(lines).encode(), f"fork edit {number}")
            before = checkout.state()
            code, output = checkout.run()
            if code == 0:
                for rel, marker in markers:
                    self.assertIn(marker.encode(), checkout.read(rel))
                self.assertIn(b"def resolve_pre_grad_pass_timing()",
                              checkout.read("torch/_inductor/codecache.py"))
                self.assertEqual(checkout.git("status", "--porcelain"), "")
            else:
                self.assertEqual(code, 1, output)
                self.assertEqual(checkout.state(), before)


if __name__ == "__main__":
    unittest.main()
