"""test/harness/newer_release.py: the line scripts/test.sh prints when the
package index offers a torch newer than every row of patches/releases.tsv."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

import expecttest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "test" / "harness"))
from newer_release import newer, summarise  # noqa: E402

LISTED = ["2.9.0", "2.12.1", "2.15.0"]
CHECK_OUTPUT = """\
torch 2.16.0: 7 of the 7 files the topics touch, from torch-2.16.0-cp311-cp311-manylinux_2_28_x86_64.whl, each checked against RECORD
pre-grad-pass-timing: replayed v2.14.1's 2 patch(es) onto torch 2.16.0's files: 0001 3-way merge, clean, 0002 applied as is
autocast-cache-key: torch._functorch._aot_autograd.autograd_cache already keys the dtype in-graph autocast regions resolve in torch 2.16.0, and no base needs fixes for it: has it
cpu-isa-probe: 0001-x.patch of v2.13.0 does not merge onto torch 2.16.0's files (3-way, v2.13.0's files as the ancestor):
  torch/_inductor/cpu_vec_isa.py: hunk @@ -1,2 +1,3 @@ does not apply to 2.16.0's file
would write patches/v2.16.0/
check: nothing was written
"""  # noqa: E501 (the real output)


class NewerReleaseTest(expecttest.TestCase):
    def test_a_newer_final_release_is_named(self) -> None:
        self.assertEqual(newer(["2.16.0", "2.15.0", "2.13.0+cpu"], LISTED), "2.16.0")

    def test_a_listed_release_is_not_newer(self) -> None:
        self.assertIsNone(newer(["2.15.0", "2.14.1"], LISTED))
        self.assertIsNone(newer(["2.15.0+cpu"], LISTED))

    def test_pre_releases_do_not_count(self) -> None:
        self.assertIsNone(newer(["2.16.0rc1", "2.16.0.dev20261201", "2.15.0"], LISTED))

    def test_summary_names_each_topic(self) -> None:
        self.assertExpectedInline(summarise(CHECK_OUTPUT), """\
pre-grad-pass-timing: v2.14.1's series merges (0001 3-way merge, clean, 0002 applied as is); autocast-cache-key: has it upstream; cpu-isa-probe: 0001-x.patch of v2.13.0 does not merge onto torch 2.16.0's files""")  # noqa: E501 (the real output)


if __name__ == "__main__":
    unittest.main()
