"""The tool suite's prerequisites as fixtures, and its tiers as markers
(setup.cfg registers them; docs/testing.md, "Running the tests").

Fixtures: `stock_python` and `upstream_python` (the python of a venv with
torch 2.11.0 or 2.12.0 as released: PREGRAD_STOCK_PYTHON,
PREGRAD_UPSTREAM_PYTHON) and `patched_python` (this interpreter, when its
torch is a patched one: the tool job runs on the patched 2.11.0 venv). Each
skips, saying what it needs, where that is missing; in the matrix
(PREGRAD_REQUIRE_ALL=1, prerequisites.py) the absence is an error. A
unittest class takes them with @pytest.mark.usefixtures.

Markers: every test of this directory is `tools`, and tiers.py's MARKS
gives the others (needs_torch, root, network, slow, own_job) by file, class
or test.
"""

from __future__ import annotations

import subprocess
import sys
import unittest
from collections.abc import Callable
from pathlib import Path

import pytest

from fake_install import source_python, STOCK, UPSTREAM
from prerequisites import missing
from tiers import MARKS

HERE = Path(__file__).resolve().parent


def pytest_itemcollected(item: pytest.Item) -> None:
    # Before any selection (-m) looks at the item.
    if item.path.parent != HERE:
        return
    item.add_marker("tools")
    parts = item.nodeid.split("::")
    parts[0] = item.path.name
    for depth in range(1, len(parts) + 1):
        for name in MARKS.get("::".join(parts[:depth]), ()):
            item.add_marker(name)


def prerequisite(find: Callable[[], str]) -> str:
    """What `find` finds; its skip (prerequisites.missing) as pytest's own,
    which names the test rather than pytest's unittest support."""
    try:
        return find()
    except unittest.SkipTest as skip:
        pytest.skip(str(skip))


@pytest.fixture(scope="session")
def stock_python() -> str:
    """The python of a venv with torch 2.11.0 as released."""
    return prerequisite(lambda: source_python(STOCK))


@pytest.fixture(scope="session")
def upstream_python() -> str:
    """The python of a venv with torch 2.12.0 as released."""
    return prerequisite(lambda: source_python(UPSTREAM))


def patched_torch() -> str:
    probe = subprocess.run([sys.executable, "-c", "import torch._inductor.config as c; "
                            "print(hasattr(c, 'pre_grad_pass_timing'))"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        missing("needs a patched torch: this python's torch has no pre_grad_pass_timing "
                "(the tool job runs on scripts/test.sh's patched 2.11.0 venv)")
    return sys.executable


@pytest.fixture(scope="session")
def patched_python() -> str:
    """This interpreter, whose torch has the backported option (the tool
    job's patched 2.11.0); importing torch costs 10 to 15 s."""
    return prerequisite(patched_torch)
