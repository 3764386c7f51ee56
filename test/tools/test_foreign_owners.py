"""Root among things another user owns (issue 47): a cache, a state
directory made under umask 000, an index directory. `nobody` plants what it
can (with setpriv); root then runs the tool. Nothing of nobody's runs, no
inode of nobody's lands in root's install, every run ends well within its
deadline and refuses by name, with no traceback."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from fake_install import APPLY, InstallTestCase, source_python, STATE_DIRNAME, STOCK, TOUCHED
from fake_wheel import make_fake_wheel, release_files
from other_user import as_nobody, DEADLINE, give_to_nobody, needs_root_and_setpriv, NOBODY
from torch_backport.engine import pypa_venv

PYPA_READY = "wheel==0.48.0 packaging==26.4 urllib3==2.8.0"  # engine.PYPA


def run_apply(*args: str, env: dict[str, str], umask: int | None = None) -> tuple[int, str]:
    def set_umask() -> None:
        if umask is not None:
            os.umask(umask)

    result = subprocess.run([str(APPLY), *args], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=DEADLINE, preexec_fn=set_umask)
    return result.returncode, result.stdout + result.stderr


@needs_root_and_setpriv
class ForeignCacheTest(InstallTestCase):
    """PREGRAD_CACHE holds PyPA's venv, whose python the tool runs, and the
    release wheels it patches: pip's rule, the cache must be the caller's."""

    scratch_prefix = "pregrad-foreign-cache-"

    def planted_pypa(self, cache: Path) -> Path:
        """A python in the cache's PyPA venv, marked ready, that leaves a
        file when it runs; the file's path."""
        ran = self.tmp / "nobody-ran"
        venv = pypa_venv(cache)
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text(f"#!/bin/sh\ntouch {ran}\n")
        (venv / "bin" / "python").chmod(0o755)
        (venv / ".pregrad-ready").write_text(PYPA_READY)
        return ran

    def assertRefusedCache(self, cache: Path, output: str, code: int, naming: str) -> None:
        self.assertEqual(code, 1, output)
        self.assertIn(f"the cache {cache} cannot be trusted: {naming}", output)
        self.assertNotIn("Traceback", output)

    def test_a_cache_another_user_owns_runs_nothing_from_it(self) -> None:
        cache = self.tmp / "cache"
        ran = self.planted_pypa(cache)
        give_to_nobody(cache)
        code, output = run_apply("--wheel", "torch==2.11.0", "--out", str(self.tmp / "out"),
                                 env={"PREGRAD_CACHE": str(cache)})
        self.assertRefusedCache(cache, output, code, f"{cache} is owned by uid {NOBODY}")
        self.assertFalse(ran.exists(), "the planted python ran")
        self.assertFalse((self.tmp / "out").exists())

    def test_a_file_another_user_owns_in_the_cache_is_refused_by_name(self) -> None:
        cache = self.tmp / "cache"
        ran = self.planted_pypa(cache)
        give_to_nobody(pypa_venv(cache) / "bin" / "python")
        code, output = run_apply("--wheel", "torch==2.11.0", "--out", str(self.tmp / "out"),
                                 env={"PREGRAD_CACHE": str(cache)})
        self.assertRefusedCache(cache, output, code,
                                f"{pypa_venv(cache)}/bin/python is owned by uid {NOBODY}")
        self.assertFalse(ran.exists(), "the planted python ran")

    def test_a_cache_below_a_directory_others_may_write_to_is_refused(self) -> None:
        shared = self.tmp / "shared"
        shared.mkdir()
        shared.chmod(0o777)  # no sticky bit: anyone may rename the cache away
        cache = shared / "cache"
        ran = self.planted_pypa(cache)
        code, output = run_apply("--wheel", "torch==2.11.0", "--out", str(self.tmp / "out"),
                                 env={"PREGRAD_CACHE": str(cache)})
        self.assertRefusedCache(cache, output, code,
                                f"{shared}, a directory above it, is owned by uid 0 with "
                                "mode drwxrwxrwx")
        self.assertFalse(ran.exists(), "the planted python ran")

    def test_a_cache_made_under_umask_000_is_the_callers_alone(self) -> None:
        from torch_backport.infra.fsio import trusted_cache, untrusted_cache_part
        cache = self.tmp / "new" / "cache"
        before = os.umask(0)
        try:
            trusted_cache(cache)
        finally:
            os.umask(before)
        self.assertEqual([stat.S_IMODE(path.stat().st_mode) for path in (cache.parent, cache)],
                         [0o700, 0o700])
        self.assertIsNone(untrusted_cache_part(cache))


