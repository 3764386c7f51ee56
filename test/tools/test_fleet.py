"""--wheel torch==X --platform ... : patched wheels for every target in one
run, and a PEP 503 index over them. The targets' release wheels come from a
local find-links directory of small fake wheels (pip download reads it as it
would the package index): a Windows wheel with CRLF endings and a Linux
aarch64 one; the other targets asked for have none, and are named. The
index carries each wheel's METADATA beside it (PEP 658/714); a wheel already
in DIR whose METADATA cannot be read is refused before anything changes."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import unittest
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

from fake_install import APPLY, ScratchTestCase, source_python, STOCK
from fake_wheel import fleet_env, make_fake_wheel, release_files, tampered

WINDOWS = "cp311-cp311-win_amd64"
AARCH64 = "cp312-cp312-manylinux_2_28_aarch64"
REQUIRES_PYTHON = ">=3.10"


class Links(HTMLParser):
    """The anchors of a PEP 503 page: (href, text, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, dict[str, str | None]]] = []
        self.open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.open = dict(attrs)

    def handle_data(self, data: str) -> None:
        if self.open is not None:
            self.found.append((self.open["href"] or "", data, self.open))
            self.open = None


def index_links(out: Path) -> dict[str, dict[str, str | None]]:
    """wheel file name (the anchor's text) -> the link's attributes, each
    href's last component checked to be that name, percent-encoded."""
    parser = Links()
    parser.feed((out / "simple" / "torch" / "index.html").read_text())
    links = {}
    for href, text, attrs in parser.found:
        path = href.split("#", 1)[0]
        assert path.startswith("../../") and "+" not in path, href
        assert unquote(path[len("../../"):]) == text, (href, text)
        links[text] = attrs
    return links


def dist_metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as opened:
        (name,) = [n for n in opened.namelist() if n.endswith(".dist-info/METADATA")]
        return opened.read(name)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


