"""--wheel torch==X --platform ... : patched wheels for every target in one
run, and a PEP 503 index over them. The targets' release wheels come from a
local find-links directory of small fake wheels (pip download reads it as it
would the package index): a Windows wheel with CRLF endings and a Linux
aarch64 one; the other targets asked for have none, and are named."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from fake_install import APPLY, ScratchTestCase, source_python, STOCK
from fake_wheel import make_fake_wheel, release_files

WINDOWS = "cp311-cp311-win_amd64"
AARCH64 = "cp312-cp312-manylinux_2_28_aarch64"


class FleetTest(ScratchTestCase):
    scratch_prefix = "pregrad-fleet-"

    def setUp(self) -> None:
        super().setUp()
        files = release_files(source_python(STOCK))
        self.links = self.tmp / "links"
        make_fake_wheel(self.links, {rel: data.replace(b"\n", b"\r\n")
                                     for rel, data in files.items()}, "2.11.0", tag=WINDOWS)
        make_fake_wheel(self.links, files, "2.11.0", tag=AARCH64)
        # python3 is this venv's (it has PyPA's wheel and packaging), so no
        # tools venv is made under the scratch cache.
        shims = self.tmp / "bin"
        shims.mkdir()
        (shims / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (shims / "python3").chmod(0o755)
        self.env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
                    "PIP_FIND_LINKS": str(self.links), "PREGRAD_CACHE": str(self.tmp / "cache"),
                    "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
        self.out = self.tmp / "dist"

    def fleet(self, *args: str) -> tuple[int, str]:
        result = subprocess.run([str(APPLY), "--wheel", "torch==2.11.0", "--out", str(self.out),
                                 *args], capture_output=True, text=True, env=self.env)
        return result.returncode, (result.stdout + result.stderr).replace(str(self.tmp), "<tmp>")

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
        index = (self.out / "simple" / "torch" / "index.html").read_text()
        for name in built:
            digest = subprocess.run(["sha256sum", str(self.out / name)], capture_output=True,
                                    text=True, check=True).stdout.split()[0]
            self.assertIn(f'href="../../{name}#sha256={digest}"', index)

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