@needs_root_and_setpriv
class ForeignStateTest(InstallTestCase):
    """The state directory's backups go back into the install by rename."""

    scratch_prefix = "pregrad-foreign-state-"

    def test_state_directories_are_not_open_under_umask_000(self) -> None:
        install = self.install()
        code, output = run_apply("--python", str(install.python), env={}, umask=0)
        self.assertEqual(code, 0, output)
        state = install.site / STATE_DIRNAME
        opened = [str(path.relative_to(install.site)) for path in [state, *state.rglob("*")]
                  if path.is_dir() and path.stat().st_mode & 0o022]
        self.assertEqual(opened, [])

    def test_a_backup_another_user_swapped_is_not_put_back(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        backup_dir = (install.site / STATE_DIRNAME / "orig" / TOUCHED[0]).parent
        backup_dir.chmod(0o777)  # as an earlier release left it under umask 000
        backup = backup_dir / Path(TOUCHED[0]).name
        own = backup_dir / "nobodys-copy"
        self.tmp.chmod(0o755)
        as_nobody("cp", str(backup), str(own))  # the wheel's bytes: RECORD alone passes them
        as_nobody("mv", "-f", str(own), str(backup))
        self.assertEqual(backup.stat().st_uid, NOBODY)
        patched = install.path(TOUCHED[0]).read_bytes()
        code, output = install.run("--revert")
        self.assertEqual(code, 1, output)
        self.assertIn("cannot be trusted: ", output)
        self.assertIn("is a directory others may write to (mode drwxrwxrwx)", output)
        self.assertNotIn("Traceback", output)
        self.assertEqual(install.path(TOUCHED[0]).read_bytes(), patched)
        self.assertEqual(install.path(TOUCHED[0]).stat().st_uid, 0)


@needs_root_and_setpriv
class ForeignIndexDirectoryTest(unittest.TestCase):
    """Root writes the index over a directory `nobody` owns."""

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pregrad-foreign-index-", dir="/tmp"))
        self.addCleanup(shutil.rmtree, self.root, True)
        os.chmod(self.root, 0o755)
        self.out = self.root / "dist"
        self.wheel = make_fake_wheel(self.out, release_files(source_python(STOCK)), "2.11.0")

    def write_index(self) -> tuple[int, str]:
        """The index written by a child process, so that a hang ends at the deadline."""
        script = ("import sys; from pathlib import Path;"
                  "from torch_backport.generated.index import read_all, write_index;"
                  "from torch_backport.infra.errors import Refused\n"
                  "try:\n    write_index(Path(sys.argv[1]), read_all(Path(sys.argv[1])))\n"
                  "except Refused as problem:\n    print(problem); sys.exit(1)\n")
        result = subprocess.run([sys.executable, "-c", script, str(self.out)],
                                capture_output=True, text=True, timeout=DEADLINE,
                                cwd=APPLY.parent.parent)
        return result.returncode, result.stdout + result.stderr

    def test_a_fifo_named_like_a_wheel_is_refused_without_waiting(self) -> None:
        fifo = self.out / "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl"
        os.mkfifo(fifo)
        give_to_nobody(self.out)
        code, output = self.write_index()
        self.assertEqual(code, 1, output)
        self.assertIn(f"{fifo} is a FIFO where this project reads a file", output)
        self.assertFalse((self.out / "simple").exists())

    def test_a_link_named_like_a_wheel_publishes_nothing_it_points_to(self) -> None:
        hidden = self.root / "root-only"
        hidden.mkdir(mode=0o700)
        secret_wheel = hidden / self.wheel.name
        shutil.move(self.wheel, secret_wheel)
        give_to_nobody(self.out)
        as_nobody("ln", "-s", str(secret_wheel), str(self.wheel))
        code, output = self.write_index()
        self.assertEqual(code, 1, output)
        self.assertIn(f"{self.wheel} is a symbolic link", output)
        self.assertEqual(sorted(path.name for path in self.out.iterdir()), [self.wheel.name])

    def test_a_directory_at_a_metadata_name_is_refused_by_name(self) -> None:
        metadata = self.out / f"{self.wheel.name}.metadata"
        metadata.mkdir()
        give_to_nobody(self.out)
        code, output = self.write_index()
        self.assertEqual(code, 1, output)
        self.assertIn(f"{metadata} is a directory where the index keeps a wheel's metadata "
                      "file", output)
        self.assertNotIn("Traceback", output)
        self.assertFalse((self.out / "simple").exists())


if __name__ == "__main__":
    unittest.main()
