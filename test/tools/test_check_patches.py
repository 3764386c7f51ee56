"""scripts/check-patches: passes the real series, and reports every problem of
a broken copy in one summary."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import expecttest

from fake_install import REPO, source_python, STOCK

CHECK = REPO / "scripts" / "check-patches"
FIRST = "0001-aot_autograd-run-pre-grad-passes-after-the-AOTAutogr.patch"
SECOND = "0002-inductor-key-the-FX-graph-and-AOTAutograd-caches-on-.patch"


class CheckPatchesTest(expecttest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pregrad-check-patches-")
        self.addCleanup(self._tmp.cleanup)
        self.patches = Path(self._tmp.name) / "patches"
        shutil.copytree(REPO / "patches", self.patches)
        self.series = self.patches / "v2.11.0"

    def check(self) -> tuple[int, str]:
        result = subprocess.run(
            [str(CHECK), "--python", source_python(STOCK),
             "--patches", str(self.patches), "v2.11.0"],
            capture_output=True, text=True,
        )
        return result.returncode, (result.stdout + result.stderr).replace(
            str(self.patches), "<patches>")

    def test_the_series_passes(self) -> None:
        code, output = self.check()
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
v2.11.0: ok
v2.11.0 autocast-cache-key: ok
v2.11.0 cpu-isa-probe: ok
check-patches: finished with 0 error(s)
""")

    def test_listing_problems_are_all_reported(self) -> None:
        series = self.series / "series"
        text = series.read_text().replace(SECOND, "# " + SECOND)
        series.write_text(text + FIRST + "\nmissing.patch\n")
        code, output = self.check()
        self.assertEqual(code, 1)
        self.assertExpectedInline(output, """\
v2.11.0: 4 problem(s)
v2.11.0 autocast-cache-key: ok
v2.11.0 cpu-isa-probe: ok
  <patches>/v2.11.0/series:4: 0001-aot_autograd-run-pre-grad-passes-after-the-AOTAutogr.patch is listed 2 times
  <patches>/v2.11.0/series:12: 0001-aot_autograd-run-pre-grad-passes-after-the-AOTAutogr.patch is listed 2 times
  <patches>/v2.11.0/series:13: missing.patch does not exist
  <patches>/v2.11.0/0002-inductor-key-the-FX-graph-and-AOTAutograd-caches-on-.patch: not listed in <patches>/v2.11.0/series
check-patches: finished with 4 error(s)
""")  # noqa: E501 (the real output)

    def test_crlf_and_missing_provenance_are_reported(self) -> None:
        patch = self.series / FIRST
        text = patch.read_text().replace("Applied-Upstream: 2.12.0\n", "")
        patch.write_bytes(text.replace("\n", "\r\n").encode())
        code, output = self.check()
        self.assertEqual(code, 1)
        self.assertIn(f"{FIRST}: has CRLF line endings", output)
        self.assertIn(f"{FIRST}: no 'Applied-Upstream:' line", output)

    def test_a_patch_that_needs_fuzz_is_reported_with_its_hunk(self) -> None:
        patch = self.series / FIRST
        patch.write_text(patch.read_text().replace(
            "     ignore_shape_env: bool = False,\n     disable_functionalization: bool = False,\n",
            "     ignore_shape_env: bool = True,\n"
            "     disable_functionalization: bool = False,\n", 1))
        code, output = self.check()
        self.assertEqual(code, 1)
        self.assertIn(f"<patches>/v2.11.0/{FIRST} does not apply to the pristine v2.11.0 files:",
                      output)
        self.assertRegex(output, r"error: patch failed: torch/_functorch/aot_autograd\.py:\d+")


if __name__ == "__main__":
    unittest.main()
