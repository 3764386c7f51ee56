"""The text made from patches/releases.tsv and patches/topics.tsv: apply.sh
--help and README's supported-releases table follow a new row with no other
edit than `scripts/update-docs`, and the table in git is current."""

from __future__ import annotations

import shutil
import subprocess
import unittest
from pathlib import Path

from fake_install import copy_project, REPO, ScratchTestCase

# What patches/releases.tsv lists today, written out: a wrong release list
# in the product fails here.
RELEASES = ("2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, "
            "2.15.0")


def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(project / "scripts" / args[0]), *args[1:]],
                          capture_output=True, text=True)


def help_text(project: Path) -> str:
    """--help as one line of words (it is wrapped)."""
    return " ".join(run(project, "apply.sh", "--help").stdout.split())


class GeneratedDocsTest(ScratchTestCase):
    def test_readme_table_is_current(self) -> None:
        result = run(REPO, "update-docs", "--check")
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_help_names_every_release_served(self) -> None:
        self.assertIn(f"Releases served: {RELEASES}.", help_text(REPO))
        self.assertIn("2.12.0-2.15.0 have the feature and get their results fixes",
                      help_text(REPO))

    def test_help_names_every_topic_with_its_summary(self) -> None:
        self.assertIn("cpu-isa-probe (opt-in) CPU warm start: the vector-ISA probe's child "
                      "processes stop importing torch (pytorch#183515, #189900, #190561); "
                      "patches/<base>/cpu-isa-probe/", help_text(REPO))

    def test_a_new_release_row_changes_the_help_and_the_table(self) -> None:
        project = copy_project(self.tmp / "project")
        shutil.copy2(REPO / "README.md", project / "README.md")
        with open(project / "patches" / "releases.tsv", "a") as rows:
            rows.write("2.16.0\tv2.14.1\thas it\thas it\n")
        stale = run(project, "update-docs", "--check")
        self.assertEqual(stale.returncode, 1, stale.stdout)
        self.assertIn("supported-releases table is stale", stale.stderr)
        self.assertEqual(run(project, "update-docs").returncode, 0)
        self.assertIn("| 2.16.0 | `v2.14.1`'s series (its files are 2.14.1's) | has it "
                      "upstream | has it upstream |\n", (project / "README.md").read_text())
        self.assertIn(f"Releases served: {RELEASES}, 2.16.0.", help_text(project))
        self.assertIn("2.12.0-2.16.0 have the feature", help_text(project))

    def test_a_candidate_and_a_topic_not_served_yet_are_said(self) -> None:
        """What scripts/new-base leaves: a row whose series awaits its matrix
        (patches/candidates.tsv) and a topic stopped at a conflict."""
        project = copy_project(self.tmp / "project")
        shutil.copy2(REPO / "README.md", project / "README.md")
        with open(project / "patches" / "releases.tsv", "a") as rows:
            rows.write("2.16.0\tv2.14.1\thas it\tnot yet\n")
        (project / "patches" / "candidates.tsv").write_text("# release\n2.16.0\n")
        self.assertEqual(run(project, "update-docs").returncode, 0)
        self.assertIn("| 2.16.0 (candidate: matrix not passed yet) | `v2.14.1`'s series (its "
                      "files are 2.14.1's) | not served yet (scripts/new-base stopped at a "
                      "conflict) | has it upstream |\n", (project / "README.md").read_text())
        self.assertIn(f"Releases served: {RELEASES}, 2.16.0 (candidate).", help_text(project))

    def test_a_row_naming_a_base_without_a_series_is_named_and_help_still_prints(self) -> None:
        project = copy_project(self.tmp / "project")
        shutil.copy2(REPO / "README.md", project / "README.md")
        readme = (project / "README.md").read_text()
        with open(project / "patches" / "releases.tsv", "a") as rows:
            rows.write("2.16.0\tv2.16.0\thas it\thas it\n")
        problem = ("releases.tsv: 2.16.0 names v2.16.0 for topic pre-grad-pass-timing, "
                   "which has no series there")
        shown = run(project, "apply.sh", "--help")
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn(f"(cannot list them: patches/{problem})",
                      " ".join(shown.stdout.split()))
        self.assertIn("--topic T", shown.stdout)
        refused = run(project, "update-docs")
        self.assertEqual(refused.returncode, 1)
        self.assertIn(problem, refused.stderr)
        self.assertEqual((project / "README.md").read_text(), readme)

    def test_a_readme_without_the_markers_is_refused_unchanged(self) -> None:
        project = copy_project(self.tmp / "project")
        (project / "README.md").write_text("# no table here\n")
        result = run(project, "update-docs")
        self.assertEqual(result.returncode, 1)
        self.assertIn("README.md has no '<!-- supported-releases", result.stderr)
        self.assertEqual((project / "README.md").read_text(), "# no table here\n")


if __name__ == "__main__":
    unittest.main()
