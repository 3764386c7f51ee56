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
# docs/architecture.md's folders, lowest first: a module imports from its own
# folder (without a cycle) or from a lower one, never from a higher one. The
# top level (the command) is the highest.
FOLDERS = [
    ("infra", "errors, paths, file writes, git, RECORD, the tables"),
    ("download", "pip's settings, the transport, the simple index, release wheels"),
    ("patchset", "the series model and the driver of a mode's plan"),
    ("installed", "the installed torch"),
    ("checkout", "a PyTorch checkout"),
    ("generated", "overlays, patched wheels, fleets and their index"),
    ("verify", "--verify"),
    ("", "the command"),
]
# Siblings that must not know of each other, though neither is below the other.
APART = [("installed", "checkout"), ("generated", "checkout"), ("verify", "checkout"),
         ("verify", "generated")]
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS_ALLOWED = 2
MAX_BASH_LINES = 400
# Functions that return an int that is not an exit status.
NOT_EXIT_STATUSES = {"readinto", "am_stopped_at"}
# Where Python and bash that the project runs live (tests aside).
RUN_TREES = ("torch_backport", "maint", "scripts", "test/harness")
# Where the project names its own files to a reader: the code that runs, and
# the reference docs (CHANGELOG.md keeps old names on purpose; tests name
# the fixtures they write).
NAMING_TREES = RUN_TREES + ("bench", "docs", "README.md", ".github", "setup.cfg",
                            "pyproject.toml")
# `x.py` or `folder/x.py`, not part of a dotted name or a path of torch's.
FILE_NAME = re.compile(r"(?<![\w.-])(?:[\w-]+/)*([A-Za-z_]\w*\.py)\b")
# `infra.fsio`, torch_backport.verify.cells: a package folder and its module
# (a bare infra.fsio could be a variable's attribute).
_FOLDER = "(" + "|".join(name for name, _ in FOLDERS if name) + r")\.([a-z_]\w*)"
MODULE_NAME = re.compile(r"`" + _FOLDER + r"[.\w]*`|\btorch_backport\." + _FOLDER)
# Files outside the project that its docs and code name: torch's own
# (besides the ones a series touches, read from patches/) and a user's.
OUTSIDE_FILES = {"setup.py", "version.py", "my_models.py", "envs.py", "compiler_interface.py",
                 "notebook_kernel.py"}


