"""Rehearse scripts/new-base on every base: remove each base's series of a
topic in turn (in a copy of patches/) and regenerate it from each neighbour
(the adjacent bases whose series are of the same kind: bringing the change,
or fixing a release that has it), with the real release files.

    python3 test/harness/rehearse_bases.py 2.9.0=PY 2.9.1=PY ... [--markdown]

prints one line per (topic, base, neighbour): identical (every patch's
post-images are the committed series' byte for byte), differs (a clean
merge whose post-images are not the committed ones), or conflict (the patch,
file and hunk new-base names). test/tools/test_new_base.py runs the same
rehearsal and holds its expected outcome; docs/patch-contract.md has the table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from torch_backport.patchset import series as model  # noqa: E402
from torch_backport.infra.tables import release_numbers  # noqa: E402

NEW_BASE = REPO / "scripts" / "new-base"


@dataclasses.dataclass(frozen=True)
class Rehearsal:
    topic: str
    base: str
    neighbour: str
    outcome: str  # identical | differs | conflict
    detail: str  # for a conflict: "<patch> <file> <hunk header>"
    output: str
    untouched: bool  # patches/ unchanged (required of a conflict)


def neighbours(topic: model.Topic) -> List[Tuple[str, str]]:
    """(base, neighbour) pairs: adjacent bases of the same kind, both ways."""
    bases = model.supported_bases(topic)
    fixes = model.fixed_bases(topic)
    pairs: List[Tuple[str, str]] = []
    for kind in ([b for b in bases if b not in fixes], fixes):
        for older, newer in zip(kind, kind[1:]):
            pairs += [(older, newer), (newer, older)]
    return sorted(pairs, key=lambda pair: (release_numbers(pair[0]),
                                           release_numbers(pair[1])))


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def index_lines(directory: Path) -> List[str]:
    """Every patch's `index` and file lines, in series order."""
    lines: List[str] = []
    for _, name in model.series_entries(directory / "series"):
        lines += [line for line in (directory / name).read_text().splitlines()
                  if line.startswith(("index ", "diff --git "))]
    return lines


def remove_series(directory: Path, primary: bool) -> None:
    if not primary:
        shutil.rmtree(directory)
        return
    for path in directory.iterdir():
        if path.is_file():
            path.unlink()


def rehearse(topic: model.Topic, base: str, neighbour: str, pythons: Dict[str, str]) -> Rehearsal:
    with tempfile.TemporaryDirectory(prefix="pregrad-rehearsal-") as tmp:
        patches = Path(tmp) / "patches"
        shutil.copytree(model.PATCHES, patches)
        committed = topic.directory(base)
        copy = patches / committed.relative_to(model.PATCHES)
        expected = index_lines(committed)
        remove_series(copy, topic.primary)
        before = tree_digest(patches)
        version = base[1:]
        result = subprocess.run(
            [str(NEW_BASE), version, "--from", neighbour, "--topic", topic.name,
             "--python", pythons[version],
             "--base-python", f"{neighbour[1:]}={pythons[neighbour[1:]]}",
             "--patches", str(patches), "--scratch", str(Path(tmp) / "scratch")],
            capture_output=True, text=True)
        output = (result.stdout + result.stderr).replace(tmp, "<tmp>")
        untouched = tree_digest(patches) == before
        if result.returncode == 0 and (copy / "series").is_file():
            outcome = "identical" if index_lines(copy) == expected else "differs"
            return Rehearsal(topic.name, base, neighbour, outcome, "", output, untouched)
        hunk = re.search(r"^\S+: (\S+\.patch) of \S+ does not merge.*\n\s+(\S+): hunk (@@ .*? @@)",
                         output, re.MULTILINE)
        detail = " ".join(hunk.groups()) if hunk else "(no hunk named)"
        outcome = "conflict" if result.returncode == 1 else f"exit {result.returncode}"
        return Rehearsal(topic.name, base, neighbour, outcome, detail, output, untouched)


def rehearse_all(pythons: Dict[str, str]) -> List[Rehearsal]:
    return [rehearse(topic, base, neighbour, pythons)
            for topic in model.topics() for base, neighbour in neighbours(topic)]


def main(argv: List[str]) -> int:
    pythons = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    done = rehearse_all(pythons)
    if "--markdown" in argv:
        print("| topic | base | regenerated from | outcome |")
        print("|---|---|---|---|")
        for item in done:
            what = (f"conflict: {item.detail}" if item.outcome == "conflict"
                    else {"identical": "identical post-images",
                          "differs": "clean merge, other post-images"}.get(item.outcome,
                                                                           item.outcome))
            print(f"| {item.topic} | {item.base} | {item.neighbour} | {what} |")
    else:
        for item in done:
            changed = "" if item.untouched or item.outcome != "conflict" else " (patches/ CHANGED)"
            print(f"{item.topic:22} {item.base:8} <- {item.neighbour:8} {item.outcome:9} "
                  f"{item.detail}{changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
