"""A directory swapped for a link between a check and a write redirects
nothing (dirfd.py): every write into an install acts relative to
directories opened once, without following links.

DirectoryHandleTest shows the property on one directory: one swapped after
it was opened keeps receiving the writes, and a link met while opening is
refused by name. SwappedAtEveryStepTest makes the race deterministic: root's
apply, then its revert, is stopped at each of its write steps in turn
(fsio's fault hook, stop:N), `nobody` swaps its install's torch/_inductor
for a link to a root-owned copy, and the run goes on. SwappedDirectoryRaceTest
is the race as an attacker runs it: `nobody` flips the directory back and
forth while root applies and reverts 200 times. Each time, nothing in the
copy, or beside it, is created, changed or chowned."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path
from typing import Callable, Dict, Tuple

from fake_install import APPLY, FAULT, make_fake_install, REPO, source_python, STOCK
from other_user import as_nobody, give_to_nobody, needs_root_and_setpriv, NOBODY

from torch_backport.infra.dirfd import Dir
from torch_backport.infra.fsio import LinkRefused

PAIRS = 200
MAX_STEPS = 200  # far above any command's write steps
FLIP_PAUSE = os.environ.get("PREGRAD_FLIP_PAUSE", "0.0002")  # seconds in each position
# kind, inode, uid, gid, mode, links, bytes: a file replaced by rename has
# another inode, even with the same bytes.
Entry = Tuple[str, int, int, int, int, int, bytes]


def snapshot(top: Path) -> Dict[str, Entry]:
    """Everything under `top` (itself included), never following a link."""
    found: Dict[str, Entry] = {}
    for path in [top, *sorted(top.rglob("*"))]:
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
        found[str(path.relative_to(top))] = (stat.filemode(info.st_mode), info.st_ino,
                                             info.st_uid, info.st_gid, info.st_mode,
                                             info.st_nlink, data)
    return found


class DirectoryHandleTest(unittest.TestCase):
    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="pregrad-dirfd-")
        self.addCleanup(scratch.cleanup)
        self.tmp = Path(scratch.name)
        (self.tmp / "site" / "torch" / "_inductor").mkdir(parents=True)
        (self.tmp / "elsewhere").mkdir()

    def test_a_directory_swapped_after_it_was_opened_still_gets_the_write(self) -> None:
        site = self.tmp / "site"
        with Dir.open(site) as opened, opened.walk(["torch", "_inductor"]) as inductor:
            os.rename(site / "torch" / "_inductor", site / "torch" / "_inductor.moved")
            os.symlink(self.tmp / "elsewhere", site / "torch" / "_inductor")
            inductor.atomic_write("config.py", b"patched\n", 0o644)
        self.assertEqual(sorted(os.listdir(self.tmp / "elsewhere")), [])
        self.assertEqual((site / "torch" / "_inductor.moved" / "config.py").read_bytes(),
                         b"patched\n")

    def test_a_link_on_the_way_is_refused_by_name(self) -> None:
        inductor = self.tmp / "site" / "torch" / "_inductor"
        inductor.rmdir()
        inductor.symlink_to(self.tmp / "elsewhere")
        with Dir.open(self.tmp / "site") as site, self.assertRaisesRegex(
                LinkRefused, f"{inductor} is a symbolic link where this project expects a "
                             "directory"):
            site.walk(["torch", "_inductor"])

    def test_a_fifo_is_refused_not_waited_on(self) -> None:
        fifo = self.tmp / "site" / "config.py"
        os.mkfifo(fifo)
        with Dir.open(self.tmp / "site") as site, self.assertRaisesRegex(
                Exception, f"{fifo} is a FIFO where this project reads a file"):
            site.read("config.py")


def swapped_while_stopped(run: "subprocess.Popen[bytes]", swap: Callable[[], None]) -> bool:
    """Wait for `run` to stop at its fault step (stop:N), `swap`, and let it
    go on to its end; False if it ended before reaching the step."""
    _, status = os.waitpid(run.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        run.returncode = os.waitstatus_to_exitcode(status)
        return False
    swap()
    os.kill(run.pid, signal.SIGCONT)
    run.wait(timeout=300)
    return True


class RootOwnedCopyCase(unittest.TestCase):
    """An install of nobody's, and a root-owned copy of its torch/_inductor
    (so that every name root looks for is there) for nobody to link to."""

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pregrad-swap-", dir="/tmp"))
        self.addCleanup(shutil.rmtree, self.root, True)
        os.chmod(self.root, 0o755)
        self.template = make_fake_install(self.root / "template", source_python(STOCK),
                                          base_python="/usr/bin/python3")
        self.outside = self.root / "root-owned"
        self.outside.mkdir(mode=0o755)
        self.decoy = self.outside / "_inductor"
        shutil.copytree(self.template.path("torch/_inductor"), self.decoy, symlinks=True)
        self.before = snapshot(self.outside)

    def nobodys_install(self, name: str) -> Path:
        """A copy of the template install, given to nobody; its root."""
        copy = self.root / name
        shutil.copytree(self.template.root, copy, symlinks=True)
        give_to_nobody(copy)
        return copy

    def site_of(self, copy: Path) -> Path:
        return copy / self.template.site.relative_to(self.template.root)

    def assertNothingOutsideChanged(self, where: str) -> None:
        """No entry of the root-owned copy created, removed, or changed in
        bytes, mode, owner or links (a hard link of its inode elsewhere)."""
        after = snapshot(self.outside)
        changed = sorted(name for name in {*self.before, *after}
                         if self.before.get(name) != after.get(name))
        self.assertEqual(changed, [], where)


@needs_root_and_setpriv
class SwappedAtEveryStepTest(RootOwnedCopyCase):
    def run_stopped_at(self, copy: Path, step: int, *args: str) -> bool:
        """apply.sh ARGS on `copy`, stopped at write step `step` while
        torch/_inductor becomes a link to the root-owned copy; False if the
        run ended before that step."""
        python = copy / self.template.python.relative_to(self.template.root)
        run = subprocess.Popen([str(APPLY), "--python", str(python), *args],
                               env={**os.environ, FAULT: f"stop:{step}"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        inductor = self.site_of(copy) / "torch" / "_inductor"

        def swap() -> None:
            as_nobody("mv", str(inductor), str(inductor.with_name("_inductor.real")))
            as_nobody("ln", "-s", str(self.decoy), str(inductor))
        return swapped_while_stopped(run, swap)

    def walk(self, command: str, *args: str) -> int:
        """Every step of `command`, each on a fresh copy; how many."""
        for step in range(MAX_STEPS):
            copy = self.nobodys_install(f"{command}-{step}")
            if args:  # revert: root applies first, undisturbed
                python = copy / self.template.python.relative_to(self.template.root)
                subprocess.run([str(APPLY), "--python", str(python)], check=True,
                               capture_output=True)
            stopped = self.run_stopped_at(copy, step, *args)
            shutil.rmtree(copy)
            self.assertNothingOutsideChanged(f"{command}, swapped at step {step}")
            if not stopped:
                return step
        self.fail(f"{command} took more than {MAX_STEPS} steps")

    def test_apply_swapped_at_every_step_writes_nothing_outside(self) -> None:
        self.assertGreater(self.walk("apply"), 10)

    def test_revert_swapped_at_every_step_writes_nothing_outside(self) -> None:
        self.assertGreater(self.walk("revert", "--revert"), 5)


@needs_root_and_setpriv
class OverlaySwappedAtEveryStepTest(RootOwnedCopyCase):
    """Root replaces an overlay in a directory nobody owns; at each write
    step nobody swaps its `torch/` for a link to a root-owned copy."""

    def overlay(self, out: Path, step: int | None = None) -> subprocess.Popen[bytes]:
        env = {**os.environ, **({FAULT: f"stop:{step}"} if step is not None else {})}
        return subprocess.Popen([str(APPLY), "--overlay", "v2.11.0", "--python",
                                 str(self.template.python), "--out", str(out)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def test_an_overlay_swapped_at_every_step_writes_nothing_outside(self) -> None:
        earlier = self.root / "earlier-overlay"
        self.assertEqual(self.overlay(earlier).wait(timeout=300), 0)
        decoy = self.outside / "torch"
        shutil.copytree(earlier / "torch", decoy)
        self.before = snapshot(self.outside)
        for step in range(MAX_STEPS):
            out = self.root / f"out-{step}"
            shutil.copytree(earlier, out)
            give_to_nobody(out)

            def swap() -> None:
                if (out / "torch").exists():  # gone between removing the old and moving in
                    as_nobody("mv", str(out / "torch"), str(out / "torch.real"))
                as_nobody("ln", "-s", str(decoy), str(out / "torch"))
            if not swapped_while_stopped(self.overlay(out, step), swap):
                self.assertGreater(step, 10)
                return
            self.assertNothingOutsideChanged(f"the overlay, swapped at step {step}")
            shutil.rmtree(out)
        self.fail(f"the overlay took more than {MAX_STEPS} steps")


INDEX_WRITER = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from torch_backport.generated.index import read_all, write_index
    from torch_backport.infra.errors import Refused
    try:
        write_index(Path(sys.argv[1]), read_all(Path(sys.argv[1])))
    except Refused as problem:
        print(problem)
        sys.exit(1)
""")


