"""Small, real torch wheels for testing `scripts/apply.sh --wheel`.

A fake wheel holds the files the topics' series touch, taken from a real
torch install, and a dist-info (METADATA, WHEEL, RECORD) that PyPA's
WheelFile writes, so its RECORD is true. To `--wheel` it is a torch wheel;
building one takes a few milliseconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from wheel.wheelfile import WheelFile

from fake_install import APPLY, INSTALLED, torch_site

TAG = "cp311-cp311-linux_x86_64"


def release_files(python: str) -> dict[str, bytes]:
    """The topics' files of `python`'s installed torch (pristine there)."""
    site = torch_site(python)
    return {rel: (site / rel).read_bytes() for rel in INSTALLED}


def make_fake_wheel(directory: Path, files: dict[str, bytes], version: str,
                    name: str = "torch", requires: tuple[str, ...] = (),
                    tag: str = TAG, requires_python: str | None = None) -> Path:
    """A wheel of `name` `version` holding `files` (path -> bytes) and a
    dist-info (with Requires-Dist: `requires`, and Requires-Python if
    given); its entries are dated 2026-01-02 so that builds repeat."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-{tag}.whl"
    dist_info = f"{name}-{version}.dist-info"
    entries = {**files,
               f"{dist_info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\n"
                                         f"Version: {version}\nSummary: a fake\n"
                                         + (f"Requires-Python: {requires_python}\n"
                                            if requires_python else "")
                                         + "".join(f"Requires-Dist: {r}\n" for r in requires)
                                         ).encode(),
               f"{dist_info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: fake_wheel\n"
                                      f"Root-Is-Purelib: false\nTag: {tag}\n").encode()}
    with WheelFile(str(path), "w") as wheel:
        for rel, data in entries.items():
            info = zipfile.ZipInfo(rel, date_time=(2026, 1, 2, 3, 4, 5))
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return path


def fleet_env(tmp: Path, links: Path) -> dict[str, str]:
    """The environment for `apply.sh --wheel torch==X --platform ...` in a
    test: pip takes release wheels from `links` (a find-links directory of
    fake wheels) and nothing else, the cache is under `tmp`, and python3 is
    this venv's (it has PyPA's wheel and packaging, so no tools venv is
    made under the scratch cache)."""
    shims = tmp / "bin"
    shims.mkdir(exist_ok=True)
    (shims / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shims / "python3").chmod(0o755)
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(links), "PREGRAD_CACHE": str(tmp / "cache"),
            "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}


def tampered(wheel: Path, rel: str, out: Path) -> Path:
    """A copy of `wheel` whose `rel` has changed but whose RECORD has not: a
    wheel modified after it was built."""
    out.mkdir(parents=True, exist_ok=True)
    copy = out / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(copy, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, data + b"# edited\n" if info.filename == rel else data)
    return copy


def run_wheel(*args: str) -> tuple[int, str]:
    """`apply.sh --wheel ...`: exit code, stdout then stderr."""
    result = subprocess.run([str(APPLY), *args], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr
