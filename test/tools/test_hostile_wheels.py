"""Hostile wheels are refused, naming the input, and nothing is written
(record.refuse_unsafe_names, index.read_listed, fleet.targets): member names
that climb out of the install, platform tags and Requires-Python values
outside their grammar, and a METADATA of 100 MB."""

from __future__ import annotations

import subprocess
import unittest
import zipfile
from pathlib import Path

from fake_install import APPLY, ScratchTestCase, source_python, STOCK
from fake_wheel import fleet_env, make_fake_wheel, release_files

from torch_backport.infra.errors import Refused
from torch_backport.generated.index import read_listed

HOSTILE_NAMES = ("../../../x.py", "/etc/cron.d/x", "torch-2.11.0.dist-info/../../evil.pth",
                 "torch\\..\\x.py", "C:/x.py")


class HostileWheelTest(ScratchTestCase):
    def wheel_with(self, name: str) -> Path:
        """A true torch wheel, then `name` added to its zip (RECORD untouched)."""
        wheel = make_fake_wheel(self.tmp / "in", release_files(source_python(STOCK)), "2.11.0")
        with zipfile.ZipFile(wheel, "a") as opened:
            info = zipfile.ZipInfo("placeholder")
            info.filename = name  # as a hostile tool writes it, unsanitised
            opened.writestr(info, b"import os\n")
        return wheel

    def test_member_names_that_leave_the_install_are_refused_by_wheel(self) -> None:
        source_python(STOCK)  # without it the test skips, not each subTest
        for name in HOSTILE_NAMES:
            with self.subTest(name=name):
                wheel = self.wheel_with(name)
                out = self.tmp / "out"
                done = subprocess.run([str(APPLY), "--wheel", str(wheel), "--out", str(out)],
                                      capture_output=True, text=True,
                                      env=fleet_env(self.tmp, self.tmp / "in"))
                said = done.stdout + done.stderr
                self.assertEqual(done.returncode, 1, said)
                self.assertIn(f"the member {name!r}", said)
                self.assertNotIn("Traceback", said)
                self.assertFalse(out.exists())
                wheel.unlink()

    def test_member_names_that_leave_the_install_are_refused_by_the_index(self) -> None:
        with self.assertRaisesRegex(Refused, "the member '../../../x.py' has a '..' part"):
            read_listed(self.wheel_with("../../../x.py"))

    def test_a_platform_tag_outside_pep_425_is_refused_by_the_index(self) -> None:
        wheel = make_fake_wheel(self.tmp, release_files(source_python(STOCK)), "2.11.0",
                                tag="cp311-cp311-linux_x86_64<b>")
        with self.assertRaisesRegex(Refused, "platform tag 'linux_x86_64<b>' is not a PEP 425"):
            read_listed(wheel)

    def test_a_requires_python_outside_pep_440_is_refused_by_the_index(self) -> None:
        wheel = make_fake_wheel(self.tmp, release_files(source_python(STOCK)), "2.11.0",
                                requires_python='>=3.10"><script>')
        with self.assertRaisesRegex(Refused, "Requires-Python .* is not a PEP 440 specifier"):
            read_listed(wheel)

    def test_a_huge_metadata_is_refused_before_it_is_read(self) -> None:
        wheel = make_fake_wheel(self.tmp, release_files(source_python(STOCK)), "2.11.0")
        with zipfile.ZipFile(wheel, "a", zipfile.ZIP_DEFLATED) as opened:
            big = zipfile.ZipInfo("torch-2.11.0.dist-info/METADATA")
            big.compress_type = zipfile.ZIP_DEFLATED
            opened.writestr(big, b"Name: torch\n" + bytes(100 * 1024 * 1024))
        with self.assertRaisesRegex(Refused, "its METADATA is 104857612 bytes"):
            read_listed(wheel)

    def test_a_platform_outside_the_tag_grammar_is_refused_by_the_fleet(self) -> None:
        done = subprocess.run([str(APPLY), "--wheel", "torch==2.11.0", "--platform",
                               'linux"x86_64', "--out", str(self.tmp / "out")],
                              capture_output=True, text=True,
                              env=fleet_env(self.tmp, self.tmp / "in"))
        said = done.stdout + done.stderr
        self.assertEqual(done.returncode, 1, said)
        self.assertIn("is not a wheel platform tag", said)
        self.assertFalse((self.tmp / "out").exists())


if __name__ == "__main__":
    unittest.main()
