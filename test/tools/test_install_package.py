"""`pip install` of this project: the torch-backport command and its package data.

Once for the class: the project's files (`git ls-files`, untracked ones not
ignored included, as they are in the work tree) are copied to a scratch
directory, so the build leaves nothing in the checkout; a fake torch install
(fake_install.py) gets pip (ensurepip), and the copy is pip-installed into it,
as `pip install torch <this package>` does in a Dockerfile. Offline
(--no-build-isolation) when the venv's setuptools is the build backend
pyproject.toml asks for (77 or later); Python 3.11's ensurepip brings
setuptools 65, so there pip fetches the build backend from the configured
index. About 5 s on an idle machine with pip's cache warm
(the whole file: 8 s idle, up to 20 s on a busy 2-core machine).

Each scenario then runs the installed command and the clone's scripts/apply.sh
on installs made the same way and compares output, exit codes and bytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import pytest

from fake_install import (FakeInstall, make_fake_install, REPO, ScratchTestCase, source_python,
                          STATE_DIRNAME, STOCK)
from fake_wheel import make_fake_wheel, release_files
from index_clients import clients_python
from torch_backport import __version__
from torch_backport.patchset import releases

APPLY = REPO / "scripts" / "apply.sh"
PACKAGE = "torch_backport"


def project_files() -> list[str]:
    """The files a clone of the work tree would have, repository-relative."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    return sorted(rel for rel in listed if rel and (REPO / rel).is_file())


def run(command: list[str]) -> tuple[int, str, str]:
    result = subprocess.run(command, capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def pip_install(python: Path, source: Path) -> None:
    """pip-installs `source` into `python`'s environment, offline if it can."""
    # pyproject.toml's build backend: setuptools 77 or later (PEP 639's license).
    offline = run([str(python), "-c",
                   "import sys, setuptools; sys.exit(0 if tuple(map(int, "
                   "setuptools.__version__.split('.')[:2])) >= (77, 0) else 1)"])
    isolation = ["--no-build-isolation"] if offline[0] == 0 else []
    code, out, err = run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                          *isolation, str(source)])
    assert code == 0, f"pip install {source} failed:\n{out}{err}"