def dotted(path: Path) -> str:
    """torch_backport/infra/fsio.py -> infra.fsio; torch_backport/cli.py -> cli."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def modules() -> Dict[str, ast.Module]:
    return {dotted(path): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def folder_of(module: str) -> str:
    return module.split(".")[0] if "." in module or module in dict(FOLDERS) else ""


def package_imports(tree: ast.Module) -> Set[str]:
    """The package's modules that `tree` imports (`from torch_backport.infra
    import fsio` and `from torch_backport.infra.fsio import x` both give
    infra.fsio)."""
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) \
                and (node.module or "").split(".")[0] == "torch_backport":
            base = (node.module or "")[len("torch_backport."):]
            for alias in node.names:
                if alias.name == "__version__":
                    continue
                whole = f"{base}.{alias.name}" if base else alias.name
                found.add(whole if (PACKAGE / (whole.replace(".", "/") + ".py")).is_file()
                          else base)
        elif isinstance(node, ast.Import):
            found |= {alias.name[len("torch_backport."):] for alias in node.names
                      if alias.name.startswith("torch_backport.")}
    return found - {""}


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


def literal_status(value: object) -> bool:
    """`1`, or `1 if x else 0`: a status spelled as a number."""
    if isinstance(value, ast.IfExp):
        return literal_status(value.body) or literal_status(value.orelse)
    return isinstance(value, ast.Constant) and isinstance(value.value, int)


def named_files() -> Iterator[Path]:
    for tree in NAMING_TREES:
        root = REPO / tree
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def known_file_names() -> Set[str]:
    """The names a file the project names may have: its own files', torch's
    files that a series touches or upstream-tests.txt lists, and OUTSIDE_FILES."""
    own = {path.name for path in REPO.rglob("*") if ".git" not in path.parts}
    torch = {Path(line.split()[-1]).name
             for patch in (REPO / "patches").rglob("*.patch")
             for line in patch.read_text(errors="replace").splitlines()
             if line.startswith(("--- a/", "+++ b/"))}
    upstream = {Path(line).name for line in (REPO / "upstream-tests.txt").read_text().split()
                if line.endswith(".py")}
    return own | torch | upstream | OUTSIDE_FILES


def package_modules() -> Set[str]:
    """infra.fsio for torch_backport/infra/fsio.py, and infra.errors.report's
    kind of name stops at the module."""
    return {dotted(path) for path in PACKAGE.rglob("*.py")}


class ShapeTest(unittest.TestCase):
    def test_the_package_is_a_few_folders(self) -> None:
        folders = sorted(path.name for path in PACKAGE.iterdir()
                         if (path / "__init__.py").is_file())
        self.assertEqual(folders, sorted(name for name, _ in FOLDERS if name))
        top = sorted(path.name for path in PACKAGE.glob("*.py"))
        self.assertLessEqual(len(top), MAX_TOP_LEVEL_MODULES, top)

    def test_imports_between_folders_run_one_way(self) -> None:
        rank = {name: number for number, (name, _) in enumerate(FOLDERS)}
        graph = {name: package_imports(tree) - {name} for name, tree in modules().items()}
        upward = [f"{name} imports {other} ({folder_of(other) or 'the command'} is above "
                  f"{folder_of(name) or 'the command'})"
                  for name, imported in graph.items() for other in sorted(imported)
                  if rank[folder_of(other)] > rank[folder_of(name)]]
        self.assertEqual(upward, [])
        apart = [f"{name} imports {other}" for name, imported in graph.items()
                 for other in imported
                 if (folder_of(name), folder_of(other)) in APART
                 or (folder_of(other), folder_of(name)) in APART]
        self.assertEqual(apart, [])

    def test_modules_import_without_a_cycle(self) -> None:
        graph = {name: package_imports(tree) - {name} for name, tree in modules().items()}

        def reaches(start: str, goal: str, seen: Set[str]) -> bool:
            for other in graph.get(start, set()):
                if other == goal or (other not in seen
                                     and reaches(other, goal, seen | {other})):
                    return True
            return False

        self.assertEqual([name for name in graph if reaches(name, name, set())], [])

    def test_no_package_module_is_long(self) -> None:
        long = {dotted(path): length for path in PACKAGE.rglob("*.py")
                if (length := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
        self.assertEqual(long, {})

    def test_every_error_derives_from_the_one_root(self) -> None:
        # infra/errors.BackportError carries the exit code; errors.report says it.
        direct = [f"{dotted(path)}.{node.name}" for path in sorted(PACKAGE.rglob("*.py"))
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.ClassDef)
                  and any(isinstance(base, ast.Name) and base.id in ("Exception",
                                                                     "BaseException")
                          for base in node.bases)]
        self.assertEqual(direct, ["infra.errors.BackportError"])

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
        self.assertEqual(computing, ["torch_backport/infra/record.py"])

    def test_one_file_runs_pip_download(self) -> None:
        running = [str(path.relative_to(REPO)) for path in python_files()
                   if any(runs(words, ["pip", "download"])
                          for words in string_lists(ast.parse(path.read_text())))]
        bash = [str(path.relative_to(REPO)) for path in (REPO / "scripts").iterdir()
                if path.read_bytes()[:20].startswith(b"#!/usr/bin/env bash")
                and re.search(r"^(?!\s*(#|echo|printf)).*pip download", path.read_text(),
                              re.MULTILINE)]
        self.assertEqual(running + bash, ["torch_backport/download/release_wheels.py"])

    def test_one_file_makes_http_requests(self) -> None:
        # Every request keeps transport.py's rules (credentials by origin,
        # bounded replies, a deadline): nothing else opens a connection.
        requesting = [str(path.relative_to(REPO)) for path in python_files()
                      if re.search(r"^\s*(import urllib3|from urllib3|import http\.client)"
                                   r"|urlopen\(", path.read_text(), re.MULTILINE)]
        self.assertEqual(requesting, ["torch_backport/download/transport.py"])

    def test_one_file_reads_pips_configuration(self) -> None:
        reading = [str(path.relative_to(REPO)) for path in python_files()
                   if any(runs(words, ["pip", "config", "list"])
                          for words in string_lists(ast.parse(path.read_text())))]
        self.assertEqual(reading, ["torch_backport/download/pip_config.py"])

    def test_one_package_file_starts_git(self) -> None:
        starting = [dotted(path) for path in sorted(PACKAGE.rglob("*.py"))
                    if any(words[:1] == ["git"]
                           for words in string_lists(ast.parse(path.read_text())))]
        self.assertEqual(starting, ["infra.git"])

    def test_files_and_modules_are_named_as_they_are_now(self) -> None:
        # A rename leaves comments and docs naming the old file; a reader
        # then looks for what is not there.
        files, modules_now = known_file_names(), package_modules()
        stale = []
        for path in named_files():
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                where = f"{path.relative_to(REPO)}:{number}"
                stale += [f"{where}: {match.group(1)}" for match in FILE_NAME.finditer(line)
                          if match.group(1) not in files]
                for match in MODULE_NAME.finditer(line):
                    folder = match.group(1) or match.group(3)
                    module = match.group(2) or match.group(4)
                    if f"{folder}.{module}" not in modules_now:
                        stale.append(f"{where}: {folder}.{module}")
        self.assertEqual(stale, [])

    def test_exit_statuses_are_named_in_one_module(self) -> None:
        # infra/exit_codes.py: a literal status elsewhere drifts from the
        # help texts that list them from there.
        literal = []
        for tree in ("torch_backport", "maint"):
            for path in sorted((REPO / tree).rglob("*.py")):
                for node in ast.walk(ast.parse(path.read_text())):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                            and isinstance(node.returns, ast.Name) and node.returns.id == "int" \
                            and node.name not in NOT_EXIT_STATUSES:
                        literal += [f"{path.relative_to(REPO)}:{inner.lineno} return"
                                    for inner in ast.walk(node) if isinstance(inner, ast.Return)
                                    and literal_status(inner.value)]
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                            and node.func.attr in ("exit", "_exit") and node.args \
                            and isinstance(node.args[0], ast.Constant):
                        literal.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.attr}")
        self.assertEqual(literal, [])

    def test_bash_is_a_few_hundred_lines(self) -> None:
        lines = {path.name: len(path.read_text().splitlines())
                 for path in sorted((REPO / "scripts").iterdir())
                 if path.read_bytes()[:20].startswith(b"#!/usr/bin/env bash")
                 or path.suffix == ".sh"}
        self.assertLessEqual(sum(lines.values()), MAX_BASH_LINES, lines)


if __name__ == "__main__":
    unittest.main()
