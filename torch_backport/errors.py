"""The error every module raises for a problem the user must fix, and how a
path is shown in its message. The lowest module: it imports nothing of the
package."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# A clone keeps patches/ beside the package; the installed package carries
# them inside (setup.cfg maps patches/ to torch_backport/patches).
REPO = PACKAGE if (PACKAGE / "patches").is_dir() else PACKAGE.parent


class Refused(Exception):
    """A problem the user must fix; the message says what and where."""


def shown(path: Path) -> str:
    """A path as the user should read it: relative to the repository if inside."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


class UsageError(Exception):
    """Arguments the grammar does not allow; exit 2."""


class Failed(Exception):
    """A precondition the arguments name does not hold (no such checkout,
    no such interpreter); exit 1."""