@pytest.mark.slow
class InstallPackageTest(ScratchTestCase):
    scratch_prefix = "pregrad-install-package-test-"
    maxDiff = None
    source: Path  # the copy of the project that was installed
    files: list[str]  # its files
    venv: FakeInstall
    package: Path
    command: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls._tmp = tempfile.TemporaryDirectory(prefix="pregrad-install-package-")
        tmp = Path(cls._tmp.name)
        cls.source = source = tmp / "source"
        cls.files = project_files()
        for rel in cls.files:
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, source / rel)
        cls.venv = make_fake_install(tmp / "venv", source_python(STOCK))
        subprocess.run([str(cls.venv.python), "-m", "ensurepip"], check=True,
                       stdout=subprocess.DEVNULL)
        pip_install(cls.venv.python, source)
        cls.package = cls.venv.site / PACKAGE
        cls.command = cls.venv.python.parent / "torch-backport"

    @classmethod
    def tearDownClass(cls) -> None:
        cls._tmp.cleanup()

    def generic(self, text: str, *installs: FakeInstall) -> str:
        for install in installs:
            text = text.replace(str(install.site), "<site>")
            text = text.replace(str(install.python), "<python>")
        return text

    def backport(self, *args: str) -> tuple[int, str]:
        """The installed command; exit code and output (stdout then stderr)."""
        code, out, err = run([str(self.command), *args])
        return code, self.generic(out + err, self.venv)

    def torch_files(self) -> dict[str, bytes]:
        """What apply.sh may touch in the venv: torch, its dist-info and the
        topics' state directories (a fake install from make_fake_install holds
        just these)."""
        return {rel: data for rel, data in self.venv.snapshot().items()
                if rel.startswith(("torch/", "torch-", STATE_DIRNAME))}

    # The package.

    def test_the_package_is_the_repository_s_torch_backport_and_patches(self) -> None:
        """The product and the series, nothing else: the clone's scripts/ (its
        test harness and maintainer tools) are not shipped."""
        tracked = {rel.removeprefix(f"{PACKAGE}/"): rel for rel in self.files
                   if rel.startswith((f"{PACKAGE}/", "patches/"))
                   or rel.startswith("docs/") and rel.endswith(".md")}
        installed = sorted(
            str(path.relative_to(self.package))
            for path in self.package.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        )
        self.assertEqual(installed, sorted(tracked))
        # The maintainer tools (maint/, run by scripts/new-base and the like) stay behind.
        self.assertFalse((self.venv.site / "maint").exists())
        self.assertNotIn("new_base.py", installed)
        for rel, source in tracked.items():
            self.assertEqual((self.package / rel).read_bytes(),
                             (self.source / source).read_bytes(), rel)

    def test_a_release_build_gives_a_wheel_and_an_sdist_that_install(self) -> None:
        """PyPA's build, as a release is made: a wheel and an sdist named by
        the version; the wheel, in a fresh venv, says its version and the
        releases it serves, and --status --json parses."""
        dist = self.tmp / "dist"
        built = subprocess.run([str(clients_python()), "-m", "build", "--outdir", str(dist),
                                str(self.source)], capture_output=True, text=True)
        self.assertEqual(built.returncode, 0, built.stdout[-2000:] + built.stderr[-2000:])
        name = f"torch_pregrad_backport-{__version__}"
        self.assertEqual(sorted(path.name for path in dist.iterdir()),
                         [f"{name}-py3-none-any.whl", f"{name}.tar.gz"])
        fresh = make_fake_install(self.tmp / "fresh", source_python(STOCK))
        subprocess.run([str(fresh.python), "-m", "ensurepip"], check=True,
                       stdout=subprocess.DEVNULL)
        code, out, err = run([str(fresh.python), "-m", "pip", "install", "-q", "--no-deps",
                              str(dist / f"{name}-py3-none-any.whl")])
        self.assertEqual(code, 0, out + err)
        command = fresh.python.parent / "torch-backport"
        code, out, err = run([str(command), "--version"])
        self.assertEqual((code, out.splitlines()[0]), (0, f"torch-backport {__version__}"))
        code, out, err = run([str(command), "apply", "--status", "--json"])
        self.assertEqual(code, 0, err)
        self.assertEqual({topic["state"] for topic in json.loads(out)["topics"]}, {"pristine"})

    def test_only_the_package_and_the_command_are_installed(self) -> None:
        (dist_info,) = self.venv.site.glob("torch_pregrad_backport-*.dist-info")
        tops = {line.split(",", 1)[0].split("/", 1)[0]
                for line in (dist_info / "RECORD").read_text().splitlines()}
        bin_dir = os.path.relpath(self.venv.python.parent, self.venv.site)
        self.assertEqual(tops, {PACKAGE, dist_info.name, bin_dir.split("/", 1)[0]})
        self.assertIn(f"{bin_dir}/torch-backport", {
            line.split(",", 1)[0] for line in (dist_info / "RECORD").read_text().splitlines()})

    # The command.

    def test_apply_status_and_revert_behave_like_apply_sh(self) -> None:
        """`torch-backport apply ARGS` (no --python: the torch next to it) and
        `scripts/apply.sh --python PY ARGS` on an identical install: same exit
        codes, same output, same bytes."""
        reference = make_fake_install(self.tmp / "reference", source_python(STOCK))
        pristine = self.torch_files()
        self.assertEqual(pristine, reference.snapshot())
        statuses = []
        for args in [("--check",), (), ("--status",), (), ("--revert",), ("--status",)]:
            code, output = self.backport("apply", *args)
            self.assertEqual((code, output), reference.run(*args), args)
            self.assertEqual(code, 0, output)
            self.assertEqual(self.torch_files(), reference.snapshot(), args)
            if args == ("--status",):
                statuses.append(re.findall(r"^(patched|pristine):", output, re.MULTILINE))
                code, output = self.backport("apply", "--status", "--json")
                self.assertEqual(code, 0, output)
                self.assertEqual(json.loads(output)["topics"][0]["state"],
                                 "patched" if len(statuses) == 1 else "pristine")
            if args == ():
                self.assertNotEqual(self.torch_files(), pristine)
        self.assertIn("patched", statuses[0])
        self.assertNotIn("patched", statuses[1])
        self.assertEqual(self.torch_files(), pristine)

    def test_an_explicit_python_is_passed_through(self) -> None:
        install = make_fake_install(self.tmp / "other", source_python(STOCK))
        code, out, err = run([str(self.command), "apply", "--python", str(install.python),
                              "--status"])
        self.assertEqual((code, self.generic(out + err, install)),
                         install.run("--status"))

    def test_apply_help_is_apply_sh_s_help_after_one_line(self) -> None:
        code, out, err = run([str(self.command), "apply", "--help"])
        self.assertEqual((code, err), (0, ""))
        first, rest = out.split("\n", 1)
        self.assertTrue(rest.startswith("Usage: torch-backport apply --python PY"), rest)
        # The docs it cites are the package's (a pip install has no clone).
        self.assertEqual(rest, run([str(APPLY), "--help"])[1]
                         .replace("scripts/apply.sh", "torch-backport apply")
                         .replace("docs/usage.md", f"{self.package}/docs/usage.md")
                         .replace("(scripts/new-base)",
                                  "(scripts/new-base, in a clone of this project)"))
        self.assertTrue((self.package / "docs" / "usage.md").is_file())
        first = first.replace(str(self.package), "<package>")
        self.assertEqual(
            first.replace(str(self.venv.python), "<python>"),
            "torch-backport apply ARGS is scripts/apply.sh ARGS, adding --python "
            "<python> when ARGS have no --python, CHECKOUT, --overlay or --wheel.")

    def test_help(self) -> None:
        code, out, err = run([str(self.command), "--help"])
        self.assertEqual((code, err), (0, ""))
        out = out.replace(str(self.package), "<package>").replace(str(self.venv.python), "<python>")
        self.assertExpectedInline(out, """\
Usage: torch-backport apply [ARGS...]
       torch-backport --help | --version

`torch-backport apply ARGS` is scripts/apply.sh ARGS of a clone of
torch-pregrad-backport 0.3.0, installed with its patch series in
  <package>/patches
to patch, check, report on (--status) or revert (--revert) the torch of an
installed wheel, to apply the series to a PyTorch checkout, or to write an
overlay.
`torch-backport apply --help` lists ARGS.

Without --python PY, a CHECKOUT, --overlay or --wheel among ARGS, `apply` adds
  --python <python>
the interpreter this command is installed into, so it patches the torch next
to it. --overlay needs --out DIR: its default, overlay/ beside the scripts,
would be inside site-packages.

Requirements: git (wheel mode applies the patches with `git apply`).
Exit codes: 0 done or nothing to do; 1 refused or failed (nothing changed); 2
usage error; 3 --status on an unseen release (see --status); 130 interrupted
(Ctrl-C; --status tells where it stands).
A usage error of torch-backport itself exits 2 too.
""")

    def test_version_names_the_releases_it_serves(self) -> None:
        code, out, err = run([str(self.command), "--version"])
        self.assertEqual((code, err), (0, ""))
        version, serves = out.splitlines()
        self.assertEqual(version, f"torch-backport {__version__}")
        self.assertEqual(re.findall(r"\d+\.\d+\.\d+", serves),
                         [release.version for release in releases.served()])

    def test_usage_errors(self) -> None:
        before = self.venv.snapshot()
        results = "".join(
            f"$ {' '.join(('torch-backport', *args))}\n[{code}] {output}"
            for args in [(), ("patch",), ("new-base", "2.16.0"), ("apply", "--overlay", "v2.11.0"),
                         ("apply", "--bogus"), ("apply", "--python")]
            for code, output in [self.backport(*args)]
        )
        self.assertExpectedInline(results, """\
$ torch-backport
[2] torch-backport: say what to do: torch-backport apply [ARGS...]
(see torch-backport --help)
$ torch-backport patch
[2] torch-backport: unknown command: patch (the one command is `apply`)
(see torch-backport --help)
$ torch-backport new-base 2.16.0
[2] torch-backport: new-base is a maintainer command of a clone, not installed: run
scripts/new-base in a clone of torch-pregrad-backport (the one command here is `apply`)
(see torch-backport --help)
$ torch-backport apply --overlay v2.11.0
[2] torch-backport: --overlay needs --out DIR here: its default, overlay/ beside apply.sh,
would be inside site-packages (<site>/torch_backport)
(see torch-backport --help)
$ torch-backport apply --bogus
[2] torch-backport apply: unknown argument: --bogus
(see torch-backport apply --help)
$ torch-backport apply --python
[2] torch-backport apply: --python needs an interpreter
(see torch-backport apply --help)
""")
        self.assertEqual(self.venv.snapshot(), before)

    def test_a_checkout_gets_no_python(self) -> None:
        """A positional CHECKOUT goes to apply.sh as it is (no --python added),
        also after options that take a value."""
        missing = str(self.tmp / "no-such-checkout")
        for args in [(missing,), ("--check", missing)]:
            code, output = self.backport("apply", *args)
            self.assertEqual((code, output),
                             (1, f"torch-backport apply: {missing} does not exist\n"))

    def test_wheel_is_apply_sh_s(self) -> None:
        """`torch-backport apply --wheel` adds no --python and writes the
        same wheel, byte for byte, as the clone's apply.sh."""
        source = make_fake_wheel(self.tmp / "in", release_files(source_python(STOCK)), "2.11.0")
        ours, theirs = self.tmp / "ours", self.tmp / "theirs"
        # The clone's python3 may lack PyPA's packages: its tools venv is made
        # once, with a message of its own, before the runs compared here.
        run([str(APPLY), "--wheel", str(source), "--out", str(self.tmp / "warm-up")])
        code, output = self.backport("apply", "--wheel", str(source), "--out", str(ours))
        expected = run([str(APPLY), "--wheel", str(source), "--out", str(theirs)])
        self.assertEqual((code, output.replace(str(ours), "<out>")),
                         (expected[0], (expected[1] + expected[2]).replace(str(theirs), "<out>")))
        self.assertEqual(code, 0, output)
        (wheel,) = ours.iterdir()
        self.assertEqual(wheel.read_bytes(), (theirs / wheel.name).read_bytes())

    def test_overlay_with_out_is_apply_sh_s(self) -> None:
        ours, theirs = self.tmp / "ours", self.tmp / "theirs"
        reference = make_fake_install(self.tmp / "reference", source_python(STOCK))
        code, output = self.backport("apply", "--overlay", "v2.11.0", "--python",
                                     str(self.venv.python), "--out", str(ours))
        expected = reference.run("--overlay", "v2.11.0", "--out", str(theirs))
        self.assertEqual((code, output.replace(str(ours), "<out>")),
                         (expected[0], expected[1].replace(str(theirs), "<out>")))
        self.assertEqual(code, 0, output)
        files = sorted(p.relative_to(theirs) for p in theirs.rglob("*") if p.is_file())
        self.assertTrue(files)
        self.assertEqual(sorted(p.relative_to(ours) for p in ours.rglob("*") if p.is_file()),
                         files)
        for rel in files:  # the stamp names the python
            self.assertEqual(
                (ours / rel).read_bytes().replace(bytes(self.venv.python), b"<python>"),
                (theirs / rel).read_bytes().replace(bytes(reference.python), b"<python>"), rel)


if __name__ == "__main__":
    unittest.main()
