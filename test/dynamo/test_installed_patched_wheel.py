"""A patched torch wheel, built by `scripts/apply.sh --wheel torch==X` from
the release wheel and installed by pip: scripts/test.sh's wheel jobs run this
file in that venv (2.11.0 on the matrix's Python, and the release of each
other Python's row, whose wheel was built with that Python as python3).

The behaviour and results suites are not run here again: every file the
wheel installed is compared, sha256 for sha256, with the patched copy of the
same release and Python (PREGRAD_PATCHED_COPY_PYTHON), which runs them. The
copy has every topic and the wheel the default ones, so the files of the
other topics are the only ones that may differ, and there they equal the
release's RECORD. The README's hash-pin recipe runs in the 2.11.0 job.

PREGRAD_PATCHED_WHEEL names the wheel the venv was installed from; without
it (any other run) these tests skip."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from importlib import metadata
from pathlib import Path

from torch_backport.infra.fsio import cache_dir
from torch_backport.infra.record import file_sha256 as sha256
from torch_backport.patchset.identify import topic_files
from torch_backport.patchset.series import topics

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply.sh"
WHEEL = os.environ.get("PREGRAD_PATCHED_WHEEL", "")
PATCHED_COPY = os.environ.get("PREGRAD_PATCHED_COPY_PYTHON", "")
README = REPO / "README.md"
README_RELEASE = "2.11.0"  # the release the README's recipe builds
README_RECIPE = re.compile(r"<!-- the hash-pin recipe:[^\n]*-->\n```sh\n(.*?)```", re.S)


def site_packages(python: str) -> Path:
    return Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())


def bytes_under(top: Path) -> int:
    return sum((Path(folder) / name).lstat().st_size
               for folder, _, names in os.walk(top) for name in names)


def built_topics() -> list[str]:
    """The topics the installed wheel was built with (its PREGRAD_BACKPORT.json)."""
    built = json.loads(metadata.distribution("torch").read_text("PREGRAD_BACKPORT.json") or "{}")
    return list(built["topics"])


@unittest.skipUnless(WHEEL, "run by scripts/test.sh's wheel job (PREGRAD_PATCHED_WHEEL)")
class InstalledPatchedWheelTests(unittest.TestCase):
    def test_this_torch_is_the_patched_wheel_for_this_python(self) -> None:
        """The wheel `apply.sh --wheel` wrote when this Python was python3 is
        for this Python (cp310 for 3.10), and it is what is installed."""
        name, version, python_tag = Path(WHEEL).name.split("-")[:3]
        self.assertEqual(metadata.version("torch"), version)
        release = metadata.version("torch").split("+")[0]
        self.assertRegex(version, rf"^{re.escape(release)}\+pregrad\.g[0-9a-f]{{10}}$")
        self.assertEqual(python_tag, f"cp{sys.version_info.major}{sys.version_info.minor}")

    def test_pip_check_passes(self) -> None:
        result = subprocess.run([sys.executable, "-m", "pip", "check"],
                                capture_output=True, text=True)
        self.assertEqual((result.returncode, result.stdout),
                         (0, "No broken requirements found.\n"), result.stderr)

    def test_status_says_installed_from_a_patched_wheel(self) -> None:
        result = subprocess.run([str(APPLY), "--python", sys.executable, "--status"],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(result.stdout.count("patched: installed from a patched wheel"),
                         len(built_topics()), result.stdout)

    @unittest.skipUnless(PATCHED_COPY, "needs the patched copy (PREGRAD_PATCHED_COPY_PYTHON)")
    def test_every_installed_file_equals_the_patched_copy_but_other_topics(self) -> None:
        torch = metadata.distribution("torch")
        not_in_wheel = {rel for topic in topics() if topic.name not in built_topics()
                        for rel in topic_files(topic)}
        ours, copy = Path(str(torch.locate_file(""))), site_packages(PATCHED_COPY)
        compared, differing = 0, []
        for entry in torch.files or []:
            rel = entry.as_posix()
            if entry.hash is None or rel.startswith("../") or ".dist-info/" in rel:
                continue  # compiled files, entry-point scripts, the renamed dist-info
            compared += 1
            if sha256(ours / rel) != sha256(copy / rel):
                differing.append(rel)
        self.assertGreater(compared, 1000)
        # Where a topic left out of the wheel patched the copy (2.11.0's
        # opt-in topics), the file differs; one that has the change upstream
        # (2.15.0's) was left alone in both.
        self.assertEqual(sorted(set(differing) - not_in_wheel), [])

    @unittest.skipUnless(Path(WHEEL).name.startswith(f"torch-{README_RELEASE}+"),
                         f"the README's recipe is torch {README_RELEASE}'s (the wheel job's)")
    def test_the_readme_hash_pin_recipe_run_as_it_is_gives_a_working_torch(self) -> None:
        """README.md's recipe, in a scratch directory that has the clone's
        scripts/ (so `scripts/apply.sh` is the README's path): a rebuild
        with the same sha256, a fresh venv, --require-hashes, pip check,
        import torch, and --status."""
        recipe = README_RECIPE.search(README.read_text())
        self.assertIsNotNone(recipe, f"{README} has no hash-pin recipe block")
        # The recipe's venv holds a whole CUDA build: beside the test venvs,
        # which the run has found room for, not in a temporary directory
        # that may be a small tmpfs.
        root = cache_dir()
        needed, free = bytes_under(site_packages(sys.executable)), shutil.disk_usage(root).free
        self.assertGreater(free, needed * 1.2, f"the recipe installs about {needed / 1e9:.1f} "
                           f"GB into a fresh venv; {root} has {free / 1e9:.1f} GB free")
        with tempfile.TemporaryDirectory(prefix="pregrad-hash-pin-", dir=root) as scratch:
            for part in ("scripts", "torch_backport", "patches"):
                (Path(scratch) / part).symlink_to(REPO / part)
            env = dict(os.environ, PATH=f"{Path(sys.base_prefix) / 'bin'}{os.pathsep}"
                       f"{os.environ['PATH']}")  # python3: the interpreter, not this venv
            # xtrace: a failure's message names the command of the recipe that
            # failed (bash ignores a PS4 from the environment when root).
            result = subprocess.run(["bash", "-euo", "pipefail", "-c",
                                     f"PS4='+ recipe: '; set -x\n{recipe[1]}"],
                                    cwd=scratch, env=env, capture_output=True, text=True)
            ran = [line for line in result.stderr.splitlines() if line.startswith("+ recipe: ")]
            self.assertEqual(result.returncode, 0, f"{(ran or ['the recipe'])[-1]}: failed"
                             f"\n--- its output ends:\n"
                             f"{result.stdout[-3000:]}\n--- its errors end:\n"
                             f"{result.stderr[-3000:]}")
            (rebuilt,) = (Path(scratch) / "dist").glob("*.whl")
            self.assertEqual((rebuilt.name, sha256(rebuilt)),
                             (Path(WHEEL).name, sha256(Path(WHEEL))))
            self.assertIn("No broken requirements found.", result.stdout)
            # torch.__version__ keeps the release's build string: 2.11.0+cu130.
            self.assertIn("\n2.11.0+", "\n" + result.stdout)
            self.assertEqual(result.stdout.count("patched: installed from a patched wheel"), 2,
                             result.stdout)
            # The lock finds the wheel relative to itself: dist/ can move.
            moved = Path(scratch) / "moved"
            (Path(scratch) / "dist").rename(moved)
            resolved = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                 "--quiet", "--require-hashes", "--report", "-", "-r",
                 str(moved / "requirements.txt")], cwd="/", capture_output=True, text=True)
            self.assertEqual(resolved.returncode, 0, resolved.stderr[-3000:])
            torch = next(item for item in json.loads(resolved.stdout)["install"]
                         if item["metadata"]["name"] == "torch")
            self.assertEqual(torch["download_info"]["url"], (moved / rebuilt.name).as_uri())


if __name__ == "__main__":
    unittest.main()
