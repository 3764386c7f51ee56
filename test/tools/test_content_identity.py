"""The guard of scripts/test.sh's tiers (test/harness/content_identity.py):
a release gets the short tier only while its installed files equal another
tested release's, version stamps and what IGNORED lists aside; one changed
byte anywhere else puts it back on the full tier.

The installs are small sites with the shape of a real one: a torch dist-info
whose RECORD lists the files, a version.py, a CPU library built by gcc that
embeds the version stamps, a CUDA library and another distribution.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fake_install import REPO, ScratchTestCase

sys.path.insert(0, str(REPO / "test" / "harness"))
from content_identity import IGNORED, tiers  # noqa: E402

COMMIT = {"2.12.0": "7661cd9c6b841b62b7f411aa52ec51f05457263b",  # the releases' own
          "2.12.1": "7269437d655783a26cba32aa88195b741ff496aa",
          "2.11.0": "70d99e998b1a2ec4ba1e6e3bd4bc2b4b4ea3eb2f"}
# torch_commit_copy: gcc builds the string from 16-byte loads and an 8-byte
# immediate, the way libtorch_cpu.so holds 2.14's git commit in pieces.
LIBRARY_SOURCE = """
#include <string.h>
void torch_commit_copy(char *out) { memcpy(out, "%(commit)s", 40); }
const char torch_version[] = "%(version)s";
const char torch_commit[] = "%(commit)s";
static int %(helper)s(int x) { return x * %(factor)d; }
int torch_code(int x) { return %(helper)s(x) + 1; }
"""


def compile_library(path: Path, version: str, commit: str, factor: int = 3,
                    helper: str = "helper") -> bytes:
    """A real shared library (gcc) that embeds the stamps as torch's do."""
    source = path.with_suffix(".c")
    source.write_text(LIBRARY_SOURCE % dict(version=version, commit=commit, factor=factor,
                                            helper=helper))
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(path), str(source)], check=True)
    source.unlink()
    return path.read_bytes()


def make_site(root: Path, release: str, edits: dict[str, bytes] | None = None,
              numpy: str = "2.4.6", **library: object) -> Path:
    site = root / release
    stamp, commit = f"{release}+cu130", COMMIT[release]
    (root / "build").mkdir(exist_ok=True)
    files = {
        "torch/__init__.py": b"from torch.version import __version__\n",
        "torch/_inductor/config.py": b"pre_grad_pass_timing: str = 'default'\n",
        "torch/version.py": f"__version__ = '{stamp}'\ngit_version = '{commit}'\n".encode(),
        "torch/lib/libtorch_cpu.so": compile_library(root / "build" / f"{release}.so", stamp,
                                                     commit, **library),  # type: ignore[arg-type]
        "torch/lib/libtorch_cuda.so": b"\x7fELF cuda kernels " + stamp.encode(),
        "torch/testing/_internal/common_mps.py": b"MPS_ONLY = 1\n",
        **(edits or {}),
    }
    dist_info = site / f"torch-{release}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {release}\n")
    (dist_info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files)
                                      + f"{dist_info.name}/RECORD,,\n")
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    other = site / f"numpy-{numpy}.dist-info"
    other.mkdir()
    (other / "METADATA").write_text(f"Metadata-Version: 2.1\nName: numpy\nVersion: {numpy}\n")
    return site


class ContentIdentityTest(ScratchTestCase):
    def levels(self, *sites: tuple[str, Path]) -> list[tuple[str, str]]:
        return [(release, level) for release, level, _ in tiers(sites)]

    def test_releases_that_differ_only_in_version_stamps_share_one_full_run(self) -> None:
        result = tiers([("2.12.0", make_site(self.tmp, "2.12.0")),
                        ("2.12.1", make_site(self.tmp, "2.12.1"))])
        # 2.12.0 runs in full: patches/v2.12.0 is cut against it.
        self.assertEqual([(r, level) for r, level, _ in result],
                         [("2.12.0", "full"), ("2.12.1", "short")])
        self.assertIn("content shared with 2.12.1", result[0][2])
        self.assertIn("same content as 2.12.0", result[1][2])

    def test_a_changed_python_file_puts_the_release_back_on_the_full_tier(self) -> None:
        edited = {"torch/_inductor/config.py": b"pre_grad_pass_timing: str = 'late'\n"}
        self.assertEqual(self.levels(("2.12.0", make_site(self.tmp, "2.12.0")),
                                     ("2.12.1", make_site(self.tmp, "2.12.1", edited))),
                         [("2.12.0", "full"), ("2.12.1", "full")])

    def test_other_code_in_a_cpu_library_puts_it_back(self) -> None:
        self.assertEqual(self.levels(("2.12.0", make_site(self.tmp, "2.12.0")),
                                     ("2.12.1", make_site(self.tmp, "2.12.1", factor=4))),
                         [("2.12.0", "full"), ("2.12.1", "full")])

    def test_a_cpu_library_that_is_no_elf_file_must_be_byte_identical(self) -> None:
        def blob(release: str) -> dict[str, bytes]:
            return {"torch/lib/libtorch_cpu.so": f"not ELF {release}+cu130".encode()}
        self.assertEqual(self.levels(("2.12.0", make_site(self.tmp, "2.12.0", blob("2.12.0"))),
                                     ("2.12.1", make_site(self.tmp, "2.12.1", blob("2.12.1")))),
                         [("2.12.0", "full"), ("2.12.1", "full")])

    def test_symbols_the_loader_does_not_map_are_ignored(self) -> None:
        self.assertEqual(self.levels(("2.12.0", make_site(self.tmp, "2.12.0")),
                                     ("2.12.1", make_site(self.tmp, "2.12.1", helper="helpe2"))),
                         [("2.12.0", "full"), ("2.12.1", "short")])

    def test_another_dependency_version_puts_it_back(self) -> None:
        self.assertEqual(self.levels(("2.12.0", make_site(self.tmp, "2.12.0")),
                                     ("2.12.1", make_site(self.tmp, "2.12.1", numpy="2.4.5"))),
                         [("2.12.0", "full"), ("2.12.1", "full")])

    def test_cuda_libraries_and_torchs_own_test_helpers_are_ignored(self) -> None:
        edits = {"torch/lib/libtorch_cuda.so": b"\x7fELF other cuda kernels",
                 "torch/testing/_internal/common_mps.py": b"MPS_ONLY = 2\n"}
        self.assertEqual(self.levels(("2.12.0", make_site(self.tmp, "2.12.0")),
                                     ("2.12.1", make_site(self.tmp, "2.12.1", edits))),
                         [("2.12.0", "full"), ("2.12.1", "short")])
        self.assertEqual(len(IGNORED), 7)

    def test_the_torchvision_pinned_for_each_release_is_ignored(self) -> None:
        sites = []
        for release, torchvision in (("2.12.0", "0.27.0"), ("2.12.1", "0.27.1")):
            site = make_site(self.tmp, release)
            other = site / f"torchvision-{torchvision}.dist-info"
            other.mkdir()
            (other / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: torchvision\nVersion: {torchvision}\n")
            sites.append((release, site))
        self.assertEqual(self.levels(*sites), [("2.12.0", "full"), ("2.12.1", "short")])

    def test_the_same_files_with_other_series_in_the_release_table_run_in_full(self) -> None:
        # patches/releases.tsv gives 2.11.0 and 2.12.0 other series: no shared run.
        self.assertEqual(self.levels(("2.11.0", make_site(self.tmp, "2.11.0")),
                                     ("2.12.0", make_site(self.tmp, "2.12.0"))),
                         [("2.11.0", "full"), ("2.12.0", "full")])
