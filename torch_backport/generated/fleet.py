"""Patched wheels for every machine a team deploys to, in one run: the
release wheel of each target (platform, CPython version) downloaded once into
the cache, each patched as `--wheel` patches one (patched_wheel.plan_wheel:
RECORD checked, series chosen by content, Windows CRLF kept), and a PEP 503
simple index over every patched torch wheel in the output directory, each
with its core metadata (index.py), which `pip --index-url DIR/simple` (a
file:// URL or a server's), `pip --find-links DIR` and a uv
`[[tool.uv.index]]` read. A target the release has no wheel for is named. A
torch wheel already in the directory that the index could not list (its
METADATA unreadable) is refused before anything is downloaded or built.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import List

from torch_backport.infra.errors import Refused
from torch_backport.generated.index import PLATFORM_RE, read_all, write_index
from torch_backport.generated.patched_wheel import build, BuildRequest
from torch_backport.download.release_wheels import release_wheel, Target
from torch_backport.infra.exit_codes import Exit

# What --all-platforms asks pip for: each platform tag is the newest pip
# should accept (it takes any older manylinux or macOS wheel too).
ALL_PLATFORMS = ("manylinux_2_39_x86_64", "manylinux_2_39_aarch64", "macosx_15_0_arm64",
                 "win_amd64")
ALL_PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def targets(platforms: List[str], pythons: List[str], every: bool) -> List[Target]:
    chosen_platforms = list(ALL_PLATFORMS) if every else platforms
    chosen_pythons = list(ALL_PYTHONS) if every or not pythons else pythons
    if not chosen_platforms:
        raise Refused("name a target: --platform TAG (repeat it), or --all-platforms")
    for platform in chosen_platforms:
        if not PLATFORM_RE.fullmatch(platform):
            raise Refused(f"--platform {platform!r} is not a wheel platform tag (letters, "
                          "digits and _, e.g. manylinux_2_28_aarch64); nothing was written")
    for python in chosen_pythons:
        if not re.fullmatch(r"3\.\d{1,2}", python):
            raise Refused(f"--python-version {python!r} is not a CPython version such as "
                          "3.12; nothing was written")
    return [Target(platform, python) for platform in chosen_platforms
            for python in chosen_pythons]


def cmd_fleet(version: str, wanted: List[Target], every: bool, cache: Path,
              request: BuildRequest) -> int:
    """Patched torch `version` wheels for `wanted` into `request.out`, and the
    index; `every` (--all-platforms): a target without a wheel is no failure."""
    out, check = request.out, request.check
    built: List[str] = []
    missing: List[Target] = []
    refused: List[str] = []
    read_all(out)  # every wheel already there can be listed, or Refused
    for number, target in enumerate(wanted, 1):
        print(f"[{number}/{len(wanted)}] {target}")
        source = release_wheel(version, target, cache, quiet=True)
        if source is None:
            missing.append(target)
            print(f"{target}: the index has no torch {version} wheel for it")
            continue
        try:
            build(source, dataclasses.replace(request, lock=None))
            built.append(source.name)
        except Refused as problem:
            refused.append(f"{target}: {problem}")
            print(f"{target}: refused: {problem}")
    if not check and built:
        simple = write_index(out, read_all(out))
        print(f"wrote {simple}/ (PEP 503, with each wheel's metadata): pip install "
              f"--index-url file://{simple.resolve()} torch=={version}; serve {out}/ itself "
              "over HTTP, not simple/ (docs/usage.md, Serving the index)")
    print(f"fleet: {len(built)} of {len(wanted)} target(s) "
          f"{'checked' if check else 'built'}"
          + (f"; no wheel on the index for: {', '.join(map(str, missing))}" if missing else "")
          + (f"; refused: {len(refused)}" if refused else ""))
    for line in refused:
        print(f"  {line}")
    return Exit.FAILED if refused or (missing and not every) else Exit.OK