class FleetTest(ScratchTestCase):
    scratch_prefix = "pregrad-fleet-"

    def setUp(self) -> None:
        super().setUp()
        files = release_files(source_python(STOCK))
        self.links = self.tmp / "links"
        make_fake_wheel(self.links, {rel: data.replace(b"\n", b"\r\n")
                                     for rel, data in files.items()}, "2.11.0", tag=WINDOWS,
                        requires_python=REQUIRES_PYTHON)
        make_fake_wheel(self.links, files, "2.11.0", tag=AARCH64,
                        requires_python=REQUIRES_PYTHON)
        self.env = fleet_env(self.tmp, self.links)
        self.out = self.tmp / "dist"

    def fleet(self, *args: str) -> tuple[int, str]:
        result = subprocess.run([str(APPLY), "--wheel", "torch==2.11.0", "--out", str(self.out),
                                 *args], capture_output=True, text=True, env=self.env)
        return result.returncode, (result.stdout + result.stderr).replace(str(self.tmp), "<tmp>")

    def test_a_release_the_index_lacks_is_refused_before_any_download(self) -> None:
        make_fake_wheel(self.links, release_files(source_python(STOCK)), "2.12.0", tag=AARCH64)
        for asked, nearest in (("2.99.0", "2.12.0"), ("2.11.5", "2.11.0 and 2.12.0")):
            result = subprocess.run([str(APPLY), "--wheel", f"torch=={asked}", "--out",
                                     str(self.out)], capture_output=True, text=True,
                                    env=self.env)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertEqual(result.stderr.replace(str(self.tmp), "<tmp>"),
                             f"scripts/apply.sh: torch {asked} is not on <tmp>/links; the "
                             f"nearest releases there: {nearest}; nothing was written\n")
            self.assertNotIn("downloading", result.stdout + result.stderr)
        self.assertFalse((self.tmp / "cache" / "wheels").exists())
        self.assertFalse(self.out.exists())

    def test_each_target_is_built_or_named_and_the_index_lists_them(self) -> None:
        code, output = self.fleet("--platform", "win_amd64", "--platform",
                                  "manylinux_2_28_aarch64", "--python-version", "3.11",
                                  "--python-version", "3.12")
        self.assertEqual(code, 1, output)  # two of the four targets have no wheel
        self.assertIn("fleet: 2 of 4 target(s) built; no wheel on the index for: "
                      "cp312 win_amd64, cp311 manylinux_2_28_aarch64", output)
        self.assertIn("have CRLF line endings (a Windows wheel)", output)
        built = sorted(p.name for p in self.out.glob("*.whl"))
        self.assertEqual(sorted(re.sub(r"\+pregrad\.g[0-9a-f]{10}", "+pregrad", name)
                                for name in built),
                         [f"torch-2.11.0+pregrad-{WINDOWS}.whl",
                          f"torch-2.11.0+pregrad-{AARCH64}.whl"])
        links = index_links(self.out)
        self.assertEqual(sorted(links), built)
        for name in built:
            digest = subprocess.run(["sha256sum", str(self.out / name)], capture_output=True,
                                    text=True, check=True).stdout.split()[0]
            self.assertTrue((links[name]["href"] or "").endswith(f"#sha256={digest}"))

    def test_each_wheel_s_metadata_is_beside_it_and_named_on_its_link(self) -> None:
        self.assertEqual(self.fleet("--platform", "win_amd64", "--python-version", "3.11")[0], 0)
        (wheel,) = self.out.glob("*.whl")
        metadata = (self.out / f"{wheel.name}.metadata").read_bytes()
        self.assertEqual(metadata, dist_metadata(wheel))
        digest = f"sha256={hashlib.sha256(metadata).hexdigest()}"
        self.assertEqual(index_links(self.out)[wheel.name],
                         {**index_links(self.out)[wheel.name], "data-core-metadata": digest,
                          "data-dist-info-metadata": digest,
                          "data-requires-python": REQUIRES_PYTHON})
        page = (self.out / "simple" / "torch" / "index.html").read_text()
        self.assertIn('data-requires-python="&gt;=3.10"', page)
        self.assertIn("%2Bpregrad.g", page)

    def test_a_second_run_adds_its_target_and_keeps_the_first(self) -> None:
        self.assertEqual(self.fleet("--platform", "win_amd64", "--python-version", "3.11")[0], 0)
        (first,) = self.out.glob("*.whl")
        before = (first.read_bytes(), (self.out / f"{first.name}.metadata").read_bytes())
        code, output = self.fleet("--platform", "manylinux_2_28_aarch64", "--python-version",
                                  "3.12")
        self.assertEqual(code, 0, output)
        wheels = sorted(path.name for path in self.out.glob("*.whl"))
        self.assertEqual(len(wheels), 2)
        self.assertEqual(sorted(index_links(self.out)), wheels)
        self.assertEqual(sorted(path.name for path in self.out.glob("*.metadata")),
                         [f"{name}.metadata" for name in wheels])
        self.assertEqual((first.read_bytes(), (self.out / f"{first.name}.metadata").read_bytes()),
                         before)

    def test_a_wheel_whose_metadata_cannot_be_read_is_refused_first(self) -> None:
        self.assertEqual(self.fleet("--platform", "win_amd64", "--python-version", "3.11")[0], 0)
        (wheel,) = self.out.glob("*.whl")
        metadata = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA"
        edited = tampered(wheel, metadata, self.tmp / "edited")  # METADATA no longer its RECORD's
        edited.replace(wheel)
        before = snapshot(self.out)
        code, output = self.fleet("--platform", "manylinux_2_28_aarch64", "--python-version",
                                  "3.12")
        self.assertEqual(code, 1, output)
        self.assertIn(f"scripts/apply.sh: <tmp>/dist/{wheel.name}: its METADATA cannot be read "
                      "for the index", output)
        self.assertEqual(snapshot(self.out), before)
        self.assertFalse(list((self.tmp / "cache").rglob(f"*{AARCH64.split('-')[2]}*")))

    def test_pip_takes_the_patched_wheel_from_the_index(self) -> None:
        self.assertEqual(self.fleet("--platform", "win_amd64", "--python-version", "3.11")[0], 0)
        fetched = self.tmp / "fetched"
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--platform", "win_amd64", "--python-version", "3.11", "--index-url",
             (self.out / "simple").resolve().as_uri(), "-d", str(fetched), "torch==2.11.0"],
            capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
        self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
        (wheel,) = fetched.glob("*.whl")
        self.assertIn("+pregrad.g", wheel.name)

    def test_platform_rules_are_usage_errors(self) -> None:
        for args, message in (
                (("--platform", "win_amd64", "--lock", str(self.tmp / "req.txt")),
                 "--lock resolves for the platform that runs it"),
                (("--python-version", "3.11"), "--python-version goes with --platform"),
                (("--platform", "win_amd64", "--all-platforms"),
                 "--platform and --all-platforms do not go together")):
            code, output = self.fleet(*args)
            self.assertEqual(code, 2, output)
            self.assertIn(message, output)
        self.assertFalse(self.out.exists())


if __name__ == "__main__":
    unittest.main()
