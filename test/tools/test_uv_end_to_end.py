"""The real end to end for uv and the fleet (scripts/test.sh's `uv-fleet`
job, after the patched 2.11.0 wheel was built, so the release wheel is in
the cache; PREGRAD_UV_FLEET=1):

- a `uv venv` with the real torch 2.11.0 wheel installed by uv (hard links
  into uv's cache), patched in place: uv's cache keeps its bytes, a second
  venv made from it afterwards is RECORD-clean, and --revert restores;
- patched wheels for two foreign targets from their real release wheels,
  macOS arm64 (80 MB: the smallest) and Windows amd64 (114 MB: CRLF), into
  one index: each verifies against its RECORD and carries the v2.11.0
  series' post-images in its own line endings.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from urllib.parse import quote

from wheel.wheelfile import WheelFile

import torch_backport.patchset.series as model
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.identify import topic_files
from torch_backport.infra.fsio import cache_dir
from torch_backport.download.release_wheels import cached as cached_wheel, Target

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply.sh"
UV = Path(sys.executable).parent / "uv"


def run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(arg) for arg in args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def digests(root: Path, rels: list[str]) -> dict[str, str]:
    """sha256 of every copy of `rels` under `root` (uv's cache)."""
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
            for rel in rels for path in root.glob(f"**/{rel}")}


@unittest.skipUnless(os.environ.get("PREGRAD_UV_FLEET"), "scripts/test.sh's uv-fleet job")
class UvAndFleetEndToEnd(unittest.TestCase):
    def test_a_uv_venv_patched_in_place_keeps_uv_s_cache(self) -> None:
        stock = cached_wheel("2.11.0", Target.host(), cache_dir())
        self.assertIsNotNone(stock, "the matrix's wheel job caches torch 2.11.0's wheel first")
        touched = sorted({rel for topic in model.select_topics(None)
                          for rel in topic_files(topic)})
        with tempfile.TemporaryDirectory(prefix="pregrad-uv-") as tmp:
            env = {"UV_CACHE_DIR": f"{tmp}/cache", "UV_NO_PROGRESS": "1",
                   "UV_LINK_MODE": "hardlink"}

            def venv(name: str) -> str:
                made = run(UV, "venv", "-q", "-p", sys.executable, f"{tmp}/{name}", env=env)
                self.assertEqual(made.returncode, 0, made.stderr)
                python = f"{tmp}/{name}/bin/python"
                put = run(UV, "pip", "install", "-q", "-p", python, "--no-deps", stock, env=env)
                self.assertEqual(put.returncode, 0, put.stderr)
                return python

            first = venv("first")
            site = next(Path(tmp, "first", "lib").glob("python*/site-packages"))
            self.assertGreater(os.stat(site / touched[0]).st_nlink, 1)  # uv hard-linked it
            cached = digests(Path(tmp) / "cache", touched)
            self.assertGreaterEqual(len(cached), len(touched))
            applied = run(APPLY, "--python", first)
            self.assertEqual(applied.returncode, 0, applied.stdout + applied.stderr)
            self.assertIn("patched: the series is applied",
                          run(APPLY, "--python", first, "--status").stdout)
            self.assertEqual(digests(Path(tmp) / "cache", touched), cached)
            second = venv("second")
            status = run(APPLY, "--python", second, "--status", "--topic", "default")
            self.assertEqual(status.returncode, 0, status.stdout)
            self.assertEqual(status.stdout.count("pristine: every file"), 2, status.stdout)
            reverted = run(APPLY, "--python", first, "--revert")
            self.assertEqual(reverted.returncode, 0, reverted.stdout + reverted.stderr)
            self.assertEqual(digests(Path(tmp) / "cache", touched), cached)

    def test_patched_wheels_for_two_foreign_targets_from_their_release_wheels(self) -> None:
        with tempfile.TemporaryDirectory(prefix="pregrad-fleet-") as tmp:
            built = run(APPLY, "--wheel", "torch==2.11.0", "--out", tmp, "--platform",
                        "macosx_15_0_arm64", "--platform", "win_amd64", "--python-version",
                        "3.11")
            self.assertEqual(built.returncode, 0, built.stdout + built.stderr)
            self.assertIn("fleet: 2 of 2 target(s) built", built.stdout)
            wheels = sorted(Path(tmp).glob("*.whl"))
            self.assertEqual([w.name.rsplit("-", 1)[1] for w in wheels],
                             ["macosx_11_0_arm64.whl", "win_amd64.whl"])
            index = (Path(tmp) / "simple" / "torch" / "index.html").read_text()
            for wheel in wheels:
                self.assertIn(f'href="../../{quote(wheel.name)}#sha256=', index)
                crlf = "win_amd64" in wheel.name
                with WheelFile(str(wheel)) as opened:  # each file checked against RECORD
                    for topic in model.select_topics(None):
                        series = model.load_series("v2.11.0", topic)
                        for rel, blob in model.final_blobs(series).items():
                            data = opened.read(rel)
                            self.assertEqual(b"\r\n" in data, crlf, f"{wheel.name}: {rel}")
                            self.assertEqual(git_blob_id(data.replace(b"\r\n", b"\n")),
                                             blob, f"{wheel.name}: {rel}")


if __name__ == "__main__":
    unittest.main()
