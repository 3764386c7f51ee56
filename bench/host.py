"""The machine a benchmark ran on, as bench.py and warm_start.py record it
(the "machine" key of DIR/results.json). Standard library only, and imported
by neither the timed workers nor the child of warm_start.py."""

from __future__ import annotations

import os
import platform
import time
from typing import Any


def machine() -> dict[str, Any]:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
