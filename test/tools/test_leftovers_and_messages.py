"""Leftover state and the messages a new user met (issue 29): state left by
a torch uninstalled or replaced while patched is named with the command that
removes it; root keeps the owner's ownership; each wrong invocation says
what happened and what to do."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from fake_install import (APPLY, FakeInstall, InstallTestCase, make_fake_install,
                          source_python, STATE_DIRNAME, STOCK, TOUCHED, UPSTREAM)
from torch_backport.engine import LAUNCH
from torch_backport.infra.paths import REPO

NOBODY = 65534


def run(*args: str) -> tuple[int, str]:
    result = subprocess.run([str(APPLY), *args], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def uninstall_torch(install: FakeInstall) -> None:
    """What `pip uninstall torch` does: the RECORD's files go, this project's
    state directories (not in the RECORD) stay."""
    shutil.rmtree(install.site / "torch")
    for dist_info in install.site.glob("torch-*.dist-info"):
        shutil.rmtree(dist_info)


class LeftoversTest(InstallTestCase):
    def test_state_left_by_an_uninstalled_torch_is_named_and_removed(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        uninstall_torch(install)
        code, output = install.run("--status")
        self.assertEqual(code, 1, output)
        self.assertIn("<python> has no torch installed, but site-packages holds this "
                      "project's state from a torch that was uninstalled while patched:",
                      output)
        self.assertIn(f"  <site>/{STATE_DIRNAME} (torch 2.11.0, base v2.11.0, ", output)
        self.assertIn(f"  <site>/{STATE_DIRNAME}-autocast-cache-key (torch 2.11.0, base "
                      "v2.11.0, ", output)
        self.assertIn("remove it (and nothing else) with: --python <python> --revert", output)
        others = sorted(p.name for p in install.site.iterdir() if STATE_DIRNAME not in p.name)
        code, output = install.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertEqual(sorted(p.name for p in install.site.iterdir()), others)
        code, output = install.run("--status")
        self.assertEqual(code, 1, output)
        self.assertIn("has no torch installed", output)
        self.assertNotIn("site-packages holds", output)

    def test_state_of_a_replaced_torch_is_named_by_status(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        uninstall_torch(install)
        # pip install torch==2.12.0 over it: its files, its dist-info.
        upstream = make_fake_install(self.tmp / "upstream", source_python(UPSTREAM))
        for entry in upstream.site.iterdir():
            if entry.name.startswith("torch"):
                shutil.copytree(entry, install.site / entry.name)
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
        self.assertIn(f"note: <site>/{STATE_DIRNAME} is left from torch 2.11.0 (base v2.11.0), "
                      "which another install of torch replaced; --revert removes it", output)
        self.assertEqual(install.run("--revert")[0], 0)
        self.assertNotIn("is left from torch", install.run("--status")[1])

    def test_root_applying_to_another_users_install_keeps_the_owners_ownership(self) -> None:
        if os.geteuid() != 0:
            self.skipTest("needs root")
        root = Path(self.tmp) / "owned"
        root.mkdir()
        os.chmod(self.tmp, 0o755)
        install = make_fake_install(root, source_python(STOCK), base_python="/usr/bin/python3")
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(root)], check=True)
        code, output = install.run()
        self.assertEqual(code, 0, output)
        owners = {str(p.relative_to(install.site)): p.lstat().st_uid
                  for p in install.site.rglob("*")}
        self.assertEqual({rel: uid for rel, uid in owners.items() if uid != NOBODY}, {})
        code, output = install.run("--revert", user="nobody")
        self.assertEqual(code, 0, output)


def loading_the_package(pid: int) -> bool:
    """Whether process `pid` maps an extension module that only the
    package's own imports load (json, subprocess), not Python's start-up."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    return any(name in maps for name in ("/_json.", "/_posixsubprocess.", "/select."))


def at_a_terminal() -> None:
    """A child's Ctrl-C as at a terminal: whoever ran the tests in the
    background (`cmd &` in a script) made SIGINT ignored, which children
    inherit and the command rightly keeps ignoring."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def in_python(script: str) -> subprocess.CompletedProcess[str]:
    """`script` run by this Python with the package importable."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, timeout=60, preexec_fn=at_a_terminal)


SIGINT_BIT = 1 << (signal.SIGINT - 1)  # in /proc's SigBlk mask


