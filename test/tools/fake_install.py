"""Small, real installs of torch for testing scripts/apply.sh.

A fake install is a venv made with `python -m venv --without-pip` whose
site-packages holds the files the topics' series touch, copied from a real torch
install, and a torch dist-info whose RECORD carries the real wheel's hashes for
them. To importlib.metadata it is torch; apply.sh never imports torch, so the
rest of the package is not needed. Building one takes well under a second.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import expecttest

from torch_backport.infra.paths import REPO
from torch_backport.patchset.identify import topic_files
from torch_backport.patchset.series import primary_topic, select_topics, topics

from prerequisites import missing

# The product's names that users and other tools see, written out here once
# and never imported from torch_backport: a change to one fails the tests
# that use it. (Which files a topic touches is data, read from the series.)
STATE_DIRNAME = ".torch-pregrad-backport"  # beside site-packages/torch
MANIFEST = "manifest.json"  # in the state directory
BACKUPS = "orig"  # <state directory>/orig/<path>: the wheel's bytes
BUILT_NAME = "PREGRAD_BACKPORT.json"  # in a patched wheel's dist-info
FAULT = "_PREGRAD_TEST_FAULT"  # fsio's fault hook: kill:N, enospc:N
# The supported bases, as apply.sh lists them.
BASES = "v2.9.0, v2.9.1, v2.10.0, v2.11.0, v2.12.0, v2.13.0, v2.14.1"
AUTOCAST_BASES = "v2.9.1, v2.10.0, v2.11.0, v2.12.0, v2.13.0, v2.14.1"
ISA_BASES = "v2.9.1, v2.10.0, v2.11.0, v2.12.0, v2.13.0"

__all__ = ["REPO"]  # re-exported: the tests take these facts from here

APPLY = REPO / "scripts" / "apply.sh"
# The real torch installs the tests copy from; scripts/test.sh sets both.
STOCK = "PREGRAD_STOCK_PYTHON"  # torch 2.11.0 as released
UPSTREAM = "PREGRAD_UPSTREAM_PYTHON"  # torch 2.12.0 as released
TOUCHED = topic_files(primary_topic())
# The file the opt-in cpu-isa-probe topic patches.
(ISA_PROBE,) = topic_files(select_topics(["cpu-isa-probe"])[0])
# The file the autocast-cache-key topic (applied by default too) patches.
(AUTOCAST,) = topic_files(select_topics(["autocast-cache-key"])[0])
INSTALLED = sorted({rel for topic in topics() for rel in topic_files(topic)})


class ScratchTestCase(expecttest.TestCase):
    """A test with its own scratch directory, self.tmp, removed afterwards."""
    scratch_prefix = "pregrad-test-"

    def setUp(self) -> None:
        super().setUp()
        scratch = tempfile.TemporaryDirectory(prefix=self.scratch_prefix)
        self.addCleanup(scratch.cleanup)
        self.tmp = Path(scratch.name)


class InstallTestCase(ScratchTestCase):
    """A scratch test that makes small installs (make_fake_install)."""

    def install(self, source: str = STOCK, version: str | None = None,
                vendor_edits: dict[str, bytes] | None = None) -> FakeInstall:
        """An install in the scratch directory with the files of the real
        install `source` names (STOCK, UPSTREAM), as release `version`."""
        return make_fake_install(self.tmp / "install", source_python(source), version,
                                 vendor_edits=vendor_edits)


def copy_project(copy: Path) -> Path:
    """The clone's commands, product, maintainer tools and series (scripts/,
    torch_backport/, maint/, patches/) copied to `copy`, for a test that
    damages or extends a series."""
    for part in ("scripts", "torch_backport", "maint", "patches"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def torch_site(python: str) -> Path:
    """Where `python`'s torch is installed (its site-packages)."""
    return Path(subprocess.run(
        [python, "-c",
         "import importlib.metadata as m; print(m.distribution('torch').locate_file(''))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip())


def source_python(variable: str) -> str:
    """The interpreter of a real torch install, named by scripts/test.sh;
    unset, the test skips (an error in the matrix: prerequisites.py)."""
    value = os.environ.get(variable)
    if not value:
        release = {STOCK: "2.11.0", UPSTREAM: "2.12.0"}.get(variable, "a release")
        missing(f"needs a torch venv: {variable} is not set (the python of a venv with "
                f"torch {release} as released; scripts/test.sh sets it, docs/testing.md)")
    return value


@dataclass
class FakeInstall:
    root: Path
    python: Path
    site: Path

    def path(self, rel: str) -> Path:
        return self.site / rel

    def snapshot(self) -> dict[str, bytes]:
        """Every file under site-packages, by relative path: compares installs
        byte for byte, state directory included."""
        return {
            str(path.relative_to(self.site)): path.read_bytes()
            for path in sorted(self.site.rglob("*"))
            if path.is_file()
        }

    def run(self, *args: str, env: dict[str, str] | None = None,
            user: str | None = None, apply: Path = APPLY) -> tuple[int, str]:
        """Runs apply.sh against this install (as `user`, if given); returns its
        exit code and its output (stdout then stderr) with this install's paths
        made generic."""
        environment = {**os.environ, **(env or {})}
        if user is not None:
            environment["HOME"] = str(self.root)  # git reads ~/.gitconfig
        result = subprocess.run(
            [str(apply), "--python", str(self.python), *args],
            capture_output=True,
            text=True,
            env=environment,
            user=user,
        )
        output = result.stdout + result.stderr
        output = output.replace(str(self.site), "<site>").replace(str(self.python), "<python>")
        return result.returncode, output


def make_fake_install(root: Path, source: str, version: str | None = None,
                      base_python: str | None = None,
                      vendor_edits: dict[str, bytes] | None = None) -> FakeInstall:
    """A small install with the files of `source`'s torch; its venv is made
    from `base_python` (default: this interpreter). `vendor_edits` (path ->
    bytes appended) makes a build of another vendor: those files differ from
    every release's, and its RECORD has their new hashes, as a wheel built
    from edited sources would."""
    info = json.loads(
        subprocess.run(
            [
                source,
                "-c",
                "import importlib.metadata as m, json;"
                "d = m.distribution('torch');"
                "print(json.dumps([str(d.locate_file('')), d.version]))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    source_site, source_version = Path(info[0]), info[1]
    version = version or source_version.split("+")[0]
    subprocess.run(
        [base_python or sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
        check=True,
    )
    python = root / "venv" / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (source_dist_info,) = source_site.glob(f"torch-{source_version}.dist-info")
    record_lines = [
        line
        for line in (source_dist_info / "RECORD").read_text().splitlines()
        if line.split(",", 1)[0] in INSTALLED
    ]
    assert len(record_lines) == len(INSTALLED), record_lines
    edits = vendor_edits or {}
    for rel in INSTALLED:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes((source_site / rel).read_bytes() + edits.get(rel, b""))
    for number, line in enumerate(record_lines):
        rel = line.split(",", 1)[0]
        if rel in edits:
            data = (site / rel).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record_lines[number] = f"{rel},sha256={digest.decode()},{len(data)}"
    dist_info = site / f"torch-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
    )
    (dist_info / "RECORD").write_text(
        "\n".join(
            record_lines
            + [f"{dist_info.name}/METADATA,,", f"{dist_info.name}/RECORD,,"]
        )
        + "\n"
    )
    return FakeInstall(root, python, site)
