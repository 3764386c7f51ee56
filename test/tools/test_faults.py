"""Fault injection: apply.sh killed (as by SIGKILL) or out of disk at every step.

torch_backport/infra/fsio.fault_point() runs before each write, rename and unlink;
_PREGRAD_TEST_FAULT=kill:N makes the N-th step exit hard (status 137), and
enospc:N makes it fail with "No space left on device". Each test walks every
step index of one command until the command gets through without reaching the
fault. After every fault, --status must tell the truth, and a plain rerun must
finish or roll back to bytes identical to a clean run or to the wheel.
Read-only targets are tried as a non-root user.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import torch_backport.patchset.series as model
from checkout_repo import GIT_ENV, make_checkout, site_of
from fake_install import (APPLY, FakeInstall, FAULT, MANIFEST, make_fake_install,
                          ScratchTestCase, source_python, STATE_DIRNAME, STOCK, TOUCHED)

MAX_STEPS = 200
# What a plain apply commits on v2.11.0: every default topic's series.
# (far above any command's step count: a walk that reaches it is a bug).
PATCH_COUNT = sum(len(model.load_series("v2.11.0", topic).patches)
                  for topic in model.select_topics(None))


def free_bytes(path: Path) -> int:
    found = os.statvfs(path)
    return found.f_bavail * found.f_frsize


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


class FaultInjectionTest(ScratchTestCase):
    scratch_prefix = "pregrad-faults-"

    def setUp(self) -> None:
        super().setUp()
        self.count = itertools.count()
        reference = self.fresh()
        self.pristine = reference.snapshot()
        code, output = reference.run()
        self.assertEqual(code, 0, output)
        self.patched = reference.snapshot()

    def fresh(self) -> FakeInstall:
        return make_fake_install(self.tmp / f"install-{next(self.count)}", source_python(STOCK))

    def patched_install(self) -> FakeInstall:
        install = self.fresh()
        code, output = install.run()
        self.assertEqual(code, 0, output)
        return install

    def status(self, install: FakeInstall) -> str:
        return install.run("--status", "--topic", "pre-grad-pass-timing"
                           )[1].strip().splitlines()[-1].split(":")[0]

    def assert_status_tells_the_truth(self, install: FakeInstall, where: str) -> str:
        """The state --status reports agrees with the bytes on disk."""
        state = self.status(install)
        touched = {rel: install.path(rel).read_bytes() for rel in TOUCHED}
        if state == "pristine":
            self.assertEqual(touched, {rel: self.pristine[rel] for rel in TOUCHED}, where)
        elif state == "patched":
            self.assertEqual(touched, {rel: self.patched[rel] for rel in TOUCHED}, where)
        else:
            self.assertEqual(state, "interrupted", where)
        return state

    def assert_like(self, install: FakeInstall, expected: dict[str, bytes], where: str) -> None:
        """Byte for byte, apart from the manifest (it holds the file modes of
        this install) and nothing left behind."""
        actual = install.snapshot()
        self.assertEqual(sorted(actual), sorted(expected), where)
        for rel, data in expected.items():
            if not rel.endswith(MANIFEST):
                self.assertEqual(actual[rel], data, f"{where}: {rel}")

    def walk(self, start, command: tuple[str, ...], kind: str = "kill"):
        """Yields (step, install, code, output) for each fault until the command
        gets through with the fault past its last step."""
        for index in range(MAX_STEPS):
            install = start()
            code, output = install.run(*command, env={FAULT: f"{kind}:{index}"})
            if code == 0:
                return
            yield index, install, code, output
        self.fail(f"{command} still hit the fault after {MAX_STEPS} steps")

    def test_apply_killed_at_every_step_recovers(self) -> None:
        steps = 0
        for index, install, code, output in self.walk(self.fresh, ()):
            where = f"apply killed at step {index}"
            self.assertEqual(code, 137, f"{where}: {output}")
            self.assert_status_tells_the_truth(install, where)
            code, output = install.run()
            self.assertEqual(code, 0, f"{where}, rerun apply: {output}")
            self.assert_like(install, self.patched, f"{where}, rerun apply")
            steps += 1
        self.assertGreater(steps, len(TOUCHED))

    def test_apply_killed_at_every_step_is_undone_by_revert(self) -> None:
        for index, install, code, _ in self.walk(self.fresh, ()):
            where = f"apply killed at step {index}"
            code, output = install.run("--revert")
            self.assertEqual(code, 0, f"{where}, revert: {output}")
            self.assert_like(install, self.pristine, f"{where}, revert")

    def test_revert_killed_at_every_step_recovers(self) -> None:
        for index, install, code, output in self.walk(self.patched_install, ("--revert",)):
            where = f"revert killed at step {index}"
            self.assertEqual(code, 137, f"{where}: {output}")
            self.assert_status_tells_the_truth(install, where)
            code, output = install.run("--revert")
            self.assertEqual(code, 0, f"{where}, rerun revert: {output}")
            self.assert_like(install, self.pristine, f"{where}, rerun revert")
            code, output = install.run()
            self.assertEqual(code, 0, f"{where}, apply after: {output}")
            self.assert_like(install, self.patched, f"{where}, apply after")

    def test_disk_full_at_every_step_of_apply_changes_nothing(self) -> None:
        for index, install, code, output in self.walk(self.fresh, (), kind="enospc"):
            where = f"apply out of disk at step {index}"
            self.assertEqual(code, 1, f"{where}: {output}")
            self.assertIn("No space left on device", output, where)
            self.assertNotIn("Traceback", output, where)
            self.assert_like(install, self.pristine, where)

    def test_a_real_full_disk_at_every_free_space_value_changes_nothing(self) -> None:
        """A tmpfs that really runs out, mid-write: from nothing free to more
        than an apply needs, in 16 KB steps. Each apply completes, or exits 1
        naming the path and the space it needed, with the install byte for
        byte as it was (a rollback needs no space: the backups are links)."""
        small = self.tmp / "small"
        small.mkdir()
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)],
                               capture_output=True, text=True)
        if mount.returncode != 0:
            self.skipTest(f"mounting a tmpfs needs root: {mount.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", str(small)])
        install = make_fake_install(small / "install", source_python(STOCK))
        pristine = install.snapshot()
        needed = sum(len(self.patched[rel]) for rel in self.patched
                     if rel.startswith("torch/")) // 1024
        outcomes = []
        for free in range(0, needed + 64, 16):
            filler = small / "filler"
            with open(filler, "wb") as handle:
                handle.write(b"\0" * max(0, free_bytes(small) - free * 1024))
            code, output = install.run()
            filler.unlink()
            where = f"apply with {free} KB free"
            if code == 0:
                outcomes.append("applied")
                self.assertEqual(install.run("--revert")[0], 0, where)
            else:
                outcomes.append("refused")
                self.assertEqual(code, 1, f"{where}: {output}")
                self.assertIn("No space left on device: this apply needs about", output, where)
                self.assertIn("nothing was changed", output, where)
                self.assertNotIn("Traceback", output, where)
            self.assert_like(install, pristine, where)
        self.assertEqual(outcomes[0], "refused")
        self.assertEqual(outcomes[-1], "applied")

    def test_disk_full_at_every_step_of_revert_is_finished_by_a_rerun(self) -> None:
        for index, install, code, output in self.walk(
                self.patched_install, ("--revert",), kind="enospc"):
            where = f"revert out of disk at step {index}"
            self.assertEqual(code, 1, f"{where}: {output}")
            self.assertIn("No space left on device", output, where)
            self.assertNotIn("Traceback", output, where)
            self.assert_status_tells_the_truth(install, where)
            code, output = install.run("--revert")
            self.assertEqual(code, 0, f"{where}, rerun: {output}")
            self.assert_like(install, self.pristine, f"{where}, rerun")

    def test_overlay_killed_at_every_step_is_replaced_by_a_rerun(self) -> None:
        source = self.fresh()
        reference = self.tmp / "overlay-reference"
        code, output = source.run("--overlay", "v2.11.0", "--out", str(reference))
        self.assertEqual(code, 0, output)
        expected = tree(reference)
        for index in range(MAX_STEPS):
            target = self.tmp / f"overlay-{index}"
            shutil.copytree(reference, target)  # an earlier overlay to replace
            (target / "STAMP").write_text("base: v2.11.0\nan earlier overlay\n")
            code, output = source.run("--overlay", "v2.11.0", "--out", str(target),
                                      env={FAULT: f"kill:{index}"})
            if code == 0:
                break
            where = f"overlay killed at step {index}"
            self.assertEqual(code, 137, f"{where}: {output}")
            code, output = source.run("--overlay", "v2.11.0", "--out", str(target))
            self.assertEqual(code, 0, f"{where}, rerun: {output}")
            self.assertEqual(tree(target), expected, where)
        else:
            self.fail("the overlay walk never finished")
        self.assertGreater(index, 3)

    def checkout_walk(self, command: tuple[str, ...], start_patched: bool) -> int:
        """Kill checkout mode before each git step that writes; after each kill
        the tree is clean, --status counts the patches truthfully, and a plain
        rerun ends at the tree of a clean run."""
        site = site_of(source_python(STOCK))
        reference = make_checkout(self.tmp / "checkout-reference", site)
        base_tree = reference.git("rev-parse", "HEAD^{tree}").strip()
        self.assertEqual(reference.run()[0], 0)
        patched_tree = reference.git("rev-parse", "HEAD^{tree}").strip()
        expected_tree = base_tree if command else patched_tree
        for index in range(MAX_STEPS):
            checkout = make_checkout(self.tmp / f"checkout-{next(self.count)}", site)
            if start_patched:
                self.assertEqual(checkout.run()[0], 0)
            start = checkout.git("rev-parse", "HEAD").strip()
            env = {FAULT: f"kill:{index}"}
            result = subprocess.run([str(APPLY), str(checkout.path), *command],
                                    capture_output=True, text=True,
                                    env={**os.environ, **GIT_ENV, **env})
            if result.returncode == 0:
                return index
            where = f"apply.sh CHECKOUT {' '.join(command)} killed at step {index}"
            self.assertEqual(result.returncode, 137, f"{where}: {result.stderr}")
            state = checkout.state()
            self.assertEqual(state["in_progress"], [], where)
            self.assertEqual(checkout.git("status", "--porcelain", "--untracked-files=no"),
                             "", where)
            applied = sum(1 for line in checkout.run("--status")[1].splitlines()
                          if line.strip().startswith("applied "))
            made = int(checkout.git("rev-list", "--count", f"{start}..HEAD").strip())
            self.assertEqual(applied, PATCH_COUNT - made if start_patched else made, where)
            code, output = checkout.run(*command)
            self.assertEqual(code, 0, f"{where}, rerun: {output}")
            self.assertEqual(checkout.git("rev-parse", "HEAD^{tree}").strip(), expected_tree,
                             where)
        self.fail("the checkout walk never finished")

    def test_checkout_apply_killed_between_git_steps_is_finished_by_a_rerun(self) -> None:
        self.assertGreater(self.checkout_walk((), start_patched=False), 3)

    def test_checkout_revert_killed_between_git_steps_is_finished_by_a_rerun(self) -> None:
        self.assertGreater(self.checkout_walk(("--revert",), start_patched=True), 3)

    @unittest.skipUnless(os.geteuid() == 0 and Path("/usr/bin/python3").exists(),
                         "needs root to run apply.sh as another user, and /usr/bin/python3")
    def test_read_only_install_as_another_user_is_refused_untouched(self) -> None:
        """An install owned by root, apply.sh run as nobody: --check, apply and
        revert all refuse before writing, and say who can."""
        root = Path(tempfile.mkdtemp(prefix="pregrad-readonly-", dir="/tmp"))
        self.addCleanup(shutil.rmtree, root, True)
        os.chmod(root, 0o755)
        install = make_fake_install(root / "pristine", source_python(STOCK),
                                    base_python="/usr/bin/python3")
        patched = make_fake_install(root / "patched", source_python(STOCK),
                                    base_python="/usr/bin/python3")
        self.assertEqual(patched.run()[0], 0)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        for target, args in ((install, ("--check",)), (install, ()),
                             (patched, ("--revert",)), (patched, ("--revert", "--check"))):
            before = target.snapshot()
            code, output = target.run(*args, user="nobody")
            where = f"apply.sh {' '.join(args)} as nobody"
            self.assertEqual(code, 1, f"{where}: {output}")
            self.assertIn("cannot write to:", output, where)
            self.assertIn("run as the owner of the install (root); nothing was changed",
                          output, where)
            self.assertNotIn("Traceback", output, where)
            self.assertEqual(target.snapshot(), before, where)
        self.assertFalse((install.site / STATE_DIRNAME).exists())


if __name__ == "__main__":
    unittest.main()
