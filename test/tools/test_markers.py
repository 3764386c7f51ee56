"""The tiers (tiers.py's MARKS, setup.cfg's markers) name what is there:
every file, class and test a marker is given to exists, and every marker
given is registered. A renamed test would otherwise lose its marker
silently."""

from __future__ import annotations

import ast
import configparser
import unittest

from fake_install import REPO
from tiers import MARKS

HERE = REPO / "test" / "tools"


def registered() -> set[str]:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return {line.split(":")[0].strip()
            for line in config["tool:pytest"]["markers"].splitlines() if line.strip()}


def defined(file: str) -> dict[str, set[str]]:
    """Each class of test/tools/`file` -> its methods."""
    tree = ast.parse((HERE / file).read_text())
    return {node.name: {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
            for node in tree.body if isinstance(node, ast.ClassDef)}


class MarkersTest(unittest.TestCase):
    def test_every_marked_file_class_and_test_exists(self) -> None:
        gone = []
        for where in MARKS:
            file, *rest = where.split("::")
            if not (HERE / file).is_file():
                gone.append(where)
                continue
            classes = defined(file)
            if rest and (rest[0] not in classes
                         or len(rest) > 1 and rest[1] not in classes[rest[0]]):
                gone.append(where)
        self.assertEqual(gone, [])

    def test_every_marker_given_is_registered(self) -> None:
        given = {"tools", "needs_torch", "patched_only"}
        given |= {name for names in MARKS.values() for name in names}
        self.assertEqual(given - registered(), set())


if __name__ == "__main__":
    unittest.main()
