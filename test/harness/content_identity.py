"""Which tested releases run the same CPU code: the guard of the matrix's tiers
(scripts/test.sh, test/harness/matrix.py).

Usage: PY test/harness/content_identity.py RELEASE=SITE_PACKAGES ...
(PY: a test venv's python; it needs pyelftools, from requirements/test.txt)

The real-compile suites run in full once per distinct content. Two stock
installs have the same content when every torch Python file, every CPU
library and every other distribution of their venvs is the same, byte for
byte, apart from what IGNORED lists, and patches/releases.tsv gives them the
same series. This is computed from the installed files each run, never taken
from the version strings, so a release whose files change is back on the full
tier the moment they do.

Prints one line per release, in the order given: RELEASE|full|why or
RELEASE|short|why. Of the releases with one content one runs the full tier,
the others the short one: the one a series is cut against (patches/v2.12.0
for 2.12.0 and 2.12.1), else the newest.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from torch_backport.infra.tables import read_releases, release_numbers  # noqa: E402

PATCHES = REPO / "patches"

# What "the same content" ignores, and why: the one list of it.
IGNORED = {
    "torch/version.py":
        "the release's version and git commit stamps (nothing else is in it)",
    "version stamps in CPU libraries":
        "at a byte where two libraries differ, the same piece (8 bytes or "
        "more, or whole) of one of each release's stamps: its version "
        "('2.12.1+cu130', '2.12.1'), git commit, the packed (patch, minor, "
        "major) bytes, and '.<patch>' (the compiler splits strings into "
        "immediates); 2.12.0 and 2.12.1's, and 2.14.0 and 2.14.1's, "
        "libtorch_cpu.so differ only there in what is loaded",
    "what a CPU library does not load":
        "sections outside the loaded image (.symtab, .strtab: the same symbols "
        "in another order) and .note.gnu.build-id (a hash of the file)",
    "torch/testing/_internal/":
        "helpers of torch's own test suite, which this project's tests do not "
        "import (2.14.0 and 2.14.1 differ in an MPS-only one)",
    "CUDA libraries (torch/lib/ names with cuda, cudnn, nccl, nvrtc, cupti, "
    "cusparse, cublas, cufft, curand, cusolver, nvshmem)":
        "their kernels never run: the test machines have no CUDA device",
    "distributions nvidia-*, cuda-*, triton":
        "GPU-only: with no CUDA device Inductor generates C++ for the CPU",
    "distribution torchvision":
        "pinned per release by test/torchvision.tsv (the release built for "
        "that torch, so 2.12.0 and 2.12.1 get 0.27.0 and 0.27.1); only the "
        "real-network cells import it, and a short tier runs none of them",
}
IGNORED_PREFIXES = ("torch/testing/_internal/",)
CUDA_LIBRARY = re.compile(r"cuda|cudnn|nccl|nvrtc|cupti|cusparse|cublas|cufft|curand|"
                          r"cusolver|nvshmem")
GPU_DISTRIBUTION = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")
PINNED_PER_RELEASE = {"torchvision"}
CHUNK = 1 << 16


@dataclass(frozen=True)
class Install:
    release: str
    site: Path
    stamps: Tuple[bytes, ...]  # see version_stamps
    digest: str  # the Python files, the libraries' names, the other distributions
    python_files: int
    libraries: Tuple[str, ...]
    distributions: int


def version_stamps(site: Path) -> Tuple[bytes, ...]:
    """The forms in which a build embeds its version: full, public, git
    commit, (patch, minor, major) bytes, ".<patch>"."""
    text = (site / "torch" / "version.py").read_text()
    found = dict(re.findall(r"^(__version__|git_version)\b[^=]*=\s*['\"]([^'\"]+)['\"]",
                            text, re.M))
    full, commit = found.get("__version__", ""), found.get("git_version", "")
    public = full.split("+", 1)[0]
    parts = [int(part) for part in public.split(".")[:3] if part.isdigit()]
    packed = bytes(reversed(parts)) if len(parts) == 3 and max(parts) < 256 else b""
    patch = f".{parts[2]}".encode() if len(parts) == 3 else b""
    return tuple(stamp.encode() if isinstance(stamp, str) else stamp
                 for stamp in (full, public, commit, packed, patch))


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
    """name==version of every distribution beside torch that is not GPU-only
    or pinned per release."""
    found = set()
    for distribution in metadata.distributions(path=[str(site)]):
        name = (distribution.metadata["Name"] or "").lower().replace("_", "-")
        if name != "torch" and name not in PINNED_PER_RELEASE and not GPU_DISTRIBUTION.match(name):
            found.add(f"{name}=={distribution.version}")
    return sorted(found)


def read_install(release: str, site: Path) -> Install:
    python, libraries = compared_files(site)
    others = other_distributions(site)
    whole = hashlib.sha256()
    for rel in python:
        whole.update(f"{rel}\0{hashlib.sha256((site / rel).read_bytes()).hexdigest()}\n".encode())
    whole.update("\n".join(libraries + others).encode())
    return Install(release, site, version_stamps(site), whole.hexdigest(), len(python),
                   tuple(libraries), len(others))


def loaded_sections(path: Path) -> Optional[List[Tuple[str, bytes]]]:
    """(name, bytes) of each section the loader maps, build-id aside; None
    if `path` is not an ELF file."""
    with path.open("rb") as stream:
        try:
            elf = ELFFile(stream)
        except Exception:  # pyelftools raises its own ELFError and struct errors
            return None
        return [(section.name, section.data()) for section in elf.iter_sections()
                if section["sh_flags"] & SH_FLAGS.SHF_ALLOC
                and section["sh_type"] != "SHT_NOBITS"
                and section.name != ".note.gnu.build-id"]


def differing_bytes(a: bytes, b: bytes) -> Iterator[int]:
    for start in range(0, len(a), CHUNK):
        if a[start:start + CHUNK] != b[start:start + CHUNK]:
            yield from (i for i in range(start, min(start + CHUNK, len(a))) if a[i] != b[i])


def same_library(a: Install, b: Install, rel: str) -> bool:
    """Whether library `rel` of `a` and `b` load the same bytes, where one
    differs from the other only inside a version stamp of each."""
    left, right = a.site / rel, b.site / rel
    if left.read_bytes() == right.read_bytes():
        return True
    ours, theirs = loaded_sections(left), loaded_sections(right)
    if ours is None or theirs is None or [(n, len(d)) for n, d in ours] != [
            (n, len(d)) for n, d in theirs]:
        return False
    pairs = [(x, y) for x, y in zip(a.stamps, b.stamps) if x and len(x) == len(y) and x != y]
    for (_, data), (_, other) in zip(ours, theirs):
        if not all(in_a_stamp(data, other, i, pairs) for i in differing_bytes(data, other)):
            return False
    return True


def in_a_stamp(data: bytes, other: bytes, i: int, pairs: List[Tuple[bytes, bytes]]) -> bool:
    """Whether byte i lies in a piece of a stamp in both: `data` holds
    x[lo:hi] and `other` y[lo:hi] there, for a stamp pair (x, y), the piece at
    least 8 bytes or the whole stamp. The compiler splits a long string into
    16- and 8-byte loads (2.14's git commit: 32 bytes in .rodata, 8 in an
    immediate), so a stamp need not be whole in one place."""
    for x, y in pairs:
        for k in range(len(x)):
            if data[i] != x[k] or other[i] != y[k]:
                continue
            lo, hi = k, k + 1
            while (lo > 0 and i - k + lo - 1 >= 0 and data[i - k + lo - 1] == x[lo - 1]
                   and other[i - k + lo - 1] == y[lo - 1]):
                lo -= 1
            while (hi < len(x) and i - k + hi < len(data) and data[i - k + hi] == x[hi]
                   and other[i - k + hi] == y[hi]):
                hi += 1
            if hi - lo >= min(len(x), 8):
                return True
    return False


def series_rows() -> Dict[str, Tuple[Tuple[str, str], ...]]:
    """release -> the series patches/releases.tsv gives each topic."""
    return {release: tuple(sorted(cells.items()))
            for release, cells in read_releases(PATCHES).cells.items()}


def reference_first(release: str) -> Tuple[bool, Tuple[int, ...]]:
    """Sort key, descending: a series base first, then the newest."""
    return (PATCHES / f"v{release}").is_dir(), release_numbers(release)


def tiers(sites: Sequence[Tuple[str, Path]]) -> List[Tuple[str, str, str]]:
    """(release, "full" or "short", why) for each release, in the given order."""
    rows = series_rows()
    installs = [read_install(release, site) for release, site in sites]
    candidates: Dict[Tuple[str, Tuple[str, ...], Tuple[Tuple[str, str], ...]],
                     List[Install]] = {}
    for install in installs:
        key = (install.digest, install.libraries, rows.get(install.release, ()))
        candidates.setdefault(key, []).append(install)
    verdict: Dict[str, Tuple[str, str]] = {}
    for group in candidates.values():
        remaining = sorted(group, key=lambda i: reference_first(i.release), reverse=True)
        while remaining:
            reference = remaining.pop(0)
            shared = [other for other in remaining
                      if all(same_library(reference, other, rel) for rel in reference.libraries)]
            for other in shared:
                remaining.remove(other)
                verdict[other.release] = ("short", (
                    f"same content as {reference.release}: {other.python_files} Python "
                    f"files, {len(other.libraries)} CPU libraries and {other.distributions} "
                    "other distributions, version stamps aside "
                    "(test/harness/content_identity.py IGNORED)"))
            verdict[reference.release] = ("full", (
                f"content shared with {', '.join(sorted(o.release for o in shared))}"
                if shared else "no other tested release has its content"))
    return [(install.release, *verdict[install.release]) for install in installs]


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
