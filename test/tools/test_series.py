"""The patch series themselves: complete, well-formed, with provenance, and
applying without fuzz to their pristine base; a base that drifted is refused
with the patch, file and line named."""

from __future__ import annotations

import hashlib
import subprocess
import unittest

from hypothesis import given, settings, strategies as st

from fake_install import (AUTOCAST_BASES, BASES as LISTED, ISA_BASES, REPO, source_python,
                          STOCK, torch_site)

import torch_backport.patchset.series as model  # noqa: E402
from torch_backport.patchset.apply import apply_series  # noqa: E402
from torch_backport.infra.errors import Refused  # noqa: E402

BASES = model.supported_bases()


def pristine_files(series: model.Series) -> dict[str, bytes]:
    """The base's pristine files, from the stock torch venv of scripts/test.sh."""
    site = torch_site(source_python(STOCK))
    return {rel: (site / rel).read_bytes() for rel in series.touched}


class SeriesTest(unittest.TestCase):
    def test_the_bases_of_each_topic_are_the_ones_written_out(self) -> None:
        """A series dropped or misnamed changes the bases the tool offers."""
        found = {topic.name: ", ".join(model.supported_bases(topic)) for topic in model.topics()}
        self.assertEqual(found, {"pre-grad-pass-timing": LISTED,
                                 "autocast-cache-key": AUTOCAST_BASES,
                                 "cpu-isa-probe": ISA_BASES})

    def test_every_entry_exists_once_and_every_patch_is_listed(self) -> None:
        for base in BASES:
            directory = REPO / "patches" / base
            entries = [
                line.split("#", 1)[0].strip()
                for line in (directory / "series").read_text().splitlines()
            ]
            entries = [entry for entry in entries if entry]
            self.assertEqual(len(entries), len(set(entries)), f"{base}: listed twice")
            on_disk = sorted(path.name for path in directory.glob("*.patch"))
            self.assertEqual(sorted(entries), on_disk, f"{base}: series vs files")

    def test_every_patch_parses_and_carries_provenance(self) -> None:
        for base in BASES:
            for patch in model.load_series(base).patches:
                with self.subTest(patch=patch.name):
                    subprocess.run(
                        ["git", "apply", "--numstat", str(patch)],
                        check=True,
                        capture_output=True,
                    )
                    text = patch.read_text()
                    self.assertNotIn("\r", text)
                    self.assertRegex(
                        text,
                        r"\nOrigin: (backport, https://github\.com/pytorch/pytorch/pull/"
                        r"|fix, torch-pregrad-backport )",
                    )
                    for field in (
                        "Applied-Upstream: ",
                        "Last-Update: ",
                        "Differs from upstream: ",
                        "What: ",
                        "Why: ",
                    ):
                        self.assertIn(field, text)

    def test_pristine_files_match_the_recorded_base(self) -> None:
        series = model.load_series("v2.11.0")
        expected = model.pristine_sha256(series)
        self.assertEqual(sorted(expected), series.touched)
        for rel, data in pristine_files(series).items():
            self.assertEqual(hashlib.sha256(data).hexdigest(), expected[rel], rel)

    def test_series_applies_without_fuzz_to_its_base(self) -> None:
        series = model.load_series("v2.11.0")
        patched = apply_series(pristine_files(series), series)
        config = patched["torch/_inductor/config.py"].decode()
        self.assertIn(
            'pre_grad_pass_timing: Literal["early", "late", "default"] = "default"',
            config,
        )
        self.assertIn(
            "def resolve_pre_grad_pass_timing()",
            patched["torch/_inductor/codecache.py"].decode(),
        )

    @given(data=st.data())
    @settings(max_examples=30, deadline=None)
    def test_a_drifted_base_is_refused_naming_patch_and_file(self, data: st.DataObject) -> None:
        """Edit one line that a hunk of the first patch touching a file relies
        on: the series is refused, naming that patch and the file."""
        series = model.load_series("v2.11.0")
        pristine = pristine_files(series)
        rel = data.draw(st.sampled_from(series.touched), label="file")
        patch = next(p for p in series.patches if any(d.path == rel for d in p.files))
        diff = next(d for d in patch.files if d.path == rel)
        hunks = [(h.old_start, max(h.old_lines, 1)) for h in diff.hunks]
        start, length = data.draw(st.sampled_from(hunks), label="hunk")
        line_number = data.draw(st.integers(start, start + length - 1), label="line")
        lines = pristine[rel].decode().split("\n")
        lines[line_number - 1] += "  # drifted"
        drifted = {**pristine, rel: "\n".join(lines).encode()}
        with self.assertRaises(Refused) as caught:
            apply_series(drifted, series)
        message = str(caught.exception)
        self.assertIn(f"patches/v2.11.0/{patch.name} does not apply", message)
        self.assertIn(rel, message)


if __name__ == "__main__":
    unittest.main()
