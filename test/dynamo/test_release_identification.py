"""Which series each topic gives this torch: decided by the bytes of the
files the series touch, never by the version string alone.

`scripts/apply.sh --python <this interpreter> --status` runs against the
real install under test, stock or patched, and must name, for every topic,
the series that patches/releases.tsv gives this release (2.12.1 gets v2.12.0's
series, 2.14.0 v2.14.1's, 2.9.0 its own), and exit 0: every topic that
applies is in a good state, and one that has the change upstream says so.
Nothing is written.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unittest
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASES = REPO / "patches" / "releases.tsv"
HEADLINE = re.compile(r"^torch \S+ in \S+(?: \((?P<detail>.*)\))?$")


def expected_series() -> dict[str, dict[str, str]]:
    """release -> topic -> base name or "has it", from patches/releases.tsv."""
    lines = [line.split("\t") for line in RELEASES.read_text().splitlines()
             if line and not line.startswith("#")]
    header = next(line for line in RELEASES.read_text().splitlines()
                  if line.startswith("# release\t"))[2:].split("\t")
    return {fields[0]: dict(zip(header[1:], fields[1:])) for fields in lines}


def chosen_series(status: str) -> dict[str, str]:
    """topic -> the base `--status` names, or "has it"."""
    found: dict[str, str] = {}
    for block in status.strip().split("\n\n"):
        headline = HEADLINE.match(block.splitlines()[0])
        assert headline is not None, block
        detail = headline["detail"] or ""
        topic = re.search(r"topic (\S+?)[,)]|topic (\S+)$", detail)
        name = (topic.group(1) or topic.group(2)) if topic else "pre-grad-pass-timing"
        base = re.search(r"base (v[\d.]+)", detail)
        found[name] = base.group(1) if base else (
            "has it" if "has the feature" in block else "none")
    return found


class ReleaseIdentificationTest(unittest.TestCase):
    def test_status_names_the_series_of_the_release_table_and_exits_0(self) -> None:
        release = metadata.version("torch").split("+", 1)[0]
        table = expected_series()
        self.assertIn(release, table, f"torch {release} is not in {RELEASES}")
        result = subprocess.run(
            [str(REPO / "scripts" / "apply.sh"), "--python", sys.executable, "--status"],
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(chosen_series(result.stdout), table[release], result.stdout)


if __name__ == "__main__":
    unittest.main()