class CtrlCHandOverTest(unittest.TestCase):
    """The command execs into the target interpreter's engine: a Ctrl-C that
    comes as it does is delivered there, not lost with the old image (the
    engine would then run to the end and exit 0)."""

    def test_the_engine_starts_with_ctrl_c_held(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            python = Path(tmp) / "python"
            python.write_text("#!/bin/sh\nexec grep '^SigBlk:' /proc/self/status\n")
            python.chmod(0o755)
            result = in_python(
                "from torch_backport.engine import in_target\n"
                "from torch_backport.infra.order import Order, Task\n"
                f"in_target({str(python)!r}, Order(Task.INSTALL))\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        blocked = int(result.stdout.split()[1], 16)
        self.assertEqual(blocked & SIGINT_BIT, SIGINT_BIT, result.stdout)

    def test_a_ctrl_c_held_across_the_exec_is_one_line_and_130(self) -> None:
        result = in_python(
            "import os, signal, sys\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            f"os.execv(sys.executable, [sys.executable, {str(LAUNCH)!r}, 'engine', '{{}}'])\n")
        self.assertEqual((result.returncode, result.stderr),
                         (130, "interrupted (Ctrl-C); nothing was done\n"))

    def test_a_ctrl_c_while_git_starts_is_raised_once_it_has_started(self) -> None:
        result = in_python(
            "import os, signal\n"
            "from torch_backport.infra.git import ctrl_c_deferred\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "try:\n"
            "    with ctrl_c_deferred():\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        print('the block ran to its end')\n"
            "except KeyboardInterrupt:\n"
            "    print('then the Ctrl-C was raised')\n")
        self.assertEqual(result.stdout, "the block ran to its end\nthen the Ctrl-C was raised\n",
                         result.stderr)

    def test_git_keeps_a_ctrl_c_its_caller_ignores_ignored(self) -> None:
        result = in_python(
            "import signal\n"
            "from torch_backport.infra.git import run_to_the_end\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "print(run_to_the_end(['grep', '^SigIgn:', '/proc/self/status']).stdout)\n")
        ignored = int(result.stdout.split()[1], 16)
        self.assertEqual(ignored & SIGINT_BIT, SIGINT_BIT, result.stdout + result.stderr)

    def test_git_has_ended_before_an_error_goes_on(self) -> None:
        """An error while git runs (a Ctrl-C, here an alarm) goes on only
        once git is killed and reaped: nothing still writes in the scratch
        repository that the error's cleanup removes."""
        result = in_python(
            "import os, signal, tempfile\n"
            "from torch_backport.infra.git import run_to_the_end\n"
            "def stop(signum, frame):\n"
            "    raise RuntimeError('stopped')\n"
            "signal.signal(signal.SIGALRM, stop)\n"
            "with tempfile.TemporaryDirectory() as tmp:\n"
            "    pid_file = os.path.join(tmp, 'pid')\n"
            "    signal.setitimer(signal.ITIMER_REAL, 2)\n"
            "    try:\n"
            "        run_to_the_end(['sh', '-c', f'echo $$ > {pid_file}; exec sleep 60'])\n"
            "    except RuntimeError:\n"
            "        pid = open(pid_file).read().strip()\n"
            "        print('still there' if os.path.exists(f'/proc/{pid}') else 'gone')\n")
        self.assertEqual(result.stdout, "gone\n", result.stderr)


class MessagesTest(InstallTestCase):
    def test_an_empty_python_is_a_usage_error(self) -> None:
        code, output = run("--python", "", "--status")
        self.assertEqual(code, 2, output)
        self.assertIn("--python needs an interpreter; it was given an empty name", output)

    def test_an_interpreter_given_as_a_checkout_hints_at_python(self) -> None:
        install = self.install()
        code, output = run(str(install.python), "--status")
        self.assertEqual(code, 1, output)
        self.assertIn(f"{install.python} is a program, not a PyTorch checkout; to patch the "
                      f"torch of a Python interpreter, say --python {install.python}", output)

    def test_ctrl_c_at_once_is_one_line_and_130(self) -> None:
        install = self.install()
        process = subprocess.Popen([str(APPLY), "--python", str(install.python), "--check"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=at_a_terminal)
        # At once, while the package loads: once _launch.py's first lines
        # run. Before them a Ctrl-C meets bash or an interpreter still
        # starting, Python's own (a loaded machine takes longer than any fixed
        # sleep); the package's imports are the first to map json's and
        # subprocess's extension modules.
        deadline = time.monotonic() + 30
        while not loading_the_package(process.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate()
        self.assertEqual(process.returncode, 130, out + err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_revert_of_files_edited_by_hand_is_a_refusal_that_says_so(self) -> None:
        install = self.install()
        install.path(TOUCHED[0]).write_bytes(install.path(TOUCHED[0]).read_bytes() + b"# edit\n")
        code, output = install.run("--revert")
        self.assertEqual(code, 1, output)
        self.assertIn("scripts/apply.sh: refused: files differ from torch's RECORD, and the "
                      "series was not applied by this script", output)
        self.assertNotIn("nothing to revert", output)

    def test_overlay_of_another_base_from_an_install_names_the_installs_base(self) -> None:
        install = self.install()
        code, output = install.run("--overlay", "v2.12.0", "--out", str(self.tmp / "out"))
        self.assertEqual(code, 1, output)
        self.assertIn("with the files of v2.11.0, not those of v2.12.0", output)

    def test_a_read_only_filesystem_is_named_as_such(self) -> None:
        if os.geteuid() != 0:
            self.skipTest("needs root to mount")
        small = self.tmp / "ro"
        small.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)]
                          ).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        self.addCleanup(subprocess.run, ["umount", "-l", str(small)])
        install = make_fake_install(small / "install", source_python(STOCK))
        subprocess.run(["mount", "-o", "remount,ro", str(small)], check=True)
        code, output = install.run()
        self.assertEqual(code, 1, output)
        self.assertIn("<site> is on a read-only filesystem; patch the image where it is "
                      "built, or mount it read-write; nothing was changed", output)


if __name__ == "__main__":
    unittest.main()
