"""The code's shape, as docs/architecture.md draws it: imports run one way,
modules and functions stay small, and each outside thing (RECORD digests,
`pip download`, git) is started from one file only. Read from the source
with `ast`; nothing is run."""

from __future__ import annotations

import ast
import re
import unittest
from pathlib import Path
from typing import Dict, Iterator, List, Set

from fake_install import REPO

PACKAGE = REPO / "torch_backport"
# docs/architecture.md's tiers, lowest first: a module imports from its own
# tier (without a cycle) or from a lower one, never from a higher one.
TIERS = [
    ("outside things and primitives",
     {"__init__", "errors", "fsio", "ranged", "git", "record", "tables", "wheels",
      "pip_config", "transport", "simple_index"}),
    ("the series model", {"patchfile", "series", "apply", "identify", "releases"}),
    ("reading a target", {"install", "install_state", "wheel_status", "history",
                          "checkout_base", "pristine"}),
    ("the driver", {"driver"}),
    ("the modes", {"wheel_mode", "transaction", "checkout_mode", "overlay",
                   "patched_wheel", "index", "fleet", "verify", "verify_cells",
                   "verify_model"}),
    ("the command", {"engine", "help_text", "cli", "_launch"}),
]
MAX_MODULE_LINES = 550
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS_ALLOWED = 2
MAX_BASH_LINES = 400
# Where Python and bash that the project runs live (tests aside).
RUN_TREES = ("torch_backport", "maint", "scripts", "test/harness")


def modules() -> Dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.glob("*.py"))}


def package_imports(tree: ast.Module) -> Set[str]:
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch_backport":
            found |= {alias.name for alias in node.names if alias.name != "__version__"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch_backport."):
            found.add((node.module or "").split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names
                      if alias.name.startswith("torch_backport.")}
    return found


def python_files() -> Iterator[Path]:
    for tree in RUN_TREES:
        for path in sorted((REPO / tree).rglob("*")):
            if path.is_file() and (path.suffix == ".py"
                                   or path.read_bytes()[:40].startswith(b"#!/usr/bin/env python")):
                yield path


def string_lists(tree: ast.AST) -> Iterator[List[str]]:
    """The string elements of every list literal, in order (a command line:
    [sys.executable, "-m", "pip", "download", ...] gives "-m", "pip", ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List):
            yield [element.value for element in node.elts
                   if isinstance(element, ast.Constant) and isinstance(element.value, str)]


def runs(words: List[str], command: List[str]) -> bool:
    return any(words[at:at + len(command)] == command for at in range(len(words)))


class ShapeTest(unittest.TestCase):
    def test_every_package_module_has_a_tier(self) -> None:
        tiered = set().union(*(members for _, members in TIERS))
        self.assertEqual(sorted(set(modules()) - tiered), [])
        self.assertEqual(sorted(tiered - set(modules())), [])

    def test_imports_run_one_way(self) -> None:
        tier_of = {name: number for number, (_, members) in enumerate(TIERS)
                   for name in members}
        graph = {name: package_imports(tree) - {name} for name, tree in modules().items()}
        upward = [f"{name} ({TIERS[tier_of[name]][0]}) imports {other} "
                  f"({TIERS[tier_of[other]][0]})"
                  for name, imported in graph.items() for other in sorted(imported)
                  if tier_of[other] > tier_of[name]]
        self.assertEqual(upward, [])

        def reaches(start: str, goal: str, seen: Set[str]) -> bool:
            for other in graph[start]:
                if other == goal or (other not in seen
                                     and reaches(other, goal, seen | {other})):
                    return True
            return False

        self.assertEqual([name for name in graph if reaches(name, name, set())], [])

    def test_no_package_module_is_long(self) -> None:
        long = {path.name: length for path in PACKAGE.glob("*.py")
                if (length := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
        self.assertEqual(long, {})

    def test_functions_are_short(self) -> None:
        long = []
        for path in python_files():
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} "
                                    f"({length} lines)")
        self.assertLessEqual(len(long), LONG_FUNCTIONS_ALLOWED, long)

    def test_one_file_computes_record_digests(self) -> None:
        computing = [str(path.relative_to(REPO)) for path in python_files()
                     if "urlsafe_b64encode" in path.read_text()]
        self.assertEqual(computing, ["torch_backport/record.py"])

    def test_one_file_runs_pip_download(self) -> None:
        running = [str(path.relative_to(REPO)) for path in python_files()
                   if any(runs(words, ["pip", "download"])
                          for words in string_lists(ast.parse(path.read_text())))]
        bash = [str(path.relative_to(REPO)) for path in (REPO / "scripts").iterdir()
                if path.read_bytes()[:20].startswith(b"#!/usr/bin/env bash")
                and re.search(r"^(?!\s*(#|echo|printf)).*pip download", path.read_text(),
                              re.MULTILINE)]
        self.assertEqual(running + bash, ["torch_backport/wheels.py"])

    def test_one_file_makes_http_requests(self) -> None:
        # Every request keeps transport.py's rules (credentials by origin,
        # bounded replies, a deadline): nothing else opens a connection.
        requesting = [str(path.relative_to(REPO)) for path in python_files()
                      if re.search(r"^\s*(import urllib3|from urllib3|import http\.client)"
                                   r"|urlopen\(", path.read_text(), re.MULTILINE)]
        self.assertEqual(requesting, ["torch_backport/transport.py"])

    def test_one_file_reads_pips_configuration(self) -> None:
        reading = [str(path.relative_to(REPO)) for path in python_files()
                   if any(runs(words, ["pip", "config", "list"])
                          for words in string_lists(ast.parse(path.read_text())))]
        self.assertEqual(reading, ["torch_backport/pip_config.py"])

    def test_one_package_file_starts_git(self) -> None:
        starting = [path.name for path in sorted(PACKAGE.glob("*.py"))
                    if any(words[:1] == ["git"]
                           for words in string_lists(ast.parse(path.read_text())))]
        self.assertEqual(starting, ["git.py"])

    def test_bash_is_a_few_hundred_lines(self) -> None:
        lines = {path.name: len(path.read_text().splitlines())
                 for path in sorted((REPO / "scripts").iterdir())
                 if path.read_bytes()[:20].startswith(b"#!/usr/bin/env bash")
                 or path.suffix == ".sh"}
        self.assertLessEqual(sum(lines.values()), MAX_BASH_LINES, lines)


if __name__ == "__main__":
    unittest.main()
