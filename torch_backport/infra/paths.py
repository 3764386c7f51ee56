"""Where the package and its clone are, and how a path is shown in a message."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
# A clone keeps patches/ beside the package; the installed package carries
# them inside (pyproject.toml maps patches/ to torch_backport/patches).
REPO = PACKAGE if (PACKAGE / "patches").is_dir() else PACKAGE.parent


def shown(path: Path) -> str:
    """A path as the user should read it: relative to the repository if inside."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)
