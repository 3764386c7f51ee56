"""Which tested releases run the same CPU code: the guard of scripts/test.sh's tiers.

Usage: python3 test/harness/content_identity.py RELEASE=SITE_PACKAGES ...

The real-compile suites run in full once per distinct content. Two stock
installs have the same content when every torch Python file, every CPU
library and every other distribution of their venvs is the same, byte for
byte, apart from what IGNORED lists, and test/releases.tsv gives them the
same series. This is computed from the installed files each run, never taken
from the version strings, so a release whose files change is back on the full
tier the moment they do.

Prints one line per release, in the order given: RELEASE|full|why or
RELEASE|short|why. In a group of releases with one content the newest runs
the full tier and the others the short one.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

REPO = Path(__file__).resolve().parents[2]
RELEASES = REPO / "test" / "releases.tsv"

# What "the same content" ignores, and why: the one list of it.
IGNORED = {
    "torch/version.py":
        "the release's version and git commit stamps (nothing else is in it)",
    "version stamps in CPU libraries":
        "the bytes of version.py's __version__ and git_version wherever a CPU "
        "library embeds them (2.12.0 and 2.12.1's libtorch_cpu.so differ in 36 "
        "such bytes)",
    "torch/testing/_internal/":
        "helpers of torch's own test suite, which this project's tests do not "
        "import (2.14.0 and 2.14.1 differ in an MPS-only one)",
    "CUDA libraries (torch/lib/ names with cuda, cudnn, nccl, nvrtc, cupti, cusparse, cublas, cufft, curand, cusolver, nvshmem)":
        "their kernels never run: the test machines have no CUDA device",
    "distributions nvidia-*, cuda-*, triton":
        "GPU-only: with no CUDA device Inductor generates C++ for the CPU",
}
IGNORED_PREFIXES = ("torch/testing/_internal/",)
CUDA_LIBRARY = re.compile(r"cuda|cudnn|nccl|nvrtc|cupti|cusparse|cublas|cufft|curand|cusolver|nvshmem")
GPU_DISTRIBUTION = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


@dataclass(frozen=True)
class Content:
    """What one stock install runs on the CPU."""
    digest: str
    python_files: int
    libraries: int
    distributions: int


def version_stamps(site: Path) -> List[bytes]:
    """__version__ and git_version of the install's torch/version.py."""
    text = (site / "torch" / "version.py").read_text()
    return [match.encode() for match in
            re.findall(r"^(?:__version__|git_version)\b[^=]*=\s*['\"]([^'\"]+)['\"]", text, re.M)]


def compared_files(site: Path) -> Tuple[List[str], List[str]]:
    """(Python files, CPU libraries) of the torch distribution, relative to
    `site`, from its RECORD, minus what IGNORED lists."""
    distribution = metadata.PathDistribution(next(site.glob("torch-*.dist-info")))
    python, libraries = [], []
    for entry in distribution.files or []:
        rel = entry.as_posix()
        if rel == "torch/version.py" or rel.startswith(IGNORED_PREFIXES):
            continue
        if rel.endswith(".py"):
            python.append(rel)
        elif re.search(r"\.so(\.|$)", rel) and not CUDA_LIBRARY.search(Path(rel).name):
            libraries.append(rel)
    return sorted(python), sorted(libraries)


def other_distributions(site: Path) -> List[str]:
    """name==version of every distribution beside torch that is not GPU-only."""
    found = set()
    for distribution in metadata.distributions(path=[str(site)]):
        name = (distribution.metadata["Name"] or "").lower().replace("_", "-")
        if name != "torch" and not GPU_DISTRIBUTION.match(name):
            found.add(f"{name}=={distribution.version}")
    return sorted(found)


def content(site: Path) -> Content:
    stamps = version_stamps(site)
    python, libraries = compared_files(site)
    others = other_distributions(site)
    whole = hashlib.sha256()
    for rel in python + libraries:
        data = (site / rel).read_bytes()
        if rel in libraries:
            for stamp in stamps:
                data = data.replace(stamp, b"\0" * len(stamp))
        whole.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    whole.update("\n".join(others).encode())
    return Content(whole.hexdigest(), len(python), len(libraries), len(others))


def series_rows() -> Dict[str, str]:
    """release -> the series test/releases.tsv gives each topic, as one string."""
    rows = {}
    for line in RELEASES.read_text().splitlines():
        if line and not line.startswith("#"):
            release, _, series = line.partition("\t")
            rows[release] = series
    return rows


def release_key(release: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release))


def tiers(sites: Iterable[Tuple[str, Path]]) -> List[Tuple[str, str, str]]:
    """(release, "full" or "short", why) for each release, in the given order."""
    given = list(sites)
    rows = series_rows()
    contents = {release: content(site) for release, site in given}
    groups: Dict[Tuple[str, str], List[str]] = {}
    for release, _ in given:
        groups.setdefault((contents[release].digest, rows.get(release, "")), []).append(release)
    result = []
    for release, _ in given:
        group = groups[(contents[release].digest, rows.get(release, ""))]
        newest = max(group, key=release_key)
        found = contents[release]
        if release == newest:
            others = sorted(set(group) - {release}, key=release_key)
            why = (f"content shared with {', '.join(others)}" if others
                   else "no other tested release has its content")
            result.append((release, "full", why))
        else:
            result.append((release, "short", (
                f"same content as {newest}: {found.python_files} Python files, "
                f"{found.libraries} CPU libraries and {found.distributions} other "
                "distributions byte-identical, version stamps aside "
                "(test/harness/content_identity.py IGNORED)")))
    return result


def main(argv: List[str]) -> int:
    if not argv or any("=" not in arg for arg in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    sites = [(arg.split("=", 1)[0], Path(arg.split("=", 1)[1])) for arg in argv]
    for release, tier, why in tiers(sites):
        print(f"{release}|{tier}|{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
