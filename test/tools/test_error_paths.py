"""Wrong invocations a new user made (issue 22): each gets one clear line
naming the bad value, the right exit code, no traceback and no raw errno,
and changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from checkout_repo import make_checkout, site_of
from fake_install import (APPLY, InstallTestCase, source_python, STOCK)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = subprocess.run([str(APPLY), *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})})
    return result.returncode, result.stdout + result.stderr


class ErrorPathsTest(InstallTestCase):
    scratch_prefix = "pregrad-error-paths-test-"

    def assertOneClearLine(self, output: str, *fragments: str) -> None:
        self.assertNotIn("Traceback", output)
        self.assertNotIn("[Errno", output)
        for fragment in fragments:
            self.assertIn(fragment, output)

    def test_a_python_named_on_path_is_looked_up_there(self) -> None:
        install = self.install()
        code, output = run("--python", "python", "--status",
                           env={"PATH": f"{install.python.parent}{os.pathsep}{os.environ['PATH']}"})
        self.assertEqual(code, 0, output)
        self.assertOneClearLine(output, "pristine")

    def test_a_repeated_python_is_a_usage_error(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = run("--python", str(install.python), "--python", str(install.python))
        self.assertEqual(code, 2, output)
        self.assertOneClearLine(output, "--python given more than once")
        self.assertEqual(install.snapshot(), before)

    def test_a_cache_that_is_a_file_is_refused_before_anything_is_read(self) -> None:
        cache = self.tmp / "cache"
        cache.write_text("not a directory\n")
        code, output = run("--wheel", "torch==2.11.0", "--out", str(self.tmp / "out"),
                           "--check", env={"PREGRAD_CACHE": str(cache)})
        self.assertEqual(code, 1, output)
        self.assertOneClearLine(output, f"PREGRAD_CACHE={cache} is not a directory")
        self.assertFalse((self.tmp / "out").exists())

    def test_an_out_that_is_a_file_is_refused_before_reading_with_or_without_check(self) -> None:
        out = self.tmp / "out"
        out.write_text("keep me\n")
        for extra in ([], ["--check"]):
            with self.subTest(extra=extra):
                code, output = run("--wheel", str(self.tmp / "missing.whl"), "--out", str(out),
                                   *extra)
                self.assertEqual(code, 1, output)
                self.assertOneClearLine(output, f"--out {out} is not a directory; nothing was "
                                        "read or written")
                self.assertNotIn("would write", output)
        code, output = run("--overlay", "v2.11.0", "--out", str(out))
        self.assertEqual(code, 1, output)
        self.assertOneClearLine(output, f"--out {out} is not a directory")
        self.assertEqual(out.read_text(), "keep me\n")

    def test_no_git_on_path_says_so(self) -> None:
        install = self.install()
        before = install.snapshot()
        bare = self.tmp / "bin"  # python3 and bash for the shim, no git
        bare.mkdir()
        # The interpreter itself, not a launcher (pyenv's shims need pyenv on PATH).
        (bare / "python3").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
        for tool in ("bash", "dirname", "env"):
            found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                   text=True).stdout.strip()
            (bare / tool).symlink_to(found)
        code, output = run("--python", str(install.python), env={"PATH": str(bare)})
        self.assertEqual(code, 1, output)
        self.assertOneClearLine(output, "git is not on PATH")
        self.assertEqual(install.snapshot(), before)

    def test_check_with_no_commit_is_a_usage_error(self) -> None:
        checkout = make_checkout(self.tmp / "checkout", site_of(source_python(STOCK)))
        code, output = run(str(checkout.path), "--check", "--no-commit")
        self.assertEqual(code, 2, output)
        self.assertOneClearLine(output, "--check writes nothing, so --no-commit")

    def test_lock_goes_with_a_real_wheel_build_and_names_a_file(self) -> None:
        install = self.install()
        for args, code_wanted, said in (
                (("--python", str(install.python), "--lock", "x.txt"), 2,
                 "--lock goes with --wheel"),
                (("--wheel", "torch==2.11.0", "--out", str(self.tmp / "out"), "--check", "--lock",
                  str(self.tmp / "x.txt")), 2, "--lock with --check"),
                (("--wheel", "torch==2.11.0", "--out", str(self.tmp / "out"), "--lock",
                  str(self.tmp)), 1, "is a directory; name the file to write")):
            with self.subTest(args=args):
                code, output = run(*args)
                self.assertEqual(code, code_wanted, output)
                self.assertOneClearLine(output, said)
        self.assertFalse((self.tmp / "out").exists())

    def test_verify_and_model_rules_are_usage_errors(self) -> None:
        install = self.install()
        python = str(install.python)
        checkout = str(self.tmp)
        for args, said in (
                (("--python", python, "--model", "m:make"), "--model goes with --verify"),
                (("--python", python, "--verify", "--model", "m"), "say MODULE:FACTORY"),
                (("--python", python, "--verify", "--model", "m:make", "--topic", "all"),
                 "not with --topic"),
                (("--python", python, "--verify", "--check"), "--verify writes nothing"),
                (("--python", python, "--verify", "--status"),
                 "--verify and --status do not go together"),
                ((checkout, "--verify"), "not a CHECKOUT"),
                (("--verify", "--model"), "--model needs MODULE:FACTORY")):
            with self.subTest(args=args):
                code, output = run(*args)
                self.assertEqual(code, 2, output)
                self.assertOneClearLine(output, said)

    def test_verify_of_a_python_without_torch_says_so(self) -> None:
        venv = self.tmp / "no-torch"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        code, output = run("--python", python, "--verify", "--topic", "all")
        self.assertEqual(code, 1, output)
        self.assertOneClearLine(output, f"{python} has no torch installed")

    def test_revert_of_an_unpatched_tree_names_each_topic(self) -> None:
        checkout = make_checkout(self.tmp / "checkout", site_of(source_python(STOCK)))
        before = checkout.state()
        code, output = run(str(checkout.path), "--revert")
        self.assertEqual(code, 0, output)
        self.assertIn("topic pre-grad-pass-timing: nothing to revert: no commit of its v2.11.0 "
                      "series is in HEAD's history", output)
        self.assertIn("topic autocast-cache-key: nothing to revert", output)
        self.assertEqual(checkout.state(), before)

    def test_a_release_older_than_every_base_is_refused_before_any_download(self) -> None:
        for args in (("--overlay", "v2.8.0"), ("--wheel", "torch==2.8.0")):
            with self.subTest(args=args):
                code, output = run(*args, "--out", str(self.tmp / "out"),
                                   env={"PREGRAD_CACHE": str(self.tmp / "cache")})
                self.assertEqual(code, 1, output)
                self.assertOneClearLine(output, "torch 2.8.0 is older than every base here",
                                        "nothing was downloaded")
                self.assertFalse((self.tmp / "cache").exists())
                self.assertFalse((self.tmp / "out").exists())
