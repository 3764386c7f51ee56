"""The two JSON records an install may carry, typed: this project's
manifest in its state directory, and BUILT_NAME in the dist-info of a torch
installed from a patched wheel. Read and written in the same JSON as every
earlier version, so an install patched before stays readable."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Optional

# In the dist-info of a torch installed from a wheel that patched_wheel.py
# built: what it was built from and which topics' series it carries.
BUILT_NAME = "PREGRAD_BACKPORT.json"
UNREADABLE = "unreadable manifest"


def _strings(value: Any) -> Dict[str, str]:
    return ({str(key): str(item) for key, item in value.items()}
            if isinstance(value, dict) else {})


@dataclasses.dataclass(frozen=True)
class Manifest:
    """<state dir>/manifest.json: what an apply wrote, for --status and --revert."""
    state: str  # applying | applied | reverting | UNREADABLE
    torch: Optional[str] = None
    base: Optional[str] = None
    series: Dict[str, str] = dataclasses.field(default_factory=dict)  # patch -> sha256
    pristine: Dict[str, str] = dataclasses.field(default_factory=dict)  # RECORD digests
    patched: Dict[str, str] = dataclasses.field(default_factory=dict)  # digests after
    modes: Dict[str, int] = dataclasses.field(default_factory=dict)  # each file's mode

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), indent=2).encode()

    def with_state(self, state: str) -> "Manifest":
        return dataclasses.replace(self, state=state)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return cls(UNREADABLE)
        modes = data.get("modes")
        return cls(str(data.get("state")),
                   data.get("torch") if isinstance(data.get("torch"), str) else None,
                   data.get("base") if isinstance(data.get("base"), str) else None,
                   _strings(data.get("series")), _strings(data.get("pristine")),
                   _strings(data.get("patched")),
                   {str(rel): int(mode) for rel, mode in modes.items()
                    if isinstance(mode, int)} if isinstance(modes, dict) else {})


@dataclasses.dataclass(frozen=True)
class BuiltTopic:
    """What a patched wheel carries of one topic."""
    base: str
    series: Dict[str, str]  # patch file name -> sha256 hex
    files: Dict[str, str]  # path -> sha256 hex of the patched file


@dataclasses.dataclass(frozen=True)
class Built:
    """BUILT_NAME: the wheel a patched wheel was built from, and its topics."""
    built_by: str
    source: Dict[str, str]  # the source wheel: its name, sha256 and version
    topics: Dict[str, BuiltTopic]

    def to_json(self) -> str:
        return json.dumps({"built-by": self.built_by, "from": self.source,
                           "topics": {name: dataclasses.asdict(topic)
                                      for name, topic in self.topics.items()}},
                          indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Built":
        """Raises ValueError for text that is not BUILT_NAME's JSON."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        topics = data.get("topics")
        return cls(str(data.get("built-by", "torch-pregrad-backport")),
                   _strings(data.get("from")),
                   {str(name): BuiltTopic(str(entry.get("base", "")),
                                          _strings(entry.get("series")),
                                          _strings(entry.get("files")))
                    for name, entry in (topics.items() if isinstance(topics, dict) else ())
                    if isinstance(entry, dict)})
