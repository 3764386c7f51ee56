"""`scripts/apply.sh --wheel` on every release: a small wheel of this
release's stock files (the ones the topics touch, with their bytes from this
install) becomes a patched wheel whose version, RECORD, dist-info and series
follow the rules, whatever the release.

Run in scripts/test.sh's stock job of each release (the files must be the
release's own; the patched job's are patched already). The wheel with all of
torch is built and installed in the wheel job (test_installed_patched_wheel.py).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import sys
import tempfile
import unittest
from importlib import metadata
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version
from wheel.wheelfile import WheelFile

from fake_wheel import make_fake_wheel, release_files, run_wheel
from test_release_identification import expected_series

VERSION = metadata.version("torch")
RELEASE = VERSION.split("+", 1)[0]


class PatchedWheelRulesTest(unittest.TestCase):
    wheel: Path
    output: str

    @classmethod
    def setUpClass(cls) -> None:
        cls._tmp = tempfile.TemporaryDirectory(prefix="pregrad-wheel-rules-")
        tmp = Path(cls._tmp.name)
        cls.source = make_fake_wheel(tmp / "in", release_files(sys.executable), VERSION)
        code, cls.output = run_wheel("--wheel", str(cls.source), "--out", str(tmp / "out"))
        assert code == 0, cls.output
        (cls.wheel,) = (tmp / "out").iterdir()
        code, output = run_wheel("--wheel", str(cls.source), "--out", str(tmp / "again"))
        assert code == 0, output
        (cls.again,) = (tmp / "again").iterdir()

    @classmethod
    def tearDownClass(cls) -> None:
        cls._tmp.cleanup()

    def built(self) -> dict[str, object]:
        version = self.wheel.name.split("-")[1]
        with WheelFile(str(self.wheel)) as wheel:
            data: dict[str, object] = json.loads(
                wheel.read(f"torch-{version}.dist-info/PREGRAD_BACKPORT.json"))
        return data

    def test_the_version_is_the_release_s_with_the_label(self) -> None:
        version = Version(self.wheel.name.split("-")[1])
        local = Version(VERSION).local
        self.assertRegex(version.local or "", rf"^{re.escape(local + '.') if local else ''}"
                         r"pregrad\.g[0-9a-f]{10}$")
        self.assertIn(version, SpecifierSet(f"=={RELEASE}"))

    def test_each_default_topic_gets_the_series_of_the_release_table(self) -> None:
        table = expected_series()[RELEASE]
        topics = self.built()["topics"]
        assert isinstance(topics, dict)
        expected = {topic: base for topic, base in table.items()
                    if topic != "cpu-isa-probe" and base != "has it"}
        self.assertEqual({topic: entry["base"] for topic, entry in topics.items()}, expected)

    def test_every_file_matches_the_new_record(self) -> None:
        """Every file reads back with the hash RECORD gives it (WheelFile
        checks each read, and refuses a file RECORD does not name), RECORD
        names no file the wheel lacks, and the wheel has every file of the
        stock one: an empty or truncated wheel fails."""
        def outside_dist_info(wheel: WheelFile) -> set[str]:
            return {name for name in wheel.namelist() if ".dist-info/" not in name}

        with WheelFile(str(self.source)) as source:
            stock_files = outside_dist_info(source)
        with WheelFile(str(self.wheel)) as wheel:
            for info in wheel.infolist():
                wheel.read(info.filename)
            record = csv.reader(wheel.read(wheel.record_path).decode().splitlines())
            self.assertEqual({row[0] for row in record}, set(wheel.namelist()))
            self.assertEqual(outside_dist_info(wheel), stock_files)
        self.assertGreater(len(stock_files), 0)

    def test_a_second_build_has_the_same_bytes(self) -> None:
        self.assertEqual(hashlib.sha256(self.wheel.read_bytes()).hexdigest(),
                         hashlib.sha256(self.again.read_bytes()).hexdigest())


if __name__ == "__main__":
    unittest.main()