@needs_root_and_setpriv
class IndexSwappedAtEveryStepTest(unittest.TestCase):
    """Root writes the index into a directory nobody owns; at each write
    step nobody swaps `simple/` for a link to a root-owned copy."""

    def setUp(self) -> None:
        from fake_wheel import make_fake_wheel, release_files
        self.root = Path(tempfile.mkdtemp(prefix="pregrad-index-swap-", dir="/tmp"))
        self.addCleanup(shutil.rmtree, self.root, True)
        os.chmod(self.root, 0o755)
        self.template = self.root / "template"
        make_fake_wheel(self.template, release_files(source_python(STOCK)), "2.11.0")
        self.assertEqual(self.write_index(self.template).wait(timeout=120), 0)
        self.decoy = self.root / "root-owned" / "simple"
        self.decoy.parent.mkdir(mode=0o755)
        shutil.copytree(self.template / "simple", self.decoy)
        self.before = snapshot(self.decoy.parent)

    def write_index(self, out: Path, step: int | None = None) -> subprocess.Popen[bytes]:
        env = {**os.environ, **({FAULT: f"stop:{step}"} if step is not None else {})}
        return subprocess.Popen([sys.executable, "-c", INDEX_WRITER, str(out)], cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def test_the_index_swapped_at_every_step_writes_nothing_outside(self) -> None:
        for step in range(MAX_STEPS):
            out = self.root / f"out-{step}"
            shutil.copytree(self.template, out)
            for metadata in out.glob("*.metadata"):
                metadata.unlink()  # so that the run writes them too
            give_to_nobody(out)

            def swap() -> None:
                as_nobody("mv", str(out / "simple"), str(out / "simple.real"))
                as_nobody("ln", "-s", str(self.decoy), str(out / "simple"))
            if not swapped_while_stopped(self.write_index(out, step), swap):
                self.assertGreater(step, 4)
                return
            after = snapshot(self.decoy.parent)
            self.assertEqual(sorted(name for name in {*self.before, *after}
                                    if self.before.get(name) != after.get(name)), [],
                             f"the index, swapped at step {step}")
            shutil.rmtree(out)
        self.fail(f"the index took more than {MAX_STEPS} steps")


FLIPPER = textwrap.dedent("""\
    import os, sys, time
    real, moved, decoy, stop = sys.argv[1:5]
    flips = 0
    while not os.path.exists(stop):
        try:
            os.rename(real, moved)
            os.symlink(decoy, real)
            time.sleep(float(sys.argv[5]))
            os.unlink(real)
            os.rename(moved, real)
            flips += 1
            time.sleep(float(sys.argv[5]))
        except OSError:
            if os.path.islink(real):
                os.unlink(real)
            if os.path.isdir(moved) and not os.path.exists(real):
                os.rename(moved, real)
    print(flips)
""")

DRIVER = textwrap.dedent("""\
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("launch", sys.argv[1])
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    launch.load_package()
    import contextlib, io
    from torch_backport.engine import carry_out
    from torch_backport.infra.errors import BackportError
    from torch_backport.infra.order import Order, Task
    counts = {"done": 0, "refused": 0, "failed": 0}
    for _ in range(int(sys.argv[2])):
        for command in ("apply", "revert"):
            try:
                with contextlib.redirect_stdout(io.StringIO()), \\
                        contextlib.redirect_stderr(io.StringIO()):
                    code = carry_out(Order(Task.INSTALL, command=command))
                counts["done" if code == 0 else "refused"] += 1
            except BackportError:
                counts["refused"] += 1
            except OSError:
                counts["failed"] += 1
    print(json.dumps(counts))
""")


@needs_root_and_setpriv
class SwappedDirectoryRaceTest(RootOwnedCopyCase):
    def test_flipping_a_directory_while_root_applies_writes_nothing_outside(self) -> None:
        copy = self.nobodys_install("install")
        python = copy / self.template.python.relative_to(self.template.root)
        real = self.site_of(copy) / "torch" / "_inductor"
        decoy = self.decoy
        scripts = self.root / "scripts"
        scripts.mkdir(mode=0o755)
        (scripts / "flip.py").write_text(FLIPPER)
        (scripts / "drive.py").write_text(DRIVER)
        stop = self.root / "stop"
        flipper = subprocess.Popen(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             "/usr/bin/python3", str(scripts / "flip.py"), str(real),
             str(real.with_name("_inductor.real")), str(decoy), str(stop), FLIP_PAUSE],
            stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(0.2)
            driven = subprocess.run(
                [str(python), str(scripts / "drive.py"),
                 str(REPO / "torch_backport" / "_launch.py"), str(PAIRS)],
                capture_output=True, text=True, timeout=1200)
        finally:
            stop.touch()
            flips, _ = flipper.communicate(timeout=60)
        self.assertEqual(driven.returncode, 0, driven.stderr[-3000:])
        counts = json.loads(driven.stdout.splitlines()[-1])
        self.assertEqual(sum(counts.values()), 2 * PAIRS, counts)
        self.assertGreater(int(flips), PAIRS, "the directory was hardly flipped")
        self.assertNothingOutsideChanged(f"flipped {flips.strip()} times while root applied "
                                         f"and reverted: {counts}")
        self.assertEqual(sorted(os.listdir(self.root)),
                         ["install", "root-owned", "scripts", "stop", "template"])


if __name__ == "__main__":
    unittest.main()
