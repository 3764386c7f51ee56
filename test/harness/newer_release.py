"""Does the package index offer a torch newer than every row of
patches/releases.tsv? The matrix (scripts/test.sh) runs this at the end of every run and
prints its one line; it never fails the run (exit 0 whatever happens).

When it does, what identification gives for that release is
`scripts/new-base X --check` (it reads the touched files of the release
wheel by byte range, a few MB, replays each topic's nearest series and
writes nothing); its full output goes to stderr (test.sh: the log), and the
line says per topic what it found.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from torch_backport.infra.tables import read_releases, release_numbers  # noqa: E402

NEW_BASE = REPO / "scripts" / "new-base"
Numbers = Tuple[int, ...]
# A final release, a local label (+cpu) being the same release; not a
# pre-release (rc, dev), which the project's version order would rank as
# the final release it leads to.
FINAL_RELEASE = re.compile(r"\d+\.\d+\.\d+(?:\+\S+)?")


def numbers(version: str) -> Optional[Numbers]:
    """(2, 16, 0) for a final release 2.16.0, in torch_backport.infra.tables'
    version order; None for a pre-release or anything else."""
    return release_numbers(version.strip()) if FINAL_RELEASE.fullmatch(version.strip()) else None


def listed() -> List[str]:
    return read_releases(REPO / "patches").versions


def newer(offered: List[str], known: List[str]) -> Optional[str]:
    """The newest final release in `offered` if it is newer than all of `known`."""
    releases = [n for n in map(numbers, offered) if n is not None]
    known_numbers = [n for n in map(numbers, known) if n is not None]
    if not releases:
        return None
    newest = max(releases)
    if known_numbers and newest <= max(known_numbers):
        return None
    return ".".join(map(str, newest))


def index_versions() -> Optional[List[str]]:
    """torch's versions on the configured package index, or None if pip cannot say."""
    try:
        asked = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch",
                                "--disable-pip-version-check"],
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^Available versions: (.*)$", asked.stdout, re.MULTILINE)
    return [v.strip() for v in found.group(1).split(",")] if found else None


def summarise(check_output: str) -> str:
    """new-base --check's per-topic findings, one clause each."""
    clauses = []
    for line in check_output.splitlines():
        topic = re.match(r"^([a-z][a-z0-9-]+): (.*)$", line)
        if topic is None or topic.group(1) in ("check", "new-base"):
            continue
        text = topic.group(2)
        replayed = re.match(r"replayed (\S+)'s .*?: (.*)$", text)
        if replayed:
            clauses.append(f"{topic.group(1)}: {replayed.group(1)}'s series merges "
                           f"({replayed.group(2)})")
        elif "does not merge" in text:
            clauses.append(f"{topic.group(1)}: {text.split(' (3-way')[0]}")
        elif text.endswith(": has it"):
            clauses.append(f"{topic.group(1)}: has it upstream")
        elif "the row names" in text:
            clauses.append(f"{topic.group(1)}: {text.rsplit(': the row names ', 1)[-1]}'s files")
    return "; ".join(clauses) or "new-base --check said nothing per topic (see the log)"


def main() -> int:
    offered = index_versions()
    if offered is None:
        print("newer torch: pip could not list torch's versions on the index; not checked")
        return 0
    release = newer(offered, listed())
    if release is None:
        newest = max(offered, key=lambda v: numbers(v) or ())
        print(f"newer torch: none on the index (newest {newest} is in patches/releases.tsv)")
        return 0
    try:
        check = subprocess.run([str(NEW_BASE), release, "--check"], capture_output=True,
                               text=True, timeout=1800)
        output = check.stdout + check.stderr
    except subprocess.TimeoutExpired:
        output = "new-base --check took over 30 min"
    sys.stderr.write(output)
    print(f"newer torch: {release} is on the index, newer than every release in "
          f"patches/releases.tsv; identification (scripts/new-base {release} --check): "
          f"{summarise(output)}; to serve it: docs/patch-contract.md, \"Day one of a new "
          "release\"")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as problem:  # never fail the test run over this line
        print(f"newer torch: not checked ({type(problem).__name__}: {problem})")
        sys.exit(0)
