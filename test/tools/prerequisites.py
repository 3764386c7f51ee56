"""What a test needs beyond `pip install -e '.[test]'`: a real torch venv
(PREGRAD_STOCK_PYTHON, PREGRAD_UPSTREAM_PYTHON, the patched interpreter the
tool job runs on), a server, uv, root.

Where it is missing, the test skips and its reason says what it needs
(docs/testing.md, "Running the tests"). The matrix sets every one of them up,
and there a skip would hide a broken setup: test/harness/matrix_scheduler.py
starts every job with PREGRAD_REQUIRE_ALL=1, which makes the same absence an
error.
"""

from __future__ import annotations

import os
import unittest
from typing import NoReturn

REQUIRE_ALL = "PREGRAD_REQUIRE_ALL"


def required() -> bool:
    """Whether this run must have every prerequisite (the matrix's jobs)."""
    return os.environ.get(REQUIRE_ALL) == "1"


def missing(what: str) -> NoReturn:
    """A prerequisite is missing: skip, saying `what`; an error where the
    run must have it (PREGRAD_REQUIRE_ALL=1)."""
    if required():
        raise RuntimeError(f"{what} ({REQUIRE_ALL}=1: this run must have it)")
    raise unittest.SkipTest(what)
