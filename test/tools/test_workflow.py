"""The day-one workflow (.github/workflows/day-one.yml, issue 48) is a
valid GitHub Actions workflow by check-jsonschema's copy of the schema
SchemaStore keeps for them (a linter from the package index; actionlint has
only an sdist there, which fetches its binary from GitHub at build time),
and it acts on each exit status `scripts/new-base --latest` documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

from fake_install import REPO

WORKFLOW = REPO / ".github" / "workflows" / "day-one.yml"
LINTER = "check-jsonschema==0.39.0"


def linter() -> Path:
    """check-jsonschema in a venv of its own under the cache, made once."""
    cache = Path(os.environ.get("PREGRAD_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                 / "pregrad-backport")
    venv = cache / "tools" / "check-jsonschema"
    ready = venv / ".pregrad-ready"
    program = venv / "bin" / "check-jsonschema"
    if not (ready.is_file() and ready.read_text() == LINTER):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", LINTER], check=True, timeout=600)
        ready.write_text(LINTER)
    return program


class DayOneWorkflowTest(unittest.TestCase):
    def test_the_workflow_is_valid_by_the_github_workflow_schema(self) -> None:
        checked = subprocess.run([str(linter()), "--builtin-schema", "vendor.github-workflows",
                                  str(WORKFLOW)], capture_output=True, text=True, timeout=300)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)

    def test_it_runs_latest_and_acts_on_each_documented_exit_status(self) -> None:
        text = WORKFLOW.read_text()
        self.assertIn("scripts/new-base --latest --branch --report day-one.md", text)
        self.assertEqual(sorted(set(re.findall(r"status == '(\d)'", text))), ["1", "3", "4"])
        self.assertIn("status != '0'", text)
        self.assertNotRegex(text, r"git push[^\n]*\bmain\b")


if __name__ == "__main__":
    unittest.main()
