"""The commands the docs tell users to run are commands the tool takes: the
"check your own model" line of docs/results-fixes.md, and every `RUN
torch-backport apply` line of README.md's Dockerfile, parsed by the
command's own grammar (cli.parse). What --verify --model does when run is
test/dynamo/test_verify_command.py's."""

from __future__ import annotations

import re
import shlex
import unittest

from fake_install import REPO
from torch_backport.cli import parse, Request

PYTHON = "/usr/bin/python3"  # what "$(command -v python)" and the installed command name


def request_of(line: str) -> Request:
    words = shlex.split(line.replace('"$(command -v python)"', PYTHON))
    if words[:2] == ["torch-backport", "apply"]:
        return parse(words[2:], default_python=PYTHON)
    if words[0] == "scripts/apply.sh":
        return parse(words[1:])
    raise AssertionError(f"not a command of this project: {line}")


def sh_block_after(text: str, marker: str) -> list[str]:
    """The lines of the first ```sh block after `marker`."""
    rest = text[text.index(marker):]
    block = re.search(r"```sh\n(.*?)```", rest, re.S)
    assert block is not None, f"no ```sh block after {marker}"
    return [line for line in block[1].splitlines() if line and not line.startswith("#")]


class DocumentedCommandsTest(unittest.TestCase):
    def test_the_check_your_own_model_lines_are_verify_model(self) -> None:
        text = (REPO / "docs" / "results-fixes.md").read_text()
        lines = sh_block_after(text, "**Check your own model**")
        self.assertEqual(len(lines), 2, lines)
        for line in lines:
            with self.subTest(line=line):
                request = request_of(line)
                self.assertEqual((request.command, request.python, request.model),
                                 ("verify", PYTHON, "my_models:make"))

    def test_every_dockerfile_step_of_the_readme_parses(self) -> None:
        readme = (REPO / "README.md").read_text()
        steps = re.findall(r"^RUN (torch-backport apply.*)$", readme, re.M)
        self.assertIn("torch-backport apply --verify", steps)
        for step in steps:
            with self.subTest(step=step):
                request_of(step)  # a UsageError fails the test
