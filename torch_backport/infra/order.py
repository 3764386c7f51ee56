"""The order the command hands to the engine: what to do, parsed and checked,
in this process or as JSON to the target interpreter (through _launch.py,
which loads this same package)."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple


class Task(enum.Enum):
    """What the engine carries out."""
    INSTALL = "install"  # apply, revert or status on the target interpreter's torch
    CHECKOUT = "checkout"  # apply, revert or status on a PyTorch checkout
    OVERLAY = "overlay"  # write an overlay of a release's patched files
    BUILD_WHEEL = "build-wheel"  # write a patched wheel (or a fleet of them, and an index)
    VERIFY = "verify"  # compare compiled results with eager in the target interpreter
    READ_INSTALL_FILES = "read-install-files"  # another interpreter reads this one's torch


@dataclasses.dataclass(frozen=True)
class Order:
    task: Task
    # How the user ran the command: the prefix of its messages and advice.
    invoked_as: str = "scripts/apply.sh"
    command: str = "apply"  # INSTALL, CHECKOUT: apply | revert | status
    topics: Tuple[str, ...] = ()
    check: bool = False
    expect: Optional[str] = None  # INSTALL status: "patched"
    json: bool = False  # INSTALL status: one JSON object instead of lines
    checkout: Optional[str] = None
    commit: bool = True
    base: Optional[str] = None  # OVERLAY: v2.11.0
    from_install: bool = False  # OVERLAY: the release's files from this interpreter's torch
    source: Optional[str] = None  # BUILD_WHEEL: a wheel file or torch==X
    out: Optional[str] = None
    cache: Optional[str] = None
    lock: Optional[str] = None
    platforms: Tuple[str, ...] = ()
    pythons: Tuple[str, ...] = ()
    all_platforms: bool = False
    model: Optional[str] = None  # VERIFY: MODULE:FACTORY
    paths: Tuple[str, ...] = ()  # READ_INSTALL_FILES

    def written(self) -> Tuple[Path, Path]:
        """OVERLAY, BUILD_WHEEL: the output directory and the download cache."""
        assert self.out is not None and self.cache is not None
        return Path(self.out), Path(self.cache)

    def to_json(self) -> str:
        fields: Dict[str, Any] = dataclasses.asdict(self)
        fields["task"] = self.task.value
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> "Order":
        fields: Dict[str, Any] = json.loads(text)
        fields["task"] = Task(fields["task"])
        for name in ("topics", "platforms", "pythons", "paths"):
            fields[name] = tuple(fields[name])
        return cls(**fields)
