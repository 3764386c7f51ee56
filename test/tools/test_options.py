"""The option table (torch_backport/options.py) is the one source of the
parser and of --help: every option the parser takes is in the help, every
option the help or its usage lines name is one the parser takes, and a mode's
help shows that mode's options only."""

from __future__ import annotations

import re
import unittest

from torch_backport import cli, options
from torch_backport.help_text import apply_help
from torch_backport.infra.errors import UsageError

OPTION_RE = re.compile(r"(?<![\w-])--[a-z][a-z-]*[a-z]")


def entries(text: str) -> set[str]:
    """The options the help describes: those that open an entry line."""
    return {match[1] for match in re.finditer(r"^  (--[a-z-]+|CHECKOUT)\b", text, re.M)}


class OptionTableTest(unittest.TestCase):
    def test_the_parser_takes_every_option_of_the_table(self) -> None:
        taken = {string for action in options.parser("apply.sh")._actions
                 for string in action.option_strings}
        table = {option.name for option in options.OPTIONS if option.kind is not
                 options.Kind.POSITIONAL}
        self.assertEqual(taken - {"-h", "--help"}, table)

    def test_the_help_describes_every_option_of_the_table(self) -> None:
        self.assertEqual(entries(apply_help()), {option.name for option in options.OPTIONS})

    def test_every_option_the_help_names_is_parsed(self) -> None:
        named = set(OPTION_RE.findall(apply_help())) - {"--help", "--require-hashes",
                                                        "--index-url", "--find-links"}
        self.assertEqual(named - {option.name for option in options.OPTIONS}, set())

    def test_every_usage_line_parses(self) -> None:
        for line in options.USAGE[:-1]:
            words = [word for word in re.sub(r"[\[\]()|.]", " ", line).split()]
            with self.subTest(line=line):
                # Each word of a usage line is an option of the table or its value's name.
                unknown = [word for word in words if word.startswith("--")
                           and word not in {option.name for option in options.OPTIONS}]
                self.assertEqual(unknown, [])

    def test_an_option_without_its_value_says_what_it_needs(self) -> None:
        for option in options.OPTIONS:
            if option.kind in (options.Kind.VALUE, options.Kind.REPEATED,
                               options.Kind.MODE_VALUE):
                with self.subTest(option=option.name):
                    with self.assertRaises(UsageError) as raised:
                        cli.parse([option.name])
                    self.assertEqual(str(raised.exception), option.needs)

    def test_a_modes_help_shows_its_options_only(self) -> None:
        helped = apply_help("scripts/apply.sh", options.sections_for("wheel", False, False))
        self.assertEqual(entries(helped), {"--topic", "--check", "--wheel", "--out", "--lock",
                                           "--platform", "--python-version",
                                           "--all-platforms"})
        self.assertNotIn("Installed wheel", helped)

    def test_the_usage_line_names_the_command_as_invoked(self) -> None:
        self.assertTrue(apply_help("torch-backport apply").startswith(
            "Usage: torch-backport apply --python PY"))
        self.assertNotIn("scripts/apply.sh", apply_help("torch-backport apply").split(
            "\n\n")[0])


if __name__ == "__main__":
    unittest.main()
