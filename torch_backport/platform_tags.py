"""Which wheel platform tags a target takes, as pip's --platform does: the
same tag, or an older manylinux or macOS of the same architecture. Needs
nothing installed (an overlay from an install runs where packaging is not)."""

from __future__ import annotations

import re
from typing import Optional, Tuple


def platform_accepts(wanted: str, have: str) -> bool:
    """Whether a wheel tagged `have` installs where pip's --platform is
    `wanted`: the same tag, or an older manylinux or macOS of the same
    architecture (pip takes those too)."""
    def parts(tag: str) -> Optional[Tuple[str, Tuple[int, int], str]]:
        legacy = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
        for name, floor in legacy.items():
            if tag.startswith(name + "_"):
                return "manylinux", floor, tag[len(name) + 1:]
        found = re.fullmatch(r"(manylinux|macosx)_(\d+)_(\d+)_(.+)", tag)
        return (found[1], (int(found[2]), int(found[3])), found[4]) if found else None

    if wanted == have:
        return True
    mine, theirs = parts(wanted), parts(have)
    return (mine is not None and theirs is not None and mine[0] == theirs[0]
            and mine[2] == theirs[2] and theirs[1] <= mine[1])
